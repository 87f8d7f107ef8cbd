"""`Log`: a directory of segments in Kafka's layout, with durable appends, reads, truncation,
retention, checkpoints and crash recovery (kafka-facts §3).

Offsets: `log_start_offset <= high_watermark <= log_end_offset` always. The log end offset
(LEO) is the offset the next append gets; the high watermark (HW) is set by the owner (the
Raft layer: the offset below which records are committed); the log start offset only moves
up. Committed data is never truncated: `truncate_to` refuses to go below the HW.

Durability (`fsync` setting; the recovery point is the offset below which everything is on
disk):

* "always": `append` returns only once its batches are fsynced. Appends made at the same
  time from several threads share one fsync (group commit): whichever thread syncs first
  makes every write before it durable, and the others return without syncing again.
  `append(..., sync=False)` defers the sync so that a caller can queue several appends
  and make them durable together with `flush()`.
* "interval": a background thread fsyncs every `fsync_interval_ms`; a crash can lose the
  appends of the last interval, never a torn batch.
* "never": fsync only on `flush()`, on a segment roll and on `close()`.

Whatever the policy, a crash never leaves a torn or corrupt batch readable: on open the log
scans from the last checkpointed recovery point with the native validator and cuts the
tail at the first invalid batch (Kafka's `LogLoader`), unless the previous `close()` left
the clean-shutdown marker.

Failures: an append that fails to write (a full disk) is rolled back and raises
`StorageError`; the log stays as it was and writable. A failed fsync (the kernel may have
dropped the dirty pages) takes the log offline: reads serve what was durable, writes
raise `LogClosedError` until the log is reopened and recovered.

Thread safety: every method may be called from any thread. One lock orders all changes;
fsyncs run outside it so appends continue while a sync is in flight.
"""

import bisect
import dataclasses
import fcntl
import json
import os
import struct
import threading
from typing import NamedTuple

from kraftcore import codec
from kraftcore._py.segment import NO_STAMP
from kraftcore.errors import (CorruptRecordError, InvalidAppendError, InvalidOffsetError,
                              LogClosedError, OffsetOutOfRangeError, StorageError)
from kraftcore.log import checkpoint, fileio
from kraftcore.log.config import LogConfig, INT32_MAX
from kraftcore.log.epochs import LeaderEpochCache
from kraftcore.log.segment import LOG_SUFFIX, SUFFIXES, Segment, parse_prefix
from kraftcore.runtime.clock import Ticker, wall_clock_ms

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
_DISCARDED_SUFFIXES = (".tmp", ".deleted", ".cleaned")
_VALUES_TYPES = (list, tuple)

class _Scan(NamedTuple):
    """How `scan_batches` treats an append (its parameters of the same names); the rest
    (index_per_batch=False, strict_epochs=True, stamping in place, the batch limit) is the
    same for all. (A leader's single `bytes` batch goes through `_append_one` instead.)"""

    expected_offset: int = -1
    assign_offset: int = -1
    stamp_epoch: int = NO_STAMP
    verify_records: bool = True


def _one_batch(data):
    """Whether `data` (bytes) declares exactly one batch: its batch length covers it all.
    The scan checks the framing; this only picks how the append is written."""
    return len(data) >= 61 and _BATCH_LENGTH.unpack_from(data, 8)[0] + 12 == len(data)


_BATCH_LENGTH = struct.Struct(">i")


@dataclasses.dataclass(frozen=True)
class ReadResult:
    """Whole batches read from the log. `records` is a memoryview of one buffer read from
    the segment file (no per-batch copies); `batches()` decodes it."""

    records: memoryview
    first_offset: int  # base offset of the first batch returned (<= the offset asked)
    next_offset: int  # the offset after the last batch returned: where to read next
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    def batches(self):
        return codec.decode_batches(self.records)

    def __len__(self):
        return len(self.records)


@dataclasses.dataclass
class RecoveryReport:
    """What `Log.open` found and did."""

    clean_shutdown: bool = False
    scanned_segments: int = 0
    scanned_bytes: int = 0
    truncated_bytes: int = 0  # cut from the tail: a torn write or corruption
    first_invalid: str = None  # why the scan stopped, when it stopped early
    deleted_segments: list = dataclasses.field(default_factory=list)
    rebuilt_indexes: list = dataclasses.field(default_factory=list)
    ignored_checkpoints: list = dataclasses.field(default_factory=list)


def _storage_error(exc, doing):
    if isinstance(exc, StorageError):
        return exc
    error = StorageError(exc.errno, f"{doing} failed: {exc.strerror or exc}")
    error.__cause__ = exc
    return error


class Log:
    """A segmented log in a directory; create or open one with `Log.open(path, **settings)`
    (settings: the fields of `LogConfig`)."""

    def __init__(self, path, config, clock):
        self.path = os.path.abspath(path)
        self.config = config
        # limits worked out once: they are checked on every append
        self._append_bytes_max = min(config.max_append_bytes, config.segment_bytes)
        self._index_entries_max = (config.offset_index_entries_max - 1,
                                   config.time_index_entries_max - 2)
        self._clock = clock
        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()  # held during fsyncs; closing fds waits for it
        self._durable = threading.Condition(threading.Lock())
        self._durable_offset = 0  # the recovery point: everything below is on disk
        self._syncing = False
        self._segments = []
        self._bases = []
        self._epochs = LeaderEpochCache()
        self._log_start = self._leo = self._hw = 0
        self._checkpointed_recovery_point = 0
        self._checkpoint_ms = 0
        self._lock_fd = -1
        self._ticker = None
        self._closed = False
        self._failed = None  # the StorageError that took the log offline
        self._offline = False  # whether `_go_offline` has cut the log to what is durable
        self.recovery = RecoveryReport()

    # ================================================================ opening

    @classmethod
    def open(cls, path, *, clock=None, **settings):
        """Open the log in directory `path`, creating it if needed, and recover it."""
        config = LogConfig.of(**settings)
        log = cls(path, config, clock or wall_clock_ms)
        try:
            os.makedirs(log.path, exist_ok=True)
            log._acquire_dir_lock()
            log._load()
        except OSError as exc:
            log._release()
            raise _storage_error(exc, f"opening the log in {log.path}") from exc
        except BaseException:
            log._release()
            raise
        if config.fsync == "interval":
            log._ticker = Ticker(config.fsync_interval_ms, log._flush_if_dirty,
                                 name=f"kraftcore-log-flush {log.path}").start()
        return log

    def _acquire_dir_lock(self):
        self._lock_fd = fileio.open_file(os.path.join(self.path, LOCK_FILE), create=True,
                                         exclusive=False)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(
                0, f"the log in {self.path} is already open (by this or another process); "
                "close it first") from None

    def _load(self):
        now = self._clock()
        report = self.recovery
        names = os.listdir(self.path)
        report.clean_shutdown = CLEAN_SHUTDOWN_FILE in names
        bases = set()
        for name in names:
            base = parse_prefix(name)
            if name.endswith(_DISCARDED_SUFFIXES):
                fileio.unlink(os.path.join(self.path, name))
            elif base is not None and name.endswith(LOG_SUFFIX):
                bases.add(base)
        for name in names:  # index files whose .log is gone
            base = parse_prefix(name)
            if base is not None and base not in bases and name.endswith(SUFFIXES[1:]):
                fileio.unlink(os.path.join(self.path, name))

        def safely(read, *args):
            try:
                return read(self.path, *args)
            except checkpoint.CheckpointError as exc:
                report.ignored_checkpoints.append(str(exc))
                return None

        recovery_point = safely(checkpoint.read_offset, checkpoint.RECOVERY_POINT)
        high_watermark = safely(checkpoint.read_offset, checkpoint.HIGH_WATERMARK)
        log_start = safely(checkpoint.read_offset, checkpoint.LOG_START_OFFSET)
        epochs = safely(checkpoint.read_epochs)
        if epochs is None or recovery_point is None:
            recovery_point = 0  # rebuild what is missing from the segments themselves
            report.clean_shutdown = False
        self._epochs = LeaderEpochCache(epochs or ())
        self._load_segments(sorted(bases), recovery_point, now)

        if not self._segments:
            self._segments = [Segment.create(self.path, log_start or 0, self.config, now)]
            fileio.sync_dir(self.path)
        self._bases = [segment.base_offset for segment in self._segments]
        self._leo = self._segments[-1].next_offset
        first_base = self._segments[0].base_offset
        self._log_start = min(max(log_start or 0, first_base), self._leo)
        self._delete_segments_below(self._log_start)
        # Start, then end: an entry the start clamps to the log end (an empty log) is dropped
        # like any entry at or after the end, so a clean and a crash reopen agree.
        self._epochs.truncate_from_start(self._log_start)
        self._epochs.truncate_from_end(self._leo)
        self._hw = min(max(high_watermark or 0, self._log_start), self._leo)
        self._durable_offset = self._leo
        self._checkpoint_ms = now
        self._write_epochs()
        self._write_checkpoints(now)
        if report.clean_shutdown or CLEAN_SHUTDOWN_FILE in names:
            try:
                fileio.unlink(os.path.join(self.path, CLEAN_SHUTDOWN_FILE))
            except FileNotFoundError:
                pass
            fileio.sync_dir(self.path)

    def _load_segments(self, bases, recovery_point, now):
        report = self.recovery
        scanning = False
        for i, base in enumerate(bases):
            segment = Segment.open(self.path, base, self.config, now)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            if not (scanning or report.clean_shutdown) and (
                    next_base is None or next_base > recovery_point):
                # from here on nothing is known to be on disk: rebuild the epochs too
                scanning = True
                self._epochs.truncate_from_end(base)
            problem = None if scanning else segment.load()
            if problem:
                report.rebuilt_indexes.append(base)
            cut = False
            if scanning or problem:
                file_bytes = segment.file_bytes
                # The scan refuses epochs below the one in force before this segment. When
                # only the indexes are rebuilt (below the recovery point) the cache already
                # holds the later epochs: they must not count, or the segment is cut.
                result, zero_tail = segment.recover(
                    self._epochs.epoch_for_offset(base - 1) if base else -1)
                for epoch, offset in result.epochs:
                    self._epochs.assign(epoch, offset)
                report.scanned_segments += 1
                report.scanned_bytes += result.valid_bytes
                # zeros after the data of the active segment of a log that writes them
                # there (preallocated or prefilled space) are not a torn write
                expected_zeros = zero_tail and next_base is None and (
                    self.config.preallocate or self.config.prefill_bytes)
                if result.error is not None and not expected_zeros:
                    report.truncated_bytes += file_bytes - result.valid_bytes
                    report.first_invalid = f"{segment.path(LOG_SUFFIX)}: {result.error}"
                    cut = True
                segment.sync(with_indexes=True)
            if next_base is not None and segment.next_offset > next_base:
                report.first_invalid = report.first_invalid or (
                    f"{segment.path(LOG_SUFFIX)} holds offsets up to {segment.next_offset - 1}, "
                    f"past the next segment's base {next_base}")
                cut = True
            self._segments.append(segment)
            if cut:
                for later in bases[i + 1:]:
                    Segment(self.path, later, self.config).delete()
                    report.deleted_segments.append(later)
                if bases[i + 1:]:
                    fileio.sync_dir(self.path)
                return

    # ================================================================ state

    @property
    def log_start_offset(self):
        return self._log_start

    @property
    def log_end_offset(self):
        return self._leo

    @property
    def high_watermark(self):
        return self._hw

    @property
    def recovery_point(self):
        """Every offset below this is on disk."""
        return self._durable_offset

    @property
    def latest_epoch(self):
        return self._epochs.latest_epoch

    @property
    def size_bytes(self):
        return sum(segment.size for segment in self._segments)

    @property
    def segment_base_offsets(self):
        return list(self._bases)

    @property
    def closed(self):
        return self._closed

    def epoch_entries(self):
        """[(leader epoch, start offset)] of the leader-epoch cache."""
        return self._epochs.entries()

    def end_offset_for_epoch(self, epoch):
        """(epoch, end offset): where `epoch` ends in this log, for divergence checks (see
        `LeaderEpochCache.end_offset_for_epoch`)."""
        with self._lock:
            return self._epochs.end_offset_for_epoch(epoch, self._leo)

    def _check_writable(self):
        if self._closed:
            raise LogClosedError(f"the log in {self.path} is closed")
        if self._failed is not None:
            raise LogClosedError(
                f"the log in {self.path} is offline after a storage error ({self._failed}); "
                "reopen it to recover")

    # ================================================================ appends

    def append(self, records, *, leader_epoch=None, keys=None, headers=None, timestamps=None,
               timestamp=None, compression=None, sync=True):
        """Append as the leader and return the base offset given to the first record.

        `records` is either a list of values (bytes or None; `keys`, `headers`,
        `timestamps`, `timestamp` and `compression` are passed to `encode_batch`, and the
        timestamp defaults to the clock) or encoded batches (bytes-like). Either way the
        log assigns offsets from its log end offset and stamps `leader_epoch` (default:
        the latest epoch, or 0) into every batch. An epoch below the latest is refused."""
        patch = False
        if isinstance(records, _VALUES_TYPES):
            encoded = None
        elif type(records) is bytes and _one_batch(records):
            # Immutable, so what is checked is what gets written: no private copy. The
            # stamped header fields are written from a stamped copy of the first 16 bytes.
            encoded, patch = records, True
        else:
            try:
                encoded = bytearray(memoryview(records).cast("B"))
            except TypeError:
                raise TypeError(
                    "append() takes a list of values or encoded record batches (bytes-like), "
                    f"not {type(records).__name__}") from None
        with self._lock:
            self._check_writable()
            latest = self._epochs.latest_epoch
            epoch = max(latest, 0) if leader_epoch is None else leader_epoch
            if not isinstance(epoch, int) or not 0 <= epoch <= INT32_MAX:
                raise InvalidAppendError(f"leader epoch must be an int32 >= 0, got {epoch!r}")
            if epoch < latest:
                raise InvalidAppendError(
                    f"leader epoch {epoch} is below the log's latest epoch {latest}")
            if patch:
                base = self._append_one(encoded, epoch, latest)
            else:
                if encoded is None:
                    if timestamp is None:
                        timestamp = -1 if timestamps is not None else self._clock()
                    encoded = codec.encode_batch(
                        records, keys=keys, headers=headers, timestamps=timestamps,
                        timestamp=timestamp, compression=compression, base_offset=self._leo,
                        leader_epoch=epoch)
                    scan = _Scan(verify_records=False)
                else:
                    scan = _Scan(assign_offset=self._leo, stamp_epoch=epoch,
                                 verify_records=self.config.verify_records)
                base = self._append_locked(encoded, scan)
        if sync and self.config.fsync == "always":  # `_after_append`, written out
            self._sync_through(self._leo)
        return base

    def append_as_follower(self, batches, *, sync=True):
        """Append batches that already carry their offsets and leader epochs (replicated
        from a leader). The first must start at the log end offset and each must follow
        the previous one; epochs must not go below the log's latest. Returns the base
        offset of the first batch."""
        data = memoryview(batches).cast("B")
        with self._lock:
            self._check_writable()
            base = self._append_locked(data, _Scan(
                expected_offset=self._leo, verify_records=self.config.verify_records))
        self._after_append(sync)
        return base

    def _append_locked(self, data, scan):
        """Check `data` (and assign its offsets) with `scan`, roll if needed, write it and
        take its epochs."""
        size = len(data)
        self._check_size(size)
        now = self._clock()
        segment = self._segments[-1]
        # Check (and stamp) the batches before anything changes: a refused append must not
        # even roll a segment. A roll means scanning again for the new segment's positions.
        fits = True
        try:
            result = self._scan_for(segment, data, scan)
        except CorruptRecordError:
            if not segment.size:
                raise
            # Sound batches whose offsets only overflow this segment's int32 range go to a
            # new one (Kafka rolls too); anything else fails this scan as well.
            self._scan_for(codec.SegmentState(self._leo), data, scan)
            fits = False
        if segment.size and (not fits or self._should_roll(segment, size, now)):
            segment = self._roll(now)
            result = self._scan_for(segment, data, scan)
        try:
            segment.append(data, result)
        except OSError as exc:
            self._append_failed(exc, size)
        self._take_epochs(segment, result.epochs, result.first_offset)
        self._leo = result.next_offset
        return result.first_offset

    def _append_one(self, data, epoch, latest_epoch):
        """The leader's append of one encoded batch (bytes): the kernel checks it and takes
        it into the active segment's state in one call (`SegmentState.stamp_append`), and
        its stamped header and the rest of `data` go out in one write. As `_append_locked`,
        without its general scan."""
        size = len(data)
        config = self.config
        if not 0 < size <= self._append_bytes_max:
            self._check_size(size)
        now = self._clock()
        segment = self._segments[-1]
        roll = segment.size and self._should_roll(segment, size, now)
        # checked before anything changes: a refused batch does not even roll a segment
        header = segment.stamp_append(data, self._leo, epoch, config.index_interval_bytes,
                                      config.verify_records, config.max_batch_bytes)
        if roll or (header is None and segment.size):
            if header is not None:
                segment.undo_append()
            segment = self._roll(now)
            header = segment.stamp_append(data, self._leo, epoch, config.index_interval_bytes,
                                          config.verify_records, config.max_batch_bytes)
        if header is None:
            raise InvalidAppendError("the append spans more than 2^31 offsets")
        first = self._leo
        try:
            segment.write_stamped(header, data)
        except OSError as exc:
            self._append_failed(exc, size)
        if epoch > latest_epoch:
            self._take_epochs(segment, ((epoch, first),), first)
        self._leo = segment.next_offset
        return first

    def _check_size(self, size):
        config = self.config
        if size == 0:
            raise InvalidAppendError("nothing to append: no record batches given")
        if size > config.max_append_bytes:
            raise InvalidAppendError(
                f"an append of {size} bytes is above max_append_bytes "
                f"({config.max_append_bytes})")
        if size > config.segment_bytes:
            raise InvalidAppendError(
                f"an append of {size} bytes cannot fit a segment of segment_bytes "
                f"({config.segment_bytes})")

    def _append_failed(self, exc, size):
        error = _storage_error(exc, f"appending {size} bytes to {self.path}")
        if getattr(exc, "rollback_failed", False):
            self._go_offline(error)
        raise error from exc

    def _take_epochs(self, segment, epochs, first_offset):
        """Record the leader epochs an append started; if their checkpoint cannot be
        written, take the append's batches back out (it did not happen) and raise."""
        if not epochs:
            return
        entries = self._epochs.entries()
        changed = False
        for epoch, offset in epochs:
            changed |= self._epochs.assign(epoch, offset)
        if not changed:
            return
        try:
            self._write_epochs()
        except StorageError as exc:
            # a full disk can fail the checkpoint after the data went in (preallocated
            # segments)
            self._epochs = LeaderEpochCache(entries)
            try:
                segment.truncate_to(first_offset)
            except OSError:
                self._go_offline(exc)
            raise

    def _after_append(self, sync):
        if self.config.fsync == "always" and sync:
            self._sync_through(self._leo)

    def _scan_for(self, segment, data, scan):
        # positional: this runs on every follower append, and keywords cost a microsecond
        expected_offset, assign_offset, stamp_epoch, verify_records = scan
        config = self.config
        return codec.scan_batches(
            data, segment.base_offset, segment.size, config.index_interval_bytes,
            segment.bytes_since_index, segment.max_timestamp,
            segment.offset_of_max_timestamp, segment.last_index_timestamp,
            self._epochs.latest_epoch, expected_offset, assign_offset,
            stamp_epoch, False, verify_records, True, False,
            config.max_batch_bytes, True)

    def _should_roll(self, segment, incoming_bytes, now):
        """Kafka's `shouldRoll`: the append would pass segment_bytes, the segment is older
        than segment_ms, or an index is full (one time entry kept for the final one)."""
        config = self.config
        offset_entries_max, time_entries_max = self._index_entries_max
        return (segment.size > config.segment_bytes - incoming_bytes
                or now - segment.created_ms > config.segment_ms
                or len(segment.offset_index) >= offset_entries_max * 8
                or len(segment.time_index) >= time_entries_max * 12)

    def roll(self):
        """Start a new segment at the log end offset (if the active one holds data)."""
        with self._lock:
            self._check_writable()
            if self._segments[-1].size:
                self._roll(self._clock())

    def _roll(self, now):
        old = self._segments[-1]
        with self._sync_lock:
            if self._failed is not None:  # a sync failed while this waited for the lock
                self._go_offline(self._failed)
                self._check_writable()
            try:
                old.seal()
            except OSError as exc:  # its sync may have failed: nothing is known durable
                error = _storage_error(exc, f"sealing a segment of {self.path}")
                self._go_offline(error)
                raise error from exc
            new = None
            try:
                new = Segment.create(self.path, self._leo, self.config, now)
                fileio.sync_dir(self.path)
            except OSError as exc:
                # the sealed segment stays the active one: the log is unchanged and writable
                if new is not None:
                    new.delete()
                error = _storage_error(exc, f"creating a segment in {self.path}")
                raise error from exc
            self._segments.append(new)
            self._bases.append(new.base_offset)
            with self._durable:
                self._durable_offset = max(self._durable_offset, self._leo)
        self._write_checkpoints(now)
        self._enforce_retention(now)
        return new

    # ================================================================ durability

    def flush(self):
        """Make every append durable now, whatever the policy; returns the recovery point."""
        with self._lock:
            self._check_writable()
            target = self._leo
        self._sync_through(target)
        return self._durable_offset

    def _flush_if_dirty(self):
        if self._closed or self._failed is not None:
            return False
        if self._durable_offset < self._leo:
            self._sync_through(self._leo)
        return True

    def _sync_through(self, target):
        """Return once every offset below `target` is durable, syncing if no other thread
        is already doing it (group commit)."""
        with self._durable:
            while self._durable_offset < target:
                if self._failed is not None:
                    self._check_writable()
                if not self._syncing:
                    self._syncing = True
                    break
                self._durable.wait()
            else:
                return
        try:
            self._sync_now()
        finally:
            with self._durable:
                self._syncing = False
                self._durable.notify_all()
        self._maybe_checkpoint()

    def _sync_now(self):
        with self._lock:
            self._check_writable()
            upto = self._leo
            active = self._segments[-1]  # every earlier segment was synced when sealed
            self._sync_lock.acquire()
        try:
            active.sync()
        except OSError as exc:
            error = _storage_error(exc, f"syncing {self.path}")
            # Failed before `_sync_lock` goes: a thread waiting for it while holding `_lock`
            # (a roll, `close`) must not seal and count as durable what this sync lost.
            self._failed = error
            self._sync_lock.release()
            self._go_offline(error)
            raise error from exc
        with self._durable:
            self._durable_offset = max(self._durable_offset, upto)
        self._sync_lock.release()

    def _go_offline(self, error):
        """After a failed sync the kernel may have dropped unsynced pages: serve only what is
        known durable and refuse writes until the log is reopened."""
        with self._lock:
            if self._failed is None:
                self._failed = error
            if not self._offline:
                self._offline = True
                self._leo = max(min(self._leo, self._durable_offset), self._log_start)
                self._hw = min(self._hw, self._leo)
            with self._durable:
                self._durable.notify_all()

    # ================================================================ checkpoints

    def _maybe_checkpoint(self):
        now = self._clock()
        if now - self._checkpoint_ms >= self.config.checkpoint_interval_ms:
            with self._lock:
                if not self._closed and self._failed is None:
                    self._write_checkpoints(now)

    def checkpoint(self):
        """Write the recovery point, high watermark and log start offset checkpoints now."""
        with self._lock:
            self._check_writable()
            self._write_checkpoints(self._clock())

    def _write_checkpoints(self, now):
        try:
            recovery_point = min(self._durable_offset, self._leo)
            checkpoint.write_offset(self.path, checkpoint.RECOVERY_POINT, recovery_point)
            checkpoint.write_offset(self.path, checkpoint.HIGH_WATERMARK, self._hw)
            checkpoint.write_offset(self.path, checkpoint.LOG_START_OFFSET, self._log_start)
        except OSError as exc:
            raise _storage_error(exc, f"writing the checkpoints of {self.path}") from exc
        self._checkpointed_recovery_point = recovery_point
        self._checkpoint_ms = now

    def _write_epochs(self):
        try:
            checkpoint.write_epochs(self.path, self._epochs.entries())
        except OSError as exc:
            raise _storage_error(exc, f"writing the leader-epoch checkpoint of {self.path}") from exc

    # ================================================================ offsets

    def update_high_watermark(self, offset):
        """Set the high watermark; it must lie in [log start offset, log end offset]."""
        with self._lock:
            if not isinstance(offset, int) or not self._log_start <= offset <= self._leo:
                raise InvalidOffsetError(
                    f"high watermark {offset!r} must lie in [log start offset "
                    f"{self._log_start}, log end offset {self._leo}]")
            self._hw = offset

    def truncate_to(self, offset):
        """Remove every record at `offset` and after (divergence from the leader). A batch
        holding `offset` is removed whole. Refused below the high watermark (committed) or
        the log start offset. Returns True if anything was removed."""
        with self._lock:
            self._check_writable()
            if not isinstance(offset, int):
                raise TypeError(f"offset must be an int, got {type(offset).__name__}")
            if offset >= self._leo:
                return False
            if offset < self._log_start:
                raise InvalidOffsetError(
                    f"cannot truncate to {offset}: below the log start offset {self._log_start}")
            if offset < self._hw:
                raise InvalidOffsetError(
                    f"cannot truncate to {offset}: below the high watermark {self._hw}, "
                    "committed records are never removed")
            index = bisect.bisect_right(self._bases, offset) - 1
            segment = self._segments[index]
            position = segment.position_of(offset)
            cut = offset
            if position is not None:
                cut = int.from_bytes(segment.read_bytes(position, 8), "big", signed=True)
                if cut < self._hw:
                    raise InvalidOffsetError(
                        f"cannot truncate to {offset}: the batch holding it starts at {cut}, "
                        f"below the high watermark {self._hw}")
            with self._sync_lock:
                try:
                    doomed = self._segments[index + 1:]
                    if segment.base_offset >= cut and index > 0:
                        doomed.insert(0, segment)
                        index -= 1
                    for gone in doomed:
                        gone.delete()
                    del self._segments[index + 1:], self._bases[index + 1:]
                    if doomed:
                        fileio.sync_dir(self.path)
                    self._leo = self._segments[index].truncate_to(offset)
                except OSError as exc:
                    error = _storage_error(exc, f"truncating {self.path}")
                    self._go_offline(error)
                    raise error from exc
                with self._durable:
                    self._durable_offset = min(self._durable_offset, self._leo)
            if self._epochs.truncate_from_end(self._leo):
                self._write_epochs()
            if self._checkpointed_recovery_point > self._leo:
                # the data past the new end will be rewritten: never trust it unscanned
                self._write_checkpoints(self._clock())
            return True

    def truncate_fully_and_start_at(self, offset):
        """Drop every segment and start empty at `offset` (log start = HW = LEO = offset);
        used when a replica installs a snapshot that ends past its log."""
        with self._lock:
            self._check_writable()
            if not isinstance(offset, int) or offset < 0:
                raise InvalidOffsetError(f"offset must be an int >= 0, got {offset!r}")
            now = self._clock()
            with self._sync_lock:
                try:
                    self._log_start = self._hw = offset
                    checkpoint.write_offset(self.path, checkpoint.LOG_START_OFFSET, offset)
                    for segment in self._segments:
                        segment.delete()
                    self._segments = [Segment.create(self.path, offset, self.config, now)]
                    self._bases = [offset]
                    fileio.sync_dir(self.path)
                except OSError as exc:
                    error = _storage_error(exc, f"resetting {self.path}")
                    self._go_offline(error)
                    raise error from exc
                self._leo = offset
                with self._durable:
                    self._durable_offset = offset
            self._epochs.clear()
            self._write_epochs()
            self._write_checkpoints(now)

    def advance_log_start_offset(self, offset):
        """Move the log start offset up to `offset` (at most the high watermark) and delete
        the segments entirely below it. Returns True if it moved."""
        with self._lock:
            self._check_writable()
            if not isinstance(offset, int):
                raise TypeError(f"offset must be an int, got {type(offset).__name__}")
            if offset <= self._log_start:
                return False
            if offset > self._hw:
                raise InvalidOffsetError(
                    f"cannot move the log start offset to {offset}: above the high "
                    f"watermark {self._hw}")
            self._write_log_start(offset)
            if self._epochs.truncate_from_start(offset):
                self._write_epochs()
            self._delete_segments_below(offset)
            return True

    def _write_log_start(self, offset):
        """Checkpoint the new log start, then take it: a failed write leaves both as they
        were, so a retry does it again."""
        try:
            checkpoint.write_offset(self.path, checkpoint.LOG_START_OFFSET, offset)
        except OSError as exc:
            raise _storage_error(exc, f"writing the log start of {self.path}") from exc
        self._log_start = offset

    def _delete_segments_below(self, offset):
        """Delete leading segments whose every offset is below `offset` (never the last)."""
        doomed = 0
        while doomed + 1 < len(self._segments) and self._segments[doomed + 1].base_offset <= offset:
            doomed += 1
        if not doomed:
            return 0
        with self._sync_lock:
            for segment in self._segments[:doomed]:
                segment.delete()
            del self._segments[:doomed], self._bases[:doomed]
            fileio.sync_dir(self.path)
        return doomed

    def enforce_retention(self):
        """Delete the oldest segments beyond `retention_bytes` or older than `retention_ms`
        (by their largest timestamp); only segments wholly below the high watermark, never
        the active one. Runs after every roll. Returns the number deleted."""
        with self._lock:
            self._check_writable()
            return self._enforce_retention(self._clock())

    def _enforce_retention(self, now):
        config = self.config
        if config.retention_bytes < 0 and config.retention_ms < 0:
            return 0
        total = self.size_bytes
        doomed = 0
        for segment, following in zip(self._segments, self._segments[1:]):
            if following.base_offset > self._hw:
                break
            too_big = 0 <= config.retention_bytes <= total - segment.size
            age_ms = now - (segment.max_timestamp if segment.max_timestamp >= 0
                            else segment.created_ms)
            too_old = 0 <= config.retention_ms < age_ms
            if not (too_big or too_old):
                break
            total -= segment.size
            doomed += 1
        if doomed:
            new_start = self._segments[doomed].base_offset
            if new_start > self._log_start:
                self._write_log_start(new_start)
                if self._epochs.truncate_from_start(new_start):
                    self._write_epochs()
            self._delete_segments_below(new_start)
        return doomed

    # ================================================================ reads

    def read(self, offset, max_bytes=1024 * 1024, *, committed=False):
        """Whole batches starting with the one that holds `offset`, up to `max_bytes` (the
        first batch is returned whole even if larger). With `committed`, only batches
        below the high watermark. Reading at the end (or at the HW when `committed`) gives
        an empty result; outside [log start offset, log end offset] raises
        `OffsetOutOfRangeError`."""
        if not isinstance(offset, int) or not isinstance(max_bytes, int):
            raise TypeError("offset and max_bytes must be ints")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            if self._closed:
                raise LogClosedError(f"the log in {self.path} is closed")
            end = self._hw if committed else self._leo
            if not self._log_start <= offset <= self._leo:
                raise OffsetOutOfRangeError(offset, self._log_start, self._leo)
            view, first, next_offset = memoryview(b""), offset, offset
            if offset < end:
                index = bisect.bisect_right(self._bases, offset) - 1
                try:
                    for segment in self._segments[index:]:
                        view, first, next_offset = segment.read(offset, max_bytes, end)
                        if len(view) or segment.next_offset > offset:
                            break
                except OSError as exc:
                    raise _storage_error(exc, f"reading {self.path}") from exc
            return ReadResult(view, first, next_offset, self._hw, self._log_start, self._leo)

    def offset_for_timestamp(self, timestamp):
        """The first offset whose record timestamp is >= `timestamp`, None if there is none."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"the log in {self.path} is closed")
            for segment in self._segments:
                found = segment.offset_for_timestamp(timestamp)
                if found is not None and found >= self._log_start:
                    return found
            return None

    # ================================================================ closing

    def close(self):
        """Make everything durable, seal the active segment, write the checkpoints and the
        clean-shutdown marker (so the next open skips the scan), and release the files."""
        if self._ticker is not None:
            # Outside the lock: its flush may be waiting for the lock, and stop() joins it.
            self._ticker.stop()
        with self._lock:
            if self._closed:
                return
            try:
                with self._sync_lock:
                    durable = self._failed is None  # also after a sync that failed meanwhile
                    if durable:
                        self._segments[-1].seal()
                        with self._durable:
                            self._durable_offset = max(self._durable_offset, self._leo)
                if durable:
                    self._write_epochs()
                    self._write_checkpoints(self._clock())
                    fileio.write_atomic(
                        os.path.join(self.path, CLEAN_SHUTDOWN_FILE),
                        json.dumps({"version": 0, "brokerEpoch": -1}).encode())
            except OSError as exc:
                raise _storage_error(exc, f"closing {self.path}") from exc
            finally:
                self._closed = True
                self._release()

    def _release(self):
        with self._sync_lock:
            for segment in self._segments:
                segment.close()
        if self._lock_fd >= 0:
            fileio.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        return (f"Log({self.path!r}, log_start_offset={self._log_start}, "
                f"high_watermark={self._hw}, log_end_offset={self._leo}, "
                f"segments={len(self._segments)})")
