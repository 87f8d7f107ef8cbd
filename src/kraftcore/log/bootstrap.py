"""The `bootstrap.checkpoint` file of a formatted directory (kafka-facts §4.5): the records
the first active controller writes into an empty metadata log.

It sits at the top of a directory that `kraftcore format` formats (beside `meta.properties`,
not inside `__cluster_metadata-0`), as Kafka's `BootstrapDirectory` puts it; a node reads
the one in its `metadata.log.dir`. This module only moves its bytes: it is written whole
through `<file>.tmp`, fsync and rename (`fileio.write_atomic`), so a crash leaves the old
file, the new one or none; `kraftcore.metadata.bootstrap` makes and reads the bytes (a
snapshot's layout).
"""

import os

from kraftcore.errors import StorageError
from kraftcore.layout import BOOTSTRAP_CHECKPOINT_FILE
from kraftcore.log import fileio

__all__ = ["bootstrap_path", "write_bootstrap_file", "read_bootstrap_file"]


def bootstrap_path(directory):
    """Where the bootstrap file of `directory` lives."""
    return os.path.join(directory, BOOTSTRAP_CHECKPOINT_FILE)


def write_bootstrap_file(directory, data):
    """Replace the bootstrap file of `directory` (which must exist) with `data`, atomically.
    Raises OSError when it cannot be written."""
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise ValueError("a bootstrap file holds the bytes of a snapshot, not nothing")
    fileio.write_atomic(bootstrap_path(directory), bytes(data))


def read_bootstrap_file(directory):
    """The bytes of the bootstrap file of `directory`, or None when it has none. Raises
    StorageError when the file exists but cannot be read."""
    path = bootstrap_path(directory)
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror or exc}") from None
