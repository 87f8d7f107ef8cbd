"""What only `FileRaftStorage` does: its files in the partition directory, startup
recovery (kafka-facts §4.4), snapshot retention (`clean`), and a real `RaftCore` over it
surviving a restart. The `RaftStorage` contract it shares with `MemoryStorage` is checked
in tests/raft/test_storage_contract.py."""

import os

import pytest

from kraftcore import codec
from kraftcore.errors import LogError
from kraftcore.log import Log
from kraftcore.log.snapshots import SnapshotDirectory, file_name
from kraftcore.raft.control import (SnapshotFooterRecord, SnapshotHeaderRecord,
                                    encode_control_batch)
from kraftcore.runtime.raft_storage import FileRaftStorage, snapshot_timestamp_ms
from kraftcore.types import SnapshotId

from tests.harness.quorum import Cluster, StateMachine, TracingStorage
from tests.harness.storage import PARTITION, Storages, batch, follower_log, log_state, state

pytestmark = pytest.mark.smoke


@pytest.fixture
def files(tmp_path):
    made = Storages("file", tmp_path)
    yield made
    made.close_all()


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
    before = log_state(storage)[:5]
    path = storage.log.path
    storage.close()
    SnapshotDirectory(path).write(sid, b"s")
    storage = files.open(path)
    assert storage.recovery.truncated_fully_at is None
    assert log_state(storage)[:5] == before


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

class RecordingStateMachine(StateMachine):
    """Also keeps every committed batch it is given, in order."""

    def __init__(self):
        super().__init__()
        self.commits = []

    def on_ready(self, ready, storage, now_ms):
        self.commits += ready.commits
        super().on_ready(ready, storage, now_ms)


def data_values(batches):
    return [r.value for b in batches if not b.control
            for r in codec.decode_batches(b.data)[0].records]


def test_a_raft_core_survives_a_restart_on_files(tmp_path):
    c = Cluster(voters=(1,), directory=tmp_path,
                state_machine=lambda node_id, now_ms: RecordingStateMachine())
    try:
        node = c.nodes[1]
        assert c.run_until_leader() == 1
        assert node.election_state.leader_id == 1  # in the quorum-state file
        for values in ([b"a"], [b"b", b"c"], [b"d"]):
            c.propose(1, values)
            c.run(10)
        storage, core = node.storage, node.core
        assert type(storage).__mro__[1:3] == (TracingStorage, FileRaftStorage)
        committed = node.sm.commits
        assert data_values(committed) == [b"a", b"b", b"c", b"d"]
        end = committed[-1].last_offset + 1
        assert core.high_watermark == end == storage.log_end_offset
        assert storage.durable_end_offset == end
        middle = next(b for b in committed if b.data and not b.control
                      and b.base_offset > 1).last_offset + 1
        first = c.snapshot(1, middle)
        second = c.snapshot(1, end)
        assert storage.snapshot_ids() == [first, second]
        assert storage.log_start_offset == middle  # moved up to the previous snapshot
        log_before = [b[:4] for b in storage.batches()]
        second_bytes = storage.snapshot_bytes(second)
        epoch = core.epoch
        c.stop(1)

        with FileRaftStorage.open(node.directory) as reopened:
            assert reopened.snapshot_ids() == [first, second]
            assert (reopened.log_start_offset, reopened.log_end_offset) == (middle, end)
            assert [b[:4] for b in reopened.batches()] == log_before
            assert reopened.snapshot_bytes(second) == second_bytes

        c.restart(1)
        assert node.storage is not storage and node.sm.loaded == [second]
        c.run_until_leader()
        assert node.core.epoch > epoch
        last = c.propose(1, [b"e"])
        c.run(10)
        assert last >= end and node.core.high_watermark == node.storage.log_end_offset == last + 1
        assert data_values(node.sm.commits) == [b"e"]  # the rest came in the snapshot
        assert [value for _, value in node.sm.values] == [b"a", b"b", b"c", b"d", b"e"]
    finally:
        c.close()
