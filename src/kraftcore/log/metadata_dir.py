"""Reading a metadata log directory without opening it: the files of `__cluster_metadata-0`
(or of a log directory holding one) that a tool loads an image from, as bytes and batches.
This module is the one that opens them for `kraftcore.metadata.directory` (the metadata
shell's loader), which assembles the image from what it returns and reads no file itself.

* `find_metadata_dir`: the directory holding the metadata log's files.
* `read_snapshot_file`: one `.checkpoint` file's bytes, and the id its name gives.
* `read_metadata_dir`: the directory's newest snapshot (its bytes, read whole), where the
  log starts, and `MetadataDir.log_items()`: the batches and damages of its segments
  (`kraftcore.log.reader.read_directory`), read lazily, in bounded memory.

Invariants: reading is read-only (nothing is written, locked, deleted or recovered, so the
directory of a running node can be read; `.part` and `.deleted` snapshot files are not
snapshots and are ignored). Every failure to find or read a file is a `MetadataLoadError`:
one line naming the file and what to give instead.
"""

import os
from typing import NamedTuple

from kraftcore.errors import MetadataLoadError
from kraftcore.layout import (BOOTSTRAP_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT,
                              LOG_SUFFIX, METADATA_PARTITION_DIR, SNAPSHOT_SUFFIX,
                              parse_segment_name)
from kraftcore.log import checkpoint, reader
from kraftcore.log.snapshots import parse_file_name

__all__ = ["SnapshotFile", "MetadataDir", "find_metadata_dir", "read_snapshot_file",
           "read_metadata_dir"]


class SnapshotFile(NamedTuple):
    """A snapshot file read whole: its path (as given, or joined to its directory), its
    absolute path, the id its name gives (`<end offset>-<epoch>.checkpoint`; (0, 0) for
    another name, such as `bootstrap.checkpoint` or a renamed copy) and its bytes."""

    path: str
    source: str
    snapshot_id: tuple
    data: bytes


class MetadataDir(NamedTuple):
    """What `read_metadata_dir` found in a metadata log directory."""

    source: str  # the absolute path given
    directory: str  # the directory holding the files (the path, or its __cluster_metadata-0)
    snapshot: SnapshotFile  # the newest snapshot, or None
    segments: list  # the base offsets of its `.log` segments, in order
    log_start: int  # the first segment's base, or the log start offset checkpoint's if higher
    skipped: list  # one line per file that looks like a snapshot but is not one

    def log_items(self, *, start_offset=None, verify_records=True):
        """The `LogBatch`es and `Damage`s of the segments (`reader.read_directory`), read
        as they are taken; a file that cannot be read raises `MetadataLoadError`."""
        try:
            yield from reader.read_directory(self.directory, start_offset=start_offset,
                                             verify_records=verify_records)
        except OSError as exc:
            raise MetadataLoadError(f"cannot read {exc.filename or self.directory}: "
                                    f"{_describe(exc)}") from None


def _describe(exc):
    return exc.strerror or str(exc)


def _is_segment(name):
    return parse_segment_name(name, (LOG_SUFFIX,)) is not None


def _read_whole(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise MetadataLoadError(f"cannot read {path}: {_describe(exc)}") from None


def read_snapshot_file(path):
    """The `SnapshotFile` at `path`."""
    if os.path.isdir(path):
        raise MetadataLoadError(f"{path} is a directory; use --dir DIR for a metadata log "
                                "directory")
    data = _read_whole(path)
    try:
        snapshot_id = tuple(parse_file_name(os.path.basename(path)))
    except ValueError:
        snapshot_id = (0, 0)
    return SnapshotFile(path, os.path.abspath(path), snapshot_id, data)


def find_metadata_dir(path):
    """(directory, its names): the directory holding the metadata log's files, `path`
    itself or its `__cluster_metadata-0`."""
    if not os.path.exists(path):
        raise MetadataLoadError(f"cannot read {path}: No such file or directory")
    if not os.path.isdir(path):
        raise MetadataLoadError(f"{path} is not a directory; use --snapshot FILE for one "
                                ".checkpoint file")
    for candidate in (path, os.path.join(path, METADATA_PARTITION_DIR)):
        try:
            names = os.listdir(candidate)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise MetadataLoadError(f"cannot read {candidate}: {_describe(exc)}") from None
        if any(_is_segment(n) or (n.endswith(SNAPSHOT_SUFFIX)
                                  and n != BOOTSTRAP_CHECKPOINT_FILE) for n in names):
            return candidate, names
        if candidate != path:  # an empty __cluster_metadata-0
            return candidate, names
    raise MetadataLoadError(
        f"{path} holds no metadata log: expected a {METADATA_PARTITION_DIR} directory, or "
        "the .log segments and <end offset>-<epoch>.checkpoint snapshots of one")


def read_metadata_dir(path):
    """The `MetadataDir` of the metadata log directory `path` (see the module docstring):
    its newest snapshot read whole, its segments listed, none of them read yet. A directory
    with neither a segment nor a snapshot is a `MetadataLoadError`."""
    source = os.path.abspath(path)
    directory, names = find_metadata_dir(path)
    skipped = []
    snapshot_ids = {}
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX) and name != BOOTSTRAP_CHECKPOINT_FILE:
            try:
                snapshot_ids[tuple(parse_file_name(name))] = name
            except ValueError:
                skipped.append(f"{os.path.join(directory, name)} is not named like a "
                               "snapshot (<end offset>-<epoch>.checkpoint): skipped")
    segments = sorted(parse_segment_name(n, (LOG_SUFFIX,))[0] for n in names
                      if _is_segment(n))
    if not snapshot_ids and not segments:
        raise MetadataLoadError(f"{directory} holds no metadata log: no .log segment and no "
                                "<end offset>-<epoch>.checkpoint snapshot")
    snapshot = None
    if snapshot_ids:
        latest = max(snapshot_ids)
        snapshot_path = os.path.join(directory, snapshot_ids[latest])
        snapshot = SnapshotFile(snapshot_path, os.path.abspath(snapshot_path), latest,
                                _read_whole(snapshot_path))
    log_start = segments[0] if segments else 0
    try:
        recorded = checkpoint.read_offset(directory, LOG_START_OFFSET_CHECKPOINT)
    except (checkpoint.CheckpointError, OSError, ValueError):
        recorded = None
    if recorded is not None:
        log_start = max(log_start, recorded)
    return MetadataDir(source, directory, snapshot, segments, log_start, skipped)
