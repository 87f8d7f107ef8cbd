"""`FileRaftStorage`: the `RaftStorage` contract, checked side by side with the simulator's
`MemoryStorage` (the same calls give the same observable state and the same errors), then
what only files have: restarts, startup recovery (kafka-facts §4.4), snapshot retention
(`clean`), and a real `RaftCore` over it surviving a restart."""

import os
import random

import pytest

from kraftcore import codec
from kraftcore.errors import (CorruptRecordError, InvalidAppendError, InvalidOffsetError,
                              LogError, OffsetOutOfRangeError)
from kraftcore.log import Log
from kraftcore.runtime.raft_storage import FileRaftStorage, snapshot_timestamp_ms
from kraftcore.log.snapshots import SnapshotDirectory, file_name
from kraftcore.raft.control import (SnapshotFooterRecord, SnapshotHeaderRecord,
                                        encode_control_batch)
from kraftcore.raft import RaftConfig, RaftCore
from kraftcore.raft.storage import RaftStorage, SnapshotDownload
from kraftcore.raft.types import CommittedBatch
from kraftcore.types import SnapshotId
from kraftcore.raft.memory import MemoryStorage

pytestmark = pytest.mark.smoke

PARTITION = "__cluster_metadata-0"


def batch(count=2, base_offset=0, epoch=0, control=False, size=1):
    values = [bytes([65 + i]) * size for i in range(count)]
    return codec.encode_batch(values, base_offset=base_offset, leader_epoch=epoch,
                              control=control, timestamp=1000)


def state(storage):
    """Everything observable through the contract and the inspection helpers."""
    return (storage.log_start_offset, storage.log_end_offset, storage.batches(),
            storage.epoch_entries(), storage.last_fetched_epoch(), storage.snapshot_ids())


class Storages:
    """Builds storages of one kind; `restart(storage)` is a clean stop and start (for
    memory: flush, then a crash that has nothing to lose)."""

    def __init__(self, kind, tmp_path):
        self.kind = kind
        self.tmp_path = tmp_path
        self.opened = []

    def new(self, **settings):
        if self.kind == "memory":
            return MemoryStorage()
        return self.open(self.tmp_path / f"{len(self.opened)}" / PARTITION, **settings)

    def open(self, path, **settings):
        storage = FileRaftStorage.open(path, **settings)
        self.opened.append(storage)
        return storage

    def restart(self, storage):
        if self.kind == "memory":
            storage.flush()
            storage.crash()
            return storage
        storage.close()
        return self.open(storage.log.path)

    def close_all(self):
        for storage in self.opened:
            storage.close()


@pytest.fixture(params=["memory", "file"])
def storages(request, tmp_path):
    made = Storages(request.param, tmp_path)
    yield made
    made.close_all()


@pytest.fixture
def files(tmp_path):
    made = Storages("file", tmp_path)
    yield made
    made.close_all()


def follower_log(storages, *spec, **settings):
    """A storage filled by follower appends of (count, epoch) batches."""
    storage = storages.new(**settings)
    for count, epoch in spec:
        storage.append_as_follower(batch(count, storage.log_end_offset, epoch))
    return storage


# ====================================================================== the contract

def test_implements_the_interface(storages):
    storage = storages.new()
    assert isinstance(storage, RaftStorage)
    download = storage.begin_snapshot_download(SnapshotId(5, 1))
    assert isinstance(download, SnapshotDownload)
    download.abort()
    assert (storage.log_start_offset, storage.log_end_offset) == (0, 0)
    assert storage.last_fetched_epoch() == 0
    assert storage.end_offset_for_epoch(0) == (-1, -1)
    assert storage.read(0, 100) == b""
    assert storage.latest_snapshot_id() is None and storage.earliest_snapshot_id() is None


def test_leader_append_assigns_offsets_and_stamps_the_epoch(storages):
    storage = storages.new()
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
    assert storage.epoch_entries() == [(1, 0), (3, 5)]
    assert storage.last_fetched_epoch() == 3
    assert storage.durable_end_offset == 0
    storage.flush()
    assert storage.durable_end_offset == 6


def test_leader_append_refuses_an_older_epoch_and_bad_batches(storages):
    storage = storages.new()
    storage.append_as_leader(batch(), 4)
    before = state(storage)
    for bad_batch, epoch in ((batch(), 3), (batch(), -1), (batch(), 1 << 31), (batch(), "4"),
                             (batch() + batch(), 4), (batch()[:-1], 4), (b"", 4)):
        with pytest.raises(InvalidAppendError):
            storage.append_as_leader(bad_batch, epoch)
    assert state(storage) == before


def test_follower_append_of_several_batches(storages):
    storage = storages.new()
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


def test_follower_append_must_be_contiguous_with_epochs_going_up(storages):
    storage = follower_log(storages, (2, 3))
    before = state(storage)
    for data in (batch(1, 3, 3), batch(1, 1, 3), batch(1, 2, 3) + batch(1, 4, 3),
                 batch(1, 2, 3) + batch(1, 2, 3), b"", batch(1, 2, 2),
                 batch(1, 2, 5) + batch(1, 3, 4)):
        with pytest.raises(InvalidAppendError):
            storage.append_as_follower(data)
        assert state(storage) == before


@pytest.mark.parametrize("where", [0, 8, 17, 21, 30, 62, -1])
def test_follower_append_of_corrupt_bytes_changes_nothing(storages, where):
    storage = follower_log(storages, (2, 1))
    before = state(storage)
    data = bytearray(batch(2, 2, 1) + batch(2, 4, 2))
    data[len(batch(2, 2, 1)) + where] ^= 0x40  # a byte of the second batch
    with pytest.raises((CorruptRecordError, InvalidAppendError)):
        storage.append_as_follower(data)
    assert state(storage) == before
    with pytest.raises(CorruptRecordError):
        storage.append_as_follower(bytes(batch(1, 2, 1))[:-3])  # truncated
    assert state(storage) == before


def test_truncation(storages):
    storage = follower_log(storages, (3, 1), (3, 2), (3, 3))  # [0-2] [3-5] [6-8]
    storage.truncate_to(9)
    storage.truncate_to(20)
    assert storage.log_end_offset == 9
    storage.truncate_to(7)  # mid-batch: the whole batch goes
    assert storage.log_end_offset == 6
    assert storage.epoch_entries() == [(1, 0), (2, 3)]
    storage.truncate_to(3)
    assert [b[:2] for b in storage.batches()] == [(0, 2)]
    assert storage.end_offset_for_epoch(1) == (1, 3)
    assert storage.last_fetched_epoch() == 1
    storage.truncate_to(0)
    assert (storage.log_end_offset, storage.batches(), storage.epoch_entries()) == (0, [], [])
    assert storage.last_fetched_epoch() == 0
    assert storage.append_as_leader(batch(), 1) == (0, 1)  # a lower epoch is fine again


def test_truncation_lowers_the_durable_end_and_stops_at_the_log_start(storages):
    storage = follower_log(storages, (3, 1), (3, 2))
    storage.flush()
    assert storage.durable_end_offset == 6
    storage.truncate_to(4)
    assert storage.durable_end_offset == 3
    storage.write_snapshot(SnapshotId(2, 1), b"s")
    storage.advance_log_start_offset(SnapshotId(2, 1))
    before = state(storage)
    with pytest.raises(InvalidOffsetError):
        storage.truncate_to(1)
    assert state(storage) == before


def test_truncate_into_a_batch_straddling_the_log_start(storages):
    storage = follower_log(storages, (3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(4, 2), b"s")
    storage.advance_log_start_offset(SnapshotId(4, 2))
    assert [b[:2] for b in storage.batches()] == [(3, 5)]
    storage.truncate_to(5)
    assert (storage.log_start_offset, storage.log_end_offset) == (4, 4)
    assert storage.batches() == [] and storage.epoch_entries() == []
    assert storage.last_fetched_epoch() == 2
    assert storage.snapshot_ids() == [SnapshotId(4, 2)]
    assert storage.append_as_follower(batch(2, 4, 3)) == (4, 5)


def test_end_offset_for_epoch_and_epoch_for_offset(storages):
    storage = follower_log(storages, (2, 1), (2, 1), (3, 3), (1, 6))  # 1@0, 3@4, 6@7
    assert [storage.end_offset_for_epoch(e) for e in (-1, 0, 1, 2, 3, 5, 6, 7)] == [
        (-1, -1), (0, 0), (1, 4), (1, 4), (3, 7), (3, 7), (6, 8), (-1, -1)]
    assert [storage.epoch_for_offset(o) for o in range(-1, 9)] == [
        -1, 1, 1, 1, 1, 3, 3, 3, 6, -1]
    assert storage.last_fetched_epoch() == 6


def test_reads(storages):
    storage = follower_log(storages, (2, 1), (2, 1), (2, 1))
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


def test_read_batches(storages):
    storage = follower_log(storages, (2, 1), (1, 1), (3, 2))
    storage.append_as_leader(batch(1, control=True), 2)
    got = storage.read_batches(1, 4)
    assert [b[:4] for b in got] == [(0, 1, 1, False), (2, 2, 1, False), (3, 5, 2, False)]
    assert all(type(b) is CommittedBatch for b in got)
    assert storage.read_batches(6, 7)[0].control
    assert storage.read_batches(3, 3) == []
    for start, end in ((0, 8), (-1, 2), (3, 2)):
        with pytest.raises(OffsetOutOfRangeError):
            storage.read_batches(start, end)


def test_snapshot_download_and_freeze(storages):
    storage = follower_log(storages, (2, 1))
    sid = SnapshotId(10, 3)
    download = storage.begin_snapshot_download(sid)
    download.append(b"abc")
    download.append(bytearray(b"de"))
    assert download.size == 5 and download.snapshot_id == sid
    assert storage.open_downloads() == [download]
    assert storage.snapshot_size(sid) is None and storage.latest_snapshot_id() is None
    download.freeze()
    assert storage.open_downloads() == []
    assert storage.snapshot_size(sid) == 5
    assert storage.snapshot_bytes(sid) == b"abcde"
    assert storage.read_snapshot(sid, 1, 3) == b"bcd"
    assert storage.read_snapshot(sid, 4, 100) == b"e"
    assert storage.read_snapshot(sid, 5, 100) == b""
    assert storage.read_snapshot(SnapshotId(9, 3), 0, 10) is None
    with pytest.raises(ValueError):
        storage.read_snapshot(sid, 6, 1)
    with pytest.raises(ValueError):
        download.append(b"f")
    storage = storages.restart(storage)  # a frozen download is durable
    assert storage.snapshot_ids() == [sid]
    assert storage.snapshot_bytes(sid) == b"abcde"


def test_restart_loses_open_and_aborted_downloads(storages):
    storage = storages.new()
    lost = storage.begin_snapshot_download(SnapshotId(4, 1))
    lost.append(b"x")
    aborted = storage.begin_snapshot_download(SnapshotId(5, 1))
    aborted.abort()
    aborted.abort()
    storage = storages.restart(storage)
    with pytest.raises(ValueError):
        lost.freeze()
    assert storage.snapshot_ids() == [] and storage.open_downloads() == []


def test_truncate_fully_and_start_at(storages):
    storage = follower_log(storages, (2, 1), (2, 2))
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
    storage = storages.restart(storage)
    assert (storage.log_start_offset, storage.log_end_offset) == (20, 22)
    assert storage.epoch_entries() == [(8, 20)]
    storage.truncate_to(20)
    assert storage.last_fetched_epoch() == 7


def test_write_snapshot_rules(storages):
    storage = follower_log(storages, (3, 1), (3, 2))
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


def test_advance_log_start_offset(storages):
    storage = follower_log(storages, (3, 1), (3, 2), (3, 3))  # [0-2] [3-5] [6-8]
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
    assert storage.epoch_for_offset(3) in (-1, 2)  # below the start: the snapshot's
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
    assert storage.epoch_for_offset(8) == 3
    assert storage.snapshot_ids() == [SnapshotId(9, 3)]
    assert storage.append_as_leader(batch(), 3) == (9, 10)


def test_advance_log_start_offset_beyond_the_log_end_is_refused(storages):
    storage = follower_log(storages, (3, 1))
    download = storage.begin_snapshot_download(SnapshotId(5, 1))
    download.freeze()
    before = state(storage)
    with pytest.raises(InvalidOffsetError):
        storage.advance_log_start_offset(SnapshotId(5, 1))
    assert state(storage) == before


def test_restart_keeps_the_log_the_epochs_and_the_log_start(storages):
    storage = follower_log(storages, (3, 1), (3, 2), (3, 3))
    storage.write_snapshot(SnapshotId(4, 2), b"four")
    storage.advance_log_start_offset(SnapshotId(4, 2))
    before = state(storage)
    storage = storages.restart(storage)
    assert state(storage) == before
    assert storage.last_fetched_epoch() == 3
    assert storage.epoch_for_offset(3) in (-1, 2) and storage.epoch_for_offset(4) == 2


# ====================================================================== files only

def test_files_in_the_partition_directory(files):
    storage = files.new()
    storage.append_as_leader(batch(3), 5)
    storage.write_snapshot(SnapshotId(3, 5), b"snap")
    storage.close()
    names = sorted(os.listdir(storage.log.path))
    assert os.path.basename(storage.log.path) == PARTITION
    assert "00000000000000000000.log" in names and "leader-epoch-checkpoint" in names
    assert "00000000000000000003-0000000005.checkpoint" in names
    assert not [name for name in names if name.endswith((".part", ".deleted"))]


def test_segments_wholly_below_the_log_start_are_deleted(files):
    size = len(batch(3))
    # every batch rolls a new segment
    storage = follower_log(files, (3, 1), (3, 1), (3, 2), (3, 2), segment_bytes=size + 10)
    assert storage.log.segment_base_offsets == [0, 3, 6, 9]
    storage.write_snapshot(SnapshotId(7, 2), b"seven")
    storage.advance_log_start_offset(SnapshotId(7, 2))
    assert storage.log.segment_base_offsets == [6, 9]
    assert storage.log.high_watermark == 7
    assert not os.path.exists(os.path.join(storage.log.path, "00000000000000000000.log"))
    storage = files.restart(storage)
    assert (storage.log_start_offset, storage.log_end_offset) == (7, 12)
    assert [b[:2] for b in storage.batches()] == [(6, 8), (9, 11)]


def test_reopen_deletes_leftover_part_files(files):
    storage = files.new()
    download = storage.begin_snapshot_download(SnapshotId(10, 1))
    download.append(b"half")
    path = storage.log.path
    storage.log.close()  # the process dies with the part file on disk
    assert [n for n in os.listdir(path) if n.endswith(".checkpoint.part")]
    storage = files.open(path)
    assert storage.snapshot_ids() == []
    assert len(storage.recovery.deleted_files) == 1
    assert storage.recovery.deleted_files[0].startswith("00000000000000000010-0000000001-")
    assert not [n for n in os.listdir(path) if ".checkpoint" in n]


def test_recovery_deletes_snapshots_below_the_log_start(files):
    storage = follower_log(files, (3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(6, 2), b"six")
    storage.advance_log_start_offset(SnapshotId(6, 2))
    path = storage.log.path
    storage.close()
    SnapshotDirectory(path).write(SnapshotId(3, 1), b"stale")  # e.g. a failed delete
    SnapshotDirectory(path).write(SnapshotId(1, 1), b"stale")
    storage = files.open(path)
    assert storage.recovery.deleted_snapshots == [SnapshotId(1, 1), SnapshotId(3, 1)]
    assert storage.snapshot_ids() == [SnapshotId(6, 2)]
    assert storage.last_fetched_epoch() == 2


def test_recovery_truncates_fully_when_the_newest_snapshot_is_ahead(files):
    storage = follower_log(files, (3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(3, 1), b"three")
    path = storage.log.path
    storage.close()
    # a follower froze a downloaded snapshot and died before installing it
    SnapshotDirectory(path).write(SnapshotId(50, 2), b"fifty")
    storage = files.open(path)
    assert storage.recovery.truncated_fully_at == SnapshotId(50, 2)
    assert (storage.log_start_offset, storage.log_end_offset) == (50, 50)
    assert storage.snapshot_ids() == [SnapshotId(50, 2)]
    assert storage.last_fetched_epoch() == 2 and storage.epoch_for_offset(49) == 2
    assert storage.log.segment_base_offsets == [50]


def test_recovery_truncates_fully_on_a_higher_snapshot_epoch(files):
    storage = follower_log(files, (3, 1), (3, 2))  # LEO 6, last epoch 2
    path = storage.log.path
    storage.close()
    SnapshotDirectory(path).write(SnapshotId(4, 3), b"four")  # a higher epoch
    storage = files.open(path)
    assert storage.recovery.truncated_fully_at == SnapshotId(4, 3)
    assert (storage.log_start_offset, storage.log_end_offset) == (4, 4)
    assert storage.last_fetched_epoch() == 3


@pytest.mark.parametrize("sid", [SnapshotId(6, 2), SnapshotId(4, 2), SnapshotId(9, 1),
                                 SnapshotId(0, 0)])
def test_recovery_keeps_the_log_when_the_snapshot_is_not_ahead(files, sid):
    storage = follower_log(files, (3, 1), (3, 2))
    before = state(storage)[:5]
    path = storage.log.path
    storage.close()
    SnapshotDirectory(path).write(sid, b"s")
    storage = files.open(path)
    assert storage.recovery.truncated_fully_at is None
    assert state(storage)[:5] == before


def test_recovery_refuses_a_log_start_without_a_snapshot(files):
    storage = follower_log(files, (3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(3, 1), b"three")
    storage.advance_log_start_offset(SnapshotId(3, 1))
    path = storage.log.path
    storage.close()
    os.unlink(os.path.join(path, file_name(SnapshotId(3, 1))))
    with pytest.raises(LogError, match="no snapshot"):
        files.open(path)
    # the directory was released: a Log opens it
    Log.open(path).close()


def test_recovery_moves_a_lost_log_start_back_to_a_snapshot(files):
    size = len(batch(3))
    storage = follower_log(files, (3, 1), (3, 1), (3, 2), segment_bytes=size + 10)
    storage.write_snapshot(SnapshotId(4, 1), b"four")
    storage.advance_log_start_offset(SnapshotId(4, 1))  # segment [3-5] holds it
    path = storage.log.path
    storage.close()
    os.unlink(os.path.join(path, "log-start-offset-checkpoint"))  # lost
    storage = files.open(path)
    assert storage.recovery.log_start_moved_to == SnapshotId(4, 1)
    assert (storage.log_start_offset, storage.log_end_offset) == (4, 9)
    assert storage.last_fetched_epoch() == 2 and storage.epoch_for_offset(3) == 1


def test_open_refuses_log_retention_settings(tmp_path):
    with pytest.raises(ValueError, match="retention_bytes"):
        FileRaftStorage.open(tmp_path / PARTITION, retention_bytes=100)
    with pytest.raises(ValueError, match="retention_ms"):
        FileRaftStorage.open(tmp_path / PARTITION, retention_ms=100)


# ====================================================================== retention

def timed_snapshot(timestamp, epoch):
    return (encode_control_batch([SnapshotHeaderRecord(
                version=0, last_contained_log_timestamp=timestamp)],
                base_offset=0, leader_epoch=epoch, timestamp=timestamp)
            + codec.encode_batch([b"state"], base_offset=1, leader_epoch=epoch,
                                 timestamp=timestamp)
            + encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=2,
                                   leader_epoch=epoch, timestamp=timestamp))


def test_a_snapshots_time_is_its_header_timestamp_else_its_file_time(tmp_path):
    snapshots = SnapshotDirectory(str(tmp_path))
    kafka = SnapshotId(3, 1)
    snapshots.write(kafka, timed_snapshot(1_700_000_123_456, 1))
    assert snapshot_timestamp_ms(snapshots, kafka) == 1_700_000_123_456
    plain = SnapshotId(4, 1)
    snapshots.write(plain, b"not a record batch at all, but long enough to hold a header..")
    os.utime(snapshots.path_of(plain), ns=(1_600_000_000_000_000_000,) * 2)
    assert snapshot_timestamp_ms(snapshots, plain) == 1_600_000_000_000
    data_first = SnapshotId(5, 1)  # a first batch that is not a SnapshotHeader
    snapshots.write(data_first, codec.encode_batch([b"v"], timestamp=5))
    os.utime(snapshots.path_of(data_first), ns=(1_500_000_000_000_000_000,) * 2)
    assert snapshot_timestamp_ms(snapshots, data_first) == 1_500_000_000_000
    assert snapshot_timestamp_ms(snapshots, SnapshotId(6, 1)) is None


@pytest.fixture
def retained(files):
    """Four segments of one batch each (epochs 1, 1, 2, 2); snapshots (3, 1) at t=1000,
    (6, 1) at t=2000 and (9, 2) at t=3000."""
    size = len(batch(3))
    storage = follower_log(files, (3, 1), (3, 1), (3, 2), (3, 2), segment_bytes=size + 10)
    for end, timestamp in ((3, 1000), (6, 2000), (9, 3000)):
        storage.write_snapshot(SnapshotId(end, storage.epoch_for_offset(end - 1)),
                               timed_snapshot(timestamp, 1))
    return storage


def test_clean_keeps_everything_within_the_limits(retained):
    before = state(retained)
    assert retained.clean(now_ms=3000, retention_bytes=-1, retention_ms=-1) == []
    assert retained.clean(now_ms=3000, retention_bytes=retained.size_bytes,
                          retention_ms=2000) == []
    assert state(retained) == before


def test_clean_by_age_removes_the_oldest_snapshots_never_the_newest(retained):
    # at t=3500 with 1000 ms: t=1000 and t=2000 are too old; the newest always stays
    assert retained.clean(now_ms=3500, retention_bytes=-1, retention_ms=1000) == [
        SnapshotId(3, 1), SnapshotId(6, 1)]
    assert retained.snapshot_ids() == [SnapshotId(9, 2)]
    assert retained.log_start_offset == 9
    assert retained.log.segment_base_offsets == [9]
    assert retained.clean(now_ms=10**12, retention_bytes=0, retention_ms=0) == []


def test_clean_by_size_stops_once_under_the_limit(retained):
    total = retained.size_bytes
    segment = len(batch(3))
    oldest = retained.snapshot_size(SnapshotId(3, 1))
    # deleting (3, 1) moves the log start to the next snapshot, 6: two segments go
    limit = total - 2 * segment - oldest
    assert retained.clean(now_ms=0, retention_bytes=limit + 1, retention_ms=-1) == [
        SnapshotId(3, 1)]
    assert retained.log_start_offset == 6
    assert retained.snapshot_ids() == [SnapshotId(6, 1), SnapshotId(9, 2)]
    assert retained.log.segment_base_offsets == [6, 9]
    assert retained.size_bytes == limit
    assert retained.clean(now_ms=0, retention_bytes=limit, retention_ms=-1) == []
    assert retained.clean(now_ms=0, retention_bytes=limit - 1, retention_ms=-1) == [
        SnapshotId(6, 1)]
    assert (retained.log_start_offset, retained.snapshot_ids()) == (9, [SnapshotId(9, 2)])


def test_clean_is_the_same_after_a_restart(files, retained):
    retained = files.restart(retained)
    assert retained.clean(now_ms=2500, retention_bytes=-1, retention_ms=1000) == [
        SnapshotId(3, 1)]


def test_clean_stops_at_a_snapshot_past_the_log_end(files):
    storage = follower_log(files, (3, 1))
    storage.write_snapshot(SnapshotId(3, 1), timed_snapshot(0, 1))
    download = storage.begin_snapshot_download(SnapshotId(30, 4))
    download.append(timed_snapshot(0, 4))
    download.freeze()
    assert storage.clean(now_ms=10**9, retention_bytes=0, retention_ms=0) == []
    assert storage.snapshot_ids() == [SnapshotId(3, 1), SnapshotId(30, 4)]


# ====================================================================== a real core

class Driver:
    """Drains a core's Readys as the contract says (kraftcore.raft.types): persist the
    election state, flush the storage, then `on_persisted`; collects commits and loads."""

    def __init__(self, storage, election_state=None):
        self.storage = storage
        self.election_state = election_state
        self.commits = []
        self.loaded = []

    def drive(self, core, now_ms):
        for _ in range(100):
            core.poll(now_ms)
            ready = core.take_ready()
            if ready is None:
                return
            if ready.load_snapshot is not None:
                self.loaded.append(ready.load_snapshot)
            self.commits += ready.commits
            if ready.election_state is not None:
                self.election_state = ready.election_state
            if ready.flush_offset is not None:
                self.storage.flush()
            core.on_persisted(ready.number)
        raise AssertionError("the core kept producing Readys")


def test_a_raft_core_survives_a_restart_on_files(tmp_path):
    path = tmp_path / PARTITION
    storage = FileRaftStorage.open(path)
    driver = Driver(storage)
    core = RaftCore(1, [1], storage, None, RaftConfig(), random.Random(0), 0)
    driver.drive(core, 0)
    assert core.role == "leader" and driver.election_state is not None
    for now, values in ((10, [b"a"]), (20, [b"b", b"c"]), (30, [b"d"])):
        core.propose(values, now)
        driver.drive(core, now)
    committed = driver.commits
    records = [r.value for b in committed if not b.control
               for r in codec.decode_batches(b.data)[0].records]
    assert records == [b"a", b"b", b"c", b"d"]
    end = committed[-1].last_offset + 1
    assert core.high_watermark == end == storage.log_end_offset
    assert storage.durable_end_offset == end
    middle = next(b for b in committed if b.data and not b.control
                  and b.base_offset > 1).last_offset + 1
    first = core.create_snapshot(middle, b"state@%d" % middle)
    second = core.create_snapshot(end, b"state@%d" % end)
    assert storage.snapshot_ids() == [first, second]
    assert storage.log_start_offset == middle  # moved up to the previous snapshot
    log_before = [b[:4] for b in storage.batches()]
    epoch = core.epoch
    storage.close()

    storage = FileRaftStorage.open(path)
    assert storage.snapshot_ids() == [first, second]
    assert (storage.log_start_offset, storage.log_end_offset) == (middle, end)
    assert [b[:4] for b in storage.batches()] == log_before
    assert storage.snapshot_bytes(second) == b"state@%d" % end
    driver = Driver(storage, driver.election_state)
    core = RaftCore(1, [1], storage, driver.election_state, RaftConfig(), random.Random(1),
                    100)
    driver.drive(core, 100)
    assert driver.loaded == [second]
    assert core.role == "leader" and core.epoch > epoch
    last = core.propose([b"e"], 110)
    driver.drive(core, 110)
    assert last >= end and core.high_watermark == storage.log_end_offset == last + 1
    assert [r.value for b in driver.commits if not b.control
            for r in codec.decode_batches(b.data)[0].records] == [b"e"]
    storage.close()
