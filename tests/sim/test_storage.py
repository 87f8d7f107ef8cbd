"""MemoryStorage: the simulator's in-memory Raft storage."""

import pytest

from kraftcore import codec
from kraftcore.errors import (CorruptRecordError, InvalidAppendError, InvalidOffsetError,
                              OffsetOutOfRangeError)
from kraftcore.raft.storage import RaftStorage, SnapshotDownload
from kraftcore.raft.types import CommittedBatch
from kraftcore.types import SnapshotId
from kraftcore.raft.memory import MemoryStorage


def batch(count=2, base_offset=0, epoch=0, control=False, size=1):
    values = [bytes([65 + i]) * size for i in range(count)]
    return codec.encode_batch(values, base_offset=base_offset, leader_epoch=epoch,
                              control=control)


def state(storage):
    """Everything observable, to check that a refused call changed nothing."""
    return (storage.log_start_offset, storage.log_end_offset, storage.durable_end_offset,
            storage.batches(), storage.epoch_entries(), storage.last_fetched_epoch(),
            storage.snapshot_ids())


def follower_log(*spec):
    """A storage filled by follower appends of (count, epoch) batches."""
    storage = MemoryStorage()
    for count, epoch in spec:
        storage.append_as_follower(batch(count, storage.log_end_offset, epoch))
    return storage


def test_implements_the_interface():
    storage = MemoryStorage()
    assert isinstance(storage, RaftStorage)
    assert isinstance(storage.begin_snapshot_download(SnapshotId(5, 1)), SnapshotDownload)
    assert (storage.log_start_offset, storage.log_end_offset) == (0, 0)
    assert storage.last_fetched_epoch() == 0
    assert storage.end_offset_for_epoch(0) == (-1, -1)
    assert storage.read(0, 100) == b""
    assert storage.latest_snapshot_id() is None and storage.earliest_snapshot_id() is None


# ---------------------------------------------------------------------- leader appends

def test_leader_append_assigns_offsets_and_stamps_the_epoch():
    storage = MemoryStorage()
    assert storage.append_as_leader(batch(2, base_offset=77, epoch=9), 1) == (0, 1)
    assert storage.append_as_leader(bytearray(batch(3)), 1) == (2, 4)
    assert storage.append_as_leader(memoryview(batch(1, control=True)), 3) == (5, 5)
    assert storage.log_end_offset == 6
    stored = storage.batches()
    assert [b[:4] for b in stored] == [(0, 1, 1, False), (2, 4, 1, False), (5, 5, 3, True)]
    assert all(type(b) is CommittedBatch and type(b.data) is bytes for b in stored)
    decoded = codec.decode_batches(storage.read(0, 1 << 20), verify=True)  # CRCs valid
    assert [(d.base_offset, d.last_offset, d.partition_leader_epoch) for d in decoded] == [
        (0, 1, 1), (2, 4, 1), (5, 5, 3)]
    assert [r.offset for d in decoded for r in d.records] == [0, 1, 2, 3, 4, 5]
    assert decoded[2].is_control
    assert storage.epoch_entries() == [(1, 0), (3, 5)]
    assert storage.last_fetched_epoch() == 3
    assert storage.durable_end_offset == 0


def test_leader_append_refuses_an_older_epoch_and_bad_batches():
    storage = MemoryStorage()
    storage.append_as_leader(batch(), 4)
    before = state(storage)
    with pytest.raises(InvalidAppendError):
        storage.append_as_leader(batch(), 3)
    with pytest.raises(InvalidAppendError):
        storage.append_as_leader(batch(), -1)
    with pytest.raises(InvalidAppendError):
        storage.append_as_leader(batch() + batch(), 4)  # two batches
    with pytest.raises(InvalidAppendError):
        storage.append_as_leader(batch()[:-1], 4)
    with pytest.raises(InvalidAppendError):
        storage.append_as_leader(b"", 4)
    assert state(storage) == before


# ---------------------------------------------------------------------- follower appends

def test_follower_append_of_several_batches():
    storage = MemoryStorage()
    data = batch(2, 0, 1) + batch(1, 2, 1, control=True) + batch(3, 3, 2)
    assert storage.append_as_follower(data) == (0, 5)
    assert storage.append_as_follower(bytearray(batch(1, 6, 2))) == (6, 6)
    assert storage.append_as_follower(memoryview(batch(2, 7, 5))) == (7, 8)
    assert [b[:4] for b in storage.batches()] == [
        (0, 1, 1, False), (2, 2, 1, True), (3, 5, 2, False), (6, 6, 2, False),
        (7, 8, 5, False)]
    assert b"".join(b.data for b in storage.batches()) == (
        data + batch(1, 6, 2) + batch(2, 7, 5))
    assert storage.epoch_entries() == [(1, 0), (2, 3), (5, 7)]
    assert storage.log_end_offset == 9


def test_follower_append_must_be_contiguous():
    storage = follower_log((2, 1))
    before = state(storage)
    for data in (batch(1, 3, 1), batch(1, 1, 1), batch(1, 2, 1) + batch(1, 4, 1),
                 batch(1, 2, 1) + batch(1, 2, 1), b""):
        with pytest.raises(InvalidAppendError):
            storage.append_as_follower(data)
        assert state(storage) == before


def test_follower_append_refuses_epochs_going_backwards():
    storage = follower_log((2, 3))
    before = state(storage)
    with pytest.raises(InvalidAppendError):
        storage.append_as_follower(batch(1, 2, 2))
    with pytest.raises(InvalidAppendError):  # within the append itself
        storage.append_as_follower(batch(1, 2, 5) + batch(1, 3, 4))
    assert state(storage) == before


@pytest.mark.parametrize("where", [0, 8, 17, 21, 30, 62, -1])
def test_follower_append_of_corrupt_bytes_changes_nothing(where):
    storage = follower_log((2, 1))
    before = state(storage)
    data = bytearray(batch(2, 2, 1) + batch(2, 4, 2))
    data[len(batch(2, 2, 1)) + where] ^= 0x40  # a byte of the second batch
    with pytest.raises((CorruptRecordError, InvalidAppendError)):
        storage.append_as_follower(data)
    assert state(storage) == before


def test_follower_append_of_a_flipped_crc_covered_byte_is_corrupt():
    storage = follower_log((1, 1))
    before = state(storage)
    data = bytearray(batch(1, 1, 1))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        storage.append_as_follower(data)
    with pytest.raises(CorruptRecordError):
        storage.append_as_follower(bytes(batch(1, 1, 1))[:-3])  # truncated
    assert state(storage) == before


# ---------------------------------------------------------------------- truncation

def test_truncate_mid_batch_removes_the_whole_batch():
    storage = follower_log((3, 1), (3, 2), (3, 3))  # [0-2] [3-5] [6-8]
    storage.truncate_to(4)
    assert storage.log_end_offset == 3
    assert [b[:2] for b in storage.batches()] == [(0, 2)]
    assert storage.epoch_entries() == [(1, 0)]
    assert storage.last_fetched_epoch() == 1
    assert storage.end_offset_for_epoch(1) == (1, 3)


def test_truncate_on_a_boundary_and_past_the_end():
    storage = follower_log((3, 1), (3, 2), (3, 3))
    storage.truncate_to(9)  # the log end: nothing to do
    storage.truncate_to(20)
    assert storage.log_end_offset == 9
    storage.truncate_to(6)
    assert storage.log_end_offset == 6
    assert storage.epoch_entries() == [(1, 0), (2, 3)]
    storage.truncate_to(0)
    assert (storage.log_end_offset, storage.batches(), storage.epoch_entries()) == (0, [], [])
    assert storage.last_fetched_epoch() == 0
    # appends continue from the new end; a lower epoch is fine again after truncation
    assert storage.append_as_leader(batch(), 1) == (0, 1)


def test_truncate_below_the_log_start_is_refused_and_lowers_the_durable_end():
    storage = follower_log((3, 1), (3, 2))
    storage.flush()
    assert storage.durable_end_offset == 6
    storage.truncate_to(4)
    assert storage.durable_end_offset == 3
    storage.write_snapshot(SnapshotId(2, 1), b"s")
    storage.advance_log_start_offset(SnapshotId(2, 1))
    with pytest.raises(InvalidOffsetError):
        storage.truncate_to(1)


# ---------------------------------------------------------------------- epochs

def test_end_offset_for_epoch():
    storage = follower_log((2, 1), (2, 1), (3, 3), (1, 6))  # epochs 1@0, 3@4, 6@7
    assert storage.end_offset_for_epoch(1) == (1, 4)
    assert storage.end_offset_for_epoch(2) == (1, 4)
    assert storage.end_offset_for_epoch(3) == (3, 7)
    assert storage.end_offset_for_epoch(5) == (3, 7)
    assert storage.end_offset_for_epoch(6) == (6, 8)
    assert storage.end_offset_for_epoch(7) == (-1, -1)
    assert storage.end_offset_for_epoch(0) == (0, 0)
    assert storage.end_offset_for_epoch(-1) == (-1, -1)
    assert [storage.epoch_for_offset(o) for o in range(-1, 9)] == [
        -1, 1, 1, 1, 1, 3, 3, 3, 6, -1]
    assert storage.last_fetched_epoch() == 6


# ---------------------------------------------------------------------- reads

def test_read_takes_whole_batches_within_max_bytes():
    storage = follower_log((2, 1), (2, 1), (2, 1))
    sizes = [len(b.data) for b in storage.batches()]
    everything = b"".join(b.data for b in storage.batches())
    assert storage.read(0, 1 << 20) == everything
    assert storage.read(0, 1) == storage.batches()[0].data  # the first always whole
    assert storage.read(1, sizes[0] + sizes[1]) == everything[:sizes[0] + sizes[1]]
    assert storage.read(1, sizes[0] + sizes[1] - 1) == everything[:sizes[0]]
    assert storage.read(3, 1 << 20) == everything[sizes[0]:]
    assert storage.read(6, 10) == b""
    for offset in (-1, 7):
        with pytest.raises(OffsetOutOfRangeError) as info:
            storage.read(offset, 10)
        assert (info.value.log_start_offset, info.value.log_end_offset) == (0, 6)


def test_read_batches():
    storage = follower_log((2, 1), (1, 1), (3, 2))
    storage.append_as_leader(batch(1, control=True), 2)
    got = storage.read_batches(1, 4)
    assert [b[:4] for b in got] == [(0, 1, 1, False), (2, 2, 1, False), (3, 5, 2, False)]
    assert all(isinstance(b, CommittedBatch) for b in got)
    assert storage.read_batches(6, 7)[0].control
    assert storage.read_batches(3, 3) == []
    with pytest.raises(OffsetOutOfRangeError):
        storage.read_batches(0, 8)


# ---------------------------------------------------------------------- crashes

def test_crash_loses_exactly_the_unflushed_suffix():
    storage = MemoryStorage()
    storage.append_as_leader(batch(2), 1)
    storage.append_as_leader(batch(3), 1)
    storage.flush()
    kept = storage.batches()
    storage.append_as_leader(batch(2), 2)
    storage.append_as_follower(batch(1, 7, 2))
    assert storage.log_end_offset == 8 and storage.durable_end_offset == 5
    storage.crash()
    assert storage.batches() == kept
    assert (storage.log_end_offset, storage.durable_end_offset) == (5, 5)
    assert storage.epoch_entries() == [(1, 0)]
    storage.crash()  # nothing more to lose
    assert storage.batches() == kept


def test_crash_after_a_truncation_keeps_the_truncation():
    storage = follower_log((2, 1), (2, 1), (2, 2))
    storage.flush()
    storage.truncate_to(3)
    storage.append_as_follower(batch(3, 2, 3))
    storage.crash()
    assert storage.log_end_offset == 2
    assert [b[:2] for b in storage.batches()] == [(0, 1)]


# ---------------------------------------------------------------------- snapshots

def test_snapshot_download_and_freeze():
    storage = follower_log((2, 1))
    sid = SnapshotId(10, 3)
    download = storage.begin_snapshot_download(sid)
    download.append(b"abc")
    download.append(bytearray(b"de"))
    assert download.size == 5 and download.snapshot_id == sid
    assert storage.snapshot_size(sid) is None and storage.latest_snapshot_id() is None
    download.freeze()
    assert storage.snapshot_size(sid) == 5
    assert storage.snapshot_bytes(sid) == b"abcde"
    assert storage.read_snapshot(sid, 1, 3) == b"bcd"
    assert storage.read_snapshot(sid, 4, 100) == b"e"
    assert storage.read_snapshot(sid, 5, 100) == b""
    assert storage.read_snapshot(SnapshotId(9, 3), 0, 10) is None
    with pytest.raises(ValueError):
        download.append(b"f")
    storage.crash()  # a frozen download is durable
    assert storage.snapshot_ids() == [sid]


def test_crash_and_abort_lose_open_downloads():
    storage = MemoryStorage()
    lost = storage.begin_snapshot_download(SnapshotId(4, 1))
    lost.append(b"x")
    aborted = storage.begin_snapshot_download(SnapshotId(5, 1))
    aborted.abort()
    aborted.abort()
    storage.crash()
    with pytest.raises(ValueError):
        lost.freeze()
    assert storage.snapshot_ids() == [] and storage.open_downloads() == []


def test_truncate_fully_and_start_at():
    storage = follower_log((2, 1), (2, 2))
    storage.write_snapshot(SnapshotId(2, 1), b"old")
    download = storage.begin_snapshot_download(SnapshotId(20, 7))
    download.append(b"new")
    download.freeze()
    storage.truncate_fully_and_start_at(SnapshotId(20, 7))
    assert (storage.log_start_offset, storage.log_end_offset,
            storage.durable_end_offset) == (20, 20, 20)
    assert storage.batches() == [] and storage.epoch_entries() == []
    assert storage.last_fetched_epoch() == 7
    assert storage.epoch_for_offset(19) == 7
    assert storage.snapshot_ids() == [SnapshotId(20, 7)]
    assert storage.read(20, 100) == b""
    with pytest.raises(OffsetOutOfRangeError):
        storage.read(19, 100)
    assert storage.append_as_follower(batch(2, 20, 8)) == (20, 21)
    storage.crash()  # the restart is durable, the append was not
    assert (storage.log_start_offset, storage.log_end_offset) == (20, 20)
    assert storage.last_fetched_epoch() == 7


def test_write_snapshot_rules():
    storage = follower_log((3, 1), (3, 2))
    for bad in (SnapshotId(7, 2), SnapshotId(-1, 0)):
        with pytest.raises(InvalidOffsetError):
            storage.write_snapshot(bad, b"x")
    assert storage.write_snapshot(SnapshotId(6, 2), b"six")
    assert storage.write_snapshot((3, 1), bytearray(b"three"))
    assert not storage.write_snapshot(SnapshotId(6, 2), b"other")  # immutable
    assert storage.snapshot_bytes(SnapshotId(6, 2)) == b"six"
    assert storage.snapshot_ids() == [SnapshotId(3, 1), SnapshotId(6, 2)]
    assert storage.earliest_snapshot_id() == SnapshotId(3, 1)
    assert storage.latest_snapshot_id() == SnapshotId(6, 2)


def test_advance_log_start_offset():
    storage = follower_log((3, 1), (3, 2), (3, 3))  # [0-2] [3-5] [6-8]
    for sid in (SnapshotId(1, 1), SnapshotId(3, 1), SnapshotId(4, 2), SnapshotId(9, 3)):
        storage.write_snapshot(sid, b"s%d" % sid.end_offset)
    before = state(storage)
    with pytest.raises(InvalidOffsetError):  # not stored
        storage.advance_log_start_offset(SnapshotId(5, 2))
    assert state(storage) == before

    storage.advance_log_start_offset(SnapshotId(4, 2))  # inside [3-5]: it stays
    assert storage.log_start_offset == 4
    assert [b[:2] for b in storage.batches()] == [(3, 5), (6, 8)]
    assert storage.epoch_entries() == [(2, 4), (3, 6)]
    assert storage.snapshot_ids() == [SnapshotId(4, 2), SnapshotId(9, 3)]
    assert storage.read(4, 1)[:8] == (3).to_bytes(8, "big")
    assert [b[:2] for b in storage.read_batches(4, 7)] == [(3, 5), (6, 8)]
    with pytest.raises(OffsetOutOfRangeError):
        storage.read(3, 100)
    before = state(storage)
    for sid in (SnapshotId(4, 2), SnapshotId(3, 1)):  # not above the log start
        with pytest.raises(InvalidOffsetError):
            storage.advance_log_start_offset(sid)
    assert state(storage) == before

    storage.advance_log_start_offset(SnapshotId(9, 3))  # the log end: everything goes
    assert (storage.log_start_offset, storage.log_end_offset) == (9, 9)
    assert storage.batches() == []
    assert storage.last_fetched_epoch() == 3
    assert storage.snapshot_ids() == [SnapshotId(9, 3)]
    assert storage.append_as_leader(batch(), 3) == (9, 10)


def test_advance_log_start_offset_beyond_the_log_end_is_refused():
    storage = follower_log((3, 1))
    download = storage.begin_snapshot_download(SnapshotId(5, 1))
    download.freeze()
    with pytest.raises(InvalidOffsetError):
        storage.advance_log_start_offset(SnapshotId(5, 1))


def test_crash_below_a_moved_log_start_restarts_the_log_at_the_snapshot():
    storage = follower_log((3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(5, 2), b"s")
    storage.advance_log_start_offset(SnapshotId(5, 2))
    assert storage.durable_end_offset == 0
    storage.crash()
    assert (storage.log_start_offset, storage.log_end_offset,
            storage.durable_end_offset) == (5, 5, 5)
    assert storage.batches() == [] and storage.last_fetched_epoch() == 2


def test_truncate_into_a_batch_straddling_the_log_start():
    storage = follower_log((3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(4, 2), b"s")
    storage.advance_log_start_offset(SnapshotId(4, 2))
    storage.truncate_to(4)
    assert (storage.log_start_offset, storage.log_end_offset) == (4, 4)
    assert storage.batches() == [] and storage.epoch_entries() == []
    assert storage.last_fetched_epoch() == 2
