"""CRC-32C (Castagnoli), the checksum of Kafka's record batch v2 (kafka-facts §2.2).

Reflected polynomial 0x82F63B78, initial register 0xFFFFFFFF, final XOR 0xFFFFFFFF.
`crc32c(data, crc)` continues a previous result, so `crc32c(b, crc32c(a)) == crc32c(a + b)`.
This is the byte-at-a-time table reference; `kraftcore._c.crc32c` is the fast twin.
"""

POLYNOMIAL = 0x82F63B78
HARDWARE = "none"


def _make_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _make_table()


def crc32c(data, crc=0):
    """Return the CRC-32C of `data` (any bytes-like object), continuing from `crc`."""
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError(f"crc must be an unsigned 32-bit value, got {crc}")
    table = _TABLE
    register = crc ^ 0xFFFFFFFF
    for byte in memoryview(data).cast("B"):
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register ^ 0xFFFFFFFF
