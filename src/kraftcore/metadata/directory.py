"""Loading a metadata image, read-only, from one snapshot file or from a metadata log
directory (`__cluster_metadata-0`, or a log directory holding one), as `kraftcore
metadata-shell` shows it (docs/metadata-shell.md).

* `load_snapshot_file`: one `.checkpoint` file; its id (provenance) comes from its name.
* `load_directory`: the directory's newest snapshot, then the log's batches after it,
  replayed through `MetadataLoader` (so an open metadata transaction at the end is left out,
  as a node leaves it out).

Invariants: nothing in the directory is written, locked or recovered (the directory of a
running node may be read). The log is read by `kraftcore.log.reader`, with the damage rules
a node's recovery applies: where the last segment's batches stop (a torn tail, a damaged
batch, an epoch going back) the replay stops and a warning says where; a log older than
the newest snapshot stops there too; a gap in the offsets, or records lost below the log
start without a snapshot, are errors (`MetadataLoadError`, one line naming the file).
"""

import os
from typing import NamedTuple

from kraftcore.errors import CorruptRecordError, KraftcoreError, MetadataLoadError
from kraftcore.layout import (BATCH_HEADER_BYTES, BOOTSTRAP_CHECKPOINT_FILE,
                              LOG_START_OFFSET_CHECKPOINT, LOG_SUFFIX, MAGIC, MAGIC_OFFSET,
                              METADATA_PARTITION_DIR, SNAPSHOT_SUFFIX, parse_segment_name)
from kraftcore.limits import METADATA_APPLY_BYTES_MAX
from kraftcore.log import checkpoint, reader
from kraftcore.log.snapshots import parse_file_name
from kraftcore.metadata.image import EMPTY_IMAGE
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import load_snapshot


class Loaded(NamedTuple):
    image: object  # MetadataImage
    source: str  # the absolute path given
    snapshot: str  # the snapshot file loaded (a path), or None
    log_batches: int  # batches replayed after the snapshot (a directory)
    warnings: list  # one line each: what was left out and why


def _describe_os_error(exc):
    return exc.strerror or str(exc)


def _snapshot_image(path, data, snapshot_id):
    """The image a snapshot's bytes hold; MetadataLoadError naming the file otherwise."""
    if len(data) < BATCH_HEADER_BYTES or data[MAGIC_OFFSET] != MAGIC:
        raise MetadataLoadError(f"{path} is not a KRaft snapshot: it does not start with a "
                                f"v2 record batch ({len(data)} bytes)")
    try:
        return load_snapshot(data, snapshot_id)
    except CorruptRecordError as exc:
        raise MetadataLoadError(f"{path} is corrupt: {exc}") from None
    except KraftcoreError as exc:  # not a snapshot, or records that do not replay
        raise MetadataLoadError(f"{path} is not a valid KRaft snapshot: {exc}") from None


def _read_whole(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise MetadataLoadError(f"cannot read {path}: {_describe_os_error(exc)}") from None


def load_snapshot_file(path):
    """A `Loaded` of one snapshot file. Its id (provenance) comes from the file name
    `<end offset>-<epoch>.checkpoint`; another name (`bootstrap.checkpoint`, a renamed copy)
    reads as id (0, 0)."""
    source = os.path.abspath(path)
    if os.path.isdir(path):
        raise MetadataLoadError(f"{path} is a directory; use --dir DIR for a metadata log "
                                "directory")
    data = _read_whole(path)
    try:
        snapshot_id = tuple(parse_file_name(os.path.basename(path)))
    except ValueError:
        snapshot_id = (0, 0)
    image = _snapshot_image(path, data, snapshot_id)
    return Loaded(image, source, source, 0, [])


def _is_segment(name):
    return parse_segment_name(name, (LOG_SUFFIX,)) is not None


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
            raise MetadataLoadError(
                f"cannot read {candidate}: {_describe_os_error(exc)}") from None
        if any(_is_segment(n) or n.endswith(SNAPSHOT_SUFFIX) for n in names):
            return candidate, names
        if candidate != path:  # an empty __cluster_metadata-0
            return candidate, names
    raise MetadataLoadError(
        f"{path} holds no metadata log: expected a {METADATA_PARTITION_DIR} directory, or "
        "the .log segments and <end offset>-<epoch>.checkpoint snapshots of one")


def load_directory(path):
    """A `Loaded` of a metadata log directory: the newest snapshot plus the log after it
    (see the module docstring)."""
    source = os.path.abspath(path)
    directory, names = find_metadata_dir(path)
    warnings = []
    snapshot_ids = {}
    for name in names:
        if name.endswith(SNAPSHOT_SUFFIX) and name != BOOTSTRAP_CHECKPOINT_FILE:
            try:
                snapshot_ids[tuple(parse_file_name(name))] = name
            except ValueError:
                warnings.append(f"{os.path.join(directory, name)} is not named like a "
                                "snapshot (<end offset>-<epoch>.checkpoint): skipped")
    segments = sorted(parse_segment_name(n, (LOG_SUFFIX,))[0] for n in names
                      if _is_segment(n))
    if not snapshot_ids and not segments:
        raise MetadataLoadError(f"{directory} holds no metadata log: no .log segment and no "
                                "<end offset>-<epoch>.checkpoint snapshot")

    snapshot_path = None
    if snapshot_ids:
        latest = max(snapshot_ids)
        snapshot_path = os.path.join(directory, snapshot_ids[latest])
        image = _snapshot_image(snapshot_path, _read_whole(snapshot_path), latest)
        snapshot_epoch = latest[1]
    else:
        image, snapshot_epoch = EMPTY_IMAGE, 0
        log_start = segments[0]
        try:
            recorded = checkpoint.read_offset(directory, LOG_START_OFFSET_CHECKPOINT)
        except (checkpoint.CheckpointError, OSError, ValueError):
            recorded = None
        if recorded is not None:
            log_start = max(log_start, recorded)
        if log_start > 0:
            raise MetadataLoadError(
                f"{directory}: the log starts at offset {log_start} and there is no "
                f"snapshot, so the records below offset {log_start} are missing")

    loader = MetadataLoader(image=image)
    expected = image.end_offset
    last_epoch = snapshot_epoch
    pending, pending_bytes, replayed = [], 0, 0

    def flush():
        nonlocal pending, pending_bytes
        try:
            loader.apply(pending)
        except KraftcoreError as exc:
            raise MetadataLoadError(f"{directory}: the log does not replay: {exc}") from None
        pending, pending_bytes = [], 0

    try:
        for item in reader.read_directory(directory):
            if isinstance(item, reader.Damage):
                _take_damage(item, expected, warnings)
                break
            batch = item
            segment = batch.file
            if batch.last_offset < expected:
                continue  # below the snapshot (or the log start)
            if batch.base_offset < expected:
                raise MetadataLoadError(
                    f"{segment}: the batch at offsets [{batch.base_offset}, "
                    f"{batch.last_offset}] straddles offset {expected}, where the snapshot "
                    "ends")
            if batch.base_offset > expected:
                raise MetadataLoadError(
                    f"{segment}: the log has no batch at offset {expected} (the next one "
                    f"starts at {batch.base_offset}): records are missing")
            if batch.epoch < last_epoch:
                what = ("the snapshot's" if batch.base_offset == image.end_offset
                        and snapshot_path else "the previous batch's")
                warnings.append(
                    f"{segment}: the batch at offset {batch.base_offset} has epoch "
                    f"{batch.epoch}, older than {what} epoch {last_epoch}: the log from "
                    "there on is left out (a node's recovery discards it)")
                break
            pending.append(batch)
            pending_bytes += len(batch.data)
            replayed += 1
            expected = batch.last_offset + 1
            last_epoch = batch.epoch
            if pending_bytes >= METADATA_APPLY_BYTES_MAX:
                flush()
    except OSError as exc:
        raise MetadataLoadError(f"cannot read {getattr(exc, 'filename', None) or directory}: "
                                f"{_describe_os_error(exc)}") from None
    flush()
    if loader.in_transaction:
        warnings.append(f"the log ends inside a metadata transaction begun before offset "
                        f"{expected}: its records are left out")
    return Loaded(loader.image, source, snapshot_path, replayed, warnings)


def _take_damage(damage, expected, warnings):
    """A gap is an error; the last segment's damage ends the replay with a warning."""
    if damage.kind == reader.GAP:
        if 0 <= damage.next_offset < damage.base_offset and damage.next_offset >= expected:
            raise MetadataLoadError(
                f"{damage.file}: the log has no batch at offset {damage.next_offset} (the "
                f"next one starts at {damage.base_offset}): records are missing")
        raise MetadataLoadError(f"{os.path.dirname(damage.file)}: the log has a gap in its "
                                f"offsets: {damage.reason}")
    warnings.append(f"{damage.file}: the log stops at byte {damage.position}: "
                    f"{damage.reason}; the records from offset {expected} on are left out "
                    "(a node's recovery truncates them)")
