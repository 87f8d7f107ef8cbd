"""Nodes over sockets: kraftcore node processes on 127.0.0.1 (`kraftcore cluster up`),
measured from this process over TCP with `kraftcore.net.Connection` and Kafka's messages,
and, beside them in the same run, a real Apache Kafka 4.4 cluster of the same shape driven
by the same load generator (the functions below, whichever cluster they are given).

The Kafka peer (`clusters.kafka_cluster`, `tests/peers/kafka_node.py`): 3 JVMs with
`process.roles=controller` (-Xmx384m) and 1 with `process.roles=broker` (-Xmx512m),
static `controller.quorum.voters` as kraftcore's clusters have, Kafka's defaults, and
exactly the overrides the kraftcore cluster of the same row gets. Its rows are skipped (with
the reason) when Java or Kafka's jars are missing. The load goes where it goes on kraftcore:
controller writes to the active controller's controller listener (KIP-919), Metadata to
the broker. Rows that compare the two (parameter `system`: `kraftcore`, `apache-kafka`):

* `cluster-writes-<operation>-<in flight>`: controller writes, 3 controllers and 1 broker,
  IncrementalAlterConfigs (the cluster's `min.insync.replicas`, one ConfigRecord) and
  CreateTopics (a new topic of 1 partition, replication factor 1), each at 1 and at 1024
  in flight. 1024 in flight are 1024 connections with one request each: Kafka reads a
  connection's next request only after answering the one before (16 x 64 would be 16 in
  flight there). Rounds of 100 / 10,240 / 50 / 2,048 operations after one warm-up round;
  ops/s = operations / median round; latency p50 / p99 over every measured operation. The
  IncrementalAlterConfigs rows run first, while the cluster has one topic: Kafka's
  controller visits every partition when the cluster-wide `min.insync.replicas` changes.
  After these rows, `test_resident_memory` reads each node's VmRSS (/proc/PID/status), as
  the fixture did once the cluster was up.
* `cluster-start-to-leader`: a new cluster formatted (not timed), its 4 processes started
  (kraftcore: `kraftcore start` per node; Kafka: `kafka.Kafka` per JVM); timed: the first
  process start -> a controller names the leader in a DescribeQuorum answer (every
  controller asked every 10 ms). 5 trials.
* `cluster-failover-*` and `cluster-metadata-propagation` (below) for both.

* `cluster-commit-throughput` (kraftcore and PySyncObj): 3 controller processes (no
  broker), Kafka's default configuration; kraftcore fsyncs every append before it counts
  towards the high watermark.
  The client keeps 1024 IncrementalAlterConfigs requests in flight to the active controller
  (16 connections x 64, kraftcore's per-connection limit), each one setting the cluster
  default `min.insync.replicas` (one ConfigRecord per request). The controller answers only
  once the record is committed, so a response is a committed operation. One round is
  10,240 operations; ops/s = operations / median round time; latency = request sent to
  response received, p50 / p99 over every measured operation.
  Peer in the same run: PySyncObj, 3 processes on 127.0.0.1 replicating a counter, with
  its batching on (`appendEntriesUseBatch=True`, `commandsQueueSize=100000`), at its
  default `appendEntriesPeriod` (100 ms) and at 2 ms. The load runs inside the leader's
  process (PySyncObj has no client protocol): 1024 `incr` calls in flight, latency = call to
  the commit callback. PySyncObj never fsyncs (its journal is an unflushed memory map).
  kraftcore in the same shape (`kraftcore-in-process-*`): the controller processes are
  this file run as a script (`kraftcore-node`: `kraftcore start`'s `Node` plus a load
  generator in it), 1024 operations in flight inside the active controller, latency = call
  to commit: `controller-ops` are controller writes (the same ConfigRecord, through the
  controller's event queue, future completed on commit); `raft-appends` are NoOpRecords
  appended through `RaftDriver.append` (the replicated log alone, like PySyncObj's
  counter), which the controllers apply as they commit. Like the PySyncObj load, they
  use the callback form (one callback per operation, called once it is committed); each
  callback appends the next operation, which keeps 1024 in flight.
  Goal: each kraftcore row >= 10x the committed ops/s of the best PySyncObj row (the
  summary also prints the ratio to each row).
* `cluster-failover-*`: 3 controllers and 1 broker; 20 trials, each: SIGKILL of the active
  controller, then the time until a write (IncrementalAlterConfigs) is committed through
  the new active controller: both survivors are asked every 5 ms (+ one loopback round trip)
  until one answers without error (a Kafka controller that is not active answers
  NOT_CONTROLLER). Between trials (not timed) the killed node is restarted (`kraftcore
  start`, or its JVM) and the quorum waits until every voter has the high watermark and the
  restarted one has fetched.
  With Kafka's defaults (fetch timeout 2000 ms; goal p50 <= 3000 ms) and with
  `controller.quorum.fetch.timeout.ms=300`, `controller.quorum.election.timeout.ms=150`
  (goal p50 <= 600 ms).
  Zero loss: before each kill a stream of CreateTopics (4 in flight) runs against the
  leader and the kill lands while some are in flight. Every topic whose CreateTopics was
  answered without error must be present afterwards: in the Metadata answer of every node
  (3 controllers, 1 broker) at the end of the run, and in every node's metadata log on
  disk after the cluster stopped (`kraftcore metadata-shell --dir ... ls
  /image/topics/byName`). For Kafka, the same check on the broker's Metadata answer
  (Kafka's controllers do not serve Metadata, and its 4.4 logs hold record types kraftcore's
  metadata-shell does not replay). Also, the high watermark of the new leader is never below the one
  the old leader reported before the kill. Requests in flight at the kill are of unknown
  outcome and are not checked either way.
* `cluster-metadata-propagation`: 3 controllers and 1 broker, Kafka's defaults; 300
  samples after a random 0-10 ms pause each. Per sample: CreateTopics of a new topic is
  sent to the active controller, and at once the broker is asked for that topic with
  Metadata requests back to back (the broker answers from its own image). The topic entered
  the broker's image after the send of the last Metadata request that did not show it and
  before the answer of the first one that does: the resolution is one loopback round trip
  (its p50 is reported, ~0.3 ms). The leader committed the record after the CreateTopics
  was sent and before its response arrived. Timed (the benchmark's statistic): CreateTopics
  sent -> first answer showing the topic, an upper bound of commit -> image that includes
  the commit itself; also reported: first answer showing the topic - CreateTopics response
  (negative when the broker had it first). Goal: p99 <= 50 ms, read on the upper bound.

Goals are printed as MET / NOT MET at the end of the run, and each row kraftcore shares
with Kafka as "cluster vs kafka-4.4.0 MET / NOT MET" with kraftcore's ratio (above 1x:
kraftcore ahead); nothing asserts on a timing. Every process started here is stopped in a
`finally`. KRAFTCORE_BENCH_CLUSTER_SCALE=0.1 runs a tenth of the trials, samples and rounds
(at least 2 of each) for a quick check.

Run alone: .venv/bin/python -m pytest bench/test_bench_cluster.py -q -p no:cacheprovider
"""

import asyncio
import json
import math
import os
import random
import select
import subprocess
import sys
import threading
import time

import pytest

from kraftcore.errors import KraftcoreError
from kraftcore.net import Connection
from kraftcore.protocol import messages as m

from clusters import (KRAFTCORE, WAIT_S, FormattedNodes, LocalCluster, kafka_available,
                      kafka_cluster, kafka_node, wait_until)

CONNECT_TIMEOUT_MS = 2000
CLIENT_ID = "kraftcore-bench"

# KRAFTCORE_BENCH_CLUSTER_SCALE=0.1 scales the trials, samples and rounds down (never below
# a floor of 1 or 2), for quick runs while developing; documented numbers use the default 1.
SCALE = float(os.environ.get("KRAFTCORE_BENCH_CLUSTER_SCALE", "1"))


def scaled(count, least=2):
    return max(least, round(count * SCALE))


# The systems of the comparison rows (parameter ids) and their names in the reports.
SYSTEMS = ("kraftcore", "apache-kafka")
PEERS = {"kraftcore": "kraftcore", "apache-kafka": f"kafka-{kafka_node.kafka_version()}"}

# Commit throughput.
CONNECTIONS = 16
INFLIGHT_PER_CONNECTION = 64  # kraftcore.limits.NET_(SERVER_)INFLIGHT_REQUESTS_MAX
WINDOW = CONNECTIONS * INFLIGHT_PER_CONNECTION
OPS_PER_ROUND = 10 * WINDOW
# A round of the fastest row lasts ~30 ms: the median of 10 is not moved by one stall.
THROUGHPUT_ROUNDS = scaled(10)
THROUGHPUT_GOAL_RATIO = 10.0
PYSYNCOBJ_BATCH = {"appendEntriesUseBatch": True, "commandsQueueSize": 100_000}
PYSYNCOBJ_CONFIGS = {
    "pysyncobj-batch-100ms": dict(PYSYNCOBJ_BATCH),  # appendEntriesPeriod: its default 0.1 s
    "pysyncobj-batch-2ms": dict(PYSYNCOBJ_BATCH, appendEntriesPeriod=0.002),
}

# Failover.
FAILOVER_TRIALS = scaled(20)
PROBE_PAUSE_S = 0.005
STREAM_INFLIGHT = 4
STREAM_ACKED_BEFORE_KILL = 3
FAILOVER_CONFIGS = {
    # name: (overrides, fetch timeout ms, goal for the p50 in ms)
    "kafka-defaults": ((), 2000, 3000),
    "fetch-300ms": (("controller.quorum.fetch.timeout.ms=300",
                     "controller.quorum.election.timeout.ms=150"), 300, 600),
}

# Propagation.
PROPAGATION_SAMPLES = scaled(300, 20)

# Controller writes, kraftcore and Kafka: row -> (operation, connections, requests in flight
# per connection, operations per round, measured rounds, warm-up rounds). 1024 in flight
# are 1024 connections with one request each: a Kafka server reads a connection's next
# request only once it has answered the one before, so 16 x 64 would be 16 in flight there.
# IncrementalAlterConfigs rows run first, on a cluster with one topic: Kafka's controller
# visits every partition when the cluster's min.insync.replicas changes.
WRITE_ROWS = {
    "alter-configs-1": ("alter-configs", 1, 1, 100, scaled(3), 1),
    "alter-configs-1024": ("alter-configs", 1024, 1, OPS_PER_ROUND, THROUGHPUT_ROUNDS, 1),
    "create-topics-1": ("create-topics", 1, 1, 50, scaled(3), 1),
    "create-topics-1024": ("create-topics", 1024, 1, 2 * 1024, scaled(3), 1),
}

# Start: trials of a freshly formatted cluster (3 controllers, 1 broker).
START_TRIALS = scaled(5)
START_POLL_S = 0.01
PROPAGATION_GOAL_MS = 50.0

CONFIG_BROKER = 4  # ConfigResource type of a broker (resource name "" = cluster default)
OP_SET = 0
TOPIC_ALREADY_EXISTS = 36
METADATA_TOPIC = "__cluster_metadata"

_STATE = {}


# ------------------------------------------------------------------------------ helpers

def percentile(values, p):
    """Nearest-rank percentile of `values` (p in [0, 100])."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def quantiles_ms(latencies_s):
    """The latency at each percentile 0..100 (nearest rank, as `percentile`), in ms: what
    bench/plots.py draws."""
    ordered = sorted(latencies_s)
    if not ordered:
        return []
    return [ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] * 1e3 for p in range(101)]


def alter_configs_body(value):
    cls = m.IncrementalAlterConfigsRequest
    return cls(resources=[cls.AlterConfigsResource(
        resource_type=CONFIG_BROKER, resource_name="", configs=[cls.AlterableConfig(
            name="min.insync.replicas", config_operation=OP_SET, value=str(value))])])


def create_topics_body(names, timeout_ms=30_000):
    cls = m.CreateTopicsRequest
    return cls(topics=[cls.CreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                          assignments=[], configs=[]) for name in names],
               timeout_ms=timeout_ms)


def metadata_body(names):
    cls = m.MetadataRequest
    body = cls(topics=None if names is None else
               [cls.MetadataRequestTopic(name=name) for name in names])
    body.allow_auto_topic_creation = False
    return body


def describe_quorum_body():
    cls = m.DescribeQuorumRequest
    return cls(topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[
        cls.PartitionData(partition_index=0)])])


def newest(cls):
    return cls.valid_versions[1]


async def open_connection(port, request_timeout_ms=30_000):
    return await Connection.open("127.0.0.1", port, client_id=CLIENT_ID,
                                 connect_timeout_ms=CONNECT_TIMEOUT_MS,
                                 request_timeout_ms=request_timeout_ms)


class Client:
    """One connection per port, opened on first use (the benchmark's event loop)."""

    def __init__(self):
        self.conns = {}

    async def conn(self, port):
        conn = self.conns.get(port)
        if conn is None or conn.closed:
            conn = self.conns[port] = await open_connection(port)
        return conn

    async def send(self, port, body, timeout_ms=30_000):
        conn = await self.conn(port)
        return await conn.send(body, newest(type(body)), timeout_ms=timeout_ms)

    async def quorum(self, ports):
        """The leader's DescribeQuorum partition (leader id, epoch, high watermark, voters)
        asked of the controllers at `ports` ({node id: port}), or None."""
        for port in ports.values():
            for _ in range(2):  # a non-leader names the leader: ask it once
                try:
                    r = await self.send(port, describe_quorum_body(), timeout_ms=2000)
                except (KraftcoreError, OSError):
                    break
                part = r.topics[0].partitions[0] if r.error_code == 0 and r.topics else None
                if part is None:
                    break
                if part.error_code == 0:
                    return part
                if part.leader_id not in ports:
                    break
                port = ports[part.leader_id]
        return None

    async def topic_names(self, port):
        r = await self.send(port, metadata_body(None), timeout_ms=5000)
        return {t.name for t in r.topics if t.error_code == 0}

    async def close(self):
        conns, self.conns = list(self.conns.values()), {}
        for conn in conns:
            await conn.close()




def _new_loop():
    return asyncio.new_event_loop()


async def _cancel_tasks():
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _close_loop(loop, client):
    try:
        loop.run_until_complete(client.close())
        loop.run_until_complete(_cancel_tasks())
    finally:
        loop.close()


async def _wait_for_leader(client, ports):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        part = await client.quorum(ports)
        if part is not None and part.leader_id >= 0:
            return part
        await asyncio.sleep(0.05)
    raise AssertionError("no quorum leader")


async def _create_acked(client, ports, name):
    """CreateTopics through the leader among the controllers at `ports` ({node id: port})
    until it is answered without error (e.g. while the broker is still fenced, a replication
    factor of 1 cannot be placed), following the leader when it moves; returns the id of the
    controller that answered. TOPIC_ALREADY_EXISTS counts: an earlier attempt whose answer
    was lost created it."""
    deadline = time.monotonic() + WAIT_S
    last = None
    while time.monotonic() < deadline:
        part = await client.quorum(ports)
        if part is None or part.leader_id not in ports:
            last = "no leader"
        else:
            try:
                r = await client.send(ports[part.leader_id], create_topics_body([name]))
            except (KraftcoreError, OSError) as exc:
                last = str(exc)
            else:
                last = r.topics[0].error_code
                if last in (0, TOPIC_ALREADY_EXISTS):
                    return part.leader_id
        await asyncio.sleep(0.1)
    raise AssertionError(f"CreateTopics {name} kept failing: {last}")


def start_cluster(system, directory, brokers=1, overrides=()):
    """3 controllers and `brokers` brokers of `system`, up and with a leader; the caller
    stops it with `down()` in a `finally`. Kafka is skipped without Java or its jars."""
    if system == "kraftcore":
        return LocalCluster(directory, 3, brokers, overrides)
    return kafka_cluster(directory, 3, brokers, overrides)


def rss_kib(pids):
    """{node id: VmRSS in KiB} from /proc/PID/status."""
    out = {}
    for node_id, pid in pids.items():
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out[node_id] = int(line.split()[1])
    return out


def _write_body(op, k, i, names):
    if op == "alter-configs":
        return alter_configs_body(1 + (k + i) % 3)
    return create_topics_body([next(names)])


def _error_code(op, response):
    if op == "alter-configs":
        return response.responses[0].error_code
    return response.topics[0].error_code


def _write_rounds(benchmark, cluster, op, connections, per_connection, ops, rounds, warmup,
                  prefix="writes"):
    """Rounds of `ops` controller writes sent to the active controller, `connections` x
    `per_connection` in flight; returns (latencies of the measured rounds, error codes,
    operations per round)."""
    loop = _new_loop()
    client = Client()
    latencies = []  # one list per round, warm-up rounds first
    errors = []
    names = (f"{prefix}-{j}" for j in range(10_000_000))
    try:
        part = loop.run_until_complete(_wait_for_leader(client, cluster.controller_ports()))
        port = cluster.controller_ports()[part.leader_id]
        conns = [loop.run_until_complete(open_connection(port)) for _ in range(connections)]
        cls = m.IncrementalAlterConfigsRequest if op == "alter-configs" else \
            m.CreateTopicsRequest
        version = newest(cls)
        per_worker = ops // (connections * per_connection)

        async def worker(conn, k, lat):
            for i in range(per_worker):
                body = _write_body(op, k, i, names)
                start = time.perf_counter()
                r = await conn.send(body, version)
                lat.append(time.perf_counter() - start)
                if _error_code(op, r):
                    errors.append(_error_code(op, r))

        async def one_round():
            lat = []
            latencies.append(lat)
            await asyncio.gather(*(worker(conn, k, lat) for conn in conns
                                   for k in range(per_connection)))

        benchmark.pedantic(lambda: loop.run_until_complete(one_round()), rounds=rounds,
                           warmup_rounds=warmup)
        for conn in conns:
            loop.run_until_complete(conn.close())
    finally:
        _close_loop(loop, client)
    measured = [x for lat in latencies[warmup:] for x in lat]
    return measured, errors, per_worker * connections * per_connection


# ------------------------------------------------------------------------------ throughput

@pytest.fixture(scope="module")
def commit_cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("commit") / "cluster", 3, 0)
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.mark.benchmark(group="cluster-commit-throughput")
def test_commit_throughput_kraftcore(benchmark, commit_cluster):
    lat, errors, ops = _write_rounds(benchmark, commit_cluster, "alter-configs", CONNECTIONS,
                                     INFLIGHT_PER_CONNECTION, OPS_PER_ROUND, THROUGHPUT_ROUNDS, 1)
    assert not errors, f"{len(errors)} operations failed: {sorted(set(errors))}"
    _record_throughput(benchmark, "kraftcore-3-controllers-fsync", ops, WINDOW, lat)


def _record_throughput(benchmark, peer, ops, window, latencies, **extra):
    if benchmark.stats is None:  # --benchmark-disable: nothing was timed
        return
    median = benchmark.stats.stats.median
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    benchmark.extra_info.update(peer=peer, records=ops, window=window,
                                ops_per_s=ops / median, latency_p50_ms=p50 * 1e3,
                                latency_p99_ms=p99 * 1e3,
                                latency_quantiles_ms=quantiles_ms(latencies), **extra)
    _STATE.setdefault("throughput", {})[peer] = {
        "ops_per_s": ops / median, "p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3,
        "window": window, **extra}


class PySyncObjNode:
    """A PySyncObj node process (this file run as a script), driven by JSON lines."""

    def __init__(self, me, partners, conf, log_path):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "pysyncobj-node", me,
             ",".join(partners), json.dumps(conf)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self._buffer = b""

    def request(self, command, timeout_s=WAIT_S):
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()
        return self.read(timeout_s)

    def read(self, timeout_s=WAIT_S):
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer from a PySyncObj node; see {self.log_path}")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise AssertionError(f"a PySyncObj node exited; see {self.log_path}")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def stop(self):
        try:
            if self.process.poll() is None:
                self.process.stdin.write(b'{"cmd": "quit"}\n')
                self.process.stdin.flush()
                self.process.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.log.close()

    def warnings(self, text):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace").count(text)


@pytest.mark.benchmark(group="cluster-commit-throughput")
@pytest.mark.parametrize("config", list(PYSYNCOBJ_CONFIGS))
def test_commit_throughput_pysyncobj(benchmark, tmp_path, config):
    pytest.importorskip("pysyncobj")
    from kraftcore.runtime.local_cluster import free_ports

    addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
    nodes = []
    try:
        for i, me in enumerate(addresses):
            nodes.append(PySyncObjNode(me, [a for a in addresses if a != me],
                                       PYSYNCOBJ_CONFIGS[config], str(tmp_path / f"node-{i}.log")))
        for node in nodes:
            assert node.read().get("ready")

        def leader():
            states = [node.request({"cmd": "state"}) for node in nodes]
            leaders = [n for n, s in zip(nodes, states) if s["leader"]]
            return leaders[0] if len(leaders) == 1 and all(s["leader_known"] for s in states) \
                else None

        node = wait_until("a PySyncObj leader", leader, pause_s=0.1)
        results = []

        def one_round():
            result = node.request({"cmd": "load", "ops": OPS_PER_ROUND, "window": WINDOW})
            results.append(result)
            return result

        benchmark.pedantic(one_round, rounds=THROUGHPUT_ROUNDS, warmup_rounds=1)
        kept = node.request({"cmd": "latencies"})["latencies_s"]
    finally:
        for node in nodes:
            node.stop()
    errors = sum(r["errors"] for r in results)
    assert not errors, f"{errors} PySyncObj operations failed (a leader change?)"
    lat = [x for r in kept[1:] for x in r]  # without the warm-up round
    diverged = sum(n.warnings("state machine may have diverged") for n in nodes)
    _record_throughput(benchmark, config, OPS_PER_ROUND, WINDOW, lat,
                       pysyncobj_conf=PYSYNCOBJ_CONFIGS[config],
                       diverged_warnings=diverged)


def _pysyncobj_node(me, partners, conf_json):
    """The PySyncObj node process: a replicated counter; commands on stdin, answers on
    stdout, one JSON object a line."""
    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

    class Counter(SyncObj):
        def __init__(self):
            super().__init__(me, partners.split(","), SyncObjConf(**json.loads(conf_json)))
            self.value = 0

        @replicated
        def incr(self, n):
            self.value += n
            return self.value

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def load(ops, window):
        slots = threading.Semaphore(window)
        finished = threading.Event()
        latencies = [0.0] * ops
        counts = {"done": 0, "errors": 0}

        def submit(i):
            start = time.perf_counter()

            def on_commit(result, error):  # on the leader, once the command is committed
                latencies[i] = time.perf_counter() - start
                if error != FAIL_REASON.SUCCESS:
                    counts["errors"] += 1
                counts["done"] += 1
                slots.release()
                if counts["done"] == ops:
                    finished.set()

            counter.incr(1, callback=on_commit)

        start = time.perf_counter()
        for i in range(ops):
            slots.acquire()
            submit(i)
        finished.wait(WAIT_S)
        elapsed_s = time.perf_counter() - start
        kept.append(latencies)
        return {"elapsed_s": elapsed_s, "errors": counts["errors"] + ops - counts["done"]}

    kept = []  # each round's latencies, sent when asked, outside the timed rounds
    counter = Counter()
    reply({"ready": True})
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "state":
            reply({"leader": counter._isLeader(),
                   "leader_known": counter._getLeader() is not None})
        elif command["cmd"] == "load":
            reply(load(command["ops"], command["window"]))
        elif command["cmd"] == "latencies":
            reply({"latencies_s": kept})
        else:
            break
    counter.destroy()


# ------------------------------------------------------------------------------ in-process load

class KraftcoreNode:
    """A kraftcore controller process (this file run as a script): `kraftcore start`'s
    `Node` plus a load generator inside it, driven by JSON lines like `PySyncObjNode`."""

    def __init__(self, config_path, log_path):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "kraftcore-node", config_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self._buffer = b""

    request = PySyncObjNode.request
    stop = PySyncObjNode.stop

    def read(self, timeout_s=WAIT_S):
        try:
            return PySyncObjNode.read(self, timeout_s)
        except AssertionError as exc:
            raise AssertionError(str(exc).replace("PySyncObj", "kraftcore")) from None


IN_PROCESS_LOADS = {
    # row name: load kind (see _kraftcore_node)
    "kraftcore-in-process-controller-ops": "controller",
    "kraftcore-in-process-raft-appends": "raft",
}


@pytest.mark.benchmark(group="cluster-commit-throughput")
@pytest.mark.parametrize("row", list(IN_PROCESS_LOADS))
def test_commit_throughput_kraftcore_in_process(benchmark, tmp_path, row):
    """The same shape as the PySyncObj rows: the load runs inside the active controller's
    process, 3 controller processes, fsync on. `controller`: each operation a controller
    write (the cluster default `min.insync.replicas`, one ConfigRecord) whose future
    completes once it is committed. `raft`: each operation one NoOpRecord appended through
    `RaftDriver.append` (the replicated log alone, as PySyncObj's counter is) with a
    callback called once it is committed, which appends the next; the controllers apply
    the NoOps as they commit."""
    cluster = LocalCluster(tmp_path / "cluster", 3, 0)
    cluster.down()  # formatted directories and configs; the nodes run below
    nodes = []
    try:
        for node_id, info in sorted(cluster.nodes.items()):
            nodes.append(KraftcoreNode(info["config"], str(tmp_path / f"node-{node_id}.log")))
        for node in nodes:
            assert node.read().get("ready")

        def leader():
            states = [node.request({"cmd": "state"}) for node in nodes]
            leaders = [n for n, s in zip(nodes, states) if s["active"]]
            return leaders[0] if len(leaders) == 1 else None

        node = wait_until("an active kraftcore controller", leader, pause_s=0.1)
        results = []

        def one_round():
            result = node.request({"cmd": "load", "kind": IN_PROCESS_LOADS[row],
                                   "ops": OPS_PER_ROUND, "window": WINDOW})
            results.append(result)
            return result

        benchmark.pedantic(one_round, rounds=THROUGHPUT_ROUNDS, warmup_rounds=1)
        stats = node.request({"cmd": "stats"})
        kept = node.request({"cmd": "latencies"})["latencies_s"]
    finally:
        for node in nodes:
            node.stop()
    errors = sum(r["errors"] for r in results)
    assert not errors, f"{errors} kraftcore operations failed: " + \
        "; ".join(r["first_error"] for r in results if r["first_error"])
    lat = [x for r in kept[1:] for x in r]  # without the warm-up round
    _record_throughput(benchmark, row, OPS_PER_ROUND, WINDOW, lat, **stats)


def _kraftcore_node(config_path):
    """The kraftcore node process: `Node` as `kraftcore start` runs it, plus commands on
    stdin (read by a thread, run on the event loop), answers on stdout."""
    from kraftcore.log.meta_properties import check_formatted
    from kraftcore.runtime import collector
    from kraftcore.runtime.config import NodeConfig
    from kraftcore.runtime.node import Node

    config = NodeConfig.from_file(config_path)
    node = Node(config, check_formatted(config))

    def reply(obj):
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def noop_value():
        from kraftcore.metadata import records as R
        from kraftcore.metadata.snapshot import record_versions

        noop = [R.NoOpRecord()]
        level = node.controller.controller.image.metadata_version()
        return R.encode_values(noop, record_versions(noop, level))[0]

    async def load(kind, ops, window):
        noop = noop_value()
        slots = asyncio.Semaphore(window)
        finished = asyncio.get_running_loop().create_future()
        latencies = [0.0] * ops
        done = errors = 0
        first_error = None
        clock = time.perf_counter

        def submit(i):
            # controller: a write through the event queue, its future done on commit
            start = time.perf_counter()

            def on_commit(future):
                nonlocal done, errors, first_error
                latencies[i] = clock() - start
                error = future.exception()
                if error is None:
                    error = next((f"{code}: {message}" for code, message in future.result()
                                  if code), None)
                if error is not None:
                    errors += 1
                    first_error = first_error or str(error)
                done += 1
                slots.release()
                if done == ops and not finished.done():
                    finished.set_result(None)

            future = node.submit("incremental_alter_configs", [(
                CONFIG_BROKER, "", [("min.insync.replicas", "set", str(1 + i % 3))])])
            future.add_done_callback(on_commit)

        refill_below = ops - window

        def append_next(offset, error):
            # raft: appends settle in the order they were made, so the i-th callback is
            # operation i's; it appends operation i + window (no semaphore needed). Kept
            # lean: it runs once per operation on the leader's critical path
            nonlocal done, errors, first_error
            now = clock()
            i = done
            latencies[i] = now - starts[i]
            if error is not None:
                errors += 1
                first_error = first_error or str(error)
            done = i + 1
            if i < refill_below:
                starts[i + window] = now
                append([noop], append_next)
            elif i + 1 == ops and not finished.done():
                finished.set_result(None)

        start = time.perf_counter()
        if kind == "raft":
            append = node.driver.append
            starts = [0.0] * ops
            for i in range(min(window, ops)):
                starts[i] = time.perf_counter()
                append([noop], append_next)
        else:
            for i in range(ops):
                await slots.acquire()
                submit(i)
        try:
            await asyncio.wait_for(finished, WAIT_S)
        except asyncio.TimeoutError:
            pass
        elapsed_s = time.perf_counter() - start
        kept.append(latencies)
        return {"elapsed_s": elapsed_s, "errors": errors + ops - done,
                "first_error": first_error}

    kept = []  # each round's latencies, sent when asked, outside the timed rounds

    async def main():
        loop = asyncio.get_running_loop()
        commands = asyncio.Queue()
        await node.start()
        collector.settle()  # as `kraftcore start` does once its node has started

        def read_stdin():
            for line in sys.stdin:
                loop.call_soon_threadsafe(commands.put_nowait, line)
            loop.call_soon_threadsafe(commands.put_nowait, '{"cmd": "quit"}')

        threading.Thread(target=read_stdin, daemon=True).start()
        reply({"ready": True})
        while True:
            command = json.loads(await commands.get())
            if command["cmd"] == "state":
                reply({"active": node.controller.controller.active})
            elif command["cmd"] == "load":
                reply(await load(command["kind"], command["ops"], command["window"]))
            elif command["cmd"] == "latencies":
                reply({"latencies_s": kept})
            elif command["cmd"] == "stats":
                driver = node.driver
                reply({"fsyncs": driver.fsyncs, "readys": driver.readys})
            else:
                break
        await node.stop()

    asyncio.run(main())


# ------------------------------------------------------------------------------ writes vs Kafka

@pytest.fixture(scope="module", params=SYSTEMS)
def write_cluster(request, tmp_path_factory):
    """(system, cluster): 3 controllers and 1 broker, Kafka's defaults, one topic created;
    the resident memory of each node is noted once it is up."""
    system = request.param
    cluster = start_cluster(system, tmp_path_factory.mktemp(f"writes-{system}") / "cluster")
    try:
        loop = _new_loop()
        client = Client()
        try:
            leader = loop.run_until_complete(
                _create_acked(client, cluster.controller_ports(), "writes-first"))
        finally:
            _close_loop(loop, client)
        _STATE.setdefault("rss", {})[system] = {
            "after_start": rss_kib(cluster.pids()), "leader_after_start": leader,
            "brokers": sorted(cluster.broker_ports())}
        yield system, cluster
    finally:
        cluster.down()


@pytest.mark.parametrize("row", [
    pytest.param(r, marks=pytest.mark.benchmark(group=f"cluster-writes-{r}"))
    for r in WRITE_ROWS])
def test_controller_writes(benchmark, write_cluster, row):
    system, cluster = write_cluster
    op, connections, per_connection, ops, rounds, warmup = WRITE_ROWS[row]
    lat, errors, done = _write_rounds(benchmark, cluster, op, connections, per_connection,
                                      ops, rounds, warmup, prefix=row)
    assert not errors, f"{len(errors)} operations failed: {sorted(set(errors))}"
    rss = _STATE["rss"][system].setdefault("after_rows", {})[row] = rss_kib(cluster.pids())
    if benchmark.stats is None:  # --benchmark-disable: nothing was timed
        return
    median = benchmark.stats.stats.median
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    window = connections * per_connection
    benchmark.extra_info.update(peer=PEERS[system], records=done, window=window,
                                connections=connections, ops_per_s=done / median,
                                latency_p50_ms=p50 * 1e3, latency_p99_ms=p99 * 1e3,
                                latency_quantiles_ms=quantiles_ms(lat), rss_kib_after=rss)
    _STATE.setdefault("writes", {}).setdefault(row, {})[system] = {
        "ops_per_s": done / median, "p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3,
        "window": window, "connections": connections}


def test_resident_memory(write_cluster):
    """After the write rows (same cluster, same module-scoped fixture): each node's VmRSS."""
    system, cluster = write_cluster
    row = _STATE["rss"][system]
    row["after_load"] = rss_kib(cluster.pids())
    loop = _new_loop()
    client = Client()
    try:
        part = loop.run_until_complete(_wait_for_leader(client, cluster.controller_ports()))
        row["leader_after_load"] = part.leader_id
    finally:
        _close_loop(loop, client)


async def _first_leader(client, ports):
    """Ask every controller for the leader every START_POLL_S until one names it; returns
    perf_counter at that answer."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        part = await client.quorum(ports)
        if part is not None and part.leader_id >= 0:
            return time.perf_counter()
        await asyncio.sleep(START_POLL_S)
    raise AssertionError("no quorum leader")


@pytest.mark.benchmark(group="cluster-start-to-leader")
@pytest.mark.parametrize("system", SYSTEMS)
def test_start_to_leader(benchmark, tmp_path, system):
    """Per trial, a new cluster formatted (not timed), then its 4 processes started; timed:
    the first start -> a controller names the leader in a DescribeQuorum answer."""
    if system != "kraftcore":
        kafka_available()
    clusters, times_ms = [], []
    loop = _new_loop()
    try:
        def setup():
            if clusters:
                clusters[-1].down()
            directory = tmp_path / f"cluster-{len(clusters)}"
            clusters.append(FormattedNodes(directory, 3, 1) if system == "kraftcore" else
                            kafka_cluster(directory, 3, 1, start=False))
            return (clusters[-1],), {}

        def trial(cluster):
            client = Client()
            try:
                cluster.start()
                led = loop.run_until_complete(_first_leader(client, cluster.controller_ports()))
                times_ms.append((led - cluster.started_at) * 1e3)
            finally:
                loop.run_until_complete(client.close())

        benchmark.pedantic(trial, setup=setup, rounds=START_TRIALS)
    finally:
        try:
            for cluster in clusters:
                cluster.down()
        finally:
            loop.close()
    benchmark.extra_info.update(peer=PEERS[system], start_to_leader_ms=times_ms,
                                p50_ms=percentile(times_ms, 50))
    _STATE.setdefault("start", {})[system] = {"times_ms": times_ms}


# ------------------------------------------------------------------------------ failover

async def _stream_creates(port, prefix, acked, unknown, refused, stop_after, started):
    """CreateTopics `prefix-0`, `prefix-1`, ... with STREAM_INFLIGHT in flight until the
    connection dies; `started` is set once `stop_after` were acknowledged."""
    version = newest(m.CreateTopicsRequest)
    names = (f"{prefix}-{j}" for j in range(1_000_000))
    alive = [True]
    conn = None

    async def worker():
        while alive[0]:
            name = next(names)
            try:
                r = await conn.send(create_topics_body([name]), version)
            except (KraftcoreError, OSError):
                unknown.append(name)
                alive[0] = False
                return
            if r.topics[0].error_code == 0:
                acked.append(name)
            else:
                refused.append((name, r.topics[0].error_code))
            if len(acked) >= stop_after:
                started.set()

    try:
        conn = await open_connection(port)
        await asyncio.gather(*(worker() for _ in range(STREAM_INFLIGHT)))
    finally:
        started.set()
        if conn is not None:
            await conn.close()


async def _probe_write(node_id, port):
    """Ask `port` to commit a config write every PROBE_PAUSE_S until it does; returns
    (node id, perf_counter at the response)."""
    conn = None
    try:
        while True:
            try:
                if conn is None or conn.closed:
                    conn = await open_connection(port, request_timeout_ms=WAIT_S * 1000)
                r = await conn.send(alter_configs_body(1),
                                    newest(m.IncrementalAlterConfigsRequest))
                if r.responses[0].error_code == 0:
                    return node_id, time.perf_counter()
            except (KraftcoreError, OSError):
                conn = None
            await asyncio.sleep(PROBE_PAUSE_S)
    finally:
        if conn is not None:
            await conn.close()


async def _kill_and_write(cluster, leader_id):
    ports = cluster.controller_ports(exclude=(leader_id,))
    start = time.perf_counter()
    cluster.kill(leader_id)
    probes = [asyncio.ensure_future(_probe_write(i, p)) for i, p in ports.items()]
    done, pending = await asyncio.wait(probes, timeout=WAIT_S,
                                       return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if not done:
        raise AssertionError(f"no controller accepted a write within {WAIT_S} s")
    node_id, answered = done.pop().result()
    return node_id, answered - start


async def _wait_healthy(client, cluster, restarted_id, since_wall_ms):
    """Until a leader is known, every voter's log end offset is at least the high
    watermark, and the restarted node has fetched since it was started."""
    ports = cluster.controller_ports()
    deadline = time.monotonic() + WAIT_S
    part = None
    while time.monotonic() < deadline:
        part = await client.quorum(ports)
        if part is not None and part.leader_id >= 0 and part.high_watermark >= 0:
            voters = {v.replica_id: v for v in part.current_voters}
            if len(voters) == len(ports) and all(
                    v.log_end_offset >= part.high_watermark for v in voters.values()) and (
                    restarted_id is None or restarted_id == part.leader_id
                    or voters[restarted_id].last_fetch_timestamp >= since_wall_ms):
                return part
        await asyncio.sleep(0.05)
    raise AssertionError(f"the quorum did not catch up: {part}")


def _metadata_shell_topics(directory):
    out = subprocess.run(KRAFTCORE + ["metadata-shell", "--dir", directory, "ls",
                                      "/image/topics/byName"],
                         capture_output=True, text=True, timeout=WAIT_S)
    if out.returncode != 0:
        raise AssertionError(f"metadata-shell --dir {directory}: {out.stderr.strip()}")
    return set(out.stdout.split())


@pytest.mark.parametrize("config", [
    pytest.param(c, marks=pytest.mark.benchmark(group=f"cluster-failover-{c}"))
    for c in FAILOVER_CONFIGS])
@pytest.mark.parametrize("system", SYSTEMS)
def test_failover(benchmark, tmp_path, config, system):
    overrides, fetch_timeout_ms, goal_ms = FAILOVER_CONFIGS[config]
    cluster = start_cluster(system, tmp_path / "cluster", 1, overrides)
    loop = _new_loop()
    client = Client()
    acked, unknown, refused = [], [], []
    trials = []  # {"killed", "new_leader", "ms", "hw_before", "epoch_before", "epoch_after"}
    streams = []
    state = {"killed": None, "restarted_wall_ms": 0}
    hw_violations = []
    live_missing = {}
    unknown_present = None
    try:
        ports = cluster.controller_ports()
        part = loop.run_until_complete(_wait_for_leader(client, ports))
        loop.run_until_complete(_create_acked(client, ports, f"{config}-first"))
        acked.append(f"{config}-first")

        def setup():
            killed = state["killed"]
            if killed is not None:
                state["restarted_wall_ms"] = time.time() * 1000
                cluster.restart(killed)
            for task in streams:
                loop.run_until_complete(task)
            part = loop.run_until_complete(
                _wait_healthy(client, cluster, killed, state["restarted_wall_ms"]))
            if trials:
                trials[-1]["epoch_after"] = part.leader_epoch
                if part.high_watermark < trials[-1]["hw_before"]:
                    hw_violations.append((len(trials), part.high_watermark,
                                          trials[-1]["hw_before"]))
            n = len(trials)
            name = f"{config}-{n}-first"
            leader = loop.run_until_complete(_create_acked(client, cluster.controller_ports(),
                                                           name))
            acked.append(name)
            started = asyncio.Event()
            streams.append(loop.create_task(_stream_creates(
                cluster.controller_ports()[leader], f"{config}-{n}-s", acked, unknown, refused,
                len(acked) + STREAM_ACKED_BEFORE_KILL, started)))
            loop.run_until_complete(asyncio.wait_for(started.wait(), WAIT_S))
            before = loop.run_until_complete(client.quorum(cluster.controller_ports()))
            trials.append({"killed": leader, "hw_before": before.high_watermark,
                           "epoch_before": before.leader_epoch})
            return (leader,), {}

        def trial(leader):
            new_leader, seconds = loop.run_until_complete(_kill_and_write(cluster, leader))
            trials[-1].update(new_leader=new_leader, ms=seconds * 1e3)
            state["killed"] = leader

        benchmark.pedantic(trial, setup=setup, rounds=FAILOVER_TRIALS)

        # Bring the last killed node back, then every node must show every acked topic.
        state["restarted_wall_ms"] = time.time() * 1000
        cluster.restart(state["killed"])
        for task in streams:
            loop.run_until_complete(task)
        part = loop.run_until_complete(
            _wait_healthy(client, cluster, state["killed"], state["restarted_wall_ms"]))
        trials[-1]["epoch_after"] = part.leader_epoch
        if part.high_watermark < trials[-1]["hw_before"]:
            hw_violations.append((len(trials), part.high_watermark, trials[-1]["hw_before"]))
        # Kafka's controllers do not serve Metadata: there only the broker is asked
        every_port = {**cluster.controller_ports(), **cluster.broker_ports()} \
            if system == "kraftcore" else cluster.broker_ports()
        for node_id, port in every_port.items():
            deadline = time.monotonic() + 10
            while True:
                names = loop.run_until_complete(client.topic_names(port))
                missing = set(acked) - names
                if not missing or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            live_missing[node_id] = sorted(missing)
            if node_id in cluster.broker_ports():  # the in-flight ones that took effect
                unknown_present = len(set(unknown) & names)
    finally:
        try:
            _close_loop(loop, client)
        finally:
            cluster.down()
    # On disk, kraftcore's metadata-shell reads kraftcore's logs (Kafka 4.4's carry record
    # types it does not replay)
    disk_missing = {node_id: sorted(set(acked) - _metadata_shell_topics(directory))
                    for node_id, directory in cluster.metadata_dirs().items()} \
        if system == "kraftcore" else {}
    times_ms = [t["ms"] for t in trials if "ms" in t]
    lost = sum(map(len, live_missing.values())) + sum(map(len, disk_missing.values()))
    same_leader = [t for t in trials if t.get("new_leader") == t["killed"]]
    assert not same_leader, f"a killed node answered a write: {same_leader}"
    benchmark.extra_info.update(
        peer=PEERS[system], fetch_timeout_ms=fetch_timeout_ms, overrides=list(overrides),
        failover_ms=times_ms, p50_ms=percentile(times_ms, 50), p99_ms=percentile(times_ms, 99),
        acked_topics=len(acked), unknown_outcome=len(unknown),
        unknown_outcome_committed=unknown_present, refused=len(refused),
        missing_live=live_missing, missing_on_disk=disk_missing, hw_violations=hw_violations,
        trials=[{k: t.get(k) for k in ("killed", "new_leader", "ms", "epoch_before",
                                       "epoch_after")} for t in trials])
    _STATE.setdefault("failover", {}).setdefault(config, {})[system] = {
        "times_ms": times_ms, "goal_ms": goal_ms, "fetch_timeout_ms": fetch_timeout_ms,
        "acked": len(acked), "unknown": len(unknown), "unknown_present": unknown_present,
        "lost": lost, "refused": len(refused),
        "hw_violations": len(hw_violations), "nodes": len(live_missing),
        "on_disk": bool(disk_missing),
        "epochs": [t["epoch_after"] - t["epoch_before"] for t in trials
                   if "epoch_after" in t]}


# ------------------------------------------------------------------------------ propagation

@pytest.mark.benchmark(group="cluster-metadata-propagation")
@pytest.mark.parametrize("system", SYSTEMS)
def test_metadata_propagation(benchmark, tmp_path, system):
    cluster = start_cluster(system, tmp_path / "cluster")
    loop = _new_loop()
    client = Client()
    rng = random.Random(0x70726F70)
    samples = []  # per sample: perf_counter times (see _race)
    rtts = []  # seconds per Metadata round trip
    try:
        ports = cluster.controller_ports()
        leader_port = ports[loop.run_until_complete(
            _create_acked(client, ports, "propagation-first"))]
        (broker_port,) = cluster.broker_ports().values()
        names = (f"propagation-{i}" for i in range(1_000_000))
        version = newest(m.MetadataRequest)
        broker = loop.run_until_complete(client.conn(broker_port))
        loop.run_until_complete(client.conn(leader_port))

        async def race(name, sample):
            """CreateTopics sent, then the broker polled back to back until its image has
            the topic; returns when it does (the create's response may come later)."""
            body = metadata_body([name])
            sample["sent"] = time.perf_counter()
            create = asyncio.ensure_future(client.send(leader_port, create_topics_body([name])))
            create.add_done_callback(lambda _: sample.setdefault("answered",
                                                                 time.perf_counter()))
            sample["create"] = create
            absent_sent = sample["sent"]  # the topic cannot exist before this
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                start = time.perf_counter()
                r = await broker.send(body, version)
                end = time.perf_counter()
                rtts.append(end - start)
                if r.topics[0].error_code == 0:
                    sample.update(seen_after=absent_sent, seen_by=end)
                    return
                absent_sent = start
            raise AssertionError(f"topic {name} never appeared in the broker's image")

        async def finish(sample):
            r = await sample.pop("create")
            if r.topics[0].error_code:
                raise AssertionError(f"CreateTopics failed: error {r.topics[0].error_code}")
            sample.setdefault("answered", time.perf_counter())

        def setup():
            if samples:
                loop.run_until_complete(finish(samples[-1]))
            # a random pause: no phase lock with the fetch and heartbeat cadence
            loop.run_until_complete(asyncio.sleep(rng.uniform(0, 0.01)))
            samples.append({})
            return (next(names), samples[-1]), {}

        benchmark.pedantic(lambda name, sample: loop.run_until_complete(race(name, sample)),
                           setup=setup, rounds=PROPAGATION_SAMPLES, warmup_rounds=5)
        loop.run_until_complete(finish(samples[-1]))
    finally:
        try:
            _close_loop(loop, client)
        finally:
            cluster.down()
    if benchmark.stats is None:  # --benchmark-disable: nothing was timed
        return
    measured = samples[5:]  # after the warm-up rounds
    # The topic entered the broker's image in (seen_after, seen_by]; the leader committed it
    # in [sent, answered]. Upper bound of commit -> image: seen_by - sent (the timed part);
    # from the response: seen_by - answered (negative: the broker had it first).
    upper = [(s["seen_by"] - s["sent"]) * 1e3 for s in measured]
    from_response = [(s["seen_by"] - s["answered"]) * 1e3 for s in measured]
    from_response_low = [(s["seen_after"] - s["answered"]) * 1e3 for s in measured]
    commit = [(s["answered"] - s["sent"]) * 1e3 for s in measured]
    row = {
        "p50_ms": percentile(upper, 50), "p99_ms": percentile(upper, 99), "max_ms": max(upper),
        "from_response_p50_ms": percentile(from_response, 50),
        "from_response_p99_ms": percentile(from_response, 99),
        "from_response_low_p50_ms": percentile(from_response_low, 50),
        "before_response": sum(1 for x in from_response if x <= 0),
        "create_p50_ms": percentile(commit, 50), "create_p99_ms": percentile(commit, 99),
        "resolution_ms": percentile(rtts, 50) * 1e3, "samples": len(measured)}
    benchmark.extra_info.update(peer=PEERS[system], **row)
    _STATE.setdefault("propagation", {})[system] = row


# ------------------------------------------------------------------------------ goals

def _status(ok):
    return "MET" if ok else "NOT MET"


def _vs_kafka(tr, what, ours, theirs, higher_is_better, unit, detail=""):
    """One "cluster vs Kafka" line: MET when kraftcore is ahead; the ratio is kraftcore's
    advantage (above 1x: ahead), whatever the direction of the measure."""
    ratio = ours / theirs if higher_is_better else theirs / ours
    kafka = PEERS["apache-kafka"]
    tr.write_line(f"cluster vs {kafka} {_status(ratio > 1)}: {what} -- kraftcore "
                  f"{ours:,.1f} {unit}, {kafka} {theirs:,.1f} {unit}: {ratio:.2f}x" + detail)


def terminal_summary(tr):
    """What this file prints after the suite's summary table (conftest.py)."""
    if not _STATE:
        return
    tr.write_line("")
    rows = _STATE.get("throughput", {})
    for peer, row in rows.items():
        tr.write_line(f"cluster commit {peer}: {row['ops_per_s']:,.0f} committed ops/s, "
                      f"{row['window']} in flight, latency p50 {row['p50_ms']:.1f} ms, "
                      f"p99 {row['p99_ms']:.1f} ms")
    peers = {p: r for p, r in rows.items() if p.startswith("pysyncobj")}
    if peers:
        best_name, best = max(peers.items(), key=lambda item: item[1]["ops_per_s"])
    for name, ours in rows.items() if peers else ():
        if not name.startswith("kraftcore"):
            continue
        ratio = ours["ops_per_s"] / best["ops_per_s"]
        tr.write_line(
            f"cluster goal {_status(ratio >= THROUGHPUT_GOAL_RATIO)}: committed ops/s, "
            f"{name} (fsync) >= {THROUGHPUT_GOAL_RATIO:g}x the best PySyncObj row (no "
            f"fsync) -- {ours['ops_per_s']:,.0f} vs {best['ops_per_s']:,.0f} ({best_name}): "
            f"{ratio:.2f}x; vs each: " + ", ".join(
                f"{p} {ours['ops_per_s'] / r['ops_per_s']:.2f}x" for p, r in peers.items()))
    for row_name, by_system in _STATE.get("writes", {}).items():
        for system, row in by_system.items():
            tr.write_line(f"cluster writes {row_name} {PEERS[system]}: "
                          f"{row['ops_per_s']:,.0f} committed ops/s, {row['window']} in "
                          f"flight ({row['connections']} connections), latency p50 "
                          f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms")
        ours, theirs = by_system.get("kraftcore"), by_system.get("apache-kafka")
        if ours and theirs:
            _vs_kafka(tr, f"controller writes {row_name}, committed ops/s",
                      ours["ops_per_s"], theirs["ops_per_s"], True, "ops/s",
                      f"; latency p50 {theirs['p50_ms'] / ours['p50_ms']:.2f}x, p99 "
                      f"{theirs['p99_ms'] / ours['p99_ms']:.2f}x")
    for config, by_system in _STATE.get("failover", {}).items():
        for system, row in by_system.items():
            times = row["times_ms"]
            if not times:
                continue
            p50 = percentile(times, 50)
            name = PEERS[system]
            epochs = (f"; leader epochs from a kill to the next trial p50 "
                      f"{percentile(row['epochs'], 50)}, max {max(row['epochs'])}"
                      if row["epochs"] else "")
            if system == "kraftcore":
                tr.write_line(
                    f"cluster goal {_status(p50 <= row['goal_ms'])}: failover after SIGKILL "
                    f"of the leader ({config}, fetch timeout {row['fetch_timeout_ms']} ms), "
                    f"{len(times)} trials, p50 <= {row['goal_ms']} ms -- p50 {p50:.0f} ms, "
                    f"min {min(times):.0f}, p90 {percentile(times, 90):.0f}, "
                    f"max {max(times):.0f} ms{epochs}")
            else:
                tr.write_line(
                    f"cluster failover {name} ({config}, fetch timeout "
                    f"{row['fetch_timeout_ms']} ms): {len(times)} trials, p50 {p50:.0f} ms, "
                    f"min {min(times):.0f}, p90 {percentile(times, 90):.0f}, "
                    f"max {max(times):.0f} ms{epochs}")
            ok = row["lost"] == 0 and row["hw_violations"] == 0
            where = "live Metadata and metadata-shell on disk" if row["on_disk"] else \
                "live Metadata of the broker"
            tr.write_line(
                f"cluster {'goal' if system == 'kraftcore' else 'check'} {_status(ok)}: zero "
                f"committed records lost ({name}, {config}) -- {row['acked']} acknowledged "
                f"topics checked on {row['nodes']} nodes ({where}): {row['lost']} missing; "
                f"high watermark went back {row['hw_violations']} times; {row['unknown']} "
                f"CreateTopics in flight at a kill (outcome unknown, not checked; "
                f"{row['unknown_present']} of them took effect)")
        ours, theirs = by_system.get("kraftcore"), by_system.get("apache-kafka")
        if ours and theirs and ours["times_ms"] and theirs["times_ms"]:
            p90_ours = percentile(ours["times_ms"], 90)
            _vs_kafka(tr, f"failover ({config}), SIGKILL of the active controller -> first "
                      f"committed write, p50", percentile(ours["times_ms"], 50),
                      percentile(theirs["times_ms"], 50), False, "ms",
                      f"; p90 {percentile(theirs['times_ms'], 90) / p90_ours:.2f}x")
    by_system = _STATE.get("propagation", {})
    row = by_system.get("kraftcore")
    if row:
        tr.write_line(
            f"cluster goal {_status(row['p99_ms'] <= PROPAGATION_GOAL_MS)}: metadata "
            f"propagation from commit on the leader to the broker's image, p99 <= "
            f"{PROPAGATION_GOAL_MS:g} ms -- upper bound (CreateTopics sent -> topic in "
            f"the broker's image): p50 {row['p50_ms']:.2f} ms, p99 {row['p99_ms']:.2f} "
            f"ms, max {row['max_ms']:.2f} ms over {row['samples']} samples; from the "
            f"CreateTopics response: p50 {row['from_response_p50_ms']:+.2f} ms, p99 "
            f"{row['from_response_p99_ms']:+.2f} ms ({row['before_response']} in the "
            f"image before the response arrived); CreateTopics itself p50 "
            f"{row['create_p50_ms']:.2f} ms; resolution one Metadata round trip, p50 "
            f"{row['resolution_ms']:.2f} ms")
    theirs = by_system.get("apache-kafka")
    if theirs:
        tr.write_line(
            f"cluster propagation {PEERS['apache-kafka']}: CreateTopics sent -> topic in the "
            f"broker's Metadata p50 {theirs['p50_ms']:.2f} ms, p99 {theirs['p99_ms']:.2f} ms, "
            f"max {theirs['max_ms']:.2f} ms over {theirs['samples']} samples; from the "
            f"CreateTopics response p50 {theirs['from_response_p50_ms']:+.2f} ms; "
            f"CreateTopics itself p50 {theirs['create_p50_ms']:.2f} ms; resolution p50 "
            f"{theirs['resolution_ms']:.2f} ms")
    if row and theirs:
        for stat in ("p50", "p99"):
            _vs_kafka(tr, f"metadata propagation, CreateTopics sent -> broker's Metadata, "
                      f"{stat}", row[f"{stat}_ms"], theirs[f"{stat}_ms"], False, "ms")
    start = _STATE.get("start", {})
    for system, row in start.items():
        times = row["times_ms"]
        tr.write_line(f"cluster start {PEERS[system]}: first process started -> leader "
                      f"named by DescribeQuorum, {len(times)} trials: p50 "
                      f"{percentile(times, 50):.0f} ms, min {min(times):.0f}, max "
                      f"{max(times):.0f} ms")
    if "kraftcore" in start and "apache-kafka" in start:
        _vs_kafka(tr, "start -> elected leader, p50",
                  percentile(start["kraftcore"]["times_ms"], 50),
                  percentile(start["apache-kafka"]["times_ms"], 50), False, "ms")
    rss = {system: _rss_points(row) for system, row in _STATE.get("rss", {}).items()}
    for system, points in rss.items():
        for when, (by_node, leader) in points.items():
            tr.write_line(f"cluster memory {PEERS[system]} {when}: VmRSS " + ", ".join(
                f"node {i} ({_role(_STATE['rss'][system], i, leader)}) {kib / 1024:.0f} MiB"
                for i, kib in by_node.items()))
    if "kraftcore" in rss and "apache-kafka" in rss:
        for when, (ours, _) in rss["kraftcore"].items():
            theirs = rss["apache-kafka"].get(when, (None,))[0]
            if theirs:
                _vs_kafka(tr, f"resident memory {when}, the largest node",
                          max(ours.values()) / 1024, max(theirs.values()) / 1024, False, "MiB",
                          f"; all nodes {sum(theirs.values()) / sum(ours.values()):.2f}x")


def _rss_points(row):
    """{when: ({node id: KiB}, leader id)}: after start, after each write row, at the end."""
    points = {"after start": (row["after_start"], row["leader_after_start"])}
    leader = row.get("leader_after_load", row["leader_after_start"])
    for name, by_node in row.get("after_rows", {}).items():
        points[f"after {name}"] = (by_node, leader)
    if "after_load" in row:
        points["after the write rows"] = (row["after_load"], leader)
    return points


def _role(row, node_id, leader):
    if node_id in row["brokers"]:
        return "broker"
    return "active controller" if node_id == leader else "controller"


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "pysyncobj-node":
        _pysyncobj_node(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "kraftcore-node":
        _kraftcore_node(sys.argv[2])
    else:
        sys.exit(f"usage: {sys.argv[0]} pysyncobj-node HOST:PORT PARTNER,... CONF_JSON\n"
                 f"       {sys.argv[0]} kraftcore-node CONFIG")
