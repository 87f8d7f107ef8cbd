"""A cluster of kraftcore processes for the benchmarks: `kraftcore cluster up` in the
background, nodes SIGKILLed and restarted by hand, and `down()` stopping every process it
started, whatever state the run left. Every wait is bounded by WAIT_S (never a timing
goal)."""

import json
import os
import signal
import subprocess
import sys
import time

from kraftcore.runtime.local_cluster import start_node

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
        args = KRAFTCORE + ["cluster", "up", "--controllers", str(controllers), "--brokers",
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
            processes = [self.supervisor] + list(self.restarted.values()) + self.reap
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(WAIT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            self.restarted, self.reap = {}, []
            self.log.close()
