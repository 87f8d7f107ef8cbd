"""Pure-Python reference of the protocol codec kernel (`kraftcore._c.protocol` mirrors it).

The kernel interprets *programs*: a message schema compiled for one version by
`kraftcore.protocol.schema`. It knows the field encodings of kafka-facts §1.2 and nothing of
any particular message.

A program is a tuple `(cls, ops, tagged, tagmap, flexible, name, min_bytes)`:

* `cls` is the struct class; decoding makes an instance without calling `__init__` and sets
  every field.
* `ops` are the fields carried in the body, in wire order, plus the fields this version does
  not carry (flag ABSENT): decoding gives those their default, encoding refuses a
  non-default value unless the field is IGNORABLE.
* `tagged` are the tagged fields of this version in increasing tag order; `tagmap` maps a
  tag to its op. Unknown tags are kept, as `(tag, bytes)` pairs in `_unknown_tags`, and
  written back in order.
* `flexible` says whether the struct ends with a tagged-field section.
* `min_bytes` is the fewest bytes one instance can take (guards array counts).

An op is `(attr, kind, flags, default, sub, tag, label, slot)`: `sub` is the element kind of
a scalar array or the program of a struct / struct array; `label` names the field in errors;
`slot` is the class's member descriptor of the field (the native kernel reads and writes the
slot directly). With the FRESH flag the default is a new object per instance: an empty list
for arrays, `default()` (a struct with its defaults) for structs; a list or struct equals
its default when it is an empty list, or compares equal to `default()`.

Decode errors raise `ProtocolError` with the byte position; encode errors raise
`EncodeError` naming the field.
"""

import struct

from kraftcore.errors import EncodeError, ProtocolError
from kraftcore.kernel_api import (
    ABSENT, ARRAY, ARRAY_STRUCT, BOOL, BYTES, COMPACT, FLOAT64, FRESH, IGNORABLE, INT8, INT16,
    INT32, INT64, NULLABLE, RECORDS, STRING, STRUCT, UINT16, UINT32, UUID,
    checked_unknown_tags)
from kraftcore.layout import METADATA_FRAME_FIELD_MAX, METADATA_FRAME_VERSION
from kraftcore.limits import PROTOCOL_EMPTY_ELEMENTS_MAX
from kraftcore.types import FileRegion, Uuid

_FIXED = {
    INT8: struct.Struct(">b"), INT16: struct.Struct(">h"), INT32: struct.Struct(">i"),
    INT64: struct.Struct(">q"), UINT16: struct.Struct(">H"), UINT32: struct.Struct(">I"),
    FLOAT64: struct.Struct(">d"),
}
_RANGE = {
    INT8: (-(1 << 7), (1 << 7) - 1), INT16: (-(1 << 15), (1 << 15) - 1),
    INT32: (-(1 << 31), (1 << 31) - 1), INT64: (-(1 << 63), (1 << 63) - 1),
    UINT16: (0, (1 << 16) - 1), UINT32: (0, (1 << 32) - 1),
}
_MIN_BYTES = {BOOL: 1, INT8: 1, INT16: 2, INT32: 4, INT64: 8, UINT16: 2, UINT32: 4,
              FLOAT64: 8, UUID: 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# ------------------------------------------------------------------------------ decode


class _Reader:
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos, end):
        self.buf = buf
        self.pos = pos
        self.end = end

    def take(self, n, what):
        pos = self.pos
        if n > self.end - pos:
            raise ProtocolError(f"truncated {what}: needs {n} bytes, {self.end - pos} left", pos)
        self.pos = pos + n
        return pos

    def uvarint(self, what):
        start = self.pos
        value = shift = 0
        for i in range(5):
            if self.pos >= self.end:
                raise ProtocolError(f"truncated varint ({what})", start)
            byte = self.buf[self.pos]
            self.pos += 1
            if i == 4 and byte >> 4:
                raise ProtocolError(f"bad varint ({what}): more than 32 bits", start)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ProtocolError(f"bad varint ({what})", start)  # pragma: no cover

    def length(self, compact, wide, what):
        """A string/bytes/array length: -1 is null. Classic form is int16 or int32 (`wide`)."""
        if compact:
            return self.uvarint(what) - 1
        if wide:
            return _I32.unpack_from(self.buf, self.take(4, what))[0]
        return _I16.unpack_from(self.buf, self.take(2, what))[0]


def _null_check(value, op, start):
    if value is None and not op[2] & NULLABLE:
        raise ProtocolError(f"{op[6]} is null but the field is not nullable", start)


def _read_scalar(r, kind, flags, label):
    if kind == BOOL:
        return r.buf[r.take(1, label)] != 0
    fixed = _FIXED.get(kind)
    if fixed is not None:
        return fixed.unpack_from(r.buf, r.take(fixed.size, label))[0]
    if kind == UUID:
        pos = r.take(16, label)
        return Uuid(bytes(r.buf[pos:pos + 16]))
    start = r.pos
    n = r.length(flags & COMPACT, kind != STRING, label)
    if n < -1:
        raise ProtocolError(f"{label} has a negative length {n}", start)
    if n == -1:
        return None
    pos = r.take(n, label)
    if kind == STRING:
        try:
            return str(r.buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"{label} is not valid UTF-8", pos) from None
    if kind == BYTES:
        return bytes(r.buf[pos:pos + n])
    return r.buf[pos:pos + n]  # RECORDS: a zero-copy view


def _read_field(r, op):
    kind, flags, sub, label = op[1], op[2], op[4], op[6]
    start = r.pos
    if kind == STRUCT:
        return _read_struct(r, sub)
    if kind == ARRAY or kind == ARRAY_STRUCT:
        n = r.length(flags & COMPACT, True, label)
        if n == -1:
            value = None
        else:
            each = sub[6] if kind == ARRAY_STRUCT else _MIN_BYTES.get(sub, 1)
            if n < -1 or (each and n * each > r.end - r.pos) or (
                not each and n > PROTOCOL_EMPTY_ELEMENTS_MAX
            ):
                raise ProtocolError(
                    f"{label} claims {n} elements, impossible in {r.end - r.pos} bytes", start)
            if kind == ARRAY:
                value = []
                for _ in range(n):
                    element = _read_scalar(r, sub, flags, label)
                    if element is None:
                        raise ProtocolError(f"{label} holds a null element", start)
                    value.append(element)
            else:
                value = [_read_struct(r, sub) for _ in range(n)]
    else:
        value = _read_scalar(r, kind, flags, label)
    _null_check(value, op, start)
    return value


def _default(op):
    if op[2] & FRESH:
        return [] if op[1] >= ARRAY else op[3]()
    return op[3]


def _is_default(op, value):
    if op[2] & FRESH and op[1] >= ARRAY:
        return isinstance(value, list) and not value
    return value == _default(op)


def _read_struct(r, prog):
    cls, ops, tagged, tagmap, flexible = prog[0], prog[1], prog[2], prog[3], prog[4]
    obj = cls.__new__(cls)
    for op in ops:
        setattr(obj, op[0], _default(op) if op[2] & ABSENT else _read_field(r, op))
    unknown = None
    if flexible:
        for op in tagged:
            setattr(obj, op[0], _default(op))
        count = r.uvarint("tagged field count")
        for _ in range(count):
            tag_pos = r.pos
            tag = r.uvarint("tag")
            size = r.uvarint("tagged field size")
            start = r.take(size, f"tagged field {tag}")
            op = tagmap.get(tag)
            if op is None:
                if unknown is None:
                    unknown = []
                unknown.append((tag, bytes(r.buf[start:start + size])))
                continue
            inner = _Reader(r.buf, start, start + size)
            setattr(obj, op[0], _read_field(inner, op))
            if inner.pos != inner.end:
                raise ProtocolError(
                    f"tagged field {op[6]} (tag {tag}) has {size} bytes but its value "
                    f"takes {inner.pos - start}", tag_pos)
    obj._unknown_tags = unknown
    return obj


def decode_struct(prog, buffer, pos=0, end=None):
    """Decode one struct of program `prog` from `buffer[pos:end]`. Returns (obj, next_pos)."""
    buf = memoryview(buffer).cast("B")
    if end is None:
        end = len(buf)
    if not 0 <= pos <= end <= len(buf):
        raise ValueError(f"bad range [{pos}, {end}) for a buffer of {len(buf)} bytes")
    r = _Reader(buf, pos, end)
    obj = _read_struct(r, prog)
    return obj, r.pos


def decode_message(prog, buffer, pos=0):
    """Decode a whole message body: the struct must end exactly at the end of `buffer`."""
    obj, end = decode_struct(prog, buffer, pos)
    size = len(memoryview(buffer).cast("B"))
    if end != size:
        raise ProtocolError(f"{size - end} unexpected bytes after {prog[5]}", end)
    return obj


def _frame(r):
    start = r.pos
    frame = r.uvarint("frame version")
    if frame != METADATA_FRAME_VERSION:
        raise ProtocolError(
            f"metadata record frame version {frame}, expected {METADATA_FRAME_VERSION}", start)
    api_key = r.uvarint("record type")
    version = r.uvarint("record version")
    if api_key > METADATA_FRAME_FIELD_MAX or version > METADATA_FRAME_FIELD_MAX:
        raise ProtocolError(f"record type {api_key} or version {version} above 32767", start)
    return api_key, version


def _program_for(table, api_key, version, pos):
    progs = table[api_key] if 0 <= api_key < len(table) else None
    if progs is None:
        raise ProtocolError(f"unknown metadata record type {api_key}", pos)
    prog = progs[version] if 0 <= version < len(progs) else None
    if prog is None:
        raise ProtocolError(
            f"unsupported version {version} of metadata record type {api_key} "
            f"({_name_of(progs)})", pos)
    return prog


def _name_of(progs):
    """The record name of a version table (the name of any version it has)."""
    for prog in progs:
        if prog is not None:
            return prog[5]
    return "?"


def decode_metadata_values(values, table):
    """Decode framed metadata record values (kafka-facts §5.1): one per element of `values`.

    `table[api_key][version]` is the record's program (None where no such record or
    version exists). Returns a list of `(record, version)`; each value must hold exactly one
    frame and body. A bad value raises `ProtocolError` whose position counts from the start
    of that value and whose message names its index in `values`.
    """
    out = []
    for i, value in enumerate(values):
        if value is None:
            raise ProtocolError(f"metadata record {i}: null value", 0)
        buf = memoryview(value).cast("B")
        r = _Reader(buf, 0, len(buf))
        try:
            api_key, version = _frame(r)
            prog = _program_for(table, api_key, version, 0)
            obj = _read_struct(r, prog)
            if r.pos != r.end:
                raise ProtocolError(f"{r.end - r.pos} unexpected bytes after {prog[5]}", r.pos)
        except ProtocolError as exc:
            raise ProtocolError(f"metadata record {i}: {exc.reason}", exc.position) from None
        out.append((obj, version))
    return out


# ------------------------------------------------------------------------------ encode


def _uvarint(out, value):
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_length(out, n, compact, wide):
    if compact:
        _uvarint(out, n + 1)
    else:
        out += (_I32 if wide else _I16).pack(n)


def _write_scalar(out, kind, flags, value, label):
    if kind == BOOL:
        if not isinstance(value, (bool, int)):
            raise EncodeError(f"{label} must be a bool, not {type(value).__name__}")
        out.append(1 if value else 0)
        return
    fixed = _FIXED.get(kind)
    if fixed is not None:
        if kind == FLOAT64:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise EncodeError(f"{label} must be a float, not {type(value).__name__}")
            try:
                out += fixed.pack(float(value))
            except OverflowError:
                raise EncodeError(f"{label} is out of a float64's range") from None
            return
        if not isinstance(value, int) or isinstance(value, bool):
            raise EncodeError(f"{label} must be an int, not {type(value).__name__}")
        lo, hi = _RANGE[kind]
        if not lo <= value <= hi:
            raise EncodeError(f"{label} = {value} is out of range [{lo}, {hi}]")
        out += fixed.pack(value)
        return
    if kind == UUID:
        if not isinstance(value, (bytes, bytearray)) or len(value) != 16:
            raise EncodeError(f"{label} must be a 16-byte Uuid, not {value!r}")
        out += value
        return
    if value is None:
        if not flags & NULLABLE:
            raise EncodeError(f"{label} is not nullable")
        _put_length(out, -1, flags & COMPACT, kind != STRING)
        return
    if kind == STRING:
        if not isinstance(value, str):
            raise EncodeError(f"{label} must be a str, not {type(value).__name__}")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError:
            raise EncodeError(f"{label} cannot be encoded as UTF-8") from None
        if not flags & COMPACT and len(data) > 0x7FFF:
            raise EncodeError(f"{label} is {len(data)} bytes; a classic string holds 32767")
    else:
        if kind == RECORDS and type(out) is _Parts and isinstance(value, FileRegion):
            _put_length(out, value.length, flags & COMPACT, True)
            out.cut(value)
            return
        try:
            data = memoryview(value).cast("B")
        except (TypeError, BufferError):
            raise EncodeError(f"{label} must be bytes-like, not {type(value).__name__}") from None
    if len(data) > 0x7FFFFFFE:
        raise EncodeError(f"{label} is too long ({len(data)} bytes)")
    _put_length(out, len(data), flags & COMPACT, kind != STRING)
    out += data


def _write_field(out, op, value):
    kind, flags, sub, label = op[1], op[2], op[4], op[6]
    if kind == STRUCT:
        if not isinstance(value, sub[0]):
            raise EncodeError(f"{label} must be a {sub[0].__name__}, not {type(value).__name__}")
        _write_struct(out, sub, value)
    elif kind == ARRAY or kind == ARRAY_STRUCT:
        if value is None:
            if not flags & NULLABLE:
                raise EncodeError(f"{label} is not nullable")
            _put_length(out, -1, flags & COMPACT, True)
            return
        if isinstance(value, (str, bytes, bytearray, memoryview)) or not hasattr(value, "__len__"):
            raise EncodeError(f"{label} must be a list, not {type(value).__name__}")
        _put_length(out, len(value), flags & COMPACT, True)
        if kind == ARRAY:
            for element in value:
                if element is None:
                    raise EncodeError(f"{label} holds a null element")
                _write_scalar(out, sub, flags & ~NULLABLE, element, label)
        else:
            cls = sub[0]
            for element in value:
                if not isinstance(element, cls):
                    raise EncodeError(
                        f"{label} elements must be {cls.__name__}, not {type(element).__name__}")
                _write_struct(out, sub, element)
    else:
        _write_scalar(out, kind, flags, value, label)


def _write_struct(out, prog, obj):
    ops, tagged, flexible = prog[1], prog[2], prog[4]
    for op in ops:
        value = getattr(obj, op[0])
        if op[2] & ABSENT:
            if not op[2] & IGNORABLE and not _is_default(op, value):
                raise EncodeError(
                    f"{op[6]} = {value!r} cannot be written at this version of {prog[5]}")
            continue
        _write_field(out, op, value)
    if not flexible:
        return
    fields = []
    for op in tagged:
        value = getattr(obj, op[0])
        if not _is_default(op, value):
            data = bytearray()
            _write_field(data, op, value)
            fields.append((op[5], data))
    unknown = obj._unknown_tags
    if unknown:
        known = {tag for tag, _ in fields}
        fields.extend((tag, data) for tag, data in checked_unknown_tags(unknown, prog[5])
                      if tag not in prog[3] and tag not in known)
        fields.sort(key=lambda item: item[0])
    _uvarint(out, len(fields))
    for tag, data in fields:
        _uvarint(out, tag)
        _uvarint(out, len(data))
        out += data


def encode_struct(prog, obj):
    """Encode `obj` (an instance of `prog`'s class) with program `prog`. Returns bytes."""
    if not isinstance(obj, prog[0]):
        raise EncodeError(f"{prog[5]} cannot encode a {type(obj).__name__}")
    out = bytearray()
    _write_struct(out, prog, obj)
    return bytes(out)


class _Parts(bytearray):
    """The output of `encode_struct_parts`: the bytes being written, and the parts before
    them (bytes, and the file regions between them)."""

    def __init__(self):
        super().__init__()
        self.parts = []

    def cut(self, region):
        self.parts.append(bytes(self))
        self.parts.append(region)
        del self[:]


def encode_struct_parts(prog, obj):
    """Encode `obj` as `encode_struct` does, except that a records field may hold a
    `kraftcore.types.FileRegion` (outside tagged fields): its length is written and the
    region itself becomes a part of the output. Returns a list of parts, bytes and
    regions alternating, beginning and ending with bytes (one bytes when no region)."""
    if not isinstance(obj, prog[0]):
        raise EncodeError(f"{prog[5]} cannot encode a {type(obj).__name__}")
    out = _Parts()
    _write_struct(out, prog, obj)
    out.parts.append(bytes(out))
    return out.parts


def encode_metadata_values(records, versions, table):
    """Frame and encode metadata records: `records[i]` at `versions[i]` (kafka-facts §5.1).

    `table` is as for `decode_metadata_values`; each record's class carries its `api_key`.
    Returns a list of bytes, one per record.
    """
    if len(versions) != len(records):
        raise ValueError(f"{len(versions)} versions for {len(records)} records")
    out = []
    for record, version in zip(records, versions):
        api_key = getattr(type(record), "api_key", None)
        if api_key is None:
            raise EncodeError(f"{type(record).__name__} is not a metadata record")
        if not isinstance(version, int) or not 0 <= version <= METADATA_FRAME_FIELD_MAX:
            raise EncodeError(f"bad record version {version!r}")
        try:
            prog = _program_for(table, api_key, version, 0)
        except ProtocolError as exc:
            raise EncodeError(exc.reason) from None
        if not isinstance(record, prog[0]):
            raise EncodeError(f"record type {api_key} is {prog[0].__name__}, "
                              f"not {type(record).__name__}")
        data = bytearray()
        _uvarint(data, METADATA_FRAME_VERSION)
        _uvarint(data, api_key)
        _uvarint(data, version)
        _write_struct(data, prog, record)
        out.append(bytes(data))
    return out
