"""Raft's own storage in memory: `MemoryStorage` (a `RaftStorage`: a node's log and snapshots)
and `MemoryElectionStore` (an `ElectionStore`). The simulator, the tests and
`kraftcore.controller.local` run the core over them.

It owns, for one simulated node: the record batches of its log (real Kafka v2 batches, one
immutable `bytes` object each, kept as `CommittedBatch` tuples with a parallel list of base
offsets for bisection), the leader-epoch cache (`kraftcore.epochs.LeaderEpochCache`),
the log start and end offsets, and the complete snapshots (SnapshotId -> bytes) with the
downloads in progress. No clocks, no randomness, no files: the same calls give the same
state.

Durability model (what a simulated power loss, `crash()`, keeps):

* Appends are visible at once and durable only up to `durable_end_offset`, which `flush()`
  moves to the log end offset (the driver's fsync). It is always a batch boundary, so a
  crash loses exactly the unflushed suffix of whole batches, never part of a batch.
* Truncations, moves of the log start offset and snapshot writes, freezes and deletions
  are durable at once (a truncation also lowers the durable end offset to the new log end).
* A snapshot download is lost by a crash unless it was frozen.
* If the durable end offset is below the log start offset (the start moved up to a snapshot
  past what was flushed), a crash leaves the log empty at the log start, as Kafka's
  recovery does when the log ends before its latest snapshot.
"""

import bisect

from kraftcore import codec
from kraftcore.errors import InvalidAppendError, InvalidOffsetError, OffsetOutOfRangeError
from kraftcore.epochs import LeaderEpochCache
from kraftcore.layout import (BATCH_HEAD, CONTROL_MASK, LOG_OVERHEAD_BYTES, STAMPED_HEADER,
                              STAMPED_HEADER_BYTES)
from kraftcore.raft.storage import (ElectionStore, RaftStorage, SnapshotDownload,
                                    check_leader_append)
from kraftcore.raft.types import CommittedBatch
from kraftcore.types import SnapshotId

# What a leader append rewrites (`layout.STAMPED_HEADER`): base offset, batch length
# (unchanged), leader epoch. All three lie before the CRC's range, so the CRC stays valid.

_validate = codec.validate_batches
_bisect_left = bisect.bisect_left
_bisect_right = bisect.bisect_right
# CommittedBatch without the NamedTuple's Python-level __new__ (this runs per batch).
_new = tuple.__new__


def _snapshot_id(snapshot_id):
    return snapshot_id if type(snapshot_id) is SnapshotId else SnapshotId(*snapshot_id)


class MemorySnapshotDownload(SnapshotDownload):
    """A snapshot being received into memory; `freeze()` stores it in its `MemoryStorage`
    (durably). Once frozen or aborted (a crash aborts it) it takes no more calls."""

    __slots__ = ("snapshot_id", "_storage", "_data", "_open")

    def __init__(self, storage, snapshot_id):
        self.snapshot_id = snapshot_id
        self._storage = storage
        self._data = bytearray()
        self._open = True

    @property
    def size(self):
        return len(self._data)

    @property
    def is_open(self):
        return self._open

    def _check_open(self):
        if not self._open:
            raise ValueError(f"the download of snapshot {self.snapshot_id} is closed "
                             "(frozen, aborted, or lost in a crash)")

    def append(self, data):
        self._check_open()
        self._data += data

    def freeze(self):
        self._check_open()
        self._close()
        self._storage._add_snapshot(self.snapshot_id, bytes(self._data))
        self._data = bytearray()

    def abort(self):
        if self._open:
            self._close()
            self._data = bytearray()

    def _close(self):
        self._open = False
        self._storage._downloads.remove(self)

    def __repr__(self):
        state = "open" if self._open else "closed"
        return f"MemorySnapshotDownload({self.snapshot_id}, {len(self._data)} bytes, {state})"


class MemoryStorage(RaftStorage):
    """An in-memory `RaftStorage` (see the module docstring for the durability model)."""

    __slots__ = ("_batches", "_bases", "_epochs", "_log_start", "_leo", "_durable",
                 "_start_epoch", "_snapshots", "_snapshot_ids", "_downloads")

    def __init__(self):
        self._batches = []  # [CommittedBatch], contiguous, in offset order
        self._bases = []  # their base offsets
        self._epochs = LeaderEpochCache()
        self._log_start = 0
        self._leo = 0
        self._durable = 0
        self._start_epoch = 0  # the epoch of the snapshot at the log start (0: none)
        self._snapshots = {}  # SnapshotId -> bytes
        self._snapshot_ids = []  # sorted by (end_offset, epoch)
        self._downloads = []  # open MemorySnapshotDownloads

    def __repr__(self):
        return (f"MemoryStorage(log=[{self._log_start}, {self._leo}), "
                f"durable_end={self._durable}, batches={len(self._batches)}, "
                f"snapshots={self._snapshot_ids})")

    # ------------------------------------------------------------------ log

    @property
    def log_start_offset(self):
        return self._log_start

    @property
    def log_end_offset(self):
        return self._leo

    def last_fetched_epoch(self):
        batches = self._batches
        return batches[-1][2] if batches else self._start_epoch

    def end_offset_for_epoch(self, epoch):
        return self._epochs.end_offset_for_epoch(epoch, self._leo)

    def epoch_for_offset(self, offset):
        """The epoch of the stored batch holding `offset`; for `log_start_offset - 1`
        (when the log start is a snapshot's end) the snapshot's epoch; else -1."""
        bases = self._bases
        if bases and bases[0] <= offset < self._leo:
            return self._batches[_bisect_right(bases, offset) - 1][2]
        if offset == self._log_start - 1 >= 0:
            return self._start_epoch
        return -1

    def append_as_leader(self, batch, epoch):
        latest = self._epochs.latest_epoch
        batch, length, attributes, delta = check_leader_append(batch, epoch, latest)
        base = self._leo
        last = base + delta
        data = b"".join((STAMPED_HEADER.pack(base, length, epoch),
                         memoryview(batch)[STAMPED_HEADER_BYTES:]))
        self._batches.append(_new(CommittedBatch,
                                  (base, last, epoch, bool(attributes & CONTROL_MASK), data)))
        self._bases.append(base)
        if epoch > latest:
            self._epochs.assign(epoch, base)
        self._leo = last + 1
        return base, last

    def append_as_follower(self, batches):
        data = batches if type(batches) is bytes else bytes(memoryview(batches).cast("B"))
        total = len(data)
        if not total:
            raise InvalidAppendError("nothing to append: no record batches given")
        # One native call checks the framing, CRC and records of every batch.
        _validate(data)
        expected = first = self._leo
        latest = self._epochs.latest_epoch
        new_batches = []
        new_epochs = []
        unpack = BATCH_HEAD.unpack_from
        pos = 0
        while pos < total:
            base, length, epoch, _, _, attributes, delta = unpack(data, pos)
            if base != expected:
                raise InvalidAppendError(
                    f"batch at offset {base} does not follow offset {expected - 1}: "
                    "appends must be contiguous")
            if epoch > latest:
                new_epochs.append((epoch, base))
                latest = epoch
            elif 0 <= epoch < latest:
                raise InvalidAppendError(
                    f"batch at offset {base} has leader epoch {epoch}, below the log's "
                    f"latest epoch {latest}")
            size = length + LOG_OVERHEAD_BYTES
            expected = base + delta + 1
            new_batches.append(_new(CommittedBatch, (
                base, expected - 1, epoch, bool(attributes & CONTROL_MASK),
                data if size == total else data[pos:pos + size])))
            pos += size
        self._batches += new_batches
        if len(new_batches) == 1:
            self._bases.append(first)
        else:
            self._bases += [batch[0] for batch in new_batches]
        for epoch, base in new_epochs:
            self._epochs.assign(epoch, base)
        self._leo = expected
        return first, expected - 1

    def truncate_to(self, offset):
        """Remove every batch holding an offset >= `offset`: a batch holding `offset` goes
        whole, so the new log end offset is its base offset (but never below the log start
        offset). Nothing happens when `offset` >= the log end offset."""
        if offset < self._log_start:
            raise InvalidOffsetError(
                f"cannot truncate to offset {offset}, below the log start offset "
                f"{self._log_start}")
        self._cut(offset)

    def _cut(self, offset):
        if offset >= self._leo:
            return
        bases = self._bases
        batches = self._batches
        slot = _bisect_right(bases, offset) - 1
        if slot < 0:
            slot = 0
        elif batches[slot][1] < offset:  # `offset` is the next batch's base
            slot += 1
        end = bases[slot] if slot < len(bases) else self._leo
        del batches[slot:], bases[slot:]
        if end < self._log_start:  # the batch straddling the log start went too
            end = self._log_start
        self._leo = end
        self._epochs.truncate_from_end(end)
        if self._durable > end:
            self._durable = end

    def read(self, offset, bytes_max):
        leo = self._leo
        if not self._log_start <= offset <= leo:
            raise OffsetOutOfRangeError(offset, self._log_start, leo)
        if offset == leo:
            return b""
        batches = self._batches
        first = _bisect_right(self._bases, offset) - 1
        taken = len(batches[first][4])
        stop = first + 1
        count = len(batches)
        while stop < count:
            taken += len(batches[stop][4])
            if taken > bytes_max:
                break
            stop += 1
        if stop == first + 1:
            return batches[first][4]
        return b"".join([batch[4] for batch in batches[first:stop]])

    def read_batches(self, start_offset, end_offset):
        if not self._log_start <= start_offset <= end_offset <= self._leo:
            bad = end_offset if self._log_start <= start_offset <= end_offset else start_offset
            raise OffsetOutOfRangeError(bad, self._log_start, self._leo)
        if start_offset == end_offset:
            return []
        bases = self._bases
        return self._batches[_bisect_right(bases, start_offset) - 1:
                             _bisect_left(bases, end_offset)]

    # ------------------------------------------------------------------ snapshots

    def latest_snapshot_id(self):
        ids = self._snapshot_ids
        return ids[-1] if ids else None

    def earliest_snapshot_id(self):
        ids = self._snapshot_ids
        return ids[0] if ids else None

    def snapshot_size(self, snapshot_id):
        data = self._snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot_id, position, bytes_max):
        """Up to `bytes_max` from `position`; None if there is no such snapshot. A position
        outside [0, size] is a ValueError."""
        data = self._snapshots.get(snapshot_id)
        if data is None:
            return None
        if not 0 <= position <= len(data):
            raise ValueError(f"position {position} is outside snapshot {snapshot_id} "
                             f"of {len(data)} bytes")
        return data[position:position + bytes_max]

    def begin_snapshot_download(self, snapshot_id):
        download = MemorySnapshotDownload(self, _snapshot_id(snapshot_id))
        self._downloads.append(download)
        return download

    def write_snapshot(self, snapshot_id, data):
        """Store a complete snapshot, durably; its end offset must lie in
        [log start offset, log end offset] (InvalidOffsetError). Returns False (and keeps
        the stored one) when a snapshot of that id exists already."""
        snapshot_id = _snapshot_id(snapshot_id)
        if not self._log_start <= snapshot_id.end_offset <= self._leo:
            raise InvalidOffsetError(
                f"cannot write snapshot {snapshot_id}: its end offset is outside the log "
                f"[{self._log_start}, {self._leo}]")
        return self._add_snapshot(snapshot_id, bytes(data))

    def _add_snapshot(self, snapshot_id, data):
        if snapshot_id in self._snapshots:
            return False
        self._snapshots[snapshot_id] = data
        bisect.insort(self._snapshot_ids, snapshot_id)
        return True

    def _forget_snapshots_before(self, snapshot_id):
        ids = self._snapshot_ids
        older = _bisect_left(ids, snapshot_id)
        for old in ids[:older]:
            del self._snapshots[old]
        del ids[:older]

    def truncate_fully_and_start_at(self, snapshot_id):
        """Drop every batch and epoch; the log restarts empty (and durably) at the
        snapshot's end offset, and snapshots older than it are deleted."""
        snapshot_id = _snapshot_id(snapshot_id)
        end = snapshot_id.end_offset
        self._batches.clear()
        self._bases.clear()
        self._epochs.clear()
        self._log_start = self._leo = self._durable = end
        self._start_epoch = snapshot_id.epoch
        self._forget_snapshots_before(snapshot_id)

    def advance_log_start_offset(self, snapshot_id):
        """Move the log start offset to a stored snapshot's end offset, which must be above
        the log start and at most the log end offset (InvalidOffsetError). Batches wholly
        below it go (one straddling it stays), and so do older snapshots."""
        snapshot_id = _snapshot_id(snapshot_id)
        end = snapshot_id.end_offset
        if snapshot_id not in self._snapshots:
            raise InvalidOffsetError(
                f"cannot move the log start offset to snapshot {snapshot_id}: no such "
                "snapshot is stored")
        if not self._log_start < end <= self._leo:
            raise InvalidOffsetError(
                f"cannot move the log start offset to {end}: it must be above "
                f"{self._log_start} and at most the log end offset {self._leo}")
        bases = self._bases
        slot = _bisect_right(bases, end) - 1  # the batch holding `end`, or the last one
        if slot >= 0 and self._batches[slot][1] < end:
            slot += 1
        if slot > 0:
            del self._batches[:slot], bases[:slot]
        self._epochs.truncate_from_start(end)
        self._log_start = end
        self._start_epoch = snapshot_id.epoch
        self._forget_snapshots_before(snapshot_id)

    # ------------------------------------------------------------------ simulator

    @property
    def durable_end_offset(self):
        """The log end offset a crash would keep (a batch boundary)."""
        return self._durable

    def flush(self):
        """Make everything written so far durable (the driver's fsync)."""
        self._durable = self._leo

    def crash(self):
        """A power loss: lose the unflushed suffix of the log and every open download."""
        for download in list(self._downloads):
            download.abort()
        durable = self._durable
        if durable < self._log_start:
            self._batches.clear()
            self._bases.clear()
            self._epochs.clear()
            self._leo = self._durable = self._log_start
        else:
            self._cut(durable)

    def batches(self):
        """The stored batches, `(base_offset, last_offset, epoch, is_control, bytes)`
        tuples (`CommittedBatch` values), in offset order."""
        return list(self._batches)

    def epoch_entries(self):
        """The leader-epoch cache's `(epoch, start_offset)` entries."""
        return self._epochs.entries()

    def snapshot_bytes(self, snapshot_id):
        """A complete snapshot's bytes, None if there is no such snapshot."""
        return self._snapshots.get(snapshot_id)

    def snapshot_ids(self):
        """The ids of the complete snapshots, oldest first."""
        return list(self._snapshot_ids)

    def open_downloads(self):
        """The snapshot downloads neither frozen nor aborted."""
        return list(self._downloads)


class MemoryElectionStore(ElectionStore):
    """An `ElectionStore` in memory: a write is durable at once, so a crash keeps it."""

    def __init__(self, state=None):
        self.state = state
        self.writes = 0

    def read(self):
        return self.state

    def write(self, state):
        self.state = state
        self.writes += 1
