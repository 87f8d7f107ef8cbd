"""The native record check's fast paths (`_records_well_formed` in ext/records.pyx): a loop
that reads varints without per-byte end checks while a record ends at least 16 bytes before
the batch, and a "same shape as the last record" path that compares a record's first 16
bytes with the last record's and reads only its offset delta and headers count byte.

Uniform batches (every record of one shape: the case the shape path exists for), damaged
under a resealed CRC, must be judged exactly as the fully checked record walk judges them
(`decode_batches` builds records through it), and as the pure implementation does; and no
check may read a byte past the caller's buffer, which the guard-page tests would turn into
a crash."""

import ctypes
import mmap
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, UnsupportedCompressionError
from tests.conftest import IMPLEMENTATIONS
from tests.kernels.records_util import reseal, with_records

TS = 1_700_000_000_000
NATIVE = IMPLEMENTATIONS.get("c")
PY = IMPLEMENTATIONS["py"]  # the reference kernels build the inputs
needs_native = pytest.mark.skipif(NATIVE is None, reason="the native kernels did not load")


def _verdict(fn, raw):
    try:
        fn(raw)
    except (CorruptRecordError, UnsupportedCompressionError) as exc:
        return type(exc).__name__, str(exc), exc.position
    return "ok"


def _scan_verdict(segment, raw):
    try:
        segment.scan_batches(raw, 0)
    except (CorruptRecordError, UnsupportedCompressionError) as exc:
        return type(exc).__name__, str(exc), exc.position
    return "ok"


def _judge(raw):
    """Native validate, native decode (the checked walk) and native scan must agree to the
    message; every implementation must reach the same verdict."""
    kinds = set()
    for name, kernels in IMPLEMENTATIONS.items():
        validated = _verdict(kernels.records.validate_batches, raw)
        assert validated == _verdict(kernels.records.decode_batches, raw), name
        scanned = _scan_verdict(kernels.segment, raw)
        assert (scanned == "ok") == (validated == "ok"), (name, scanned, validated)
        kinds.add(validated if validated == "ok" else validated[0])
    assert len(kinds) == 1, kinds
    return kinds.pop()


def _uniform(count, value_bytes=100, key_bytes=None, same_ts=True):
    return bytearray(PY.records.encode_batch(
        [bytes([i % 251]) * value_bytes for i in range(count)],
        keys=None if key_bytes is None else [b"k" * key_bytes] * count,
        timestamps=[TS] * count if same_ts else [TS + i for i in range(count)]))


def _record_starts(raw, count):
    decode_varint = PY.varint.decode_varint
    starts, p = [], 61
    for _ in range(count):
        starts.append(p)
        length, p = decode_varint(raw, p)
        p += length
    return starts


def test_uniform_batches_are_accepted():
    for count, value_bytes in [(1, 0), (2, 100), (64, 100), (65, 100), (300, 7), (1000, 100)]:
        assert _judge(bytes(_uniform(count, value_bytes))) == "ok"
        assert _judge(bytes(_uniform(count, value_bytes, key_bytes=3))) == "ok"
        assert _judge(bytes(_uniform(count, value_bytes, same_ts=False))) == "ok"


@pytest.mark.parametrize("shape", [dict(), dict(key_bytes=2), dict(value_bytes=5)])
def test_every_byte_replacement_near_shape_changes_is_judged_alike(shape):
    """Bytes of the first records (where the shape is learnt), of the records around the
    offset delta's growth from one to two bytes (63 -> 64) and of the last records (where
    the checked loop takes over), replaced by varint-breaking values under a valid CRC."""
    count = 70
    raw = _uniform(count, **shape)
    starts = _record_starts(raw, count) + [len(raw)]
    positions = set()
    for r in (0, 1, 2, 62, 63, 64, 65, count - 3, count - 2, count - 1):
        positions.update(range(starts[r], min(starts[r] + 14, starts[r + 1])))
        positions.update(range(max(starts[r + 1] - 3, starts[r]), starts[r + 1]))
    for pos in sorted(positions):
        original = raw[pos]
        for value in {0x00, 0x01, 0x02, 0x7F, 0x80, 0x81, 0xFF, original ^ 0x01, original ^ 0x80}:
            raw[pos] = value
            _judge(reseal(raw))
        raw[pos] = original


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_uniform_batches_are_judged_alike(data):
    count = data.draw(st.integers(1, 150))
    raw = _uniform(count, data.draw(st.integers(0, 40)),
                   data.draw(st.one_of(st.none(), st.integers(0, 8))), data.draw(st.booleans()))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(61, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        struct.pack_into(">i", raw, 57, data.draw(st.integers(0, count + 2)))  # records count
    if data.draw(st.booleans()):
        struct.pack_into(">i", raw, 23, data.draw(st.integers(0, count + 2)))  # last delta
    _judge(reseal(raw))


def _zz(v):
    return PY.varint.encode_varint(v)


def _batch(bodies, last_offset_delta=None):
    template = codec.encode_batch([b"v"])
    records = b"".join(_zz(len(b)) + b for b in bodies)
    return with_records(template, records, count=len(bodies),
                        last_offset_delta=len(bodies) - 1 if last_offset_delta is None
                        else last_offset_delta)


def _body(off, value=b"v" * 20, hcount=b"\x00", off_bytes=None):
    return (b"\x00" + b"\x00" + (off_bytes if off_bytes is not None else _zz(off)) + b"\x01"
            + _zz(len(value)) + value + hcount)


def test_non_minimal_varints_in_a_uniform_batch():
    # a two-byte headers count (0x80 0x00) is valid; a record whose byte before its last
    # is then something else must not be taken for the same shape
    good = [_body(i, hcount=b"\x80\x00") for i in range(40)]
    assert _judge(_batch(good)) == "ok"
    bad = list(good)
    bad[20] = _body(20, hcount=b"\x02\x00")  # one header, key length 0, value missing
    assert _judge(_batch(bad)) == "CorruptRecordError"
    # a two-byte offset delta for a small value (0x85 0x00 = zigzag 5) is valid
    good = [_body(i, off_bytes=bytes([(2 * i) | 0x80, 0x00])) for i in range(40)]
    assert _judge(_batch(good)) == "ok"
    assert _judge(_batch(good, last_offset_delta=38)) == "CorruptRecordError"
    repeated = list(good)
    repeated[30] = good[29]
    assert _judge(_batch(repeated)) == "CorruptRecordError"


def test_headers_break_the_shape():
    bodies = [_body(i) for i in range(40)]
    bodies[10] = _body(10, value=b"v" * 16, hcount=b"\x02" + _zz(1) + b"h" + _zz(1) + b"x")
    assert _judge(_batch(bodies)) == "ok"
    bodies[10] = _body(10, value=b"v" * 16, hcount=b"\x02" + _zz(1) + b"\xc3" + _zz(1) + b"x")
    assert _judge(_batch(bodies)) == "CorruptRecordError"  # header key is not UTF-8


def _guarded(size):
    """A writable buffer of `size` bytes whose next byte is on a page no one may read."""
    page = mmap.PAGESIZE
    pages = (size + page - 1) // page + 1
    mm = mmap.mmap(-1, pages * page)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    if libc.mprotect(base + (pages - 1) * page, page, 0) != 0:
        pytest.skip("mprotect is unavailable")
    start = (pages - 1) * page - size
    return mm, memoryview(mm)[start:start + size]


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_no_check_reads_past_the_buffer(data):
    """Uniform batches, damaged or truncated (the batch length patched to match, so the
    walk runs up to the last byte), placed flush against an unreadable page."""
    count = data.draw(st.integers(1, 80))
    raw = _uniform(count, data.draw(st.integers(0, 30)))
    cut = data.draw(st.integers(62, len(raw)))
    raw = raw[:cut]
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    for _ in range(data.draw(st.integers(0, 3))):
        pos = data.draw(st.integers(61, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    sealed = reseal(raw)
    mm, view = _guarded(len(sealed))
    try:
        view[:] = sealed
        expected = _verdict(NATIVE.records.decode_batches, sealed)
        assert _verdict(NATIVE.records.validate_batches, view) == expected
        assert (_scan_verdict(NATIVE.segment, view) == "ok") == (expected == "ok")
    finally:
        view.release()
        mm.close()
