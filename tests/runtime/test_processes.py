"""Real processes on 127.0.0.1: `kraftcore cluster up` starts 3 controllers and 2 brokers;
the quorum elects a leader; after SIGKILL of the active controller a new one accepts
writes; a killed broker is fenced after its session timeout and unfenced when it comes
back; `cluster down` stops every process. Every wait is bounded; none is a timing goal."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

WAIT_S = 60
FAST = ["controller.quorum.election.timeout.ms=300", "controller.quorum.fetch.timeout.ms=600",
        "controller.quorum.request.timeout.ms=1000", "broker.session.timeout.ms=2000",
        "broker.heartbeat.interval.ms=200"]


def kraftcore(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "kraftcore.cli.main", *args],
                            capture_output=True, text=True, timeout=WAIT_S)
    if check and result.returncode != 0:
        raise AssertionError(f"kraftcore {' '.join(args)} exited {result.returncode}: "
                             f"{result.stderr.strip()}")
    return result


def wait_for(what, predicate):
    deadline = time.monotonic() + WAIT_S
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except AssertionError as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}: {last}")


class Cluster:
    def __init__(self, directory):
        self.directory = str(directory)
        args = [sys.executable, "-m", "kraftcore.cli.main", "cluster", "up", "--controllers",
                "3", "--brokers", "2", "--dir", self.directory]
        for setting in FAST:
            args += ["--set", setting]
        self.supervisor = subprocess.Popen(args, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
        path = os.path.join(self.directory, "cluster.json")
        wait_for("cluster.json", lambda: os.path.exists(path) or self.supervisor.poll())
        if self.supervisor.poll() is not None:
            raise AssertionError(f"cluster up failed: {self.supervisor.stdout.read()}")
        with open(path) as f:
            self.description = json.load(f)
        self.nodes = {n["id"]: n for n in self.description["nodes"]}
        self.extra = []

    def controllers(self):
        return [n for n in self.nodes.values() if "controller" in n["roles"]]

    def bootstrap(self, exclude=()):
        for node in self.controllers():
            if node["id"] not in exclude:
                return f"127.0.0.1:{node['port']}"
        raise AssertionError("no controller left")

    def quorum(self, exclude=()):
        out = kraftcore("quorum", "describe", "--bootstrap-controller",
                        self.bootstrap(exclude), "--status", "--json").stdout
        return json.loads(out)

    def brokers(self, exclude=()):
        out = kraftcore("brokers", "list", "--bootstrap-controller", self.bootstrap(exclude),
                        "--json").stdout
        return {b["id"]: b["state"] for b in json.loads(out)["brokers"]}

    def restart(self, node_id):
        node = self.nodes[node_id]
        log = open(os.path.join(os.path.dirname(node["config"]), "node.log"), "ab")
        process = subprocess.Popen([sys.executable, "-m", "kraftcore.cli.main", "start",
                                    node["config"]], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.extra.append(process)
        return process

    def down(self):
        try:
            kraftcore("cluster", "down", "--dir", self.directory, check=False)
            self.supervisor.wait(WAIT_S)
        finally:
            for process in [self.supervisor] + self.extra:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(WAIT_S)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        c.down()


def test_a_cluster_elects_survives_its_controller_and_fences_a_lost_broker(cluster):
    status = wait_for("a leader", lambda: cluster.quorum()["leader_id"] >= 0 and
                      cluster.quorum())
    assert status["leader_epoch"] >= 1 and len(status["current_voters"]) == 3
    assert wait_for("two unfenced brokers", lambda: cluster.brokers() == {
        4: "unfenced", 5: "unfenced"})

    kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap(), "--topic",
              "orders", "--partitions", "3", "--replication-factor", "2")

    # SIGKILL the active controller: another one takes over and accepts writes.
    leader = status["leader_id"]
    os.kill(cluster.nodes[leader]["pid"], signal.SIGKILL)
    new = wait_for("a new leader", lambda: (lambda s: s["leader_id"] not in (-1, leader)
                                            and s)(cluster.quorum(exclude=(leader,))))
    assert new["leader_epoch"] > status["leader_epoch"]
    kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap((leader,)),
              "--topic", "after-failover", "--partitions", "1", "--replication-factor", "2")
    names = json.loads(kraftcore("topics", "list", "--bootstrap-controller",
                                 cluster.bootstrap((leader,)), "--json").stdout)["topics"]
    assert {"orders", "after-failover"} <= set(names)

    # SIGKILL a broker: fenced after its session timeout; back and unfenced on restart.
    os.kill(cluster.nodes[5]["pid"], signal.SIGKILL)
    wait_for("broker 5 fenced", lambda: cluster.brokers((leader,)).get(5) == "fenced")
    cluster.restart(5)
    wait_for("broker 5 unfenced", lambda: cluster.brokers((leader,)).get(5) == "unfenced")

    # The killed controller comes back and catches up with the leader's log.
    cluster.restart(leader)

    def caught_up():
        out = kraftcore("quorum", "describe", "--bootstrap-controller",
                        cluster.bootstrap((leader,)), "--replication", "--json").stdout
        replicas = {r["node_id"]: r for r in json.loads(out)["replicas"]}
        return leader in replicas and replicas[leader]["lag"] == 0
    wait_for(f"node {leader} caught up", caught_up)


def test_cli_errors_are_one_line(tmp_path):
    result = kraftcore("quorum", "describe", "--bootstrap-controller", "127.0.0.1:1",
                       "--status", check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = kraftcore("start", str(tmp_path / "missing.properties"), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    config = tmp_path / "node.properties"
    config.write_text("node.id=1\nprocess.roles=controller\n"
                      "controller.quorum.voters=1@127.0.0.1:19093\n"
                      "listeners=CONTROLLER://127.0.0.1:19093\n"
                      "controller.listener.names=CONTROLLER\n"
                      f"log.dirs={tmp_path / 'data'}\n")
    result = kraftcore("start", str(config), check=False)
    assert result.returncode == 1 and "not formatted" in result.stderr
    assert "Traceback" not in result.stderr
    result = kraftcore("cluster", "down", "--dir", str(tmp_path), check=False)
    assert result.returncode == 1 and "no cluster" in result.stderr
