"""The `RaftStorage` and `ElectionStore` contracts (`kraftcore.raft.storage`), checked on
every implementation: the in-memory `MemoryStorage` / `MemoryElectionStore` of
`kraftcore.raft.memory` and the on-disk `FileRaftStorage` / `FileElectionStore` of
`kraftcore.runtime.raft_storage`. The same calls give the same observable state and the
same errors on each. What only one of them does lives beside it: `test_memory_storage.py`
(the durability model of `crash()`) and `tests/runtime/test_raft_storage.py` (recovery
of a directory, retention, a core on files)."""

import pytest

from kraftcore import codec
from kraftcore.errors import (CorruptRecordError, InvalidAppendError, InvalidOffsetError,
                              OffsetOutOfRangeError)
from kraftcore.raft.memory import MemoryElectionStore
from kraftcore.raft.storage import ElectionStore, RaftStorage, SnapshotDownload
from kraftcore.raft.types import CommittedBatch
from kraftcore.runtime.raft_storage import FileElectionStore
from kraftcore.types import ElectionState, SnapshotId, Uuid

from tests.harness.storage import KINDS, Storages, batch, follower_log, log_state, state

pytestmark = pytest.mark.smoke


@pytest.fixture(params=KINDS)
def storages(request, tmp_path):
    made = Storages(request.param, tmp_path)
    yield made
    made.close_all()


# ====================================================================== RaftStorage

def test_implements_the_interface(storages):
    storage = storages.new()
    assert isinstance(storage, RaftStorage)
    download = storage.begin_snapshot_download(SnapshotId(5, 1))
    assert isinstance(download, SnapshotDownload)
    download.abort()
    assert (storage.log_start_offset, storage.log_end_offset) == (0, 0)
    assert storage.durable_end_offset == 0
    assert storage.last_fetched_epoch() == 0
    assert storage.end_offset_for_epoch(0) == (-1, -1)
    assert storage.read(0, 100) == b""
    assert storage.latest_snapshot_id() is None and storage.earliest_snapshot_id() is None


# ---------------------------------------------------------------------- leader appends

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
    assert [r.offset for d in decoded for r in d.records] == [0, 1, 2, 3, 4, 5]
    assert decoded[2].is_control and not decoded[0].is_control
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


# ---------------------------------------------------------------------- follower appends

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
                 batch(1, 2, 3) + batch(1, 2, 3), b"",
                 batch(1, 2, 2),  # the epoch goes back
                 batch(1, 2, 5) + batch(1, 3, 4)):  # ... within the append itself
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


def test_follower_append_of_a_flipped_crc_covered_byte_is_corrupt(storages):
    storage = follower_log(storages, (1, 1))
    before = state(storage)
    data = bytearray(batch(1, 1, 1))
    data[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        storage.append_as_follower(data)
    assert state(storage) == before


# ---------------------------------------------------------------------- truncation

def test_truncation(storages):
    storage = follower_log(storages, (3, 1), (3, 2), (3, 3))  # [0-2] [3-5] [6-8]
    storage.truncate_to(9)  # the log end: nothing to do
    storage.truncate_to(20)
    assert storage.log_end_offset == 9
    storage.truncate_to(7)  # mid-batch: the whole batch goes
    assert storage.log_end_offset == 6
    assert storage.epoch_entries() == [(1, 0), (2, 3)]
    assert storage.append_as_follower(batch(3, 6, 3)) == (6, 8)
    storage.truncate_to(6)  # on a batch boundary: exactly the batches from there go
    assert storage.log_end_offset == 6
    assert storage.epoch_entries() == [(1, 0), (2, 3)]
    storage.truncate_to(4)
    assert storage.log_end_offset == 3
    assert [b[:2] for b in storage.batches()] == [(0, 2)]
    assert storage.epoch_entries() == [(1, 0)]
    assert storage.end_offset_for_epoch(1) == (1, 3)
    assert storage.last_fetched_epoch() == 1
    storage.truncate_to(0)
    assert (storage.log_end_offset, storage.batches(), storage.epoch_entries()) == (0, [], [])
    assert storage.last_fetched_epoch() == 0
    # appends continue from the new end; a lower epoch is fine again after truncation
    assert storage.append_as_leader(batch(), 1) == (0, 1)


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


@pytest.mark.parametrize("offset", [4, 5])
def test_truncate_into_a_batch_straddling_the_log_start(storages, offset):
    storage = follower_log(storages, (3, 1), (3, 2))
    storage.write_snapshot(SnapshotId(4, 2), b"s")
    storage.advance_log_start_offset(SnapshotId(4, 2))
    assert [b[:2] for b in storage.batches()] == [(3, 5)]
    storage.truncate_to(offset)
    assert (storage.log_start_offset, storage.log_end_offset) == (4, 4)
    assert storage.batches() == [] and storage.epoch_entries() == []
    assert storage.last_fetched_epoch() == 2
    assert storage.snapshot_ids() == [SnapshotId(4, 2)]
    assert storage.append_as_follower(batch(2, 4, 3)) == (4, 5)


# ---------------------------------------------------------------------- epochs and reads

def test_end_offset_for_epoch_and_epoch_for_offset(storages):
    storage = follower_log(storages, (2, 1), (2, 1), (3, 3), (1, 6))  # 1@0, 3@4, 6@7
    assert [storage.end_offset_for_epoch(e) for e in (-1, 0, 1, 2, 3, 5, 6, 7)] == [
        (-1, -1), (0, 0), (1, 4), (1, 4), (3, 7), (3, 7), (6, 8), (-1, -1)]
    assert [storage.epoch_for_offset(o) for o in range(-1, 9)] == [
        -1, 1, 1, 1, 1, 3, 3, 3, 6, -1]
    assert storage.last_fetched_epoch() == 6


def test_read_takes_whole_batches_within_max_bytes(storages):
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


# ---------------------------------------------------------------------- snapshots

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


# ---------------------------------------------------------------------- restarts

def test_restart_keeps_the_log_the_epochs_and_the_log_start(storages):
    storage = follower_log(storages, (3, 1), (3, 2), (3, 3))
    storage.write_snapshot(SnapshotId(4, 2), b"four")
    storage.advance_log_start_offset(SnapshotId(4, 2))
    before = log_state(storage)
    storage = storages.restart(storage)
    assert log_state(storage) == before
    assert storage.durable_end_offset == storage.log_end_offset == 9
    assert storage.last_fetched_epoch() == 3
    assert storage.epoch_for_offset(3) in (-1, 2) and storage.epoch_for_offset(4) == 2


# ====================================================================== ElectionStore

class ElectionStores:
    """Builds election stores of one kind; `restart(store)` gives the store a restarted
    node reads (memory: the same one, whose writes are durable at once)."""

    def __init__(self, kind, tmp_path):
        self.kind = kind
        self.tmp_path = tmp_path

    def new(self):
        if self.kind == "memory":
            return MemoryElectionStore()
        directory = self.tmp_path / "__cluster_metadata-0"
        directory.mkdir(exist_ok=True)
        return FileElectionStore(str(directory))

    def restart(self, store):
        if self.kind == "memory":
            return store
        return FileElectionStore(store.directory)


@pytest.fixture(params=KINDS)
def election_stores(request, tmp_path):
    return ElectionStores(request.param, tmp_path)


ELECTION_STATES = [
    ElectionState(0),
    ElectionState(3, voted_id=2),
    ElectionState(4, leader_id=1),
    ElectionState(5, leader_id=2, voted_id=2),
    ElectionState(6, leader_id=3, voted_id=1),
    ElectionState(2**31 - 2, voted_id=0, voted_directory_id=Uuid.from_ints(7, 9)),
]


def test_an_election_store_starts_empty(election_stores):
    store = election_stores.new()
    assert isinstance(store, ElectionStore)
    assert store.read() is None
    assert election_stores.restart(store).read() is None


@pytest.mark.parametrize("election", ELECTION_STATES,
                         ids=lambda e: f"epoch{e.epoch}-leader{e.leader_id}-voted{e.voted_id}")
def test_an_election_store_gives_back_what_was_written_after_a_restart(election_stores,
                                                                       election):
    store = election_stores.new()
    store.write(election)
    assert store.read() == election
    assert election_stores.restart(store).read() == election


def test_each_write_replaces_the_stored_state(election_stores):
    store = election_stores.new()
    for election in ELECTION_STATES:
        store.write(election)
        assert store.read() == election
    store.write(ELECTION_STATES[1])  # back to a lower epoch: the store does not judge
    assert election_stores.restart(store).read() == ELECTION_STATES[1]
