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
the clean-shutdown marker. Opening never deletes a file because it is damaged or does not
fit: the segments must hold one unbroken run of offsets, a file that is not part of the
log is renamed aside (`<name>.stray`), a gap refuses the open with `LogGapError` unless
`set_aside_past_gap=True` opens the log up to it, and a checkpoint value the segments
contradict is reported in `recovery` and ignored.

Compaction (`LogConfig(compact=True)`, a topic whose cleanup.policy includes compact): the
log cleaner (`kraftcore.log.cleaner`) rewrites inactive segments through `begin_clean` /
`replace_segments` / `end_clean`, and a compacted log's offsets may jump forward between
batches where it removed records — recovery and follower appends accept that (offsets must
still increase, and segments still tile the offsets), so does a log that was ever cleaned
(it has a cleaner offset, `cleaner-offset-checkpoint`). On open, a clean a crash
interrupted is finished first: `.cleaned` files are deleted, a `.log.swap` completed
(`_resolve_swaps`). `close` and `delete` abort a clean in progress and wait for it;
a truncation aborts it.

Failures: an append that fails to write (a full disk) is rolled back and raises
`StorageError`; the log stays as it was and writable. A failed fsync (the kernel may have
dropped the dirty pages) takes the log offline: reads serve what was durable, writes
raise `LogClosedError` until the log is reopened and recovered.

Thread safety: every method may be called from any thread. One lock orders all changes;
fsyncs run outside it so appends continue while a sync is in flight.
"""

import bisect
import dataclasses
import errno
import fcntl
import itertools
import json
import os
import threading
from typing import NamedTuple

from kraftcore import codec
from kraftcore.kernel_api import NO_STAMP
from kraftcore.errors import (CleanAbortedError, CorruptRecordError, InvalidAppendError,
                              InvalidOffsetError, LogClosedError, LogError, LogGapError,
                              LogLockedError, OffsetOutOfRangeError, StorageError)
from kraftcore.layout import (BATCH_LENGTH, BATCH_LENGTH_OFFSET, CLEAN_SHUTDOWN_FILE,
                              CLEANED_SUFFIX, CLEANER_OFFSET_CHECKPOINT, DELETED_SUFFIX,
                              HIGH_WATERMARK_CHECKPOINT, OFFSET_AND_LENGTH, SWAP_SUFFIX,
                              INT32_MAX, LEADER_EPOCH_CHECKPOINT, LOCK_FILE,
                              LOG_OVERHEAD_BYTES, LOG_START_OFFSET_CHECKPOINT, LOG_SUFFIX,
                              RECOVERY_POINT_CHECKPOINT, SEGMENT_SUFFIXES,
                              STAMPED_HEADER, STAMPED_HEADER_BYTES, STRAY_SUFFIX,
                              TIME_INDEX_ENTRY_BYTES, TMP_SUFFIX, DELETED_DIR_SUFFIX,
                              BATCH_HEADER_BYTES, file_prefix, parse_prefix,
                              parse_segment_name)
from kraftcore.log import checkpoint, fileio, reader
from kraftcore.log.config import LogConfig
from kraftcore.epochs import LeaderEpochCache
from kraftcore.log.segment import Segment, misplaced_first_batch, set_aside_names
from kraftcore.clock import Ticker, wall_clock_ms
from kraftcore.types import FileRegion

_DISCARDED_SUFFIXES = (TMP_SUFFIX, DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)
_VALUES_TYPES = (list, tuple)

class _Scan(NamedTuple):
    """How `scan_batches` treats an append (its parameters of the same names); the rest
    (index_per_batch=False, strict_epochs=True, stamping in place, the batch limit) is the
    same for all. (A leader's single `bytes` batch goes through `_append_one` instead.)"""

    expected_offset: int = -1
    assign_offset: int = -1
    stamp_epoch: int = NO_STAMP
    verify_records: bool = True


_batch_length_at = BATCH_LENGTH.unpack_from  # on every append of encoded bytes


def _one_batch(data):
    """Whether `data` (bytes) declares exactly one batch: its batch length covers it all.
    The scan checks the framing; this only picks how the append is written."""
    return (len(data) >= BATCH_HEADER_BYTES
            and LOG_OVERHEAD_BYTES + _batch_length_at(data, BATCH_LENGTH_OFFSET)[0]
            == len(data))


class LogOffsets(NamedTuple):
    """What the owner of a log without its own checkpoints (`own_checkpoints=False`) knows
    of it when it opens: the last recovery point, high watermark and log start offset it
    wrote down (None: unknown), whether the log was closed cleanly, and the cleaner offset
    of a compacted log (None: never cleaned)."""

    recovery_point: int = None
    high_watermark: int = None
    log_start_offset: int = None
    clean_shutdown: bool = False
    cleaner_offset: int = None


@dataclasses.dataclass(frozen=True)
class ReadResult:
    """Whole batches read from the log. `records` is a memoryview of one buffer read from
    the segment file (no per-batch copies), or a `FileRegion` when the read asked for one;
    `batches()` decodes it."""

    records: memoryview
    first_offset: int  # base offset of the first batch returned (<= the offset asked)
    next_offset: int  # the offset after the last batch returned: where to read next
    high_watermark: int
    log_start_offset: int
    log_end_offset: int

    def batches(self):
        records = self.records
        if isinstance(records, FileRegion):
            records = records.read()
        return codec.decode_batches(records)

    def __len__(self):
        return len(self.records)


@dataclasses.dataclass
class RecoveryReport:
    """What `Log.open` found and did. Lists of strings name the file and say why."""

    clean_shutdown: bool = False
    scanned_segments: int = 0
    scanned_bytes: int = 0
    truncated_bytes: int = 0  # cut from the tail: a torn write or corruption
    zero_tail_bytes: int = 0  # zeros trimmed after the data: preallocated or prefilled space
    first_invalid: str = None  # why the scan stopped, when it stopped early
    # base offsets of segments deleted because they lie wholly below the log start offset
    # (an interrupted retention or log start move), never because of damage
    deleted_segments: list = dataclasses.field(default_factory=list)
    rebuilt_indexes: list = dataclasses.field(default_factory=list)
    # checkpoint files, or values in them, that were unreadable or that the segments
    # contradict: each names the file, the value and the offsets the segments hold
    ignored_checkpoints: list = dataclasses.field(default_factory=list)
    # segment files renamed to `<name>.stray` (not part of the log, or past a gap)
    set_aside: list = dataclasses.field(default_factory=list)
    gap: str = None  # the gap the log was opened up to (`set_aside_past_gap=True`)
    # cleans a crash interrupted (`.swap` files): each completed, or undone when the swap
    # does not read back whole
    swaps: list = dataclasses.field(default_factory=list)


class SegmentInfo(NamedTuple):
    """One inactive segment as a clean found it (`CleanSession.segments`). `segment` is the
    log's own object: `Log.replace_segments` swaps only segments that are still the log's."""

    segment: object
    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    offset_index_bytes: int
    time_index_bytes: int
    created_ms: int

    @property
    def file(self):
        return _name(self)


class CleanSession:
    """A clean of a compacted log in progress (`Log.begin_clean`; `kraftcore.log.cleaner`
    runs it): the log's offsets and inactive segments when it began. `aborted` says why the
    clean must stop (the log is closing or was truncated); `check()` raises
    `CleanAbortedError` then. A log has one clean at a time."""

    def __init__(self, log, segments, active_base_offset):
        self.path = log.path
        self.config = log.config
        self.segments = segments
        self.active_base_offset = active_base_offset
        self.log_start_offset = log.log_start_offset
        self.log_end_offset = log.log_end_offset
        self.high_watermark = log.high_watermark
        self.cleaner_offset = log.cleaner_offset
        self.aborted = None

    def check(self):
        if self.aborted is not None:
            raise CleanAbortedError(f"the clean of the log in {self.path} stopped: "
                                    f"{self.aborted}")


def _name(segment):
    return file_prefix(segment.base_offset) + LOG_SUFFIX


def _held(segments):
    """The offsets `segments` hold, for messages: "offsets [0, 90), [180, 270)"."""
    runs = []
    for segment in segments:
        if segment.next_offset == segment.base_offset:
            continue
        if runs and runs[-1][1] == segment.base_offset:
            runs[-1][1] = segment.next_offset
        else:
            runs.append([segment.base_offset, segment.next_offset])
    if not runs:
        return "no offsets"
    return "offsets " + ", ".join(f"[{start}, {end})" for start, end in runs)


def _dup_unless_out_of_descriptors(fd):
    """A new descriptor of `fd`'s file, or -1 when the process or the system has none left
    (a read then copies instead: a busy broker is not a failed disk)."""
    try:
        return os.dup(fd)
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            return -1
        raise


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
        self._append_bytes_max = min(config.append_bytes_max, config.segment_bytes)
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
        self._given = LogOffsets()  # what the owner recorded (own_checkpoints=False)
        self._written_epochs = None  # the entries the leader-epoch checkpoint holds
        # Compaction: the cleaner's first dirty offset (None: never cleaned); whether
        # offsets may jump forward between batches (a compacted or once cleaned log); the
        # clean in progress (`begin_clean`), whose end `close` waits for.
        self._cleaner_offset = None
        self._gaps = config.compact
        self._clean = None
        self._clean_done = threading.Condition(self._lock)
        self.recovery = RecoveryReport()

    # ================================================================ opening

    @classmethod
    def open(cls, path, *, clock=None, set_aside_past_gap=False, offsets=None, **settings):
        """Open the log in directory `path`, creating it if needed, and recover it.

        A log whose segments do not hold one unbroken run of offsets (a segment missing,
        emptied or damaged in the middle, two segments claiming the same offsets) is
        refused with `LogGapError`, and nothing on disk is changed. With
        `set_aside_past_gap=True` it opens up to the gap instead: the segment files past
        it are renamed to `<name>.stray` (a segment damaged at the gap is first copied
        there whole, then cut), and nothing is deleted.

        With `own_checkpoints=False` the log reads and writes no offset checkpoint and no
        clean-shutdown marker of its own: `offsets` (a `LogOffsets`) gives what its owner
        recorded, and the owner reads `recovery_point`, `high_watermark` and
        `log_start_offset` to record them again."""
        config = LogConfig.of(**settings)
        log = cls(path, config, clock or wall_clock_ms)
        log._given = offsets if offsets is not None else LogOffsets()
        try:
            os.makedirs(log.path, exist_ok=True)
            log._acquire_dir_lock()
            log._load(bool(set_aside_past_gap))
        except OSError as exc:
            log._release()
            error = _storage_error(exc, f"opening the log in {log.path}")
            if error is exc:
                raise
            raise error from exc
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
        except BlockingIOError as exc:
            raise LogLockedError(self.path, exc.errno) from None

    def _load(self, set_aside_past_gap):
        """Recover the directory (see docs/log.md, "Recovery"). Everything that decides
        whether the log can open is read first; a refusal changes nothing on disk. Then
        files that are not part of the log are set aside, torn tails cut, indexes written,
        and the checkpoints rewritten from what the segments hold."""
        now = self._clock()
        report = self.recovery
        self._resolve_swaps()
        names = os.listdir(self.path)
        own = self.config.own_checkpoints
        report.clean_shutdown = (CLEAN_SHUTDOWN_FILE in names if own
                                 else bool(self._given.clean_shutdown))
        bases = {parse_prefix(name) for name in names if name.endswith(LOG_SUFFIX)} - {None}
        # leftovers of interrupted writes and deletions, and index files whose .log is gone
        leftovers = [name for name in names if name.endswith(_DISCARDED_SUFFIXES) or (
            name.endswith(SEGMENT_SUFFIXES[1:]) and parse_prefix(name) not in bases | {None})]

        def safely(read, *args):
            try:
                return read(self.path, *args)
            except checkpoint.CheckpointError as exc:
                report.ignored_checkpoints.append(str(exc))
                return None

        if own:
            recovery_point = safely(checkpoint.read_offset, RECOVERY_POINT_CHECKPOINT)
            high_watermark = safely(checkpoint.read_offset, HIGH_WATERMARK_CHECKPOINT)
            log_start = safely(checkpoint.read_offset, LOG_START_OFFSET_CHECKPOINT)
            cleaner_offset = safely(checkpoint.read_offset, CLEANER_OFFSET_CHECKPOINT)
            if cleaner_offset is None and CLEANER_OFFSET_CHECKPOINT in names:
                cleaner_offset = 0  # unreadable, but the log was cleaned: gaps are its own
        else:
            recovery_point, high_watermark, log_start = self._given[:3]
            cleaner_offset = self._given.cleaner_offset
        self._cleaner_offset = cleaner_offset
        self._gaps = self.config.compact or cleaner_offset is not None
        epochs = safely(checkpoint.read_epochs)
        scan_point = recovery_point
        if epochs is None or recovery_point is None:
            scan_point = 0  # rebuild what is missing from the segments themselves
            report.clean_shutdown = False
        self._epochs = LeaderEpochCache(epochs or ())

        # ---- read: nothing below writes until the log is known to open
        strays = {}
        for base in sorted(bases):
            first = misplaced_first_batch(self.path, base, self.config.batch_bytes_max,
                                          self._gaps)
            if first is None:
                self._segments.append(Segment.open(self.path, base, self.config, now))
            else:
                strays[base] = (f"its first batch starts at offset {first}, not at the base "
                                f"offset {base} its name says")
        scans = self._read_segments(scan_point)
        kept = []
        for segment in self._segments:
            if kept and segment.next_offset == segment.base_offset < kept[-1].next_offset:
                strays[segment.base_offset] = (
                    f"it holds no batch, and its base offset {segment.base_offset} lies "
                    f"inside {_name(kept[-1])}")
            else:
                kept.append(segment)
        held = _held(kept)
        if log_start is not None and not any(
                s.base_offset <= log_start <= s.next_offset for s in kept) and (
                kept or log_start < 0):
            report.ignored_checkpoints.append(
                f"{self._file(LOG_START_OFFSET_CHECKPOINT)}: log start offset {log_start} is "
                f"not an offset the segments hold ({held}); ignored")
            log_start = None
        if log_start is None:
            log_start = kept[0].base_offset if kept else 0
        gap = self._find_gap(kept, scans, log_start)

        # ---- decide
        copied = None
        if gap is not None:
            at, problem = gap
            past = kept[at + 1:]
            end = kept[at].next_offset
            if not set_aside_past_gap:
                files = [_name(s) for s in past]
                hidden = (f"{len(files)} later segment files, {files[0]} to {files[-1]}"
                          if len(files) > 1 else f"the later segment file {files[0]}")
                raise LogGapError(
                    f"the log in {self.path} has a gap in its offsets: {problem}. Opening it "
                    f"would hide the records of {hidden}. Restore the missing or damaged "
                    f"segment (from a backup, or fetch the log again from a replica), or "
                    f"open it with Log.open(path, set_aside_past_gap=True): the log then "
                    f"ends at offset {end}, the files past the gap are renamed to "
                    f"<name>{STRAY_SUFFIX} and nothing is deleted", self.path, end, files)
            report.gap = f"{problem}; opened up to offset {end}"
            for segment in past:
                strays[segment.base_offset] = f"it lies past the gap at offset {end}"
            _, damage = scans.get(kept[at].base_offset, (None, None))
            if damage is not None and damage.kind != reader.ZEROS:
                copied = kept[at]  # damaged: its whole file is kept aside, then it is cut
            del kept[at + 1:]

        # ---- act: set aside, cut, rewrite
        if copied is not None:
            aside = set_aside_names(self.path, copied.base_offset)[LOG_SUFFIX]
            fileio.copy(copied.path(LOG_SUFFIX), os.path.join(self.path, aside))
            report.set_aside.append(f"{_name(copied)} copied whole to {aside} before it is "
                                    "cut at the damage")
        kept_ids = set(map(id, kept))
        for segment in self._segments:
            if id(segment) not in kept_ids:
                segment.close()
        for base, reason in sorted(strays.items()):
            self._set_aside(base, reason)
        for name in leftovers:
            fileio.unlink(os.path.join(self.path, name))
        created = [segment for segment in kept if segment.missing_indexes]
        for segment in created:
            segment.create_missing_indexes()
        if strays or copied is not None or leftovers or created:
            fileio.sync_dir(self.path)
        self._segments = kept
        # segments wholly below the log start offset (an interrupted retention or log start
        # move): deleted below, so neither cut nor rewritten first
        doomed = [segment.base_offset for segment, following in itertools.pairwise(kept)
                  if following.base_offset <= log_start]
        for segment in kept[len(doomed):]:
            scan = scans.get(segment.base_offset)
            if scan is None:
                continue
            result, damage = scan
            dropped = segment.file_bytes - result.valid_bytes
            if dropped and damage.kind == reader.ZEROS:
                report.zero_tail_bytes += dropped
            elif result.error is not None:
                report.truncated_bytes += dropped
                report.first_invalid = f"{segment.path(LOG_SUFFIX)}: {result.error}"
            segment.finish_scan()
            segment.sync(with_indexes=True)

        if not self._segments:
            self._segments = [Segment.create(self.path, log_start, self.config, now)]
            fileio.sync_dir(self.path)
        for segment in self._segments:
            segment.mark_synced()  # trusted, or scanned and synced above, or new and empty
        self._bases = [segment.base_offset for segment in self._segments]
        self._leo = self._segments[-1].next_offset
        self._log_start = min(log_start, self._leo)
        if self._delete_segments_below(self._log_start):
            report.deleted_segments.extend(doomed)
        self._check_checkpoints(recovery_point, high_watermark, epochs)
        if high_watermark is not None and not 0 <= high_watermark <= self._leo:
            high_watermark = None  # reported: never raise the watermark on its word
        # Start, then end: an entry the start clamps to the log end (an empty log) is dropped
        # like any entry at or after the end, so a clean and a crash reopen agree.
        self._epochs.truncate_from_start(self._log_start)
        self._epochs.truncate_from_end(self._leo)
        self._hw = min(max(high_watermark or 0, self._log_start), self._leo)
        self._durable_offset = self._leo
        self._checkpoint_ms = now
        if own or epochs is None or self._epochs.entries() != list(epochs):
            self._write_epochs(sync=own or bool(self._epochs.entries()))
        self._written_epochs = self._epochs.entries()
        self._write_checkpoints(now)
        if own and (report.clean_shutdown or CLEAN_SHUTDOWN_FILE in names):
            try:
                fileio.unlink(os.path.join(self.path, CLEAN_SHUTDOWN_FILE))
            except FileNotFoundError:
                pass
            fileio.sync_dir(self.path)

    def _read_segments(self, scan_point):
        """Load the segments below the recovery point `scan_point` as trusted (indexes
        checked, the end found after the last index entry) and scan the others, writing
        nothing. Returns {base offset: (scan result, `reader.Damage` or None)} of the scanned
        ones."""
        report = self.recovery
        segments = self._segments
        scan_from = len(segments)
        if not report.clean_shutdown:
            # A recovery point inside or past the last segment means the same thing: scan
            # the last one. So a recovery point past the end changes nothing here.
            scan_from = next((i for i, segment in enumerate(segments)
                              if i + 1 == len(segments)
                              or segments[i + 1].base_offset > scan_point), 0)
        for i in range(scan_from):
            problem = segments[i].load()
            if problem:
                # Rebuilt by a scan, and so is every later segment: a scan checks leader
                # epochs against the ones before it, known only from trusted segments.
                report.rebuilt_indexes.append(segments[i].base_offset)
                scan_from = i
                break
        if scan_from and not self._epochs_agree(segments[:scan_from]):
            scan_from = 0
            self._epochs.clear()
        if scan_from < len(segments):
            # from here on nothing is known to be on disk: rebuild the epochs too
            self._epochs.truncate_from_end(segments[scan_from].base_offset)
        scans = {}
        for segment in segments[scan_from:]:
            base = segment.base_offset
            result, damage = segment.scan(self._epochs.epoch_for_offset(base - 1)
                                          if base else -1, self._gaps)
            for epoch, offset in result.epochs:
                self._epochs.assign(epoch, offset)
            scans[base] = (result, damage)
            report.scanned_segments += 1
            report.scanned_bytes += result.valid_bytes
        return scans

    def _epochs_agree(self, trusted):
        """Whether each leader-epoch checkpoint entry that lies in the `trusted` segments
        names a batch there that starts at the entry's offset and carries its epoch (the
        first entry may start inside a batch: the log start moved there). A contradicted
        checkpoint is reported; the caller then rebuilds the epochs by a scan, so that no
        scan judges the segments by an epoch the checkpoint made up."""
        bases = [segment.base_offset for segment in trusted]
        for k, (epoch, offset) in enumerate(self._epochs.entries()):
            slot = bisect.bisect_right(bases, offset) - 1
            if slot < 0 or offset >= trusted[slot].next_offset:
                continue  # below the segments, or left to the scan and the end checks
            segment = trusted[slot]
            try:
                position = segment.position_of(offset)
                first, _, found = STAMPED_HEADER.unpack(
                    segment.read_bytes(position, STAMPED_HEADER_BYTES))
            except CorruptRecordError as exc:
                problem = f"the batch holding offset {offset} does not read back ({exc})"
            else:
                if found == epoch and (first == offset or k == 0):
                    continue
                if self._gaps and first > offset and found >= epoch:
                    continue  # the epoch's first batches were removed by the cleaner
                problem = (f"the batch holding offset {offset} starts at {first} in leader "
                           f"epoch {found}")
            self.recovery.ignored_checkpoints.append(
                f"{self._file(LEADER_EPOCH_CHECKPOINT)}: entry ({epoch}, {offset}) "
                f"contradicts {_name(segment)}: {problem}; ignored, the leader epochs are "
                "rebuilt from the segments")
            return False
        return True

    def _find_gap(self, segments, scans, log_start):
        """(index, what is wrong) of the first segment at or after the one holding
        `log_start` that the next one does not follow: damaged before its end, or ending
        before or after the next one's base offset. None if the offsets run unbroken. The
        last segment's torn tail is no gap: recovery cuts it."""
        first = max(bisect.bisect_right([s.base_offset for s in segments], log_start) - 1, 0)
        for at in range(first, len(segments) - 1):
            segment, following = segments[at], segments[at + 1]
            _, damage = scans.get(segment.base_offset, (None, None))
            problem = reader.gap_between(_name(segment), segment.base_offset,
                                         segment.next_offset, damage, _name(following),
                                         following.base_offset)
            if problem is not None:
                return at, problem
        return None

    def _check_checkpoints(self, recovery_point, high_watermark, epochs):
        """Report checkpoint values the segments contradict (the caller ignores them)."""
        report, leo, held = self.recovery, self._leo, _held(self._segments)
        if recovery_point is not None and not 0 <= recovery_point <= leo:
            report.ignored_checkpoints.append(
                f"{self._file(RECOVERY_POINT_CHECKPOINT)}: recovery point {recovery_point} "
                f"is outside [0, log end offset {leo}] (the segments hold {held}); ignored")
        if high_watermark is not None and not 0 <= high_watermark <= leo:
            report.ignored_checkpoints.append(
                f"{self._file(HIGH_WATERMARK_CHECKPOINT)}: high watermark {high_watermark} "
                f"is outside [0, log end offset {leo}] (the segments hold {held}); ignored, "
                f"the high watermark is the log start offset {self._log_start}")
        past = [entry for entry in epochs or () if entry[1] > leo]
        if past:
            listed = ", ".join(f"({epoch}, {offset})" for epoch, offset in past)
            if len(past) > 3:
                listed = f"({past[0][0]}, {past[0][1]}) to ({past[-1][0]}, {past[-1][1]})"
            report.ignored_checkpoints.append(
                f"{self._file(LEADER_EPOCH_CHECKPOINT)}: {len(past)} entries {listed} start "
                f"past the log "
                f"end offset {leo} (the segments hold {held}); ignored")

    def _set_aside(self, base, reason):
        """Rename the files of segment `base` to `<name>.stray`: kept, out of the log."""
        names = set_aside_names(self.path, base)
        for suffix, new in names.items():
            try:
                fileio.rename(os.path.join(self.path, file_prefix(base) + suffix),
                              os.path.join(self.path, new))
            except FileNotFoundError:
                pass
        self.recovery.set_aside.append(
            f"{file_prefix(base)}{LOG_SUFFIX} -> {names[LOG_SUFFIX]}: {reason}")

    def _file(self, name):
        return os.path.join(self.path, name)

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

    def start_epoch(self, epoch):
        """Record that leader epoch `epoch` starts at the log end offset, before any record
        of it is appended (a partition's new leader does so when it takes over, as Kafka's
        does, so that a follower asking where an older epoch ends gets this start). An
        epoch not above the latest changes nothing. Returns whether it was recorded."""
        if not isinstance(epoch, int) or not 0 <= epoch <= INT32_MAX:
            raise InvalidAppendError(f"leader epoch must be an int32 >= 0, got {epoch!r}")
        with self._lock:
            self._check_writable()
            if epoch <= self._epochs.latest_epoch:
                return False
            entries = self._epochs.entries()
            self._epochs.assign(epoch, self._leo)
            try:
                self._write_epochs(sync=False)  # no record of it yet: nothing to lose
            except StorageError:
                self._epochs = LeaderEpochCache(entries)
                raise
            return True

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
            if self._gaps:
                # a compacted leader's batches skip the offsets its cleaner removed: they
                # must only start at or after the log end offset and increase
                if len(data) >= LOG_OVERHEAD_BYTES \
                        and OFFSET_AND_LENGTH.unpack_from(data)[0] < self._leo:
                    raise InvalidAppendError(
                        f"batch at offset {OFFSET_AND_LENGTH.unpack_from(data)[0]} does not "
                        f"follow the log end offset {self._leo}: appends must not go back")
                scan = _Scan(verify_records=self.config.verify_records)
            else:
                scan = _Scan(expected_offset=self._leo,
                             verify_records=self.config.verify_records)
            base = self._append_locked(data, scan)
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
                                      config.verify_records, config.batch_bytes_max)
        if roll or (header is None and segment.size):
            if header is not None:
                segment.undo_append()
            segment = self._roll(now)
            header = segment.stamp_append(data, self._leo, epoch, config.index_interval_bytes,
                                          config.verify_records, config.batch_bytes_max)
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
        if size > config.append_bytes_max:
            raise InvalidAppendError(
                f"an append of {size} bytes is above append_bytes_max "
                f"({config.append_bytes_max})")
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
            config.batch_bytes_max, True)

    def _should_roll(self, segment, incoming_bytes, now):
        """Kafka's `shouldRoll`: the append would pass segment_bytes, the segment is older
        than segment_ms, or an index is full (one time entry kept for the final one)."""
        config = self.config
        offset_entries_max, time_entries_max = self._index_entries_max
        return (segment.size > config.segment_bytes - incoming_bytes
                or now - segment.created_ms > config.segment_ms
                or len(segment.offset_index) >= offset_entries_max * 8
                or len(segment.time_index) >= time_entries_max * TIME_INDEX_ENTRY_BYTES)

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
        if not self.config.own_checkpoints:  # the owner writes them (`recovery_point`, ...)
            self._checkpointed_recovery_point = min(self._durable_offset, self._leo)
            self._checkpoint_ms = now
            return
        try:
            recovery_point = min(self._durable_offset, self._leo)
            checkpoint.write_offset(self.path, RECOVERY_POINT_CHECKPOINT, recovery_point)
            checkpoint.write_offset(self.path, HIGH_WATERMARK_CHECKPOINT, self._hw)
            checkpoint.write_offset(self.path, LOG_START_OFFSET_CHECKPOINT, self._log_start)
            if self._cleaner_offset is not None:
                checkpoint.write_offset(self.path, CLEANER_OFFSET_CHECKPOINT,
                                        self._cleaner_offset)
        except OSError as exc:
            raise _storage_error(exc, f"writing the checkpoints of {self.path}") from exc
        self._checkpointed_recovery_point = recovery_point
        self._checkpoint_ms = now

    def _write_epochs(self, sync=True):
        """Write the leader-epoch checkpoint. `sync=False` for entries a crash may lose
        (the checkpoint of an empty log; an epoch that starts at the log end with no record
        yet): a lost, empty or torn file is rebuilt from the segments on open."""
        try:
            entries = self._epochs.entries()
            checkpoint.write_epochs(self.path, entries, sync)
            self._written_epochs = entries
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
                # Nothing to cut, but an epoch that starts at the end holds no record (a
                # leader that recorded its epoch and lost leadership before appending):
                # forget it, or a follower's divergence check would find it again and again
                # (Kafka's `truncateTo` does the same).
                if self._epochs.truncate_from_end(self._leo):
                    self._write_epochs()
                return False
            if offset < self._log_start:
                raise InvalidOffsetError(
                    f"cannot truncate to {offset}: below the log start offset {self._log_start}")
            if offset < self._hw:
                raise InvalidOffsetError(
                    f"cannot truncate to {offset}: below the high watermark {self._hw}, "
                    "committed records are never removed")
            self._abort_clean("the log was truncated")
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
                    # The highest first: a crash in between leaves the log whole up to
                    # the segments not yet deleted, never a gap (which refuses to open).
                    for gone in reversed(doomed):
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
            # A cut inside a gap of a compacted log ends the log at the batches before it.
            self._hw = min(self._hw, self._leo)
            if self._cleaner_offset is not None and self._cleaner_offset > self._leo:
                self._cleaner_offset = self._leo  # Kafka's `maybeTruncateCheckpoint`
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
            self._abort_clean("the log was emptied")
            if self._cleaner_offset is not None:
                self._cleaner_offset = offset
            now = self._clock()
            with self._sync_lock:
                try:
                    self._log_start = self._hw = offset
                    checkpoint.write_offset(self.path, LOG_START_OFFSET_CHECKPOINT, offset)
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
            checkpoint.write_offset(self.path, LOG_START_OFFSET_CHECKPOINT, offset)
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

    # ================================================================ compaction

    @property
    def cleaner_offset(self):
        """The log cleaner's first dirty offset: every offset below it was cleaned (Kafka's
        `cleaner-offset-checkpoint` entry). None when the log was never cleaned."""
        return self._cleaner_offset

    @property
    def compacted(self):
        """Whether the log is read as compacted: its offsets may jump forward between
        batches (`LogConfig.compact`, a cleaner offset, or `mark_compacted`)."""
        return self._gaps

    def mark_compacted(self):
        """From now on read the log as compacted (its topic became compacted while it was
        open): a follower takes its leader's cleaned batches, and it may be cleaned. A log
        is never made strict again while open."""
        with self._lock:
            self._gaps = True

    @property
    def cleaning(self):
        """Whether a clean is in progress (`begin_clean` .. `end_clean`)."""
        return self._clean is not None

    def clean_state(self):
        """A `CleanSession` that is not started: what a clean would find now (the cleaner
        judges with it which log to clean)."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"the log in {self.path} is closed")
            infos = [SegmentInfo(s, s.base_offset, s.next_offset, s.size, s.max_timestamp,
                                 len(s.offset_index), len(s.time_index), s.created_ms)
                     for s in self._segments[:-1]]
            return CleanSession(self, infos, self._segments[-1].base_offset)

    def begin_clean(self):
        """Start a clean (`kraftcore.log.cleaner.clean` runs it): a `CleanSession` with the
        log's offsets and its inactive segments now. One clean at a time; `end_clean`
        ends it whatever happened. While it runs, `close` and `delete` abort it and wait
        for it to stop; a truncation aborts it."""
        with self._lock:
            self._check_writable()
            if self._clean is not None:
                raise LogError(f"the log in {self.path} is being cleaned already")
            self._clean = self.clean_state()
            return self._clean

    def end_clean(self, session):
        """The clean `session` is over (done, aborted or failed)."""
        with self._lock:
            if self._clean is session:
                self._clean = None
                self._clean_done.notify_all()

    def abort_clean(self, reason="aborted"):
        """Make the clean in progress, if any, stop at its next check (without waiting)."""
        with self._lock:
            self._abort_clean(reason)

    def _abort_clean(self, reason):
        if self._clean is not None and self._clean.aborted is None:
            self._clean.aborted = reason

    def _stop_clean(self, reason):
        """Abort the clean in progress and wait until it has ended (it checks between reads
        of at most `LOG_CLEANER_READ_BYTES_MAX`, and removes what it wrote). Called with
        the lock held; waiting releases it."""
        clean = self._clean
        if clean is None:
            return
        self._abort_clean(reason)
        while self._clean is clean:
            self._clean_done.wait()

    def _check_clean(self, session):
        if self._clean is not session:
            raise CleanAbortedError(f"the clean of the log in {self.path} has ended")
        session.check()
        if self._closed or self._failed is not None:
            raise CleanAbortedError(f"the log in {self.path} is closed or offline")

    def open_for_clean(self, session, info):
        """A descriptor of its own (the caller closes it) on the `.log` of segment `info`,
        which must still be the log's: a clean reads it outside the lock, safe from the
        segment being closed or deleted meanwhile."""
        with self._lock:
            self._check_clean(session)
            if not any(s is info.segment for s in self._segments):
                raise CleanAbortedError(f"{info.file} of {self.path} is no longer in the log")
            try:
                return os.dup(info.segment.log_fd)
            except OSError as exc:
                raise _storage_error(exc, f"opening {info.file} of {self.path}") from exc

    def create_cleaned_segment(self, session, base_offset, created_ms):
        """New empty segment files `<base>.log.cleaned` (and its indexes) for the cleaner
        to write (a leftover of an earlier attempt is removed first). Never preallocated."""
        with self._lock:
            self._check_clean(session)
        config = dataclasses.replace(self.config, preallocate=False, prefill_bytes=0)
        prefix = os.path.join(self.path, file_prefix(base_offset))
        try:
            for suffix in SEGMENT_SUFFIXES:
                try:
                    fileio.unlink(prefix + suffix + CLEANED_SUFFIX)
                except FileNotFoundError:
                    pass
            segment = Segment.create(self.path, base_offset, config, created_ms,
                                     file_suffix=CLEANED_SUFFIX)
        except OSError as exc:
            raise _storage_error(exc, f"creating a cleaned segment in {self.path}") from exc
        segment.created_ms = created_ms
        return segment

    def replace_segments(self, session, replaced, cleaned):
        """Swap the cleaned segment `cleaned` (written with the `.cleaned` suffix and sealed:
        synced, indexes written) in for the consecutive inactive segments `replaced`
        (`SegmentInfo`s of `session`), which it must cover exactly: same base offset, same
        next offset. Kafka's file dance, each step made durable before the next:

        1. the cleaned files take the `.swap` suffix (a crash from here on completes the
           swap when the log opens: `_resolve_swaps`);
        2. the replaced segments' files take the `.deleted` suffix;
        3. the swap files take their final names; then the `.deleted` files are removed.

        Readers see the old segments or the new one, never a mix: the list changes under
        the lock, and a read in flight holds its own descriptor (`FileRegion`). Raises
        `CleanAbortedError` (the caller deletes `cleaned`) when the clean was aborted or
        the segments are no longer the log's; a failed rename takes the log offline
        (`StorageError`), its files are recovered on the next open."""
        with self._lock:
            self._check_clean(session)
            first = replaced[0].segment
            at = next((i for i, s in enumerate(self._segments) if s is first), None)
            olds = [] if at is None else self._segments[at:at + len(replaced)]
            if at is None or len(olds) != len(replaced) or at + len(olds) >= len(
                    self._segments) or any(o is not r.segment for o, r in zip(olds, replaced)):
                raise CleanAbortedError(
                    f"the segments of {self.path} from {replaced[0].file} changed while they "
                    "were cleaned")
            if cleaned.base_offset != olds[0].base_offset \
                    or cleaned.next_offset != olds[-1].next_offset:
                raise CleanAbortedError(
                    f"the cleaned segment covers offsets [{cleaned.base_offset}, "
                    f"{cleaned.next_offset}), the segments it replaces "
                    f"[{olds[0].base_offset}, {olds[-1].next_offset})")
            if self._cleaner_offset is None:
                # Gaps from now on: say so on disk before the first swap, so that the log
                # opens with them even if its topic stops being compacted.
                self._cleaner_offset = self._log_start
                self._gaps = True
                self._write_checkpoints(self._clock())
            try:
                cleaned.rename_files(SWAP_SUFFIX)
                fileio.sync_dir(self.path)
            except OSError as exc:
                raise _storage_error(exc, f"swapping a cleaned segment into {self.path}") from exc
            try:
                for old in olds:
                    old.rename_files(DELETED_SUFFIX)
                fileio.sync_dir(self.path)
                cleaned.rename_files("")
                fileio.sync_dir(self.path)
            except OSError as exc:
                error = _storage_error(exc, f"swapping a cleaned segment into {self.path}")
                self._go_offline(error)
                raise error from exc
            cleaned.mark_synced()
            self._segments[at:at + len(olds)] = [cleaned]
            self._bases[at:at + len(olds)] = [cleaned.base_offset]
            for old in olds:
                try:
                    old.delete()
                except OSError:
                    old.close()  # a `.deleted` file left behind goes when the log opens

    def set_cleaner_offset(self, session, offset):
        """A clean finished everything below `offset`: the next one starts there."""
        with self._lock:
            self._check_clean(session)
            self._cleaner_offset = max(self._log_start, min(offset, self._leo))
            self._gaps = True
            if self.config.own_checkpoints:
                try:
                    checkpoint.write_offset(self.path, CLEANER_OFFSET_CHECKPOINT,
                                            self._cleaner_offset)
                except OSError as exc:
                    raise _storage_error(exc, f"writing the cleaner offset of {self.path}") \
                        from exc

    def _resolve_swaps(self):
        """Finish the swaps of cleans a crash interrupted, before anything else is read
        (Kafka's `LogLoader`). A `<base>.log.swap` file was whole and synced before it took
        that name: it replaces every segment whose base offset lies in [base, its next
        offset) — their files are deleted (or carry `.deleted` already) and the swap's
        files take their final names. A swap that does not read back whole (the disk
        damaged it after the sync) is undone instead: the replaced segments' `.deleted`
        files get their names back and the swap's files go. Index `.swap` files without
        their `.log` are left to the leftover rule (deleted; the indexes are rebuilt)."""
        names = os.listdir(self.path)
        swap_tail = LOG_SUFFIX + SWAP_SUFFIX
        swaps = sorted(base for base in (parse_prefix(n) for n in names if n.endswith(swap_tail)
                                         and len(n) == 20 + len(swap_tail)) if base is not None)
        if not swaps:
            return
        report = self.recovery
        for base in swaps:
            prefix = os.path.join(self.path, file_prefix(base))
            end, damage = base, None
            for item in reader.read_file(prefix + swap_tail, base_offset=base, contiguous=False,
                                         chunk_bytes=self.config.batch_bytes_max):
                if isinstance(item, reader.Damage):
                    damage = item
                else:
                    end = item.last_offset + 1
            names = os.listdir(self.path)
            segments = {}
            for name in names:
                parsed = parse_segment_name(name, tuple(
                    suffix + tail for suffix in SEGMENT_SUFFIXES for tail in ("", DELETED_SUFFIX)))
                if parsed is not None:
                    segments.setdefault(parsed[0], []).append(name)
            if damage is None and end > base:
                for other, files in segments.items():
                    if base <= other < end:
                        for name in files:
                            fileio.unlink(os.path.join(self.path, name))
                for suffix in SEGMENT_SUFFIXES:
                    if os.path.exists(prefix + suffix + SWAP_SUFFIX):
                        fileio.rename(prefix + suffix + SWAP_SUFFIX, prefix + suffix)
                report.swaps.append(
                    f"{file_prefix(base)}{swap_tail}: a clean's swap, completed (it replaces "
                    f"the segments of offsets [{base}, {end}))")
            else:
                # the segments it was to replace: from its base up to the next one in the log
                later = [b for b, files in segments.items() if b > base and any(
                    n.endswith(LOG_SUFFIX) for n in files)]
                limit = min(later, default=None)
                for other, files in segments.items():
                    if other >= base and (limit is None or other < limit):
                        if not os.path.exists(os.path.join(self.path, file_prefix(other)
                                                           + LOG_SUFFIX)):
                            # index files without their `.log` are the swap's, renamed
                            # ahead of it: the old segment's come back below
                            for name in files:
                                if not name.endswith(DELETED_SUFFIX) \
                                        and not name.endswith(LOG_SUFFIX):
                                    fileio.unlink(os.path.join(self.path, name))
                        for name in files:
                            if name.endswith(DELETED_SUFFIX):
                                target = os.path.join(self.path, name[:-len(DELETED_SUFFIX)])
                                if not os.path.lexists(target):
                                    fileio.rename(os.path.join(self.path, name), target)
                for suffix in SEGMENT_SUFFIXES:
                    try:
                        fileio.unlink(prefix + suffix + SWAP_SUFFIX)
                    except FileNotFoundError:
                        pass
                why = damage.reason if damage is not None else "it holds no batch"
                report.swaps.append(
                    f"{file_prefix(base)}{swap_tail}: a clean's swap that does not read back "
                    f"({why}), undone: the segments it was to replace are kept")
        fileio.sync_dir(self.path)

    # ================================================================ reads

    def read(self, offset, bytes_max=1024 * 1024, *, committed=False, region_bytes_min=None):
        """Whole batches starting with the one that holds `offset`, up to `bytes_max` (the
        first batch is returned whole even if larger). With `committed`, only batches
        below the high watermark. Reading at the end (or at the HW when `committed`) gives
        an empty result; outside [log start offset, log end offset] raises
        `OffsetOutOfRangeError`.

        With `region_bytes_min`, a read of at least that many bytes is not read into
        memory: its `records` is a `kraftcore.types.FileRegion` of the segment file (a
        descriptor of its own, which the caller closes), for a writer that sends it with
        `sendfile`."""
        if not isinstance(offset, int) or not isinstance(bytes_max, int):
            raise TypeError("offset and bytes_max must be ints")
        if bytes_max < 0:
            raise ValueError(f"bytes_max must be >= 0, got {bytes_max}")
        with self._lock:
            if self._closed:
                raise LogClosedError(f"the log in {self.path} is closed")
            end = self._hw if committed else self._leo
            if not self._log_start <= offset <= self._leo:
                raise OffsetOutOfRangeError(offset, self._log_start, self._leo)
            records, first, next_offset = memoryview(b""), offset, offset
            if offset < end:
                index = bisect.bisect_right(self._bases, offset) - 1
                try:
                    for segment in self._segments[index:]:
                        position, length, first, next_offset = segment.span(
                            offset, bytes_max, end)
                        if length or segment.next_offset > offset:
                            break
                    if not length:
                        first = next_offset = offset
                    elif region_bytes_min is not None and length >= region_bytes_min \
                            and (fd := _dup_unless_out_of_descriptors(segment.log_fd)) >= 0:
                        records = FileRegion(os.fdopen(fd, "rb", 0), position, length)
                    else:
                        records = memoryview(segment.read_bytes(position, length))
                except OSError as exc:
                    raise _storage_error(exc, f"reading {self.path}") from exc
            return ReadResult(records, first, next_offset, self._hw, self._log_start, self._leo)

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
            self._stop_clean("the log is closing")
            if self._closed:  # closed by another thread while this one waited
                return
            try:
                with self._sync_lock:
                    durable = self._failed is None  # also after a sync that failed meanwhile
                    if durable:
                        self._segments[-1].seal()
                        with self._durable:
                            self._durable_offset = max(self._durable_offset, self._leo)
                if durable and self.config.own_checkpoints:
                    self._write_epochs()
                    self._write_checkpoints(self._clock())
                    fileio.write_atomic(
                        os.path.join(self.path, CLEAN_SHUTDOWN_FILE),
                        json.dumps({"version": 0, "brokerEpoch": -1}).encode())
                elif durable and self._epochs.entries() != self._written_epochs:
                    self._write_epochs()
            except OSError as exc:
                raise _storage_error(exc, f"closing {self.path}") from exc
            finally:
                self._closed = True
                self._release()

    def delete(self):
        """Close the log and remove its directory (its topic was deleted, or the partition
        moved away). As Kafka does, the directory is first renamed to
        `<topic>-<partition>.<unique>-delete` (one atomic step: a crash after it leaves a
        directory no open mistakes for a log), then its files are removed."""
        if self._ticker is not None:
            self._ticker.stop()
        with self._lock:
            self._stop_clean("the log is being deleted")
            if not self._closed:
                self._closed = True
                self._release()
            parent, name = os.path.split(self.path)
            doomed = os.path.join(parent, f"{name}.{os.urandom(8).hex()}{DELETED_DIR_SUFFIX}")
            try:
                fileio.rename(self.path, doomed)
                fileio.sync_dir(parent)
                for entry in os.listdir(doomed):
                    fileio.unlink(os.path.join(doomed, entry))
                os.rmdir(doomed)
            except OSError as exc:
                raise _storage_error(exc, f"deleting the log in {self.path}") from exc

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
