"""What Kafka keeps at the root of a broker's log directory for all the partitions in it
(kafka-facts §3.8): three offset checkpoints — `recovery-point-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks) and `log-start-offset-checkpoint`, each
version 0, a count, then `<topic> <partition> <offset>` lines — the
`cleaner-offset-checkpoint` of the compacted logs that were cleaned (the first dirty offset
of each, same format), and the `.kafka_cleanshutdown` marker, written once every log of the
directory closed cleanly.

One file per kind for thousands of partitions is why a broker's partition logs keep no
checkpoints of their own (`LogConfig(own_checkpoints=False)`): the owner reads these once
(`read_root`), hands each log its values when it opens (`kraftcore.log.LogOffsets`), and
writes them back for all of them at once (`write_root`).

A checkpoint that does not parse is ignored (its logs are recovered by a full scan, which
is always safe) and named in `RootState.ignored`. The marker is removed when the directory
is taken up (`clear_clean_shutdown`), so a crash before the next clean close is seen.
"""

import json
import os
import re
from typing import NamedTuple

from kraftcore.layout import (CLEAN_SHUTDOWN_FILE, CLEANER_OFFSET_CHECKPOINT, DELETED_DIR_SUFFIX,
                              HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
                              RECOVERY_POINT_CHECKPOINT)
from kraftcore.log import checkpoint, fileio
from kraftcore.log.log import LogOffsets

__all__ = ["RootState", "read_root", "write_root", "mark_clean_shutdown",
           "clear_clean_shutdown", "partition_dirs"]

_NAMES = (RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT,
          CLEANER_OFFSET_CHECKPOINT)
_PARTITION_DIR = re.compile(r"^([A-Za-z0-9._-]+)-([0-9]+)$")
_METADATA_TOPIC = "__cluster_metadata"


class RootState(NamedTuple):
    """A log directory's root: {(topic, partition): LogOffsets}, and the checkpoints that
    were ignored (why)."""

    offsets: dict
    clean_shutdown: bool
    ignored: list


def _entry(fields):
    if len(fields) != 3:
        raise ValueError(f"expected 3 fields, got {len(fields)}")
    offset = int(fields[2])
    if offset < 0:
        raise ValueError(f"negative offset in {fields}")
    return fields[0], int(fields[1]), offset


def read_root(directory):
    """The root state of log directory `directory` (missing files: nothing known)."""
    clean = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
    values, ignored = [{}, {}, {}, {}], []
    for i, name in enumerate(_NAMES):
        try:
            entries = checkpoint.read(os.path.join(directory, name), _entry) or []
        except checkpoint.CheckpointError as exc:
            ignored.append(str(exc))
            if name != CLEANER_OFFSET_CHECKPOINT:
                clean = False  # what it held is unknown: every log of the directory is scanned
            continue
        values[i] = {(topic, partition): offset for topic, partition, offset in entries}
    keys = set().union(*values)
    offsets = {key: LogOffsets(values[0].get(key), values[1].get(key), values[2].get(key),
                               clean and key in values[0], values[3].get(key))
               for key in keys}
    return RootState(offsets, clean, ignored)


def write_root(directory, logs):
    """Write the three offset checkpoints of `directory` for `logs` ({(topic, partition):
    Log}), each atomically."""
    items = sorted(logs.items())
    rows = [[], [], [], []]
    for (topic, partition), log in items:
        rows[0].append((topic, partition, min(log.recovery_point, log.log_end_offset)))
        rows[1].append((topic, partition, log.high_watermark))
        rows[2].append((topic, partition, log.log_start_offset))
        if log.cleaner_offset is not None:
            rows[3].append((topic, partition, log.cleaner_offset))
    for name, entries in zip(_NAMES, rows):
        if name == CLEANER_OFFSET_CHECKPOINT and not entries \
                and not os.path.exists(os.path.join(directory, name)):
            continue  # no compacted log was ever cleaned here
        checkpoint.write(os.path.join(directory, name), entries)


def mark_clean_shutdown(directory):
    """Every log of `directory` is closed and its checkpoints written: the next start may
    skip their recovery scans."""
    fileio.write_atomic(os.path.join(directory, CLEAN_SHUTDOWN_FILE),
                        json.dumps({"version": 0, "brokerEpoch": -1}).encode())


def clear_clean_shutdown(directory):
    try:
        fileio.unlink(os.path.join(directory, CLEAN_SHUTDOWN_FILE))
    except FileNotFoundError:
        return
    fileio.sync_dir(directory)


def partition_dirs(directory):
    """{(topic, partition): path} of the partition directories under `directory`, after
    finishing the deletions a crash interrupted (`<topic>-<partition>.<random>-delete`
    directories are removed). The metadata log's directory is not a partition's."""
    found = {}
    if not os.path.isdir(directory):
        return found
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isdir(path):
            continue
        if name.endswith(DELETED_DIR_SUFFIX):
            for entry in os.listdir(path):
                fileio.unlink(os.path.join(path, entry))
            os.rmdir(path)
            continue
        match = _PARTITION_DIR.match(name)
        if match and match.group(1) != _METADATA_TOPIC:
            found[(match.group(1), int(match.group(2)))] = path
    return found
