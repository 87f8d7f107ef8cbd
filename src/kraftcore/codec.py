"""The one switch between the native kernels (`kraftcore._c`) and the pure-Python reference
(`kraftcore._py`). Everything else imports kernels from here.

* `KRAFTCORE_PURE=1` selects the pure-Python kernels.
* `KRAFTCORE_REQUIRE_EXT=1` makes a missing or broken extension an ImportError instead of a
  silent fall-back.

`IMPLEMENTATION` is "c" or "py". `implementations()` returns every implementation that
loads, for tests and benchmarks that compare them.
"""

import os

from kraftcore.errors import CorruptRecordError, UnsupportedCompressionError  # noqa: F401


def _flag(name):
    return os.environ.get(name, "") not in ("", "0")


PURE_REQUESTED = _flag("KRAFTCORE_PURE")
EXTENSION_REQUIRED = _flag("KRAFTCORE_REQUIRE_EXT")


def _load_c():
    from kraftcore._c import appends, crc32c, protocol, records, segment, varint

    return crc32c, varint, records, segment, protocol, appends


def _load_py():
    from kraftcore._py import appends, crc32c, protocol, records, segment, varint

    return crc32c, varint, records, segment, protocol, appends


EXTENSION_ERROR = None
if PURE_REQUESTED:
    _crc, _varint, _records, _segment, _protocol, _appends = _load_py()
    IMPLEMENTATION = "py"
else:
    try:
        _crc, _varint, _records, _segment, _protocol, _appends = _load_c()
        IMPLEMENTATION = "c"
    except ImportError as exc:
        if EXTENSION_REQUIRED:
            raise ImportError(
                "kraftcore's native extension did not load and KRAFTCORE_REQUIRE_EXT is set; "
                "reinstall kraftcore with a C compiler available (or unset the variable to "
                f"run on the pure-Python kernels): {exc}"
            ) from exc
        EXTENSION_ERROR = exc
        _crc, _varint, _records, _segment, _protocol, _appends = _load_py()
        IMPLEMENTATION = "py"

crc32c = _crc.crc32c
CRC32C_HARDWARE = _crc.HARDWARE

encode_uvarint = _varint.encode_uvarint
decode_uvarint = _varint.decode_uvarint
encode_uvarlong = _varint.encode_uvarlong
decode_uvarlong = _varint.decode_uvarlong
encode_varint = _varint.encode_varint
decode_varint = _varint.decode_varint
encode_varlong = _varint.encode_varlong
decode_varlong = _varint.decode_varlong

encode_batch = _records.encode_batch
decode_batches = _records.decode_batches
validate_batches = _records.validate_batches
RecordBatch = _records.RecordBatch
Record = _records.Record

scan_batches = _segment.scan_batches
SegmentState = _segment.SegmentState
locate_batches = _segment.locate_batches
index_search = _segment.index_search
check_offset_index = _segment.check_offset_index
check_time_index = _segment.check_time_index

decode_struct = _protocol.decode_struct
decode_message = _protocol.decode_message
encode_struct = _protocol.encode_struct
decode_metadata_values = _protocol.decode_metadata_values
encode_metadata_values = _protocol.encode_metadata_values

AppendGather = _appends.AppendGather
settle_calls = _appends.settle_calls


def implementations():
    """Map of implementation name -> (crc32c, varint, records, segment, protocol, appends)
    modules that load here."""
    found = {"py": _load_py()}
    try:
        found["c"] = _load_c()
    except ImportError:
        pass
    return found
