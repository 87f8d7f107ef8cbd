"""Segment kernels: native twin of `kraftcore._py.segment` (read its docstring for the index
formats, the indexing cadence and the checks).

Batches are checked by kraftcore._c.records' `_check_batch`, reached through the PyCapsule
that module exports, so both kernels share one definition of a valid batch.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.number cimport PyNumber_Index
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t, INT64_MAX

from kc cimport (kc_batch_info, kc_check_batch_fn, KC_CHECK_BATCH_CAPSULE,
                 kc_put_be32, kc_put_be64, kc_get_be32, kc_get_be64)

from kraftcore import kernel_api, layout
from kraftcore._c import records as _records
from kraftcore.errors import CorruptRecordError, InvalidAppendError
from kraftcore.kernel_api import ScanResult

cdef kc_check_batch_fn check_batch = <kc_check_batch_fn>PyCapsule_GetPointer(
    _records._check_batch_capsule, KC_CHECK_BATCH_CAPSULE)

_new_tuple = tuple.__new__

# kraftcore.layout's numbers, read once, when the module loads.
cdef Py_ssize_t BASE_OFFSET_OFFSET = layout.BASE_OFFSET_OFFSET
cdef Py_ssize_t BATCH_LENGTH_OFFSET = layout.BATCH_LENGTH_OFFSET
cdef Py_ssize_t PARTITION_LEADER_EPOCH_OFFSET = layout.PARTITION_LEADER_EPOCH_OFFSET
cdef Py_ssize_t LAST_OFFSET_DELTA_OFFSET = layout.LAST_OFFSET_DELTA_OFFSET
cdef Py_ssize_t LOG_OVERHEAD = layout.LOG_OVERHEAD_BYTES
cdef int32_t BATCH_LENGTH_MIN = layout.BATCH_LENGTH_MIN
cdef int32_t SIZE_FIELD_MIN = layout.SIZE_FIELD_MIN
cdef Py_ssize_t HEADER_BYTES_UP_TO_MAGIC = layout.HEADER_BYTES_UP_TO_MAGIC
cdef Py_ssize_t STAMPED_HEADER_BYTES = layout.STAMPED_HEADER_BYTES
cdef Py_ssize_t OFFSET_ENTRY_BYTES = layout.OFFSET_INDEX_ENTRY_BYTES
cdef Py_ssize_t TIME_ENTRY_BYTES = layout.TIME_INDEX_ENTRY_BYTES
cdef int64_t RELATIVE_OFFSET_MAX = layout.RELATIVE_OFFSET_MAX
cdef int64_t NO_STAMP = kernel_api.NO_STAMP
cdef int64_t INT32_MIN = layout.INT32_MIN
cdef int64_t INT32_MAX = layout.INT32_MAX
cdef enum:
    SCRATCH_BYTES = 32  # room for the longest entry or stamped head a kernel here writes
if max(STAMPED_HEADER_BYTES, OFFSET_ENTRY_BYTES, TIME_ENTRY_BYTES) > SCRATCH_BYTES:
    raise ImportError("kraftcore._c.segment: kraftcore.layout's entries outgrow its buffers")


cdef int64_t _int64(object value) except? -1:
    """`value` as an int64 (TypeError unless it is an int, OverflowError outside int64), as
    `kraftcore._py.segment._int64`."""
    return PyNumber_Index(value)


cdef inline int _offset_entry(bytearray out, int64_t relative, int64_t position) except -1:
    """Append a `.index` entry (`layout.OFFSET_INDEX_ENTRY_FORMAT`)."""
    cdef uint8_t buf[SCRATCH_BYTES]
    kc_put_be32(buf, <uint32_t>relative)
    kc_put_be32(buf + 4, <uint32_t>position)
    out.extend((<char *>buf)[:OFFSET_ENTRY_BYTES])
    return 0


cdef inline int _time_entry(bytearray out, int64_t timestamp, int64_t relative) except -1:
    """Append a `.timeindex` entry (`layout.TIME_INDEX_ENTRY_FORMAT`)."""
    cdef uint8_t buf[SCRATCH_BYTES]
    kc_put_be64(buf, <uint64_t>timestamp)
    kc_put_be32(buf + 8, <uint32_t>relative)
    out.extend((<char *>buf)[:TIME_ENTRY_BYTES])
    return 0


def scan_batches(buffer, int64_t segment_base_offset, int64_t position_base=0,
                 int64_t index_interval_bytes=4096, int64_t bytes_since_index=0,
                 int64_t max_timestamp=-1, int64_t offset_of_max_timestamp=-1,
                 int64_t last_index_timestamp=-1, int64_t latest_epoch=-1,
                 int64_t expected_offset=-1, int64_t assign_offset=-1,
                 int64_t stamp_epoch=NO_STAMP, bint index_per_batch=True,
                 bint verify_records=True, bint strict_epochs=False,
                 bint stop_on_error=False, int64_t batch_bytes_max=-1,
                 bint stamp_in_place=True):
    """Validate and index the batches in `buffer`; see `kraftcore._py.segment.scan_batches`."""
    cdef Py_buffer view
    cdef int flags = PyBUF_SIMPLE
    if assign_offset >= 0 and stamp_in_place:
        try:
            PyObject_GetBuffer(buffer, &view, PyBUF_WRITABLE)
        except BufferError:
            raise TypeError("assigning offsets needs a writable buffer") from None
    else:
        PyObject_GetBuffer(buffer, &view, flags)
    cdef uint8_t *data = <uint8_t *>view.buf
    cdef Py_ssize_t total = view.len
    cdef Py_ssize_t pos = 0, size
    cdef Py_ssize_t batches = 0
    cdef int64_t first_offset = -1, next_offset = -1, base_offset, last_offset
    cdef int64_t previous_next = segment_base_offset if expected_offset < 0 else expected_offset
    cdef int64_t epoch, batch_max_ts
    cdef kc_batch_info info
    cdef bytearray offset_entries = bytearray()
    cdef bytearray time_entries = bytearray()
    cdef list epochs = []
    cdef object error = None
    try:
        while pos < total:
            try:
                check_batch(data, pos, total, verify_records, &info)
                base_offset = info.base_offset
                epoch = info.partition_leader_epoch
                batch_max_ts = info.max_timestamp
                if 0 <= batch_bytes_max < LOG_OVERHEAD + <int64_t>info.batch_length:
                    raise InvalidAppendError(
                        f"the batch at byte {pos} is {LOG_OVERHEAD + info.batch_length} bytes, "
                        f"above the limit of {batch_bytes_max}")
                if assign_offset >= 0:
                    base_offset = assign_offset
                    assign_offset += <int64_t>info.last_offset_delta + 1
                    if stamp_epoch != NO_STAMP:
                        epoch = stamp_epoch
                    if stamp_in_place:
                        kc_put_be64(data + pos + BASE_OFFSET_OFFSET, <uint64_t>base_offset)
                        if stamp_epoch != NO_STAMP:
                            kc_put_be32(data + pos + PARTITION_LEADER_EPOCH_OFFSET,
                                        <uint32_t><int32_t>epoch)
                last_offset = base_offset + info.last_offset_delta
                if expected_offset >= 0 and base_offset != previous_next:
                    raise InvalidAppendError(
                        f"batch at offset {base_offset} does not follow offset "
                        f"{previous_next - 1}: appends must be contiguous")
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
                        f"below the log's latest epoch {latest_epoch}")
            except (CorruptRecordError, InvalidAppendError) as exc:
                if not stop_on_error:
                    raise
                error = exc
                break
            if epoch >= 0 and epoch > latest_epoch:
                epochs.append((epoch, base_offset))
                latest_epoch = epoch
            if batch_max_ts > max_timestamp:
                max_timestamp = batch_max_ts
                offset_of_max_timestamp = last_offset
            size = LOG_OVERHEAD + info.batch_length
            if index_per_batch:
                if bytes_since_index > index_interval_bytes:
                    _offset_entry(offset_entries, last_offset - segment_base_offset,
                                  position_base + pos)
                    if max_timestamp > last_index_timestamp:
                        _time_entry(time_entries, max_timestamp,
                                    offset_of_max_timestamp - segment_base_offset)
                        last_index_timestamp = max_timestamp
                    bytes_since_index = 0
                bytes_since_index += size
            if first_offset < 0:
                first_offset = base_offset
            next_offset = last_offset + 1
            previous_next = next_offset
            batches += 1
            pos += size
    finally:
        PyBuffer_Release(&view)
    if not index_per_batch and batches:
        if bytes_since_index > index_interval_bytes:
            _offset_entry(offset_entries, next_offset - 1 - segment_base_offset, position_base)
            if max_timestamp > last_index_timestamp:
                _time_entry(time_entries, max_timestamp,
                            offset_of_max_timestamp - segment_base_offset)
                last_index_timestamp = max_timestamp
            bytes_since_index = 0
        bytes_since_index += pos
    # tuple.__new__ skips the NamedTuple's Python-level __new__ (half a microsecond)
    return _new_tuple(ScanResult, (
        pos, batches, first_offset, next_offset, bytes(offset_entries), bytes(time_entries),
        bytes_since_index, max_timestamp, offset_of_max_timestamp, last_index_timestamp,
        epochs, error))


cdef class SegmentState:
    """What an append changes in the active segment; see `kraftcore._py.segment.SegmentState`."""
    cdef public int64_t base_offset, size, file_bytes, next_offset, bytes_since_index
    cdef public int64_t max_timestamp, offset_of_max_timestamp, last_index_timestamp
    cdef public bytearray offset_index, time_index
    # the state before the last stamp_append, for undo_append
    cdef int64_t _undo[7]
    cdef Py_ssize_t _undo_index_bytes, _undo_time_index_bytes
    cdef bint _undo_ready

    def __init__(self, int64_t base_offset=0):
        self.base_offset = base_offset
        self.size = self.file_bytes = 0
        self.next_offset = base_offset
        self.bytes_since_index = 0
        self.max_timestamp = self.offset_of_max_timestamp = self.last_index_timestamp = -1
        self.offset_index = bytearray()
        self.time_index = bytearray()
        self._undo_ready = False

    def stamp_append(self, buffer, assign_offset, stamp_epoch, index_interval_bytes,
                     bint verify_records=True, batch_bytes_max=-1):
        """One leader batch in one call; see `kraftcore._py.segment.SegmentState.stamp_append`."""
        cdef Py_buffer view
        cdef kc_batch_info info
        cdef int64_t size, last_offset, max_ts, offset_of_max_ts, last_index_ts, since_index
        cdef int64_t offset, epoch, interval, limit
        cdef Py_ssize_t index_bytes, time_index_bytes
        cdef uint8_t header[SCRATCH_BYTES]
        self._undo_ready = False
        offset = _int64(assign_offset)
        epoch = _int64(stamp_epoch)
        interval = _int64(index_interval_bytes)
        limit = _int64(batch_bytes_max)
        if offset < self.base_offset:
            raise ValueError(
                f"offset {offset} is below the segment's base offset {self.base_offset}")
        if not INT32_MIN <= epoch <= INT32_MAX:
            raise ValueError(f"leader epoch {epoch} is not an int32")
        if self.offset_index is None or self.time_index is None:
            raise TypeError("the segment's indexes are not bytearrays")
        PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
        try:
            check_batch(<const uint8_t *>view.buf, 0, view.len, verify_records, &info)
            size = LOG_OVERHEAD + <int64_t>info.batch_length
            if size != view.len:
                raise InvalidAppendError(
                    f"expected one record batch of {view.len} bytes, found a batch of {size} "
                    "bytes followed by more")
        finally:
            PyBuffer_Release(&view)
        if 0 <= limit < size:
            raise InvalidAppendError(
                f"the batch at byte 0 is {size} bytes, above the limit of {limit}")
        # info.last_offset_delta >= 0 (check_batch); offset >= base_offset, so the unsigned
        # difference is exact
        if offset >= INT64_MAX - <int64_t>info.last_offset_delta:
            raise ValueError(f"a batch of {info.last_offset_delta + 1} offsets at {offset} "
                             "would end past 2^63 - 1")
        if <uint64_t>offset - <uint64_t>self.base_offset > \
                <uint64_t>(RELATIVE_OFFSET_MAX - <int64_t>info.last_offset_delta):
            return None
        last_offset = offset + info.last_offset_delta
        kc_put_be64(header + BASE_OFFSET_OFFSET, <uint64_t>offset)
        kc_put_be32(header + BATCH_LENGTH_OFFSET, <uint32_t>info.batch_length)
        kc_put_be32(header + PARTITION_LEADER_EPOCH_OFFSET, <uint32_t><int32_t>epoch)
        result = (<char *>header)[:STAMPED_HEADER_BYTES]
        # Work out the new state, then change the indexes (which may fail: taken back
        # whole) and only then the numbers.
        max_ts, offset_of_max_ts = self.max_timestamp, self.offset_of_max_timestamp
        if info.max_timestamp > max_ts:
            max_ts, offset_of_max_ts = info.max_timestamp, last_offset
        last_index_ts, since_index = self.last_index_timestamp, self.bytes_since_index
        index_bytes, time_index_bytes = len(self.offset_index), len(self.time_index)
        if since_index > interval:
            try:
                _offset_entry(self.offset_index, last_offset - self.base_offset, self.size)
                if max_ts > last_index_ts:
                    _time_entry(self.time_index, max_ts, offset_of_max_ts - self.base_offset)
                    last_index_ts = max_ts
            except BaseException:
                del self.offset_index[index_bytes:]
                del self.time_index[time_index_bytes:]
                raise
            since_index = 0
        self._undo[0] = self.size
        self._undo[1] = self.file_bytes
        self._undo[2] = self.next_offset
        self._undo[3] = self.bytes_since_index
        self._undo[4] = self.max_timestamp
        self._undo[5] = self.offset_of_max_timestamp
        self._undo[6] = self.last_index_timestamp
        self._undo_index_bytes = index_bytes
        self._undo_time_index_bytes = time_index_bytes
        self._undo_ready = True
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = offset_of_max_ts
        self.last_index_timestamp = last_index_ts
        self.bytes_since_index = since_index + size
        self.size += size
        if self.file_bytes < self.size:
            self.file_bytes = self.size
        self.next_offset = last_offset + 1
        return result

    def undo_append(self):
        """Put the state back as it was before the last `stamp_append`, which must have taken
        its batch; once."""
        if not self._undo_ready:
            raise RuntimeError("no append to undo")
        self._undo_ready = False
        self.size = self._undo[0]
        self.file_bytes = self._undo[1]
        self.next_offset = self._undo[2]
        self.bytes_since_index = self._undo[3]
        self.max_timestamp = self._undo[4]
        self.offset_of_max_timestamp = self._undo[5]
        self.last_index_timestamp = self._undo[6]
        del self.offset_index[self._undo_index_bytes:]
        del self.time_index[self._undo_time_index_bytes:]


def locate_batches(buffer, int64_t target_offset, int64_t end_offset, int64_t bytes_max):
    """Find whole batches for a read; see `kraftcore._py.segment.locate_batches`."""
    cdef Py_buffer view
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    cdef const uint8_t *data = <const uint8_t *>view.buf
    cdef Py_ssize_t total = view.len
    cdef Py_ssize_t pos = 0, start = -1, end = -1, size
    cdef int64_t base_offset, last_offset
    cdef int32_t length
    try:
        while True:
            if total - pos < HEADER_BYTES_UP_TO_MAGIC:
                if pos == total:
                    return start, (start if end < 0 else end), -1, 0
                return start, (start if end < 0 else end), pos, 0
            base_offset = <int64_t>kc_get_be64(data + pos + BASE_OFFSET_OFFSET)
            length = <int32_t>kc_get_be32(data + pos + BATCH_LENGTH_OFFSET)
            if length < SIZE_FIELD_MIN:
                raise CorruptRecordError(
                    f"batch size {length} is below the minimum {SIZE_FIELD_MIN}", pos)
            size = LOG_OVERHEAD + <Py_ssize_t>length
            if size > total - pos:
                return start, (start if end < 0 else end), pos, size
            if length < BATCH_LENGTH_MIN:
                raise CorruptRecordError(
                    f"batch length {length} is below the minimum {BATCH_LENGTH_MIN}", pos)
            last_offset = base_offset + <int32_t>kc_get_be32(data + pos + LAST_OFFSET_DELTA_OFFSET)
            if start < 0:
                if last_offset >= target_offset:
                    if last_offset >= end_offset:
                        return pos, pos, -1, 0
                    start = pos
                    end = pos + size
            else:
                if last_offset >= end_offset or pos + size - start > bytes_max:
                    return start, end, -1, 0
                end = pos + size
            pos += size
    finally:
        PyBuffer_Release(&view)


def index_search(index, Py_ssize_t entry_bytes, Py_ssize_t key_at, int key_bytes,
                 int64_t target):
    """Slot of the last entry whose key is <= `target`, -1 if none; see
    `kraftcore._py.segment.index_search`."""
    if entry_bytes <= 0 or key_at < 0 or key_at + key_bytes > entry_bytes or \
            key_bytes not in (4, 8):
        raise ValueError("invalid index entry layout")
    cdef Py_buffer view
    PyObject_GetBuffer(index, &view, PyBUF_SIMPLE)
    cdef const uint8_t *data = <const uint8_t *>view.buf
    cdef Py_ssize_t lo = 0, hi = view.len // entry_bytes, mid
    cdef int64_t key
    with nogil:
        while lo < hi:
            mid = (lo + hi) // 2
            if key_bytes == 8:
                key = <int64_t>kc_get_be64(data + mid * entry_bytes + key_at)
            else:
                key = <int32_t>kc_get_be32(data + mid * entry_bytes + key_at)
            if key <= target:
                lo = mid + 1
            else:
                hi = mid
    PyBuffer_Release(&view)
    return lo - 1


def check_offset_index(index, int64_t log_bytes, int64_t relative_offset_max):
    """Why `index` cannot be a valid offset index, or None; see
    `kraftcore._py.segment.check_offset_index`."""
    cdef Py_buffer view
    PyObject_GetBuffer(index, &view, PyBUF_SIMPLE)
    cdef const uint8_t *data = <const uint8_t *>view.buf
    cdef Py_ssize_t n = view.len, slot
    cdef int64_t offset, position, previous_offset = -1, previous_position = -1
    try:
        if n % OFFSET_ENTRY_BYTES:
            return f"length {n} is not a multiple of {OFFSET_ENTRY_BYTES}"
        for slot in range(n // OFFSET_ENTRY_BYTES):
            offset = <int32_t>kc_get_be32(data + slot * OFFSET_ENTRY_BYTES)
            position = <int32_t>kc_get_be32(data + slot * OFFSET_ENTRY_BYTES + 4)
            if offset <= previous_offset or position <= previous_position:
                return f"entry {slot} ({offset}, {position}) does not increase"
            if offset > relative_offset_max or position >= log_bytes:
                return f"entry {slot} ({offset}, {position}) is beyond the segment"
            previous_offset = offset
            previous_position = position
        return None
    finally:
        PyBuffer_Release(&view)


def check_time_index(index, int64_t relative_offset_max):
    """Why `index` cannot be a valid time index, or None; see
    `kraftcore._py.segment.check_time_index`."""
    cdef Py_buffer view
    PyObject_GetBuffer(index, &view, PyBUF_SIMPLE)
    cdef const uint8_t *data = <const uint8_t *>view.buf
    cdef Py_ssize_t n = view.len, slot
    cdef int64_t timestamp, offset, previous_ts = -1, previous_offset = -1
    try:
        if n % TIME_ENTRY_BYTES:
            return f"length {n} is not a multiple of {TIME_ENTRY_BYTES}"
        for slot in range(n // TIME_ENTRY_BYTES):
            timestamp = <int64_t>kc_get_be64(data + slot * TIME_ENTRY_BYTES)
            offset = <int32_t>kc_get_be32(data + slot * TIME_ENTRY_BYTES + 8)
            if timestamp <= previous_ts or offset < previous_offset:
                return f"entry {slot} ({timestamp}, {offset}) does not increase"
            if offset > relative_offset_max:
                return f"entry {slot} ({timestamp}, {offset}) is beyond the segment"
            previous_ts = timestamp
            previous_offset = offset
        return None
    finally:
        PyBuffer_Release(&view)
