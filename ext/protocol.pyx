"""Protocol codec kernel: native twin of `kraftcore._py.protocol` (read its docstring for the
program form and the rules). It interprets compiled schema programs in C loops: reads are
bounds-checked against the input, every malformed byte raises `ProtocolError` with its
position, and encoding builds into one growing C buffer.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_DecodeUTF8
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int8_t, int16_t, int32_t, int64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memmove, memcmp

from kc cimport (kc_read_uvarint32, kc_write_uvarint64, kc_size_uvarint64, kc_put_be16, kc_put_be32, kc_put_be64,
                 kc_get_be16, kc_get_be32, kc_get_be64)

from kraftcore.errors import EncodeError, ProtocolError
from kraftcore.types import FileRegion, Uuid
from kraftcore import kernel_api
from kraftcore.kernel_api import checked_unknown_tags

cdef extern from "Python.h":
    """
    /* Direct access to a __slots__ field through its member descriptor: the offset CPython's
     * own member get/set use. Only for T_OBJECT_EX members of a type `obj` is an instance of.
     */
    #include <structmember.h>
    static inline Py_ssize_t kc_slot_offset(PyObject *descr, PyObject *obj) {
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        PyMemberDescrObject *d = (PyMemberDescrObject *)descr;
        if (d->d_member->type != T_OBJECT_EX || (d->d_member->flags & READONLY)) return -1;
        if (Py_TYPE(obj) != d->d_common.d_type && !PyType_IsSubtype(Py_TYPE(obj), d->d_common.d_type))
            return -1;
        return d->d_member->offset;
    }
    static inline void kc_slot_set(PyObject *obj, Py_ssize_t offset, PyObject *value) {
        PyObject **p = (PyObject **)((char *)obj + offset);
        PyObject *old = *p;
        Py_INCREF(value);
        *p = value;
        Py_XDECREF(old);
    }
    static inline PyObject *kc_slot_get(PyObject *obj, Py_ssize_t offset) {
        return *(PyObject **)((char *)obj + offset);  /* borrowed; NULL when unset */
    }
    /* An instance of a bytes subclass holding `raw` (a bytes object), without running the
     * subclass's Python-level __new__: what `bytes.__new__(cls, raw)` does. */
    static inline PyObject *kc_bytes_subtype(PyObject *cls, PyObject *raw) {
        PyObject *args = PyTuple_Pack(1, raw);
        if (args == NULL) return NULL;
        PyObject *out = PyBytes_Type.tp_new((PyTypeObject *)cls, args, NULL);
        Py_DECREF(args);
        return out;
    }
    /* A new instance of a plain class (object's tp_new): allocation without __new__ or
     * __init__; the decoder then sets every slot. */
    static inline PyObject *kc_new_instance(PyObject *cls) {
        PyTypeObject *t = (PyTypeObject *)cls;
        if (t->tp_new == PyBaseObject_Type.tp_new) return t->tp_alloc(t, 0);
        return PyObject_CallMethod(cls, "__new__", "O", cls);
    }
    """
    Py_ssize_t kc_slot_offset(object descr, object obj)
    void kc_slot_set(object obj, Py_ssize_t offset, object value)
    PyObject *kc_slot_get(object obj, Py_ssize_t offset)
    object kc_new_instance(object cls)
    object kc_bytes_subtype(object cls, object raw)
    int PyGC_Disable()
    int PyGC_Enable()
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    object PyObject_GetAttr(object o, object name)
    int PyObject_SetAttr(object o, object name, object v) except -1
    bint PyBool_Check(object o)
    bint PyLong_Check(object o)
    bint PyFloat_Check(object o)
    bint PyUnicode_Check(object o)
    bint PyList_CheckExact(object o)

cdef enum:
    BOOL = 0
    INT8 = 1
    INT16 = 2
    INT32 = 3
    INT64 = 4
    UINT16 = 5
    UINT32 = 6
    FLOAT64 = 7
    UUID = 8
    STRING = 9
    BYTES = 10
    RECORDS = 11
    STRUCT = 12
    ARRAY = 13
    ARRAY_STRUCT = 14

cdef enum:
    NULLABLE = 1
    COMPACT = 2
    ABSENT = 4
    IGNORABLE = 8
    FRESH = 16

from kraftcore.layout import METADATA_FRAME_FIELD_MAX, METADATA_FRAME_VERSION
from kraftcore.limits import PROTOCOL_EMPTY_ELEMENTS_MAX
cdef Py_ssize_t EMPTY_MAX = PROTOCOL_EMPTY_ELEMENTS_MAX


def _check_program_form():
    """The kinds and flags compiled in above must be the program form's
    (`kraftcore.kernel_api`): a difference would make every program misread."""
    compiled = {"bool": BOOL, "int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64,
                "uint16": UINT16, "uint32": UINT32, "float64": FLOAT64, "uuid": UUID,
                "string": STRING, "bytes": BYTES, "records": RECORDS, "struct": STRUCT,
                "array": ARRAY, "array_struct": ARRAY_STRUCT}
    flags = {"nullable": NULLABLE, "compact": COMPACT, "absent": ABSENT,
             "ignorable": IGNORABLE, "fresh": FRESH}
    if compiled != kernel_api.KINDS or flags != kernel_api.FLAGS:
        raise ImportError("kraftcore._c.protocol was compiled with other field kinds or flags "
                          "than kraftcore.kernel_api defines; rebuild the extension")


_check_program_form()

cdef inline int _min_bytes(int kind):
    if kind == INT16 or kind == UINT16:
        return 2
    if kind == INT32 or kind == UINT32:
        return 4
    if kind == INT64 or kind == FLOAT64:
        return 8
    if kind == UUID:
        return 16
    return 1


# ------------------------------------------------------------------------------ decode

@cython.final
cdef class _In:
    """The input of a decode: the bytes (exported when not a `bytes` object), and a
    memoryview made on first need for RECORDS slices."""
    cdef Py_buffer view
    cdef bint held
    cdef const uint8_t *data
    cdef Py_ssize_t size
    cdef object owner
    cdef object mv

    cdef int open(self, object buffer) except -1:
        self.close()
        self.mv = None
        self.owner = buffer
        if PyBytes_CheckExact(buffer):
            self.data = <const uint8_t *>PyBytes_AS_STRING(buffer)
            self.size = PyBytes_GET_SIZE(buffer)
        else:
            PyObject_GetBuffer(buffer, &self.view, PyBUF_SIMPLE)
            self.held = True
            self.data = <const uint8_t *>self.view.buf
            self.size = self.view.len
        return 0

    cdef void close(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False

    def __dealloc__(self):
        self.close()

    cdef object records(self, Py_ssize_t pos, Py_ssize_t n):
        if self.mv is None:
            self.mv = memoryview(self.owner).cast("B")
        return self.mv[pos:pos + n]


cdef inline Py_ssize_t _take(Py_ssize_t *pp, Py_ssize_t end, Py_ssize_t n, str what) except -1:
    cdef Py_ssize_t pos = pp[0]
    if n > end - pos:
        raise ProtocolError(f"truncated {what}: needs {n} bytes, {end - pos} left", pos)
    pp[0] = pos + n
    return pos


cdef inline uint32_t _uvarint(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t end, str what) except? 0xFFFFFFFF:
    cdef uint32_t value
    cdef int n = kc_read_uvarint32(d + pp[0], d + end, &value)
    if n == 0:
        raise ProtocolError(f"truncated varint ({what})", pp[0])
    if n < 0:
        raise ProtocolError(f"bad varint ({what}): more than 32 bits", pp[0])
    pp[0] += n
    return value


cdef inline int64_t _length(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t end, int compact,
                            bint wide, str what) except? -0x7FFFFFFFFFFF:
    if compact:
        return <int64_t>_uvarint(d, pp, end, what) - 1
    if wide:
        return <int32_t>kc_get_be32(d + _take(pp, end, 4, what))
    return <int16_t>kc_get_be16(d + _take(pp, end, 2, what))


cdef object _read_scalar(_In c, Py_ssize_t *pp, Py_ssize_t end, int kind, int flags, str label):
    cdef const uint8_t *d = c.data
    cdef Py_ssize_t pos, start
    cdef int64_t n
    cdef uint64_t bits
    if kind == INT32:
        return <int32_t>kc_get_be32(d + _take(pp, end, 4, label))
    if kind == INT64:
        return <int64_t>kc_get_be64(d + _take(pp, end, 8, label))
    if kind == INT16:
        return <int16_t>kc_get_be16(d + _take(pp, end, 2, label))
    if kind == BOOL:
        return d[_take(pp, end, 1, label)] != 0
    if kind == INT8:
        return <int8_t>d[_take(pp, end, 1, label)]
    if kind == UINT16:
        return kc_get_be16(d + _take(pp, end, 2, label))
    if kind == UINT32:
        return kc_get_be32(d + _take(pp, end, 4, label))
    if kind == FLOAT64:
        bits = kc_get_be64(d + _take(pp, end, 8, label))
        return (<double *>&bits)[0]
    if kind == UUID:
        return _uuid(d + _take(pp, end, 16, label))
    start = pp[0]
    n = _length(d, pp, end, flags & COMPACT, kind != STRING, label)
    if n < -1:
        raise ProtocolError(f"{label} has a negative length {n}", start)
    if n == -1:
        return None
    pos = _take(pp, end, <Py_ssize_t>n, label)
    if kind == STRING:
        try:
            return PyUnicode_DecodeUTF8(<const char *>d + pos, <Py_ssize_t>n, NULL)
        except UnicodeDecodeError:
            raise ProtocolError(f"{label} is not valid UTF-8", pos) from None
    if kind == BYTES:
        return PyBytes_FromStringAndSize(<const char *>d + pos, <Py_ssize_t>n)
    return c.records(pos, <Py_ssize_t>n)


cdef object _read_field(_In c, Py_ssize_t *pp, Py_ssize_t end, tuple op):
    cdef int kind = op[1]
    cdef int flags = op[2]
    cdef str label = op[6]
    cdef Py_ssize_t start = pp[0]
    cdef int64_t n, i, each
    cdef int sub_kind
    cdef list items
    cdef object value
    if kind == STRUCT:
        return _read_struct(c, pp, end, <tuple>op[4])
    if kind == ARRAY or kind == ARRAY_STRUCT:
        n = _length(c.data, pp, end, flags & COMPACT, True, label)
        if n == -1:
            value = None
        else:
            if kind == ARRAY_STRUCT:
                each = <int64_t>(<tuple>op[4])[6]
            else:
                sub_kind = op[4]
                each = _min_bytes(sub_kind)
            if n < -1 or (each and n * each > end - pp[0]) or (not each and n > EMPTY_MAX):
                raise ProtocolError(
                    f"{label} claims {n} elements, impossible in {end - pp[0]} bytes", start)
            items = [None] * <Py_ssize_t>n
            if kind == ARRAY:
                for i in range(n):
                    value = _read_scalar(c, pp, end, sub_kind, flags, label)
                    if value is None:
                        raise ProtocolError(f"{label} holds a null element", start)
                    items[i] = value
            else:
                for i in range(n):
                    items[i] = _read_struct(c, pp, end, <tuple>op[4])
            return items
    else:
        value = _read_scalar(c, pp, end, kind, flags, label)
    if value is None and not flags & NULLABLE:
        raise ProtocolError(f"{label} is null but the field is not nullable", start)
    return value


cdef inline object _default(tuple op):
    cdef int flags = op[2]
    cdef int kind
    if flags & FRESH:
        kind = op[1]
        if kind >= ARRAY:
            return []
        return op[3]()
    return op[3]


cdef inline bint _is_default(tuple op, object value) except -1:
    cdef int flags = op[2]
    cdef int kind = op[1]
    if flags & FRESH and kind >= ARRAY:
        return isinstance(value, list) and len(value) == 0
    return value == _default(op)


cdef inline int _set(object obj, tuple op, object value) except -1:
    cdef Py_ssize_t offset = kc_slot_offset(op[7], obj)
    if offset < 0:
        PyObject_SetAttr(obj, op[0], value)
    else:
        kc_slot_set(obj, offset, value)
    return 0


cdef inline object _get(object obj, tuple op):
    cdef Py_ssize_t offset = kc_slot_offset(op[7], obj)
    cdef PyObject *value
    if offset >= 0:
        value = kc_slot_get(obj, offset)
        if value != NULL:
            return <object>value
    return PyObject_GetAttr(obj, op[0])


# Decoded uuids, shared: metadata logs repeat the same topic and directory ids many times.
# A direct-mapped cache keyed by the 16 raw bytes answers a repeat without allocating.
cdef enum:
    UUID_SLOTS = 4096
cdef uint8_t _uuid_raw[UUID_SLOTS][16]
cdef PyObject *_uuid_obj[UUID_SLOTS]


cdef object _uuid(const uint8_t *p):
    cdef uint64_t a, b
    memcpy(&a, p, 8)
    memcpy(&b, p + 8, 8)
    cdef Py_ssize_t slot = <Py_ssize_t>(((a ^ (b * <uint64_t>0x9E3779B97F4A7C15)) *
                                         <uint64_t>0xBF58476D1CE4E5B9) >> 52)
    cdef PyObject *found = _uuid_obj[slot]
    if found != NULL and memcmp(_uuid_raw[slot], p, 16) == 0:
        return <object>found
    value = kc_bytes_subtype(Uuid, PyBytes_FromStringAndSize(<const char *>p, 16))
    # the allocation may have run other code (a collection, another thread): re-read
    found = _uuid_obj[slot]
    Py_XDECREF(found)
    Py_INCREF(value)
    _uuid_obj[slot] = <PyObject *>value
    memcpy(_uuid_raw[slot], p, 16)
    return value


cdef object _read_struct(_In c, Py_ssize_t *pp, Py_ssize_t end, tuple prog):
    cdef tuple ops = prog[1]
    cdef tuple op
    cdef int flags
    cdef object obj = kc_new_instance(prog[0])
    cdef object unknown = None
    cdef uint32_t count, j, tag, size
    cdef Py_ssize_t tag_pos, start, inner
    cdef dict tagmap
    for op in ops:
        flags = op[2]
        if flags & ABSENT:
            _set(obj, op, _default(op))
        else:
            _set(obj, op, _read_field(c, pp, end, op))
    if prog[4]:
        for op in <tuple>prog[2]:
            _set(obj, op, _default(op))
        tagmap = prog[3]
        count = _uvarint(c.data, pp, end, "tagged field count")
        for j in range(count):
            tag_pos = pp[0]
            tag = _uvarint(c.data, pp, end, "tag")
            size = _uvarint(c.data, pp, end, "tagged field size")
            start = _take(pp, end, size, f"tagged field {tag}")
            found = tagmap.get(tag) if tagmap else None
            if found is None:
                if unknown is None:
                    unknown = []
                unknown.append((tag, PyBytes_FromStringAndSize(<const char *>c.data + start, size)))
                continue
            op = found
            inner = start
            _set(obj, op, _read_field(c, &inner, start + size, op))
            if inner != start + size:
                raise ProtocolError(
                    f"tagged field {op[6]} (tag {tag}) has {size} bytes but its value "
                    f"takes {inner - start}", tag_pos)
    obj._unknown_tags = unknown
    return obj


def decode_struct(tuple prog, buffer, Py_ssize_t pos=0, end=None):
    """Decode one struct of program `prog` from `buffer[pos:end]`. Returns (obj, next_pos)."""
    cdef _In c = _In()
    c.open(buffer)
    cdef Py_ssize_t stop = c.size if end is None else end
    if not (0 <= pos <= stop <= c.size):
        raise ValueError(f"bad range [{pos}, {stop}) for a buffer of {c.size} bytes")
    obj = _read_struct(c, &pos, stop, prog)
    return obj, pos


def decode_message(tuple prog, buffer, Py_ssize_t pos=0):
    """Decode a whole message body: the struct must end exactly at the end of `buffer`."""
    cdef _In c = _In()
    c.open(buffer)
    cdef Py_ssize_t size = c.size
    if not 0 <= pos <= size:
        raise ValueError(f"bad range [{pos}, {size}) for a buffer of {size} bytes")
    obj = _read_struct(c, &pos, size, prog)
    if pos != size:
        raise ProtocolError(f"{size - pos} unexpected bytes after {prog[5]}", pos)
    return obj


cdef tuple _program_for(list table, uint32_t api_key, uint32_t version, Py_ssize_t pos):
    progs = table[api_key] if api_key < <uint32_t>len(table) else None
    if progs is None:
        raise ProtocolError(f"unknown metadata record type {api_key}", pos)
    prog = progs[version] if version < <uint32_t>len(progs) else None
    if prog is None:
        raise ProtocolError(
            f"unsupported version {version} of metadata record type {api_key} "
            f"({_name_of(progs)})", pos)
    return prog


cdef tuple _decode_value(_In c, object value, list table):
    c.open(value)
    cdef Py_ssize_t pos = 0, end = c.size
    cdef uint32_t frame, api_key, version
    frame = _uvarint(c.data, &pos, end, "frame version")
    if frame != METADATA_FRAME_VERSION:
        raise ProtocolError(
            f"metadata record frame version {frame}, expected {METADATA_FRAME_VERSION}", 0)
    api_key = _uvarint(c.data, &pos, end, "record type")
    version = _uvarint(c.data, &pos, end, "record version")
    if api_key > METADATA_FRAME_FIELD_MAX or version > METADATA_FRAME_FIELD_MAX:
        raise ProtocolError(f"record type {api_key} or version {version} above 32767", 0)
    prog = _program_for(table, api_key, version, 0)
    obj = _read_struct(c, &pos, end, prog)
    if pos != end:
        raise ProtocolError(f"{end - pos} unexpected bytes after {prog[5]}", pos)
    return obj, version


def _name_of(progs):
    """The record name of a version table (the name of any version it has)."""
    for prog in progs:
        if prog is not None:
            return prog[5]
    return "?"


def decode_metadata_values(values, list table):
    """Decode framed metadata record values (kafka-facts §5.1): one per element of `values`.
    Returns a list of `(record, version)`; see the pure-Python twin for the rules."""
    cdef list out = []
    cdef Py_ssize_t i = 0
    cdef _In c = _In()
    # The records made here form no reference cycles: the cyclic collector is paused while
    # they are built, so it walks them once afterwards instead of on every 700 allocations.
    cdef int collecting = PyGC_Disable()
    try:
        for value in values:
            if value is None:
                raise ProtocolError("null value", 0)
            out.append(_decode_value(c, value, table))
            i += 1
    except ProtocolError as exc:
        raise ProtocolError(f"metadata record {i}: {exc.reason}", exc.position) from None
    finally:
        if collecting:
            PyGC_Enable()
    return out


# ------------------------------------------------------------------------------ encode

@cython.final
cdef class _Out:
    """A growing output buffer. With `parts` (`encode_struct_parts`), a file region in a
    records field cuts it: the bytes so far and the region go to `parts`."""
    cdef uint8_t *buf
    cdef Py_ssize_t size
    cdef Py_ssize_t cap
    cdef list parts
    cdef int in_tag  # > 0 while a tagged field is written (its size is patched after)

    def __dealloc__(self):
        free(self.buf)

    cdef uint8_t *room(self, Py_ssize_t n) except NULL:
        cdef Py_ssize_t want = self.size + n
        cdef uint8_t *grown
        if want > self.cap:
            want = max(want, self.cap * 2, 256)
            grown = <uint8_t *>realloc(self.buf, want)
            if grown == NULL:
                raise MemoryError()
            self.buf = grown
            self.cap = want
        return self.buf + self.size

    cdef inline int put(self, const void *p, Py_ssize_t n) except -1:
        memcpy(self.room(n), p, n)
        self.size += n
        return 0

    cdef inline int byte(self, uint8_t b) except -1:
        self.room(1)[0] = b
        self.size += 1
        return 0

    cdef inline int uvarint(self, uint64_t v) except -1:
        self.size += kc_write_uvarint64(self.room(10), v)
        return 0

    cdef inline int length(self, int64_t n, int compact, bint wide) except -1:
        if compact:
            return self.uvarint(<uint64_t>(n + 1))
        if wide:
            kc_put_be32(self.room(4), <uint32_t><int32_t>n)
            self.size += 4
        else:
            kc_put_be16(self.room(2), <uint16_t><int16_t>n)
            self.size += 2
        return 0

    cdef bytes take(self):
        return PyBytes_FromStringAndSize(<const char *>self.buf, self.size)

    cdef int cut(self, object region, int compact) except -1:
        self.length(region.length, compact, True)
        self.parts.append(self.take())
        self.parts.append(region)
        self.size = 0
        return 0


cdef int64_t _as_int(object value, int kind, str label) except? -1:
    cdef int64_t v, lo, hi
    if PyBool_Check(value) or not PyLong_Check(value):
        raise EncodeError(f"{label} must be an int, not {type(value).__name__}")
    if kind == INT8:
        lo, hi = -(1 << 7), (1 << 7) - 1
    elif kind == INT16:
        lo, hi = -(1 << 15), (1 << 15) - 1
    elif kind == INT32:
        lo, hi = -(1 << 31), (1 << 31) - 1
    elif kind == UINT16:
        lo, hi = 0, (1 << 16) - 1
    elif kind == UINT32:
        lo, hi = 0, (1 << 32) - 1
    else:
        lo, hi = -0x7FFFFFFFFFFFFFFF - 1, 0x7FFFFFFFFFFFFFFF
    try:
        v = value
    except OverflowError:
        raise EncodeError(f"{label} = {value} is out of range [{lo}, {hi}]") from None
    if v < lo or v > hi:
        raise EncodeError(f"{label} = {value} is out of range [{lo}, {hi}]")
    return v


cdef int _write_scalar(_Out out, int kind, int flags, object value, str label) except -1:
    cdef int64_t v
    cdef double f
    cdef Py_ssize_t n
    cdef const char *s
    cdef Py_buffer view
    if kind == BOOL:
        if not PyLong_Check(value):
            raise EncodeError(f"{label} must be a bool, not {type(value).__name__}")
        return out.byte(1 if value else 0)
    if kind <= UINT32:
        v = _as_int(value, kind, label)
        if kind == INT8:
            return out.byte(<uint8_t>v)
        if kind == INT16 or kind == UINT16:
            kc_put_be16(out.room(2), <uint16_t>v)
            out.size += 2
        elif kind == INT32 or kind == UINT32:
            kc_put_be32(out.room(4), <uint32_t>v)
            out.size += 4
        else:
            kc_put_be64(out.room(8), <uint64_t>v)
            out.size += 8
        return 0
    if kind == FLOAT64:
        if PyBool_Check(value) or not (PyLong_Check(value) or PyFloat_Check(value)):
            raise EncodeError(f"{label} must be a float, not {type(value).__name__}")
        try:
            f = value
        except OverflowError:
            raise EncodeError(f"{label} is out of a float64's range") from None
        kc_put_be64(out.room(8), (<uint64_t *>&f)[0])
        out.size += 8
        return 0
    if kind == UUID:
        if not isinstance(value, (bytes, bytearray)) or len(value) != 16:
            raise EncodeError(f"{label} must be a 16-byte Uuid, not {value!r}")
        PyObject_GetBuffer(value, &view, PyBUF_SIMPLE)
        try:
            out.put(view.buf, 16)
        finally:
            PyBuffer_Release(&view)
        return 0
    if value is None:
        if not flags & NULLABLE:
            raise EncodeError(f"{label} is not nullable")
        return out.length(-1, flags & COMPACT, kind != STRING)
    if kind == STRING:
        if not PyUnicode_Check(value):
            raise EncodeError(f"{label} must be a str, not {type(value).__name__}")
        try:
            s = PyUnicode_AsUTF8AndSize(value, &n)
        except UnicodeEncodeError:
            raise EncodeError(f"{label} cannot be encoded as UTF-8") from None
        if not flags & COMPACT and n > 0x7FFF:
            raise EncodeError(f"{label} is {n} bytes; a classic string holds 32767")
        out.length(n, flags & COMPACT, False)
        return out.put(s, n)
    if kind == RECORDS and out.parts is not None and not out.in_tag \
            and isinstance(value, FileRegion):
        return out.cut(value, flags & COMPACT)
    try:
        PyObject_GetBuffer(value, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError):
        raise EncodeError(f"{label} must be bytes-like, not {type(value).__name__}") from None
    try:
        if view.len > 0x7FFFFFFE:
            raise EncodeError(f"{label} is too long ({view.len} bytes)")
        out.length(view.len, flags & COMPACT, True)
        out.put(view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef int _write_field(_Out out, tuple op, object value) except -1:
    cdef int kind = op[1]
    cdef int flags = op[2]
    cdef str label = op[6]
    cdef tuple sub
    cdef type cls
    cdef int sub_kind
    if kind == STRUCT:
        sub = op[4]
        cls = sub[0]
        if not isinstance(value, cls):
            raise EncodeError(f"{label} must be a {cls.__name__}, not {type(value).__name__}")
        return _write_struct(out, sub, value)
    if kind == ARRAY or kind == ARRAY_STRUCT:
        if value is None:
            if not flags & NULLABLE:
                raise EncodeError(f"{label} is not nullable")
            return out.length(-1, flags & COMPACT, True)
        if isinstance(value, (str, bytes, bytearray, memoryview)) or not hasattr(value, "__len__"):
            raise EncodeError(f"{label} must be a list, not {type(value).__name__}")
        out.length(len(value), flags & COMPACT, True)
        if kind == ARRAY:
            sub_kind = op[4]
            for element in value:
                if element is None:
                    raise EncodeError(f"{label} holds a null element")
                _write_scalar(out, sub_kind, flags & ~NULLABLE, element, label)
        else:
            sub = op[4]
            cls = sub[0]
            for element in value:
                if not isinstance(element, cls):
                    raise EncodeError(
                        f"{label} elements must be {cls.__name__}, not {type(element).__name__}")
                _write_struct(out, sub, element)
        return 0
    return _write_scalar(out, kind, flags, value, label)


cdef int _write_struct(_Out out, tuple prog, object obj) except -1:
    cdef tuple op
    cdef int flags
    for op in <tuple>prog[1]:
        value = _get(obj, op)
        flags = op[2]
        if flags & ABSENT:
            if not flags & IGNORABLE and not _is_default(op, value):
                raise EncodeError(
                    f"{op[6]} = {value!r} cannot be written at this version of {prog[5]}")
            continue
        _write_field(out, op, value)
    if not prog[4]:
        return 0
    unknown = obj._unknown_tags
    if unknown:
        return _write_tags_merged(out, prog, obj, unknown)
    # Tagged fields go straight into `out`: each value is written after a one-byte size
    # slot, which is widened in place in the rare case the value takes 128 bytes or more.
    cdef Py_ssize_t count = 0, mark, start, size
    cdef int width
    for op in <tuple>prog[2]:
        if not _is_default(op, _get(obj, op)):
            count += 1
    out.uvarint(count)
    if not count:
        return 0
    for op in <tuple>prog[2]:
        value = _get(obj, op)
        if _is_default(op, value):
            continue
        out.uvarint(<int>op[5])
        mark = out.size
        out.byte(0)
        start = out.size
        out.in_tag += 1
        _write_field(out, op, value)
        out.in_tag -= 1
        size = out.size - start
        if size < 0x80:
            out.buf[mark] = <uint8_t>size
        else:
            width = kc_size_uvarint64(size)
            out.room(width - 1)
            memmove(out.buf + mark + width, out.buf + start, size)
            kc_write_uvarint64(out.buf + mark, size)
            out.size += width - 1
    return 0


cdef int _write_tags_merged(_Out out, tuple prog, object obj, object unknown) except -1:
    """The tag section when unknown tags are kept: known and unknown fields in tag order."""
    cdef list fields = []
    cdef tuple op
    cdef _Out data
    for op in <tuple>prog[2]:
        value = _get(obj, op)
        if not _is_default(op, value):
            data = _Out()
            _write_field(data, op, value)
            fields.append((op[5], data.take()))
    known = {item[0] for item in fields}
    tagmap = prog[3]
    fields.extend((tag, raw) for tag, raw in checked_unknown_tags(unknown, prog[5])
                  if tag not in tagmap and tag not in known)
    fields.sort(key=_first)
    out.uvarint(len(fields))
    cdef bytes data_bytes
    for tag, raw in fields:
        data_bytes = raw
        out.uvarint(tag)
        out.uvarint(len(data_bytes))
        out.put(<const char *>data_bytes, len(data_bytes))
    return 0


def _first(item):
    return item[0]


def encode_struct(tuple prog, obj):
    """Encode `obj` (an instance of `prog`'s class) with program `prog`. Returns bytes."""
    if not isinstance(obj, prog[0]):
        raise EncodeError(f"{prog[5]} cannot encode a {type(obj).__name__}")
    cdef _Out out = _Out()
    _write_struct(out, prog, obj)
    return out.take()


def encode_struct_parts(tuple prog, obj):
    """`kraftcore._py.protocol.encode_struct_parts`: a list of parts, bytes and file regions
    alternating, beginning and ending with bytes."""
    if not isinstance(obj, prog[0]):
        raise EncodeError(f"{prog[5]} cannot encode a {type(obj).__name__}")
    cdef _Out out = _Out()
    out.parts = []
    _write_struct(out, prog, obj)
    out.parts.append(out.take())
    return out.parts


def encode_metadata_values(records, versions, list table):
    """Frame and encode metadata records: `records[i]` at `versions[i]` (kafka-facts §5.1).
    Returns a list of bytes, one per record."""
    if len(versions) != len(records):
        raise ValueError(f"{len(versions)} versions for {len(records)} records")
    cdef list out = []
    cdef _Out data = _Out()
    cdef tuple prog
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
        data.size = 0
        data.uvarint(METADATA_FRAME_VERSION)
        data.uvarint(api_key)
        data.uvarint(version)
        _write_struct(data, prog, record)
        out.append(data.take())
    return out
