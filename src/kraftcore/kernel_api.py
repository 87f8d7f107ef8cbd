"""What both implementations of a kernel (`kraftcore._py.*` and `kraftcore._c.*`) hand out
and take besides buffers, defined once so that neither twin imports the other and callers
need neither: the segment scan's result type and sentinel, the argument range check of the
record encoders, and the form of the protocol programs the protocol kernel interprets
(field kinds, field flags; `kraftcore._py.protocol` documents the program form,
`kraftcore.protocol.schema` compiles it). Byte layouts are `kraftcore.layout`'s, limits
`kraftcore.limits`'s.

Invariants: the numbers here are part of the kernels' interface; the native kernels check
at load that their compiled constants equal them.
"""

from typing import NamedTuple

from kraftcore.errors import EncodeError

# ------------------------------------------------------------------ segment scan


class ScanResult(NamedTuple):
    """What `scan_batches` found. Offsets are absolute; index entries are packed bytes."""

    valid_bytes: int  # bytes of whole valid batches from the start of the buffer
    batches: int  # number of valid batches
    first_offset: int  # base offset of the first valid batch, -1 when there is none
    next_offset: int  # last offset + 1 of the last valid batch, -1 when there is none
    offset_index: bytes  # new .index entries
    time_index: bytes  # new .timeindex entries
    bytes_since_index: int  # carry into the next scan of the same segment
    max_timestamp: int  # segment max timestamp so far
    offset_of_max_timestamp: int  # last offset of the batch holding it
    last_index_timestamp: int  # timestamp of the last time index entry
    epochs: list  # [(leader epoch, start offset)] for epochs above `latest_epoch`
    error: object  # the CorruptRecordError or InvalidAppendError that stopped the scan


# `stamp_epoch` value meaning "leave each batch's partition leader epoch as it is".
NO_STAMP = -2

# ------------------------------------------------------------------ record encoders


def check_int_range(name, value, bounds):
    """`value` must be an int (not a bool) within `bounds` (low, high), inclusive:
    TypeError or ValueError naming the argument otherwise."""
    low, high = bounds
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} out of range [{low}, {high}]: {value}")


# ------------------------------------------------------------------ protocol programs
# Field kinds and flags of an op (see `kraftcore._py.protocol`).
BOOL, INT8, INT16, INT32, INT64, UINT16, UINT32, FLOAT64, UUID, STRING, BYTES, RECORDS = range(12)
STRUCT, ARRAY, ARRAY_STRUCT = 12, 13, 14
KINDS = {
    "bool": BOOL, "int8": INT8, "int16": INT16, "int32": INT32, "int64": INT64,
    "uint16": UINT16, "uint32": UINT32, "float64": FLOAT64, "uuid": UUID, "string": STRING,
    "bytes": BYTES, "records": RECORDS, "struct": STRUCT, "array": ARRAY,
    "array_struct": ARRAY_STRUCT,
}

NULLABLE, COMPACT, ABSENT, IGNORABLE, FRESH = 1, 2, 4, 8, 16
FLAGS = {"nullable": NULLABLE, "compact": COMPACT, "absent": ABSENT, "ignorable": IGNORABLE,
         "fresh": FRESH}



def checked_unknown_tags(unknown, name):
    """Kept unknown tagged fields as (tag, bytes) pairs; anything else is an EncodeError."""
    checked = []
    for item in unknown:
        try:
            tag, data = item
        except (TypeError, ValueError):
            raise EncodeError(f"{name}._unknown_tags holds {item!r}, not a (tag, bytes) pair") from None
        if not isinstance(tag, int) or isinstance(tag, bool) or not 0 <= tag <= 0x7FFFFFFF:
            raise EncodeError(f"{name}._unknown_tags has a bad tag {tag!r}")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise EncodeError(f"{name}._unknown_tags[{tag}] must hold bytes, not "
                              f"{type(data).__name__}")
        checked.append((tag, bytes(data)))
    return checked
