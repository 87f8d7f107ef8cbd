"""Clusters for the benchmarks, each with `down()` stopping every process it started,
whatever state the run left:

* `LocalCluster`: kraftcore processes from `kraftcore cluster up` in the background, nodes
  SIGKILLed and restarted by hand;
* `FormattedNodes`: kraftcore nodes formatted first, then started with `kraftcore start`
  one process each (no supervisor), so that a benchmark can time the start itself;
* `kafka_cluster`: the same shape of real Kafka JVMs (`tests/peers/kafka_node.py`), with
  the same interface as `LocalCluster`, or the benchmark is skipped when Java or Kafka's
  jars are missing.

Every wait is bounded by WAIT_S (never a timing goal)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

from kraftcore.log.meta_properties import format_directories
from kraftcore.runtime.config import NodeConfig
from kraftcore.runtime.local_cluster import node_properties, plan, start_node
from kraftcore.types import Uuid

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:  # tests.peers.kafka_node, when pytest was not run from the root
    sys.path.insert(0, _REPO)
from tests.peers import kafka_node

KRAFTCORE = [sys.executable, "-m", "kraftcore.cli.main"]
WAIT_S = 60  # bound of every wait for a cluster state (never a timing goal)


def wait_until(what, predicate, timeout_s=WAIT_S, pause_s=0.05):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(pause_s)
    raise AssertionError(f"gave up waiting for {what} after {timeout_s} s (last: {last!r})")


class LocalCluster:
    """`kraftcore cluster up` in the background, plus nodes restarted by hand."""

    def __init__(self, directory, controllers, brokers, overrides=()):
        self.directory = str(directory)
        self.log = open(self.directory + ".supervisor.log", "wb")
        args = KRAFTCORE + ["cluster", "up", "--foreground",
                            "--controllers", str(controllers), "--brokers",
                            str(brokers), "--dir", self.directory]
        for setting in overrides:
            args += ["--set", setting]
        self.supervisor = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL)
        self.restarted = {}  # node id -> Popen of `kraftcore start`
        self.reap = []
        path = os.path.join(self.directory, "cluster.json")
        try:
            wait_until("cluster.json", lambda: os.path.exists(path)
                       or self.supervisor.poll() is not None, pause_s=0.1)
            if self.supervisor.poll() is not None:
                raise AssertionError(f"kraftcore cluster up exited {self.supervisor.returncode}"
                                     f"; see {self.log.name}")
            with open(path) as f:
                self.nodes = {n["id"]: n for n in json.load(f)["nodes"]}
        except BaseException:
            self.down()
            raise

    def controller_ports(self, exclude=()):
        return {i: n["port"] for i, n in sorted(self.nodes.items())
                if "controller" in n["roles"] and i not in exclude}

    def broker_ports(self):
        return {i: n["port"] for i, n in sorted(self.nodes.items())
                if "controller" not in n["roles"]}

    def pids(self):
        return {i: n["pid"] for i, n in sorted(self.nodes.items())}

    def metadata_dirs(self):
        """{node id: the directory of its metadata log}."""
        return {i: n["dirs"][1] for i, n in sorted(self.nodes.items())}

    def kill(self, node_id):
        """SIGKILL the node; a restarted one is reaped later (outside any timing)."""
        os.kill(self.nodes[node_id]["pid"], signal.SIGKILL)
        process = self.restarted.pop(node_id, None)
        if process is not None:
            self.reap.append(process)

    def restart(self, node_id):
        for process in self.reap:
            process.wait(WAIT_S)
        self.reap = []
        node = self.nodes[node_id]
        process = start_node(node["config"])
        self.restarted[node_id] = process
        node["pid"] = process.pid

    def down(self):
        """Stop everything: the supervisor's nodes (brokers first), then the restarted ones."""
        try:
            if os.path.exists(os.path.join(self.directory, "cluster.json")):
                subprocess.run(KRAFTCORE + ["cluster", "down", "--dir", self.directory],
                               capture_output=True, timeout=3 * WAIT_S)
        except subprocess.TimeoutExpired:
            pass  # the processes are stopped below
        finally:
            terminate([self.supervisor] + list(self.restarted.values()) + self.reap)
            self.restarted, self.reap = {}, []
            self.log.close()


def terminate(processes):
    """SIGTERM every process still running, then wait for each (SIGKILL after WAIT_S)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _pairs(overrides):
    return [tuple(setting.split("=", 1)) for setting in overrides]


class FormattedNodes:
    """kraftcore nodes written and formatted as `kraftcore cluster up` does (controllers
    1..C, brokers C+1..), not started: `start()` starts each with `kraftcore start`
    (`started_at`: `time.perf_counter()` just before the first), `down()` stops them
    (brokers first, SIGTERM, then SIGKILL)."""

    def __init__(self, directory, controllers, brokers, overrides=()):
        directory = os.path.abspath(str(directory))
        nodes, voters = plan(directory, controllers, brokers, False, _pairs(overrides))
        cluster_id = str(Uuid.random(random.SystemRandom()))
        self.nodes = {}
        for node_id, roles, port, node_dir, path in nodes:
            os.makedirs(node_dir, exist_ok=True)
            with open(path, "w") as f:
                f.write(node_properties(node_id, roles, voters, port, node_dir,
                                        _pairs(overrides)))
            format_directories(NodeConfig.from_file(path), cluster_id)
            self.nodes[node_id] = {"roles": roles, "config": path,
                                   "port": port["controller" if "controller" in roles
                                                else "broker"]}
        self.processes = {}
        self.started_at = None

    def controller_ports(self, exclude=()):
        return {i: n["port"] for i, n in sorted(self.nodes.items())
                if "controller" in n["roles"] and i not in exclude}

    def pids(self):
        return {i: p.pid for i, p in sorted(self.processes.items())}

    def start(self):
        self.started_at = time.perf_counter()
        for node_id, node in self.nodes.items():
            self.processes[node_id] = start_node(node["config"])

    def down(self):
        groups = ([p for i, p in self.processes.items()
                   if "controller" not in self.nodes[i]["roles"]],
                  [p for i, p in self.processes.items() if "controller" in self.nodes[i]["roles"]])
        try:
            for group in groups:
                terminate(group)
        finally:
            for process in self.processes.values():
                if process.poll() is None:
                    process.kill()
                    process.wait()
            self.processes = {}


class KafkaPeerCluster(kafka_node.KafkaCluster):
    """`tests.peers.kafka_node.KafkaCluster` with `LocalCluster`'s names."""

    def down(self):
        self.stop()

    def metadata_dirs(self):
        return {i: str(n["metadata_dir"]) for i, n in self.nodes.items()}


def kafka_available():
    """Skips the calling test (fails it under CI) when Java or Kafka's jars are missing."""
    kafka_node.kafka_jars_for_tests()


def kafka_settings(overrides):
    """kraftcore's `--set key=value` overrides as the properties Kafka is given."""
    return dict(_pairs(overrides))


def kafka_cluster(directory, controllers, brokers, overrides=(), start=True):
    """A real Kafka cluster of `controllers` + `brokers` JVMs with the same overrides as a
    kraftcore cluster; formatted, and (with `start`) started and ready. The caller stops it
    with `down()` in a `finally`; a cluster that fails to come up is stopped here."""
    kafka_available()
    cluster = KafkaPeerCluster(directory, controllers, brokers,
                               properties=kafka_settings(overrides))
    try:
        cluster.format()
        if start:
            cluster.start()
            cluster.wait_ready()
    except BaseException:
        cluster.down()
        raise
    return cluster
