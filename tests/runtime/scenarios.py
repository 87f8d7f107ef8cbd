"""Helpers of the data-plane scenarios (test_data_plane_scenarios.py): a transcript that a
test prints as it goes and attaches to its assertion messages, a local cluster whose
brokers the test stops (SIGSTOP), continues (SIGCONT), kills (SIGKILL), terminates
(SIGTERM, a controlled shutdown) and restarts, and the confluent-kafka (librdkafka) and
kafka-python pieces the scenarios drive: a producer streaming numbered records with one
action done mid-stream, a read-back of a whole partition from its beginning, and the
clients' view of a partition's leader and ISR.

Records are numbered: key `key-{i}`, value `clients.value_of(i)`, so a read-back tells
which acknowledged records are present, missing, or present more than once.

Every wait is bounded (`processes.wait_for`); none is a timing goal.
"""

import contextlib
import glob
import json
import logging
import os
import signal
import struct
import time

from tests.peers.clients import key_of, value_of
from tests.runtime.processes import WAIT_S, LocalCluster, kraftcore, stop, wait_for

# Broker settings every scenario uses: failures are noticed in seconds, not Kafka's 9-30 s.
FAST_SETTINGS = (
    "broker.session.timeout.ms=4000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=2000",
)

# librdkafka's own log lines (connection failures and the like) go to this logger: pytest
# shows them with a failed test instead of printing them on stderr as they come.
LIBRDKAFKA_LOG = logging.getLogger("scenarios.librdkafka")

# A v2 batch starts with base offset (int64), batch length (int32), partition leader epoch
# (int32), magic (int8), crc (uint32), attributes (int16), last offset delta (int32).
_BATCH_HEAD = struct.Struct(">qiibIhi")
_LOG_OVERHEAD_BYTES = 12


def index_of(value):
    """The record number of a value written by `value_of`, or None."""
    if value is None or not value.startswith(b"value-"):
        return None
    try:
        return int(value[6:14])
    except ValueError:
        return None


# ----------------------------------------------------------------------------- transcript


class Transcript:
    """Lines `+12.3s  text`, printed as they are said (pytest -s shows them live) and kept,
    so that a failed check or a wait that gave up carries the whole story."""

    def __init__(self, title):
        self.start = time.monotonic()
        self.lines = []
        self.failed_expectations = []
        self.say(f"== {title}")

    def say(self, text):
        line = f"{time.monotonic() - self.start:6.1f}s  {text}"
        self.lines.append(line)
        print(line, flush=True)

    __call__ = say

    def elapsed_s(self):
        return time.monotonic() - self.start

    def text(self):
        return "\n".join(self.lines)

    def fail(self, what):
        raise AssertionError(f"{what}\n--- transcript ---\n{self.text()}")

    def expect(self, condition, what):
        """Like `check`, but the scenario goes on: a failed expectation is said now and
        fails the test at `finish()` (a bug found midway should not hide the rest)."""
        if not condition:
            self.say(f"EXPECTATION FAILED: {what}")
            self.failed_expectations.append(what)
        else:
            self.say(f"ok: {what}")
        return condition

    def finish(self):
        self.say(f"done in {self.elapsed_s():.1f}s")
        if self.failed_expectations:
            self.fail("failed expectations:\n  " + "\n  ".join(self.failed_expectations))

    def check(self, condition, what):
        """Fail with `what` and the transcript unless `condition`; say it otherwise."""
        if not condition:
            self.say(f"CHECK FAILED: {what}")
            self.fail(what)
        self.say(f"ok: {what}")

    def wait(self, what, predicate, wait_s=WAIT_S):
        """`processes.wait_for`, the transcript attached when it gives up."""
        start = time.monotonic()
        try:
            got = wait_for(what, predicate, wait_s)
        except AssertionError as exc:
            self.say(f"GAVE UP after {time.monotonic() - start:.1f}s: {what}")
            self.fail(str(exc))
        self.say(f"({what}: after {time.monotonic() - start:.1f}s)")
        return got

    @contextlib.contextmanager
    def attached(self, cluster=None, topic=None):
        """Any exception inside becomes an AssertionError carrying the transcript (and the
        brokers' node.log lines about `topic`)."""
        try:
            yield self
        except Exception as exc:
            if "--- transcript ---" in str(exc):
                extra = ""
            else:
                extra = f"\n--- transcript ---\n{self.text()}"
            if cluster is not None:
                extra += "\n--- node.log lines ---\n" + cluster.log_excerpt(topic)
            raise AssertionError(f"{type(exc).__name__}: {exc}{extra}") from exc


# ----------------------------------------------------------------------------- cluster


class ScenarioCluster(LocalCluster):
    """`kraftcore cluster up` with three controllers and three brokers, and the signals a
    scenario sends to single brokers."""

    def __init__(self, directory, settings=FAST_SETTINGS, brokers=3):
        super().__init__(directory, list(settings), brokers=brokers)
        self.stopped = set()
        self.dead = set()

    # -- who is who

    def broker_ids(self):
        return sorted(i for i, n in self.nodes.items() if "broker" in n["roles"])

    def bootstrap_servers(self, exclude=()):
        return ",".join(f"127.0.0.1:{self.nodes[i]['port']}" for i in self.broker_ids()
                        if i not in exclude)

    def wait_ready(self):
        wait_for("three unfenced brokers",
                 lambda: sorted(self.brokers().values()) == ["unfenced"] * len(self.broker_ids()))

    # -- topics, through the controllers (`kraftcore topics`)

    def create_topic(self, name, partitions=1, replication_factor=3, configs=()):
        args = ["topics", "create", "--bootstrap-controller", self.bootstrap(), "--topic", name,
                "--partitions", str(partitions), "--replication-factor", str(replication_factor)]
        for c in configs:
            args += ["--config", c]
        kraftcore(*args)

    def set_topic_config(self, name, *pairs):
        kraftcore("configs", "set", "--bootstrap-controller", self.bootstrap(), "--topic", name,
                  *pairs)

    def describe(self, topic):
        """{partition: {"leader", "leader_epoch", "replicas", "isr", ...}} as the active
        controller has them (`kraftcore topics describe --json`)."""
        out = kraftcore("topics", "describe", "--bootstrap-controller", self.bootstrap(),
                        "--topic", topic, "--json").stdout
        (doc,) = json.loads(out)["topics"]
        return {p["partition"]: p for p in doc["partitions"]}

    def partition(self, topic, partition=0):
        return self.describe(topic)[partition]

    def wait_leaders(self, topic, partitions=1):
        return wait_for(f"a leader for every partition of {topic}", lambda: (
            (d := self.describe(topic)) and len(d) == partitions
            and all((p["leader"] if p["leader"] is not None else -1) >= 0
                    for p in d.values()) and d))

    # -- signals

    def sigstop(self, node_id):
        os.kill(self.pids[node_id], signal.SIGSTOP)
        self.stopped.add(node_id)

    def sigcont(self, node_id):
        os.kill(self.pids[node_id], signal.SIGCONT)
        self.stopped.discard(node_id)

    def sigkill(self, node_id):
        self.kill(node_id)
        self.stopped.discard(node_id)
        self.dead.add(node_id)

    def sigterm(self, node_id):
        os.kill(self.pids[node_id], signal.SIGTERM)

    def alive(self, node_id):
        try:
            os.kill(self.pids[node_id], 0)
        except ProcessLookupError:
            return False
        # a child of the supervisor that exited stays a zombie until reaped
        try:
            with open(f"/proc/{self.pids[node_id]}/stat") as f:
                return f.read().split(") ", 1)[1][0] != "Z"
        except OSError:
            return False

    def start_again(self, node_id):
        self.restart(node_id)
        self.dead.discard(node_id)

    def down(self):
        for node_id in list(self.stopped):
            with contextlib.suppress(ProcessLookupError):
                self.sigcont(node_id)
        # Brokers the test restarted first, while the controllers still run: their
        # controlled shutdown needs the active controller (else it waits out its bound).
        for process in self.extra:
            stop(process)
        super().down()

    # -- what a broker holds

    def partition_dir(self, broker_id, topic, partition=0):
        return os.path.join(self.nodes[broker_id]["dirs"][0], f"{topic}-{partition}")

    def log_end_offset_on_disk(self, broker_id, topic, partition=0):
        """The log end offset of a broker's replica, read from its segment files (batch
        headers only; a torn tail is ignored): what the broker has appended, whether or not
        it is committed. 0 for an empty or missing log."""
        end = 0
        for path in sorted(glob.glob(os.path.join(self.partition_dir(broker_id, topic, partition),
                                                  "*.log"))):
            with open(path, "rb") as f:
                data = f.read()
            pos = 0
            while pos + _BATCH_HEAD.size <= len(data):
                base, length, _, _, _, _, delta = _BATCH_HEAD.unpack_from(data, pos)
                if length <= 0 or pos + _LOG_OVERHEAD_BYTES + length > len(data):
                    break
                end = max(end, base + delta + 1)
                pos += _LOG_OVERHEAD_BYTES + length
        return end

    def segment_bytes(self, broker_id, topic, partition=0):
        """The bytes of a replica's segment files, in offset order."""
        out = b""
        for path in sorted(glob.glob(os.path.join(self.partition_dir(broker_id, topic, partition),
                                                  "*.log"))):
            with open(path, "rb") as f:
                out += f.read()
        return out

    def node_log(self, node_id):
        path = os.path.join(os.path.dirname(self.nodes[node_id]["config"]), "node.log")
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_lines(self, node_id, *needles):
        """The lines of a node's node.log that contain every one of `needles`."""
        return [ln for ln in self.node_log(node_id).splitlines()
                if all(n in ln for n in needles)]

    def log_excerpt(self, topic=None, lines_per_node=25):
        out = []
        for node_id in self.broker_ids():
            lines = [ln for ln in self.node_log(node_id).splitlines()
                     if topic is None or topic in ln or "Traceback" in ln or "Error" in ln]
            out += [f"[node {node_id}] {ln}" for ln in lines[-lines_per_node:]]
        return "\n".join(out)


# ----------------------------------------------------------------------------- clients


def client_partitions(bootstrap, topic, timeout_s=10):
    """{partition: (leader, replicas, isr)} as a broker tells confluent-kafka (Metadata)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "scenario-metadata",
                         "logger": LIBRDKAFKA_LOG})
    md = admin.list_topics(topic, timeout=timeout_s)
    t = md.topics[topic]
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}


def list_offsets(bootstrap, topic, partitions=(0,), timeout_s=10):
    """{partition: (earliest, latest)} by ListOffsets (latest = the high watermark)."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "scenario-offsets",
                         "logger": LIBRDKAFKA_LOG})
    out = {}
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        fs = admin.list_offsets({ck.TopicPartition(topic, p): spec for p in partitions},
                                request_timeout=timeout_s)
        for tp, f in fs.items():
            out.setdefault(tp.partition, []).append(f.result(timeout=timeout_s).offset)
    return {p: tuple(v) for p, v in out.items()}


class Stream:
    """A confluent-kafka producer of numbered records and what it was told about each:
    `acked` (record numbers whose delivery succeeded, with the offset), `failed` (number ->
    error), and the client-level errors (error_cb)."""

    def __init__(self, bootstrap, topic, **conf):
        import confluent_kafka as ck

        self.ck = ck
        self.topic = topic
        self.acked = {}
        self.failed = {}
        self.client_errors = []
        self.sent = 0
        base = {"bootstrap.servers": bootstrap, "client.id": "scenario-producer",
                "linger.ms": 5, "error_cb": self._on_error, "logger": LIBRDKAFKA_LOG}
        self.producer = ck.Producer({**base, **conf})

    def _on_error(self, err):
        self.client_errors.append(err)

    def _on_delivery(self, err, msg):
        i = index_of(msg.value())
        if err is None:
            self.acked[i] = (msg.partition(), msg.offset())
        else:
            self.failed[i] = err

    def send(self, i, partition=None):
        kwargs = {} if partition is None else {"partition": partition}
        while True:
            try:
                self.producer.produce(self.topic, key=key_of(i), value=value_of(i),
                                      on_delivery=self._on_delivery, **kwargs)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent += 1
        self.producer.poll(0)

    def send_range(self, numbers, partition=None, pause_s=0.0, actions=None):
        """Send each record number; `actions` {number: callable} runs a callable right
        after that record is handed to the producer (mid-stream)."""
        actions = actions or {}
        for i in numbers:
            self.send(i, partition)
            if i in actions:
                actions[i]()
            if pause_s:
                self.producer.poll(pause_s)

    def flush(self, wait_s=WAIT_S):
        """Wait until every record was acknowledged or failed; returns how many are still
        in flight (0 unless `wait_s` ran out)."""
        return self.producer.flush(wait_s)

    def close(self):
        """Drop the producer (librdkafka destroys it with the Python object), so that it
        stops reconnecting to brokers the scenario killed."""
        self.producer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def failure_codes(self):
        """{error name: count} of the failed deliveries."""
        out = {}
        for err in self.failed.values():
            out[err.name()] = out.get(err.name(), 0) + 1
        return out


def read_partition(bootstrap, topic, partition=0, wait_s=30):
    """Every record of `partition` from its beginning to its high watermark, by assign()
    without a group (confluent-kafka, isolation read_committed, librdkafka's default).
    Returns (values, high watermark)."""
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"scenario-read-{topic}",
                            "client.id": "scenario-reader", "enable.auto.commit": False,
                            "enable.auto.offset.store": False, "enable.partition.eof": True,
                            "isolation.level": "read_committed", "fetch.wait.max.ms": 100,
                            "logger": LIBRDKAFKA_LOG})
    try:
        _, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, partition),
                                                 timeout=wait_s, cached=False)
        consumer.assign([ck.TopicPartition(topic, partition, ck.OFFSET_BEGINNING)])
        values, position = [], 0
        deadline = time.monotonic() + wait_s
        while position < high:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic}-{partition}: position {position} still "
                                     f"below the high watermark {high} after {wait_s}s")
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    if m.error().code() != ck.KafkaError._PARTITION_EOF:
                        raise AssertionError(f"reading {topic}-{partition}: {m.error()}")
                    continue
                values.append(m.value())
                position = m.offset() + 1
        return values, high
    finally:
        consumer.close()


def tally(values, acked):
    """What a read-back holds against the acknowledged record numbers: (present acked,
    lost acked numbers, duplicated numbers {i: copies}, unacked numbers present)."""
    counts = {}
    for v in values:
        i = index_of(v)
        counts[i] = counts.get(i, 0) + 1
    lost = sorted(i for i in acked if i not in counts)
    duplicates = {i: n for i, n in counts.items() if n > 1}
    unacked = sorted(i for i in counts if i not in acked)
    return len(acked) - len(lost), lost, duplicates, unacked


def ranges(numbers):
    """[3, 4, 5, 9] -> '3-5, 9' (at most 8 ranges, then how many more)."""
    numbers = sorted(numbers)
    out, start, prev = [], None, None
    for n in numbers + [None]:
        if start is not None and (n is None or n != prev + 1):
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    return ", ".join(out[:8]) + (f", ... ({len(out) - 8} more ranges)" if len(out) > 8 else "")


def high_watermark_and_log_end(cluster, topic, leader, bootstrap, partition=0):
    """(ListOffsets latest, the leader's log end offset on disk)."""
    leo = cluster.log_end_offset_on_disk(leader, topic, partition)
    return list_offsets(bootstrap, topic, (partition,))[partition][1], leo


def settle_after_election(t, cluster, topic, leader, bootstrap, partition=0, wait_s=15):
    """After a new leader took over: expect its high watermark to reach its log end offset
    with no new append (its ISR has caught up; an ISR of the leader alone at once). When it
    does not, that expectation fails (see `Transcript.expect`) and one acks=all record
    (number 900000) is produced to move the high watermark, so that the scenario can count
    what the partition holds. Returns the log end offset the high watermark reached."""
    def settled():
        high, leo = high_watermark_and_log_end(cluster, topic, leader, bootstrap, partition)
        if high != leo:
            raise AssertionError(f"high watermark {high}, leader's log end offset {leo}")
        return (leo,)
    try:
        (leo,) = wait_for(f"the high watermark to reach leader {leader}'s log end offset",
                          settled, wait_s)
        t(f"leader {leader}: high watermark = log end offset = {leo}")
        return leo
    except AssertionError as exc:
        high, leo = high_watermark_and_log_end(cluster, topic, leader, bootstrap, partition)
        p = cluster.partition(topic, partition)
        t.expect(False, f"new leader {leader} (ISR {p['isr']}): its high watermark reaches its "
                 f"log end offset without a new append — still {high} < {leo} after "
                 f"{wait_s}s ({exc})")
    with Stream(bootstrap, topic, acks="all") as nudge:
        nudge.send(900_000, partition)
        nudge.flush(30)
    high, leo = high_watermark_and_log_end(cluster, topic, leader, bootstrap, partition)
    t(f"after one more acks=all record ({len(nudge.acked)} acknowledged): high watermark "
      f"{high}, log end offset {leo}")
    return leo


def produce_until(t, stream, start, what, predicate, step=5, pause_s=0.02, wait_s=WAIT_S):
    """Send records `start`, `start + 1`, ... a few at a time until `predicate()` holds (an
    ISR shrinks only while records arrive that a follower does not fetch: an idle follower
    is caught up). Returns (the predicate's value, the next record number)."""
    n = [start]

    def step_and_check():
        stream.send_range(range(n[0], n[0] + step), pause_s=pause_s)
        n[0] += step
        return predicate()

    got = t.wait(what, step_and_check, wait_s)
    return got, n[0]


class ProducerErrors(logging.Handler):
    """The errors kafka-python's producer reports in its log (a retry: "Got error produce
    response ..., retrying"; a request that failed: "Error sending produce request"), each
    as (error name, retriable per kafka.errors, the message)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        import kafka.errors as ke

        name, retriable = None, None
        for arg in record.args or ():
            if isinstance(arg, BaseException):
                name, retriable = type(arg).__name__, getattr(arg, "retriable", False)
            elif isinstance(arg, str) and isinstance(getattr(ke, arg, None), type) \
                    and issubclass(getattr(ke, arg), BaseException):
                name, retriable = arg, getattr(getattr(ke, arg), "retriable", False)
        self.seen.append((name, retriable, record.getMessage()))

    def __enter__(self):
        logging.getLogger("kafka.producer").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("kafka.producer").removeHandler(self)

    def summary(self):
        """{(error name, retriable): count}"""
        out = {}
        for name, retriable, _ in self.seen:
            out[(name, retriable)] = out.get((name, retriable), 0) + 1
        return out
