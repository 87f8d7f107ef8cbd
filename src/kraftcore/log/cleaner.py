"""Log compaction: the cleaner of logs whose `cleanup.policy` includes `compact` (Kafka's
`LogCleaner`, KIP-534 for tombstones). It keeps the last record of every key, removes
tombstones once their delete horizon has passed, and never renumbers: a record keeps its
offset, a batch keeps its base and last offset.

One clean (`clean(log, now_ms, config)`):

1. **What may be cleaned.** The log is split at its cleaner offset (`Log.cleaner_offset`,
   the first dirty offset; the log start offset when the log was never cleaned or when
   the offset lies outside the log) into a clean head and a dirty tail. The dirty tail is
   cleanable up to the first uncleanable offset: the least of the high watermark (Kafka's
   last stable offset; kraftcore has no transactions), the active segment's base offset
   (the active segment is never rewritten), and the base offset of the first dirty
   inactive segment whose largest timestamp is within `min.compaction.lag.ms` of now. The
   log is cleaned when its cleanable bytes are more than `min.cleanable.dirty.ratio` of
   its clean and cleanable bytes (Kafka's `LogToClean.cleanableRatio`, strictly above).
2. **The offset map.** The cleanable range's records with a key give a map key -> last
   offset, batch by batch, until it would pass `offset_map_bytes` (Kafka's
   `log.cleaner.dedupe.buffer.size`; each key counts its bytes plus
   `LOG_CLEANER_MAP_ENTRY_BYTES`); the map's latest offset is the last offset of the last
   batch mapped, or of a whole segment mapped. This clean ends there: its end offset is
   the latest offset + 1, and the next clean starts there.
3. **The rewrite.** Every inactive segment from the first up to the end offset is copied,
   in groups of consecutive segments whose data, offset index and time index together fit
   one segment (`segment.bytes`, `segment.index.bytes`) and whose offsets fit an int32
   above the group's base (Kafka's `groupSegmentsBySize`), into one new segment named
   after the group's first, keeping of each batch:

   * a control batch as it is (kraftcore writes none; Kafka keeps them unless they end a
     transaction);
   * the records past the map's latest offset; a keyed record whose offset is at least the
     map's offset for its key, unless it is a tombstone (null value) whose batch's delete
     horizon has passed (`now_ms >= horizon`); never a record without a key (Kafka counts
     it as invalid and drops it);
   * a batch whose records all stay is copied byte for byte, unless it holds a tombstone
     and no delete horizon yet: then, as one with some records removed, it is written
     again with the same base offset, last offset delta, leader epoch, producer id, epoch
     and base sequence, codec and timestamp type, its records keeping their offsets and
     timestamps. **Tombstone removal follows KIP-534:** the first clean that keeps a
     tombstone sets the batch's delete horizon — attribute bit 6 and the base timestamp
     `now_ms + delete.retention.ms`, the records' timestamp deltas taken from it — and a
     later clean past the horizon removes the tombstone. (Not the Kafka 2.x rule based on
     a segment's last-modified time: batches are v2 only.)
   * a batch none of whose records stay is removed, except that it stays as an empty
     batch (its header alone: no records, base timestamp -1, its max timestamp, producer
     fields and offsets kept; Kafka's `writeEmptyHeader`) when it is the last batch of an
     active idempotent producer (`producer_last_offsets`, so its sequence survives a
     restart), when its next offset is the first uncleanable offset (Kafka keeps the last
     batch of a cleaning round), and — kraftcore's own rule — when it is the last batch of
     its group, so that a cleaned segment ends exactly where the segments it replaces
     ended: the segments of a log keep tiling its offsets, and a crash during the swap is
     recovered without guessing what a `.swap` file replaces.

   Only the offsets between batches (and inside a rewritten batch) can go missing: a
   compacted log's offsets jump forward where records were removed, which its `LogConfig`
   (`compact=True`) lets recovery and follower appends accept.
4. **The swap** (`Log.replace_segments`): the new segment is written as
   `<base>.log.cleaned` (`.index.cleaned`, `.timeindex.cleaned`), synced, renamed to
   `.swap`, the replaced segments renamed to `.deleted`, the `.swap` files to their final
   names, each step made durable before the next; then the `.deleted` files go. A crash
   at any point leaves files `Log.open` recovers: `.cleaned` files are deleted (the old
   segments are whole), a `.log.swap` is completed (the old segments it covers are
   deleted) — so the log reads either as before the group's clean or as after it, with
   the same offsets and values. Groups are swapped one at a time; the cleaner offset moves
   to the end offset once all are.

Bad input: a batch of the range that does not read back (framing, CRC, records) stops the
clean with `CorruptRecordError` naming the file and byte; what was swapped in before is
complete and correct, nothing of the rest is changed. A clean aborted by the log (closing,
truncated, its segments changed) raises `CleanAbortedError` and leaves nothing behind.

Threads: `clean` is meant to run outside the thread that serves the log. It reads the
segments through descriptors of its own and holds the log's lock only to take them, to
swap and to record its end; appends, reads (sendfile regions included) and follower
appends go on meanwhile. No clock here: `now_ms` is the caller's.
"""

import dataclasses
import os
from typing import NamedTuple

from kraftcore import codec
from kraftcore.errors import ConfigError, CorruptRecordError, StorageError
from kraftcore.layout import (BATCH_HEADER, BATCH_HEADER_BYTES, BATCH_LENGTH_MIN, CONTROL_MASK,
                              CRC_OFFSET, CRC_START_OFFSET, INT32_MAX, LOG_OVERHEAD_BYTES,
                              MAGIC, OFFSET_AND_LENGTH, TIMESTAMP_TYPE_MASK,
                              TRANSACTIONAL_MASK)
from kraftcore.limits import LOG_CLEANER_MAP_ENTRY_BYTES, LOG_CLEANER_READ_BYTES_MAX
from kraftcore.log import fileio

__all__ = ["CleanerConfig", "Cleanable", "CleanResult", "cleanable", "clean",
           "DELETE_RETENTION_MS_DEFAULT"]

DELETE_RETENTION_MS_DEFAULT = 86_400_000  # delete.retention.ms: one day
_NO_TIMESTAMP = -1


@dataclasses.dataclass(frozen=True)
class CleanerConfig:
    """How one log is cleaned: its topic's compaction settings (Kafka's names and defaults
    in the comments) and the memory of the offset map."""

    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    delete_retention_ms: int = DELETE_RETENTION_MS_DEFAULT  # delete.retention.ms
    offset_map_bytes: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size

    def __post_init__(self):
        ratio = self.min_cleanable_dirty_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) \
                or not 0 <= ratio <= 1:
            raise ConfigError(f"min.cleanable.dirty.ratio must be in [0, 1], got {ratio!r}")
        for name, low in (("min_compaction_lag_ms", 0), ("delete_retention_ms", 0),
                          ("offset_map_bytes", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an int >= {low}, got {value!r}")


class Cleanable(NamedTuple):
    """What a log offers a clean (Kafka's `LogToClean`): the dirty range [first dirty
    offset, first uncleanable offset), the bytes of the segments before it (clean) and of
    the inactive segments it spans (cleanable)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int

    @property
    def dirty_ratio(self):
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def worth_cleaning(self, config):
        """Kafka's rule: some cleanable bytes, and a ratio above the topic's minimum."""
        return self.cleanable_bytes > 0 and self.dirty_ratio > config.min_cleanable_dirty_ratio


class CleanResult(NamedTuple):
    """What one clean did."""

    first_dirty_offset: int  # where the map started
    end_offset: int  # the new cleaner offset: the next clean starts here
    bytes_before: int  # of the segments rewritten
    bytes_after: int
    segments_before: int
    segments_after: int
    records_read: int
    records_kept: int
    tombstones_removed: int
    batches_removed: int


def cleanable(session, now_ms, config):
    """The `Cleanable` of the log a `CleanSession` (`Log.begin_clean`) looks at."""
    start, end = session.log_start_offset, session.log_end_offset
    first_dirty = session.cleaner_offset
    if first_dirty is None or not start <= first_dirty <= end:
        first_dirty = start
    segments = session.segments
    uncleanable = min(session.high_watermark, session.active_base_offset)
    if config.min_compaction_lag_ms > 0:
        for info in segments:
            if info.next_offset > first_dirty \
                    and info.max_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, info.base_offset)
                break
    uncleanable = max(first_dirty, uncleanable)
    # Kafka's `calculateCleanableBytes`: up to the base of the segment holding the first
    # uncleanable offset
    bound = session.active_base_offset
    for info in segments:
        if info.base_offset <= uncleanable < info.next_offset or info.base_offset >= uncleanable:
            bound = info.base_offset
            break
    clean_bytes = sum(i.size for i in segments if i.base_offset < first_dirty)
    cleanable_bytes = sum(i.size for i in segments
                          if i.base_offset < bound and i.next_offset > min(first_dirty, bound))
    return Cleanable(first_dirty, uncleanable, clean_bytes, cleanable_bytes)


def clean(log, now_ms, config=CleanerConfig(), *, producer_last_offsets=(), force=False,
          on_group=None):
    """Clean `log` (see the module docstring) if it is worth it (`force`: whenever there is
    a cleanable range). Returns a `CleanResult`, or None when nothing was done.

    `producer_last_offsets`: the last offsets of the active idempotent producers' last
    batches (kept, empty if need be). `on_group(step)` is called between the steps of each
    group's swap with "written" (the `.cleaned` files synced) and "swapped" (tests stop
    there)."""
    if not isinstance(now_ms, int):
        raise TypeError(f"now_ms must be an int, got {type(now_ms).__name__}")
    session = log.begin_clean()
    try:
        offered = cleanable(session, now_ms, config)
        if not (force and offered.first_uncleanable_offset > offered.first_dirty_offset) \
                and not offered.worth_cleaning(config):
            return None
        stats = _Stats()
        offsets, latest = _build_offset_map(log, session, offered, config, stats)
        if latest < offered.first_dirty_offset:
            return None  # no batch in the dirty range
        end = latest + 1
        todo = [info for info in session.segments if info.base_offset < end]
        rules = _Rules(offsets, latest, now_ms, config.delete_retention_ms,
                       frozenset(producer_last_offsets), offered.first_uncleanable_offset)
        segments_after = 0
        for group in _groups(todo, session.config):
            _clean_group(log, session, group, rules, stats, on_group)
            segments_after += 1
        log.set_cleaner_offset(session, end)
        return CleanResult(offered.first_dirty_offset, end, stats.bytes_before,
                           stats.bytes_after, len(todo), segments_after, stats.records_read,
                           stats.records_kept, stats.tombstones_removed,
                           stats.batches_removed)
    finally:
        log.end_clean(session)


class _Stats:
    def __init__(self):
        self.bytes_before = self.bytes_after = 0
        self.records_read = self.records_kept = 0
        self.tombstones_removed = self.batches_removed = 0


class _Rules(NamedTuple):
    offsets: dict  # key -> last offset in the mapped range
    latest: int  # the map's latest offset: records after it all stay
    now_ms: int
    delete_retention_ms: int
    producer_last_offsets: frozenset
    first_uncleanable_offset: int


# ------------------------------------------------------------------ reading


def _read_batches(log, session, info):
    """Yield the decoded batches of segment `info`, [(RecordBatch, its bytes)] a read of at
    most `LOG_CLEANER_READ_BYTES_MAX` (or one batch) at a time; every batch checked
    (framing, CRC, records). `CorruptRecordError` names the file and byte where they stop."""
    fd = log.open_for_clean(session, info)
    file = os.path.join(session.path, info.file)
    try:
        position, size = 0, info.size
        while position < size:
            session.check()
            want = min(LOG_CLEANER_READ_BYTES_MAX, size - position)
            data = fileio.pread(fd, want, position)
            whole = _whole_batches(data)
            if whole == 0:
                if len(data) < LOG_OVERHEAD_BYTES:
                    raise CorruptRecordError(
                        f"{file} ends inside a batch header at byte {position}", position)
                length = OFFSET_AND_LENGTH.unpack_from(data)[1]
                need = LOG_OVERHEAD_BYTES + length
                if length < BATCH_LENGTH_MIN or need > size - position:
                    raise CorruptRecordError(
                        f"{file}: the batch at byte {position} declares {need} bytes, "
                        f"{size - position} are left in the segment", position)
                data = fileio.pread(fd, need, position)
                whole = _whole_batches(data)
                if whole == 0:
                    raise CorruptRecordError(f"{file} ends inside the batch at byte "
                                             f"{position}", position)
            view = memoryview(data)[:whole]
            result = codec.scan_batches(view, info.base_offset, position, 1 << 62, 0,
                                        stop_on_error=True)
            if result.error is not None:
                raise CorruptRecordError(
                    f"{file}: {getattr(result.error, 'reason', result.error)}",
                    position + result.valid_bytes)
            batches = codec.decode_batches(view, verify=False)
            yield [(batch, view[batch.position:batch.position + batch.size_bytes])
                   for batch in batches]
            position += whole
    finally:
        os.close(fd)


def _whole_batches(data):
    """The bytes of the whole batches `data` starts with, by their framing alone."""
    position, end = 0, len(data)
    while position + LOG_OVERHEAD_BYTES <= end:
        length = OFFSET_AND_LENGTH.unpack_from(data, position)[1]
        if length < BATCH_LENGTH_MIN or position + LOG_OVERHEAD_BYTES + length > end:
            break
        position += LOG_OVERHEAD_BYTES + length
    return position


# ------------------------------------------------------------------ the offset map


def _build_offset_map(log, session, offered, config, stats):
    """({key: last offset}, latest offset) of the dirty range, within the map's memory."""
    first, stop = offered.first_dirty_offset, offered.first_uncleanable_offset
    offsets = {}
    used = 0
    budget = config.offset_map_bytes
    latest = first - 1
    infos = [i for i in session.segments if i.next_offset > first and i.base_offset < stop]
    for k, info in enumerate(infos):
        full = False
        for chunk in _read_batches(log, session, info):
            for batch, _ in chunk:
                if batch.last_offset < first:
                    continue
                if batch.next_offset > stop:
                    full = True  # it ends past the range: the map ends before it
                    break
                if not batch.is_control:
                    keys = [r.key for r in batch.records
                            if r.key is not None and r.offset >= first]
                    cost = sum(len(key) + LOG_CLEANER_MAP_ENTRY_BYTES for key in keys
                               if key not in offsets)
                    if used + cost > budget and latest >= first:
                        return offsets, latest  # full: the next clean goes on from here
                    used += cost
                    for record in batch.records:
                        if record.key is not None and record.offset >= first:
                            offsets[record.key] = record.offset
                latest = batch.last_offset
            if full:
                break
        if full:
            break
        # the whole segment is mapped: offsets up to the next segment (or the range's end)
        following = infos[k + 1].base_offset if k + 1 < len(infos) else info.next_offset
        latest = max(latest, min(following, stop) - 1)
    return offsets, latest


# ------------------------------------------------------------------ the rewrite


def _groups(infos, config):
    """Consecutive segments whose data and indexes fit one segment (Kafka's
    `groupSegmentsBySize`), and whose offsets fit an int32 above the group's base."""
    groups = []
    at = 0
    while at < len(infos):
        group = [infos[at]]
        size, index_bytes, time_bytes = infos[at].size, infos[at].offset_index_bytes, \
            infos[at].time_index_bytes
        at += 1
        while at < len(infos):
            info = infos[at]
            if size + info.size > config.segment_bytes \
                    or index_bytes + info.offset_index_bytes > config.segment_index_bytes \
                    or time_bytes + info.time_index_bytes > config.segment_index_bytes \
                    or info.next_offset - 1 - group[0].base_offset > INT32_MAX:
                break
            group.append(info)
            size += info.size
            index_bytes += info.offset_index_bytes
            time_bytes += info.time_index_bytes
            at += 1
        groups.append(group)
    return groups


def _clean_group(log, session, group, rules, stats, on_group):
    """Write the cleaned copy of `group` and swap it in."""
    cleaned = log.create_cleaned_segment(session, group[0].base_offset, group[-1].created_ms)
    swapped = False
    config = session.config
    try:
        group_end = group[-1].next_offset
        for info in group:
            stats.bytes_before += info.size
            for chunk in _read_batches(log, session, info):
                pieces = []
                for batch, data in chunk:
                    kept = _filter(batch, data, rules, stats, batch.next_offset == group_end)
                    if kept is not None:
                        pieces.append(kept)
                if pieces:
                    out = b"".join(pieces)
                    result = codec.scan_batches(
                        out, cleaned.base_offset, cleaned.size, config.index_interval_bytes,
                        cleaned.bytes_since_index, cleaned.max_timestamp,
                        cleaned.offset_of_max_timestamp, cleaned.last_index_timestamp,
                        verify_records=False)
                    cleaned.append(out, result)
        cleaned.seal()
        stats.bytes_after += cleaned.size
        if on_group is not None:
            on_group("written")
        log.replace_segments(session, group, cleaned)
        swapped = True
        if on_group is not None:
            on_group("swapped")
    except OSError as exc:
        if isinstance(exc, StorageError):
            raise
        raise StorageError(exc.errno, f"cleaning {session.path} failed: "
                                      f"{exc.strerror or exc}") from exc
    finally:
        if not swapped:
            try:
                cleaned.delete()
            except OSError:
                pass  # a `.cleaned` file left behind goes when the log opens


def _filter(batch, data, rules, stats, last_of_group):
    """The bytes of `batch` (`data`) after the clean: the same bytes, a rewritten batch, an
    empty batch, or None (removed)."""
    if batch.is_control:
        return data
    records = batch.records
    stats.records_read += len(records)
    latest, offsets = rules.latest, rules.offsets
    horizon = batch.base_timestamp if batch.has_delete_horizon else None
    expired = horizon is not None and rules.now_ms >= horizon
    kept = []
    tombstones = False
    for record in records:
        if record.offset <= latest:
            key = record.key
            if key is None or record.offset < offsets.get(key, -1):
                continue
            if record.value is None and expired:
                stats.tombstones_removed += 1
                continue
        kept.append(record)
        if record.value is None:
            tombstones = True
    stats.records_kept += len(kept)
    set_horizon = tombstones and horizon is None
    if kept and len(kept) == len(records) and not set_horizon:
        return data
    if kept:
        base = batch.base_offset
        return codec.encode_batch(
            [r.value for r in kept], keys=[r.key for r in kept],
            headers=[r.headers for r in kept], timestamps=[r.timestamp for r in kept],
            base_offset=base, leader_epoch=batch.partition_leader_epoch,
            compression=batch.compression, producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
            transactional=batch.is_transactional, log_append_time=batch.timestamp_type == 1,
            offset_deltas=[r.offset - base for r in kept],
            last_offset_delta=batch.last_offset_delta,
            delete_horizon_ms=(rules.now_ms + rules.delete_retention_ms if set_horizon
                               else horizon))
    if last_of_group or batch.next_offset == rules.first_uncleanable_offset or (
            batch.producer_id >= 0 and batch.last_offset in rules.producer_last_offsets):
        return empty_batch(batch)
    stats.batches_removed += 1
    return None


def empty_batch(batch):
    """`batch`'s header alone, without records (Kafka's `DefaultRecordBatch.
    writeEmptyHeader`): its offsets, leader epoch, producer id, epoch and base sequence,
    timestamp type, transactional and control bits and max timestamp; no codec, base
    timestamp -1, no records."""
    attributes = batch.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    out = bytearray(BATCH_HEADER.pack(
        batch.base_offset, BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES,
        batch.partition_leader_epoch, MAGIC, 0, attributes, batch.last_offset_delta,
        _NO_TIMESTAMP, batch.max_timestamp, batch.producer_id, batch.producer_epoch,
        batch.base_sequence, 0))
    crc = codec.crc32c(memoryview(out)[CRC_START_OFFSET:])
    out[CRC_OFFSET:CRC_OFFSET + 4] = crc.to_bytes(4, "big")
    return bytes(out)
