"""`FileRaftStorage`: the Raft core's `RaftStorage` on disk, in Kafka's layout for the
metadata partition (kafka-facts §4.1, §4.4): one partition directory (e.g.
`<metadata.log.dir>/__cluster_metadata-0`) holding a `kraftcore.log.Log` (segments, indexes,
`leader-epoch-checkpoint` and the offset checkpoints) and the snapshot files
`<endOffset>-<epoch>.checkpoint` of a `SnapshotDirectory`. It is the adapter between the
two layers below the runtime: the log knows nothing of Raft, the core nothing of files.

It keeps the semantics of the simulator's `MemoryStorage` (same results, same exceptions for
the same misuse); see `kraftcore.raft.storage` for the contract. What it adds:

* Durability is the Log's: appends are durable after `flush()` (the driver's answer to a
  Ready's `flush_offset`), or at once with `fsync="always"`. Truncations, log start moves,
  `truncate_fully_and_start_at` and snapshot writes and freezes are durable when they
  return. A crash keeps what the Log's recovery keeps (never a torn batch).
* The Log's high watermark is pinned to the log start offset: the Raft core owns the high
  watermark, and a Log watermark above the log start would make the Log refuse truncations
  the core is entitled to.
* Opening recovers the directory (KafkaMetadataLog's rules, kafka-facts §4.4): leftover
  `.part` / `.deleted` snapshot files are deleted; snapshots ending below the log start
  offset are deleted; a log start offset above 0 needs a snapshot at or above it (else
  `LogError`: the directory lost data); when the newest snapshot is ahead of the log (a
  higher epoch than the log's last, or the same epoch and an end offset past the log end),
  the log is truncated fully and restarts at the snapshot's end offset. If the log start
  offset is not a snapshot's end offset (its checkpoint was lost, so the Log fell back to
  its first segment's base), it moves up to the first snapshot inside the log, so that the
  log start is always a snapshot's end offset.
* `clean(now_ms, ...)` is Kafka's snapshot retention (`maybeClean`).
"""

import bisect
import dataclasses
import logging

from kraftcore import codec
from kraftcore.errors import (CorruptRecordError, InvalidOffsetError, KraftcoreError, LogError,
                              OffsetOutOfRangeError)
from kraftcore.log.log import Log, RecoveryReport
from kraftcore.log.snapshots import SnapshotDirectory, SnapshotWriter
from kraftcore.raft.control import SNAPSHOT_HEADER, decode_control_record
from kraftcore.log import quorum_state
from kraftcore.layout import BATCH_HEAD, CONTROL_MASK, LOG_OVERHEAD_BYTES
from kraftcore.limits import RAFT_BATCH_BYTES_MAX

log = logging.getLogger("kraftcore.raft")
from kraftcore.raft.storage import (ElectionStore, RaftStorage,
                                    SnapshotDownload, check_leader_append)
from kraftcore.raft.types import CommittedBatch
from kraftcore.types import SnapshotId

# The metadata log's settings that differ from a `Log`'s defaults: the Raft driver decides
# when to fsync (Ready.flush_offset), a batch may be as large as KafkaRaftClient's
# MAX_BATCH_SIZE_BYTES, which is also the metadata log's max.message.bytes (§4.3), and
# zeros are written 256 KiB ahead of the data, so that the driver's fsync after each group
# of appends flushes data blocks only (`prefill_bytes`, kraftcore.log.segment).
METADATA_LOG_SETTINGS = {"fsync": "never", "batch_bytes_max": RAFT_BATCH_BYTES_MAX,
                         "prefill_bytes": 256 * 1024}
# Kafka's defaults for metadata.max.retention.bytes and metadata.max.retention.ms (§4.3).
RETENTION_BYTES_DEFAULT = 100 * 1024 * 1024
RETENTION_MS_DEFAULT = 7 * 24 * 3600 * 1000
# How much `read_batches` asks the Log for at a time (a larger batch still comes whole).
_READ_CHUNK_BYTES = 1024 * 1024

_new = tuple.__new__


def _snapshot_id(snapshot_id):
    return snapshot_id if type(snapshot_id) is SnapshotId else SnapshotId(*snapshot_id)


@dataclasses.dataclass
class StorageRecovery:
    """What `FileRaftStorage.open` found and did, besides the Log's own recovery."""

    log: RecoveryReport = None
    deleted_files: list = dataclasses.field(default_factory=list)  # .part / .deleted leftovers
    skipped_files: list = dataclasses.field(default_factory=list)  # unparsable *.checkpoint
    deleted_snapshots: list = dataclasses.field(default_factory=list)  # below the log start
    truncated_fully_at: SnapshotId = None  # the newest snapshot was ahead of the log
    log_start_moved_to: SnapshotId = None  # the log start was not a snapshot's end


def _log_truncation(storage, offset):
    log.info("%s: truncating the metadata log from end offset %s to %s: its tail "
             "diverged from the leader's", storage._log.path, storage._log.log_end_offset,
             offset)


class FileRaftStorage(RaftStorage):
    """A `RaftStorage` over a Log and its snapshot files in one partition directory; open
    one with `FileRaftStorage.open(path, **log_settings)`. Not thread-safe: one driver
    thread calls it, as with the core itself."""

    def __init__(self, log, snapshots):
        """Use `open()`: it also recovers the directory."""
        self._log = log
        self._snapshots = snapshots
        self._start_epoch = 0  # the epoch of the snapshot at the log start (0: none)
        self.recovery = StorageRecovery(log=log.recovery)
        # records appended as leader / from fetches since open (the node's metrics)
        self.records_appended = 0
        self.records_fetched = 0

    @classmethod
    def open(cls, path, *, clock=None, random_suffix=None, **log_settings):
        """Open (or create) the storage in partition directory `path` and recover it.
        `log_settings` are `LogConfig` fields overriding `METADATA_LOG_SETTINGS`
        (retention settings are refused: segments go only by moving the log start to a
        snapshot, see `clean`). `random_suffix` names `.part` files (tests inject it)."""
        for name in ("retention_bytes", "retention_ms"):
            if log_settings.get(name, -1) != -1:
                raise ValueError(f"{name} does not apply to the metadata log: its segments "
                                 "are deleted only below a snapshot (use clean())")
        log = Log.open(path, clock=clock, **{**METADATA_LOG_SETTINGS, **log_settings})
        try:
            storage = cls(log, SnapshotDirectory(log.path, random_suffix=random_suffix))
            storage._recover()
        except BaseException:
            try:
                log.close()
            except LogError:
                pass
            raise
        return storage

    def _recover(self):
        log, snapshots, report = self._log, self._snapshots, self.recovery
        report.deleted_files = list(snapshots.deleted_files)
        report.skipped_files = list(snapshots.skipped_files)
        log.update_high_watermark(log.log_start_offset)
        start = log.log_start_offset
        for old in snapshots.ids():
            if old.end_offset < start:
                snapshots.delete(old)
                report.deleted_snapshots.append(old)
        ids = snapshots.ids()
        if start > 0 and not ids:
            raise LogError(
                f"{log.path}: the log starts at offset {start} but no snapshot ends at or "
                "above it, so the records below it are lost; restore the snapshot files or "
                "remove the directory so that this node fetches everything from the leader")
        self._start_epoch = self._epoch_of_snapshot_at(start)
        latest = snapshots.latest()
        if latest is not None:
            leo = log.log_end_offset
            last_epoch = log.latest_epoch if leo > log.log_start_offset else self._start_epoch
            if latest.epoch > last_epoch or (latest.epoch == last_epoch
                                             and latest.end_offset > leo):
                self.truncate_fully_and_start_at(latest)
                report.truncated_fully_at = latest
        start = log.log_start_offset
        if start > 0 and all(sid.end_offset != start for sid in snapshots.ids()):
            inside = [sid for sid in snapshots.ids()
                      if start < sid.end_offset <= log.log_end_offset]
            if inside:
                self.advance_log_start_offset(inside[0])
                report.log_start_moved_to = inside[0]

    def _epoch_of_snapshot_at(self, offset):
        for sid in self._snapshots.ids():
            if sid.end_offset == offset:
                return sid.epoch
        return 0

    # ------------------------------------------------------------------ log

    @property
    def log(self):
        """The underlying `Log` (for tools and metrics; change it only through this)."""
        return self._log

    @property
    def snapshots(self):
        """The `SnapshotDirectory` (for tools and metrics; change it only through this)."""
        return self._snapshots

    @property
    def log_start_offset(self):
        return self._log.log_start_offset

    @property
    def log_end_offset(self):
        return self._log.log_end_offset

    def last_fetched_epoch(self):
        log = self._log
        if log.log_end_offset > log.log_start_offset:
            return log.latest_epoch
        return self._start_epoch

    def end_offset_for_epoch(self, epoch):
        return self._log.end_offset_for_epoch(epoch)

    def epoch_for_offset(self, offset):
        """The epoch of the batch holding `offset` (from the leader-epoch cache); for
        `log_start_offset - 1` the epoch of the snapshot at the log start; else -1."""
        log = self._log
        start = log.log_start_offset
        if start <= offset < log.log_end_offset:
            entries = log.epoch_entries()
            slot = bisect.bisect_right([o for _, o in entries], offset) - 1
            return entries[slot][0] if slot >= 0 else -1
        if offset == start - 1 >= 0:
            return self._start_epoch
        return -1

    def append_as_leader(self, batch, epoch):
        batch, _, _, delta = check_leader_append(batch, epoch, self._log.latest_epoch)
        if type(batch) is not bytes:
            batch = bytes(batch)
        base = self._log.append(batch, leader_epoch=epoch)
        self.records_appended += delta + 1
        return base, base + delta

    def append_as_follower(self, batches):
        base = self._log.append_as_follower(batches)
        last = self._log.log_end_offset - 1
        self.records_fetched += last - base + 1
        return base, last

    def truncate_to(self, offset):
        """Remove every batch holding an offset >= `offset` (a batch holding `offset` goes
        whole; the log end never goes below the log start). InvalidOffsetError below the
        log start offset; nothing happens at or past the log end offset."""
        log = self._log
        start = log.log_start_offset
        if offset < start:
            raise InvalidOffsetError(
                f"cannot truncate to offset {offset}, below the log start offset {start}")
        if offset >= log.log_end_offset:
            return
        _log_truncation(self, offset)
        if log.segment_base_offsets[0] < start:
            # The first batch may straddle the log start (it began below the snapshot the
            # log start moved to). Removing it empties the log, which restarts at the log
            # start; the Log itself refuses to cut below its log start.
            first = log.read(start, 1)
            if first.first_offset < start and offset < first.next_offset:
                log.truncate_fully_and_start_at(start)
                return
        log.truncate_to(offset)

    def read(self, offset, bytes_max):
        """Whole batches from the one holding `offset`, up to `bytes_max` (the first whole
        even if larger), from one segment at most (as Kafka reads)."""
        return bytes(self._log.read(offset, bytes_max).records)

    def read_batches(self, start_offset, end_offset):
        log = self._log
        start, leo = log.log_start_offset, log.log_end_offset
        if not start <= start_offset <= end_offset <= leo:
            bad = end_offset if start <= start_offset <= end_offset else start_offset
            raise OffsetOutOfRangeError(bad, start, leo)
        found = []
        offset = start_offset
        unpack = BATCH_HEAD.unpack_from
        while offset < end_offset:
            result = log.read(offset, _READ_CHUNK_BYTES)
            view = result.records
            total = len(view)
            if not total or result.next_offset <= offset:
                break
            pos = 0
            while pos < total:
                base, length, epoch, _, _, attributes, delta = unpack(view, pos)
                if base >= end_offset:
                    return found
                size = length + LOG_OVERHEAD_BYTES
                found.append(_new(CommittedBatch, (
                    base, base + delta, epoch, bool(attributes & CONTROL_MASK),
                    bytes(view[pos:pos + size]))))
                pos += size
            offset = result.next_offset
        return found

    # ------------------------------------------------------------------ snapshots

    def latest_snapshot_id(self):
        return self._snapshots.latest()

    def earliest_snapshot_id(self):
        return self._snapshots.earliest()

    def snapshot_size(self, snapshot_id):
        return self._snapshots.size(snapshot_id)

    def read_snapshot(self, snapshot_id, position, bytes_max):
        """Up to `bytes_max` from `position`; None if there is no such snapshot. A position
        outside [0, size] is a ValueError."""
        return self._snapshots.read(snapshot_id, position, bytes_max)

    def begin_snapshot_download(self, snapshot_id):
        """A `SnapshotWriter` into a `.part` file; `freeze()` makes it a durable snapshot
        (False, keeping the stored one, if that id exists already)."""
        return self._snapshots.begin(_snapshot_id(snapshot_id))

    def write_snapshot(self, snapshot_id, data):
        """Store a complete snapshot, durably; its end offset must lie in
        [log start offset, log end offset] (InvalidOffsetError). Returns False (and keeps
        the stored one) when a snapshot of that id exists already."""
        snapshot_id = _snapshot_id(snapshot_id)
        log = self._log
        if not log.log_start_offset <= snapshot_id.end_offset <= log.log_end_offset:
            raise InvalidOffsetError(
                f"cannot write snapshot {snapshot_id}: its end offset is outside the log "
                f"[{log.log_start_offset}, {log.log_end_offset}]")
        return self._snapshots.write(snapshot_id, data)

    def truncate_fully_and_start_at(self, snapshot_id):
        """Drop every segment and epoch; the log restarts empty (and durably) at the
        snapshot's end offset, then the snapshots older than it are deleted."""
        snapshot_id = _snapshot_id(snapshot_id)
        log.info("%s: the metadata log restarts at snapshot %s (end offset %s, epoch %s): "
                 "the log end offset was %s", self._log.path, snapshot_id,
                 snapshot_id.end_offset, snapshot_id.epoch, self._log.log_end_offset)
        self._log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._start_epoch = snapshot_id.epoch
        self._snapshots.delete_before(snapshot_id)

    def advance_log_start_offset(self, snapshot_id):
        """Move the log start offset to a stored snapshot's end offset, which must be above
        the log start and at most the log end offset (InvalidOffsetError). Segments wholly
        below it are deleted (records of the segment holding it stay on disk, unreadable),
        then the older snapshots."""
        snapshot_id = _snapshot_id(snapshot_id)
        end = snapshot_id.end_offset
        log = self._log
        if snapshot_id not in self._snapshots:
            raise InvalidOffsetError(
                f"cannot move the log start offset to snapshot {snapshot_id}: no such "
                "snapshot is stored")
        if not log.log_start_offset < end <= log.log_end_offset:
            raise InvalidOffsetError(
                f"cannot move the log start offset to {end}: it must be above "
                f"{log.log_start_offset} and at most the log end offset {log.log_end_offset}")
        log.update_high_watermark(end)  # the Log moves its start only up to its watermark
        log.advance_log_start_offset(end)
        self._start_epoch = snapshot_id.epoch
        self._snapshots.delete_before(snapshot_id)

    def clean(self, now_ms, retention_bytes=RETENTION_BYTES_DEFAULT,
              retention_ms=RETENTION_MS_DEFAULT):
        """Kafka's snapshot retention (`maybeClean`, kafka-facts §4.4): take the snapshots
        oldest first, never the newest. While the log and the snapshots together hold more
        than `retention_bytes`, or the oldest snapshot's timestamp (its header's
        LastContainedLogTimestamp, see `SnapshotDirectory.timestamp_ms`) is more than
        `retention_ms` before `now_ms`, move the log start offset up to the next snapshot's
        end offset (deleting the segments wholly below it) and delete the older snapshot.
        A negative limit disables its rule. A next snapshot past the log end offset (a
        download not yet installed) stops the cleaning. Returns the deleted ids, oldest
        first."""
        log, snapshots = self._log, self._snapshots
        removed = []
        while True:
            ids = snapshots.ids()
            if len(ids) < 2:
                break
            oldest, following = ids[0], ids[1]
            too_big = (retention_bytes >= 0
                       and log.size_bytes + snapshots.total_bytes() > retention_bytes)
            too_old = False
            if not too_big and retention_ms >= 0:
                timestamp = snapshot_timestamp_ms(snapshots, oldest)
                too_old = timestamp is not None and now_ms - timestamp > retention_ms
            if not (too_big or too_old) or following.end_offset > log.log_end_offset:
                break
            if following.end_offset > log.log_start_offset:
                self.advance_log_start_offset(following)
            else:  # the same end offset in a later epoch: only the older file goes
                snapshots.delete_before(following)
            removed.append(oldest)
        return removed

    # ------------------------------------------------------------------ driver

    @property
    def durable_end_offset(self):
        """Every offset below this is on disk (the Log's recovery point)."""
        return self._log.recovery_point

    @property
    def size_bytes(self):
        """The bytes of the log's segments and of the snapshots together (what retention
        measures)."""
        return self._log.size_bytes + self._snapshots.total_bytes()

    def flush(self):
        """Make everything written so far durable (a Ready's flush_offset); returns the
        durable end offset."""
        return self._log.flush()

    def close(self):
        """Abort open snapshot downloads (their part files are deleted) and close the Log
        cleanly (synced, checkpoints and the clean-shutdown marker written)."""
        try:
            self._snapshots.close()
        finally:
            self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # ------------------------------------------------------------------ inspection

    def batches(self):
        """The readable batches, as `CommittedBatch` values, in offset order."""
        return self.read_batches(self._log.log_start_offset, self._log.log_end_offset)

    def epoch_entries(self):
        """The leader-epoch cache's `(epoch, start_offset)` entries."""
        return self._log.epoch_entries()

    def snapshot_ids(self):
        """The ids of the complete snapshots, oldest first."""
        return self._snapshots.ids()

    def snapshot_bytes(self, snapshot_id):
        """A complete snapshot's bytes, None if there is no such snapshot."""
        return self._snapshots.read_all(snapshot_id)

    def open_downloads(self):
        """The snapshot downloads neither frozen nor aborted."""
        return self._snapshots.open_writers()

    def __repr__(self):
        log = self._log
        return (f"FileRaftStorage({log.path!r}, log=[{log.log_start_offset}, "
                f"{log.log_end_offset}), durable_end={log.recovery_point}, "
                f"snapshots={self._snapshots.ids()})")


class FileElectionStore(ElectionStore):
    """The `quorum-state` file in `directory` (Kafka's format, `kraftcore.log.quorum_state`),
    written at `data_version` 1 (kraft.version 1: votedDirectoryId, no voter list)."""

    DATA_VERSION = 1

    def __init__(self, directory):
        self.directory = directory

    def read(self):
        return quorum_state.read(self.directory)

    def write(self, state):
        quorum_state.write(self.directory, state, self.DATA_VERSION)

    def __repr__(self):
        return f"FileElectionStore({self.directory!r})"


# A SnapshotWriter is what the core calls a download (the same calls, duck-typed: the log
# knows nothing of Raft).
SnapshotDownload.register(SnapshotWriter)


def snapshot_timestamp_ms(snapshots, snapshot_id):
    """The snapshot's time for retention, as Kafka reads it: the LastContainedLogTimestamp
    of the SnapshotHeaderRecord in its first batch (kafka-facts §4.4). A snapshot without a
    readable header falls back to its file's modification time. None if there is no such
    snapshot."""
    first = snapshots.first_batch(snapshot_id)
    if first is not None:
        try:
            batches = codec.decode_batches(first)
            if len(batches) == 1 and batches[0].is_control and batches[0].records:
                record = batches[0].records[0]
                type_id, _, header = decode_control_record(record.key, record.value)
                if type_id == SNAPSHOT_HEADER:
                    return header.last_contained_log_timestamp
        except (CorruptRecordError, KraftcoreError, ValueError):
            pass
    return snapshots.mtime_ms(snapshot_id)
