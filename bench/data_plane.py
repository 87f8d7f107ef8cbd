"""Helpers of bench/test_bench_data_plane.py: a kraftcore cluster from `kraftcore cluster
up`, a real Kafka node (tests/peers/kafka_node.py), and the loads run against either of
them — a librdkafka producer and consumer (confluent-kafka), a raw Fetch loop with
kraftcore's own `Connection`, a raw Produce pre-fill, and the disk's own limit.

Every wait is bounded (WAIT_S); nothing here judges a timing.
"""

import asyncio
import contextlib
import os
import shutil
import struct
import subprocess
import sys
import time
from array import array

from kraftcore import codec
from kraftcore.net import Connection
from kraftcore.protocol import messages as m

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:  # tests.peers.kafka_node, when pytest was not run from the root
    sys.path.insert(0, _REPO)
from tests.peers import kafka_node as kn

KafkaNodeError = kn.KafkaNodeError

from clusters import WAIT_S, LocalCluster  # noqa: E402 (bench/ is on the path)
CLIENT_ID = "kraftcore-bench-data"
MIB = 1 << 20
PRODUCE_VERSION = 9  # topic names (v13 uses ids); Kafka 4.4 and kraftcore both serve it
FETCH_VERSION = 12  # topic names (v13 uses ids)
RETRIABLE = (3, 6)  # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER

try:  # a client error while the cluster settles means "not yet" to wait_until
    from confluent_kafka import KafkaException as _KafkaException
except ImportError:  # pragma: no cover
    _KafkaException = RuntimeError

# librdkafka's producer for the throughput runs: batches of up to 1 MB per partition
# (batch.size), 5 ms linger, a bounded queue (so latency under saturation is bounded too),
# no compression, no idempotence (kraftcore serves it, but the peers compare plain acks).
PRODUCER_THROUGHPUT = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 65_536,
    "compression.type": "none",
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 5,
    "socket.send.buffer.bytes": 4 * MIB,
    "message.timeout.ms": 120_000,
}

CONSUMER = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.max.bytes": 64 * MIB,
    "max.partition.fetch.bytes": MIB,  # 8 MiB made each Fetch slower to build: 0.6x
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 262_144,
    "queued.min.messages": 1_000_000,
    "socket.receive.buffer.bytes": 4 * MIB,
}


def percentile(values, p):
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def wait_until(what, predicate, timeout_s=WAIT_S, pause_s=0.1):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (AssertionError, OSError, RuntimeError, _KafkaException) as exc:  # not yet
            last = exc
        else:
            if last:
                return last
        time.sleep(pause_s)
    raise AssertionError(f"gave up waiting for {what} after {timeout_s} s (last: {last!r})")


def sched_seconds(pid):
    """(run, wait) seconds summed over the threads of a process, from /proc/PID/task/*/
    schedstat: time on a CPU, and time runnable but waiting for one (the machine's other
    work taking the CPU). None when gone."""
    run = wait = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                r, w, _ = f.read().split()
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
        run += int(r)
        wait += int(w)
    return run / 1e9, wait / 1e9


class Usage:
    """CPU use of some processes over a measured stretch: per process, cores busy (run
    seconds / wall seconds) and cores wanted but waiting (runqueue wait / wall). Threads
    that end during the stretch are missed (none do here)."""

    def __init__(self, pids):
        self.pids = dict(pids)
        self.before = {k: sched_seconds(p) for k, p in self.pids.items()}

    def shares(self, wall_s):
        out = {}
        for k, p in self.pids.items():
            now, before = sched_seconds(p), self.before[k]
            if now is None or before is None:
                continue
            out[k] = {"run": (now[0] - before[0]) / wall_s, "wait": (now[1] - before[1]) / wall_s}
        return out


def load_average():
    return os.getloadavg()[0]


# ------------------------------------------------------------------------------ clusters

class KraftcoreCluster(LocalCluster):
    """`kraftcore cluster up` (3 controllers, `brokers` brokers) in `directory`, with the
    brokers' ports at hand; `down()` also removes the partition logs (GBs after the
    throughput runs; the node logs stay)."""

    def __init__(self, directory, brokers, overrides=()):
        super().__init__(directory, 3, brokers, overrides)

    def broker_ids(self):
        return [i for i, n in sorted(self.nodes.items()) if "broker" in n["roles"]]

    def broker_port(self, node_id):
        return self.nodes[node_id]["ports"]["broker"]

    def bootstrap(self):
        return ",".join(f"127.0.0.1:{self.broker_port(i)}" for i in self.broker_ids())

    def node_of_port(self, port):
        return next(i for i in self.broker_ids() if self.broker_port(i) == port)

    def pids(self):
        return {i: n["pid"] for i, n in self.nodes.items()}

    def down(self):
        try:
            super().down()
        finally:
            for node in getattr(self, "nodes", {}).values():
                shutil.rmtree(node["dirs"][0], ignore_errors=True)


@contextlib.contextmanager
def kafka_node(tmpdir):
    """One real Kafka 4.4 combined node (RF 1 only); yields (bootstrap, pid) or raises
    KafkaNodeError (no Java, no jars)."""
    before = set(_children())
    try:
        with kn.kafka_combined(tmpdir, extra_properties={"num.io.threads": 4,
                                                         "num.network.threads": 3}) as bootstrap:
            new = [p for p in _children() if p not in before]
            yield bootstrap, (new[0] if new else None)
    finally:  # the partition logs (GBs after the throughput runs); server.log stays
        shutil.rmtree(os.path.join(str(tmpdir), "data"), ignore_errors=True)


def _children():
    out = subprocess.run(["pgrep", "-P", str(os.getpid())], check=False,
                         capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


# ------------------------------------------------------------------------------ admin

def create_topic(bootstrap, topic, partitions, rf, configs=None):
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID})
    deadline = time.monotonic() + WAIT_S
    while True:
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=rf, config=configs or {})],
                                  operation_timeout=30, request_timeout=30)[topic]
        try:
            fut.result(timeout=WAIT_S)
            break
        except ck.KafkaException as exc:
            err = exc.args[0]
            if err.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"CreateTopics {topic}: {err}")
            time.sleep(0.5)  # e.g. brokers still fenced: the replicas cannot be placed
    wait_topic_ready(admin, topic, partitions, rf)
    return admin


def partition_state(admin, topic):
    """{partition: (leader, replicas, isrs)} from Metadata."""
    md = admin.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in t.partitions.items()}


def wait_topic_ready(admin, topic, partitions, isr):
    def ready():
        state = partition_state(admin, topic)
        return len(state) == partitions and all(
            leader >= 0 and len(isrs) >= isr for leader, _, isrs in state.values()) and state
    return wait_until(f"{topic}: {partitions} partitions with a leader and ISR {isr}", ready)


# ------------------------------------------------------------------------------ produce

class Producer:
    """A librdkafka producer whose rounds send `records` records of `value_bytes` (key: the
    4-byte index, partitions in turn) and time each from produce() to its delivery report."""

    def __init__(self, bootstrap, topic, partitions, value_bytes, acks="all", extra=None):
        import confluent_kafka as ck

        self.ck = ck
        self.topic, self.partitions = topic, partitions
        self.value = os.urandom(value_bytes)
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID,
                                     "acks": acks, **PRODUCER_THROUGHPUT, **(extra or {})})
        self.rounds = []  # per round: {"seconds", "records", "bytes", "latencies_s"}

    def round(self, records):
        perf = time.perf_counter
        sent = array("d", bytes(8 * records))
        latency = array("d", bytes(8 * records))
        errors = []
        unpack = struct.Struct(">I").unpack

        def on_delivery(err, msg):
            i = unpack(msg.key())[0]
            latency[i] = perf() - sent[i]
            if err is not None:
                errors.append(str(err))

        produce, poll = self.producer.produce, self.producer.poll
        topic, value, parts = self.topic, self.value, self.partitions
        start = perf()
        for i in range(records):
            key = i.to_bytes(4, "big")
            sent[i] = perf()
            while True:
                try:
                    produce(topic, value, key, i % parts, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.0005)
            if not i & 255:
                poll(0)
        left = self.producer.flush(WAIT_S * 2)
        seconds = perf() - start
        if left or errors:
            raise AssertionError(f"produce: {left} undelivered, {len(errors)} errors "
                                 f"({sorted(set(errors))[:3]})")
        self.rounds.append({"seconds": seconds, "records": records,
                            "bytes": records * len(value), "latencies_s": latency})
        return seconds

    def summary(self, warmup=1):
        rounds = self.rounds[warmup:] or self.rounds
        secs = sorted(r["seconds"] for r in rounds)
        median = secs[len(secs) // 2]
        r0 = rounds[0]
        lat = [x for r in rounds for x in r["latencies_s"]]
        return {"mb_per_s": r0["bytes"] / median / 1e6, "records_per_s": r0["records"] / median,
                "median_s": median, "rounds": len(rounds), "record_bytes": len(self.value),
                "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3}

    def close(self):
        self.producer.flush(WAIT_S)


def paced_latency(bootstrap, topic, partitions, value_bytes, rate_per_s, seconds, acks="all"):
    """Delivery latency p50/p99 at a fixed offered rate (no queueing in the client)."""
    p = Producer(bootstrap, topic, partitions, value_bytes, acks,
                 extra={"linger.ms": 1})
    perf = time.perf_counter
    n = int(rate_per_s * seconds)
    lat = array("d", bytes(8 * n))
    unpack = struct.Struct(">I").unpack
    sent = array("d", bytes(8 * n))

    def on_delivery(err, msg):
        i = unpack(msg.key())[0]
        lat[i] = perf() - sent[i]

    start = perf()
    for i in range(n):
        due = start + i / rate_per_s
        while perf() < due:
            p.producer.poll(max(0.0, min(0.001, due - perf())))
        sent[i] = perf()
        p.producer.produce(topic, p.value, i.to_bytes(4, "big"), i % partitions,
                           on_delivery=on_delivery)
        p.producer.poll(0)
    p.producer.flush(WAIT_S)
    return {"rate_per_s": rate_per_s, "p50_ms": percentile(lat, 50) * 1e3,
            "p99_ms": percentile(lat, 99) * 1e3}


# ------------------------------------------------------------------------------ disk limit

def disk_write(directory, total_bytes, files=3, fsync=None, chunk=MIB):
    """Write `total_bytes` to each of `files` new files, 1 MiB at a time in turn (like three
    replicas); fsync None (page cache), "end" (fdatasync each file once at the end) or
    "chunk" (fdatasync after every 1 MiB write). Returns the seconds; removes the files."""
    buf = os.urandom(chunk)
    paths = [os.path.join(directory, f"disk-limit-{i}") for i in range(files)]
    fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) for p in paths]
    try:
        start = time.perf_counter()
        written = 0
        while written < total_bytes:
            n = min(chunk, total_bytes - written)
            view = memoryview(buf)[:n]
            for fd in fds:
                os.write(fd, view)
                if fsync == "chunk":
                    os.fdatasync(fd)
            written += n
        if fsync == "end":
            for fd in fds:
                os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        for fd in fds:
            os.close(fd)
        for p in paths:
            os.unlink(p)


# ------------------------------------------------------------------------------ raw client

def _host_port(address):
    host, port = address.split(",")[0].rsplit(":", 1)
    return host, int(port)


async def raw_prefill(address, topic, partitions, value_bytes, total_bytes, inflight=8):
    """Fill `topic` through Produce (acks=1) with ~1 MB batches of `value_bytes` records
    (the same batch bytes every time: the leader assigns the offsets). Returns (records,
    bytes) written per partition... in all: (records, value bytes)."""
    per_batch = max(1, 1_000_000 // (value_bytes + 40))
    batch = bytes(codec.encode_batch([os.urandom(value_bytes)] * per_batch,
                                     timestamp=int(time.time() * 1000)))
    batches = max(partitions, total_bytes // (per_batch * value_bytes))
    batches -= batches % partitions
    host, port = _host_port(address)
    conn = await Connection.open(host, port, client_id=CLIENT_ID, request_timeout_ms=60_000)
    cls = m.ProduceRequest
    sem = asyncio.Semaphore(inflight)
    errors = []

    async def one(i):
        async with sem:
            body = cls(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
                cls.TopicProduceData(name=topic, partition_data=[
                    cls.PartitionProduceData(index=i % partitions, records=batch)])])
            for _ in range(100):  # a new topic's leader may not lead yet: retry those
                r = await conn.send(body, PRODUCE_VERSION)
                code = r.responses[0].partition_responses[0].error_code
                if code not in RETRIABLE:
                    break
                await asyncio.sleep(0.1)
            if code:
                errors.append(code)

    try:
        await asyncio.gather(*(one(i) for i in range(batches)))
    finally:
        await conn.close()
    if errors:
        raise AssertionError(f"prefill {topic}: Produce errors {sorted(set(errors))}")
    return batches * per_batch, batches * per_batch * value_bytes


def _last_offset(records):
    """The offset after the last whole batch in a Fetch's records bytes (None: none)."""
    pos, end, nxt = 0, len(records), None
    unpack = struct.Struct(">qi").unpack_from
    last_delta = struct.Struct(">i").unpack_from
    while pos + 61 <= end:
        base, length = unpack(records, pos)
        if pos + 12 + length > end:
            break
        nxt = base + last_delta(records, pos + 23)[0] + 1
        pos += 12 + length
    return nxt


async def raw_fetch(address, topic, partitions, end_offsets, partition_max_bytes=4 * MIB):
    """Read every partition from offset 0 to its end with one Fetch in flight per partition
    on one connection, counting bytes, decoding no record. Returns (seconds, bytes)."""
    host, port = _host_port(address)
    conn = await Connection.open(host, port, client_id=CLIENT_ID, request_timeout_ms=60_000,
                                 frame_bytes_max=4 * partition_max_bytes + MIB)
    cls = m.FetchRequest
    total = [0]

    async def one(p):
        offset = 0
        while offset < end_offsets[p]:
            body = cls(replica_id=-1, max_wait_ms=100, min_bytes=1,
                       max_bytes=partition_max_bytes, isolation_level=0, topics=[
                           cls.FetchTopic(topic=topic, partitions=[cls.FetchPartition(
                               partition=p, fetch_offset=offset,
                               partition_max_bytes=partition_max_bytes)])])
            r = await conn.send(body, FETCH_VERSION)
            part = r.responses[0].partitions[0]
            if part.error_code:
                raise AssertionError(f"raw fetch {topic}-{p}@{offset}: error {part.error_code}")
            records = part.records or b""
            nxt = _last_offset(records)
            if nxt is None:
                continue
            total[0] += len(records)
            offset = nxt

    start = time.perf_counter()
    try:
        await asyncio.gather(*(one(p) for p in range(partitions)))
    finally:
        await conn.close()
    return time.perf_counter() - start, total[0]


def run(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------------------ consume

def librdkafka_consume(bootstrap, topic, partitions, expected_records, timeout_s=WAIT_S * 2):
    """assign() every partition from the beginning; consume until `expected_records` arrived.
    Returns (seconds from assign to the last record, value bytes, seconds from assign to
    the first record)."""
    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": bootstrap, "client.id": CLIENT_ID,
                     "group.id": f"bench-assign-{topic}-{time.monotonic_ns()}", **CONSUMER})
    got = nbytes = 0
    first = None
    try:
        # The partitions' leaders known before the clock starts: assigned without them,
        # librdkafka waits a fixed 500 ms before its first offset query (its debug log: "no
        # current leader for partition: (re)starting offset query timer").
        c.list_topics(topic, timeout=WAIT_S)
        start = time.perf_counter()
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout_s
        consume = c.consume
        while got < expected_records:
            if time.monotonic() > deadline:
                raise AssertionError(f"consume {topic}: {got} of {expected_records} records "
                                     f"after {timeout_s} s")
            # never more than what is left: consume() waits its whole timeout for a count
            # that cannot come
            for msg in consume(1 if first is None else min(10_000, expected_records - got),
                               0.5):
                if msg.error() is None:
                    got += 1
                    nbytes += len(msg)
            if first is None and got:
                first = time.perf_counter() - start
        seconds = time.perf_counter() - start
    finally:
        c.close()
    return seconds, nbytes, first


# ------------------------------------------------------------------------------ leader probe

METADATA_VERSION = 12


async def _probe_leader(port, topic, killed, bound_s):
    """Ask the broker at `port` for `topic` partition 0 every 10 ms until it names a leader
    other than `killed`; return the perf_counter time of that answer (None: bound passed)."""
    cls = m.MetadataRequest
    body = cls(topics=[cls.MetadataRequestTopic(name=topic)])
    body.allow_auto_topic_creation = False
    conn = await Connection.open("127.0.0.1", port, client_id=CLIENT_ID,
                                 request_timeout_ms=5_000)
    try:
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            r = await conn.send(body, METADATA_VERSION)
            parts = r.topics[0].partitions if r.topics else []
            if parts and parts[0].leader_id >= 0 and parts[0].leader_id != killed:
                return time.perf_counter()
            await asyncio.sleep(0.01)
        return None
    finally:
        await conn.close()


def leader_probe_thread(port, topic, killed, bound_s):
    """Start `_probe_leader` in a thread of its own; returns (thread, result list)."""
    import threading

    result = []
    thread = threading.Thread(target=lambda: result.append(
        asyncio.run(_probe_leader(port, topic, killed, bound_s))), daemon=True)
    thread.start()
    return thread, result
