"""The `log-replay` check: a node's snapshots against the replay of its own metadata log.

For every snapshot `<end offset>-<epoch>.checkpoint` of a node, the node's metadata log
(the `.log` segments of its `__cluster_metadata-0` directory) replayed from the start up to
the snapshot's end offset must give the same image (kafka-facts §4.4: the end offset is
exclusive, the epoch is the one of the last contained record). The replay is kraftcore's
own (`MetadataLoader`: metadata transactions applied whole, control batches skipped), and
the comparison is record by record, keyed by what each record is about, so a difference is
reported as "PartitionRecord orders-3 differs: leader 2 in the snapshot, 1 in the log
replay". Lists that Kafka keeps as maps or sets (a broker's endpoints, features and log
dirs; `checks.comparable`) are compared in one order: a Kafka snapshot writes them in its
image's order, not in the order its log holds them.

Snapshot 0-0 is the bootstrap snapshot that Kafka's `kafka-storage format` writes (KRaft
version and voters, and the bootstrap records: feature levels, SCRAM credentials): not the
log's state at offset 0 but what the cluster starts from, which the first active
controller writes into the log. It is not compared with the log (a note says so), as
`kraftcore.raft.core` does not load it either.

Reading is strictly read-only and follows a node's recovery (`kraftcore.log.reader`: each
batch checked, its CRC-32C and records; nothing is recovered, truncated or written). Where
the log does not start at offset 0 (its older segments were deleted after a snapshot), the
replay starts from the node's first snapshot that ends inside the log; that snapshot and
the ones before it are counted as "not covered by the log", as are snapshots past the log's
end. The log must start at or below the end offset of the node's newest snapshot: a first
segment above it leaves offsets that neither a snapshot nor the log holds, a gap.

Records are verified while reading (`verify_records=True`): measured on a 6,000-batch, 8 MB
sample log it adds under 1 % to a replay (reading ~15 ms of ~4 s, the rest is the loader),
and no other check reads log segments (`kraftcore.spark.checks` checks snapshot files); the
loader decodes only the data batches it replays, not control batches or those below the
snapshot a replay starts from.

A torn batch at the end of the last segment (a crash during an append) ends the log there,
as recovery would, and so do zeros written ahead of the data (space a running node
preallocated or prefilled). Anything else wrong with the log (a bad CRC, a gap in the
offsets, a leader epoch going back, a record that does not replay) is a `log-replay`
violation naming the segment and the byte, and the snapshots after it are not verified. A
segment file that is not part of the log (one recovery sets aside: an empty segment based
inside the one before it, or one whose first batch is not at its base offset) is left out
of the replay and reported as a note (`ReplayResult.notes`), not a violation.
"""

import itertools
import os
from typing import NamedTuple

from kraftcore.errors import KraftcoreError
from kraftcore.layout import LOG_SUFFIX, METADATA_PARTITION_DIR, parse_segment_name
from kraftcore.limits import METADATA_APPLY_BYTES_MAX, SPARK_PAIR_DIFFERENCES_MAX
from kraftcore.log import reader
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import image_records
from kraftcore.raft.types import BOOTSTRAP_SNAPSHOT_ID
from kraftcore.spark.checks import (Violation, comparable, describe,
                                    field_differences, keyed, snapshot_id_text,
                                    snapshot_records)

__all__ = ["find_log_dir", "iter_log_batches", "replay_node", "ReplayResult", "LogProblem"]


class LogProblem(Exception):
    """The log cannot be read (or replayed) past this point."""

    def __init__(self, message, segment=None, position=None, offset=None):
        super().__init__(message)
        self.message = message
        self.segment = segment
        self.position = position
        self.offset = offset


def find_log_dir(root):
    """The metadata log directory under `root`: the one directory holding `.log` segments
    (`__cluster_metadata-0` preferred when there are several). None when there is none;
    ValueError naming them when there are several candidates."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if any(parse_segment_name(name, (LOG_SUFFIX,)) for name in filenames):
            found.append(dirpath)
    if len(found) > 1:
        preferred = [d for d in found if os.path.basename(d) == METADATA_PARTITION_DIR]
        if len(preferred) == 1:
            return preferred[0]
        raise ValueError(f"{root} holds several directories of .log segments "
                         f"({', '.join(found)}); give the metadata log directory itself")
    return found[0] if found else None


def iter_log_batches(log_dir, *, start_offset=None, notes=None):
    """Every batch of the log in `log_dir`, as `reader.LogBatch`es in offset order. Raises
    `LogProblem` (lazily, when reached) for a bad batch or a gap in the offsets (a first
    segment above `start_offset` too, when given); a torn tail of the last segment ends the
    log quietly. A segment file that is not part of the log is skipped, with a line
    appended to `notes` (a list) saying why."""
    for item in reader.read_directory(log_dir, start_offset=start_offset):
        if not isinstance(item, reader.Damage):
            yield item
            continue
        if item.kind == reader.STRAY:
            if notes is not None:
                notes.append(f"{item.file}: left out of the replay: {item.reason}")
            continue
        if item.kind == reader.TORN:
            return  # a torn append: the log ends here
        name = os.path.basename(item.file)
        if item.kind == reader.GAP:
            message = item.reason
        elif item.kind == reader.CRC:
            message = (f"the batch at byte {item.position} of {name} (base offset "
                       f"{item.base_offset}) fails its CRC-32C check ({item.reason})")
        else:
            message = f"the batch at byte {item.position} of {name}: {item.reason}"
        raise LogProblem(message, item.file, item.position,
                         item.base_offset if item.base_offset >= 0 else None)


class ReplayResult(NamedTuple):
    """What the replay of one node found: its violations, how many snapshots were compared
    with the log, how many the log does not cover, and notes (one line each: a segment
    file left out of the replay, and why)."""

    node: str
    violations: list
    compared: int
    not_covered: int
    notes: tuple = ()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def replay_node(node, log_dir, snapshots):
    """Check `snapshots` (`[(path, (end offset, epoch))]` of `node`, undamaged files only)
    against the replay of the log in `log_dir`; returns a `ReplayResult`."""
    violations = []
    notes = []
    result = _result(node, violations, notes)
    for path, sid in snapshots:
        if tuple(sid) == BOOTSTRAP_SNAPSHOT_ID:
            notes.append(f"{path}: not compared with the log: snapshot 0-0 is the bootstrap "
                         "snapshot (Kafka's kafka-storage format writes it), the records a "
                         "cluster starts from, which its first active controller writes "
                         "into the log")
    snapshots = sorted(((path, sid) for path, sid in snapshots
                        if tuple(sid) != BOOTSTRAP_SNAPSHOT_ID),
                       key=lambda s: (tuple(s[1]), s[0]))
    # The log must reach down to the newest snapshot (with none, where it starts is unknown).
    start_offset = max(sid[0] for _, sid in snapshots) if snapshots else None
    batches = iter_log_batches(log_dir, start_offset=start_offset, notes=notes)
    try:
        first = next(batches, None)
    except LogProblem as exc:
        if snapshots:
            violations.append(_log_violation(node, snapshots[0], exc))
        return result(0, len(snapshots))
    if first is None:
        return result(0, len(snapshots))
    loader = MetadataLoader()
    todo = snapshots
    if first.base_offset > 0:
        # The log starts after offset 0: start from a snapshot that ends inside it.
        for i, (path, sid) in enumerate(snapshots):
            if sid[0] >= first.base_offset:
                try:
                    loader.load_snapshot(tuple(sid), _read(path))
                except KraftcoreError:
                    continue
                todo = snapshots[i + 1:]
                break
        else:
            return result(0, len(snapshots))
    skipped = len(snapshots) - len(todo)
    start = loader.next_offset
    position = start  # the offset after the last batch taken from the log
    batches = itertools.chain([first], batches)
    pending, pending_bytes = [], 0
    compared = 0
    for index, (path, sid) in enumerate(todo):
        end_offset = sid[0]
        try:
            while position < end_offset:
                batch = next(batches, None)
                if batch is None:
                    break
                if batch.last_offset < start:
                    continue  # below the snapshot the replay started from
                if batch.base_offset < start:
                    raise LogProblem(f"the log batch [{batch.base_offset}, "
                                     f"{batch.last_offset}] straddles offset {start}, the end "
                                     "of the snapshot the replay starts from",
                                     offset=batch.base_offset)
                pending.append(batch)
                pending_bytes += len(batch.data)
                position = batch.last_offset + 1
                if pending_bytes >= METADATA_APPLY_BYTES_MAX:
                    loader.apply(pending)
                    pending, pending_bytes = [], 0
            if pending:
                loader.apply(pending)
                pending, pending_bytes = [], 0
        except LogProblem as exc:
            violations.append(_log_violation(node, (path, sid), exc))
            return result(compared, skipped + len(todo) - index - 1)
        except KraftcoreError as exc:
            violations.append(Violation(
                "log-replay", node, path, snapshot_id_text(sid), None, None, None,
                f"the metadata log of {node} does not replay up to offset {end_offset}: "
                f"{exc}; the snapshots from here on are not verified"))
            return result(compared, skipped + len(todo) - index - 1)
        if position < end_offset:
            # The log ends before this snapshot (and so before every later one).
            return result(compared, skipped + len(todo) - index)
        if position > end_offset:
            violations.append(Violation(
                "log-replay", node, path, snapshot_id_text(sid), None, None, None,
                f"snapshot {snapshot_id_text(sid)} ends at offset {end_offset}, inside a "
                f"log batch that ends at offset {position - 1}: a snapshot ends on a batch "
                "boundary"))
            continue
        compared += 1
        violations += _compare(node, path, sid, loader.image)
    return result(compared, skipped)


def _result(node, violations, notes):
    def result(compared, not_covered):
        return ReplayResult(node, violations, compared, not_covered, tuple(notes))
    return result


def _log_violation(node, snapshot, exc):
    path, sid = snapshot if snapshot else (None, None)
    where = f" ({os.path.basename(exc.segment)})" if exc.segment else ""
    return Violation("log-replay", node, path, snapshot_id_text(sid), exc.offset,
                     exc.position, None,
                     f"the metadata log of {node} cannot be read past this point{where}: "
                     f"{exc.message}; the snapshots from here on are not verified",
                     exc.segment)


def _compare(node, path, sid, image):
    sid_text = snapshot_id_text(sid)
    out = []
    if image.end_offset == sid[0] and image.epoch != sid[1]:
        out.append(Violation(
            "log-replay", node, path, sid_text, None, None, None,
            f"snapshot {sid_text} claims epoch {sid[1]}, but the log's last batch below "
            f"offset {sid[0]} has epoch {image.epoch}"))
    try:
        _, entries, names = snapshot_records(_read(path))
    except (KraftcoreError, OSError) as exc:
        out.append(Violation("log-replay", node, path, sid_text, None, None, None,
                             f"the snapshot cannot be read again for the comparison: {exc}"))
        return out
    mine = keyed(entries)
    replayed = keyed([(None, None, r) for r in image_records(image)])
    names = {**{t.topic_id: t.name for t in image.topics.values()}, **names}
    differences = []
    for key, (offset, _, record) in mine.items():
        other = replayed.get(key)
        if other is None:
            desc = describe(record, names)
            differences.append((offset, desc, f"{desc} is in the snapshot but not in the "
                                f"log replay"))
            continue
        record, replayed_record = comparable(record), comparable(other[2])
        if replayed_record != record:
            desc = describe(record, names)
            differences.append((offset, desc, f"{desc} differs: " + field_differences(
                record, replayed_record, "the snapshot", "the log replay")))
    for key, (_, _, record) in replayed.items():
        if key not in mine:
            desc = describe(record, names)
            differences.append((None, desc, f"{desc} is missing from the snapshot; the log "
                                "replay holds it"))
    differences.sort(key=lambda d: (d[0] is None, d[0] or 0))
    for offset, desc, message in differences[:SPARK_PAIR_DIFFERENCES_MAX]:
        out.append(Violation("log-replay", node, path, sid_text, offset, None, desc,
                             f"snapshot {sid_text}: {message}"))
    if len(differences) > SPARK_PAIR_DIFFERENCES_MAX:
        hidden = len(differences) - SPARK_PAIR_DIFFERENCES_MAX
        out.append(Violation("log-replay", node, path, sid_text, None, None, None,
                             f"snapshot {sid_text}: {hidden} more records differ from the log "
                             "replay (not listed)"))
    return out
