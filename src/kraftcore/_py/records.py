"""Kafka record batch v2 ("magic 2"): encode, decode and validate (kafka-facts §2).

The batch header's layout (field offsets, attribute bits) is `kraftcore.layout`'s. The CRC
covers the attributes to the end, so offsets and the leader epoch can be restamped without
recomputing it; the records follow the header, or one compressed stream holding them all
when the codec bits say gzip, snappy, lz4 or zstd (`kraftcore.compression`).

A record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
keyLength varint (-1 = null), key, valueLength varint (-1 = null), value, headersCount
varint, then per header keyLength varint (>= 0), UTF-8 key, valueLength varint (-1 = null),
value. Record-level varints are zigzag.

Invariants checked on decode, each a `CorruptRecordError` with the byte position: the batch
fits the buffer, magic 2, CRC, a known codec, a non-negative base offset and records count,
a leader epoch >= -1, every record inside its declared length and consuming all of it,
offset deltas strictly increasing within [0, lastOffsetDelta], no bytes after the last
record, header keys valid UTF-8. This module is the specification; `kraftcore._c.records`
must behave the same on every input.
"""

import struct

from kraftcore import limits
from kraftcore._py.crc32c import crc32c
from kraftcore._py.varint import decode_varint, decode_varlong, encode_varint, encode_varlong
from kraftcore.compression import compress, compression_codec, decompress
from kraftcore.errors import CorruptRecordError
from kraftcore.kernel_api import check_int_range
from kraftcore.layout import (BATCH_HEADER, BATCH_HEADER_BYTES, BATCH_LENGTH_MIN,
                              CODEC_NAMES, CODEC_NONE, COMPRESSION_CODEC_MASK, CONTROL_MASK,
                              CRC_OFFSET, CRC_START_OFFSET, DELETE_HORIZON_MASK, INT32_MAX,
                              INT32_MIN, INT64_MAX, INT64_MIN, LOG_OVERHEAD_BYTES, MAGIC,
                              TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK)

_INT16 = (-0x8000, 0x7FFF)
_INT32 = (INT32_MIN, INT32_MAX)
_INT64 = (INT64_MIN, INT64_MAX)
_NO_HEADERS = ()


def _bytes_or_none(name, index, obj):
    if obj is None:
        return None
    if isinstance(obj, bytes):
        return obj
    try:
        return memoryview(obj).cast("B").tobytes()
    except TypeError:
        raise TypeError(
            f"{name}[{index}] must be bytes-like or None, not {type(obj).__name__}"
        ) from None


def _encode_length_prefixed(out, data):
    if data is None:
        out += b"\x01"  # zigzag(-1)
    else:
        out += encode_varint(len(data))
        out += data


class Record:
    """One record of a decoded batch: absolute offset and timestamp, key, value, headers.

    `headers` is a tuple of `(key: str, value: bytes | None)` pairs."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers")

    def __init__(self, offset, timestamp, key, value, headers):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self):
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )


class RecordBatch:
    """A decoded record batch: every header field, derived flags, and its records."""

    __slots__ = (
        "position",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
        "records",
    )

    @property
    def size_bytes(self):
        return LOG_OVERHEAD_BYTES + self.batch_length

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
        (Keys and headers are not compared.) Cheaper than reading each record's value."""
        records = self.records
        if not records or records[0].value is None:
            return None
        value = records[0].value
        for record in records:
            if record.value != value:
                return None
        return value

    def __repr__(self):
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"partition_leader_epoch={self.partition_leader_epoch}, "
            f"records_count={self.records_count}, attributes={self.attributes:#x}, "
            f"size_bytes={self.size_bytes})"
        )


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
    values, keys, headers, timestamps = (
        column if column is None or isinstance(column, (list, tuple)) else list(column)
        for column in (values, keys, headers, timestamps)
    )
    count = len(values)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    for name, column in (("keys", keys), ("headers", headers), ("timestamps", timestamps)):
        if column is not None and len(column) != count:
            raise ValueError(f"{name} has {len(column)} elements for {count} values")
    check_int_range("base_offset", base_offset, (0, _INT64[1]))
    check_int_range("leader_epoch", leader_epoch, _INT32)
    check_int_range("producer_id", producer_id, _INT64)
    check_int_range("producer_epoch", producer_epoch, _INT16)
    check_int_range("base_sequence", base_sequence, _INT32)
    check_int_range("timestamp", timestamp, _INT64)
    if count - 1 > _INT32[1] or base_offset + count - 1 > _INT64[1]:
        raise ValueError("too many records for one batch at this base offset")
    codec = compression_codec(compression)
    if offset_deltas is not None:
        if not isinstance(offset_deltas, (list, tuple)):
            offset_deltas = list(offset_deltas)
        if len(offset_deltas) != count:
            raise ValueError(f"offset_deltas has {len(offset_deltas)} elements for {count} values")
        previous = -1
        for i, delta in enumerate(offset_deltas):
            check_int_range(f"offset_deltas[{i}]", delta, (0, _INT32[1]))
            if delta <= previous:
                raise ValueError(f"offset_deltas[{i}] is {delta}, not above the one before "
                                 f"({previous}): offset deltas must increase")
            previous = delta
    last_delta = count - 1 if offset_deltas is None else offset_deltas[-1]
    if last_offset_delta is not None:
        check_int_range("last_offset_delta", last_offset_delta, (last_delta, _INT32[1]))
        last_delta = last_offset_delta
    if base_offset > _INT64[1] - last_delta:
        raise ValueError("too many records for one batch at this base offset")
    if delete_horizon_ms is not None:
        check_int_range("delete_horizon_ms", delete_horizon_ms, (0, _INT64[1]))

    if timestamps is None:
        base_timestamp = max_timestamp = timestamp
    else:
        for i, ts in enumerate(timestamps):
            check_int_range(f"timestamps[{i}]", ts, _INT64)
        base_timestamp = timestamps[0]
        max_timestamp = max(timestamps)
    # the timestamp every record's delta is taken from (its own when it has none)
    delta_base = base_timestamp if delete_horizon_ms is None else delete_horizon_ms

    body = bytearray()
    record = bytearray()
    for i in range(count):
        record.clear()
        record += b"\x00"  # record attributes
        delta = (timestamp if timestamps is None else timestamps[i]) - delta_base
        if not _INT64[0] <= delta <= _INT64[1]:
            raise ValueError(f"timestamps[{i}] is too far from timestamps[0]"
                             if delete_horizon_ms is None else
                             f"timestamps[{i}] is too far from delete_horizon_ms")
        record += encode_varlong(delta)
        record += encode_varint(i if offset_deltas is None else offset_deltas[i])
        _encode_length_prefixed(record, None if keys is None else _bytes_or_none("keys", i, keys[i]))
        _encode_length_prefixed(record, _bytes_or_none("values", i, values[i]))
        pairs = () if headers is None or headers[i] is None else headers[i]
        try:
            pairs = tuple(pairs)
        except TypeError:
            raise TypeError(
                f"headers[{i}] must be a sequence, not {type(pairs).__name__}") from None
        record += encode_varint(len(pairs))
        for pair in pairs:
            header_key, header_value = pair
            if not isinstance(header_key, str):
                raise TypeError(
                    f"headers[{i}] keys must be str, not {type(header_key).__name__}"
                )
            _encode_length_prefixed(record, header_key.encode("utf-8"))
            try:
                header_bytes = _bytes_or_none("headers", i, header_value)
            except TypeError:
                raise TypeError(f"headers[{i}] value must be bytes-like or None, not "
                                f"{type(header_value).__name__}") from None
            _encode_length_prefixed(record, header_bytes)
        if len(record) > _INT32[1]:
            raise ValueError(f"record {i} is larger than an int32 length allows")
        body += encode_varint(len(record))
        body += record

    if codec != CODEC_NONE:
        body = compress(codec, bytes(body))
    total = BATCH_HEADER_BYTES + len(body)
    if total > limits.RECORD_BATCH_BYTES_MAX:
        raise ValueError(f"the batch would be {total} bytes, above the int32 limit")
    attributes = codec
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if transactional:
        attributes |= TRANSACTIONAL_MASK
    if control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_timestamp = delete_horizon_ms
    out = bytearray(
        BATCH_HEADER.pack(
            base_offset,
            total - LOG_OVERHEAD_BYTES,
            leader_epoch,
            MAGIC,
            0,
            attributes,
            last_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    out += body
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(memoryview(out)[CRC_START_OFFSET:]))
    return bytes(out)


def _read_header(view, pos):
    """Check the framing of the batch at `pos` and return its unpacked header."""
    remaining = len(view) - pos
    if remaining < BATCH_HEADER_BYTES:
        raise CorruptRecordError(
            f"truncated batch: {remaining} bytes left, a batch header needs "
            f"{BATCH_HEADER_BYTES}", pos
        )
    fields = BATCH_HEADER.unpack_from(view, pos)
    base_offset, batch_length, leader_epoch, magic = fields[:4]
    if batch_length < BATCH_LENGTH_MIN:
        raise CorruptRecordError(
            f"batch length {batch_length} is below the minimum {BATCH_LENGTH_MIN}", pos)
    if batch_length + LOG_OVERHEAD_BYTES > remaining:
        raise CorruptRecordError(
            f"truncated batch: it declares {batch_length + LOG_OVERHEAD_BYTES} bytes, "
            f"{remaining} are left",
            pos,
        )
    if magic != MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {magic} (only 2 is read)", pos)
    if base_offset < 0:
        raise CorruptRecordError(f"negative base offset {base_offset}", pos)
    if leader_epoch < -1:
        raise CorruptRecordError(f"invalid partition leader epoch {leader_epoch}", pos)
    attributes, last_offset_delta, records_count = fields[5], fields[6], fields[12]
    codec = attributes & COMPRESSION_CODEC_MASK
    if codec not in CODEC_NAMES:
        raise CorruptRecordError(f"invalid compression codec id {codec}", pos)
    if records_count < 0:
        raise CorruptRecordError(f"negative records count {records_count}", pos)
    if last_offset_delta < 0 or last_offset_delta < records_count - 1:
        raise CorruptRecordError(
            f"last offset delta {last_offset_delta} cannot cover {records_count} records", pos
        )
    if base_offset > _INT64[1] - last_offset_delta:
        raise CorruptRecordError("last offset overflows int64", pos)
    return fields


def _check_crc(view, pos, fields):
    end = pos + LOG_OVERHEAD_BYTES + fields[1]
    actual = crc32c(view[pos + CRC_START_OFFSET : end])
    if actual != fields[4]:
        raise CorruptRecordError(
            f"CRC mismatch: stored {fields[4]:#010x}, computed {actual:#010x}", pos
        )


def _records_view(view, pos, fields):
    """The batch's record bytes: (buffer, start, end, whether they were decompressed)."""
    start = pos + BATCH_HEADER_BYTES
    end = pos + LOG_OVERHEAD_BYTES + fields[1]
    codec = fields[5] & COMPRESSION_CODEC_MASK
    if codec == CODEC_NONE:
        return view, start, end, False
    data = memoryview(decompress(codec, view[start:end], pos))
    return data, 0, len(data), True


def _read_length_prefixed(data, p, end, what):
    length, p = decode_varint(data, p)
    if length < -1:
        raise CorruptRecordError(f"{what} length {length} is invalid", p)
    if length == -1:
        return None, p
    if length > end - p:
        raise CorruptRecordError(f"{what} of {length} bytes overruns its record", p)
    return data[p : p + length].tobytes(), p + length


def _walk_records(data, p, end, fields, build):
    """Parse every record of one batch; returns the Record list when `build`, else None.

    Errors carry positions in `data`; the caller maps them for decompressed records."""
    base_offset, base_timestamp = fields[0], fields[7]
    last_offset_delta, count = fields[6], fields[12]
    log_append = fields[5] & TIMESTAMP_TYPE_MASK
    max_timestamp = fields[8]

    if count > (end - p) // limits.RECORD_BYTES_MIN:
        raise CorruptRecordError(
            f"records count {count} cannot fit in {end - p} bytes", p
        )
    records = [] if build else None
    previous_delta = -1
    for _ in range(count):
        record_start = p
        length, p = decode_varint(data, p)
        if length < 0 or length > end - p:
            raise CorruptRecordError(f"record length {length} is invalid", record_start)
        record_end = p + length
        if length < 6:
            raise CorruptRecordError(f"record length {length} is below the minimum 6", record_start)
        p += 1  # attributes: unused
        ts_delta, p = decode_varlong(data, p)
        offset_delta, p = decode_varint(data, p)
        if p > record_end:
            raise CorruptRecordError("record fields overrun its length", record_start)
        if offset_delta <= previous_delta or offset_delta > last_offset_delta:
            raise CorruptRecordError(
                f"offset delta {offset_delta} out of order or beyond {last_offset_delta}",
                record_start,
            )
        previous_delta = offset_delta
        key, p = _read_length_prefixed(data, p, record_end, "key")
        value, p = _read_length_prefixed(data, p, record_end, "value")
        if p >= record_end:
            raise CorruptRecordError("record ends before its headers count", p)
        header_count, p = decode_varint(data, p)
        if header_count < 0 or header_count > (record_end - p) // 2:
            raise CorruptRecordError(f"headers count {header_count} is invalid", p)
        pairs = []
        for _h in range(header_count):
            key_len, p = decode_varint(data, p)
            if key_len < 0 or key_len > record_end - p:
                raise CorruptRecordError(f"header key length {key_len} is invalid", p)
            raw_key = data[p : p + key_len]
            try:
                header_key = str(raw_key, "utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError("header key is not valid UTF-8", p) from None
            p += key_len
            if p >= record_end:
                raise CorruptRecordError("header value length overruns its record", p)
            header_value, p = _read_length_prefixed(data, p, record_end, "header value")
            pairs.append((header_key, header_value))
        if p != record_end:
            raise CorruptRecordError(
                f"record declares {length} bytes but its fields use {p - (record_end - length)}",
                record_start,
            )
        if log_append:
            ts = max_timestamp
        else:
            ts = base_timestamp + ts_delta
            if not _INT64[0] <= ts <= _INT64[1]:
                raise CorruptRecordError("record timestamp overflows int64", record_start)
        if build:
            records.append(
                Record(
                    base_offset + offset_delta,
                    ts,
                    key,
                    value,
                    tuple(pairs) if pairs else _NO_HEADERS,
                )
            )
    if p != end:
        raise CorruptRecordError(
            f"{end - p} bytes remain after the batch's {count} records", p
        )
    return records


def _iter_batches(buffer, verify, build):
    view = memoryview(buffer)
    if not view.c_contiguous:
        raise ValueError("the buffer must be C-contiguous")
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    pos = 0
    total = len(view)
    while pos < total:
        fields = _read_header(view, pos)
        if verify:
            _check_crc(view, pos, fields)
        yield pos, fields, _records_of(view, pos, fields, build)
        pos += LOG_OVERHEAD_BYTES + fields[1]


def _records_of(view, pos, fields, build):
    """Walk the records of the batch at `pos`, decompressing first when needed."""
    data, start, end, compressed = _records_view(view, pos, fields)
    try:
        return _walk_records(data, start, end, fields, build)
    except CorruptRecordError as exc:
        if not compressed:
            raise
        raise CorruptRecordError(
            f"{exc.reason} (at byte {exc.position} of the decompressed records)", pos
        ) from None


def check_batch(view, pos, verify_records=True):
    """Check the batch at `pos` of a byte memoryview (framing, CRC and, with
    `verify_records`, every record) and return its header fields as unpacked by
    `layout.BATCH_HEADER`.
    Raises `CorruptRecordError` like `decode_batches`."""
    fields = _read_header(view, pos)
    _check_crc(view, pos, fields)
    if verify_records:
        _records_of(view, pos, fields, False)
    return fields


def decode_batches(buffer, verify=True):
    """Decode every record batch in `buffer` (back to back, nothing else) into a list.

    With `verify` the CRC of every batch is checked. Any malformed byte raises
    `CorruptRecordError` with its position (for a compressed batch, the batch's position);
    every Kafka codec is read (`kraftcore.compression`)."""
    batches = []
    for pos, fields, records in _iter_batches(buffer, verify, True):
        batch = RecordBatch()
        (
            batch.base_offset,
            batch.batch_length,
            batch.partition_leader_epoch,
            batch.magic,
            batch.crc,
            batch.attributes,
            batch.last_offset_delta,
            batch.base_timestamp,
            batch.max_timestamp,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.records_count,
        ) = fields
        batch.position = pos
        batch.records = records
        batches.append(batch)
    return batches


def validate_batches(buffer):
    """Check every batch in `buffer` (framing, CRC, record structure) without building
    records. Returns the number of batches; raises like `decode_batches`."""
    count = 0
    for _ in _iter_batches(buffer, True, False):
        count += 1
    return count
