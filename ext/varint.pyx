"""Kafka varints, native twin of `kraftcore._py.varint` (same names, same errors)."""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t

from kc cimport kc_read_uvarint32, kc_read_uvarint64, kc_write_uvarint64

from kraftcore.errors import CorruptRecordError


cdef bytes _encode(uint64_t raw):
    cdef uint8_t out[10]
    cdef int n = kc_write_uvarint64(out, raw)
    return PyBytes_FromStringAndSize(<char *>out, n)


cdef tuple _decode(object buf, Py_ssize_t pos, bint wide, str kind):
    cdef Py_buffer view
    cdef uint32_t v32 = 0
    cdef uint64_t v64 = 0
    cdef int n
    if pos < 0:
        raise ValueError(f"position must be non-negative, got {pos}")
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if pos >= view.len:
            n = 0
        elif wide:
            n = kc_read_uvarint64(<const uint8_t *>view.buf + pos,
                                  <const uint8_t *>view.buf + view.len, &v64)
        else:
            n = kc_read_uvarint32(<const uint8_t *>view.buf + pos,
                                  <const uint8_t *>view.buf + view.len, &v32)
    finally:
        PyBuffer_Release(&view)
    if n == 0:
        raise CorruptRecordError(f"truncated {kind}", pos)
    if n < 0:
        raise CorruptRecordError(f"{kind} longer than {10 if wide else 5} bytes", pos)
    return (v64 if wide else v32), pos + n


def encode_uvarint(value):
    """Encode a 32-bit pattern (0..2**32-1, or a negative int32) as an unsigned varint."""
    if not -0x80000000 <= value <= 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode(<uint32_t>(value & 0xFFFFFFFF))


def decode_uvarint(buf, Py_ssize_t pos=0):
    """Decode an unsigned varint at `pos`; returns (value in 0..2**32-1, next position)."""
    return _decode(buf, pos, False, "unsigned varint")


def encode_uvarlong(value):
    """Encode a 64-bit pattern (0..2**64-1, or a negative int64) as an unsigned varlong."""
    if not -0x8000000000000000 <= value <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"unsigned varlong out of range: {value}")
    return _encode(<uint64_t>(value & 0xFFFFFFFFFFFFFFFF))


def decode_uvarlong(buf, Py_ssize_t pos=0):
    """Decode an unsigned varlong at `pos`; returns (value in 0..2**64-1, next position)."""
    return _decode(buf, pos, True, "unsigned varlong")


def encode_varint(value):
    """Encode an int32 as a zigzag varint."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise ValueError(f"varint out of int32 range: {value}")
    cdef int32_t v = value
    return _encode((<uint32_t>v << 1) ^ <uint32_t>(v >> 31))


def decode_varint(buf, Py_ssize_t pos=0):
    """Decode a zigzag varint at `pos`; returns (int32 value, next position)."""
    raw, nxt = _decode(buf, pos, False, "varint")
    cdef uint32_t r = raw
    return <int32_t>((r >> 1) ^ (0u - (r & 1))), nxt


def encode_varlong(value):
    """Encode an int64 as a zigzag varlong."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong out of int64 range: {value}")
    cdef int64_t v = value
    return _encode((<uint64_t>v << 1) ^ <uint64_t>(v >> 63))


def decode_varlong(buf, Py_ssize_t pos=0):
    """Decode a zigzag varlong at `pos`; returns (int64 value, next position)."""
    raw, nxt = _decode(buf, pos, True, "varlong")
    cdef uint64_t r = raw
    return <int64_t>((r >> 1) ^ (0ull - (r & 1))), nxt
