"""The checks `kraftcore verify` runs, as plain Python: what each check means, how one
snapshot file is decoded and checked (`analyze_file`), and the pure pieces of the checks
that span files (nodes that disagree at one snapshot id, epochs that go back between two
snapshots of one node). No Spark here: the Spark job (`kraftcore.spark.job`) runs
`analyze_file` in its executors and the cross-file checks as Spark SQL, and formats what it
finds with the functions of this module; the in-process engine (`kraftcore.spark.local`)
runs the same functions in one process. So both engines report the same violations, word
for word, and the tests can hold them to it.

A snapshot file (kafka-facts §4.4) is v2 record batches: a control batch opening with a
SnapshotHeaderRecord, data batches of metadata records (§5), a control batch holding a
SnapshotFooterRecord. Every batch carries the snapshot's epoch as its partition leader epoch.

Rules this module keeps:

* A file whose batches do not decode (a bad CRC, broken framing, a record that does not
  decode) is *damaged*: its damage is reported by `batch-crc` / `batch-format`, once, and
  the file is left out of every content check (its tables are empty, it has no digest).
  Checking the content of half a snapshot would only report the consequences of the damage
  (e.g. "replica 3 is not a registered broker" because the broker records were in the bad
  batch).
* Header / footer / epoch problems do not make a file damaged: its records are sound and
  the content checks still run.
* Every violation names its file and, where there is one, the record: its offset inside the
  snapshot (offsets start at 0, the header is offset 0), the byte position of its batch,
  and a short description ("PartitionRecord orders-3").
* A file lists at most `SPARK_FILE_VIOLATIONS_MAX` violations; `violation_counts` still counts
  every one.
"""

import hashlib
import os
import struct
from typing import NamedTuple

from kraftcore import codec
from kraftcore.errors import (CorruptRecordError, KraftcoreError, ProtocolError,
                              UnsupportedCompressionError)
from kraftcore.limits import SPARK_FILE_VIOLATIONS_MAX
from kraftcore.log import reader
from kraftcore.log.snapshots import parse_file_name
from kraftcore.metadata import records as R
from kraftcore.raft.control import SNAPSHOT_FOOTER, SNAPSHOT_HEADER, decode_control_record
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.metadata.partition import NO_LEADER, RECOVERING
from kraftcore.types import Uuid

__all__ = [
    "Check", "CHECKS", "CHECK_NAMES", "Violation", "FileResult", "analyze_file",
    "snapshot_records", "record_key", "describe", "field_differences", "fingerprints",
    "diff_fingerprints", "topic_names", "plan_node_comparisons", "node_difference_violations",
    "epoch_regressions", "epoch_violation", "snapshot_id_text",
]



class Check(NamedTuple):
    name: str
    description: str


CHECKS = (
    Check("batch-crc", "every batch's CRC-32C matches its bytes"),
    Check("batch-format", "every file is whole v2 record batches whose records decode"),
    Check("header-first", "the first batch is a control batch opening with a SnapshotHeader"),
    Check("footer-last", "the last batch is a control batch holding the SnapshotFooter"),
    Check("batch-epoch", "every batch carries the snapshot's epoch (from its file name)"),
    Check("nodes-agree", "snapshots with the same id hold the same records on every node"),
    Check("log-replay", "each snapshot equals the replay of its node's metadata log up to "
                        "its end offset"),
    Check("leader-in-isr", "every partition's leader is in its ISR, or -1, or RECOVERING "
                           "(chosen by an unclean election)"),
    Check("isr-subset", "every ISR is a subset of its partition's replicas"),
    Check("replicas-registered", "every replica is a registered broker"),
    Check("topics-unique", "topic ids and topic names are unique"),
    Check("partitions-have-topics", "every partition belongs to a topic of the snapshot"),
    Check("epochs-monotonic", "partition and leader epochs never decrease from one snapshot "
                              "to the next of the same node"),
)
CHECK_NAMES = tuple(c.name for c in CHECKS)
DAMAGE_CHECKS = frozenset(("batch-crc", "batch-format"))


class Violation(NamedTuple):
    """One broken rule. `file` is a local path; `snapshot_id` the id text
    ("<end offset>-<epoch>") or None; `offset` the record's offset inside the snapshot (or,
    for a log problem, in the log); `position` a byte position in `file` (or in the log
    segment named in the message); `other_file` the file it was compared with, if any."""

    check: str
    node: str
    file: str
    snapshot_id: str = None
    offset: int = None
    position: int = None
    record: str = None
    message: str = ""
    other_file: str = None

    def as_dict(self):
        return self._asdict()


def snapshot_id_text(snapshot_id):
    return None if snapshot_id is None else f"{snapshot_id[0]}-{snapshot_id[1]}"


def parse_snapshot_id(path):
    """(end offset, epoch) from a snapshot file name, None for another name."""
    try:
        sid = parse_file_name(os.path.basename(path))
    except ValueError:
        return None
    return (sid.end_offset, sid.epoch)


# ------------------------------------------------------------------ naming records

def record_key(record):
    """What a record is about, as a string: two snapshots of the same state hold one record
    per key each ("partition/<topic id>/3", "broker/2", "config/2/orders/retention.ms")."""
    cls = type(record)
    if cls is R.PartitionRecord:
        return f"partition/{record.topic_id}/{record.partition_id}"
    if cls is R.TopicRecord:
        return f"topic/{record.topic_id}"
    if cls is R.RegisterBrokerRecord:
        return f"broker/{record.broker_id}"
    if cls is R.ConfigRecord:
        return f"config/{record.resource_type}/{record.resource_name}/{record.name}"
    if cls is R.FeatureLevelRecord:
        return f"feature/{record.name}"
    if cls is R.RegisterControllerRecord:
        return f"controller/{record.controller_id}"
    if cls is R.ClientQuotaRecord:
        entity = ",".join(f"{e.entity_type}={e.entity_name}" for e in record.entity)
        return f"quota/{entity}/{record.key}"
    if cls is R.ProducerIdsRecord:
        return "producer-ids"
    if cls is R.AccessControlEntryRecord:
        return f"acl/{record.id}"
    if cls is R.UserScramCredentialRecord:
        return f"scram/{record.name}/{record.mechanism}"
    if cls is R.DelegationTokenRecord:
        return f"token/{record.token_id}"
    if cls is R.ZkMigrationStateRecord:
        return "zk-migration-state"
    return R.TYPE_NAMES.get(getattr(cls, "api_key", None), cls.__name__)


_CONFIG_TYPES = {2: "topic", 4: "broker", 8: "broker-logger", 16: "client-metrics",
                 32: "group"}


def describe(record, topic_names=None):
    """A short name of a record for a report line, e.g. "PartitionRecord orders-3"."""
    cls = type(record)
    name = cls.__name__
    if cls is R.PartitionRecord:
        topic = (topic_names or {}).get(record.topic_id) or str(record.topic_id)
        return f"{name} {topic}-{record.partition_id}"
    if cls is R.TopicRecord:
        return f"{name} {record.name} ({record.topic_id})"
    if cls is R.RegisterBrokerRecord:
        return f"{name} broker {record.broker_id}"
    if cls is R.ConfigRecord:
        kind = _CONFIG_TYPES.get(record.resource_type, str(record.resource_type))
        target = record.resource_name or "(default)"
        return f"{name} {kind} {target} {record.name}"
    if cls is R.FeatureLevelRecord:
        return f"{name} {record.name}"
    if cls is R.RegisterControllerRecord:
        return f"{name} controller {record.controller_id}"
    return name


def _by_name(items):
    return sorted(items, key=lambda item: item.name)


def comparable(record):
    """`record` with its unordered lists in one order, for comparing two records of one
    state. A broker's or controller's endpoints and supported features are maps in Kafka
    (by listener and feature name) and its log dirs a sorted set, so the RegisterBrokerRecord
    of a Kafka snapshot lists them in the order of its image, not in the order the
    broker sent them (which is what its log holds)."""
    cls = type(record)
    if cls is R.RegisterBrokerRecord:
        changes = {"end_points": _by_name(record.end_points),
                   "features": _by_name(record.features),
                   "log_dirs": sorted(record.log_dirs, key=bytes)}
        if record.cordoned_log_dirs is not None:
            changes["cordoned_log_dirs"] = sorted(record.cordoned_log_dirs, key=bytes)
        return record.replace(**changes)
    if cls is R.RegisterControllerRecord:
        return record.replace(end_points=_by_name(record.end_points),
                              features=_by_name(record.features))
    return record


def _show(value):
    if isinstance(value, Uuid):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, bytes):
        return value.hex() if len(value) <= 16 else f"{value[:16].hex()}... ({len(value)} bytes)"
    return repr(value)


def field_differences(a, b, here, there):
    """The fields in which records `a` and `b` (same type) differ, as text:
    "leader 2 in <here>, 1 in <there>; isr [2] in <here>, [1, 2] in <there>"."""
    if type(a) is not type(b):
        return f"{type(a).__name__} in {here}, {type(b).__name__} in {there}"
    parts = []
    for field in type(a)._fields:
        va, vb = getattr(a, field.attr), getattr(b, field.attr)
        if va != vb:
            parts.append(f"{field.attr} {_show(va)} in {here}, {_show(vb)} in {there}")
    return "; ".join(parts) or "the same fields, written differently (record versions)"


# ------------------------------------------------------------------ one file

class FileResult:
    """What `analyze_file` found in one snapshot file: its identity and size, its tables
    (rows as tuples, in `*_FIELDS` order), its digest and its violations."""

    __slots__ = ("node", "path", "snapshot_id", "size_bytes", "batches", "records",
                 "timestamp_ms", "metadata_version", "digest", "damaged", "brokers",
                 "topics", "partitions", "configs", "violations", "violation_counts")

    def __init__(self, node, path, snapshot_id, size_bytes):
        self.node = node
        self.path = path
        self.snapshot_id = snapshot_id
        self.size_bytes = size_bytes
        self.batches = 0
        self.records = 0
        self.timestamp_ms = None
        self.metadata_version = None
        self.digest = None
        self.damaged = False
        self.brokers = []
        self.topics = []
        self.partitions = []
        self.configs = []
        self.violations = []
        self.violation_counts = {}

    def violate(self, check, message, *, offset=None, position=None, record=None,
                other_file=None):
        counts = self.violation_counts
        counts[check] = counts.get(check, 0) + 1
        if len(self.violations) < SPARK_FILE_VIOLATIONS_MAX:
            self.violations.append(Violation(
                check, self.node, self.path, snapshot_id_text(self.snapshot_id), offset,
                position, record, message, other_file))

    def __repr__(self):
        return (f"FileResult({self.path!r}, node={self.node!r}, id={self.snapshot_id}, "
                f"{self.records} records, {sum(self.violation_counts.values())} violations)")


BROKER_FIELDS = ("broker_id", "broker_epoch", "incarnation_id", "rack", "fenced",
                 "in_controlled_shutdown", "offset")
TOPIC_FIELDS = ("topic_id", "name", "offset")
PARTITION_FIELDS = ("topic_id", "topic_name", "partition_id", "replicas", "isr",
                    "removing_replicas", "adding_replicas", "leader", "leader_recovery_state",
                    "leader_epoch", "partition_epoch", "offset")
CONFIG_FIELDS = ("resource_type", "resource_name", "name", "value", "offset")

_TIMESTAMP = struct.Struct(">q")
_DECODE_ERRORS = (CorruptRecordError, UnsupportedCompressionError)


def _batches(view, result):
    """[(position, batch)] of every batch of `view` that decodes. The whole buffer is
    decoded in one native call; only when that fails is it read batch by batch
    (`kraftcore.log.reader`, going on past every damaged batch whose length is whole), to
    report every bad batch (and keep the good ones)."""
    try:
        return [(b.position, b) for b in codec.decode_batches(view)]
    except _DECODE_ERRORS:
        pass
    result.damaged = True
    found = []
    for item in reader.read_buffer(view, resume=True):
        if not isinstance(item, reader.Damage):
            [batch] = codec.decode_batches(item.data, verify=False)
            found.append((item.position, batch))
            continue
        pos, offset = item.position, item.base_offset if item.base_offset >= 0 else None
        if item.kind == reader.CRC:
            result.violate("batch-crc", f"the batch at byte {pos} (base offset {offset}) "
                           f"fails its CRC-32C check: {item.reason}", offset=offset,
                           position=pos)
        elif item.size:
            result.violate("batch-format", f"the batch at byte {pos} (base offset {offset}) "
                           f"does not decode: {item.reason}", offset=offset, position=pos)
        else:
            result.violate("batch-format", f"the file is truncated or damaged at byte {pos}, "
                           f"nothing after it can be read: {item.reason}", position=pos)
    return found


def _control_type(batch):
    """The control type id of the first record of a control batch (None if it does not
    decode), and the decoded message."""
    record = batch.records[0]
    try:
        type_id, _, message = decode_control_record(record.key, record.value)
    except ProtocolError:
        return None, None
    return type_id, message


def _check_frame(batches, total, result):
    """Header first, footer last, the snapshot's epoch on every batch."""
    if batches and batches[0][0] == 0:
        first = batches[0][1]
        type_id, header = (_control_type(first) if first.is_control and first.records
                           else (None, None))
        if type_id == SNAPSHOT_HEADER:
            result.timestamp_ms = header.last_contained_log_timestamp
        else:
            what = ("a data batch" if not first.is_control else
                    "a control batch without a SnapshotHeader first")
            result.violate("header-first", f"the first batch (base offset "
                           f"{first.base_offset}) is {what}", offset=first.base_offset,
                           position=0, record="SnapshotHeader")
    if batches:
        pos, last = batches[-1]
        if pos + last.size_bytes == total:
            type_id = (_control_type(last)[0] if last.is_control and last.records
                       else None)
            if len(batches) == 1 and type_id != SNAPSHOT_FOOTER:
                result.violate("footer-last", "the file holds a single batch and no "
                               "SnapshotFooter", offset=last.last_offset + 1,
                               position=total, record="SnapshotFooter")
            elif type_id != SNAPSHOT_FOOTER:
                what = "a data batch" if not last.is_control else "a control batch"
                result.violate("footer-last", f"the last batch (base offset "
                               f"{last.base_offset}, at byte {pos}) is {what}, not the "
                               "SnapshotFooter: the snapshot is incomplete",
                               offset=last.base_offset, position=pos, record="SnapshotFooter")
    for pos, batch in batches[1:-1]:
        if batch.is_control and batch.records:
            type_id = _control_type(batch)[0]
            if type_id == SNAPSHOT_FOOTER:
                result.violate("footer-last", f"a SnapshotFooter (batch at byte {pos}) is "
                               "not in the last batch", offset=batch.base_offset,
                               position=pos, record="SnapshotFooter")
            elif type_id == SNAPSHOT_HEADER:
                result.violate("header-first", f"a SnapshotHeader (batch at byte {pos}) is "
                               "not in the first batch", offset=batch.base_offset,
                               position=pos, record="SnapshotHeader")
    if result.snapshot_id is not None:
        epoch = result.snapshot_id[1]
        wrong = [(pos, b) for pos, b in batches if b.partition_leader_epoch != epoch]
        if wrong:
            pos, b = wrong[0]
            more = f" ({len(wrong) - 1} more batches too)" if len(wrong) > 1 else ""
            result.violate("batch-epoch", f"the batch at byte {pos} (base offset "
                           f"{b.base_offset}) carries epoch {b.partition_leader_epoch}, the "
                           f"file name says epoch {epoch}{more}", offset=b.base_offset,
                           position=pos)


def _decode_records(batches, result):
    """[(offset, value bytes, record)] of every metadata record, in file order."""
    data = [(pos, b) for pos, b in batches if not b.is_control]
    values = [r.value for _, b in data for r in b.records]
    try:
        decoded = R.decode_values(values)
    except ProtocolError:
        decoded = None
    if decoded is not None:
        offsets = [r.offset for _, b in data for r in b.records]
        return [(o, v, d[0]) for o, v, d in zip(offsets, values, decoded)]
    # Find every record that does not decode, one value at a time.
    result.damaged = True
    out = []
    for pos, batch in data:
        for r in batch.records:
            try:
                [(record, _)] = R.decode_values([r.value])
            except ProtocolError as exc:
                result.violate("batch-format", f"the metadata record at offset {r.offset} "
                               f"(batch at byte {pos}) does not decode: {exc.reason}",
                               offset=r.offset, position=pos)
            else:
                out.append((r.offset, r.value, record))
    return out


def digest_of(timestamp_ms, values):
    """The content digest of a snapshot: its header timestamp and the multiset of its
    record values (sorted, so batch boundaries and record order do not matter)."""
    h = hashlib.sha256()
    h.update(_TIMESTAMP.pack(-1 if timestamp_ms is None else timestamp_ms))
    ordered = sorted(values)
    h.update(struct.pack(f">{len(ordered)}I", *map(len, ordered)))
    h.update(b"".join(ordered))
    return h.hexdigest()


def analyze_file(node, path, data):
    """Decode and check one snapshot file (`data`: any buffer) of `node`; returns a
    `FileResult`. Never raises for bad bytes: every problem becomes a violation."""
    view = memoryview(data)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    result = FileResult(node, path, parse_snapshot_id(path), len(view))
    if not len(view):
        result.damaged = True
        result.violate("batch-format", "the file is empty", position=0)
        return result
    try:
        _analyze(view, result)
    except (KraftcoreError, ValueError, IndexError, struct.error) as exc:
        # Bytes this reader cannot make sense of in a way the steps above did not expect
        # (say, a record type newer than kraftcore): the file is reported, the run goes on.
        result.damaged = True
        result.brokers, result.topics, result.partitions, result.configs = [], [], [], []
        result.digest = None
        result.violate("batch-format", f"the file cannot be decoded: {type(exc).__name__}: "
                       f"{exc}")
    return result


def _analyze(view, result):
    with R.cyclic_gc_paused():
        batches = _batches(view, result)
        result.batches = len(batches)
        _check_frame(batches, len(view), result)
        entries = _decode_records(batches, result)
        result.records = len(entries)
        if result.damaged:
            return
        result.digest = digest_of(result.timestamp_ms, [v for _, v, _ in entries])
        _tables_and_invariants(entries, result)


def _tables_and_invariants(entries, result):
    brokers, topics, partitions, configs = [], [], [], []
    topic_names = {}  # topic id -> name
    topic_ids = {}  # name -> (topic id, offset)
    topic_offsets = {}  # topic id -> offset
    broker_ids = set()
    partition_records = []
    violate = result.violate
    for offset, _, record in entries:
        cls = type(record)
        if cls is R.PartitionRecord:
            partition_records.append((offset, record))
        elif cls is R.TopicRecord:
            tid, name = record.topic_id, record.name
            desc = describe(record)
            if tid in topic_offsets:
                violate("topics-unique", f"topic id {tid} is used by {topic_names[tid]!r} "
                        f"(offset {topic_offsets[tid]}) and by {name!r}", offset=offset,
                        record=desc)
            if name in topic_ids:
                other, other_offset = topic_ids[name]
                violate("topics-unique", f"topic name {name!r} is used by topic id {other} "
                        f"(offset {other_offset}) and by {tid}", offset=offset, record=desc)
            topic_names.setdefault(tid, name)
            topic_offsets.setdefault(tid, offset)
            topic_ids.setdefault(name, (tid, offset))
            topics.append((str(tid), name, offset))
        elif cls is R.RegisterBrokerRecord:
            broker_ids.add(record.broker_id)
            brokers.append((record.broker_id, record.broker_epoch, str(record.incarnation_id),
                            record.rack, record.fenced, record.in_controlled_shutdown,
                            offset))
        elif cls is R.ConfigRecord:
            configs.append((record.resource_type, record.resource_name, record.name,
                            record.value, offset))
        elif cls is R.FeatureLevelRecord and record.name == METADATA_VERSION:
            result.metadata_version = record.feature_level
    # One partition costs a few microseconds here (the decode costs about one): the
    # common case (every replica registered, ISR within the replicas, leader in the ISR)
    # is tested with set operations first, the details only for a partition that fails.
    id_text = {}  # topic id -> its text, once per topic
    append = partitions.append
    registered = broker_ids.issuperset
    for offset, p in partition_records:
        tid = p.topic_id
        text = id_text.get(tid)
        if text is None:
            text = id_text[tid] = str(tid)
        name = topic_names.get(tid)
        replicas, isr, leader = p.replicas, p.isr, p.leader
        append((text, name, p.partition_id, replicas, isr, p.removing_replicas,
                p.adding_replicas, leader, p.leader_recovery_state, p.leader_epoch,
                p.partition_epoch, offset))
        if (name is not None and registered(replicas) and set(isr).issubset(replicas)
                and (leader == NO_LEADER or leader in isr)):
            continue
        _partition_violations(offset, p, name, topic_names, broker_ids, violate)
    result.brokers, result.topics = brokers, topics
    result.partitions, result.configs = partitions, configs


def _partition_violations(offset, p, name, topic_names, broker_ids, violate):
    tid, replicas, isr, leader = p.topic_id, p.replicas, p.isr, p.leader
    desc = describe(p, topic_names)
    if name is None:
        violate("partitions-have-topics", f"{desc}: topic id {tid} has no TopicRecord in "
                "this snapshot", offset=offset, record=desc)
    outside = [r for r in isr if r not in replicas]
    if outside:
        violate("isr-subset", f"{desc}: ISR {_show(isr)} holds {_show(outside)}, which are "
                f"not replicas {_show(replicas)}", offset=offset, record=desc)
    if leader != NO_LEADER:
        if leader not in isr and p.leader_recovery_state != RECOVERING:
            violate("leader-in-isr", f"{desc}: leader {leader} is not in the ISR {_show(isr)} "
                    "and no unclean election is recorded (leader recovery state "
                    f"{p.leader_recovery_state}, not RECOVERING)", offset=offset, record=desc)
        elif leader not in replicas:
            violate("leader-in-isr", f"{desc}: leader {leader} is not a replica "
                    f"{_show(replicas)}", offset=offset, record=desc)
    unknown = [r for r in replicas if r not in broker_ids]
    if unknown:
        violate("replicas-registered", f"{desc}: replicas {_show(unknown)} are not registered "
                f"brokers (registered: {_show(sorted(broker_ids))})", offset=offset,
                record=desc)


# ------------------------------------------------------------------ across files

HEADER_KEY = "snapshot-header"


def snapshot_records(data):
    """`(timestamp_ms, [(offset, value, record)], topic_names)` of a snapshot file that
    decodes (damage raises `CorruptRecordError` / `ProtocolError`): a plain read for the
    checks that compare files, which `analyze_file` checked already."""
    with R.cyclic_gc_paused():
        batches = codec.decode_batches(data)
        timestamp = None
        if batches and batches[0].is_control and batches[0].records:
            type_id, header = _control_type(batches[0])
            if type_id == SNAPSHOT_HEADER:
                timestamp = header.last_contained_log_timestamp
        data_records = [r for b in batches if not b.is_control for r in b.records]
        values = [r.value for r in data_records]
        decoded = R.decode_values(values)
        entries = [(r.offset, v, d[0]) for r, v, d in zip(data_records, values, decoded)]
    names = {rec.topic_id: rec.name for _, _, rec in entries if type(rec) is R.TopicRecord}
    return timestamp, entries, names


def keyed(entries):
    """{key: (offset, value, record)}; a key seen again gets "#2", "#3", ... appended."""
    out = {}
    for entry in entries:
        key = record_key(entry[2])
        if key in out:
            n = 2
            while f"{key}#{n}" in out:
                n += 1
            key = f"{key}#{n}"
        out[key] = entry
    return out


class Fingerprint(NamedTuple):
    """One record of a snapshot, for comparing two files: what it is about, where it is,
    a hash of its bytes, and the bytes (to say how two records differ)."""

    key: str
    offset: int
    hash: str
    value: bytes


def fingerprints(data):
    """The `Fingerprint`s of a snapshot file's records, the header's timestamp first (key
    "snapshot-header", offset 0, value its 8 bytes)."""
    timestamp, entries, _ = snapshot_records(data)
    header = _TIMESTAMP.pack(-1 if timestamp is None else timestamp)
    out = [Fingerprint(HEADER_KEY, 0, hashlib.sha1(header).hexdigest(), header)]
    for key, (offset, value, _) in keyed(entries).items():
        out.append(Fingerprint(key, offset, hashlib.sha1(value).hexdigest(), value))
    return out


def topic_names(prints):
    """{topic id: name} of the TopicRecords among `prints` (`Fingerprint`s or any rows with
    `key` and `value`)."""
    out = {}
    for fp in prints:
        if fp.key.startswith("topic/") and fp.value is not None:
            [(record, _)] = R.decode_values([fp.value])
            out[record.topic_id] = record.name
    return out


class Difference(NamedTuple):
    """A record in which file A (the one reported) differs from file B: present in one
    only (the other's offset and value None) or with other bytes."""

    key: str
    offset: int
    value: bytes
    other_offset: int
    other_value: bytes


def diff_fingerprints(mine, theirs):
    """The `Difference`s between two files' fingerprints, ordered by offset in `mine`
    (records only `theirs` holds last, by their offset)."""
    a = {f.key: f for f in mine}
    b = {f.key: f for f in theirs}
    out = []
    for key, fa in a.items():
        fb = b.get(key)
        if fb is None:
            out.append(Difference(key, fa.offset, fa.value, None, None))
        elif fa.hash != fb.hash:
            out.append(Difference(key, fa.offset, fa.value, fb.offset, fb.value))
    for key, fb in b.items():
        if key not in a:
            out.append(Difference(key, None, None, fb.offset, fb.value))
    out.sort(key=lambda d: (d.offset is None, d.offset if d.offset is not None
                            else d.other_offset, d.key))
    return out


class FileSummary(NamedTuple):
    """The per-file facts the cross-file checks need."""

    node: str
    path: str
    snapshot_id: tuple
    digest: str


def plan_node_comparisons(summaries):
    """Which files to compare for `nodes-agree`: `(pairs, ids_compared)`.

    Files are grouped by snapshot id (damaged files and files without an id are left out).
    In a group of two or more whose digests differ, the digest most files share is the
    reference (on a tie, the one of the file that sorts first by node and path); every file
    with another digest is paired with the first reference file: `(file, reference)`.
    `ids_compared` counts the ids held by two files or more."""
    groups = {}
    for s in summaries:
        if s.snapshot_id is not None and s.digest is not None:
            groups.setdefault(tuple(s.snapshot_id), []).append(s)
    pairs = []
    compared = 0
    for sid in sorted(groups):
        group = sorted(groups[sid], key=lambda s: (s.node, s.path))
        if len(group) < 2:
            continue
        compared += 1
        counts = {}
        for s in group:
            counts[s.digest] = counts.get(s.digest, 0) + 1
        if len(counts) == 1:
            continue
        best = max(counts.values())
        reference_digest = next(s.digest for s in group if counts[s.digest] == best)
        reference = next(s for s in group if s.digest == reference_digest)
        pairs.extend((s, reference) for s in group if s.digest != reference_digest)
    return pairs, compared


def _decode_value(key, value):
    if value is None:
        return None
    if key == HEADER_KEY:
        return _TIMESTAMP.unpack(value)[0]
    [(record, _)] = R.decode_values([value])
    return record


def node_difference_violations(pair, differences, total, topic_names=None):
    """`nodes-agree` violations of `pair` = (file, reference) (`FileSummary`s) from its
    first `Difference`s and their `total` count."""
    mine, ref = pair
    here = f"{mine.node}'s file"
    there = f"{ref.node}'s {os.path.basename(ref.path)}"
    sid = snapshot_id_text(mine.snapshot_id)
    out = []
    for d in differences:
        a, b = _decode_value(d.key, d.value), _decode_value(d.key, d.other_value)
        if d.key == HEADER_KEY:
            desc = "SnapshotHeader"
            message = (f"LastContainedLogTimestamp {a} in {here}, {b} in {there}")
        else:
            record = a if a is not None else b
            desc = describe(record, topic_names)
            if a is None:
                message = f"{desc} is missing; {there} holds it at offset {d.other_offset}"
            elif b is None:
                message = f"{desc} is not in {there}"
            else:
                message = f"{desc} differs: {field_differences(a, b, here, there)}"
        out.append(Violation("nodes-agree", mine.node, mine.path, sid, d.offset, None, desc,
                             f"snapshot {sid}: {message}", ref.path))
    if total > len(differences):
        out.append(Violation("nodes-agree", mine.node, mine.path, sid, None, None, None,
                             f"snapshot {sid}: {total - len(differences)} more records differ "
                             f"from {there} (not listed)", ref.path))
    return out


class EpochRegression(NamedTuple):
    """A partition whose epochs went back between two successive snapshots of a node."""

    node: str
    path: str
    snapshot_id: tuple
    topic_id: str
    topic_name: str
    partition_id: int
    offset: int
    leader_epoch: int
    partition_epoch: int
    prev_path: str
    prev_snapshot_id: tuple
    prev_leader_epoch: int
    prev_partition_epoch: int


def epoch_regressions(rows):
    """`(regressions, pairs_compared)` from partition rows
    `(node, path, snapshot_id, topic_id, topic_name, partition_id, offset, leader_epoch,
    partition_epoch)`: each partition is compared with itself in the previous snapshot
    (by id) of the same node that holds it."""
    by_partition = {}
    for row in rows:
        by_partition.setdefault((row[0], row[3], row[5]), []).append(row)
    out = []
    compared = 0
    for history in by_partition.values():
        history.sort(key=lambda r: (tuple(r[2]), r[1]))
        for prev, cur in zip(history, history[1:]):
            compared += 1
            if cur[7] < prev[7] or cur[8] < prev[8]:
                out.append(EpochRegression(cur[0], cur[1], tuple(cur[2]), cur[3], cur[4],
                                           cur[5], cur[6], cur[7], cur[8], prev[1],
                                           tuple(prev[2]), prev[7], prev[8]))
    out.sort(key=lambda r: (r.node, r.snapshot_id, r.path, r.offset))
    return out, compared


def epoch_violation(reg):
    """The `epochs-monotonic` violation of an `EpochRegression`."""
    topic = reg.topic_name or reg.topic_id
    desc = f"PartitionRecord {topic}-{reg.partition_id}"
    parts = []
    if reg.leader_epoch < reg.prev_leader_epoch:
        parts.append(f"leader epoch {reg.prev_leader_epoch} -> {reg.leader_epoch}")
    if reg.partition_epoch < reg.prev_partition_epoch:
        parts.append(f"partition epoch {reg.prev_partition_epoch} -> {reg.partition_epoch}")
    prev = snapshot_id_text(reg.prev_snapshot_id)
    cur = snapshot_id_text(reg.snapshot_id)
    return Violation("epochs-monotonic", reg.node, reg.path, cur, reg.offset, None, desc,
                     f"{desc}: {' and '.join(parts)} from snapshot {prev} "
                     f"({os.path.basename(reg.prev_path)}) to snapshot {cur}", reg.prev_path)
