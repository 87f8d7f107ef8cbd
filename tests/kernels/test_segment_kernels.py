"""The segment kernels (scan, locate, index search and checks): Kafka's indexing cadence,
offset assignment and epoch stamping without touching the CRC, corruption handling, and
byte-for-byte agreement of the native and pure-Python implementations."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftcore.errors import CorruptRecordError, InvalidAppendError
from tests.conftest import IMPLEMENTATIONS

pytestmark = pytest.mark.smoke

TS = 1_700_000_000_000


def _batches(records, count, per_batch=5, value_bytes=300, base=0, epoch_every=3, ts=TS):
    out = []
    offset = base
    for i in range(count):
        out.append(records.encode_batch(
            [bytes([i % 251]) * value_bytes for _ in range(per_batch)],
            base_offset=offset, leader_epoch=i // epoch_every, timestamp=ts + i))
        offset += per_batch
    return b"".join(out)


def _walk(data):
    """(position, base offset, last offset, size, max timestamp, epoch) per batch."""
    pos, out = 0, []
    while pos < len(data):
        base, length, epoch = struct.unpack_from(">qii", data, pos)
        delta = struct.unpack_from(">i", data, pos + 23)[0]
        max_ts = struct.unpack_from(">q", data, pos + 35)[0]
        out.append((pos, base, base + delta, 12 + length, max_ts, epoch))
        pos += 12 + length
    return out


def test_scan_indexes_like_kafka(impl):
    data = _batches(impl.records, 40)
    result = impl.segment.scan_batches(data, 0)
    offset_entries, time_entries, since, max_ts, max_ts_offset, last_ts = [], [], 0, -1, -1, -1
    for pos, _, last, size, batch_ts, _ in _walk(data):
        if batch_ts > max_ts:
            max_ts, max_ts_offset = batch_ts, last
        if since > 4096:
            offset_entries.append(struct.pack(">ii", last, pos))
            if max_ts > last_ts:
                time_entries.append(struct.pack(">qi", max_ts, max_ts_offset))
                last_ts = max_ts
            since = 0
        since += size
    assert result.offset_index == b"".join(offset_entries)
    assert result.time_index == b"".join(time_entries)
    assert result.offset_index  # the cadence did produce entries
    assert (result.valid_bytes, result.batches, result.first_offset, result.next_offset) == (
        len(data), 40, 0, 200)
    assert result.epochs == [(e, e * 15) for e in range(14)]
    assert result.error is None


def test_the_first_batch_of_a_segment_is_never_indexed(impl):
    first = impl.records.encode_batch([b"x" * 100], base_offset=0)
    second = impl.records.encode_batch([b"y" * 100], base_offset=1)
    result = impl.segment.scan_batches(first + second, 0, index_interval_bytes=0)
    assert result.offset_index == struct.pack(">ii", 1, len(first))


def test_reference_index_entry_bytes():
    assert struct.pack(">ii", 5, 4096) == bytes.fromhex("0000000500001000")
    assert struct.pack(">qi", 1700000000000, 5) == bytes.fromhex("0000018bcfe5680000000005")


def test_assigning_offsets_and_epochs_keeps_the_crc_valid(impl):
    data = bytearray(_batches(impl.records, 6, base=0))
    result = impl.segment.scan_batches(
        data, 1000, assign_offset=1000, stamp_epoch=9, index_per_batch=False)
    batches = impl.records.decode_batches(bytes(data))  # verifies every CRC
    assert [b.base_offset for b in batches] == [1000 + 5 * i for i in range(6)]
    assert {b.partition_leader_epoch for b in batches} == {9}
    assert result.epochs == [(9, 1000)] and result.next_offset == 1030


def test_assigning_needs_a_writable_buffer(impl):
    with pytest.raises(TypeError, match="writable"):
        impl.segment.scan_batches(_batches(impl.records, 1), 0, assign_offset=0)


def test_a_set_is_indexed_once_at_its_start(impl):
    data = _batches(impl.records, 30)
    result = impl.segment.scan_batches(
        data, 0, position_base=7000, bytes_since_index=5000, index_per_batch=False)
    assert result.offset_index == struct.pack(">ii", 149, 7000)
    assert result.bytes_since_index == len(data)


def test_contiguity_is_enforced_for_follower_appends(impl):
    data = _batches(impl.records, 3, base=10)
    assert impl.segment.scan_batches(data, 0, expected_offset=10).next_offset == 25
    with pytest.raises(InvalidAppendError, match="contiguous"):
        impl.segment.scan_batches(data, 0, expected_offset=11)
    gap = _batches(impl.records, 1, base=10) + _batches(impl.records, 1, base=16)
    with pytest.raises(InvalidAppendError, match="contiguous"):
        impl.segment.scan_batches(gap, 0, expected_offset=10)


def test_offsets_must_increase_and_fit_the_segment(impl):
    twice = _batches(impl.records, 1, base=10) * 2
    with pytest.raises(CorruptRecordError, match="must increase"):
        impl.segment.scan_batches(twice, 0)
    far = _batches(impl.records, 1, base=2**31)
    with pytest.raises(CorruptRecordError, match="does not fit"):
        impl.segment.scan_batches(far, 0)
    with pytest.raises(CorruptRecordError, match="below"):
        impl.segment.scan_batches(_batches(impl.records, 1, base=5), 100)


def test_strict_epochs_refuse_going_backwards(impl):
    data = impl.records.encode_batch([b"a"], leader_epoch=2)
    with pytest.raises(InvalidAppendError, match="below the log's latest epoch 3"):
        impl.segment.scan_batches(data, 0, latest_epoch=3, strict_epochs=True)
    assert impl.segment.scan_batches(data, 0, latest_epoch=3).epochs == []


def test_batches_above_the_limit_are_refused(impl):
    data = impl.records.encode_batch([b"x" * 1000])
    with pytest.raises(InvalidAppendError, match="above the limit of 500"):
        impl.segment.scan_batches(data, 0, batch_bytes_max=500)


@pytest.mark.parametrize("cut_from_end", [1, 30, 61, 200])
def test_a_torn_tail_stops_the_scan_at_the_last_whole_batch(impl, cut_from_end):
    data = _batches(impl.records, 5)
    walk = _walk(data)
    result = impl.segment.scan_batches(data[:-cut_from_end], 0, stop_on_error=True)
    assert result.valid_bytes == walk[-1][0]
    assert result.batches == 4 and result.next_offset == walk[-2][2] + 1
    assert isinstance(result.error, CorruptRecordError)
    with pytest.raises(CorruptRecordError):
        impl.segment.scan_batches(data[:-cut_from_end], 0)


def test_a_bit_flip_stops_the_scan_at_the_damaged_batch(impl):
    data = bytearray(_batches(impl.records, 5))
    walk = _walk(data)
    data[walk[2][0] + 100] ^= 0x10
    result = impl.segment.scan_batches(data, 0, stop_on_error=True)
    assert result.valid_bytes == walk[2][0] and "CRC" in str(result.error)


def test_locate_finds_whole_batches_for_reads(impl):
    data = _batches(impl.records, 10)
    walk = _walk(data)
    size = walk[0][3]
    locate = impl.segment.locate_batches
    assert locate(data, 7, 1 << 62, 2 * size) == (walk[1][0], walk[3][0], -1, 0)
    # the first batch is taken even above bytes_max
    assert locate(data, 0, 1 << 62, 1) == (0, size, -1, 0)
    # bounded by an end offset (the high watermark): only batches ending below it
    assert locate(data, 0, 12, 1 << 40) == (0, walk[2][0], -1, 0)
    assert locate(data, 0, 3, 1 << 40) == (0, 0, -1, 0)
    # the buffer ends inside a batch: its position and full size are reported
    assert locate(data[: size + 20], 0, 1 << 62, 1 << 40) == (0, size, size, size)
    assert locate(data[: size + 5], 0, 1 << 62, 1 << 40) == (0, size, size, 0)
    assert locate(data[:20], 100, 1 << 62, 1 << 40) == (-1, -1, 0, size)
    assert locate(b"", 0, 10, 10) == (-1, -1, -1, 0)


def test_locate_rejects_impossible_sizes(impl):
    bad = bytearray(_batches(impl.records, 1))
    struct.pack_into(">i", bad, 8, 13)
    with pytest.raises(CorruptRecordError, match="minimum 14"):
        impl.segment.locate_batches(bad, 0, 1 << 62, 1 << 40)


def test_index_search(impl):
    index = b"".join(struct.pack(">ii", rel, rel * 100) for rel in (5, 10, 20))
    search = impl.segment.index_search
    assert [search(index, 8, 0, 4, t) for t in (0, 5, 9, 10, 19, 20, 99)] == [-1, 0, 0, 1, 1, 2, 2]
    times = b"".join(struct.pack(">qi", ts, rel) for ts, rel in ((100, 1), (200, 3)))
    assert [search(times, 12, 0, 8, t) for t in (99, 100, 150, 250)] == [-1, 0, 0, 1]
    assert search(times, 12, 8, 4, 2) == 0
    assert search(b"", 8, 0, 4, 10) == -1
    with pytest.raises(ValueError):
        search(index, 8, 6, 4, 0)


def test_index_checks(impl):
    good = struct.pack(">iiii", 5, 100, 9, 200)
    assert impl.segment.check_offset_index(good, 300, 100) is None
    assert "multiple" in impl.segment.check_offset_index(good[:-1], 300, 100)
    assert "increase" in impl.segment.check_offset_index(struct.pack(">iiii", 5, 100, 5, 200), 300, 100)
    assert "beyond" in impl.segment.check_offset_index(good, 150, 100)
    assert "beyond" in impl.segment.check_offset_index(good, 300, 8)
    assert "increase" in impl.segment.check_offset_index(bytes(16), 300, 100)
    times = struct.pack(">qiqi", 100, 1, 200, 1)
    assert impl.segment.check_time_index(times, 10) is None
    assert "increase" in impl.segment.check_time_index(struct.pack(">qiqi", 100, 1, 100, 2), 10)
    assert "beyond" in impl.segment.check_time_index(times, 0)
    assert "multiple" in impl.segment.check_time_index(times[:5], 10)


# ------------------------------------------------------------------ both implementations

needs_both = pytest.mark.skipif(len(IMPLEMENTATIONS) < 2, reason="native extension not built")


def _both():
    return IMPLEMENTATIONS["py"].segment, IMPLEMENTATIONS["c"].segment


def _outcome(fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
    except (CorruptRecordError, InvalidAppendError) as exc:
        return type(exc).__name__, getattr(exc, "position", None)
    if hasattr(result, "_replace") and result.error is not None:
        error = result.error
        result = result._replace(error=(type(error).__name__, getattr(error, "position", None)))
    return result


@needs_both
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_implementations_agree_on_damaged_segments(data):
    py, c = _both()
    records = IMPLEMENTATIONS["py"].records

    count = data.draw(st.integers(1, 8))
    raw = bytearray(_batches(records, count, per_batch=data.draw(st.integers(1, 4)),
                             value_bytes=data.draw(st.integers(0, 3000))))
    for _ in range(data.draw(st.integers(0, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    raw = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    kwargs = dict(
        index_interval_bytes=data.draw(st.integers(0, 5000)),
        bytes_since_index=data.draw(st.integers(0, 5000)),
        latest_epoch=data.draw(st.integers(-1, 3)),
        index_per_batch=data.draw(st.booleans()),
        stop_on_error=data.draw(st.booleans()),
        verify_records=data.draw(st.booleans()),
    )
    assert _outcome(py.scan_batches, raw, 0, **kwargs) == _outcome(c.scan_batches, raw, 0, **kwargs)
    target = data.draw(st.integers(0, 40))
    end = data.draw(st.integers(0, 45))
    bytes_max = data.draw(st.integers(0, 20000))
    assert _outcome(py.locate_batches, raw, target, end, bytes_max) == \
        _outcome(c.locate_batches, raw, target, end, bytes_max)


@needs_both
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120), st.integers(-10, 10**6))
def test_implementations_agree_on_arbitrary_index_bytes(raw, bound):
    py, c = _both()
    assert py.check_offset_index(raw, bound, bound) == c.check_offset_index(raw, bound, bound)
    assert py.check_time_index(raw, bound) == c.check_time_index(raw, bound)
    for layout in ((8, 0, 4), (12, 0, 8), (12, 8, 4)):
        assert py.index_search(raw, *layout, bound) == c.index_search(raw, *layout, bound)
    assert _outcome(py.scan_batches, raw, 0, stop_on_error=True) == \
        _outcome(c.scan_batches, raw, 0, stop_on_error=True)
    assert _outcome(py.locate_batches, raw, 0, 1 << 62, 1 << 40) == \
        _outcome(c.locate_batches, raw, 0, 1 << 62, 1 << 40)


def test_assigning_without_stamping_in_place_leaves_the_buffer_and_finds_the_same(impl):
    data = _batches(impl.records, 6, base=0)
    stamped = bytearray(data)
    in_place = impl.segment.scan_batches(
        stamped, 1000, assign_offset=1000, stamp_epoch=9, index_per_batch=False,
        strict_epochs=True, latest_epoch=9)
    apart = impl.segment.scan_batches(
        data, 1000, assign_offset=1000, stamp_epoch=9, index_per_batch=False,
        strict_epochs=True, latest_epoch=9, stamp_in_place=False)
    assert apart == in_place and apart.next_offset == 1030
    assert bytes(stamped) != data  # only the in-place scan wrote, into its own buffer
    with pytest.raises(Exception, match="below the log's latest epoch"):
        impl.segment.scan_batches(data, 1000, assign_offset=1000, stamp_epoch=3,
                                  strict_epochs=True, latest_epoch=9, stamp_in_place=False)


def _with_crc(batch):
    """`batch` (one batch, bytearray) with its CRC recomputed over its bytes after the CRC
    field, so that damage below it reaches the record checks."""
    crc32c = IMPLEMENTATIONS["py"].crc32c.crc32c

    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return batch


@needs_both
@pytest.mark.parametrize("fix_crc", [True, False])
def test_implementations_agree_on_damaged_records_of_a_large_batch(fix_crc):
    """A batch above limits.NOGIL_BYTES_MIN takes the native path that runs the CRC and the
    record walk in one GIL release: damage in its records is reported as by the pure
    kernel, the CRC mismatch first when the CRC was not fixed, the record error when it
    was (same error type and position)."""
    import random

    from kraftcore import limits
    records = IMPLEMENTATIONS["py"].records

    py, c = _both()
    clean = _batches(records, 1, per_batch=60, value_bytes=limits.NOGIL_BYTES_MIN // 50)
    assert len(clean) > limits.NOGIL_BYTES_MIN + 61
    rng = random.Random(7)
    positions = [61, 62, 63, 64, 65, 66, 67, len(clean) - 1, len(clean) - 2]
    positions += [rng.randrange(61, len(clean)) for _ in range(30)]
    for position in positions:
        for value in (0x00, 0x7F, 0x80, 0xFF, clean[position] ^ 1):
            damaged = bytearray(clean)
            damaged[position] = value
            if fix_crc:
                _with_crc(damaged)
            damaged = bytes(damaged)
            outcomes = []
            for kernel in (py, c):
                try:
                    kernel.scan_batches(damaged, 0)
                    outcomes.append(None)
                except (CorruptRecordError, InvalidAppendError) as exc:
                    outcomes.append((type(exc).__name__, exc.position, str(exc)))
            py_outcome, c_outcome = (o and o[:2] for o in outcomes)  # messages may differ
            assert py_outcome == c_outcome, (position, value)
            if not fix_crc and damaged != clean:
                assert all("CRC mismatch" in o[2] for o in outcomes), (position, value)


# ------------------------------------------------------------------ SegmentState.stamp_append


def _state_fields(state):
    return (state.base_offset, state.size, state.file_bytes, state.next_offset,
            state.bytes_since_index, state.max_timestamp, state.offset_of_max_timestamp,
            state.last_index_timestamp, bytes(state.offset_index), bytes(state.time_index))


def _one_batches(records, count, per_batch=5, value_bytes=300):
    """`count` separate encoded batches (offset 0, epoch 0; a leader stamps its own)."""
    return [records.encode_batch([bytes([i % 251]) * value_bytes for _ in range(per_batch)],
                                 timestamp=TS + (i * 7919) % 50)
            for i in range(count)]


def test_stamp_append_takes_batches_as_a_scan_of_the_stamped_bytes_would(impl):
    """One call per batch gives the stamped header (the caller's bytes untouched) and the
    same index entries, offsets and timestamps as scanning what was written."""
    base = 1000
    state = impl.segment.SegmentState(base)
    written = bytearray()
    offset = base + 10
    for i, batch in enumerate(_one_batches(impl.records, 30)):
        original = bytes(batch)
        header = state.stamp_append(batch, offset, 4 + i // 10, 4096)
        assert batch == original and len(header) == 16
        written += header + batch[16:]
        offset += 5
    assert _state_fields(state)[1:4] == (len(written), len(written), offset)
    scan = impl.segment.scan_batches(bytes(written), base, expected_offset=base + 10)
    assert (scan.valid_bytes, scan.next_offset, scan.error) == (len(written), offset, None)
    assert (bytes(state.offset_index), bytes(state.time_index)) == (
        scan.offset_index, scan.time_index)
    assert state.offset_index  # the cadence did produce entries
    assert (state.bytes_since_index, state.max_timestamp, state.offset_of_max_timestamp,
            state.last_index_timestamp) == (scan.bytes_since_index, scan.max_timestamp,
                                            scan.offset_of_max_timestamp,
                                            scan.last_index_timestamp)
    assert scan.epochs == [(4, 1010), (5, 1060), (6, 1110)]
    decoded = impl.records.decode_batches(bytes(written))  # every CRC still holds
    assert [b.base_offset for b in decoded] == list(range(base + 10, offset, 5))


def test_stamp_append_refuses_bad_input_and_changes_nothing(impl):
    state = impl.segment.SegmentState(100)
    good, other = _one_batches(impl.records, 2)
    state.stamp_append(good, 100, 1, 0)
    before = _state_fields(state)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    cases = [
        (bytes(flipped), CorruptRecordError, "CRC"),
        (good[:-1], CorruptRecordError, "truncated"),
        (good[:40], CorruptRecordError, "truncated"),
        (b"", CorruptRecordError, "truncated"),
        (good + other, InvalidAppendError, "one record batch"),
    ]
    for data, error, match in cases:
        with pytest.raises(error, match=match):
            state.stamp_append(data, 105, 1, 0)
        assert _state_fields(state) == before
    with pytest.raises(InvalidAppendError, match="above the limit"):
        state.stamp_append(other, 105, 1, 0, True, len(other) - 1)
    with pytest.raises(ValueError, match="below the segment's base offset"):
        state.stamp_append(other, 99, 1, 0)
    with pytest.raises(ValueError, match="not an int32"):
        state.stamp_append(other, 105, 2**31, 0)
    with pytest.raises(OverflowError):
        state.stamp_append(other, 2**63, 1, 0)
    with pytest.raises(ValueError, match="past 2"):
        state.stamp_append(other, 2**63 - 5, 1, 0)
    for args in ((105.0, 1, 0), (105, 1.5, 0), (105, 1, None), (105, 1, 0, True, 1.5)):
        with pytest.raises(TypeError):
            state.stamp_append(other, *args)
    with pytest.raises(TypeError):
        state.stamp_append("not bytes", 105, 1, 0)
    assert _state_fields(state) == before
    state.stamp_append(other, 105, 1, 0)  # and the state still takes the next batch
    assert state.next_offset == 110


def test_stamp_append_leaves_a_batch_that_overflows_the_segment_to_the_caller(impl):
    state = impl.segment.SegmentState(0)
    batch = _one_batches(impl.records, 1)[0]  # offsets 0..4 relative to its base
    before = _state_fields(state)
    assert state.stamp_append(batch, 2**31 - 4, 0, 0) is None  # last offset 2^31
    assert _state_fields(state) == before
    assert state.stamp_append(batch, 2**31 - 5, 0, 0) is not None  # last offset 2^31 - 1
    assert state.next_offset == 2**31


def test_undo_append_puts_back_the_state_before_the_last_append(impl):
    state = impl.segment.SegmentState(0)
    batches = _one_batches(impl.records, 4, value_bytes=2000)
    for i, batch in enumerate(batches[:3]):
        state.stamp_append(batch, 5 * i, 0, 100)
    before = _state_fields(state)
    state.stamp_append(batches[3], 15, 0, 100)
    assert _state_fields(state) != before
    state.undo_append()
    assert _state_fields(state) == before
    with pytest.raises(RuntimeError, match="no append to undo"):
        state.undo_append()
    assert state.stamp_append(batches[3], 2**31, 0, 0) is None
    with pytest.raises(RuntimeError, match="no append to undo"):  # nothing was taken
        state.undo_append()
    state.stamp_append(batches[3], 15, 0, 100)
    with pytest.raises(TypeError):  # a refused call leaves nothing to undo either
        state.stamp_append(batches[3], 20.0, 0, 100)
    with pytest.raises(RuntimeError, match="no append to undo"):
        state.undo_append()


@needs_both
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_implementations_agree_on_stamped_appends(data):
    """Both kernels give the same header, outcome and state on the same sequence of
    appends, damaged ones and undone ones among them."""
    py, c = _both()
    records = IMPLEMENTATIONS["py"].records

    base = data.draw(st.integers(0, 2**31))
    states = (py.SegmentState(base), c.SegmentState(base))
    interval = data.draw(st.integers(0, 5000))
    offset = base
    for _ in range(data.draw(st.integers(1, 6))):
        batch = bytearray(records.encode_batch(
            [b"v" * data.draw(st.integers(0, 900)) for _ in range(data.draw(st.integers(1, 4)))],
            timestamp=data.draw(st.integers(-1, TS))))
        if data.draw(st.booleans()):
            batch[data.draw(st.integers(0, len(batch) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        batch = bytes(batch[: data.draw(st.sampled_from([len(batch), data.draw(
            st.integers(0, len(batch)))]))])
        epoch = data.draw(st.integers(-1, 3))
        verify = data.draw(st.booleans())
        outcomes = [_outcome(s.stamp_append, batch, offset, epoch, interval, verify)
                    for s in states]
        assert outcomes[0] == outcomes[1]
        assert _state_fields(states[0]) == _state_fields(states[1])
        if isinstance(outcomes[0], bytes):
            if data.draw(st.booleans()):
                for s in states:
                    s.undo_append()
                assert _state_fields(states[0]) == _state_fields(states[1])
            else:
                offset = states[0].next_offset


_ODD_NUMBERS = st.one_of(
    st.integers(-2**64, 2**64), st.sampled_from([2**63 - 1, 2**63, -2**63, -2**63 - 1, 2**31,
                                                 2**31 - 1, -2**31, -2**31 - 1]),
    st.floats(allow_nan=False, allow_infinity=False, width=32), st.none(), st.booleans())


@needs_both
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_implementations_agree_on_odd_arguments(data):
    """Offsets, epochs and limits of any type and size: the same result or the same kind
    of error from both kernels, and the state unchanged by every refusal."""
    py, c = _both()
    records = IMPLEMENTATIONS["py"].records

    base = data.draw(st.one_of(st.integers(0, 2**63 - 1), st.just(2**63 - 2**31)))
    states = (py.SegmentState(base), c.SegmentState(base))
    batch = records.encode_batch([b"v"] * data.draw(st.integers(1, 3)), timestamp=TS)
    near = st.integers(base, min(base + 2**32, 2**63 - 1))
    args = (data.draw(st.one_of(near, _ODD_NUMBERS)), data.draw(st.one_of(st.integers(-1, 9),
                                                                           _ODD_NUMBERS)),
            data.draw(st.one_of(st.integers(0, 5000), _ODD_NUMBERS)),
            data.draw(st.booleans()), data.draw(st.one_of(st.just(-1), _ODD_NUMBERS)))
    outcomes = []
    for state in states:
        before = _state_fields(state)
        try:
            outcomes.append(state.stamp_append(batch, *args))
        except (TypeError, ValueError, OverflowError, InvalidAppendError) as exc:
            outcomes.append(type(exc).__name__)
            assert _state_fields(state) == before
    assert outcomes[0] == outcomes[1], args
    assert _state_fields(states[0]) == _state_fields(states[1])
