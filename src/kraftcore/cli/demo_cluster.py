"""`kraftcore demo` (what `make demo` runs): a local KRaft cluster put through its paces.

It starts 3 controllers and 3 brokers as separate processes on 127.0.0.1 (`kraftcore
cluster up`), creates topics, shows the quorum's status, SIGKILLs the active controller and
measures how long until a new one is elected and accepts a write, SIGKILLs a broker and
shows its partitions re-elected and the broker fenced, brings it back (unfenced, ISRs
restored), waits for every node to write a metadata snapshot and shows one, stops the
cluster, checks every node's snapshots against each other and against its metadata log
with `kraftcore verify` (Spark, embedded), and prints a report. Each step prints what it does and the commands it runs, so
the output reads as a transcript an operator could repeat.

The cluster runs with shortened timeouts (listed in the report) so that the tour takes
about a minute; `kraftcore cluster up` without `--set` uses Kafka's defaults.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from kraftcore.admin.client import quorum_leader
from kraftcore.limits import DEMO_CLUSTER_WAIT_S_MAX
from kraftcore.runtime.local_cluster import start_node

SETTINGS = (
    ("controller.quorum.election.timeout.ms", "500"),
    ("controller.quorum.fetch.timeout.ms", "1000"),
    ("broker.session.timeout.ms", "3000"),
    ("broker.heartbeat.interval.ms", "300"),
    ("metadata.log.max.snapshot.interval.ms", "2000"),
)
STEPS = 9


class DemoError(Exception):
    pass


class Demo:
    def __init__(self, directory, out=print):
        self.directory = directory
        self.out = out
        self.report = []
        self.supervisor = None
        self.started = []
        self.step = 0

    # ------------------------------------------------------------------ helpers

    def say(self, text):
        self.out(text, flush=True) if self.out is print else self.out(text)

    def header(self, text):
        self.step += 1
        self.say(f"\n[{self.step}/{STEPS}] {text}")

    def kraftcore(self, *args, show=True, check=True):
        command = [sys.executable, "-m", "kraftcore.cli.main", *args]
        if show:
            self.say("  $ kraftcore " + " ".join(args))
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=DEMO_CLUSTER_WAIT_S_MAX)
        if check and result.returncode != 0:
            raise DemoError(f"kraftcore {' '.join(args)} failed: {result.stderr.strip()}")
        if show:
            for line in result.stdout.rstrip().splitlines():
                self.say("    " + line)
        return result

    def wait(self, what, predicate, timeout_s=DEMO_CLUSTER_WAIT_S_MAX):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = predicate()
            except DemoError:
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise DemoError(f"gave up waiting for {what} after {timeout_s} s")

    def bootstrap(self, exclude=()):
        for node in self.nodes.values():
            if "controller" in node["roles"] and node["id"] not in exclude:
                return f"127.0.0.1:{node['ports']['controller']}"
        raise DemoError("no controller left")

    def brokers(self, exclude=()):
        out = self.kraftcore("brokers", "list", "--bootstrap-controller",
                             self.bootstrap(exclude), "--json", show=False).stdout
        return {b["id"]: b["state"] for b in json.loads(out)["brokers"]}

    def leader(self, exclude=()):
        for node in self.nodes.values():
            if "controller" in node["roles"] and node["id"] not in exclude:
                found = asyncio.run(quorum_leader(("127.0.0.1", node["ports"]["controller"]),
                                                  timeout_s=0.5))
                if found is not None and found not in exclude:
                    return found
        return None

    def partitions(self, topic, exclude=()):
        out = self.kraftcore("topics", "describe", "--bootstrap-controller",
                             self.bootstrap(exclude), "--topic", topic, "--json",
                             show=False).stdout
        return json.loads(out)["topics"][0]["partitions"]

    def restart(self, node_id):
        node = self.nodes[node_id]
        process = start_node(node["config"])
        self.started.append(process)
        node["pid"] = process.pid

    # ------------------------------------------------------------------ the tour

    def run(self):
        try:
            self._start()
            self._topics()
            self._status()
            self._controller_failover()
            self._broker_loss()
            self._broker_return()
            self._snapshot()
        finally:
            self._stop()
        self._verify()
        self._report()

    def _start(self):
        self.header("starting 3 controllers and 3 brokers (one process each)")
        args = [sys.executable, "-m", "kraftcore.cli.main", "cluster", "up", "--foreground",
                "--controllers",
                "3", "--brokers", "3", "--dir", self.directory]
        for key, value in SETTINGS:
            args += ["--set", f"{key}={value}"]
        self.say(f"  $ kraftcore cluster up --foreground --controllers 3 --brokers 3 "
                 f"--dir {self.directory}"
                 + "".join(f" --set {k}={v}" for k, v in SETTINGS))
        self.supervisor = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.STDOUT, start_new_session=True)
        path = os.path.join(self.directory, "cluster.json")
        start = time.monotonic()
        self.wait("the quorum's first leader",
                  lambda: os.path.exists(path) or self.supervisor.poll() is not None)
        if self.supervisor.poll() is not None:
            raise DemoError("kraftcore cluster up stopped; see the node.log files in "
                            f"{self.directory}")
        with open(path) as f:
            self.nodes = {n["id"]: n for n in json.load(f)["nodes"]}
        self.wait("three unfenced brokers",
                  lambda: list(self.brokers().values()) == ["unfenced"] * 3)
        elapsed = time.monotonic() - start
        self.say(f"  cluster up, quorum elected and brokers unfenced in {elapsed:.1f} s")
        self.report.append(f"cluster start to 3 unfenced brokers: {elapsed:.1f} s")

    def _topics(self):
        self.header("creating topics")
        bootstrap = self.bootstrap()
        self.kraftcore("topics", "create", "--bootstrap-controller", bootstrap, "--topic",
                       "orders", "--partitions", "6", "--replication-factor", "3")
        self.kraftcore("topics", "create", "--bootstrap-controller", bootstrap, "--topic",
                       "payments", "--partitions", "3", "--replication-factor", "2")
        self.kraftcore("topics", "describe", "--bootstrap-controller", bootstrap, "--topic",
                       "payments")

    def _status(self):
        self.header("the quorum's status")
        self.kraftcore("quorum", "describe", "--bootstrap-controller", self.bootstrap(),
                       "--status")
        self.kraftcore("brokers", "list", "--bootstrap-controller", self.bootstrap())

    def _controller_failover(self):
        self.header("SIGKILL of the active controller")
        old = self.wait("a leader", self.leader)
        os.kill(self.nodes[old]["pid"], signal.SIGKILL)
        killed = time.monotonic()
        self.say(f"  killed node {old} (pid {self.nodes[old]['pid']}), the active controller")
        new = self.wait("a new leader", lambda: self.leader(exclude=(old,)))
        elected_ms = (time.monotonic() - killed) * 1000
        self.kraftcore("topics", "create", "--bootstrap-controller",
                       self.bootstrap((old,)), "--topic", "after-failover", "--partitions",
                       "1", "--replication-factor", "3", show=False)
        written_ms = (time.monotonic() - killed) * 1000
        self.say(f"  node {new} leads after {elected_ms:.0f} ms; its first write committed "
                 f"{written_ms:.0f} ms after the kill")
        self.report.append(f"controller failover (SIGKILL to new leader / to first committed "
                           f"write): {elected_ms:.0f} ms / {written_ms:.0f} ms")
        self.kraftcore("quorum", "describe", "--bootstrap-controller", self.bootstrap((old,)),
                       "--status")
        self.restart(old)
        self.say(f"  node {old} restarted; it catches up as a follower")
        self.killed_controller = old

    def _broker_loss(self):
        self.header("SIGKILL of broker 4")
        os.kill(self.nodes[4]["pid"], signal.SIGKILL)
        killed = time.monotonic()
        self.wait("broker 4 fenced", lambda: self.brokers().get(4) == "fenced")
        fenced_s = time.monotonic() - killed
        self.say(f"  broker 4 fenced {fenced_s:.1f} s after the kill (session timeout "
                 f"{dict(SETTINGS)['broker.session.timeout.ms']} ms)")
        self.report.append(f"broker fenced after its session timeout: {fenced_s:.1f} s")
        self.kraftcore("brokers", "list", "--bootstrap-controller", self.bootstrap())
        parts = self.partitions("orders")
        moved = all(p["leader"] != 4 and 4 not in p["isr"] for p in parts)
        self.say("  no partition of 'orders' is led by broker 4 or keeps it in its ISR: "
                 + ("yes" if moved else "NO"))
        self.kraftcore("topics", "describe", "--bootstrap-controller", self.bootstrap(),
                       "--topic", "orders")

    def _broker_return(self):
        self.header("broker 4 comes back")
        self.restart(4)
        back = time.monotonic()
        self.wait("broker 4 unfenced", lambda: self.brokers().get(4) == "unfenced")
        self.wait("broker 4 back in its ISRs", lambda: all(
            4 in p["isr"] for p in self.partitions("orders") if 4 in p["replicas"]))
        self.say(f"  broker 4 unfenced and back in every ISR after "
                 f"{time.monotonic() - back:.1f} s")
        self.kraftcore("topics", "describe", "--bootstrap-controller", self.bootstrap(),
                       "--topic", "orders")

    def _snapshot(self):
        self.header("metadata snapshots")
        dirs = {n["id"]: os.path.join(n["dirs"][-1], "__cluster_metadata-0")
                for n in self.nodes.values()}

        def snapshots():
            found = {i: sorted(f for f in os.listdir(d) if f.endswith(".checkpoint"))
                     for i, d in dirs.items() if os.path.isdir(d)}
            return found if len(found) == len(dirs) and all(found.values()) else None
        found = self.wait("a snapshot on every node", snapshots)
        newest = {i: names[-1] for i, names in found.items()}
        self.say("  every node wrote a snapshot of its image; the newest on each:")
        for i, name in sorted(newest.items()):
            self.say(f"    node {i}: {name}")
        self.kraftcore("metadata-shell", "--snapshot", os.path.join(dirs[4], newest[4]),
                       "ls", "/image/topics/byName")
        self.snapshot_dirs = list(dirs.values())

    def _stop(self):
        if self.supervisor is None:
            return
        self.header("stopping the cluster")
        self.kraftcore("cluster", "down", "--dir", self.directory, check=False)
        for process in self.started + [self.supervisor]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.started + [self.supervisor]:
            try:
                process.wait(DEMO_CLUSTER_WAIT_S_MAX)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _verify(self):
        self.header("verifying every node's snapshots with Spark (kraftcore verify)")
        nodes = [n["dirs"][-1] for _, n in sorted(self.nodes.items())]
        self.say("  $ kraftcore verify --snapshots " + " ".join(nodes) + " --logs")
        sys.stdout.flush()
        # Its own output and progress line go straight to the terminal.
        output = os.path.join(self.directory, "verify.json")
        result = subprocess.run([sys.executable, "-m", "kraftcore.cli.main", "verify",
                                 "--snapshots", *nodes, "--logs", "--output", output],
                                timeout=10 * DEMO_CLUSTER_WAIT_S_MAX)
        if result.returncode != 0:
            raise DemoError(f"kraftcore verify exited with status {result.returncode}")
        with open(output, encoding="utf-8") as f:
            summary = json.load(f)["summary"]
        # One count of the snapshots, taken once the nodes stopped writing them.
        self.report.append(f"kraftcore verify: every check passed on {summary['files']} "
                           f"snapshot files of {summary['nodes']} nodes "
                           f"({summary['snapshot_ids']} snapshot ids)")

    def _report(self):
        self.say("\nreport")
        for line in self.report:
            self.say(f"  {line}")
        self.say("  settings: " + ", ".join(f"{k}={v}" for k, v in SETTINGS))
        self.say(f"  node logs and data: {self.directory}")


def run(directory=None):
    directory = directory or tempfile.mkdtemp(prefix="kraftcore-demo-")
    demo = Demo(os.path.join(os.path.abspath(directory), "cluster"))
    try:
        demo.run()
    except (DemoError, OSError, subprocess.SubprocessError) as exc:
        print(f"kraftcore demo: error: {exc}", file=sys.stderr)
        return 1
    return 0
