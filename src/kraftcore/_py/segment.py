"""Segment kernels: scanning the batches of a segment file or of an append, building Kafka's
offset and time index entries, assigning offsets and leader epochs, and index lookups
(kafka-facts §2.8, §3.2–3.4, §3.7).

Index entries (big-endian; their formats are `kraftcore.layout`'s):

    .index      relative offset int32, position int32
    .timeindex  timestamp int64, relative offset int32

Cadence (Kafka's `LogSegment`): before a batch (or, for an append, the whole set of batches)
is added, if more than `index_interval_bytes` were added since the last entry, an offset
entry (last offset of the batch or set -> the position where it starts) is written, and a
time entry (segment max timestamp so far -> last offset of the batch holding it) when that
timestamp is greater than the previous time entry's. So the first batch of a segment is
never indexed.

`SegmentState` holds what an append changes in the active segment (its size, next offset,
max timestamp and in-memory indexes); its `stamp_append` takes a leader's one-batch append
in one call: check, assign the offset and epoch (returned as a patched header, the
caller's bytes untouched), index, and advance, or change nothing.

`scan_batches` validates every batch (framing, CRC and, with `verify_records`, each record),
checks offsets (increasing, inside the segment's int32 relative range, contiguous when asked),
records the leader epochs that start in the scanned bytes, and optionally rewrites each
batch's base offset and partition leader epoch in place (both lie outside the CRC, so the
CRC stays valid). With `stop_on_error` it returns the bytes that were valid up to the first
bad batch (recovery after a torn write) instead of raising.

This module is the specification; `kraftcore._c.segment` must behave the same on every input.
"""

import operator
import struct

from kraftcore._py.records import check_batch
from kraftcore.errors import CorruptRecordError, InvalidAppendError
from kraftcore.kernel_api import NO_STAMP, ScanResult
from kraftcore.layout import (BASE_OFFSET_OFFSET, BATCH_LENGTH_MIN, HEADER_BYTES_UP_TO_MAGIC,
                              INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
                              LAST_OFFSET_DELTA_OFFSET,
                              LOG_OVERHEAD_BYTES, OFFSET_AND_LENGTH, OFFSET_INDEX_ENTRY,
                              OFFSET_INDEX_ENTRY_BYTES, PARTITION_LEADER_EPOCH_OFFSET,
                              RELATIVE_OFFSET_MAX, SIZE_FIELD_MIN, STAMPED_HEADER,
                              TIME_INDEX_ENTRY, TIME_INDEX_ENTRY_BYTES)

_BASE_OFFSET = struct.Struct(">q")
_INT32 = struct.Struct(">i")


def _view(buffer):
    view = memoryview(buffer)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def scan_batches(
    buffer,
    segment_base_offset,
    position_base=0,
    index_interval_bytes=4096,
    bytes_since_index=0,
    max_timestamp=-1,
    offset_of_max_timestamp=-1,
    last_index_timestamp=-1,
    latest_epoch=-1,
    expected_offset=-1,
    assign_offset=-1,
    stamp_epoch=NO_STAMP,
    index_per_batch=True,
    verify_records=True,
    strict_epochs=False,
    stop_on_error=False,
    batch_bytes_max=-1,
    stamp_in_place=True,
):
    """Validate and index the batches in `buffer`, which starts at byte `position_base` of
    the segment whose base offset is `segment_base_offset`.

    * `expected_offset` >= 0: the first batch must start there and every batch must follow
      the previous one without a gap (a follower append). Otherwise base offsets only have
      to increase.
    * `assign_offset` >= 0: rewrite base offsets in place starting there (a leader append;
      `buffer` must be writable). `stamp_epoch` >= -1 also rewrites the leader epoch.
      With `stamp_in_place=False` the buffer is left as it is (it may be read-only): every
      check and result is the same as if the fields had been rewritten, and the caller
      writes the stamped fields itself (bytes 0-7 and 12-15 of each batch).
    * `strict_epochs`: a batch whose leader epoch is below the latest one is refused.
    * `index_per_batch`: index each batch (recovery) or the set as a whole (an append).
    * `stop_on_error`: return at the first bad batch with `error` set instead of raising.
    * `batch_bytes_max` >= 0: a larger batch is refused (`InvalidAppendError`).
    """
    view = _view(buffer)
    if assign_offset >= 0 and stamp_in_place and view.readonly:
        raise TypeError("assigning offsets needs a writable buffer")
    total = len(view)
    pos = 0
    batches = 0
    first_offset = next_offset = -1
    previous_next = segment_base_offset if expected_offset < 0 else expected_offset
    offset_entries = bytearray()
    time_entries = bytearray()
    epochs = []
    error = None
    while pos < total:
        try:
            fields = check_batch(view, pos, verify_records)
            base_offset, batch_length, epoch = fields[0], fields[1], fields[2]
            last_delta, batch_max_ts = fields[6], fields[8]
            if 0 <= batch_bytes_max < LOG_OVERHEAD_BYTES + batch_length:
                raise InvalidAppendError(
                    f"the batch at byte {pos} is {LOG_OVERHEAD_BYTES + batch_length} bytes, "
                    f"above the limit of {batch_bytes_max}"
                )
            if assign_offset >= 0:
                base_offset = assign_offset
                assign_offset += last_delta + 1
                if stamp_epoch != NO_STAMP:
                    epoch = stamp_epoch
                if stamp_in_place:
                    _BASE_OFFSET.pack_into(view, pos + BASE_OFFSET_OFFSET, base_offset)
                    if stamp_epoch != NO_STAMP:
                        _INT32.pack_into(view, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)
            last_offset = base_offset + last_delta
            if expected_offset >= 0 and base_offset != previous_next:
                raise InvalidAppendError(
                    f"batch at offset {base_offset} does not follow offset "
                    f"{previous_next - 1}: appends must be contiguous"
                )
            if base_offset < previous_next:
                raise CorruptRecordError(
                    f"base offset {base_offset} is below {previous_next}, "
                    "offsets must increase", pos)
            if last_offset - segment_base_offset > RELATIVE_OFFSET_MAX:
                raise CorruptRecordError(
                    f"offset {last_offset} does not fit the segment based at "
                    f"{segment_base_offset}", pos)
            if strict_epochs and 0 <= epoch < latest_epoch:
                raise InvalidAppendError(
                    f"batch at offset {base_offset} has leader epoch {epoch}, "
                    f"below the log's latest epoch {latest_epoch}"
                )
        except (CorruptRecordError, InvalidAppendError) as exc:
            if not stop_on_error:
                raise
            error = exc
            break
        if epoch >= 0 and epoch > latest_epoch:
            epochs.append((epoch, base_offset))
            latest_epoch = epoch
        if batch_max_ts > max_timestamp:
            max_timestamp, offset_of_max_timestamp = batch_max_ts, last_offset
        size = LOG_OVERHEAD_BYTES + batch_length
        if index_per_batch:
            if bytes_since_index > index_interval_bytes:
                last_index_timestamp = _add_entries(
                    offset_entries, time_entries, segment_base_offset, last_offset,
                    position_base + pos, max_timestamp, offset_of_max_timestamp,
                    last_index_timestamp)
                bytes_since_index = 0
            bytes_since_index += size
        if first_offset < 0:
            first_offset = base_offset
        next_offset = previous_next = last_offset + 1
        batches += 1
        pos += size
    if not index_per_batch and batches:
        if bytes_since_index > index_interval_bytes:
            last_index_timestamp = _add_entries(
                offset_entries, time_entries, segment_base_offset, next_offset - 1,
                position_base, max_timestamp, offset_of_max_timestamp, last_index_timestamp)
            bytes_since_index = 0
        bytes_since_index += pos
    return ScanResult(
        pos, batches, first_offset, next_offset, bytes(offset_entries), bytes(time_entries),
        bytes_since_index, max_timestamp, offset_of_max_timestamp, last_index_timestamp,
        epochs, error,
    )


class SegmentState:
    """What an append changes in the active segment of a log: the bytes of whole batches it
    holds (`size`; `file_bytes` is the file's length, longer when preallocated), the offset
    after its last batch, its max timestamp and the batch holding it, and its in-memory
    `.index` / `.timeindex` entries with their cadence (`bytes_since_index`,
    `last_index_timestamp`). `kraftcore.log.segment.Segment` is built on it.

    `stamp_append` is the leader's append of one encoded batch as one call; `undo_append`
    takes the last one back when the caller's write of it failed."""

    def __init__(self, base_offset=0):
        self.base_offset = base_offset
        self.size = self.file_bytes = 0
        self.next_offset = base_offset
        self.bytes_since_index = 0
        self.max_timestamp = self.offset_of_max_timestamp = self.last_index_timestamp = -1
        self.offset_index = bytearray()
        self.time_index = bytearray()
        self._undo = None

    def stamp_append(self, buffer, assign_offset, stamp_epoch, index_interval_bytes,
                     verify_records=True, batch_bytes_max=-1):
        """Take `buffer`, exactly one encoded batch, as the next batch of this segment, with
        base offset `assign_offset` and partition leader epoch `stamp_epoch`, to be written
        at byte `size`. The batch is checked as `scan_batches` checks an append (framing,
        CRC, the records with `verify_records`, `batch_bytes_max` when >= 0); the offset
        and epoch are not written into `buffer` (it may be read-only): the return value is
        its first 16 bytes with them stamped, to be written followed by `buffer[16:]`.

        Returns None, with nothing changed, when the batch's offsets do not fit this
        segment's int32 relative range (the caller rolls a new segment). Bad input raises
        with nothing changed: `CorruptRecordError` or `InvalidAppendError` for the batch,
        `TypeError` for a number that is not an int (or indexes that are not bytearrays),
        `OverflowError` for a number outside int64,
        `ValueError` for an offset below the segment's base or whose batch would end past
        2^63 - 1, or an epoch outside int32."""
        self._undo = None
        assign_offset = _int64(assign_offset)
        stamp_epoch = _int64(stamp_epoch)
        index_interval_bytes = _int64(index_interval_bytes)
        batch_bytes_max = _int64(batch_bytes_max)
        if assign_offset < self.base_offset:
            raise ValueError(
                f"offset {assign_offset} is below the segment's base offset {self.base_offset}")
        if not INT32_MIN <= stamp_epoch <= INT32_MAX:
            raise ValueError(f"leader epoch {stamp_epoch} is not an int32")
        if type(self.offset_index) is not bytearray or type(self.time_index) is not bytearray:
            raise TypeError("the segment's indexes are not bytearrays")
        view = _view(buffer)
        fields = check_batch(view, 0, verify_records)
        batch_length, last_delta, batch_max_ts = fields[1], fields[6], fields[8]
        size = LOG_OVERHEAD_BYTES + batch_length
        if size != len(view):
            raise InvalidAppendError(
                f"expected one record batch of {len(view)} bytes, found a batch of {size} "
                "bytes followed by more")
        if 0 <= batch_bytes_max < size:
            raise InvalidAppendError(
                f"the batch at byte 0 is {size} bytes, above the limit of {batch_bytes_max}")
        last_offset = assign_offset + last_delta  # last_delta >= 0 (check_batch)
        if last_offset >= INT64_MAX:
            raise ValueError(f"a batch of {last_delta + 1} offsets at {assign_offset} would "
                             "end past 2^63 - 1")
        if last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
            return None
        header = STAMPED_HEADER.pack(assign_offset, batch_length, stamp_epoch)
        # Work out the new state, then change the indexes (which may fail: taken back
        # whole) and only then the numbers.
        max_ts, offset_of_max_ts = self.max_timestamp, self.offset_of_max_timestamp
        if batch_max_ts > max_ts:
            max_ts, offset_of_max_ts = batch_max_ts, last_offset
        last_index_ts, since_index = self.last_index_timestamp, self.bytes_since_index
        index_bytes, time_index_bytes = len(self.offset_index), len(self.time_index)
        if since_index > index_interval_bytes:
            try:
                last_index_ts = _add_entries(
                    self.offset_index, self.time_index, self.base_offset, last_offset,
                    self.size, max_ts, offset_of_max_ts, last_index_ts)
            except BaseException:
                del self.offset_index[index_bytes:]
                del self.time_index[time_index_bytes:]
                raise
            since_index = 0
        self._undo = (self.size, self.file_bytes, self.next_offset, self.bytes_since_index,
                      self.max_timestamp, self.offset_of_max_timestamp,
                      self.last_index_timestamp, index_bytes, time_index_bytes)
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, offset_of_max_ts
        self.last_index_timestamp = last_index_ts
        self.bytes_since_index = since_index + size
        self.size += size
        self.file_bytes = max(self.file_bytes, self.size)
        self.next_offset = last_offset + 1
        return header

    def undo_append(self):
        """Put the state back as it was before the last `stamp_append`, which must have taken
        its batch; once."""
        undo = self._undo
        if undo is None:
            raise RuntimeError("no append to undo")
        self._undo = None
        (self.size, self.file_bytes, self.next_offset, self.bytes_since_index,
         self.max_timestamp, self.offset_of_max_timestamp, self.last_index_timestamp,
         index_bytes, time_index_bytes) = undo
        del self.offset_index[index_bytes:]
        del self.time_index[time_index_bytes:]


def _int64(value):
    """`value` as an int64, refused as the native kernel's argument conversion refuses it."""
    value = operator.index(value)
    if not INT64_MIN <= value <= INT64_MAX:
        raise OverflowError(f"{value} does not fit an int64")
    return value


def _add_entries(offset_entries, time_entries, base, last_offset, position, max_ts,
                 offset_of_max_ts, last_index_ts):
    offset_entries += OFFSET_INDEX_ENTRY.pack(last_offset - base, position)
    if max_ts > last_index_ts:
        time_entries += TIME_INDEX_ENTRY.pack(max_ts, offset_of_max_ts - base)
        return max_ts
    return last_index_ts


def locate_batches(buffer, target_offset, end_offset, bytes_max):
    """Find whole batches in `buffer` (batches back to back from its start) for a read.

    Reads headers only (no CRC), following Kafka's scanning rules (§2.8). Returns
    `(start, end, partial, partial_size)`:

    * `start`: position of the first batch whose last offset >= `target_offset`, -1 if
      none is complete in the buffer;
    * `end`: end of the whole batches taken from `start`: each must end below `end_offset`
      (next offset <= `end_offset`) and fit in `bytes_max`, except that the first batch is
      always taken;
    * `partial`: position of an incomplete batch where the buffer ended before a limit was
      reached, else -1; `partial_size` is its full size when its header says so, else 0.
    """
    view = _view(buffer)
    total = len(view)
    pos = 0
    start = end = -1
    while True:
        if total - pos < HEADER_BYTES_UP_TO_MAGIC:
            if pos == total:
                return start, (start if end < 0 else end), -1, 0
            return start, (start if end < 0 else end), pos, 0
        base_offset, length = OFFSET_AND_LENGTH.unpack_from(view, pos)
        if length < SIZE_FIELD_MIN:
            raise CorruptRecordError(
                f"batch size {length} is below the minimum {SIZE_FIELD_MIN}", pos)
        size = LOG_OVERHEAD_BYTES + length
        if size > total - pos:
            return start, (start if end < 0 else end), pos, size
        if length < BATCH_LENGTH_MIN:
            raise CorruptRecordError(
                f"batch length {length} is below the minimum {BATCH_LENGTH_MIN}", pos)
        last_offset = base_offset + _INT32.unpack_from(view, pos + LAST_OFFSET_DELTA_OFFSET)[0]
        if start < 0:
            if last_offset >= target_offset:
                if last_offset >= end_offset:
                    return pos, pos, -1, 0
                start, end = pos, pos + size
        else:
            if last_offset >= end_offset or pos + size - start > bytes_max:
                return start, end, -1, 0
            end = pos + size
        pos += size


def index_search(index, entry_bytes, key_at, key_bytes, target):
    """Slot of the last entry whose key (a big-endian signed int of `key_bytes` at
    `key_at` within each `entry_bytes`-byte entry) is <= `target`; -1 if none. Keys must be
    non-decreasing, as they are in Kafka's offset and time indexes."""
    if entry_bytes <= 0 or key_at < 0 or key_at + key_bytes > entry_bytes or \
            key_bytes not in (4, 8):
        raise ValueError("invalid index entry layout")
    view = _view(index)
    fmt = ">q" if key_bytes == 8 else ">i"
    lo, hi = 0, len(view) // entry_bytes
    while lo < hi:
        mid = (lo + hi) // 2
        if struct.unpack_from(fmt, view, mid * entry_bytes + key_at)[0] <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def check_offset_index(index, log_bytes, relative_offset_max):
    """Why `index` cannot be a valid offset index of a `log_bytes`-byte segment whose
    offsets reach `relative_offset_max`, or None when it can: length a multiple of 8,
    relative offsets and positions strictly increasing, in range."""
    view = _view(index)
    if len(view) % OFFSET_INDEX_ENTRY_BYTES:
        return f"length {len(view)} is not a multiple of {OFFSET_INDEX_ENTRY_BYTES}"
    previous_offset = previous_position = -1
    for slot, (offset, position) in enumerate(OFFSET_INDEX_ENTRY.iter_unpack(view)):
        if offset <= previous_offset or position <= previous_position:
            return f"entry {slot} ({offset}, {position}) does not increase"
        if offset > relative_offset_max or position >= log_bytes:
            return f"entry {slot} ({offset}, {position}) is beyond the segment"
        previous_offset, previous_position = offset, position
    return None


def check_time_index(index, relative_offset_max):
    """Why `index` cannot be a valid time index of a segment whose offsets reach
    `relative_offset_max`, or None: length a multiple of 12, timestamps strictly increasing,
    relative offsets non-decreasing and in range."""
    view = _view(index)
    if len(view) % TIME_INDEX_ENTRY_BYTES:
        return f"length {len(view)} is not a multiple of {TIME_INDEX_ENTRY_BYTES}"
    previous_ts = previous_offset = -1
    for slot, (timestamp, offset) in enumerate(TIME_INDEX_ENTRY.iter_unpack(view)):
        if timestamp <= previous_ts or offset < previous_offset:
            return f"entry {slot} ({timestamp}, {offset}) does not increase"
        if offset > relative_offset_max:
            return f"entry {slot} ({timestamp}, {offset}) is beyond the segment"
        previous_ts, previous_offset = timestamp, offset
    return None
