"""CRC-32C (Castagnoli), native twin of `kraftcore._py.crc32c`.

Hardware instructions are picked at import (see kc_crc32c.h); `HARDWARE` names them.
Large inputs are checksummed with the GIL released.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport uint8_t, uint32_t

from kc cimport kc_crc32c_init, kc_crc32c_update, kc_crc32c_sw, kc_crc32c_hardware_name

from kraftcore import limits

kc_crc32c_init()

HARDWARE = kc_crc32c_hardware_name().decode("ascii")
cdef Py_ssize_t NOGIL_BYTES_MIN = limits.NOGIL_BYTES_MIN


cdef uint32_t _checked_crc(object crc) except? 0xFFFFFFFF:
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError(f"crc must be an unsigned 32-bit value, got {crc}")
    return <uint32_t>crc


cdef object _run(object data, object crc, bint portable):
    # `crc is 0` (CPython's cached small int) skips the range check on the common call.
    cdef uint32_t reg = 0xFFFFFFFF if crc is 0 else _checked_crc(crc) ^ 0xFFFFFFFF
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t n
    if PyBytes_CheckExact(data):
        p = <const uint8_t *>PyBytes_AS_STRING(data)
        n = PyBytes_GET_SIZE(data)
        if n < NOGIL_BYTES_MIN:
            reg = kc_crc32c_sw(reg, p, n) if portable else kc_crc32c_update(reg, p, n)
            return reg ^ 0xFFFFFFFF
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>view.buf
        n = view.len
        if n >= NOGIL_BYTES_MIN:
            with nogil:
                reg = kc_crc32c_sw(reg, p, n) if portable else kc_crc32c_update(reg, p, n)
        else:
            reg = kc_crc32c_sw(reg, p, n) if portable else kc_crc32c_update(reg, p, n)
    finally:
        PyBuffer_Release(&view)
    return reg ^ 0xFFFFFFFF


def crc32c(data, crc=0):
    """Return the CRC-32C of `data` (any contiguous buffer), continuing from `crc`."""
    return _run(data, crc, False)


def _crc32c_portable(data, crc=0):
    """The table-driven path, whatever the CPU offers (for tests and benchmarks)."""
    return _run(data, crc, True)
