"""What only `MemoryStorage` has: its durability model, `crash()` (a simulated power loss,
see `kraftcore.raft.memory`): the unflushed suffix of whole batches is lost, truncations,
log start moves, snapshot writes and freezes survive without a flush, open downloads do
not. The contract it shares with `FileRaftStorage` is in `test_storage_contract.py`."""

import pytest

from kraftcore.raft.memory import MemoryStorage
from kraftcore.types import SnapshotId

from tests.harness.storage import Storages, batch, follower_log


@pytest.fixture
def memory(tmp_path):
    return Storages("memory", tmp_path)


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


def test_crash_after_a_truncation_keeps_the_truncation(memory):
    storage = follower_log(memory, (2, 1), (2, 1), (2, 2))
    storage.flush()
    storage.truncate_to(3)
    storage.append_as_follower(batch(3, 2, 3))
    storage.crash()
    assert storage.log_end_offset == 2
    assert [b[:2] for b in storage.batches()] == [(0, 1)]


def test_crash_keeps_a_frozen_download_and_a_written_snapshot_without_a_flush(memory):
    storage = follower_log(memory, (2, 1))
    sid = SnapshotId(10, 3)
    download = storage.begin_snapshot_download(sid)
    download.append(b"abcde")
    download.freeze()
    storage.write_snapshot(SnapshotId(1, 1), b"one")
    assert storage.durable_end_offset == 0
    storage.crash()
    assert storage.snapshot_ids() == [SnapshotId(1, 1), sid]
    assert storage.snapshot_bytes(sid) == b"abcde"
    assert storage.log_end_offset == 0  # the log itself was never flushed


def test_crash_loses_open_and_aborted_downloads():
    storage = MemoryStorage()
    lost = storage.begin_snapshot_download(SnapshotId(4, 1))
    lost.append(b"x")
    aborted = storage.begin_snapshot_download(SnapshotId(5, 1))
    aborted.abort()
    storage.crash()
    assert not lost.is_open
    with pytest.raises(ValueError):
        lost.freeze()
    assert storage.snapshot_ids() == [] and storage.open_downloads() == []


def test_a_crash_keeps_a_log_restart_but_not_the_appends_after_it(memory):
    storage = follower_log(memory, (2, 1), (2, 2))
    download = storage.begin_snapshot_download(SnapshotId(20, 7))
    download.append(b"new")
    download.freeze()
    storage.truncate_fully_and_start_at(SnapshotId(20, 7))
    assert storage.append_as_follower(batch(2, 20, 8)) == (20, 21)
    storage.crash()  # the restart is durable, the append was not
    assert (storage.log_start_offset, storage.log_end_offset) == (20, 20)
    assert storage.durable_end_offset == 20
    assert storage.last_fetched_epoch() == 7
    assert storage.snapshot_ids() == [SnapshotId(20, 7)]


def test_crash_below_a_moved_log_start_restarts_the_log_at_the_snapshot(memory):
    storage = follower_log(memory, (3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(5, 2), b"s")
    storage.advance_log_start_offset(SnapshotId(5, 2))
    assert storage.durable_end_offset == 0
    storage.crash()
    assert (storage.log_start_offset, storage.log_end_offset,
            storage.durable_end_offset) == (5, 5, 5)
    assert storage.batches() == [] and storage.last_fetched_epoch() == 2
    assert storage.epoch_entries() == []
