"""Kafka record batch v2: native twin of `kraftcore._py.records` (read its docstring for the
layout and the invariants checked).

Decoding parses every record in a C loop and builds `Record` objects that point into the
batch's bytes: a key or value becomes a `bytes` object only when it is read. Batches and
records keep the caller's buffer exported (alive, and not resizable) while they exist, so
pass `bytes` or do not mutate the buffer while its records are in use.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport (PyBytes_CheckExact, PyBytes_AS_STRING, PyBytes_GET_SIZE,
                            PyBytes_FromStringAndSize)
from cpython.long cimport PyLong_Check
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.bool cimport PyBool_Check
from cpython.sequence cimport PySequence_Fast_GET_SIZE, PySequence_Fast_GET_ITEM
from cpython.unicode cimport PyUnicode_Check, PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int16_t, int32_t, int64_t, INT64_MAX, INT64_MIN, INT32_MAX
from libc.stdlib cimport malloc, free
from libc.string cimport memcmp, memcpy

from cpython.pycapsule cimport PyCapsule_New

from kc cimport (kc_batch_info, KC_CHECK_BATCH_CAPSULE, kc_crc32c_init, kc_crc32c_update, kc_read_varint32, kc_read_varint64,
                 kc_size_varint32, kc_size_varint64, kc_write_varint32, kc_write_varint64,
                 kc_put_be16, kc_put_be32, kc_put_be64, kc_get_be16, kc_get_be32, kc_get_be64)

from kraftcore import layout, limits
from kraftcore.compression import compress, compression_codec, decompress
from kraftcore.errors import CorruptRecordError
from kraftcore.kernel_api import check_int_range

cdef extern from "kc_varint.h":
    int kc_read_varint32_nb(const uint8_t *p, int32_t *out) nogil
    int kc_read_varint64_nb(const uint8_t *p, int64_t *out) nogil

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    long long PyLong_AsLongLongAndOverflow(object o, int *overflow) except? -1
    object PyMemoryView_FromMemory(char *mem, Py_ssize_t size, int flags)

kc_crc32c_init()

# The batch header's layout, read from kraftcore.layout once, when the module loads.
cdef Py_ssize_t BASE_OFFSET_OFFSET = layout.BASE_OFFSET_OFFSET
cdef Py_ssize_t BATCH_LENGTH_OFFSET = layout.BATCH_LENGTH_OFFSET
cdef Py_ssize_t PARTITION_LEADER_EPOCH_OFFSET = layout.PARTITION_LEADER_EPOCH_OFFSET
cdef Py_ssize_t MAGIC_OFFSET = layout.MAGIC_OFFSET
cdef Py_ssize_t CRC_OFFSET = layout.CRC_OFFSET
cdef Py_ssize_t ATTRIBUTES_OFFSET = layout.ATTRIBUTES_OFFSET
cdef Py_ssize_t LAST_OFFSET_DELTA_OFFSET = layout.LAST_OFFSET_DELTA_OFFSET
cdef Py_ssize_t BASE_TIMESTAMP_OFFSET = layout.BASE_TIMESTAMP_OFFSET
cdef Py_ssize_t MAX_TIMESTAMP_OFFSET = layout.MAX_TIMESTAMP_OFFSET
cdef Py_ssize_t PRODUCER_ID_OFFSET = layout.PRODUCER_ID_OFFSET
cdef Py_ssize_t PRODUCER_EPOCH_OFFSET = layout.PRODUCER_EPOCH_OFFSET
cdef Py_ssize_t BASE_SEQUENCE_OFFSET = layout.BASE_SEQUENCE_OFFSET
cdef Py_ssize_t RECORDS_COUNT_OFFSET = layout.RECORDS_COUNT_OFFSET
cdef Py_ssize_t HEADER_BYTES = layout.BATCH_HEADER_BYTES
cdef Py_ssize_t LOG_OVERHEAD = layout.LOG_OVERHEAD_BYTES
cdef Py_ssize_t CRC_START_OFFSET = layout.CRC_START_OFFSET
cdef int32_t BATCH_LENGTH_MIN = layout.BATCH_LENGTH_MIN
cdef int MAGIC = layout.MAGIC
cdef int COMPRESSION_CODEC_MASK = layout.COMPRESSION_CODEC_MASK
cdef int TIMESTAMP_TYPE_MASK = layout.TIMESTAMP_TYPE_MASK
cdef int TRANSACTIONAL_MASK = layout.TRANSACTIONAL_MASK
cdef int CONTROL_MASK = layout.CONTROL_MASK
cdef int DELETE_HORIZON_MASK = layout.DELETE_HORIZON_MASK
cdef int CODEC_NONE = layout.CODEC_NONE
cdef int CODEC_MAX = max(layout.CODEC_NAMES)

cdef enum:
    RECORD_BYTES_MIN = 7
    FAST_SLACK = 16  # bytes past a record's end for `_records_well_formed`'s fast loop
    SHAPE_BYTES = 16  # bytes of a record compared with the last one's shape (two words)

if RECORD_BYTES_MIN != limits.RECORD_BYTES_MIN:
    raise ImportError("kraftcore._c.records was compiled with another RECORD_BYTES_MIN than "
                      "kraftcore.limits holds; rebuild the extension")

cdef uint32_t CRC_INIT = 0xFFFFFFFF
cdef Py_ssize_t NOGIL_BYTES_MIN = limits.NOGIL_BYTES_MIN
cdef Py_ssize_t RECORD_BATCH_BYTES_MAX = limits.RECORD_BATCH_BYTES_MAX
cdef tuple NO_HEADERS = ()


@cython.final
@cython.no_gc
cdef class _Exported:
    """Holds a buffer export of the caller's object for as long as records point into it."""
    cdef Py_buffer view
    cdef bint held

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False


@cython.final
@cython.freelist(16)
cdef class RecordBatch:
    """A decoded record batch: every header field, derived flags, and its records."""
    cdef readonly int64_t position
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int16_t attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t records_count
    cdef readonly list records
    cdef object _owner          # keeps the bytes behind _data alive
    cdef const uint8_t *_data   # record positions are relative to this

    @property
    def size_bytes(self):
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self):
        """The codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self):
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self):
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self):
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & DELETE_HORIZON_MASK)

    def same_value(self):
        """The value every record of the batch carries, when they all carry the same
        non-null one; None when the batch has no records, their values differ or are null.
        (Keys and headers are not compared.) Compares the bytes in place: no value object
        is made but the one returned."""
        cdef list records = self.records
        cdef Py_ssize_t i, n = len(records)
        if n == 0:
            return None
        cdef Record first = <Record>records[0]
        cdef Record other
        cdef int32_t length = first._value_len
        if length < 0:
            return None
        cdef const uint8_t *value = first._data + first._value_pos
        for i in range(1, n):
            other = <Record>records[i]
            if other._value_len != length or \
                    memcmp(other._data + other._value_pos, value, <size_t>length) != 0:
                return None
        return first.value

    def __repr__(self):
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"partition_leader_epoch={self.partition_leader_epoch}, "
            f"records_count={self.records_count}, attributes={self.attributes:#x}, "
            f"size_bytes={self.size_bytes})"
        )


@cython.final
@cython.no_gc
@cython.freelist(1024)
cdef class Record:
    """One record of a decoded batch: absolute offset and timestamp, key, value, headers.

    `headers` is a tuple of `(key: str, value: bytes | None)` pairs."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly tuple headers
    cdef object _owner          # the bytes' owner: never refers back to records, so no
    cdef const uint8_t *_data   # cycle can form and Record needs no GC tracking
    cdef Py_ssize_t _key_pos
    cdef Py_ssize_t _value_pos
    cdef int32_t _key_len
    cdef int32_t _value_len

    @property
    def key(self):
        if self._key_len < 0:
            return None
        return PyBytes_FromStringAndSize(<const char *>self._data + self._key_pos, self._key_len)

    @property
    def value(self):
        if self._value_len < 0:
            return None
        return PyBytes_FromStringAndSize(<const char *>self._data + self._value_pos, self._value_len)

    def __repr__(self):
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )


# ------------------------------------------------------------------------------ decode

cdef inline object _varint_error(int n, str what, Py_ssize_t pos):
    if n == 0:
        return CorruptRecordError(f"truncated {what}", pos)
    return CorruptRecordError(f"{what} is not a valid varint", pos)


cdef RecordBatch _read_header(const uint8_t *data, Py_ssize_t pos, Py_ssize_t total):
    """Check the framing of the batch at `pos` and return it with its header fields."""
    cdef Py_ssize_t remaining = total - pos
    cdef const uint8_t *h = data + pos
    if remaining < HEADER_BYTES:
        raise CorruptRecordError(
            f"truncated batch: {remaining} bytes left, a batch header needs {HEADER_BYTES}", pos)
    cdef RecordBatch b = RecordBatch.__new__(RecordBatch)
    b.position = pos
    b.base_offset = <int64_t>kc_get_be64(h + BASE_OFFSET_OFFSET)
    b.batch_length = <int32_t>kc_get_be32(h + BATCH_LENGTH_OFFSET)
    b.partition_leader_epoch = <int32_t>kc_get_be32(h + PARTITION_LEADER_EPOCH_OFFSET)
    b.magic = <signed char>h[MAGIC_OFFSET]
    b.crc = kc_get_be32(h + CRC_OFFSET)
    b.attributes = <int16_t>kc_get_be16(h + ATTRIBUTES_OFFSET)
    b.last_offset_delta = <int32_t>kc_get_be32(h + LAST_OFFSET_DELTA_OFFSET)
    b.base_timestamp = <int64_t>kc_get_be64(h + BASE_TIMESTAMP_OFFSET)
    b.max_timestamp = <int64_t>kc_get_be64(h + MAX_TIMESTAMP_OFFSET)
    b.producer_id = <int64_t>kc_get_be64(h + PRODUCER_ID_OFFSET)
    b.producer_epoch = <int16_t>kc_get_be16(h + PRODUCER_EPOCH_OFFSET)
    b.base_sequence = <int32_t>kc_get_be32(h + BASE_SEQUENCE_OFFSET)
    b.records_count = <int32_t>kc_get_be32(h + RECORDS_COUNT_OFFSET)
    if b.batch_length < BATCH_LENGTH_MIN:
        raise CorruptRecordError(
            f"batch length {b.batch_length} is below the minimum {BATCH_LENGTH_MIN}", pos)
    if <Py_ssize_t>b.batch_length + LOG_OVERHEAD > remaining:
        raise CorruptRecordError(
            f"truncated batch: it declares {b.batch_length + LOG_OVERHEAD} bytes, "
            f"{remaining} are left", pos)
    if b.magic != MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {b.magic} (only 2 is read)", pos)
    if b.base_offset < 0:
        raise CorruptRecordError(f"negative base offset {b.base_offset}", pos)
    if b.partition_leader_epoch < -1:
        raise CorruptRecordError(f"invalid partition leader epoch {b.partition_leader_epoch}", pos)
    cdef int codec = b.attributes & COMPRESSION_CODEC_MASK
    if codec > CODEC_MAX:
        raise CorruptRecordError(f"invalid compression codec id {codec}", pos)
    if b.records_count < 0:
        raise CorruptRecordError(f"negative records count {b.records_count}", pos)
    if b.last_offset_delta < 0 or b.last_offset_delta < b.records_count - 1:
        raise CorruptRecordError(
            f"last offset delta {b.last_offset_delta} cannot cover {b.records_count} records", pos)
    if b.base_offset > INT64_MAX - b.last_offset_delta:
        raise CorruptRecordError("last offset overflows int64", pos)
    return b


cdef int _check_crc(const uint8_t *data, RecordBatch b) except -1:
    cdef const uint8_t *start = data + b.position + CRC_START_OFFSET
    cdef size_t n = <size_t>(b.batch_length + LOG_OVERHEAD - CRC_START_OFFSET)
    cdef uint32_t actual
    if n >= <size_t>NOGIL_BYTES_MIN:
        with nogil:
            actual = kc_crc32c_update(CRC_INIT, start, n) ^ CRC_INIT
    else:
        actual = kc_crc32c_update(CRC_INIT, start, n) ^ CRC_INIT
    if actual != b.crc:
        raise CorruptRecordError(
            f"CRC mismatch: stored {b.crc:#010x}, computed {actual:#010x}", b.position)
    return 0


cdef enum:
    HEADER_KEYS_KEPT = 8


@cython.final
cdef class _HeaderKeys:
    """The header keys of the last record, by position: records of a batch mostly repeat
    their header keys, and a key whose bytes match the one at its position last time is the
    same `str` (no new decode)."""
    cdef list keys
    cdef const uint8_t *raw[HEADER_KEYS_KEPT]
    cdef int32_t lens[HEADER_KEYS_KEPT]

    def __cinit__(self):
        cdef int i
        self.keys = [None] * HEADER_KEYS_KEPT
        for i in range(HEADER_KEYS_KEPT):
            self.raw[i] = NULL
            self.lens[i] = -1

    cdef object get(self, int i, const uint8_t *raw, int32_t n, Py_ssize_t pos):
        if i < HEADER_KEYS_KEPT and self.lens[i] == n and memcmp(self.raw[i], raw, n) == 0:
            return self.keys[i]
        try:
            key = PyUnicode_DecodeUTF8(<const char *>raw, n, NULL)
        except UnicodeDecodeError:
            raise CorruptRecordError("header key is not valid UTF-8", pos) from None
        if i < HEADER_KEYS_KEPT:
            self.keys[i] = key
            self.raw[i] = raw
            self.lens[i] = n
        return key


cdef tuple _read_headers(const uint8_t *data, Py_ssize_t *pp, Py_ssize_t rec_end, int32_t count,
                         _HeaderKeys known):
    """Parse `count` headers at *pp (bounded by rec_end); advances *pp. `known`: the keys
    of the batch's previous record (its raw bytes live as long as `data`)."""
    cdef Py_ssize_t p = pp[0]
    cdef const uint8_t *lim = data + rec_end
    cdef int32_t klen, vlen
    cdef int n
    cdef tuple pairs = PyTuple_New(count)
    cdef int32_t h
    for h in range(count):
        n = kc_read_varint32(data + p, lim, &klen)
        if n <= 0:
            raise _varint_error(n, "header key length", p)
        p += n
        if klen < 0 or klen > rec_end - p:
            raise CorruptRecordError(f"header key length {klen} is invalid", p)
        hkey = known.get(h, data + p, klen, p)
        p += klen
        n = kc_read_varint32(data + p, lim, &vlen)
        if n <= 0:
            raise _varint_error(n, "header value length", p)
        p += n
        if vlen < -1 or vlen > rec_end - p:
            raise CorruptRecordError(f"header value length {vlen} is invalid", p)
        if vlen < 0:
            pair = (hkey, None)
        else:
            pair = (hkey, PyBytes_FromStringAndSize(<const char *>data + p, vlen))
            p += vlen
        Py_INCREF(pair)
        PyTuple_SET_ITEM(pairs, h, pair)
    pp[0] = p
    return pairs


cdef inline int _read_varint32(const uint8_t *p, const uint8_t *end, int32_t *out) noexcept nogil:
    """`kc_read_varint32` (same results) with the one- and two-byte forms decoded without a
    loop: lengths up to 8191 and most record fields take one of them."""
    cdef uint32_t raw, second
    if end - p >= 2:
        raw = p[0]
        if not (raw & 0x80):
            out[0] = <int32_t>((raw >> 1) ^ (<uint32_t>0 - (raw & 1)))
            return 1
        second = p[1]
        if not (second & 0x80):
            raw = (raw & 0x7F) | (second << 7)
            out[0] = <int32_t>((raw >> 1) ^ (<uint32_t>0 - (raw & 1)))
            return 2
    return kc_read_varint32(p, end, out)


cdef inline Py_ssize_t _headers_end(const uint8_t *data, Py_ssize_t q, Py_ssize_t rec_end,
                                     int32_t hcount) noexcept nogil:
    """Where the `hcount` headers starting at data[q] end, when each is well formed within
    the record (ending at `rec_end`) and its key plain ASCII; -1 otherwise."""
    cdef const uint8_t *lim = data + rec_end
    cdef int32_t h, klen, vlen
    cdef Py_ssize_t k
    cdef int n
    for h in range(hcount):
        n = _read_varint32(data + q, lim, &klen)
        if n <= 0:
            return -1
        q += n
        if klen < 0 or klen > rec_end - q:
            return -1
        for k in range(q, q + klen):
            if data[k] & 0x80:
                return -1
        q += klen
        n = _read_varint32(data + q, lim, &vlen)
        if n <= 0:
            return -1
        q += n
        if vlen < -1 or vlen > rec_end - q:
            return -1
        if vlen > 0:
            q += vlen
    return q


cdef inline bint _record_tail_ok(const uint8_t *data, Py_ssize_t q, Py_ssize_t rec_end,
                                 int32_t hcount, int64_t ts_delta, int64_t base_ts,
                                 bint log_append) noexcept nogil:
    """The end of a record whose headers count was read up to data[q]: the headers fit and
    end exactly at `rec_end`, and the record's timestamp does not overflow."""
    if q > rec_end or hcount < 0 or hcount > (rec_end - q) // 2:
        return False
    if hcount and _headers_end(data, q, rec_end, hcount) != rec_end:
        return False
    if not hcount and q != rec_end:
        return False
    if not log_append:
        if (ts_delta > 0 and base_ts > INT64_MAX - ts_delta) or \
           (ts_delta < 0 and base_ts < INT64_MIN - ts_delta):
            return False
    return True


cdef bint _records_well_formed(const uint8_t *data, Py_ssize_t p, Py_ssize_t end,
                               int32_t count, int32_t last_delta, int64_t base_ts,
                               bint log_append) noexcept nogil:
    """True when `_walk_records` would accept the `count` records in data[p:end]: the same
    checks in a plain C loop that builds nothing. False when any check fails, and also
    when a header key is not plain ASCII (only the UTF-8 decoder can judge it): the caller
    then runs `_walk_records`, which decides and reports the exact error. Never reads at or
    beyond data + end, nor a record's fields beyond its declared end.

    The next record starts where the declared length of this one ends (a walk that does
    not end exactly there fails), so finding the next record waits for one varint load,
    not for every field of this one."""
    cdef int32_t i = 0, length, off_delta, klen, vlen, hcount
    cdef int32_t prev_delta = -1
    cdef int64_t ts_delta
    cdef Py_ssize_t rec_end, q, k, off_at, value_at
    cdef const uint8_t *lim
    cdef int n, off_n, hcount_n
    # the shape of the last record the fast loop parsed (see below)
    cdef bint shaped = False
    cdef uint64_t word0, word1, shape0 = 0, shape1 = 0, mask0 = 0, mask1 = 0
    cdef uint8_t mask_bytes[16]
    cdef Py_ssize_t shape_size = 0, shape_off = 0
    cdef int shape_off_n = 0
    cdef uint32_t raw
    if count > (end - p) // RECORD_BYTES_MIN:
        return False
    # Fast loop, for every record that ends at least FAST_SLACK bytes before `end`: its
    # varints are read without per-byte end checks (a varint is at most 10 bytes and
    # starts at most 5 bytes past the record's end, so no read reaches `end`), and a
    # varint that runs past the record's end is caught by one comparison after the fact.
    # It accepts exactly what the checked loop below accepts; the records it leaves (the
    # last few, and any it is unsure of only by position) are walked by that loop.
    #
    # Records of one batch usually share their shape: the same length, timestamp delta,
    # key and value length, no headers; only the offset delta differs. When the first
    # SHAPE_BYTES bytes of a record equal those of the last record parsed below, except
    # for the value bits of its offset delta (same varint length), and that record's
    # fields (length, attributes, timestamp delta, offset delta, key length, key, value
    # length) all lay within those bytes and it had no headers, then this record parses
    # to the same fields at the same positions, and passes the same checks, but for its
    # offset delta and its headers count byte: only those two are read and checked.
    while i < count and end - p >= FAST_SLACK:
        if shaped:
            memcpy(&word0, data + p, 8)
            memcpy(&word1, data + p + 8, 8)
            if (((word0 ^ shape0) & mask0) | ((word1 ^ shape1) & mask1)) == 0 and \
                    end - p - shape_size >= FAST_SLACK and data[p + shape_size - 1] == 0:
                raw = data[p + shape_off]
                if shape_off_n == 2:
                    raw = (raw & 0x7F) | (<uint32_t>data[p + shape_off + 1] << 7)
                off_delta = <int32_t>((raw >> 1) ^ (<uint32_t>0 - (raw & 1)))
                if off_delta <= prev_delta or off_delta > last_delta:
                    return False
                prev_delta = off_delta
                p += shape_size
                i += 1
                continue
        n = kc_read_varint32_nb(data + p, &length)
        if n <= 0 or length < 6 or length > end - p - n:
            return False
        rec_end = p + n + length
        if end - rec_end < FAST_SLACK:
            break  # the checked loop takes this record
        q = p + n + 1  # record attributes: unused
        n = kc_read_varint64_nb(data + q, &ts_delta)
        if n <= 0:
            return False
        q += n
        off_at = q
        n = kc_read_varint32_nb(data + q, &off_delta)
        if n <= 0:
            return False
        off_n = n
        q += n
        n = kc_read_varint32_nb(data + q, &klen)
        if n <= 0:
            return False
        q += n
        if q > rec_end or off_delta <= prev_delta or off_delta > last_delta:
            return False
        prev_delta = off_delta
        if klen < -1 or klen > rec_end - q:
            return False
        if klen > 0:
            q += klen
        n = kc_read_varint32_nb(data + q, &vlen)
        if n <= 0:
            return False
        q += n
        if q > rec_end or vlen < -1 or vlen > rec_end - q:
            return False
        value_at = q
        if vlen > 0:
            q += vlen
        n = kc_read_varint32_nb(data + q, &hcount)
        if n <= 0:
            return False
        q += n
        hcount_n = n
        if not _record_tail_ok(data, q, rec_end, hcount, ts_delta, base_ts, log_append):
            return False
        # Remember this record's shape when it qualifies (see above): no headers (a
        # headers count of one byte, 0, the record's last byte), its fields before the
        # value within SHAPE_BYTES, an offset delta of 1 or 2 bytes.
        # Only the value bits of the offset delta are masked out: its continuation
        # bits, so its length, must match.
        shaped = (hcount == 0 and hcount_n == 1 and value_at - p <= SHAPE_BYTES
                  and off_n <= 2)
        if shaped:
            for k in range(SHAPE_BYTES):
                mask_bytes[k] = 0xFF if k < value_at - p else 0
            mask_bytes[off_at - p] = 0x80
            if off_n == 2:
                mask_bytes[off_at - p + 1] = 0x80
            memcpy(&shape0, data + p, 8)
            memcpy(&shape1, data + p + 8, 8)
            memcpy(&mask0, mask_bytes, 8)
            memcpy(&mask1, mask_bytes + 8, 8)
            shape_size = rec_end - p
            shape_off = off_at - p
            shape_off_n = off_n
        p = rec_end
        i += 1
    while i < count:
        i += 1
        n = _read_varint32(data + p, data + end, &length)
        if n <= 0:
            return False
        p += n
        if length < 6 or length > end - p:
            return False
        rec_end = p + length
        lim = data + rec_end
        q = p + 1  # record attributes: unused
        p = rec_end
        n = kc_read_varint64(data + q, lim, &ts_delta)
        if n <= 0:
            return False
        q += n
        n = _read_varint32(data + q, lim, &off_delta)
        if n <= 0:
            return False
        q += n
        if off_delta <= prev_delta or off_delta > last_delta:
            return False
        prev_delta = off_delta
        n = _read_varint32(data + q, lim, &klen)
        if n <= 0:
            return False
        q += n
        if klen < -1 or klen > rec_end - q:
            return False
        if klen > 0:
            q += klen
        n = _read_varint32(data + q, lim, &vlen)
        if n <= 0:
            return False
        q += n
        if vlen < -1 or vlen > rec_end - q:
            return False
        if vlen > 0:
            q += vlen
        n = _read_varint32(data + q, lim, &hcount)
        if n <= 0:
            return False
        q += n
        if not _record_tail_ok(data, q, rec_end, hcount, ts_delta, base_ts, log_append):
            return False
    return p == end


cdef list _walk_records(RecordBatch b, const uint8_t *data, Py_ssize_t p, Py_ssize_t end, bint build):
    """Parse every record of batch `b` from data[p:end]; the Record list when `build`.
    Without `build`, well-formed records are accepted by the C loop of
    `_records_well_formed` and only a batch it refuses is walked here, to raise the exact
    error (or accept it, when only a non-ASCII header key made the C loop unsure)."""
    cdef bint ok
    if not build:
        if end - p >= NOGIL_BYTES_MIN:
            with nogil:
                ok = _records_well_formed(data, p, end, b.records_count, b.last_offset_delta,
                                          b.base_timestamp, (b.attributes & TIMESTAMP_TYPE_MASK) != 0)
        else:
            ok = _records_well_formed(data, p, end, b.records_count, b.last_offset_delta,
                                      b.base_timestamp, (b.attributes & TIMESTAMP_TYPE_MASK) != 0)
        if ok:
            return None
    cdef int32_t count = b.records_count
    cdef int32_t last_delta = b.last_offset_delta
    cdef int64_t base_offset = b.base_offset
    cdef int64_t base_ts = b.base_timestamp
    cdef bint log_append = (b.attributes & TIMESTAMP_TYPE_MASK) != 0
    cdef int64_t max_ts = b.max_timestamp
    cdef int32_t length, off_delta, klen, vlen, hcount
    cdef int32_t prev_delta = -1
    cdef int64_t ts_delta, ts
    cdef Py_ssize_t rec_start, rec_end, kpos, vpos
    cdef const uint8_t *lim
    cdef int n
    cdef list records = [] if build else None
    cdef Record rec
    cdef tuple hdrs
    cdef _HeaderKeys known = None
    cdef object owner = b._owner
    cdef int32_t i
    if count > (end - p) // RECORD_BYTES_MIN:
        raise CorruptRecordError(f"records count {count} cannot fit in {end - p} bytes", p)
    for i in range(count):
        rec_start = p
        n = kc_read_varint32(data + p, data + end, &length)
        if n <= 0:
            raise _varint_error(n, "record length", p)
        p += n
        if length < 0 or length > end - p:
            raise CorruptRecordError(f"record length {length} is invalid", rec_start)
        if length < 6:
            raise CorruptRecordError(f"record length {length} is below the minimum 6", rec_start)
        rec_end = p + length
        lim = data + rec_end
        p += 1  # record attributes: unused
        n = kc_read_varint64(data + p, lim, &ts_delta)
        if n <= 0:
            raise _varint_error(n, "timestamp delta", p)
        p += n
        n = kc_read_varint32(data + p, lim, &off_delta)
        if n <= 0:
            raise _varint_error(n, "offset delta", p)
        p += n
        if off_delta <= prev_delta or off_delta > last_delta:
            raise CorruptRecordError(
                f"offset delta {off_delta} out of order or beyond {last_delta}", rec_start)
        prev_delta = off_delta
        n = kc_read_varint32(data + p, lim, &klen)
        if n <= 0:
            raise _varint_error(n, "key length", p)
        p += n
        if klen < -1 or klen > rec_end - p:
            raise CorruptRecordError(f"key length {klen} is invalid", p)
        kpos = p
        if klen > 0:
            p += klen
        n = kc_read_varint32(data + p, lim, &vlen)
        if n <= 0:
            raise _varint_error(n, "value length", p)
        p += n
        if vlen < -1 or vlen > rec_end - p:
            raise CorruptRecordError(f"value length {vlen} is invalid", p)
        vpos = p
        if vlen > 0:
            p += vlen
        n = kc_read_varint32(data + p, lim, &hcount)
        if n <= 0:
            raise _varint_error(n, "headers count", p)
        p += n
        if hcount < 0 or hcount > (rec_end - p) // 2:
            raise CorruptRecordError(f"headers count {hcount} is invalid", p)
        if hcount:
            if known is None:
                known = _HeaderKeys()
            hdrs = _read_headers(data, &p, rec_end, hcount, known)
        else:
            hdrs = NO_HEADERS
        if p != rec_end:
            raise CorruptRecordError(
                f"record declares {length} bytes but its fields use {p - (rec_end - length)}",
                rec_start)
        if log_append:
            ts = max_ts
        else:
            if (ts_delta > 0 and base_ts > INT64_MAX - ts_delta) or \
               (ts_delta < 0 and base_ts < INT64_MIN - ts_delta):
                raise CorruptRecordError("record timestamp overflows int64", rec_start)
            ts = base_ts + ts_delta
        if build:
            rec = Record.__new__(Record)
            rec.offset = base_offset + off_delta
            rec.timestamp = ts
            rec.headers = hdrs
            rec._owner = owner
            rec._data = data
            rec._key_pos = kpos
            rec._key_len = klen
            rec._value_pos = vpos
            rec._value_len = vlen
            records.append(rec)
    if p != end:
        raise CorruptRecordError(f"{end - p} bytes remain after the batch's {count} records", p)
    return records


cdef int _attach_records(RecordBatch b, object holder, const uint8_t *data, bint build) except -1:
    """Walk the records of batch `b` (decompressing first when needed); sets b.records to
    the Record list when `build`. `holder` keeps `data` alive for the records."""
    cdef Py_ssize_t start = b.position + HEADER_BYTES
    cdef Py_ssize_t end = b.position + LOG_OVERHEAD + b.batch_length
    cdef int codec = b.attributes & COMPRESSION_CODEC_MASK
    cdef bytes plain
    if codec == CODEC_NONE:
        b._owner = holder
        b._data = data
        b.records = _walk_records(b, data, start, end, build)
    else:  # codec <= CODEC_MAX was checked with the header
        plain = decompress(
            codec, PyMemoryView_FromMemory(<char *>data + start, end - start, 0x100),
            b.position)
        b._owner = plain
        b._data = <const uint8_t *>PyBytes_AS_STRING(plain)
        try:
            b.records = _walk_records(b, b._data, 0, PyBytes_GET_SIZE(plain), build)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"{exc.reason} (at byte {exc.position} of the decompressed records)",
                b.position) from None
    return 0


cdef list _decode(object buffer, bint verify, bint build):
    cdef _Exported holder = _Exported.__new__(_Exported)
    PyObject_GetBuffer(buffer, &holder.view, PyBUF_SIMPLE)
    holder.held = True
    cdef const uint8_t *data = <const uint8_t *>holder.view.buf
    cdef Py_ssize_t total = holder.view.len
    cdef Py_ssize_t pos = 0
    cdef RecordBatch b
    cdef list out = []
    while pos < total:
        b = _read_header(data, pos, total)
        if verify:
            _check_crc(data, b)
        _attach_records(b, holder, data, build)
        out.append(b)
        pos += LOG_OVERHEAD + b.batch_length
    return out


cdef int _check_crc_and_records(const uint8_t *data, RecordBatch b) except -1:
    """`_check_crc` then `_attach_records(b, None, data, False)` of an uncompressed batch,
    with the same outcome (a CRC mismatch is reported before any record error), with the
    GIL released once for both (a large batch): the CRC and the C record walk
    (`_records_well_formed`, safe on any bytes) run back to back, and only then are their
    verdicts read, the CRC's first. A batch the walk refuses is walked again by
    `_walk_records`, which raises the exact error (or accepts it)."""
    cdef Py_ssize_t start = b.position + HEADER_BYTES
    cdef Py_ssize_t end = b.position + LOG_OVERHEAD + b.batch_length
    cdef const uint8_t *crc_start = data + b.position + CRC_START_OFFSET
    cdef size_t crc_bytes = <size_t>(end - b.position - CRC_START_OFFSET)
    cdef bint log_append = (b.attributes & TIMESTAMP_TYPE_MASK) != 0
    cdef uint32_t actual
    cdef bint ok
    if end - start >= NOGIL_BYTES_MIN:
        with nogil:
            actual = kc_crc32c_update(CRC_INIT, crc_start, crc_bytes) ^ CRC_INIT
            ok = _records_well_formed(data, start, end, b.records_count, b.last_offset_delta,
                                      b.base_timestamp, log_append)
    else:
        actual = kc_crc32c_update(CRC_INIT, crc_start, crc_bytes) ^ CRC_INIT
        ok = _records_well_formed(data, start, end, b.records_count, b.last_offset_delta,
                                  b.base_timestamp, log_append)
    if actual != b.crc:
        raise CorruptRecordError(
            f"CRC mismatch: stored {b.crc:#010x}, computed {actual:#010x}", b.position)
    if not ok:
        _walk_records(b, data, start, end, False)  # raises the exact error, or accepts
    return 0


cdef int _check_batch(const uint8_t *data, Py_ssize_t pos, Py_ssize_t total,
                      int verify_records, kc_batch_info *out) except -1:
    """Check the batch at `pos` (framing, CRC and, with `verify_records`, every record) and
    copy its header fields to `out`. Exported to the other kernels through
    `_check_batch_capsule` (the twin of `kraftcore._py.records.check_batch`)."""
    cdef RecordBatch b = _read_header(data, pos, total)
    if verify_records and (b.attributes & COMPRESSION_CODEC_MASK) == CODEC_NONE:
        _check_crc_and_records(data, b)
    else:
        _check_crc(data, b)
        if verify_records:
            _attach_records(b, None, data, False)
    out.base_offset = b.base_offset
    out.batch_length = b.batch_length
    out.partition_leader_epoch = b.partition_leader_epoch
    out.last_offset_delta = b.last_offset_delta
    out.max_timestamp = b.max_timestamp
    return 0


_check_batch_capsule = PyCapsule_New(<void *>_check_batch, KC_CHECK_BATCH_CAPSULE, NULL)


def decode_batches(buffer, bint verify=True):
    """Decode every record batch in `buffer` (back to back, nothing else) into a list.

    With `verify` the CRC of every batch is checked. Any malformed byte raises
    `CorruptRecordError` with its position (for a compressed batch, the batch's position);
    every Kafka codec is read (`kraftcore.compression`)."""
    return _decode(buffer, verify, True)


def validate_batches(buffer):
    """Check every batch in `buffer` (framing, CRC, record structure) without building
    records. Returns the number of batches; raises like `decode_batches`."""
    return len(_decode(buffer, True, False))


# ------------------------------------------------------------------------------ encode

cdef Py_ssize_t _length_of(object obj, str name, Py_ssize_t i) except -2:
    """Byte length of a key/value/header value, -1 for None; TypeError if not bytes-like.
    `name` is the column ("keys", "values"), or "headers" for a header value."""
    cdef Py_buffer view
    if obj is None:
        return -1
    if PyBytes_CheckExact(obj):
        return PyBytes_GET_SIZE(obj)
    try:
        PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        what = f"headers[{i}] value" if name == "headers" else f"{name}[{i}]"
        raise TypeError(f"{what} must be bytes-like or None, not {type(obj).__name__}") from None
    cdef Py_ssize_t n = view.len
    PyBuffer_Release(&view)
    return n


cdef inline int _sized(Py_ssize_t n):
    """Bytes taken by a length-prefixed field of n bytes (n = -1 for null)."""
    return 1 if n < 0 else kc_size_varint32(<int32_t>n)


cdef uint8_t *_put(uint8_t *out, object obj, const uint8_t *limit) except NULL:
    """Write varint length + bytes of obj (None = -1), never past `limit`: the end of the
    record as sized in the first pass (a buffer object could report another size now)."""
    cdef Py_buffer view
    cdef Py_ssize_t n
    if obj is None:
        if out + 1 > limit:
            raise RuntimeError("a key or value changed size while the batch was being encoded")
        out[0] = 1  # zigzag(-1)
        return out + 1
    if PyBytes_CheckExact(obj):
        n = PyBytes_GET_SIZE(obj)
        if n > INT32_MAX or out + kc_size_varint32(<int32_t>n) + n > limit:
            raise RuntimeError("a key or value changed size while the batch was being encoded")
        out += kc_write_varint32(out, <int32_t>n)
        memcpy(out, PyBytes_AS_STRING(obj), n)
        return out + n
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    try:
        n = view.len
        if n > INT32_MAX or out + kc_size_varint32(<int32_t>n) + n > limit:
            raise RuntimeError("a key or value changed size while the batch was being encoded")
        out += kc_write_varint32(out, <int32_t>n)
        memcpy(out, view.buf, n)
    finally:
        PyBuffer_Release(&view)
    return out + n


cdef object _fast(object seq, str name):
    """A tuple snapshot of seq's elements: the two encoding passes must see the same
    objects even if code run during the first (a buffer export) mutates the caller's list."""
    if seq is None or type(seq) is tuple:
        return seq
    try:
        return tuple(seq)
    except TypeError:
        raise TypeError(f"{name} must be a sequence, not {type(seq).__name__}") from None


cdef Py_ssize_t _headers_size(object pairs, Py_ssize_t i, list snapshots) except -1:
    """Validate one record's headers, append their (key, value) snapshot to `snapshots`,
    and return the encoded size of the headers section."""
    cdef Py_ssize_t size, klen, vlen
    if pairs is None:
        snapshots.append(None)
        return 1
    if type(pairs) is tuple:
        seq = pairs
    else:
        try:
            seq = tuple(pairs)
        except TypeError:
            raise TypeError(f"headers[{i}] must be a sequence, not {type(pairs).__name__}") from None
    cdef Py_ssize_t count = len(seq)
    if count > INT32_MAX:
        raise ValueError(f"headers[{i}] has too many headers")
    size = kc_size_varint32(<int32_t>count)
    cdef list snap = None  # made only when a pair is not a 2-tuple (which cannot change)
    cdef Py_ssize_t j
    for j in range(count):
        pair = (<tuple>seq)[j]
        if type(pair) is not tuple or len(<tuple>pair) != 2:
            if snap is None:
                snap = list((<tuple>seq)[:j])
            pair = tuple(pair)  # (a list pair, say) a snapshot that cannot change
        header_key, header_value = pair
        if not PyUnicode_Check(header_key):
            raise TypeError(f"headers[{i}] keys must be str, not {type(header_key).__name__}")
        PyUnicode_AsUTF8AndSize(header_key, &klen)
        vlen = _length_of(header_value, "headers", i)
        size += _sized(klen) + klen + _sized(vlen) + (vlen if vlen > 0 else 0)
        if snap is not None:
            snap.append(pair)
    snapshots.append(seq if snap is None else snap)
    return size


cdef uint8_t *_put_headers(uint8_t *out, object pairs, const uint8_t *limit) except NULL:
    cdef Py_ssize_t klen
    cdef const char *kptr
    if pairs is None:
        if out + 1 > limit:
            raise RuntimeError("headers changed while the batch was being encoded")
        out[0] = 0
        return out + 1
    if out + kc_size_varint32(<int32_t>len(pairs)) > limit:
        raise RuntimeError("headers changed while the batch was being encoded")
    out += kc_write_varint32(out, <int32_t>len(pairs))
    for header_key, header_value in pairs:
        kptr = PyUnicode_AsUTF8AndSize(header_key, &klen)
        if klen > INT32_MAX or out + kc_size_varint32(<int32_t>klen) + klen > limit:
            raise RuntimeError("headers changed while the batch was being encoded")
        out += kc_write_varint32(out, <int32_t>klen)
        memcpy(out, kptr, klen)
        out += klen
        out = _put(out, header_value, limit)
    return out


def encode_batch(
    values,
    *,
    keys=None,
    headers=None,
    timestamps=None,
    timestamp=-1,
    base_offset=0,
    leader_epoch=-1,
    compression=None,
    producer_id=-1,
    producer_epoch=-1,
    base_sequence=-1,
    transactional=False,
    control=False,
    log_append_time=False,
    offset_deltas=None,
    last_offset_delta=None,
    delete_horizon_ms=None,
):
    """Encode one record batch v2 holding one record per element of `values`.

    `keys`, `headers` and `timestamps`, when given, have one element per value. A record's
    headers are a sequence of `(str, bytes | None)` pairs. Without `timestamps` every record
    carries `timestamp` (default -1, no timestamp). Record i gets offset `base_offset + i`,
    or `base_offset + offset_deltas[i]` when `offset_deltas` is given (strictly increasing,
    in [0, 2^31 - 1]: a batch the log cleaner rewrote keeps its records' offsets). The
    batch's last offset delta is `last_offset_delta` when given (at least the last record's
    delta), else the last record's. `delete_horizon_ms` (>= 0) sets the delete-horizon
    attribute and makes it the base timestamp, the records' timestamp deltas relative to it
    (KIP-534). `compression` is None or a codec name ("gzip", "snappy", "lz4", "zstd") or
    id. Returns the batch as bytes.
    """
    if values is None:
        raise TypeError("values must be a sequence of bytes-like objects or None, not None")
    vals = _fast(values, "values")
    cdef Py_ssize_t count = PySequence_Fast_GET_SIZE(vals)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    ks = _fast(keys, "keys")
    hs = _fast(headers, "headers")
    tss = _fast(timestamps, "timestamps")
    for name, column in (("keys", ks), ("headers", hs), ("timestamps", tss)):
        if column is not None and len(column) != count:
            raise ValueError(f"{name} has {len(column)} elements for {count} values")
    check_int_range("base_offset", base_offset, (0, INT64_MAX))
    check_int_range("leader_epoch", leader_epoch, (-0x80000000, 0x7FFFFFFF))
    check_int_range("producer_id", producer_id, (INT64_MIN, INT64_MAX))
    check_int_range("producer_epoch", producer_epoch, (-0x8000, 0x7FFF))
    check_int_range("base_sequence", base_sequence, (-0x80000000, 0x7FFFFFFF))
    check_int_range("timestamp", timestamp, (INT64_MIN, INT64_MAX))
    if count - 1 > INT32_MAX or base_offset + count - 1 > INT64_MAX:
        raise ValueError("too many records for one batch at this base offset")
    cdef int codec = compression_codec(compression)
    ods = _fast(offset_deltas, "offset_deltas")
    if ods is not None and len(ods) != count:
        raise ValueError(f"offset_deltas has {len(ods)} elements for {count} values")
    cdef int64_t previous_delta = -1
    cdef Py_ssize_t j
    if ods is not None:
        for j in range(count):
            item = <object>PySequence_Fast_GET_ITEM(ods, j)
            check_int_range(f"offset_deltas[{j}]", item, (0, INT32_MAX))
            if item <= previous_delta:
                raise ValueError(f"offset_deltas[{j}] is {item}, not above the one before "
                                 f"({previous_delta}): offset deltas must increase")
            previous_delta = item
    cdef int64_t last_delta = count - 1 if ods is None else previous_delta
    if last_offset_delta is not None:
        check_int_range("last_offset_delta", last_offset_delta, (last_delta, INT32_MAX))
        last_delta = last_offset_delta
    if base_offset > INT64_MAX - last_delta:
        raise ValueError("too many records for one batch at this base offset")
    cdef bint horizon = delete_horizon_ms is not None
    if horizon:
        check_int_range("delete_horizon_ms", delete_horizon_ms, (0, INT64_MAX))

    cdef int64_t base_ts = timestamp
    cdef int64_t max_ts = timestamp
    cdef int64_t ts
    cdef int overflow = 0
    cdef int64_t *deltas = NULL
    cdef int32_t *odeltas = NULL
    cdef int32_t *sizes = <int32_t *>malloc(count * sizeof(int32_t))
    if sizes == NULL:
        raise MemoryError()
    cdef Py_ssize_t i, klen, vlen, body, total = 0
    cdef uint8_t *out = NULL
    cdef uint8_t *w
    cdef bytes recs, result
    cdef list header_snaps = [] if hs is not None else None
    cdef uint8_t *w_end
    cdef int64_t delta_base
    try:
        if ods is not None:
            odeltas = <int32_t *>malloc(count * sizeof(int32_t))
            if odeltas == NULL:
                raise MemoryError()
            for i in range(count):
                odeltas[i] = <int32_t>(<object>PySequence_Fast_GET_ITEM(ods, i))
        if tss is not None or horizon:
            deltas = <int64_t *>malloc(count * sizeof(int64_t))
            if deltas == NULL:
                raise MemoryError()
            for i in range(count):
                if tss is None:
                    deltas[i] = timestamp
                    continue
                item = <object>PySequence_Fast_GET_ITEM(tss, i)
                if not PyLong_Check(item) or PyBool_Check(item):
                    raise TypeError(f"timestamps[{i}] must be an int, not {type(item).__name__}")
                deltas[i] = PyLong_AsLongLongAndOverflow(item, &overflow)  # one C call
                if overflow:
                    raise ValueError(f"timestamps[{i}] out of range [{INT64_MIN}, {INT64_MAX}]: {item}")
            base_ts = deltas[0]
            max_ts = base_ts
            delta_base = <int64_t>delete_horizon_ms if horizon else base_ts
            for i in range(count):
                ts = deltas[i]
                if ts > max_ts:
                    max_ts = ts
                if (delta_base < 0 and ts > INT64_MAX + delta_base) or (delta_base > 0 and ts < INT64_MIN + delta_base):
                    if horizon:
                        raise ValueError(f"timestamps[{i}] is too far from delete_horizon_ms")
                    raise ValueError(f"timestamps[{i}] is too far from timestamps[0]")
                deltas[i] = ts - delta_base

        # Pass 1: validate every field and size every record.
        for i in range(count):
            klen = -1 if ks is None else _length_of(<object>PySequence_Fast_GET_ITEM(ks, i), "keys", i)
            vlen = _length_of(<object>PySequence_Fast_GET_ITEM(vals, i), "values", i)
            body = (1 + (kc_size_varint64(deltas[i]) if deltas != NULL else 1)
                    + kc_size_varint32(odeltas[i] if odeltas != NULL else <int32_t>i)
                    + _sized(klen) + (klen if klen > 0 else 0)
                    + _sized(vlen) + (vlen if vlen > 0 else 0)
                    + (_headers_size(<object>PySequence_Fast_GET_ITEM(hs, i), i, header_snaps)
                       if hs is not None else 1))
            if body > INT32_MAX:
                raise ValueError(f"record {i} is larger than an int32 length allows")
            sizes[i] = <int32_t>body
            total += kc_size_varint32(<int32_t>body) + body
            if total > RECORD_BATCH_BYTES_MAX:
                raise ValueError(f"the batch would be more than {RECORD_BATCH_BYTES_MAX} bytes")

        # Pass 2: write the records.
        if codec == CODEC_NONE:
            if HEADER_BYTES + total > RECORD_BATCH_BYTES_MAX:
                raise ValueError(f"the batch would be {HEADER_BYTES + total} bytes, above the int32 limit")
            result = PyBytes_FromStringAndSize(NULL, HEADER_BYTES + total)
            out = <uint8_t *>PyBytes_AS_STRING(result)
            w = out + HEADER_BYTES
        else:
            recs = PyBytes_FromStringAndSize(NULL, total)
            w = <uint8_t *>PyBytes_AS_STRING(recs)
        for i in range(count):
            # Fixed-size fields come from the C arrays sized in pass 1; every variable-size
            # write is checked against this record's end before it happens.
            w_end = w + kc_size_varint32(sizes[i]) + sizes[i]
            w += kc_write_varint32(w, sizes[i])
            w[0] = 0
            w += 1
            if deltas != NULL:
                w += kc_write_varint64(w, deltas[i])
            else:
                w[0] = 0
                w += 1
            w += kc_write_varint32(w, odeltas[i] if odeltas != NULL else <int32_t>i)
            if ks is None:
                w[0] = 1
                w += 1
            else:
                w = _put(w, <object>PySequence_Fast_GET_ITEM(ks, i), w_end)
            w = _put(w, <object>PySequence_Fast_GET_ITEM(vals, i), w_end)
            if hs is None:
                w[0] = 0
                w += 1
            else:
                w = _put_headers(w, header_snaps[i], w_end)
            if w != w_end:
                raise RuntimeError("a key or value changed size while the batch was being encoded")
    finally:
        free(sizes)
        free(deltas)
        free(odeltas)

    if codec != CODEC_NONE:
        compressed = compress(codec, recs)
        total = len(compressed)
        if HEADER_BYTES + total > RECORD_BATCH_BYTES_MAX:
            raise ValueError(f"the batch would be {HEADER_BYTES + total} bytes, above the int32 limit")
        result = PyBytes_FromStringAndSize(NULL, HEADER_BYTES + total)
        out = <uint8_t *>PyBytes_AS_STRING(result)
        memcpy(out + HEADER_BYTES, PyBytes_AS_STRING(compressed), total)

    cdef uint16_t attributes = <uint16_t>codec
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    if horizon:
        attributes |= DELETE_HORIZON_MASK
        base_ts = <int64_t>delete_horizon_ms
    kc_put_be64(out + BASE_OFFSET_OFFSET, <uint64_t><int64_t>base_offset)
    kc_put_be32(out + BATCH_LENGTH_OFFSET, <uint32_t>(HEADER_BYTES + total - LOG_OVERHEAD))
    kc_put_be32(out + PARTITION_LEADER_EPOCH_OFFSET, <uint32_t><int32_t>leader_epoch)
    out[MAGIC_OFFSET] = MAGIC
    kc_put_be16(out + ATTRIBUTES_OFFSET, attributes)
    kc_put_be32(out + LAST_OFFSET_DELTA_OFFSET, <uint32_t><int32_t>last_delta)
    kc_put_be64(out + BASE_TIMESTAMP_OFFSET, <uint64_t>base_ts)
    kc_put_be64(out + MAX_TIMESTAMP_OFFSET, <uint64_t>max_ts)
    kc_put_be64(out + PRODUCER_ID_OFFSET, <uint64_t><int64_t>producer_id)
    kc_put_be16(out + PRODUCER_EPOCH_OFFSET, <uint16_t><int16_t>producer_epoch)
    kc_put_be32(out + BASE_SEQUENCE_OFFSET, <uint32_t><int32_t>base_sequence)
    kc_put_be32(out + RECORDS_COUNT_OFFSET, <uint32_t>count)
    kc_put_be32(out + CRC_OFFSET, kc_crc32c_update(CRC_INIT, out + CRC_START_OFFSET,
                                                   HEADER_BYTES + total - CRC_START_OFFSET)
                ^ CRC_INIT)
    return result

