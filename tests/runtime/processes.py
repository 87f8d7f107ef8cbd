"""Helpers of the process tests: the `kraftcore` command, bounded waits, and a local cluster
started with `kraftcore cluster up` on 127.0.0.1.

Every wait is bounded by WAIT_S, which only stops a hung test: none is a timing goal.
"""

import json
import os
import signal
import subprocess
import sys
import time

from kraftcore.runtime.local_cluster import start_node

WAIT_S = 60


def kraftcore(*args, check=True):
    """Run the `kraftcore` command; with `check`, fail unless it exits 0."""
    result = subprocess.run([sys.executable, "-m", "kraftcore.cli.main", *args],
                            capture_output=True, text=True, timeout=WAIT_S, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kraftcore {' '.join(args)} exited {result.returncode}: "
                             f"{result.stderr.strip()}")
    return result


def wait_for(what, predicate, wait_s=WAIT_S):
    """Call `predicate()` every 0.2 s until it returns something true, and return that (an
    AssertionError it raises counts as "not yet"); fail after `wait_s`."""
    deadline = time.monotonic() + wait_s
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


def stop(process, wait_s=WAIT_S):
    """SIGTERM `process` if it still runs, and SIGKILL it if it has not exited in `wait_s`."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(wait_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def broker_address(cluster):
    """host:port of the one broker of `cluster`."""
    (node,) = [n for n in cluster.nodes.values() if "broker" in n["roles"]]
    return f"127.0.0.1:{node['port']}"


class LocalCluster:
    """`kraftcore cluster up` in `directory`: `controllers` controllers (three unless told)
    and `brokers` brokers (`combined`: the first nodes are controllers and brokers), each
    `settings` entry (key=value) passed with --set. `nodes` is cluster.json's description by
    node id."""

    def __init__(self, directory, settings, brokers=2, combined=False, controllers=3):
        self.directory = str(directory)
        args = [sys.executable, "-m", "kraftcore.cli.main", "cluster", "up", "--foreground",
                "--controllers",
                str(controllers), "--brokers", str(brokers), "--dir", self.directory]
        if combined:
            args.append("--combined")
        for setting in settings:
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
        self.pids = {n["id"]: n["pid"] for n in self.description["nodes"]}
        self.extra = []  # nodes restarted by the test, outside the supervisor

    def controllers(self):
        return [n for n in self.nodes.values() if "controller" in n["roles"]]

    def bootstrap(self, exclude=()):
        """host:port of the first controller not in `exclude`."""
        for node in self.controllers():
            if node["id"] not in exclude:
                return f"127.0.0.1:{node['port']}"
        raise AssertionError("no controller left")

    def quorum(self, exclude=()):
        """`kraftcore quorum describe --status`, asked of a controller not in `exclude`."""
        out = kraftcore("quorum", "describe", "--bootstrap-controller",
                        self.bootstrap(exclude), "--status", "--json").stdout
        return json.loads(out)

    def brokers(self, exclude=()):
        """{broker id: state} as a controller not in `exclude` lists them."""
        out = kraftcore("brokers", "list", "--bootstrap-controller", self.bootstrap(exclude),
                        "--json").stdout
        return {b["id"]: b["state"] for b in json.loads(out)["brokers"]}

    def restart(self, node_id):
        node = self.nodes[node_id]
        process = start_node(node["config"])
        self.extra.append(process)
        self.pids[node_id] = process.pid
        return process

    def kill(self, node_id):
        os.kill(self.pids[node_id], signal.SIGKILL)
        for process in self.extra:
            if process.pid == self.pids[node_id]:
                process.wait(WAIT_S)

    def down(self):
        try:
            kraftcore("cluster", "down", "--dir", self.directory, check=False)
            self.supervisor.wait(WAIT_S)
        finally:
            for process in [self.supervisor] + self.extra:
                stop(process)
