"""Apache Kafka's own admin tools against a running kraftcore quorum (3 controllers, 1
broker, `kraftcore cluster up` on 127.0.0.1), beside kraftcore's CLI:

* `kafka-metadata-quorum --bootstrap-controller describe --status` and `--replication`
  (`MetadataQuorumCommand`: DescribeCluster with the controller endpoint type to find the
  controllers, then DescribeQuorum v2) print the same cluster id, leader, epoch, voters
  with their endpoints, observers and high watermark as `kraftcore quorum describe`;
* `kafka-cluster list-endpoints --bootstrap-controller` (`ClusterTool`) lists the
  controllers each one registered (ControllerRegistration -> RegisterControllerRecord), and
  with `--bootstrap-server` the broker.

The high watermark and log end offsets move while the tools run (the active controller
writes a NoOpRecord every 500 ms), so Kafka's value must lie between kraftcore's read
just before and just after it.

Without Java, or without Maven and cached jars, the tests skip on a developer's machine and
fail under CI (`.ci/run` sets CI)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.peers.kafka_node import kafka_jars_for_tests
from tests.runtime.processes import LocalCluster, kraftcore, wait_for

TOOL_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def quorum(tmp_path_factory):
    jars = kafka_jars_for_tests()
    cluster = LocalCluster(tmp_path_factory.mktemp("kraftcore-quorum"), [], brokers=1)
    try:
        wait_for("the broker unfenced", lambda: cluster.brokers() == {4: "unfenced"})
        wait_for("every controller registered", lambda: _registered(cluster) == {1, 2, 3})
        yield jars, cluster
    finally:
        cluster.down()


def _registered(cluster):
    out = kraftcore("metadata-shell", "--dir",
                    f"{cluster.nodes[1]['dirs'][1]}/__cluster_metadata-0",
                    "ls", "/image/cluster/controllers", check=False).stdout
    return {int(x) for x in out.split()}


def _tool(jars, main, *args):
    proc = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*", main, *args],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert proc.returncode == 0, f"{main} {args}: {proc.stdout[-2000:]} {proc.stderr[-3000:]}"
    return proc.stdout


def _ours(cluster, what):
    return json.loads(kraftcore("quorum", "describe", "--bootstrap-controller",
                                cluster.bootstrap(), what, "--json").stdout)


def _status_lines(text):
    """Kafka's `describe --status`: {"LeaderId": "3", ...}."""
    return dict(re.match(r"(\w+):\s+(.*)", line).groups()
                for line in text.splitlines() if re.match(r"\w+:\s", line))


def test_kafka_metadata_quorum_status_agrees_with_kraftcore(quorum):
    jars, cluster = quorum
    before = _ours(cluster, "--status")
    kafka = _status_lines(_tool(jars, "org.apache.kafka.tools.MetadataQuorumCommand",
                                "--bootstrap-controller", cluster.bootstrap(),
                                "describe", "--status"))
    after = _ours(cluster, "--status")
    assert before["leader_id"] == after["leader_id"], "the leader changed during the test"
    assert kafka["ClusterId"] == after["cluster_id"] == cluster.description["cluster_id"]
    assert int(kafka["LeaderId"]) == after["leader_id"]
    assert int(kafka["LeaderEpoch"]) == after["leader_epoch"]
    assert before["high_watermark"] <= int(kafka["HighWatermark"]) <= after["high_watermark"]
    voters = json.loads(kafka["CurrentVoters"])
    assert [(v["id"], v["endpoints"]) for v in voters] == \
        [(v["id"], v["endpoints"]) for v in after["current_voters"]]
    controllers = {n["id"]: n["port"] for n in cluster.controllers()}
    assert [v["endpoints"] for v in voters] == \
        [[f"CONTROLLER://127.0.0.1:{controllers[v['id']]}"] for v in voters]
    assert [o["id"] for o in json.loads(kafka["CurrentObservers"])] == \
        [o["id"] for o in after["current_observers"]] == [4]


def test_kafka_metadata_quorum_replication_agrees_with_kraftcore(quorum):
    jars, cluster = quorum
    before = _ours(cluster, "--replication")
    text = _tool(jars, "org.apache.kafka.tools.MetadataQuorumCommand",
                 "--bootstrap-controller", cluster.bootstrap(), "describe", "--replication")
    after = _ours(cluster, "--replication")
    header, *rows = [line.split() for line in text.splitlines() if line.strip()]
    assert header[:2] == ["NodeId", "DirectoryId"] and header[-1] == "Status"
    kafka = {int(r[0]): {"leo": int(r[header.index("LogEndOffset")]), "status": r[-1]}
             for r in rows}

    def by_id(report):
        return {r["node_id"]: r for r in report["replicas"]}

    low, high = by_id(before), by_id(after)
    assert {i: k["status"] for i, k in kafka.items()} == \
        {i: r["status"] for i, r in high.items()}
    assert set(kafka) == {1, 2, 3, 4}
    for node_id, k in kafka.items():
        assert low[node_id]["log_end_offset"] <= k["leo"] <= high[node_id]["log_end_offset"]


def test_kafka_cluster_tool_lists_the_registered_controllers_and_the_broker(quorum):
    jars, cluster = quorum

    def endpoints(*bootstrap):
        out = _tool(jars, "org.apache.kafka.tools.ClusterTool", "list-endpoints", *bootstrap)
        header, *rows = [line.split() for line in out.splitlines() if line.strip()]
        return {int(r[0]): (r[1], int(r[2]), r[-1]) for r in rows}

    assert endpoints("--bootstrap-controller", cluster.bootstrap()) == {
        n["id"]: ("127.0.0.1", n["port"], "controller") for n in cluster.controllers()}
    assert endpoints("--bootstrap-server", f"127.0.0.1:{cluster.nodes[4]['port']}") == {
        4: ("127.0.0.1", cluster.nodes[4]["port"], "broker")}


CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def _java(jars, main, *args):
    return subprocess.Popen(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*", main, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _table(out):
    """The rows of one of kafka-consumer-groups' tables, as dicts by column name."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    return [dict(zip(header, row)) for row in rows]


def test_kafka_consumers_and_kafka_consumer_groups_on_kraftcores_coordinator(quorum):
    """Kafka's own Java consumer (`kafka-console-consumer --group`, the classic protocol)
    joins groups on kraftcore's coordinator: two of them share a topic of 6 partitions, 3
    each, as `kafka-consumer-groups --describe --members` shows; one alone reads every
    record and commits; then `kafka-consumer-groups` lists, describes (offsets, lag),
    resets, deletes offsets and deletes the group, and each step shows in the next."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    jars, cluster = quorum
    boot = f"127.0.0.1:{cluster.nodes[4]['port']}"
    admin = KafkaAdminClient(bootstrap_servers=boot)
    try:
        admin.create_topics([NewTopic("java-group-topic", 6, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=boot, acks="all")
    try:
        for i in range(60):
            producer.send("java-group-topic", value=b"v%d" % i, partition=i % 6)
        producer.flush(timeout=30)
    finally:
        producer.close()

    members = [_java(jars, CONSOLE_CONSUMER, "--bootstrap-server", boot, "--topic",
                     "java-group-topic", "--group", "java-pair", "--timeout-ms", "60000")
               for _ in range(2)]
    try:
        def described():
            proc = subprocess.run(
                ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*",
                 CONSUMER_GROUPS, "--bootstrap-server", boot, "--describe", "--group",
                 "java-pair", "--members"],
                capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
            rows = _table(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else []
            return [int(r["#PARTITIONS"]) for r in rows if "#PARTITIONS" in r]

        wait_for("two Java consumers sharing 6 partitions",
                 lambda: sorted(described()) == [3, 3], wait_s=90)
    finally:
        for proc in members:
            proc.terminate()
            proc.communicate(timeout=30)

    read = _tool(jars, CONSOLE_CONSUMER, "--bootstrap-server", boot, "--topic",
                 "java-group-topic", "--group", "java-alone", "--from-beginning",
                 "--max-messages", "60", "--timeout-ms", "60000")
    assert sorted(read.split()) == sorted(f"v{i}" for i in range(60))
    assert "java-alone" in _tool(jars, CONSUMER_GROUPS, "--bootstrap-server", boot,
                                 "--list").split()

    def offsets():
        rows = _table(_tool(jars, CONSUMER_GROUPS, "--bootstrap-server", boot, "--describe",
                            "--group", "java-alone"))
        return {int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["LAG"]) for r in rows}

    assert offsets() == {p: ("10", "0") for p in range(6)}
    _tool(jars, CONSUMER_GROUPS, "--bootstrap-server", boot, "--reset-offsets", "--group",
          "java-alone", "--topic", "java-group-topic:0,1", "--to-earliest", "--execute")
    assert offsets() == {**{p: ("10", "0") for p in range(2, 6)}, 0: ("0", "10"),
                         1: ("0", "10")}
    out = _tool(jars, CONSUMER_GROUPS, "--bootstrap-server", boot, "--delete-offsets",
                "--group", "java-alone", "--topic", "java-group-topic:5")
    assert "Successful" in out
    assert set(offsets()) == set(range(5))
    _tool(jars, CONSUMER_GROUPS, "--bootstrap-server", boot, "--delete", "--group",
          "java-alone")
    assert "java-alone" not in _tool(jars, CONSUMER_GROUPS, "--bootstrap-server", boot,
                                     "--list").split()
