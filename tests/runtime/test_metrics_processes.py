"""A node's Prometheus endpoint (`metrics.prometheus.listener`), scraped over HTTP from
real node processes during a failover: the survivors show the new leader and epoch, the
election's latency, the new active controller's counts, and the requests they served."""

import os
import re
import urllib.request

import pytest

from kraftcore.runtime.config import NodeConfig
from kraftcore.errors import ConfigError

from .processes import LocalCluster, kraftcore, wait_for
from .test_processes import FAST


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def metrics_port(cluster, node_id):
    path = os.path.join(cluster.directory, f"node-{node_id}", "node.log")

    def find():
        with open(path) as f:
            m = re.search(r"Prometheus metrics on http://127\.0\.0\.1:(\d+)/metrics", f.read())
        return m and int(m.group(1))
    return wait_for(f"node {node_id}'s metrics port", find)


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "cluster", FAST + ["metrics.prometheus.listener=127.0.0.1:0"],
                     brokers=1)
    try:
        yield c
    finally:
        c.down()


def test_a_failover_shows_in_the_survivors_metrics(cluster):
    status = wait_for("a leader", lambda: cluster.quorum()["leader_id"] >= 0 and
                      cluster.quorum())
    leader, epoch = status["leader_id"], status["leader_epoch"]
    ports = {i: metrics_port(cluster, i) for i in (1, 2, 3, 4)}
    before = {i: scrape(p) for i, p in ports.items()}
    for i, m in before.items():
        assert m["kafka_server_raft_metrics_current_leader"] == leader
        assert m["kafka_server_raft_metrics_current_epoch"] == epoch
        assert m["kraftcore_metrics_stale"] == 0
        assert m["process_resident_memory_bytes"] > 0
    assert before[leader]['kafka_server_raft_metrics_current_state{state="leader"}'] == 1
    assert before[leader]["kafka_controller_kafkacontroller_activecontrollercount"] == 1
    assert before[4]['kafka_server_raft_metrics_current_state{state="observer"}'] == 1
    assert "kafka_controller_kafkacontroller_activecontrollercount" not in before[4]
    wait_for("broker 4 unfenced", lambda: cluster.brokers() == {4: "unfenced"})
    kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap(), "--topic",
              "orders", "--partitions", "3", "--replication-factor", "1")
    assert wait_for("the topic counted", lambda: scrape(ports[leader])[
        "kafka_controller_kafkacontroller_globalpartitioncount"] == 3)

    cluster.kill(leader)
    survivor = next(i for i in (1, 2, 3) if i != leader)

    def moved():
        m = scrape(ports[survivor])
        return m["kafka_server_raft_metrics_current_leader"] not in (-1, leader) and m
    after = wait_for("the survivor's metrics to show a new leader", moved)
    new = int(after["kafka_server_raft_metrics_current_leader"])
    assert after["kafka_server_raft_metrics_current_epoch"] > epoch
    assert after["kafka_server_raft_metrics_election_latency_max"] > 0
    assert after["kafka_server_raft_metrics_fetch_records_total"] > 0
    ours = wait_for("the new leader active", lambda: (lambda m: m[
        "kafka_controller_kafkacontroller_activecontrollercount"] == 1 and m)(
        scrape(ports[new])))
    assert ours["kafka_controller_kafkacontroller_globaltopiccount"] == 1
    assert ours["kafka_controller_kafkacontroller_activebrokercount"] == 1
    assert ours['kafka_network_requestmetrics_totaltimems_count{request="Vote"}'] >= 1
    assert ours["kafka_controller_controllereventmanager_eventqueueprocessingtimems_count"] > 0
    assert ours["kafka_controller_controllereventmanager_eventqueuetimems_count"] > 0
    assert wait_for("a commit as the new leader", lambda: scrape(ports[new])[
        "kafka_server_raft_metrics_commit_latency_max"] >= 0)
    assert before[leader]["kafka_server_raft_metrics_commit_latency_avg"] >= 0

    # Every metric the shipped Grafana dashboard queries is one the nodes serve.
    served = set()
    for i in (1, 2, 3, 4):
        if i != leader:
            served |= {name.split("{")[0] for name in scrape(ports[i])}
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                           "grafana-dashboard.json")) as f:
        queried = set(re.findall(r"\b(?:kafka|process)_[a-z_]+", f.read()))
    assert queried and queried <= served, sorted(queried - served)


def test_the_metrics_listener_key_is_checked():
    base = {"node.id": "1", "process.roles": "broker", "controller.quorum.voters":
            "2@127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
            "listeners": "PLAINTEXT://127.0.0.1:9092"}
    assert NodeConfig.from_mapping(base).metrics_listener == ()
    config = NodeConfig.from_mapping({**base, "metrics.prometheus.listener": "127.0.0.1:9404"})
    assert config.metrics_listener == ("127.0.0.1", 9404)
    for bad in (":9404", "127.0.0.1", "127.0.0.1:70000"):
        with pytest.raises(ConfigError, match="metrics.prometheus.listener"):
            NodeConfig.from_mapping({**base, "metrics.prometheus.listener": bad})
