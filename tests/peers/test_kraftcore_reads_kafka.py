"""kraftcore reads what a real Apache Kafka 4.4 node wrote. One combined node is formatted
with Kafka's `kafka-storage`, a topic is created and grown with Kafka's `kafka-topics`
(`TopicCommand`), 1000 keyed records go in through Kafka's console producer (lz4), the
node writes metadata snapshots every 500 ms, and it is stopped. Then:

* `kraftcore.log.Log.open` opens each data partition and returns every record, none lost;
* `kraftcore dump-log --metadata-decoder` decodes every record of Kafka's metadata log and
  snapshots (a type it does not know would be named, never skipped), at the same offsets,
  with the same types and fields as Kafka's own dump-log;
* `kraftcore metadata-shell --dir` shows the topic with its four partitions and its config.

Without Java, or without Maven and cached jars, the tests skip on a developer's machine and
fail under CI (`.ci/run` sets CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from kraftcore.log import Log
from tests.peers.kafka_node import kafka_combined, kafka_jars_for_tests
from tests.peers.test_kafka_reads_kraftcore import (
    _agrees,
    _kafka_metadata_records,
    _ours_metadata_records,
    dump_log,
)

RECORDS = 1000
TOOL_TIMEOUT_S = 180


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
        metadata = tmp / "data" / "__cluster_metadata-0"
        deadline = time.monotonic() + 60
        while not any(f.endswith(".checkpoint") and not f.startswith("0" * 20)
                      for f in os.listdir(metadata)):
            assert time.monotonic() < deadline, "Kafka wrote no metadata snapshot"
            time.sleep(0.2)
    return jars, tmp / "data"


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
