"""kraftcore reads what a real Apache Kafka 4.4 node wrote. One combined node is formatted
with Kafka's `kafka-storage`, a topic is created and grown with Kafka's `kafka-topics`
(`TopicCommand`), 1000 keyed records go in through Kafka's console producer (lz4,
idempotent: a block of producer ids), the node writes metadata snapshots every 500 ms
until one holds that block, and it is stopped. Then:

* `kraftcore.log.Log.open` opens each data partition and returns every record, none lost;
* `kraftcore dump-log --metadata-decoder` decodes every record of Kafka's metadata log and
  snapshots, at the same offsets, with the same types and fields as Kafka's own dump-log
  (a type it does not know is named, never skipped: type 9999 in tests/cli/test_dump_log.py,
  and for verify in tests/spark/test_checks.py and test_job.py);
* `kraftcore metadata-shell --dir` shows the topic with its four partitions and its config,
  and on the newest snapshot Kafka's `kafka-metadata-shell` and kraftcore's show the same
  brokers, configs, topics and partitions;
* `kraftcore verify --snapshots __cluster_metadata-0 --logs` (one Spark run for the module)
  passes: every snapshot but Kafka's bootstrap snapshot (0-0, a note) equals the log
  replayed to it, and per snapshot file its batch and record counts and its brokers,
  topics, partitions and configs tables are what Kafka's dump-log prints for that file.

Without Java, or without Maven and cached jars, the tests skip on a developer's machine and
fail under CI (`.ci/run` sets CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from kraftcore.log import Log
from tests.peers.kafka_node import kafka_cluster, kafka_combined, kafka_jars_for_tests
from tests.peers.test_kafka_reads_kraftcore import (
    _CONTROL_NAMES,
    _agrees,
    _kafka_batches,
    _kafka_metadata_records,
    _ours_metadata_records,
    build_shell_classpath,
    compare_metadata_shells,
    dump_log,
)

RECORDS = 1000
TOOL_TIMEOUT_S = 180
VERIFY_TIMEOUT_S = 900  # one Spark job: about a minute on a quiet machine


def _kafka_tool(jars, main, *args, stdin=None):
    proc = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*", main, *args],
        input=stdin, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert proc.returncode == 0, f"{main} {args}: {proc.stdout[-2000:]} {proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def kafka_dirs(tmp_path_factory):
    """(jars, data dir) of a Kafka node that ran and stopped (see the module docstring)."""
    jars = kafka_jars_for_tests()
    tmp = tmp_path_factory.mktemp("kafka-wrote")
    with kafka_combined(tmp, extra_properties={
            "metadata.log.max.snapshot.interval.ms": 500}) as bootstrap:
        _kafka_tool(jars, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                    bootstrap, "--create", "--topic", "orders", "--partitions", "3",
                    "--replication-factor", "1", "--config", "retention.ms=86400000")
        _kafka_tool(jars, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                    bootstrap, "--alter", "--topic", "orders", "--partitions", "4")
        _kafka_tool(jars, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server",
                    bootstrap, "--topic", "orders", "--compression-codec", "lz4",
                    "--property", "parse.key=true", "--property", "key.separator=:",
                    stdin="".join(f"k{i}:v{i}\n" for i in range(RECORDS)))
        # The producer is idempotent: its broker asked for a block of producer ids. Wait
        # for a snapshot that holds it (the node snapshots every 500 ms while its log grows,
        # and its controller appends a NoOpRecord every 500 ms).
        metadata = tmp / "data" / "__cluster_metadata-0"
        deadline = time.monotonic() + 60
        while not _snapshot_with_producer_ids(metadata):
            assert time.monotonic() < deadline, \
                "Kafka wrote no metadata snapshot holding its producer ids"
            time.sleep(0.2)
    return jars, tmp / "data"


def _snapshot_with_producer_ids(metadata):
    from kraftcore.metadata import records as R
    from kraftcore.metadata.snapshot import decode_snapshot

    for name in os.listdir(metadata):
        if name.endswith(".checkpoint") and not name.startswith("0" * 20):
            records, _ = decode_snapshot((metadata / name).read_bytes())
            if any(type(r) is R.ProducerIdsRecord for r in records):
                return True
    return False


def test_kraftcore_opens_kafkas_partitions_and_reads_every_record(kafka_dirs, tmp_path):
    _, data = kafka_dirs
    got = {}
    partitions = sorted(d for d in os.listdir(data) if d.startswith("orders-"))
    assert partitions == [f"orders-{i}" for i in range(4)]
    for name in partitions:
        copy = tmp_path / name  # Log.open writes its own checkpoints: Kafka's dir stays as is
        shutil.copytree(data / name, copy)
        log = Log.open(copy)
        try:
            assert log.recovery.truncated_bytes == 0 and not log.recovery.set_aside
            offset = 0
            while offset < log.log_end_offset:
                read = log.read(offset, 1 << 20)
                for batch in read.batches():
                    assert batch.compression == 3  # lz4, as the console producer sent it
                    for r in batch.records:
                        got[r.key.decode()] = r.value.decode()
                offset = read.next_offset
        finally:
            log.close()
    assert got == {f"k{i}": f"v{i}" for i in range(RECORDS)}


def test_kraftcore_decodes_kafkas_metadata_log_and_snapshots_as_kafka_does(kafka_dirs):
    jars, data = kafka_dirs
    metadata = data / "__cluster_metadata-0"
    files = sorted(f for f in os.listdir(metadata) if f.endswith((".log", ".checkpoint")))
    assert any(f.endswith(".checkpoint") for f in files)
    kinds = set()
    for name in files:
        path = metadata / name
        kafka = _kafka_metadata_records(
            dump_log(jars, "--cluster-metadata-decoder", "--files", str(path)))
        ours = _ours_metadata_records(path)
        assert [(o, k) for o, k, _ in ours] == [(o, k) for o, k, _ in kafka], name
        for (offset, kind, k), (_, _, o) in zip(kafka, ours):
            _agrees(k, o, f"{name} offset {offset} {kind}")
        kinds |= {k for _, k, _ in kafka}
    assert {"REGISTER_BROKER_RECORD", "TOPIC_RECORD", "PARTITION_RECORD", "CONFIG_RECORD",
            "FEATURE_LEVEL_RECORD"} <= kinds


def test_kraftcore_metadata_shell_shows_kafkas_topic(kafka_dirs):
    _, data = kafka_dirs
    metadata = str(data / "__cluster_metadata-0")

    def shell(*command):
        proc = subprocess.run(["kraftcore", "metadata-shell", "--dir", metadata, *command],
                              capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, "PATH": _venv_path()})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert shell("ls", "/image/topics/byName").split() == ["orders"]
    assert sorted(shell("ls", "/image/topics/byName/orders").split()) == \
        ["0", "1", "2", "3", "id", "name"]
    assert "/image/configs/TOPIC:orders/retention.ms" in shell("find", "/image/configs")
    assert shell("cat", "/image/configs/TOPIC:orders/retention.ms").strip() == "86400000"


def _venv_path():
    import sys

    return os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


def test_kafkas_metadata_shell_and_kraftcores_agree_on_kafkas_snapshot(kafka_dirs, tmp_path):
    jars, data = kafka_dirs
    metadata = data / "__cluster_metadata-0"
    newest = max(f for f in os.listdir(metadata) if f.endswith(".checkpoint"))
    seen = compare_metadata_shells(build_shell_classpath(jars, tmp_path), metadata / newest)
    assert seen["broker"] == 1 and seen["partition"] == 2 * 4 and seen["config"] >= 2


# ------------------------------------------------------------------ kraftcore verify

@pytest.fixture(scope="module")
def verified(kafka_dirs, tmp_path_factory):
    """One `kraftcore verify --snapshots <Kafka's __cluster_metadata-0> --logs` run, with
    its report (--output) and tables (--export): (process, report, tables directory)."""
    import json

    _, data = kafka_dirs
    out = tmp_path_factory.mktemp("verify")
    # Spark's files go to a cache of the test, and no class-data archive is recorded (that
    # would start a recorder process that outlives the run; docs/verify.md)
    proc = subprocess.run(
        ["kraftcore", "verify", "--snapshots", str(data / "__cluster_metadata-0"), "--logs",
         "--output", str(out / "report.json"), "--export", str(out / "tables"), "--quiet"],
        capture_output=True, text=True, timeout=VERIFY_TIMEOUT_S, check=False,
        env={**os.environ, "PATH": _venv_path(), "XDG_CACHE_HOME": str(out / "cache"),
             "KRAFTCORE_SPARK_CDS": "0"})
    report = json.loads((out / "report.json").read_text()) \
        if (out / "report.json").exists() else None
    return proc, report, out / "tables"


# verify's table -> (the record type in Kafka's dump, {column: Kafka's JSON field})
_TABLES = {
    "brokers": ("REGISTER_BROKER_RECORD", {
        "broker_id": "brokerId", "broker_epoch": "brokerEpoch",
        "incarnation_id": "incarnationId", "rack": "rack", "fenced": "fenced",
        "in_controlled_shutdown": "inControlledShutdown"}),
    "topics": ("TOPIC_RECORD", {"topic_id": "topicId", "name": "name"}),
    "partitions": ("PARTITION_RECORD", {
        "topic_id": "topicId", "partition_id": "partitionId", "replicas": "replicas",
        "isr": "isr", "removing_replicas": "removingReplicas",
        "adding_replicas": "addingReplicas", "leader": "leader",
        "leader_recovery_state": "leaderRecoveryState", "leader_epoch": "leaderEpoch",
        "partition_epoch": "partitionEpoch"}),
    "configs": ("CONFIG_RECORD", {"resource_type": "resourceType",
                                  "resource_name": "resourceName", "name": "name",
                                  "value": "value"}),
}

# tagged fields Kafka's JSON leaves out at their default
_TAGGED_DEFAULTS = {"leaderRecoveryState": 0}


def test_kraftcore_verify_passes_on_kafkas_files_and_counts_as_kafkas_dump_log(
        kafka_dirs, verified):
    import pyarrow.parquet as pq

    jars, data = kafka_dirs
    proc, report, tables = verified
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["ok"] and report["engine"] == "spark"
    assert {c["name"]: c["status"] for c in report["checks"]} == dict.fromkeys(
        (c["name"] for c in report["checks"]), "passed")
    metadata = data / "__cluster_metadata-0"
    names = sorted(f for f in os.listdir(metadata) if f.endswith(".checkpoint"))
    paths = [str(metadata / name) for name in names]
    assert [f["path"] for f in sorted(report["files"], key=lambda f: f["path"])] == paths
    # every snapshot but Kafka's bootstrap snapshot (0-0) equals the log replayed to it
    bootstrap = [p for p in paths if os.path.basename(p).startswith("0" * 20 + "-")]
    logged = {c["name"]: c["checked"] for c in report["checks"]}["log-replay"]
    assert logged == len(paths) - len(bootstrap) >= 2
    assert [n.split(": ")[1] for n in report["notes"]] == bootstrap
    # Kafka's dump of the same files, one section per file
    text = dump_log(jars, "--cluster-metadata-decoder", "--files", ",".join(paths))
    sections = text.split("Dumping ")[1:]
    assert [section.splitlines()[0] for section in sections] == paths
    rows = {name: pq.read_table(tables / name).to_pylist() for name in _TABLES}
    kinds = set()
    for path, section, facts in zip(paths, sections, sorted(report["files"],
                                                           key=lambda f: f["path"])):
        records = [(offset, kind, doc)
                   for offset, kind, doc in _kafka_metadata_records(section)
                   if kind not in _CONTROL_NAMES.values()]
        assert (facts["batches"], facts["records"]) == (len(_kafka_batches(section)),
                                                        len(records)), path
        kinds |= {kind for _, kind, _ in records}
        for table, (kind, columns) in _TABLES.items():
            theirs = {offset: {column: doc["data"].get(field, _TAGGED_DEFAULTS.get(field))
                               for column, field in columns.items()}
                      for offset, k, doc in records if k == kind}
            ours = {row["offset"]: {column: row[column] for column in columns}
                    for row in rows[table] if row["path"] == path}
            assert ours == theirs, (path, table)
    assert {"FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "TOPIC_RECORD",
            "PARTITION_RECORD", "CONFIG_RECORD", "PRODUCER_IDS_RECORD"} <= kinds


def test_kraftcore_decodes_every_record_a_kafka_quorum_wrote(tmp_path):
    """A Kafka quorum of 3 controllers and a broker (separate JVMs), whose logs hold what a
    combined node's do not (three controller registrations, a metadata transaction):
    every record of every node's metadata log decodes in kraftcore, at the same offsets
    with the same types and fields as Kafka's own dump-log says. (The ClearElrRecord and
    UnregisterControllerRecord such a quorum may write later are decoded and replayed in
    tests/metadata.)"""
    jars = kafka_jars_for_tests()
    with kafka_cluster(tmp_path / "quorum") as cluster:
        broker = f"127.0.0.1:{cluster.broker_ports()[4]}"
        _kafka_tool(jars, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker,
                    "--create", "--topic", "orders", "--partitions", "2",
                    "--replication-factor", "1")
        nodes = {i: n["metadata_dir"] / "__cluster_metadata-0" for i, n in cluster.nodes.items()}
    kinds = set()
    for node_id, metadata in sorted(nodes.items()):
        for name in sorted(f for f in os.listdir(metadata) if f.endswith(".log")):
            path = metadata / name
            kafka = _kafka_metadata_records(
                dump_log(jars, "--cluster-metadata-decoder", "--files", str(path)))
            ours = _ours_metadata_records(path)
            assert [(o, k) for o, k, _ in ours] == [(o, k) for o, k, _ in kafka], \
                f"node {node_id} {name}"
            for (offset, kind, k), (_, _, o) in zip(kafka, ours):
                _agrees(k, o, f"node {node_id} {name} offset {offset} {kind}")
            kinds |= {k for _, k, _ in kafka}
    assert {"REGISTER_CONTROLLER_RECORD", "BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD",
            "TOPIC_RECORD", "PARTITION_RECORD"} <= kinds, kinds
