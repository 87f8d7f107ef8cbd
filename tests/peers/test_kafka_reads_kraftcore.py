"""Apache Kafka's own tools read the files kraftcore writes (Kafka 4.4.0's jars from
tests/peers/kafka/fetch.sh):

* `kafka-dump-log` (`org.apache.kafka.tools.DumpLogSegments`) on data segments written by
  `kraftcore.log.Log`, uncompressed and lz4 batches, keys, null keys, headers and several
  segments; `--verify-index-only` on their `.index` and `.timeindex`, which must find
  nothing, and which does find a planted mismatch (so the check can fail);
* `kafka-dump-log --cluster-metadata-decoder` on a metadata segment holding every record
  type kraftcore writes, and on a snapshot, decoded as kraftcore's `dump-log --json` does;
* `kafka-metadata-shell` (`org.apache.kafka.shell.MetadataShell --snapshot FILE tree
  /image`) on a snapshot of a history run by kraftcore's QuorumController and written by
  its snapshot writer (brokers with listeners, one fenced; topics, one partition led by an
  unclean election; topic and broker configs): its brokers, configs, topics and partitions
  are the paths and values `kraftcore metadata-shell` shows (`compare_metadata_shells`,
  also run on a Kafka node's snapshot by test_kraftcore_reads_kafka.py). The shell is
  kafka-shell 4.3.1 over the 4.4.0 jars, with tests/peers/kafka/shell-compat compiled by
  `javac` (its README says why).

Without Java (a JDK for the shell), or without Maven and cached jars, the tests skip on a
developer's machine and fail under CI (`.ci/run` sets CI)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess

import pytest

from kraftcore import codec
from kraftcore.log import Log
from tests.peers.kafka_node import kafka_jars_for_tests

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
TOOL_TIMEOUT_S = 180
TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def jars():
    return kafka_jars_for_tests()


def dump_log(jars, *args):
    proc = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*", DUMP_LOG, *args],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr  # (the index checks report on stderr)


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    """A partition log with two segments: uncompressed and lz4 batches, keys and null keys,
    headers, a null value, index entries every 100 bytes. Returns its directory."""
    path = tmp_path_factory.mktemp("kraftcore-data") / "orders-0"
    log = Log.open(path, segment_bytes=1000, index_interval_bytes=100)
    try:
        for i in range(12):
            n = 3 + i % 4
            log.append(codec.encode_batch(
                [b"value-%d-%d" % (i, j) if (i, j) != (5, 1) else None for j in range(n)],
                keys=None if i % 3 == 2 else [b"key-%d-%d" % (i, j) for j in range(n)],
                headers=[[("trace", b"t%d" % j), ("origin", None)] if i % 2 else []
                         for j in range(n)],
                timestamps=[TS + 10 * i + j for j in range(n)],
                compression="lz4" if i % 2 else None), leader_epoch=i // 5)
        segments = log.segment_base_offsets
    finally:
        log.close()
    assert len(segments) >= 2
    return path


def _kafka_batches(text):
    """Kafka's dump as a list of (batch fields, [record fields]) with string values."""
    batches = []
    for line in text.splitlines():
        if line.startswith("baseOffset:"):
            batches.append((_fields(line), []))
        elif line.startswith("| offset:"):
            batches[-1][1].append(_fields(line[2:]))
    return batches


_FIELD = re.compile(r"(\w+): (\[[^\]]*\]|\S+)")


def _fields(line):
    fields = dict(_FIELD.findall(line))
    # key and payload run to the end of their text (they are the record's last fields)
    for name in ("payload", "key"):
        match = re.search(rf" {name}: (.*?)(?: payload: .*)?$", " " + line)
        if match:
            fields[name] = match.group(1)
    return fields


def _ours(path, base):
    with open(os.path.join(path, f"{base:020d}.log"), "rb") as f:
        data = f.read()
    return codec.decode_batches(data, verify=True)


def test_kafka_dump_log_reads_kraftcores_segments_record_for_record(jars, partition):
    files = sorted(f for f in os.listdir(partition) if f.endswith(".log"))
    out = dump_log(jars, "--deep-iteration", "--print-data-log", "--files",
                   ",".join(os.path.join(partition, f) for f in files))
    dumped = _kafka_batches(out)
    ours = [b for f in files for b in _ours(partition, int(f[:-4]))]
    assert len(dumped) == len(ours) == 12
    codecs = {0: "none", 3: "lz4"}
    for (fields, records), batch in zip(dumped, ours):
        assert fields["isvalid"] == "true"
        assert int(fields["baseOffset"]) == batch.base_offset
        assert int(fields["lastOffset"]) == batch.base_offset + batch.last_offset_delta
        assert int(fields["count"]) == batch.records_count
        assert int(fields["partitionLeaderEpoch"]) == batch.partition_leader_epoch
        assert int(fields["position"]) == batch.position
        assert int(fields["size"]) == batch.size_bytes
        assert int(fields["crc"]) == batch.crc
        assert fields["compresscodec"] == codecs[batch.compression]
        assert int(fields["CreateTime"]) == batch.max_timestamp
        assert len(records) == batch.records_count
        for r, ours_r in zip(records, batch.records):
            assert int(r["offset"]) == ours_r.offset
            assert int(r["CreateTime"]) == ours_r.timestamp
            assert int(r["keySize"]) == (-1 if ours_r.key is None else len(ours_r.key))
            assert int(r["valueSize"]) == (-1 if ours_r.value is None else len(ours_r.value))
            assert r["headerKeys"] == "[" + ",".join(k for k, _ in ours_r.headers) + "]"
            if ours_r.key is not None:
                assert r["key"] == ours_r.key.decode()
            # a null value prints no payload at all
            assert r.get("payload") == (None if ours_r.value is None else ours_r.value.decode())


def test_kafka_verifies_kraftcores_indexes_and_finds_a_planted_mismatch(jars, partition,
                                                                       tmp_path):
    indexes = sorted(os.path.join(partition, f) for f in os.listdir(partition)
                     if f.endswith((".index", ".timeindex")))
    assert sum(1 for f in indexes if os.path.getsize(f)) >= 4  # entries to check
    out = dump_log(jars, "--verify-index-only", "--files", ",".join(indexes))
    assert "ismatch" not in out and "out of order" not in out.lower(), out
    # the same check on a copy whose first offset-index entry names the next offset: Kafka
    # reports it
    bad = tmp_path / "orders-0"
    shutil.copytree(partition, bad)
    index = bad / "00000000000000000000.index"
    raw = bytearray(index.read_bytes())
    (relative,) = struct.unpack_from(">i", raw, 0)
    struct.pack_into(">i", raw, 0, relative + 1)
    index.write_bytes(raw)
    out = dump_log(jars, "--verify-index-only", "--files", str(index))
    assert f"Index offset: {relative + 1}, log offset: {relative}" in out, out


# ------------------------------------------------------------------------------ metadata


def _metadata_log(directory):
    """A `__cluster_metadata` segment of kraftcore's: a LeaderChange control batch, every
    metadata record type kraftcore knows (one batch each, at its highest version), and
    realistic topics and partitions. Returns the segment's path."""
    from kraftcore.metadata import records as R
    from kraftcore.raft import control as C

    log = Log.open(directory / "__cluster_metadata-0", fsync="never", index_interval_bytes=1)
    try:
        voter = C.LeaderChangeMessage.Voter
        log.append(C.encode_control_batch([C.LeaderChangeMessage(
            version=0, leader_id=1, voters=[voter(voter_id=1), voter(voter_id=2)],
            granting_voters=[voter(voter_id=1)])], base_offset=0, leader_epoch=1,
            timestamp=TS), leader_epoch=1)
        kinds = sorted(n for n in dir(R) if n.endswith("Record") and isinstance(getattr(R, n), type))
        assert len(kinds) >= 25
        for name in kinds:
            log.append(R.encode_batch([getattr(R, name)()], base_offset=0, leader_epoch=1,
                                      timestamp=TS), leader_epoch=1)
        from kraftcore.types import Uuid
        from tests.metadata.test_loader import config, mv, partition, topic

        topic_id = Uuid(bytes(range(1, 17)))
        log.append(R.encode_batch([mv(), topic("orders", topic_id), partition(topic_id, 0),
                                   partition(topic_id, 1), config("retention.ms", "1000")],
                                  base_offset=0, leader_epoch=2, timestamp=TS + 1),
                   leader_epoch=2)
    finally:
        log.close()
    return directory / "__cluster_metadata-0" / "00000000000000000000.log"


def _snapshot(directory):
    """A snapshot file of kraftcore's snapshot writer (an image of a topic, partition and
    config), named as Kafka names it."""
    from kraftcore.metadata.snapshot import encode_snapshot
    from tests.metadata.test_loader import _snapshot_image

    image = _snapshot_image()
    path = directory / f"{image.end_offset:020d}-{image.epoch:010d}.checkpoint"
    path.write_bytes(encode_snapshot(image, timestamp_ms=TS))
    return path


_CONTROL_NAMES = {"LeaderChange": "LEADER_CHANGE", "SnapshotHeader": "SNAPSHOT_HEADER",
                  "SnapshotFooter": "SNAPSHOT_FOOTER", "KRaftVersion": "KRAFT_VERSION",
                  "KRaftVoters": "KRAFT_VOTERS"}


def _kafka_metadata_records(text):
    """[(offset, kind, JSON)] from Kafka's --cluster-metadata-decoder dump: kind is the
    record type for a metadata record, the control type for a control record."""
    import json

    out = []
    for line in text.splitlines():
        if not line.startswith("| offset:"):
            continue
        offset = int(line.split()[2])
        match = re.search(r" payload: (\{.*\})$", line)
        if match:
            payload = json.loads(match.group(1))
            out.append((offset, payload["type"], payload))
            continue
        match = re.search(r" (\w+):? (\{.*\})$", line)  # (SnapshotHeader has no colon)
        assert match and match.group(1) in _CONTROL_NAMES, line
        out.append((offset, _CONTROL_NAMES[match.group(1)], json.loads(match.group(2))))
    return out


def _ours_metadata_records(path):
    import io
    import json

    from kraftcore.cli import dump_log as ours

    out, err = io.StringIO(), io.StringIO()
    assert ours.run([str(path)], True, True, out, err) == 0, err.getvalue()
    rows = []
    for line in out.getvalue().splitlines():
        doc = json.loads(line)
        if "payload" in doc:
            rows.append((doc["offset"], doc["payload"]["type"], doc["payload"]))
        elif "controlType" in doc:
            rows.append((doc["offset"], doc["controlType"], doc["data"]))
    return rows


def _agrees(kafka, ours, where):
    """Every field Kafka prints is kraftcore's, with the same value; a field only kraftcore
    prints is a tagged field at its default, which Kafka's JSON leaves out."""
    if isinstance(kafka, dict):
        assert isinstance(ours, dict), where
        for key, value in kafka.items():
            assert key in ours, f"{where}: kraftcore has no {key}"
            _agrees(value, ours[key], f"{where}.{key}")
        for key in ours.keys() - kafka.keys():
            # (-2: PartitionChangeRecord's "no leader change")
            assert ours[key] in (None, [], 0, -1, -2), f"{where}: only kraftcore prints {key}"
    elif isinstance(kafka, list):
        assert isinstance(ours, list) and len(ours) == len(kafka), where
        for i, (k, o) in enumerate(zip(kafka, ours)):
            _agrees(k, o, f"{where}[{i}]")
    else:
        assert kafka == ours, f"{where}: Kafka {kafka!r}, kraftcore {ours!r}"


def _ours_batches(path):
    import io
    import json

    from kraftcore.cli import dump_log as ours

    out, err = io.StringIO(), io.StringIO()
    assert ours.run([str(path)], True, True, out, err) == 0, err.getvalue()
    return [json.loads(line)["batch"] for line in out.getvalue().splitlines()
            if line.startswith('{"batch"')]


# Kafka's batch line field -> kraftcore's dump-log --json batch field
_BATCH_FIELDS = {"baseOffset": "baseOffset", "lastOffset": "lastOffset", "count": "count",
                 "baseSequence": "baseSequence", "lastSequence": "lastSequence",
                 "producerId": "producerId", "producerEpoch": "producerEpoch",
                 "partitionLeaderEpoch": "partitionLeaderEpoch",
                 "isTransactional": "isTransactional", "isControl": "isControl",
                 "position": "position", "CreateTime": "maxTimestamp", "size": "size",
                 "magic": "magic", "compresscodec": "compressCodec", "crc": "crc"}


@pytest.mark.parametrize("kind", ["segment", "snapshot"])
def test_kafka_decodes_every_metadata_record_kraftcore_writes(jars, tmp_path, kind):
    path = _metadata_log(tmp_path) if kind == "segment" else _snapshot(tmp_path)
    text = dump_log(jars, "--cluster-metadata-decoder", "--files", str(path))
    kafka_batches = [fields for fields, _ in _kafka_batches(text)]
    our_batches = _ours_batches(path)
    assert len(kafka_batches) == len(our_batches) > 0
    for k, o in zip(kafka_batches, our_batches):
        assert k["isvalid"] == "true"
        for kafka_name, our_name in _BATCH_FIELDS.items():
            value = o[our_name]
            text_value = str(value).lower() if isinstance(value, bool) else str(value)
            assert k[kafka_name] == text_value, (kafka_name, k, o)
    kafka = _kafka_metadata_records(text)
    ours = _ours_metadata_records(path)
    assert [(o, k) for o, k, _ in kafka] == [(o, k) for o, k, _ in ours]
    for (offset, kind_, k), (_, _, o) in zip(kafka, ours):
        _agrees(k, o, f"offset {offset} {kind_}")
    kinds = {k for _, k, _ in kafka}
    if kind == "segment":
        assert len(kinds) >= 26 and "LEADER_CHANGE" in kinds
    else:
        assert {"SNAPSHOT_HEADER", "SNAPSHOT_FOOTER", "TOPIC_RECORD"} <= kinds


# ------------------------------------------------------------------------ metadata shell

METADATA_SHELL = "org.apache.kafka.shell.MetadataShell"
SHELL_COMPAT = os.path.join(os.path.dirname(__file__), "kafka", "shell-compat")
SHELL_ATTEMPTS = 4
# the parts of the tree compared: brokers, configs, topics (with their partitions)
SHELL_AREAS = ("/image/cluster/brokers", "/image/configs", "/image/topics")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def build_shell_classpath(jars, directory):
    """The classpath of Kafka's metadata shell: the jars, then shell-compat compiled into
    `directory` (see its README: the shell on Maven Central is 4.3.1's, run over 4.4.0's
    image)."""
    from tests.peers.kafka_node import unavailable

    shells = [f for f in os.listdir(jars) if f.startswith("kafka-shell-")]
    assert shells, f"no kafka-shell jar in {jars}: run tests/peers/kafka/fetch.sh"
    if shutil.which("javac") is None:
        unavailable("needs javac (a JDK) to build tests/peers/kafka/shell-compat")
    sources = [os.path.join(d, f) for d, _, files in os.walk(SHELL_COMPAT)
               for f in files if f.endswith(".java")]
    proc = subprocess.run(["javac", "-nowarn", "-d", str(directory), "-cp", f"{jars}/*",
                           *sources],
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return f"{jars}/*{os.pathsep}{directory}"


@pytest.fixture(scope="module")
def shell_classpath(jars, tmp_path_factory):
    return build_shell_classpath(jars, tmp_path_factory.mktemp("shell-compat"))


def kafka_metadata_shell(classpath, snapshot, *command, last_offset):
    """Kafka's shell's output of one command on `snapshot`. The shell runs the command once
    the image has any offset above 0 (`waitUntilCaughtUp`), which can be before its image is
    published: the output counts only when its image ends at `last_offset` (its provenance);
    otherwise it runs again, a few times at most."""
    outputs = []
    for _ in range(SHELL_ATTEMPTS):
        proc = subprocess.run(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Dlog4j2.level=OFF", "-cp",
             classpath, METADATA_SHELL, "--snapshot", str(snapshot), *command],
            capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        if re.search(rf"^\s*offset {last_offset}, ", proc.stdout, re.M):
            return proc.stdout
        outputs.append(proc.stdout)
    pytest.fail(f"Kafka's shell never showed the image up to offset {last_offset}:\n"
                + outputs[-1][-3000:])


def kraftcore_metadata_shell(*args, stdin=None):
    import sys

    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    proc = subprocess.run(["kraftcore", "metadata-shell", *args], input=stdin,
                          capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                          check=False, env={**os.environ, "PATH": path})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _cluster_snapshot(directory):
    """A snapshot of a cluster's history run by kraftcore's QuorumController (over a
    one-voter LocalQuorum) and written by its snapshot writer: four brokers with two
    listeners each, three unfenced and one that never heartbeats (fenced); topics `orders`
    (4 partitions, 3 replicas, retention.ms), `payments` (2 partitions, cleanup.policy) and
    `audit` (assigned replicas; broker 3 then 1 fenced, 3 back, an unclean election makes 3
    the leader of audit-0, RECOVERING); a cluster-wide broker config and one of broker 2.
    Returns (path, image)."""
    import random

    from kraftcore.controller.local import LocalQuorum
    from kraftcore.controller.replication import UNCLEAN_LEADER_ELECTION, NewTopic
    from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
    from kraftcore.metadata.loader import MetadataLoader
    from kraftcore.metadata.snapshot import encode_snapshot
    from kraftcore.types import Uuid

    quorum = LocalQuorum(seed=11)
    rng = random.Random(11)
    epochs = {}
    for b in (1, 2, 3, 4):
        epochs[b] = quorum.call(
            "register_broker", b, Uuid.random(rng), rack=None if b == 3 else f"rack-{b % 2}",
            listeners=[("PLAINTEXT", "127.0.0.1", 9090 + b, 0),
                       ("REPLICATION", "127.0.0.1", 19090 + b, 2)],
            features={"metadata.version": (7, 21)}, log_dirs=[Uuid.random(rng)]).broker_epoch

    def heartbeat(b, **kwargs):
        quorum.call("broker_heartbeat", b, epochs[b], metadata_offset=quorum.next_offset(),
                    **kwargs)

    for b in (1, 2, 3):
        heartbeat(b)
    results = quorum.call("create_topics", [
        NewTopic("orders", 4, 3, configs={"retention.ms": "86400000"}),
        NewTopic("payments", 2, 2), NewTopic("audit", assignments={0: [3, 1], 1: [1, 2]})])
    assert [r.error_code for r in results] == [0, 0, 0]
    assert quorum.call("incremental_alter_configs", [
        (CONFIG_TOPIC, "payments", [("cleanup.policy", "set", "compact")]),
        (CONFIG_TOPIC, "audit", [(UNCLEAN_LEADER_ELECTION, "set", "true")]),
        (CONFIG_BROKER, "", [("min.insync.replicas", "set", "2")]),
        (CONFIG_BROKER, "2", [("compression.type", "set", "lz4")])]) == [(0, None)] * 4
    heartbeat(3, want_fence=True)
    heartbeat(1, want_fence=True)  # audit-0 has no in-sync replica left
    heartbeat(3)
    quorum.call("elect_leaders", "unclean", [("audit", 0)])
    heartbeat(1)
    image = MetadataLoader().apply(quorum.storage.batches())
    path = directory / f"{image.end_offset:020d}-{image.epoch:010d}.checkpoint"
    path.write_bytes(encode_snapshot(image, timestamp_ms=TS))
    return path, image


def _last_record_offset(path):
    """The offset of the last metadata record in a snapshot file (batch offsets count from 0
    in the file)."""
    batches = codec.decode_batches(path.read_bytes(), verify=True)
    return max(b.base_offset + b.last_offset_delta for b in batches if not b.is_control)


def _kafka_tree(text):
    """Kafka's `tree /image` as {path: value} in its order: a directory's value is None, a
    leaf's its text. Every name is printed as `name:`, a leaf's value on the next line, two
    spaces deeper (no value here ends with a colon)."""
    tree, names = {}, []
    for line in text.splitlines():
        content = line.lstrip(" ")
        depth = (len(line) - len(content)) // 2
        if content.endswith(":") and depth <= len(names):
            del names[depth:]
            names.append(content[:-1])
            tree["/image/" + "/".join(names)] = None
        else:
            assert depth == len(names), line
            tree["/image/" + "/".join(names)] = content
    return tree


def _split_top(text):
    """`text` split at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def _kafka_value(text):
    """A value of Kafka's toString: `Name(key=value, ...)` as a dict, `[...]` a list,
    `{name: value, ...}` a dict, `'text'` its text; anything else stays as it is."""
    if re.match(r"^\w+\(.*\)$", text):
        return {key: _kafka_value(value) for key, _, value in
                (item.partition("=") for item in _split_top(text[text.index("(") + 1:-1]))}
    if text.startswith("[") and text.endswith("]"):
        return [_kafka_value(item) for item in _split_top(text[1:-1])]
    if text.startswith("{") and text.endswith("}"):
        return dict(item.split(": ", 1) for item in _split_top(text[1:-1]))
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1]
    return text


def _text(value):
    return "null" if value is None else str(value).lower() if isinstance(value, bool) \
        else str(value)


def _broker_as_kafka(record):
    """kraftcore's broker (RegisterBrokerRecord's JSON) in the fields and text of Kafka's
    BrokerRegistration."""
    cordoned = record.get("cordonedLogDirs")
    return {
        "id": _text(record["brokerId"]), "epoch": _text(record["brokerEpoch"]),
        "incarnationId": record["incarnationId"],
        "listeners": sorted(({"listenerName": e["name"],
                              "securityProtocol": SECURITY_PROTOCOLS[e["securityProtocol"]],
                              "host": e["host"], "port": _text(e["port"])}
                             for e in record["endPoints"]),
                            key=lambda e: e["listenerName"]),
        "supportedFeatures": {f["name"]: f"{f['minSupportedVersion']}-"
                                         f"{f['maxSupportedVersion']}"
                              for f in record["features"]},
        "rack": "Optional.empty" if record["rack"] is None else f"Optional[{record['rack']}]",
        "fenced": _text(record["fenced"]),
        "inControlledShutdown": _text(record["inControlledShutdown"]),
        "isMigratingZkBroker": _text(record["isMigratingZkBroker"]),
        "directories": sorted(record["logDirs"]),
        "cordonedDirectories": "null" if cordoned is None else sorted(cordoned),
    }


def _partition_as_kafka(record):
    """kraftcore's partition (PartitionRecord's JSON) in the fields and text of Kafka's
    PartitionRegistration."""
    def ids(values):
        return [_text(v) for v in values or []]

    return {
        "replicas": ids(record["replicas"]), "directories": record["directories"],
        "isr": ids(record["isr"]), "removingReplicas": ids(record["removingReplicas"]),
        "addingReplicas": ids(record["addingReplicas"]),
        "elr": ids(record["eligibleLeaderReplicas"]),
        "lastKnownElr": ids(record["lastKnownElr"]),
        "leader": _text(record["leader"]),
        "leaderRecoveryState": ("RECOVERED", "RECOVERING")[record["leaderRecoveryState"]],
        "leaderEpoch": _text(record["leaderEpoch"]),
        "partitionEpoch": _text(record["partitionEpoch"]),
    }


def _in_areas(path):
    return any(path == area or path.startswith(area + "/") for area in SHELL_AREAS)


def compare_metadata_shells(classpath, snapshot):
    """Kafka's `tree /image` and kraftcore's `find` and `cat` on one snapshot file agree for
    brokers, configs and topics with their partitions: the same paths in the same order
    (but for the fields kraftcore shows below a record: a broker, a partition, which Kafka
    prints as one leaf), and the same value of every leaf, Kafka's toString and kraftcore's
    JSON put in one form. Returns how many of each kind were compared."""
    import collections
    import json
    import shlex

    kafka_tree = _kafka_tree(kafka_metadata_shell(
        classpath, snapshot, "tree", "/image", last_offset=_last_record_offset(snapshot)))
    kafka = {path: value for path, value in kafka_tree.items() if _in_areas(path)}
    leaves = {path: value for path, value in kafka.items() if value is not None}
    ours = kraftcore_metadata_shell("--snapshot", str(snapshot), "find",
                                    *SHELL_AREAS).splitlines()
    assert [p for p in ours if not any(p.startswith(leaf + "/") for leaf in leaves)] == \
        list(kafka)
    values = kraftcore_metadata_shell(
        "--snapshot", str(snapshot),
        stdin="".join(f"cat {shlex.quote(path)}\n" for path in leaves)).splitlines()
    assert len(values) == len(leaves)
    seen = collections.Counter()
    for (path, kafka_text), our_text in zip(leaves.items(), values):
        if kafka_text.startswith("BrokerRegistration("):
            theirs, mine = _kafka_value(kafka_text), _broker_as_kafka(json.loads(our_text))
            theirs["listeners"].sort(key=lambda e: e["listenerName"])
            if isinstance(theirs["directories"], list):
                theirs["directories"].sort()
            seen["broker"] += 1
            seen["fenced"] += theirs["fenced"] == "true"
        elif kafka_text.startswith("PartitionRegistration("):
            theirs, mine = _kafka_value(kafka_text), _partition_as_kafka(json.loads(our_text))
            seen["partition"] += 1
            seen["RECOVERING"] += theirs["leaderRecoveryState"] == "RECOVERING"
        else:
            theirs, mine = kafka_text, our_text
            seen["config" if path.startswith("/image/configs/") else "topic field"] += 1
        assert theirs == mine, path
    return seen


def test_kafka_metadata_shell_reads_kraftcores_snapshot_as_kraftcores_shell_does(
        shell_classpath, tmp_path):
    snapshot, image = _cluster_snapshot(tmp_path)
    seen = compare_metadata_shells(shell_classpath, snapshot)
    # every broker, partition (by id and by name), topic id and name, and config
    assert len(image.brokers) == 4 and image.partition_count() == 8
    assert seen == {"broker": 4, "fenced": 1, "partition": 2 * 8, "RECOVERING": 2,
                    "topic field": 2 * 2 * 3, "config": 5}
