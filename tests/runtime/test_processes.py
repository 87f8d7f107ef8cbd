"""Real processes on 127.0.0.1: `kraftcore cluster up` starts 3 controllers and 2 brokers;
the quorum elects a leader; after SIGKILL of the active controller a new one accepts
writes; a killed broker is fenced after its session timeout and unfenced when it comes
back; `cluster down` stops every process. Every wait is bounded; none is a timing goal."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from kraftcore.runtime.local_cluster import free_ports, start_node

from .processes import WAIT_S, LocalCluster, kraftcore, wait_for

# The broker session must outlast a failover as a surviving broker sees it (its observer
# notices within the fetch timeout, then its heartbeats reach the new controller): a
# shorter one lets the survivor be fenced with the killed broker, and partitions whose ISR
# loses every member (kraftcore never keeps a fenced broker in an ISR) stay leaderless.
FAST = ["controller.quorum.election.timeout.ms=300", "controller.quorum.fetch.timeout.ms=600",
        "controller.quorum.request.timeout.ms=1000", "broker.session.timeout.ms=4000",
        "broker.heartbeat.interval.ms=200"]


class Cluster(LocalCluster):
    """A local cluster with the FAST settings."""

    def __init__(self, directory, brokers=2, combined=False):
        super().__init__(directory, FAST, brokers=brokers, combined=combined)


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
    cluster.kill(leader)
    new = wait_for("a new leader", lambda: (lambda s: s["leader_id"] not in (-1, leader)
                                            and s)(cluster.quorum(exclude=(leader,))))
    assert new["leader_epoch"] > status["leader_epoch"]
    kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap((leader,)),
              "--topic", "after-failover", "--partitions", "1", "--replication-factor", "2")
    names = json.loads(kraftcore("topics", "list", "--bootstrap-controller",
                                 cluster.bootstrap((leader,)), "--json").stdout)["topics"]
    assert {"orders", "after-failover"} <= set(names)

    # SIGKILL a broker: fenced after its session timeout; back and unfenced on restart.
    cluster.kill(5)
    wait_for("broker 5 fenced", lambda: cluster.brokers((leader,)).get(5) == "fenced")
    def partitions(name):
        out = kraftcore("topics", "describe", "--bootstrap-controller",
                        cluster.bootstrap((leader,)), "--topic", name, "--json").stdout
        return json.loads(out)["topics"][0]["partitions"]
    with_5 = [p for p in partitions("orders") if 5 in p["replicas"]]
    assert with_5 and all(5 not in p["isr"] and p["leader"] != 5 for p in
                          partitions("orders") if 5 in p["replicas"])
    cluster.restart(5)
    wait_for("broker 5 unfenced", lambda: cluster.brokers((leader,)).get(5) == "unfenced")
    wait_for("broker 5 back in its ISRs", lambda: all(
        5 in p["isr"] for p in partitions("orders") if 5 in p["replicas"]))

    # The survivors' logs tell the story: the election with its cause and duration, the
    # leader change, and what the new active controller committed.
    successor = new["leader_id"]
    survivors = "".join(node_log(cluster, i) for i in (1, 2, 3) if i != leader)
    assert re.search(rf"node \d: follower -> prospective in epoch {status['leader_epoch']}: no "
                     rf"fetch answer from leader {leader} within the fetch timeout", survivors)
    assert re.search(rf"node {successor}: candidate -> leader in epoch {new['leader_epoch']}: "
                     "a majority voted for it", survivors)
    assert re.search(rf"leader change: node {successor} leads epoch {new['leader_epoch']} \(was "
                     rf"node {leader} in epoch {status['leader_epoch']}\); \d+ ms without a "
                     rf"leader, since: no fetch answer from leader {leader}", survivors)
    ours = node_log(cluster, successor)
    assert "committed: topic after-failover created" in ours
    assert "committed: broker 5 fenced" in ours and "committed: broker 5 unfenced" in ours
    assert re.search(r"committed: orders-\d leader 5 -> \d", ours) or \
        re.search(r"committed: orders-\d ISR \[[\d, ]*5[\d, ]*\] -> ", ours)

    # The killed controller comes back and catches up with the leader's log.
    cluster.restart(leader)

    def caught_up():
        out = kraftcore("quorum", "describe", "--bootstrap-controller",
                        cluster.bootstrap((leader,)), "--replication", "--json").stdout
        replicas = {r["node_id"]: r for r in json.loads(out)["replicas"]}
        return leader in replicas and replicas[leader]["lag"] == 0
    wait_for(f"node {leader} caught up", caught_up)


def node_log(cluster, node_id):
    with open(os.path.join(cluster.directory, f"node-{node_id}", "node.log")) as f:
        return f.read()


def test_a_second_broker_with_a_registered_node_id_says_so_in_its_log(tmp_path):
    """A broker started with the node.id of a live broker is refused by the controller for
    as long as that broker's session lasts: its log says DUPLICATE_BROKER_REGISTRATION and
    what to do, and the first broker stays registered and unfenced."""
    cluster = Cluster(tmp_path / "cluster", brokers=1)
    duplicate = None
    try:
        wait_for("broker 4 unfenced", lambda: cluster.brokers() == {4: "unfenced"})
        original = cluster.nodes[4]
        directory = tmp_path / "duplicate"
        directory.mkdir()
        port = free_ports(1)[0]
        lines = []
        with open(original["config"]) as f:
            for line in f.read().splitlines():
                key, _, _ = line.partition("=")
                if key == "log.dirs":
                    line = f"log.dirs={directory / 'data'}"
                elif key == "metadata.log.dir":
                    line = f"metadata.log.dir={directory / 'metadata'}"
                elif key == "listeners":
                    line = f"listeners=PLAINTEXT://127.0.0.1:{port}"
                lines.append(line)
        config = directory / "server.properties"
        config.write_text("\n".join(lines) + "\n")
        kraftcore("format", "--config", str(config), "--cluster-id",
                  cluster.description["cluster_id"])
        duplicate = start_node(str(config))
        log_path = directory / "node.log"
        wait_for("the refusal in the duplicate's log", lambda: "DUPLICATE_BROKER_REGISTRATION"
                 in log_path.read_text())
        text = log_path.read_text()
        assert "another node.id" in text and "registered with broker epoch" not in text
        assert duplicate.poll() is None  # it keeps retrying: the other one may go away
        assert cluster.brokers() == {4: "unfenced"}
    finally:
        if duplicate is not None:
            duplicate.terminate()
            duplicate.wait(WAIT_S)
        cluster.down()


def partitions(cluster, name, exclude=()):
    out = kraftcore("topics", "describe", "--bootstrap-controller", cluster.bootstrap(exclude),
                    "--topic", name, "--json").stdout
    return json.loads(out)["topics"][0]["partitions"]


def test_combined_nodes_survive_the_loss_of_one_node_in_both_roles(tmp_path):
    """`--combined`: nodes 1-3 are controllers and brokers in one process each. SIGKILL of
    the node that leads the quorum takes out a voter and a broker at once: the other two
    elect a leader, fence the lost broker and move its leaderships; when it comes back it
    catches up, and is unfenced and back in its ISRs."""
    cluster = Cluster(tmp_path / "cluster", brokers=3, combined=True)
    try:
        assert {n["id"]: tuple(sorted(n["roles"])) for n in cluster.nodes.values()} == {
            i: ("broker", "controller") for i in (1, 2, 3)}
        status = wait_for("a leader", lambda: cluster.quorum()["leader_id"] >= 0 and
                          cluster.quorum())
        wait_for("three unfenced brokers", lambda: cluster.brokers() == {
            1: "unfenced", 2: "unfenced", 3: "unfenced"})
        kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap(),
                  "--topic", "both", "--partitions", "6", "--replication-factor", "3")
        leader = status["leader_id"]
        assert any(p["leader"] == leader for p in partitions(cluster, "both"))

        cluster.kill(leader)
        wait_for("a new leader", lambda: cluster.quorum((leader,))["leader_id"]
                 not in (-1, leader))
        wait_for(f"broker {leader} fenced",
                 lambda: cluster.brokers((leader,)).get(leader) == "fenced")
        wait_for(f"leaderships moved off node {leader}", lambda: all(
            p["leader"] != leader and leader not in p["isr"]
            for p in partitions(cluster, "both", (leader,))))

        cluster.restart(leader)
        wait_for(f"broker {leader} unfenced",
                 lambda: cluster.brokers((leader,)).get(leader) == "unfenced")
        wait_for(f"node {leader} back in every ISR", lambda: all(
            leader in p["isr"] for p in partitions(cluster, "both", (leader,))))
    finally:
        cluster.down()


@pytest.mark.slow  # about two minutes of kills and restarts
def test_no_acknowledged_topic_is_lost_across_20_controller_kill_restart_cycles(tmp_path):
    cluster = Cluster(tmp_path / "cluster", brokers=1)
    rng = random.Random(20)
    created = []
    try:
        for cycle in range(20):
            leader = wait_for("a leader", lambda: cluster.quorum()["leader_id"]
                              if cluster.quorum()["leader_id"] > 0 else None)
            name = f"cycle-{cycle}"
            result = kraftcore("topics", "create", "--bootstrap-controller",
                               cluster.bootstrap(), "--topic", name, "--partitions", "1",
                               "--replication-factor", "1", check=False)
            if result.returncode == 0:
                created.append(name)  # acknowledged: committed
            # Kill the leader half the time, else another controller; then restart it.
            victim = leader if rng.random() < 0.5 else rng.choice(
                [n["id"] for n in cluster.controllers() if n["id"] != leader])
            cluster.kill(victim)
            cluster.restart(victim)
        assert len(created) >= 15, f"only {len(created)} of 20 creates were acknowledged"
        wait_for("a leader", lambda: cluster.quorum()["leader_id"] > 0)
    finally:
        cluster.down()
    # Every node's metadata on disk (newest snapshot + log) holds every acknowledged topic.
    for node in cluster.nodes.values():
        metadata_dir = node["dirs"][-1]
        out = kraftcore("metadata-shell", "--dir", metadata_dir, "ls",
                        "/image/topics/byName").stdout.split()
        missing = [name for name in created if name not in out]
        assert not missing, f"node {node['id']} lost {missing}"


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


def test_cli_writes_ride_over_an_election_and_a_broker_address_gets_a_hint(tmp_path):
    """A write sent to a surviving controller right after the active one is SIGKILLed
    waits out the election within its --timeout-ms and succeeds; pointed at a broker's
    port, the CLI says it is a broker's listener."""
    cluster = Cluster(tmp_path / "cluster", brokers=1)
    try:
        status = wait_for("a leader", lambda: cluster.quorum()["leader_id"] >= 0 and
                          cluster.quorum())
        leader = status["leader_id"]
        wait_for("broker 4 unfenced", lambda: cluster.brokers() == {4: "unfenced"})
        cluster.kill(leader)
        created = kraftcore("topics", "create", "--bootstrap-controller",
                            cluster.bootstrap((leader,)), "--topic", "during-election",
                            "--partitions", "1", "--replication-factor", "1",
                            "--timeout-ms", "20000", check=False)
        assert created.returncode == 0, created.stderr
        names = json.loads(kraftcore("topics", "list", "--bootstrap-controller",
                                     cluster.bootstrap((leader,)), "--json").stdout)["topics"]
        assert "during-election" in names
        new = cluster.quorum(exclude=(leader,))
        assert new["leader_id"] not in (-1, leader)
        # the dead node as the only bootstrap: one clear error line, at once
        dead = kraftcore("topics", "create", "--bootstrap-controller",
                         f"127.0.0.1:{cluster.nodes[leader]['port']}", "--topic", "never",
                         check=False)
        assert dead.returncode != 0 and "Traceback" not in dead.stderr
        assert "could not connect" in dead.stderr
        assert len(dead.stderr.strip().splitlines()) == 1
        broker = kraftcore("topics", "list", "--bootstrap-controller",
                           f"127.0.0.1:{cluster.nodes[4]['port']}", check=False)
        assert broker.returncode != 0
        assert "is a broker's listener, not a controller's" in broker.stderr
    finally:
        cluster.down()


def _children(pid):
    """The pids whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_signals_while_the_cluster_starts_stop_every_node_started(tmp_path):
    """SIGTERM as soon as the nodes are started, before the quorum has a leader (so before
    cluster.json), then a second one while they stop: no node outlives the supervisor,
    which exits 1 (the cluster never came up)."""
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "kraftcore.cli.main", "cluster", "up", "--foreground",
         "--controllers", "1",
         "--brokers", "1", "--dir", str(tmp_path / "c"), *sum((["--set", s] for s in FAST),
                                                                [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    nodes = []
    try:
        nodes = wait_for("both nodes started",
                         lambda: len(_children(supervisor.pid)) == 2 and
                         _children(supervisor.pid))
        supervisor.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(WAIT_S) == 1
        wait_for("every node gone", lambda: not any(_alive(pid) for pid in nodes))
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
        for pid in nodes:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_cluster_up_returns_with_a_table_and_single_nodes_can_be_killed_and_started(tmp_path):
    """`cluster up` returns once the brokers are unfenced, with the nodes and the strings
    to paste; `cluster kill | stop | start NODE` stage failures under the supervisor; and
    `cluster down` also stops a node someone restarted by hand from the cluster's files."""
    directory = str(tmp_path / "c")
    args = ["cluster", "up", "--controllers", "3", "--brokers", "1", "--dir", directory,
            *sum((["--set", s] for s in FAST), [])]
    try:
        up = kraftcore(*args)
        with open(os.path.join(directory, "cluster.json")) as f:
            nodes = {n["id"]: n for n in json.load(f)["nodes"]}
        table = up.stdout
        for node_id, node in nodes.items():
            assert re.search(rf"^  {node_id} +{'.'.join(node['roles'])} +127\.0\.0\.1:"
                             rf"{node['port']} +{node['pid']}$", table, re.M), table
        assert f"bootstrap.servers=127.0.0.1:{nodes[4]['port']}" in table
        assert f"--bootstrap-controller 127.0.0.1:{nodes[1]['port']}" in table
        assert "every broker is unfenced: 4" in table

        killed = kraftcore("cluster", "kill", "4", "--dir", directory).stdout
        assert f"node 4 killed (pid {nodes[4]['pid']})" in killed
        started = kraftcore("cluster", "start", "4", "--dir", directory).stdout
        new_pid = int(re.search(r"node 4 started \(pid (\d+)\)", started).group(1))
        assert new_pid != nodes[4]["pid"] and _alive(new_pid)
        cluster = LocalCluster.__new__(LocalCluster)
        cluster.nodes, cluster.directory = nodes, directory
        wait_for("broker 4 unfenced again", lambda: cluster.brokers() == {4: "unfenced"})
        assert "already runs" in kraftcore("cluster", "start", "4", "--dir", directory).stdout
        missing = kraftcore("cluster", "kill", "9", "--dir", directory, check=False)
        assert missing.returncode == 1 and "no node 9" in missing.stderr

        kraftcore("cluster", "stop", "3", "--dir", directory)
        by_hand = start_node(nodes[3]["config"])  # outside the supervisor
        with open(os.path.join(directory, "supervisor.log")) as f:
            log = f.read()
        assert "node 4 stopped (status -9), as asked" in log
        assert "node 3 stopped (status 0), as asked" in log
        kraftcore("cluster", "down", "--dir", directory)
        assert by_hand.wait(WAIT_S) is not None and not _alive(new_pid)
        assert not os.path.exists(os.path.join(directory, "cluster.json"))
    finally:
        kraftcore("cluster", "down", "--dir", directory, check=False)
