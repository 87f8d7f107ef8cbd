"""`kraftcore.log.reader`: the batches of a file, a buffer and a log directory, and its
damage rules one by one. Where recovery meets the same bytes, it must judge them alike."""

import os
import struct

import pytest

from kraftcore import codec
from kraftcore.log import Log, reader

TS = 1_700_000_000_000


def _batches(base, count, epoch=1):
    """`count` one-record batches from offset `base`: [(offset, bytes)]."""
    return [(base + i, codec.encode_batch([b"value-%d" % (base + i)], base_offset=base + i,
                                          leader_epoch=epoch, timestamp=TS))
            for i in range(count)]


def _write(path, *pieces):
    with open(path, "wb") as f:
        for piece in pieces:
            f.write(piece)
    return str(path)


def _segment(directory, base, data):
    return _write(directory / f"{base:020d}.log", data)


def _read(path, **kwargs):
    items = list(reader.read_file(str(path), **kwargs))
    batches = [i for i in items if isinstance(i, reader.LogBatch)]
    damages = [i for i in items if isinstance(i, reader.Damage)]
    assert len(damages) <= 1 and (not damages or items[-1] is damages[0])
    return batches, (damages[0] if damages else None)


@pytest.fixture
def three():
    return b"".join(data for _, data in _batches(0, 3))


def test_a_whole_file_reads_back_every_batch(tmp_path, three):
    batches, damage = _read(_segment(tmp_path, 0, three))
    assert damage is None
    assert [(b.base_offset, b.last_offset, b.epoch, b.control) for b in batches] == [
        (0, 0, 1, False), (1, 1, 1, False), (2, 2, 1, False)]
    assert b"".join(b.data for b in batches) == three
    assert [b.position for b in batches] == [0, len(three) // 3, 2 * len(three) // 3]


def test_an_empty_file_holds_no_batch_and_no_damage(tmp_path):
    assert _read(_write(tmp_path / "00000000000000000000.log")) == ([], None)


def test_a_truncated_tail_is_torn(tmp_path, three):
    batches, damage = _read(_segment(tmp_path, 0, three[:-10]))
    assert len(batches) == 2
    assert (damage.kind, damage.position) == (reader.TORN, 2 * len(three) // 3)
    assert "cut short" in damage.reason and damage.size == 0 and damage.next_offset == 2
    batches, damage = _read(_segment(tmp_path, 0, three + three[:5]))
    assert len(batches) == 3 and damage.kind == reader.TORN
    assert "truncated batch header" in damage.reason


def test_a_bit_flip_is_a_crc_damage_and_its_batch_length_is_known(tmp_path, three):
    data = bytearray(three)
    second = len(three) // 3
    data[second + 70] ^= 0x01
    batches, damage = _read(_segment(tmp_path, 0, bytes(data)))
    assert len(batches) == 1
    assert (damage.kind, damage.position, damage.base_offset, damage.size) == (
        reader.CRC, second, 1, second)
    assert "CRC mismatch" in damage.reason


def test_a_zero_tail_ends_the_data(tmp_path, three):
    batches, damage = _read(_segment(tmp_path, 0, three + bytes(4096)))
    assert len(batches) == 3
    assert (damage.kind, damage.position) == (reader.ZEROS, len(three))
    _, damage = _read(_segment(tmp_path, 0, bytes(4096)))
    assert (damage.kind, damage.position) == (reader.ZEROS, 0)
    assert "holds 4096 zero bytes and no record batch" in damage.reason


def test_a_few_zeros_are_a_torn_header_not_a_zero_tail(tmp_path, three):
    # offset 3 as an int64 starts with seven zero bytes: a header cut after them
    _, damage = _read(_segment(tmp_path, 0, three + bytes(7)))
    assert damage.kind == reader.TORN
    _, damage = _read(_segment(tmp_path, 0, three + bytes(8)))
    assert damage.kind == reader.ZEROS


def test_zeros_then_junk_are_corrupt(tmp_path, three):
    _, damage = _read(_segment(tmp_path, 0, three + bytes(5000) + b"junk"))
    assert (damage.kind, damage.position) == (reader.CORRUPT, len(three))
    assert f"5000 zero bytes, then a non-zero byte at {len(three) + 5000}" in damage.reason


def test_a_wrong_magic_is_corrupt(tmp_path, three):
    data = bytearray(three)
    data[len(three) // 3 + 16] = 1
    batches, damage = _read(_segment(tmp_path, 0, bytes(data)))
    assert len(batches) == 1 and damage.kind == reader.CORRUPT
    assert "magic 1" in damage.reason and damage.size == len(three) // 3


def test_offsets_that_jump_are_a_jump(tmp_path):
    data = b"".join(d for _, d in _batches(0, 2) + _batches(5, 1))
    batches, damage = _read(_segment(tmp_path, 0, data))
    assert len(batches) == 2
    assert (damage.kind, damage.base_offset, damage.next_offset) == (reader.JUMP, 5, 2)
    assert "jump from 1 to 5" in damage.reason
    # read alone (dump-log), offsets only have to increase
    batches, damage = _read(tmp_path / "00000000000000000000.log", contiguous=False)
    assert len(batches) == 3 and damage is None
    backwards = b"".join(d for _, d in _batches(3, 2) + _batches(0, 1))
    _, damage = _read(_segment(tmp_path, 0, backwards), contiguous=False)
    assert damage.kind == reader.JUMP and "repeats offsets below 5" in damage.reason
    assert "the offsets go back from 4 to 0" in damage.reason


def test_a_file_not_named_by_its_base_offset_reads_from_its_first_batch(tmp_path):
    """A copy named `x.log` has no base offset in its name: its offsets are checked from
    its first batch's, so offsets past 2**31 (relative to 0 they would not fit an int32)
    read back whole."""
    big = 3_000_000_000
    data = b"".join(d for _, d in _batches(big, 3))
    batches, damage = _read(_write(tmp_path / "x.log", data))
    assert damage is None and [b.base_offset for b in batches] == [big, big + 1, big + 2]
    batches, damage = _read(tmp_path / "x.log", contiguous=False)
    assert damage is None and len(batches) == 3
    # the name still rules when it gives a base offset
    _, damage = _read(_segment(tmp_path, 0, data))
    assert damage is not None and damage.position == 0
    # no header to go by: from 0, as before
    assert _read(_write(tmp_path / "y.log", b"")) == ([], None)
    _, damage = _read(_write(tmp_path / "z.log", bytes(5)))
    assert damage.kind == reader.TORN


def test_an_epoch_going_back_is_an_epoch_damage_when_epochs_are_strict(tmp_path):
    data = b"".join(d for _, d in _batches(0, 2, epoch=3) + _batches(2, 1, epoch=2))
    path = _segment(tmp_path, 0, data)
    assert _read(path)[1] is None
    batches, damage = _read(path, strict_epochs=True)
    assert len(batches) == 2 and damage.kind == reader.EPOCH


def test_batches_larger_than_a_read_chunk_are_read_whole(tmp_path, three):
    big = codec.encode_batch([os.urandom(3000)], base_offset=3, leader_epoch=1, timestamp=TS)
    path = _segment(tmp_path, 0, three + big + three[:7])
    batches, damage = _read(path, chunk_bytes=100)
    assert [b.base_offset for b in batches] == [0, 1, 2, 3] and batches[3].data == big
    assert damage.kind == reader.TORN and damage.position == len(three) + len(big)


def test_a_buffer_can_be_read_past_its_damaged_batches():
    data = bytearray(b"".join(d for _, d in _batches(0, 4)))
    size = len(data) // 4
    data[size + 70] ^= 1  # CRC
    data[2 * size + 16] = 7  # magic
    items = list(reader.read_buffer(bytes(data), resume=True))
    assert [(type(i).__name__, i.position) for i in items] == [
        ("LogBatch", 0), ("Damage", size), ("Damage", 2 * size), ("LogBatch", 3 * size)]
    assert [items[1].kind, items[2].kind] == [reader.CRC, reader.CORRUPT]
    assert [type(i).__name__ for i in reader.read_buffer(bytes(data))] == [
        "LogBatch", "Damage"]


def test_a_directory_reads_in_offset_order_across_segments(tmp_path):
    first, second = _batches(0, 3), _batches(3, 2)
    _segment(tmp_path, 3, b"".join(d for _, d in second))
    _segment(tmp_path, 0, b"".join(d for _, d in first))
    items = list(reader.read_directory(str(tmp_path)))
    assert [i.base_offset for i in items] == [0, 1, 2, 3, 4]
    assert items[3].file == str(tmp_path / "00000000000000000003.log")


def test_a_gap_between_segments_is_a_gap(tmp_path):
    _segment(tmp_path, 0, b"".join(d for _, d in _batches(0, 3)))
    _segment(tmp_path, 5, b"".join(d for _, d in _batches(5, 1)))
    *batches, damage = reader.read_directory(str(tmp_path))
    assert len(batches) == 3
    assert (damage.kind, damage.next_offset, damage.base_offset) == (reader.GAP, 3, 5)
    assert "offsets [3, 5) are missing" in damage.reason


def test_overlapping_segments_are_a_gap(tmp_path):
    _segment(tmp_path, 0, b"".join(d for _, d in _batches(0, 3)))
    _segment(tmp_path, 2, b"".join(d for _, d in _batches(2, 2)))
    damage = list(reader.read_directory(str(tmp_path)))[-1]
    assert damage.kind == reader.GAP and "claim the same offsets" in damage.reason


def test_only_the_last_segment_may_end_torn_or_in_zeros(tmp_path):
    first = b"".join(d for _, d in _batches(0, 3))
    _segment(tmp_path, 0, first + bytes(1000))  # zeros, then the next segment: fine
    _segment(tmp_path, 3, b"".join(d for _, d in _batches(3, 2))[:-5])
    *batches, damage = reader.read_directory(str(tmp_path))
    assert [b.base_offset for b in batches] == [0, 1, 2, 3]
    assert damage.kind == reader.TORN
    _segment(tmp_path, 0, first[:-5])  # a torn tail before another segment: a gap
    damage = list(reader.read_directory(str(tmp_path)))[-1]
    assert damage.kind == reader.GAP and "is damaged at byte" in damage.reason


def test_files_that_are_not_segments_of_the_log_are_stray_and_reading_goes_on(tmp_path):
    _segment(tmp_path, 0, b"".join(d for _, d in _batches(0, 3)))
    _segment(tmp_path, 1, b"")  # empty, based inside the segment before it
    _segment(tmp_path, 3, b"".join(d for _, d in _batches(7, 1)))  # a copy of another log
    _segment(tmp_path, 4, b"".join(d for _, d in _batches(3, 2)))  # misnamed: stray too
    _write(tmp_path / "00000000000000000000.log.stray", b"junk")
    items = list(reader.read_directory(str(tmp_path)))
    batches = [i for i in items if isinstance(i, reader.LogBatch)]
    strays = [i for i in items if isinstance(i, reader.Damage)]
    assert [b.base_offset for b in batches] == [0, 1, 2]
    assert [(d.kind, d.position, os.path.basename(d.file), d.base_offset) for d in strays] == [
        (reader.STRAY, 0, "00000000000000000001.log", 1),
        (reader.STRAY, 0, "00000000000000000003.log", 7),
        (reader.STRAY, 0, "00000000000000000004.log", 3)]
    assert "holds no batch, and its base offset 1 lies inside 00000000000000000000.log" in \
        strays[0].reason and "not part of the log" in strays[0].reason
    assert "its first batch starts at offset 7, not at the base offset 3" in strays[1].reason
    # a stray file is no fatal damage: a segment after it is still read
    _segment(tmp_path, 5, b"".join(d for _, d in _batches(3, 2)))
    os.rename(tmp_path / "00000000000000000005.log", tmp_path / "00000000000000000003.log")
    os.unlink(tmp_path / "00000000000000000004.log")
    items = list(reader.read_directory(str(tmp_path)))
    assert [(type(i).__name__, i.base_offset) for i in items] == [
        ("LogBatch", 0), ("LogBatch", 1), ("LogBatch", 2), ("Damage", 1),
        ("LogBatch", 3), ("LogBatch", 4)]


def test_a_first_segment_above_the_start_offset_is_a_gap(tmp_path):
    _segment(tmp_path, 5, b"".join(d for _, d in _batches(5, 2)))
    *batches, damage = reader.read_directory(str(tmp_path), start_offset=3)
    assert batches == []
    assert (damage.kind, damage.position, damage.next_offset, damage.base_offset) == (
        reader.GAP, 0, 3, 5)
    assert damage.file == str(tmp_path / "00000000000000000005.log")
    assert "offsets [3, 5) are missing" in damage.reason
    # at or above the first segment's base: no gap (the batches below the start are read)
    for start in (5, 6, None):
        items = list(reader.read_directory(str(tmp_path), start_offset=start))
        assert [i.base_offset for i in items] == [5, 6]
    # a stray first file does not count: the first segment of the log does
    _segment(tmp_path, 0, b"".join(d for _, d in _batches(9, 1)))
    items = list(reader.read_directory(str(tmp_path), start_offset=3))
    assert [i.kind for i in items] == [reader.STRAY, reader.GAP]
    # no segment at all: nothing to judge
    (tmp_path / "empty").mkdir()
    assert list(reader.read_directory(str(tmp_path / "empty"), start_offset=3)) == []


@pytest.mark.parametrize("tail, kind", [(b"\0" * 4096, reader.ZEROS),
                                        (b"\0" * 5, reader.TORN),
                                        (b"\0" * 100 + b"x", reader.CORRUPT)])
def test_recovery_judges_a_tail_as_the_reader_does(tmp_path, tail, kind):
    log = Log.open(tmp_path)
    for _, data in _batches(0, 3):
        log.append_as_follower(data)
    log.close()
    path = tmp_path / "00000000000000000000.log"
    with open(path, "ab") as f:
        f.write(tail)
    os.unlink(tmp_path / ".kafka_cleanshutdown")
    assert _read(path)[1].kind == kind
    log = Log.open(tmp_path)
    try:
        report = log.recovery
        assert log.log_end_offset == 3
        assert (report.zero_tail_bytes, report.truncated_bytes) == (
            (len(tail), 0) if kind == reader.ZEROS else (0, len(tail)))
    finally:
        log.close()


def test_index_files_read_back_their_entries(tmp_path):
    offsets = _write(tmp_path / "00000000000000000100.index",
                     struct.pack(">iiii", 3, 4096, 9, 8192) + bytes(16) + b"\x01")
    items = list(reader.read_index_file(offsets, 100))
    assert items[:2] == [(103, 4096), (109, 8192)]
    assert items[2].kind == reader.CORRUPT and items[2].position == 32
    times = _write(tmp_path / "00000000000000000100.timeindex", struct.pack(">qi", TS, 3))
    assert list(reader.read_index_file(times, 100)) == [(TS, 103)]
