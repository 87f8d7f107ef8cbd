"""The data plane over sockets: kraftcore brokers (`kraftcore cluster up` on 127.0.0.1, 3
controllers beside them) driven by librdkafka (confluent-kafka), with the disk's own limit
and a real Kafka 4.4 node (tests/peers/kafka_node.py) measured in the same run.

* `data-produce`: 1 KiB values (4-byte key), 6 partitions, acks=all, one librdkafka
  producer in this process (`data_plane.PRODUCER_THROUGHPUT`: linger.ms 5, batch.size
  1 MB, up to 200k messages / 64 MiB queued, no compression, not idempotent, 5 requests in
  flight per connection). A round produces PRODUCE_RECORDS records and flushes; the
  statistic is the round's time (MB/s = value bytes / median round). Latency = produce()
  call -> delivery report (the report is read by poll() every 256 messages and while the
  queue is full, so it includes the wait in librdkafka's queue: under saturation it is
  mostly queueing); a second, paced run offers PACED_RATE records/s (linger.ms 1) and
  reports the latency without that queue.
  Rows: kraftcore 3 brokers, RF 3, min.insync.replicas 2 (the goal's row); kraftcore 1
  broker, RF 1; Kafka 4.4 one combined node, RF 1 (when Java and the jars are there). The
  RF 1 rows are the apples-to-apples pair; Kafka single-node RF 1 vs kraftcore RF 3 is not.
  The disk's limit on the same machine, same file system: the bytes of one round written
  to 3 files (as 3 replicas would), 1 MiB writes in turn, into the page cache, then with
  one fdatasync per file at the end, then with an fdatasync after every 1 MiB. kraftcore
  (like Kafka) does not fsync partition data by default, so the page-cache row is the limit
  the goal is read against. Goal: RF 3 >= 100 MB/s and >= 0.5x the page-cache limit.
* `data-consume`: one broker; a topic of 6 partitions pre-filled through Produce with
  CONSUME_MB of ~1 MB batches (in the page cache), read from the beginning with
  librdkafka's assign() (no group), 1 KiB and 16 KiB values; and with a raw Fetch loop on
  kraftcore's own `Connection` (one Fetch per partition in flight, 4 MiB per partition,
  bytes counted, no record decoded) to separate the broker's cost from the client's.
  Both against kraftcore and Kafka. CPU seconds of the broker process and of this process
  per round say who is busy. Goal: 500 MB/s.
* `data-failover-*`: 3 brokers, a topic of one partition, RF 3, min.insync.replicas 2, a
  librdkafka producer (acks=all) sending a record every 2 ms; per trial the producer is
  flushed, the partition's leader broker is killed with SIGKILL, and the time runs until
  the first delivery report without error (a produce to that partition acknowledged by the
  new leader's ISR). Client: retry.backoff.ms 50 (max 200), reconnect.backoff.ms 50 (max
  500), topic.metadata.refresh.interval.ms 250. librdkafka asks for metadata at once when
  the leader's connection drops, but that answer still names the dead leader (it is not
  fenced before its session expires); after that it looks again only on its periodic
  refresh or its own 1 s scan of unavailable partitions, so the periodic refresh bounds
  the client's part (the `-client-refresh-5s` row shows the scan alone). A second
  connection asks a surviving broker for the leader every 10 ms: the server's part.
  Between trials (untimed) the killed broker is restarted and the ISR waits to be whole.
  With Kafka's defaults (broker.session.timeout.ms 9000; goal p50 <= 9500 ms) and with
  broker.session.timeout.ms 1000, broker.heartbeat.interval.ms 200 (goal p50 < 1500 ms).

Nothing asserts a timing; the goals are printed at the end. Every process started here is
stopped in a `finally` (fixtures). KRAFTCORE_BENCH_DATA_SCALE (default 1) scales the
sizes (0.1 for a quick try).

Run alone: .venv/bin/python -m pytest bench/test_bench_data_plane.py -q -p no:cacheprovider
"""

import os
import time

import data_plane as dp
import pytest
from interleave import REPLAY

SCALE = float(os.environ.get("KRAFTCORE_BENCH_DATA_SCALE", "1"))
PARTITIONS = 6
RECORD_BYTES = 1024
PRODUCE_RECORDS = int(200_000 * SCALE)  # 200 MB of values per round
PRODUCE_ROUNDS = 3  # after one warm-up round
PACED_RATE = 5_000  # records/s of the latency run (5 MB/s)
PACED_S = 4.0
CONSUME_MB = max(16, int(512 * SCALE))
CONSUME_ROUNDS = 3
RAW_ROUNDS = 3
CONSUME_SIZES = {"1KiB": 1024, "16KiB": 16384}
FAILOVER_TRIALS = 5
FAILOVER_PACE_S = 0.002
FAILOVER_BOUND_S = 60
FAILOVER_CONFIGS = {
    # name: (broker overrides, client overrides, goal p50 ms)
    "kafka-defaults": ((), {}, 9500),
    "session-1000ms": (("broker.session.timeout.ms=1000",
                        "broker.heartbeat.interval.ms=200"), {}, 1500),
    # the same brokers, with librdkafka's periodic refresh at 5 s: the client then learns
    # the new leader only from its own 1 s scan of unavailable partitions
    "session-1000ms-client-refresh-5s": (("broker.session.timeout.ms=1000",
                                          "broker.heartbeat.interval.ms=200"),
                                         {"topic.metadata.refresh.interval.ms": 5000}, 1500),
}
FAILOVER_CLIENT = {
    "acks": "all", "linger.ms": 0, "enable.idempotence": False,
    "retry.backoff.ms": 50, "retry.backoff.max.ms": 200,
    "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
    "topic.metadata.refresh.interval.ms": 250, "message.timeout.ms": 120_000,
    "request.timeout.ms": 10_000,
}
GOAL_PRODUCE_MB_S = 100.0
GOAL_PRODUCE_LIMIT_RATIO = 0.5
GOAL_CONSUME_MB_S = 500.0

_STATE = {"produce": {}, "disk": {}, "consume": {}, "failover": {}, "load": []}


def _note_load(what):
    _STATE["load"].append((what, dp.load_average()))


# ------------------------------------------------------------------------------ systems

def _kraftcore(tmp_path_factory, name, brokers, overrides=()):
    cluster = dp.KraftcoreCluster(tmp_path_factory.mktemp(name) / "cluster", brokers,
                                  overrides)
    return cluster


class System:
    """One broker to produce to and consume from: kraftcore (1 broker + 3 controllers) or
    a Kafka 4.4 combined node."""

    def __init__(self, name, bootstrap, broker_pid):
        self.name, self.bootstrap, self.broker_pid = name, bootstrap, broker_pid
        self.filled = {}  # size name -> (topic, records, value bytes)


@pytest.fixture(scope="module", params=["kraftcore", "kafka"])
def single(request, tmp_path_factory):
    """One single-broker system at a time (pytest groups the tests by this parameter, so
    the other is not running while one is measured)."""
    if request.param == "kraftcore":
        cluster = _kraftcore(tmp_path_factory, "rf1", 1)
        broker = cluster.broker_ids()[0]
        system = System("kraftcore", cluster.bootstrap(), cluster.pids()[broker])
        try:
            yield system
        finally:
            cluster.down()
        return
    try:
        node = dp.kafka_node(tmp_path_factory.mktemp("kafka"))
        bootstrap, pid = node.__enter__()
    except (dp.KafkaNodeError, OSError, dp.subprocess.SubprocessError) as exc:  # no Java, no jars, did not start: the peer rows are skipped
        pytest.skip(f"the real Kafka node did not start: {str(exc)[:300]}")
    try:
        yield System("kafka-4.4", bootstrap, pid)
    finally:
        node.__exit__(None, None, None)


# ------------------------------------------------------------------------------ produce

def _produce(benchmark, name, bootstrap, topic, pids):
    producer = dp.Producer(bootstrap, topic, PARTITIONS, RECORD_BYTES, "all")
    try:
        producer.round(PRODUCE_RECORDS)  # warm-up: connections, metadata, page cache
        _note_load(f"produce {name}")
        usage = dp.Usage({**pids, "client": os.getpid()})
        times = [producer.round(PRODUCE_RECORDS) for _ in range(PRODUCE_ROUNDS)]
        cpu = usage.shares(sum(times))
        row = producer.summary(warmup=1)
    finally:
        producer.close()
        producer = None
    paced = dp.paced_latency(bootstrap, topic, PARTITIONS, RECORD_BYTES, PACED_RATE, PACED_S)
    REPLAY.replay(benchmark, times)
    benchmark.extra_info.update(peer=name, records=PRODUCE_RECORDS,
                                bytes=PRODUCE_RECORDS * RECORD_BYTES, cpu_share=cpu,
                                paced=paced, **row)
    row.update(cpu=cpu, paced=paced)
    _STATE["produce"][name] = row


@pytest.mark.benchmark(group="data-produce", timer=REPLAY)
def test_produce_kraftcore_rf3(benchmark, tmp_path):
    cluster = dp.KraftcoreCluster(tmp_path / "cluster", 3)  # stopped before the next test
    try:
        dp.create_topic(cluster.bootstrap(), "produce-rf3", PARTITIONS, 3,
                        {"min.insync.replicas": "2"})
        brokers = cluster.broker_ids()
        pids = {f"broker {i}": p for i, p in cluster.pids().items() if i in brokers}
        _produce(benchmark, "kraftcore-3-brokers-rf3", cluster.bootstrap(), "produce-rf3",
                 pids)
    finally:
        cluster.down()


@pytest.mark.benchmark(group="data-produce", timer=REPLAY)
@pytest.mark.parametrize("mode", ["page-cache", "fdatasync-at-end", "fdatasync-per-MiB"])
def test_produce_disk_limit(benchmark, tmp_path, mode):
    fsync = {"page-cache": None, "fdatasync-at-end": "end", "fdatasync-per-MiB": "chunk"}[mode]
    total = PRODUCE_RECORDS * RECORD_BYTES
    dp.disk_write(str(tmp_path), total, fsync=fsync)  # warm-up
    _note_load(f"disk {mode}")
    times = [dp.disk_write(str(tmp_path), total, fsync=fsync) for _ in range(PRODUCE_ROUNDS)]
    REPLAY.replay(benchmark, times)
    median = sorted(times)[len(times) // 2]
    benchmark.extra_info.update(peer=f"disk-3-files-{mode}", records=PRODUCE_RECORDS,
                                bytes=total)
    _STATE["disk"][mode] = {"mb_per_s": total / median / 1e6, "median_s": median}


@pytest.mark.benchmark(group="data-produce", timer=REPLAY)
def test_produce_rf1(benchmark, single):
    admin = dp.create_topic(single.bootstrap, "produce-rf1", PARTITIONS, 1,
                            {"min.insync.replicas": "1"})
    del admin
    _produce(benchmark, f"{single.name}-1-broker-rf1", single.bootstrap, "produce-rf1",
             {"broker": single.broker_pid})


# ------------------------------------------------------------------------------ consume

def _filled(system, size):
    if size not in system.filled:
        topic = f"consume-{size}"
        dp.create_topic(system.bootstrap, topic, PARTITIONS, 1)
        records, _ = dp.run(dp.raw_prefill(system.bootstrap, topic, PARTITIONS,
                                           CONSUME_SIZES[size], CONSUME_MB * dp.MIB))
        system.filled[size] = (topic, records, CONSUME_SIZES[size])
    return system.filled[size]


def _consume_rounds(system, rounds, read):
    """Run `read()` -> (seconds, bytes, ...) `rounds` times after one warm-up; CPU shares."""
    read()
    _note_load(f"consume {system.name}")
    usage = dp.Usage({"broker": system.broker_pid, "client": os.getpid()})
    samples = [read() for _ in range(rounds)]
    cpu = usage.shares(sum(s[0] for s in samples))
    return samples, cpu


def _record_consume(benchmark, name, samples, cpu, records):
    times = [s[0] for s in samples]
    nbytes = samples[0][1]
    REPLAY.replay(benchmark, times)
    median = sorted(times)[len(times) // 2]
    row = {"mb_per_s": nbytes / median / 1e6, "records_per_s": records / median,
           "median_s": median, "bytes": nbytes, "cpu": cpu}
    if len(samples[0]) > 2:  # librdkafka: also from its first record (start-up left out)
        steady = sorted(s[0] - s[2] for s in samples)[len(samples) // 2]
        row["first_record_s"] = sorted(s[2] for s in samples)[len(samples) // 2]
        row["steady_mb_per_s"] = nbytes / steady / 1e6
    benchmark.extra_info.update(peer=name, records=records, bytes=nbytes, cpu_share=cpu,
                                **{k: v for k, v in row.items() if k not in ("cpu", "bytes")})
    _STATE["consume"][name] = row


@pytest.mark.benchmark(group="data-consume", timer=REPLAY)
@pytest.mark.parametrize("size", list(CONSUME_SIZES))
def test_consume_librdkafka(benchmark, single, size):
    topic, records, _ = _filled(single, size)
    samples, cpu = _consume_rounds(
        single, CONSUME_ROUNDS,
        lambda: dp.librdkafka_consume(single.bootstrap, topic, PARTITIONS, records))
    _record_consume(benchmark, f"{single.name}-librdkafka-{size}", samples, cpu, records)


@pytest.mark.benchmark(group="data-consume", timer=REPLAY)
@pytest.mark.parametrize("size", list(CONSUME_SIZES))
def test_consume_raw_fetch(benchmark, single, size):
    topic, records, _ = _filled(single, size)
    per = records // PARTITIONS
    ends = {p: per for p in range(PARTITIONS)}
    samples, cpu = _consume_rounds(
        single, RAW_ROUNDS,
        lambda: dp.run(dp.raw_fetch(single.bootstrap, topic, PARTITIONS, ends)))
    _record_consume(benchmark, f"{single.name}-raw-fetch-{size}", samples, cpu, records)


# ------------------------------------------------------------------------------ failover

@pytest.mark.parametrize("config", [
    pytest.param(c, marks=pytest.mark.benchmark(group=f"data-failover-{c}", timer=REPLAY))
    for c in FAILOVER_CONFIGS])
def test_failover(benchmark, tmp_path, config):
    import confluent_kafka as ck

    overrides, client_overrides, goal_ms = FAILOVER_CONFIGS[config]
    client = {**FAILOVER_CLIENT, **client_overrides}
    cluster = dp.KraftcoreCluster(tmp_path / "cluster", 3, overrides)
    topic = "failover"
    trials = []  # {"killed", "new_leader", "ms"}
    errors = []
    producer = None
    try:
        bootstrap = cluster.bootstrap()
        admin = dp.create_topic(bootstrap, topic, 1, 3, {"min.insync.replicas": "2"})
        producer = ck.Producer({"bootstrap.servers": bootstrap, "client.id": dp.CLIENT_ID,
                                **client})
        value = os.urandom(RECORD_BYTES)
        ok_at = []

        def on_delivery(err, msg):
            if err is None:
                ok_at.append(time.perf_counter())
            else:
                errors.append(str(err))

        def send_for(seconds, until_ok_after=None):
            """Produce a record every FAILOVER_PACE_S for `seconds`, or until a delivery
            succeeds after `until_ok_after` (bounded by FAILOVER_BOUND_S)."""
            end = time.perf_counter() + (seconds if until_ok_after is None
                                         else FAILOVER_BOUND_S)
            while time.perf_counter() < end:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                producer.poll(FAILOVER_PACE_S)
                if until_ok_after is not None and ok_at and ok_at[-1] > until_ok_after:
                    return ok_at[-1]
            return None

        killed = None
        for n in range(FAILOVER_TRIALS):
            if killed is not None:  # untimed: bring the broker back, wait for a whole ISR
                cluster.restart(killed)
            state = dp.wait_until("a leader and a whole ISR", lambda: (
                s := dp.partition_state(admin, topic).get(0)) and s[0] >= 0
                and len(s[2]) == 3 and s)
            leader = state[0]
            send_for(0.3)
            if producer.flush(dp.WAIT_S):
                raise AssertionError("the producer did not drain before the kill")
            ok_at.clear()
            errors.clear()
            _note_load(f"failover {config}")
            survivor = next(i for i in cluster.broker_ids() if i != leader)
            t0 = time.perf_counter()
            cluster.kill(leader)
            probe, seen = dp.leader_probe_thread(cluster.broker_port(survivor), topic, leader,
                                                 FAILOVER_BOUND_S)
            t1 = send_for(0, until_ok_after=t0)
            probe.join(FAILOVER_BOUND_S)
            t_leader = seen[0] if seen else None
            if t1 is None:
                raise AssertionError(f"trial {n}: no acks=all produce succeeded within "
                                     f"{FAILOVER_BOUND_S} s of killing broker {leader}")
            new = dp.wait_until("a new leader", lambda: (
                s := dp.partition_state(admin, topic).get(0)) and s[0] >= 0 and s)
            trials.append({"killed": leader, "new_leader": new[0], "ms": (t1 - t0) * 1e3,
                           "leader_seen_ms": None if t_leader is None else
                           (t_leader - t0) * 1e3, "errors": len(errors)})
            killed = leader
        producer.flush(dp.WAIT_S)
    finally:
        producer = None
        cluster.down()
    times_ms = [t["ms"] for t in trials]
    REPLAY.replay(benchmark, [t / 1e3 for t in times_ms])
    benchmark.extra_info.update(peer=f"kraftcore-{config}", overrides=list(overrides),
                                failover_ms=times_ms, p50_ms=dp.percentile(times_ms, 50),
                                trials=trials, client=client)
    _STATE["failover"][config] = {"times_ms": times_ms, "goal_ms": goal_ms, "client": client,
                                  "overrides": overrides, "trials": trials}


# ------------------------------------------------------------------------------ report

def _status(ok):
    return "MET" if ok else "NOT MET"


def _cpu_text(cpu):
    return ", ".join(f"{k} {v['run']:.2f}/{v['wait']:.2f}" for k, v in cpu.items())


def terminal_summary(tr):
    """What this file prints after the suite's summary table (conftest.py)."""
    if not any(_STATE[k] for k in ("produce", "disk", "consume", "failover")):
        return
    tr.write_sep("=", "kraftcore data plane (librdkafka; ratios in the same run)")
    disk = _STATE["disk"]
    limit = disk.get("page-cache", {}).get("mb_per_s")
    produce = _STATE["produce"]
    if produce or disk:
        tr.write_line(f"produce, {RECORD_BYTES} B values, {PARTITIONS} partitions, acks=all, "
                      f"{PRODUCE_RECORDS} records a round (median of {PRODUCE_ROUNDS}):")
        tr.write_line(f"  {'row':34} {'MB/s':>7} {'rec/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
                      f"{'paced p50/p99':>14} {'/limit':>7}  cores running/waiting for a CPU")
        for name, r in produce.items():
            ratio = f"{r['mb_per_s'] / limit:.2f}x" if limit else "-"
            paced = r["paced"]
            tr.write_line(f"  {name:34} {r['mb_per_s']:7.1f} {r['records_per_s']:9,.0f} "
                          f"{r['p50_ms']:8.1f} {r['p99_ms']:8.1f} "
                          f"{paced['p50_ms']:6.1f}/{paced['p99_ms']:<7.1f} {ratio:>7}  "
                          f"{_cpu_text(r['cpu'])}")
        for mode, r in disk.items():
            tr.write_line(f"  {'disk 3 files, ' + mode:34} {r['mb_per_s']:7.1f}")
        k1, kafka = produce.get("kraftcore-1-broker-rf1"), produce.get("kafka-4.4-1-broker-rf1")
        if k1 and kafka:
            tr.write_line(f"  kraftcore RF1 / Kafka RF1 (one broker each): "
                          f"{k1['mb_per_s'] / kafka['mb_per_s']:.2f}x")
        k3 = produce.get("kraftcore-3-brokers-rf3")
        if k3 and kafka:
            tr.write_line(f"  kraftcore 3 brokers RF3 / Kafka 1 node RF1 (not alike): "
                          f"{k3['mb_per_s'] / kafka['mb_per_s']:.2f}x")
        if k3 and limit:
            ok = k3["mb_per_s"] >= GOAL_PRODUCE_MB_S and \
                k3["mb_per_s"] >= GOAL_PRODUCE_LIMIT_RATIO * limit
            tr.write_line(f"data goal {_status(ok)}: produce RF3 acks=all >= "
                          f"{GOAL_PRODUCE_MB_S:g} MB/s and >= {GOAL_PRODUCE_LIMIT_RATIO}x the "
                          f"page-cache limit -- {k3['mb_per_s']:.1f} MB/s, "
                          f"{k3['mb_per_s'] / limit:.2f}x of {limit:.0f} MB/s")
    consume = _STATE["consume"]
    if consume:
        tr.write_line(f"consume from one broker, {CONSUME_MB} MiB pre-filled, {PARTITIONS} "
                      f"partitions (median of {CONSUME_ROUNDS}):")
        for name, r in consume.items():
            steady = (f" (from the first record: {r['steady_mb_per_s']:.1f} MB/s, which came "
                      f"after {r['first_record_s']:.2f} s)" if "steady_mb_per_s" in r else "")
            tr.write_line(f"  {name:34} {r['mb_per_s']:7.1f} MB/s {r['records_per_s']:11,.0f} "
                          f"rec/s  cores running/waiting: {_cpu_text(r['cpu'])}{steady}")
        for kind in ("librdkafka", "raw-fetch"):
            for size in CONSUME_SIZES:
                ours = consume.get(f"kraftcore-{kind}-{size}")
                theirs = consume.get(f"kafka-4.4-{kind}-{size}")
                if ours and theirs:
                    tr.write_line(f"  kraftcore / Kafka, {kind} {size}: "
                                  f"{ours['mb_per_s'] / theirs['mb_per_s']:.2f}x")
        best = max((r["mb_per_s"] for n, r in consume.items()
                    if n.startswith("kraftcore-librdkafka")), default=None)
        if best is not None:
            tr.write_line(f"data goal {_status(best >= GOAL_CONSUME_MB_S)}: consume >= "
                          f"{GOAL_CONSUME_MB_S:g} MB/s with librdkafka -- best {best:.1f} MB/s")
    for config, row in _STATE["failover"].items():
        times = row["times_ms"]
        if not times:
            continue
        p50 = dp.percentile(times, 50)
        tr.write_line(f"data goal {_status(p50 <= row['goal_ms'])}: partition failover "
                      f"({config}) SIGKILL of the leader -> acks=all produce acknowledged, "
                      f"p50 <= {row['goal_ms']} ms -- p50 {p50:.0f} ms over {len(times)} "
                      f"trials: " + ", ".join(f"{t:.0f}" for t in times)
                      + "; a surviving broker's Metadata named the new leader after "
                      + ", ".join("-" if t["leader_seen_ms"] is None else
                                  f"{t['leader_seen_ms']:.0f}" for t in row["trials"])
                      + " ms")
    loads = _STATE["load"]
    if loads:
        tr.write_line("load average (1 min) at the measured parts: " + ", ".join(
            f"{w} {x:.2f}" for w, x in loads))
