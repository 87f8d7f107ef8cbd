"""The one switch between the native kernels (`kraftcore._c`) and the pure-Python reference
(`kraftcore._py`). Everything else imports kernels from here, and nothing else imports `_c`
or `_py`.

* `KRAFTCORE_PURE=1` selects the pure-Python kernels.
* `KRAFTCORE_REQUIRE_EXT=1` makes a missing or broken extension an ImportError instead of a
  silent fall-back.

Both are read once, when this module loads. `IMPLEMENTATION` is "c" or "py"; `KERNELS` is
the `Kernels` that runs. `implementations()` returns every implementation that loads, by
name, for tests and benchmarks that compare them.

A compiled helper outside the kernels (the Raft driver's append bookkeeping,
`kraftcore.runtime.appends`) is chosen by the same switch: `twin(native, pure)` picks one
module of a pair by the rules above, and `twins(native, pure)` returns both, for their tests.
"""

import dataclasses
import importlib
import os
import types

from kraftcore.errors import CorruptRecordError, UnsupportedCompressionError  # noqa: F401

__all__ = ["Kernels", "KERNELS", "IMPLEMENTATION", "implementations", "twin", "twins",
           "TWIN_ERRORS"]


def _flag(name):
    return os.environ.get(name, "") not in ("", "0")


PURE_REQUESTED = _flag("KRAFTCORE_PURE")
EXTENSION_REQUIRED = _flag("KRAFTCORE_REQUIRE_EXT")


@dataclasses.dataclass(frozen=True)
class Kernels:
    """One implementation of the kernels: its `name` ("c" or "py") and its modules, which
    hand out the same names in both."""

    name: str
    crc32c: types.ModuleType
    varint: types.ModuleType
    records: types.ModuleType
    segment: types.ModuleType
    protocol: types.ModuleType


def _load_c():
    from kraftcore._c import crc32c, protocol, records, segment, varint

    return Kernels("c", crc32c, varint, records, segment, protocol)


def _load_py():
    from kraftcore._py import crc32c, protocol, records, segment, varint

    return Kernels("py", crc32c, varint, records, segment, protocol)


def _select(load_native, load_pure, what):
    """(loaded, the native one's ImportError or None), by the switch: `load_pure()` when
    KRAFTCORE_PURE is set or the native one does not load (an ImportError instead under
    KRAFTCORE_REQUIRE_EXT), else `load_native()`."""
    if PURE_REQUESTED:
        return load_pure(), None
    try:
        return load_native(), None
    except ImportError as exc:
        if EXTENSION_REQUIRED:
            raise ImportError(
                f"{what} did not load and KRAFTCORE_REQUIRE_EXT is set; reinstall kraftcore "
                "with a C compiler available (or unset the variable to run on the "
                f"pure-Python kernels): {exc}") from exc
        return load_pure(), exc


KERNELS, EXTENSION_ERROR = _select(_load_c, _load_py, "kraftcore's native extension")
IMPLEMENTATION = KERNELS.name


def implementations():
    """Every implementation of the kernels that loads here: {"py": Kernels, "c": Kernels}
    (without "c" when the extension is not built)."""
    found = {"py": _load_py()}
    try:
        found["c"] = _load_c()
    except ImportError:
        pass
    return found


# Why the compiled module of a twin pair did not load, by its name (as EXTENSION_ERROR is
# for the kernels); empty when every one picked loaded or KRAFTCORE_PURE is set.
TWIN_ERRORS = {}


def twin(native, pure):
    """The module of a twin pair, given by their names, that the switch picks: `native`
    (compiled) unless KRAFTCORE_PURE is set or it does not load (the reason is kept in
    TWIN_ERRORS[native]); then `pure` (or, under KRAFTCORE_REQUIRE_EXT, an ImportError)."""
    module, error = _select(lambda: importlib.import_module(native),
                            lambda: importlib.import_module(pure), f"{native} (compiled)")
    if error is not None:
        TWIN_ERRORS[native] = error
    return module


def twins(native, pure):
    """Both modules of a twin pair that load here: {"py": pure, "c": native} (without "c"
    when it is not built), for the tests that run both."""
    found = {"py": importlib.import_module(pure)}
    try:
        found["c"] = importlib.import_module(native)
    except ImportError:
        pass
    return found


_crc, _varint, _records, _segment, _protocol = (
    KERNELS.crc32c, KERNELS.varint, KERNELS.records, KERNELS.segment, KERNELS.protocol)

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
encode_struct_parts = _protocol.encode_struct_parts
decode_metadata_values = _protocol.decode_metadata_values
encode_metadata_values = _protocol.encode_metadata_values
