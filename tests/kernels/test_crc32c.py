import os
import random

import pytest

from kraftcore import codec

pytestmark = pytest.mark.smoke

# kafka-facts §11.1
VECTORS = [
    (b"123456789", 0xE3069283),
    (b"Some String", 0x2445290F),
    (b"\x00\x00\x00\x00", 0x48674BC7),
    (b"", 0x00000000),
]


@pytest.mark.parametrize("data,expected", VECTORS)
def test_check_values(impl, data, expected):
    assert impl.crc32c.crc32c(data) == expected


def test_chaining_continues_a_previous_crc(impl):
    data = bytes(range(256)) * 5
    for cut in (0, 1, 7, 300, len(data)):
        assert impl.crc32c.crc32c(data[cut:], impl.crc32c.crc32c(data[:cut])) == impl.crc32c.crc32c(data)


def test_accepts_any_contiguous_buffer(impl):
    data = b"123456789"
    assert impl.crc32c.crc32c(bytearray(data)) == 0xE3069283
    assert impl.crc32c.crc32c(memoryview(data)) == 0xE3069283
    assert impl.crc32c.crc32c(memoryview(b"xx" + data)[2:]) == 0xE3069283


@pytest.mark.parametrize("crc", [-1, 1 << 32])
def test_rejects_a_crc_outside_32_bits(impl, crc):
    with pytest.raises(ValueError, match="32-bit"):
        impl.crc32c.crc32c(b"x", crc)


def test_rejects_non_buffers(impl):
    with pytest.raises(TypeError):
        impl.crc32c.crc32c("text")


# Lengths around the interleaved block boundaries (3 x 256 and 3 x 8192 bytes), the folding
# with carry-less multiplies (from 256 bytes, steps of 128) and its blocks with interleaved
# crc32 streams (15872 bytes), at several alignments, so every path and merge is exercised.
SIZES = [0, 1, 7, 8, 9, 255, 256, 257, 383, 384, 767, 768, 769, 1024, 2303, 2305, 15871, 15872,
         15873, 16127, 16128, 24575, 24576, 24577, 31744, 49153, 65536, 70001, 1 << 20]


@pytest.mark.skipif("c" not in codec.implementations(), reason="native extension not built")
def test_native_paths_agree_with_the_reference():
    native = codec.implementations()["c"].crc32c
    reference = codec.implementations()["py"].crc32c

    rng = random.Random(1)
    for size in SIZES:
        buf = rng.randbytes(size + 8)
        for offset in (0, 1, 3, 5):
            view = memoryview(buf)[offset : offset + size]
            fast = native.crc32c(view)
            assert fast == native._crc32c_portable(view), (size, offset)
            previous = rng.getrandbits(32)  # a running CRC goes into the first bytes
            assert native.crc32c(view, previous) == native._crc32c_portable(view, previous)
            if size <= 4096:
                assert fast == reference.crc32c(view), (size, offset)


@pytest.mark.skipif("c" not in codec.implementations(), reason="native extension not built")
def test_hardware_is_used_where_the_cpu_has_it():
    native = codec.implementations()["c"].crc32c

    machine = os.uname().machine if hasattr(os, "uname") else ""
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if machine == "x86_64" and " sse4_2" in flags:
        folding = all(f" {flag}" in flags for flag in ("avx2", "pclmulqdq", "vpclmulqdq"))
        assert native.HARDWARE == ("sse4.2+vpclmulqdq" if folding else "sse4.2")
    elif machine == "aarch64" and " crc32" in flags:
        assert native.HARDWARE == "armv8-crc"
    else:
        assert native.HARDWARE in ("sse4.2+vpclmulqdq", "sse4.2", "armv8-crc", "none")
