"""Loading a metadata image, read-only, from one snapshot file or from a metadata log
directory (`__cluster_metadata-0`, or a log directory holding one), as `kraftcore
metadata-shell` shows it (docs/metadata-shell.md).

* `load_snapshot_file`: one `.checkpoint` file; its id (provenance) comes from its name.
* `load_directory`: the directory's newest snapshot, then the log's batches after it,
  replayed through `MetadataLoader` (so an open metadata transaction at the end is left out,
  as a node leaves it out).

This module reads no file: `kraftcore.log.metadata_dir` finds and reads them (the snapshot's
bytes, the log's batches through `kraftcore.log.reader`) and this module assembles the image
from what it returns (`snapshot_image`, `assemble`).

Invariants: nothing in the directory is written, locked or recovered (the directory of a
running node may be read). The log is read with the damage rules a node's recovery applies:
where the last segment's batches stop (a torn tail, a damaged batch, an epoch going back)
the replay stops and a warning says where; a log older than the newest snapshot stops there
too; a segment file that is not part of the log (recovery sets it aside) is left out with a
warning. A gap in the offsets (between two segments, or between the snapshot's end and a
first segment that starts above it), or records lost below the log start without a
snapshot, are errors (`MetadataLoadError`, one line naming the file).
"""

from typing import NamedTuple

from kraftcore.errors import CorruptRecordError, KraftcoreError, MetadataLoadError
from kraftcore.layout import BATCH_HEADER_BYTES, MAGIC, MAGIC_OFFSET
from kraftcore.limits import METADATA_APPLY_BYTES_MAX
from kraftcore.log import reader
from kraftcore.log.metadata_dir import (find_metadata_dir, read_metadata_dir,  # noqa: F401
                                        read_snapshot_file)
from kraftcore.metadata.image import EMPTY_IMAGE
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import load_snapshot


class Loaded(NamedTuple):
    image: object  # MetadataImage
    source: str  # the absolute path given
    snapshot: str  # the snapshot file loaded (a path), or None
    log_batches: int  # batches replayed after the snapshot (a directory)
    warnings: list  # one line each: what was left out and why


def snapshot_image(path, data, snapshot_id):
    """The image a snapshot's bytes hold (`path` names it in errors); MetadataLoadError
    naming the file otherwise."""
    if len(data) < BATCH_HEADER_BYTES or data[MAGIC_OFFSET] != MAGIC:
        raise MetadataLoadError(f"{path} is not a KRaft snapshot: it does not start with a "
                                f"v2 record batch ({len(data)} bytes)")
    try:
        return load_snapshot(data, snapshot_id)
    except CorruptRecordError as exc:
        raise MetadataLoadError(f"{path} is corrupt: {exc}") from None
    except KraftcoreError as exc:  # not a snapshot, or records that do not replay
        raise MetadataLoadError(f"{path} is not a valid KRaft snapshot: {exc}") from None


def load_snapshot_file(path):
    """A `Loaded` of one snapshot file. Its id (provenance) comes from the file name
    `<end offset>-<epoch>.checkpoint`; another name (`bootstrap.checkpoint`, a renamed copy)
    reads as id (0, 0)."""
    snapshot = read_snapshot_file(path)
    image = snapshot_image(path, snapshot.data, snapshot.snapshot_id)
    return Loaded(image, snapshot.source, snapshot.source, 0, [])


def load_directory(path):
    """A `Loaded` of a metadata log directory: the newest snapshot plus the log after it
    (see the module docstring)."""
    return assemble(read_metadata_dir(path))


def assemble(found):
    """A `Loaded` of what `kraftcore.log.metadata_dir.read_metadata_dir` found: the image of
    its newest snapshot, then the log after it replayed (see the module docstring)."""
    source, directory = found.source, found.directory
    warnings = list(found.skipped)
    snapshot_path = None
    if found.snapshot is not None:
        snapshot_path = found.snapshot.path
        image = snapshot_image(snapshot_path, found.snapshot.data, found.snapshot.snapshot_id)
        snapshot_epoch = found.snapshot.snapshot_id[1]
    else:
        image, snapshot_epoch = EMPTY_IMAGE, 0
        log_start = found.log_start
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

    for item in found.log_items(start_offset=image.end_offset):
        if isinstance(item, reader.Damage):
            if item.kind == reader.STRAY:
                warnings.append(f"{item.file}: left out: {item.reason}")
                continue
            _take_damage(item, expected, warnings, directory)
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
    flush()
    if loader.in_transaction:
        warnings.append(f"the log ends inside a metadata transaction begun before offset "
                        f"{expected}: its records are left out")
    return Loaded(loader.image, source, snapshot_path, replayed, warnings)


def _take_damage(damage, expected, warnings, directory):
    """A gap is an error; the last segment's damage ends the replay with a warning."""
    if damage.kind == reader.GAP:
        if 0 <= damage.next_offset < damage.base_offset and damage.next_offset >= expected:
            raise MetadataLoadError(
                f"{damage.file}: the log has no batch at offset {damage.next_offset} (the "
                f"next one starts at {damage.base_offset}): records are missing")
        raise MetadataLoadError(f"{directory}: the log has a gap in its offsets: "
                                f"{damage.reason}")
    warnings.append(f"{damage.file}: the log stops at byte {damage.position}: "
                    f"{damage.reason}; the records from offset {expected} on are left out "
                    "(a node's recovery truncates them)")
