"""Kafka's checkpoint text files (kafka-facts §3.8), read and written atomically.

    <version>      line 1
    <N>            line 2: number of entries
    <entry>        N lines, fields separated by single spaces (read: split on whitespace)

Files kept in a log's directory, all version 0 (their names are `kraftcore.layout`'s):

* `leader-epoch-checkpoint`: `<leader epoch> <start offset>` (as in Kafka's partition dir);
* `recovery-point-offset-checkpoint`, `replication-offset-checkpoint` (the high watermark)
  and `log-start-offset-checkpoint`: `<topic> <partition> <offset>`. Kafka keeps these
  three in the parent log dir, one line per partition; a kraftcore `Log` owns only its own
  directory, so it keeps them there, each with its one line.

A missing file reads as None and an empty one as no entries. A file that does not parse
raises `CheckpointError`; the log treats such a file as missing and recovers the
information from the segments (a full scan), which is always safe. A value that parses but
that the segments contradict (an offset they do not hold) is the log's to judge: it
reports and ignores it (`kraftcore.log.log`).
"""

import os
import re

from kraftcore.errors import LogError
from kraftcore.layout import LEADER_EPOCH_CHECKPOINT
from kraftcore.log import fileio

VERSION = 0

_TOPIC_PARTITION = re.compile(r"^([A-Za-z0-9._-]+)-([0-9]+)$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")


class CheckpointError(LogError):
    """A checkpoint file exists but does not hold what its format says."""


def topic_partition(directory):
    """(topic, partition) named by a log directory `<topic>-<partition>`, as Kafka names
    them; another name is used whole as the topic (made legal) with partition 0."""
    name = os.path.basename(os.path.normpath(directory))
    match = _TOPIC_PARTITION.match(name)
    if match:
        return match.group(1), int(match.group(2))
    if not _TOPIC.match(name):
        name = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "log"
    return name, 0


def write(path, entries, sync=True):
    """Atomically replace `path` with `entries` (tuples of fields); `sync=False`: without
    fsync (`fileio.write_atomic`)."""
    lines = [str(VERSION), str(len(entries))]
    lines += [" ".join(str(field) for field in entry) for entry in entries]
    fileio.write_atomic(path, ("\n".join(lines) + "\n").encode(), sync)


def read(path, parse):
    """Entries of the checkpoint at `path` as `parse(fields)` returns them; None if absent."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0] == "":
        return []
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (ValueError, IndexError):
        raise CheckpointError(f"{path}: the first two lines must be the version and count") from None
    if version != VERSION:
        raise CheckpointError(f"{path}: version {version}, expected {VERSION}")
    if count != len(lines) - 2:
        raise CheckpointError(f"{path}: declares {count} entries but holds {len(lines) - 2}")
    try:
        return [parse(line.split()) for line in lines[2:]]
    except (ValueError, IndexError) as exc:
        raise CheckpointError(f"{path}: bad entry ({exc})") from None


def _epoch_entry(fields):
    if len(fields) != 2:
        raise ValueError(f"expected 2 fields, got {len(fields)}")
    epoch, offset = int(fields[0]), int(fields[1])
    if epoch < 0 or offset < 0:
        raise ValueError(f"negative epoch or offset in {fields}")
    return epoch, offset


def _offset_entry(fields):
    if len(fields) != 3:
        raise ValueError(f"expected 3 fields, got {len(fields)}")
    return fields[0], int(fields[1]), int(fields[2])


def read_epochs(directory):
    """[(leader epoch, start offset)] from the leader-epoch checkpoint, None if absent."""
    entries = read(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), _epoch_entry)
    if entries is not None:
        for (e1, o1), (e2, o2) in zip(entries, entries[1:]):
            if e2 <= e1 or o2 < o1:
                raise CheckpointError(
                    f"{LEADER_EPOCH_CHECKPOINT}: entries ({e1}, {o1}) then ({e2}, {o2}) do "
                    "not increase")
    return entries


def write_epochs(directory, entries, sync=True):
    write(os.path.join(directory, LEADER_EPOCH_CHECKPOINT), entries, sync)


def read_offset(directory, name):
    """The offset recorded for this log in the offsets checkpoint `name`, None if absent."""
    entries = read(os.path.join(directory, name), _offset_entry)
    if not entries:
        return None
    topic, partition = topic_partition(directory)
    for entry_topic, entry_partition, offset in entries:
        if (entry_topic, entry_partition) == (topic, partition):
            return offset
    if len(entries) == 1:  # the directory was renamed: the file is still this log's
        return entries[0][2]
    raise CheckpointError(f"{name}: no entry for {topic}-{partition}")


def write_offset(directory, name, offset):
    topic, partition = topic_partition(directory)
    write(os.path.join(directory, name), [(topic, partition, offset)])
