"""Kafka's variable-length integers (kafka-facts §1.1).

* unsigned varint / varlong: LEB128, 7 bits a byte, least significant group first. An
  unsigned varint carries a 32-bit pattern (at most 5 bytes), a varlong 64 bits (10 bytes).
* signed varint / varlong: zigzag-mapped onto the unsigned forms.

Decoders take a buffer and a start position and return `(value, next_position)`. Bytes that
cannot be a varint (truncated, a continuation bit on the last allowed byte, bits beyond the
width) raise `CorruptRecordError` with the position of the varint.
"""

from kraftcore.errors import CorruptRecordError

_U32 = 0xFFFFFFFF
_U64 = 0xFFFFFFFFFFFFFFFF


def _encode_unsigned(value):
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_unsigned(buf, pos, bytes_max, kind):
    view = memoryview(buf).cast("B")
    start = pos
    if pos < 0:
        raise ValueError(f"position must be non-negative, got {pos}")
    value = 0
    shift = 0
    end = len(view)
    for i in range(bytes_max):
        if pos >= end:
            raise CorruptRecordError(f"truncated {kind}", start)
        byte = view[pos]
        pos += 1
        if i == bytes_max - 1:
            # The last allowed byte may only carry the bits that are left of the width.
            spare_bits = 32 - 7 * i if bytes_max == 5 else 64 - 7 * i
            if byte >> spare_bits:
                raise CorruptRecordError(f"{kind} longer than {bytes_max} bytes", start)
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise AssertionError("unreachable")


def encode_uvarint(value):
    """Encode a 32-bit pattern (0..2**32-1, or a negative int32) as an unsigned varint."""
    if not -0x80000000 <= value <= _U32:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode_unsigned(value & _U32)


def decode_uvarint(buf, pos=0):
    """Decode an unsigned varint at `pos`; returns (value in 0..2**32-1, next position)."""
    return _decode_unsigned(buf, pos, 5, "unsigned varint")


def encode_uvarlong(value):
    """Encode a 64-bit pattern (0..2**64-1, or a negative int64) as an unsigned varlong."""
    if not -0x8000000000000000 <= value <= _U64:
        raise ValueError(f"unsigned varlong out of range: {value}")
    return _encode_unsigned(value & _U64)


def decode_uvarlong(buf, pos=0):
    """Decode an unsigned varlong at `pos`; returns (value in 0..2**64-1, next position)."""
    return _decode_unsigned(buf, pos, 10, "unsigned varlong")


def encode_varint(value):
    """Encode an int32 as a zigzag varint."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise ValueError(f"varint out of int32 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & _U32)


def decode_varint(buf, pos=0):
    """Decode a zigzag varint at `pos`; returns (int32 value, next position)."""
    raw, pos = _decode_unsigned(buf, pos, 5, "varint")
    return (raw >> 1) ^ -(raw & 1), pos


def encode_varlong(value):
    """Encode an int64 as a zigzag varlong."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of int64 range: {value}")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & _U64)


def decode_varlong(buf, pos=0):
    """Decode a zigzag varlong at `pos`; returns (int64 value, next position)."""
    raw, pos = _decode_unsigned(buf, pos, 10, "varlong")
    return (raw >> 1) ^ -(raw & 1), pos
