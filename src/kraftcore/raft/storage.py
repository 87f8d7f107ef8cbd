"""What a Raft node keeps across restarts, as interfaces: `RaftStorage`, through which the
core reads and changes its log and snapshots, and `ElectionStore`, where a driver keeps the
core's election state. `kraftcore.raft.memory` implements both in memory (the simulator,
tests, `kraftcore.controller.local`); the runtime implements them on disk
(`kraftcore.runtime.raft_storage`: a `kraftcore.log.Log`, snapshot files, `quorum-state`).

Semantics every implementation keeps:

* Writes (`append_*`, `truncate_to`, snapshot downloads) take effect at once for reads, but
  are durable only after the driver flushes (the `flush_offset` of a `Ready`). A crash may
  lose any suffix that was not flushed, never anything flushed, never part of a batch.
* `log_start_offset <= log_end_offset`; offsets are contiguous; the leader-epoch cache
  changes with appends and truncations (kafka-facts §3.8, `LeaderEpochFileCache`).
* A snapshot id (end offset, epoch) names a complete, immutable snapshot; the log start
  offset only ever moves to a snapshot's end offset (KIP-630).
* Bad batches (`append_as_follower`) raise `CorruptRecordError` or `InvalidAppendError`
  and leave the log unchanged.
"""

import abc

from kraftcore.errors import InvalidAppendError
from kraftcore.layout import BATCH_HEAD, BATCH_HEADER_BYTES, INT32_MAX, LOG_OVERHEAD_BYTES, MAGIC


def check_leader_append(batch, epoch, latest_epoch):
    """The checks every `append_as_leader` makes: `epoch` an int32 not below the log's
    `latest_epoch`, `batch` exactly one whole v2 batch. Returns `(batch, length, attributes,
    last_offset_delta)` with `batch` as bytes or a byte memoryview; raises
    `InvalidAppendError`."""
    if type(epoch) is not int or not 0 <= epoch <= INT32_MAX:
        raise InvalidAppendError(f"leader epoch must be an int32 >= 0, got {epoch!r}")
    if epoch < latest_epoch:
        raise InvalidAppendError(
            f"leader epoch {epoch} is below the log's latest epoch {latest_epoch}")
    if type(batch) is not bytes:
        batch = memoryview(batch).cast("B")
    size = len(batch)
    if size < BATCH_HEADER_BYTES:
        raise InvalidAppendError(f"{size} bytes cannot hold a record batch")
    _, length, _, magic, _, attributes, delta = BATCH_HEAD.unpack_from(batch, 0)
    if length + LOG_OVERHEAD_BYTES != size or magic != MAGIC or delta < 0:
        raise InvalidAppendError(
            f"append_as_leader takes exactly one whole v2 record batch ({size} bytes given, "
            f"the header declares {length + LOG_OVERHEAD_BYTES}, magic {magic})")
    return batch, length, attributes, delta


class ElectionStore(abc.ABC):
    """Where a node's election state (`kraftcore.types.ElectionState`: epoch, vote, leader)
    survives a restart. The driver reads it once to start the core, and writes each Ready's
    `election_state` before anything else of that Ready (`kraftcore.raft.types.Ready`)."""

    @abc.abstractmethod
    def read(self):
        """The stored state, or None on a node that never stored one."""

    @abc.abstractmethod
    def write(self, state):
        """Replace the stored state, atomically and durably, before returning."""


class SnapshotDownload(abc.ABC):
    """A snapshot being received in chunks (FetchSnapshot); invisible until `freeze()`."""

    snapshot_id = None

    @property
    @abc.abstractmethod
    def size(self):
        """Bytes received so far."""

    @abc.abstractmethod
    def append(self, data):
        """Add the next chunk."""

    @abc.abstractmethod
    def freeze(self):
        """Make the snapshot complete and durable under its id."""

    @abc.abstractmethod
    def abort(self):
        """Discard what was received."""


class RaftStorage(abc.ABC):
    # ------------------------------------------------------------------ log

    @property
    @abc.abstractmethod
    def log_start_offset(self):
        """The first offset in the log (a snapshot's end offset, or 0)."""

    @property
    @abc.abstractmethod
    def log_end_offset(self):
        """The offset the next append gets."""

    @abc.abstractmethod
    def last_fetched_epoch(self):
        """The epoch of the last batch in the log; when the log is empty, the epoch of the
        snapshot at the log start; 0 when there is neither."""

    @abc.abstractmethod
    def end_offset_for_epoch(self, epoch):
        """`(epoch', end_offset)` with `epoch'` the largest epoch <= `epoch` in the log and
        `end_offset` where it ends (the next epoch's start, or the log end offset); (-1, -1)
        when `epoch` is above every epoch or the log has none."""

    @abc.abstractmethod
    def epoch_for_offset(self, offset):
        """The epoch of the batch holding `offset`, -1 if unknown."""

    @abc.abstractmethod
    def append_as_leader(self, batch, epoch):
        """Append one encoded batch, giving it offsets from the log end offset and stamping
        `epoch`; returns `(base_offset, last_offset)`."""

    @abc.abstractmethod
    def append_as_follower(self, batches):
        """Append batches that carry their offsets and epochs; the first must start at the
        log end offset. Returns `(base_offset, last_offset)`."""

    @abc.abstractmethod
    def truncate_to(self, offset):
        """Remove every batch at or after `offset`."""

    @abc.abstractmethod
    def read(self, offset, bytes_max):
        """Whole batches from the one holding `offset`, up to `bytes_max` (the first is
        returned whole even if larger); empty at the log end offset."""

    @abc.abstractmethod
    def read_batches(self, start_offset, end_offset):
        """The batches holding offsets in [start_offset, end_offset) as
        `kraftcore.raft.types.CommittedBatch` values, in order."""

    # ------------------------------------------------------------------ snapshots

    @abc.abstractmethod
    def latest_snapshot_id(self):
        """The newest complete snapshot's SnapshotId, or None."""

    @abc.abstractmethod
    def earliest_snapshot_id(self):
        """The oldest complete snapshot's SnapshotId, or None."""

    @abc.abstractmethod
    def snapshot_size(self, snapshot_id):
        """The size in bytes of a complete snapshot, None if there is no such snapshot."""

    @abc.abstractmethod
    def read_snapshot(self, snapshot_id, position, bytes_max):
        """Up to `bytes_max` of a snapshot's bytes from `position` (not batch aligned)."""

    @abc.abstractmethod
    def begin_snapshot_download(self, snapshot_id):
        """A `SnapshotDownload` for a snapshot fetched from the leader."""

    @abc.abstractmethod
    def write_snapshot(self, snapshot_id, data):
        """Store a complete snapshot made by the local state machine, durably."""

    @abc.abstractmethod
    def truncate_fully_and_start_at(self, snapshot_id):
        """Drop the whole log and restart it empty at `snapshot_id.end_offset` (after a
        downloaded snapshot that ends past the log)."""

    @abc.abstractmethod
    def advance_log_start_offset(self, snapshot_id):
        """Move the log start offset up to a stored snapshot's end offset, dropping the
        batches and the older snapshots below it."""
