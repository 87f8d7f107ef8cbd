"""Consumer groups over sockets: a kraftcore broker (`kraftcore cluster up`: 3 controllers
and 1 broker on 127.0.0.1) and, in the same run, a real Kafka 4.4 combined node
(tests/peers/kafka_node.py, 4 I/O and 3 network threads), each with Kafka's group
defaults (`group.min.session.timeout.ms` 6000, `offsets.topic.num.partitions` 50) but
`group.initial.rebalance.delay.ms` 0 on both. Rows (parameter `system`):

* `groups-member-death`: a group of MEMBERS confluent-kafka (librdkafka) consumers, each a
  process of its own (`tests.peers.group_members.Member`, session timeout 6000 ms,
  heartbeat every 500 ms), subscribed to a topic of 2 x MEMBERS partitions, idle and
  Stable. Per trial: one member (a different one each time) is SIGKILLed; timed: the kill
  -> the coordinator answers DescribeGroups with the group Stable and without it (asked
  every 20 ms on one connection). Also reported: the kill -> the last survivor's new
  assignment as the client reports it. Between trials (untimed) a new member joins and the
  group is Stable with MEMBERS again. The death is noticed by the session timeout alone (no
  LeaveGroup), then the survivors learn of the rebalance from their next heartbeat.
  Goal: p50 <= session timeout + 1 s (7000 ms).
* `groups-offset-commit`: OffsetCommit v8 of one partition each (generation -1, no member:
  groups without members, Kafka's "simple" groups) for GROUPS groups spread over the
  offsets partitions, raw frames encoded before the clock starts, COMMIT_WINDOW (1024)
  requests in flight: CONNECTIONS (16) connections with 64 pipelined each. A commit is
  answered once it is durable (the offsets partition's high watermark passed it). Every
  answer is checked (error 0). Rounds of COMMITS_PER_ROUND after one warm-up round; commits/s
  = commits / median round; latency = request written -> answer read, p50 / p99.
  Kafka reads a connection's next request only after answering the one before, so at
  16 x 64 it has 16 in flight; the `1024x1` rows (1024 connections, one request each)
  give both 1024 in flight. Goal: kraftcore >= 20,000 commits/s at 1024 in flight.

CPU seconds of the broker process and of this process (the load generator) per round say
who is busy on this 2-core machine. Goals are printed MET / NOT MET at the end, with
kraftcore's ratio to Kafka (above 1x: kraftcore ahead); nothing asserts a timing. Every
process started here is stopped in a `finally`. KRAFTCORE_BENCH_GROUPS_SCALE=0.3 runs fewer
trials and rounds (at least 2).

Run alone: .venv/bin/python -m pytest bench/test_bench_groups.py -q -p no:cacheprovider
"""

import asyncio
import os
import random
import struct
import time
import uuid

import data_plane as dp
import pytest
from interleave import REPLAY

from kraftcore.protocol import framing
from kraftcore.protocol import messages as m
from tests.peers import group_members as gm

SCALE = float(os.environ.get("KRAFTCORE_BENCH_GROUPS_SCALE", "1"))


def scaled(count, least=2):
    return max(least, round(count * SCALE))


OVERRIDES = ("group.initial.rebalance.delay.ms=0",)
KAFKA_PROPERTIES = {"num.io.threads": 4, "num.network.threads": 3,
                    "group.initial.rebalance.delay.ms": 0}

# member death
MEMBERS = 10
SESSION_MS = 6000
HEARTBEAT_MS = 500
DEATH_TRIALS = scaled(8)
PROBE_PAUSE_S = 0.02
DEATH_GOAL_MS = SESSION_MS + 1000

# offset commits
GROUPS = 256
COMMIT_TOPIC = "commits"
COMMIT_PARTITIONS = 6
CONNECTIONS = 16
COMMIT_WINDOW = 1024
COMMITS_PER_ROUND = 10 * COMMIT_WINDOW
COMMIT_ROUNDS = scaled(5)
COMMIT_VERSION = 8
COMMIT_GOAL_PER_S = 20_000
COMMIT_SHAPES = {"16x64": (CONNECTIONS, COMMIT_WINDOW // CONNECTIONS),
                 "1024x1": (COMMIT_WINDOW, 1)}

_STATE = {"death": {}, "commit": {}}


class System:
    def __init__(self, name, bootstrap, broker_pid):
        self.name, self.bootstrap, self.broker_pid = name, bootstrap, broker_pid


@pytest.fixture(scope="module", params=["kraftcore", "kafka"])
def system(request, tmp_path_factory):
    """One broker at a time (pytest groups the tests by this parameter)."""
    if request.param == "kraftcore":
        cluster = dp.KraftcoreCluster(tmp_path_factory.mktemp("groups") / "cluster", 1,
                                      OVERRIDES)
        try:
            broker = cluster.broker_ids()[0]
            yield System("kraftcore", cluster.bootstrap(), cluster.pids()[broker])
        finally:
            cluster.down()
        return
    try:
        node = dp.kn.kafka_combined(tmp_path_factory.mktemp("kafka"),
                                    extra_properties=KAFKA_PROPERTIES)
        before = set(dp._children())
        bootstrap = node.__enter__()
        pid = next((p for p in dp._children() if p not in before), None)
    except (dp.KafkaNodeError, OSError, dp.subprocess.SubprocessError) as exc:
        pytest.skip(f"the real Kafka node did not start: {str(exc)[:300]}")
    try:
        yield System(f"kafka-{dp.kn.kafka_version()}", bootstrap, pid)
    finally:
        node.__exit__(None, None, None)


# ------------------------------------------------------------------------------ member death

def _describe_at(wire, group):
    r = wire.call(m.DescribeGroupsRequest(groups=[group], include_authorized_operations=False), 5)
    g = r.groups[0]
    return {"state": g.group_state, "members": [
        {"member_id": x.member_id, "partitions": gm.consumer_assignment(x.member_assignment)}
        for x in g.members]}


def _members_assigned(members):
    """Every live member reported an assignment, and together they own every partition
    once."""
    try:
        gm.one_owner_each(members, 2 * MEMBERS)
    except AssertionError:
        return False
    return True


@pytest.mark.benchmark(group="groups-member-death", timer=REPLAY)
def test_member_death(benchmark, system):
    run = uuid.uuid4().hex[:6]
    topic, group = f"death-{run}", f"death-{run}"
    dp.create_topic(system.bootstrap, topic, 2 * MEMBERS, 1)
    members = []
    trials = []
    rng = random.Random(7)

    def member(i):
        return gm.Member("confluent-kafka", system.bootstrap, topic, group, name=f"m{i}",
                         session_ms=SESSION_MS, heartbeat_ms=HEARTBEAT_MS, timeout_s=3600)

    try:
        members = [member(i) for i in range(MEMBERS)]
        coordinator = gm.coordinator(system.bootstrap, group)
        with gm.Wire.to(coordinator) as wire:
            def full():
                live = [x for x in members if x.alive()]
                d = _describe_at(wire, group)
                return (d["state"] == "Stable" and len(d["members"]) == MEMBERS
                        and _members_assigned(live) and d)

            described = gm.wait_until("a Stable group of every member", full, members)
            for n in range(DEATH_TRIALS):
                live = [x for x in members if x.alive()]
                before = {x["member_id"] for x in described["members"]}
                victim = rng.choice(live)
                survivors = [x for x in live if x is not victim]
                marks = {x.name: len(x.assignments()) for x in survivors}
                time.sleep(1.0)  # a few heartbeats since the last change
                t0 = time.perf_counter()
                t0_mono = time.monotonic()
                victim.kill()
                gone = None
                deadline = t0 + 60
                while time.perf_counter() < deadline:
                    d = _describe_at(wire, group)
                    ids = {x["member_id"] for x in d["members"]}
                    if d["state"] == "Stable" and len(ids) == MEMBERS - 1:
                        gone = before - ids
                        break
                    time.sleep(PROBE_PAUSE_S)
                t1 = time.perf_counter()
                if gone is None or len(gone) != 1:
                    raise AssertionError(f"trial {n}: the group was not Stable without the "
                                         f"killed member within 60 s: {d}")
                gm.wait_until("every survivor's new assignment", lambda s=survivors, k=marks: all(
                    len(x.assignments()) > k[x.name] for x in s), members)
                assigned = max(x.assignments()[marks[x.name]][0] for x in survivors)
                trials.append({"ms": (t1 - t0) * 1e3,
                               "clients_assigned_ms": (assigned - t0_mono) * 1e3})
                # untimed: a new member in its place
                members.append(member(len(members)))
                described = gm.wait_until("the group Stable with a new member", full, members)
    finally:
        gm.stop_all(members)
    times_ms = [t["ms"] for t in trials]
    REPLAY.replay(benchmark, [t / 1e3 for t in times_ms])
    row = {"times_ms": times_ms, "p50_ms": dp.percentile(times_ms, 50),
           "p95_ms": dp.percentile(times_ms, 95),
           "clients_p50_ms": dp.percentile([t["clients_assigned_ms"] for t in trials], 50),
           "clients_p95_ms": dp.percentile([t["clients_assigned_ms"] for t in trials], 95)}
    benchmark.extra_info.update(peer=system.name, members=MEMBERS, session_ms=SESSION_MS,
                                heartbeat_ms=HEARTBEAT_MS, trials=trials, **row)
    _STATE["death"][system.name] = row


# ------------------------------------------------------------------------------ commits

def _commit_frames(groups, count, first_correlation, offset):
    """`count` OffsetCommit frames (one partition each), the groups taken in turn."""
    cls = m.OffsetCommitRequest
    frames = []
    for i in range(count):
        body = cls(group_id=groups[i % len(groups)], generation_id_or_member_epoch=-1,
                   member_id="", group_instance_id=None, topics=[
                       cls.OffsetCommitRequestTopic(name=COMMIT_TOPIC, partitions=[
                           cls.OffsetCommitRequestPartition(
                               partition_index=i % COMMIT_PARTITIONS,
                               committed_offset=offset + i, committed_leader_epoch=-1,
                               committed_metadata="")])])
        frames.append(framing.encode_request(body, COMMIT_VERSION, first_correlation + i,
                                             "kraftcore-bench-groups"))
    return frames


class _Pipe:
    """One connection: writes its frames keeping at most `window` unanswered, reads the
    answers in order, checks each (error 0), and keeps each one's latency."""

    def __init__(self, reader, writer, window):
        self.reader, self.writer, self.window = reader, writer, window
        self.correlation = 1
        self.good = None  # the bytes of an error-free answer after its correlation id

    async def run(self, frames, latencies):
        sent = asyncio.Queue()
        room = asyncio.Semaphore(self.window)

        async def write():
            for frame in frames:
                await room.acquire()
                self.writer.write(frame)
                sent.put_nowait(time.perf_counter())
                if self.writer.transport.get_write_buffer_size() > 1 << 16:
                    await self.writer.drain()
            await self.writer.drain()

        async def read():
            for _ in frames:
                (size,) = struct.unpack(">i", await self.reader.readexactly(4))
                data = await self.reader.readexactly(size)
                latencies.append(time.perf_counter() - await sent.get())
                room.release()
                self._check(data)

        await asyncio.gather(write(), read())
        self.correlation += len(frames)

    def _check(self, data):
        if self.good is not None and data[4:] == self.good:
            return
        _, body = framing.decode_response(data, m.OffsetCommitRequest.api_key, COMMIT_VERSION)
        codes = {p.error_code for t in body.topics for p in t.partitions}
        if codes != {0}:
            raise AssertionError(f"OffsetCommit answered with errors {codes}")
        self.good = data[4:]


async def _commit_rounds(address, groups, connections, window, rounds):
    host, port = address.rsplit(":", 1)
    pipes = []
    for _ in range(connections):
        reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
        pipes.append(_Pipe(reader, writer, window))
    per = COMMITS_PER_ROUND // connections
    out = []
    try:
        for r in range(rounds + 1):  # round 0 warms up
            frames = [_commit_frames(groups, per, pipe.correlation, r * per)
                      for pipe in pipes]
            latencies = []
            start = time.perf_counter()
            await asyncio.gather(*(pipe.run(f, latencies) for pipe, f in zip(pipes, frames)))
            elapsed = time.perf_counter() - start
            if r:
                out.append((elapsed, latencies))
    finally:
        for pipe in pipes:
            pipe.writer.close()
    return out


@pytest.mark.benchmark(group="groups-offset-commit", timer=REPLAY)
@pytest.mark.parametrize("shape", list(COMMIT_SHAPES))
def test_offset_commit(benchmark, system, shape):
    connections, window = COMMIT_SHAPES[shape]
    dp.create_topic(system.bootstrap, COMMIT_TOPIC, COMMIT_PARTITIONS, 1)
    groups = [f"commit-{i}" for i in range(GROUPS)]
    coordinators = {gm.coordinator(system.bootstrap, g) for g in groups}
    if len(coordinators) != 1:
        raise AssertionError(f"one broker, one coordinator: {coordinators}")
    address = coordinators.pop()
    usage = dp.Usage({"broker": system.broker_pid, "client": os.getpid()})
    samples = asyncio.run(_commit_rounds(address, groups, connections, window, COMMIT_ROUNDS))
    times = [s[0] for s in samples]
    cpu = usage.shares(sum(times) * (COMMIT_ROUNDS + 1) / COMMIT_ROUNDS)
    latencies = sorted(x for s in samples for x in s[1])
    median = sorted(times)[len(times) // 2]
    row = {"commits_per_s": COMMITS_PER_ROUND / median, "median_s": median,
           "p50_ms": dp.percentile(latencies, 50) * 1e3,
           "p99_ms": dp.percentile(latencies, 99) * 1e3, "cpu": cpu}
    REPLAY.replay(benchmark, times)
    benchmark.extra_info.update(peer=f"{system.name}-{shape}", commits=COMMITS_PER_ROUND,
                                connections=connections, window=window,
                                cpu_share=cpu, **{k: v for k, v in row.items() if k != "cpu"})
    _STATE["commit"][(system.name, shape)] = row


# ------------------------------------------------------------------------------ report

def _status(ok):
    return "MET" if ok else "NOT MET"


def _cpu_text(cpu):
    return ", ".join(f"{k} {v['run']:.2f}/{v['wait']:.2f}" for k, v in cpu.items())


def terminal_summary(tr):
    """What this file prints after the suite's summary table (conftest.py)."""
    death, commit = _STATE["death"], _STATE["commit"]
    if not death and not commit:
        return
    tr.write_sep("=", "kraftcore consumer groups (ratios in the same run)")
    if death:
        tr.write_line(f"member death: {MEMBERS} confluent-kafka members, session "
                      f"{SESSION_MS} ms, heartbeat {HEARTBEAT_MS} ms; SIGKILL -> Stable "
                      f"without it (coordinator) / -> every survivor assigned (clients):")
        for name, r in death.items():
            tr.write_line(f"  {name:22} p50 {r['p50_ms']:7.0f} ms  p95 {r['p95_ms']:7.0f} ms"
                          f"   clients p50 {r['clients_p50_ms']:7.0f} ms  p95 "
                          f"{r['clients_p95_ms']:7.0f} ms  ({len(r['times_ms'])} trials)")
        ours = death.get("kraftcore")
        theirs = next((r for n, r in death.items() if n != "kraftcore"), None)
        if ours and theirs:
            tr.write_line(f"  kraftcore vs Kafka (p50 time, Kafka / kraftcore): "
                          f"{theirs['p50_ms'] / ours['p50_ms']:.2f}x")
        if ours:
            tr.write_line(f"groups goal {_status(ours['p50_ms'] <= DEATH_GOAL_MS)}: member "
                          f"death -> Stable p50 <= {DEATH_GOAL_MS} ms -- "
                          f"{ours['p50_ms']:.0f} ms")
    if commit:
        tr.write_line(f"OffsetCommit, one partition each, {COMMITS_PER_ROUND} a round "
                      f"(median of {COMMIT_ROUNDS}), cores running/waiting for a CPU:")
        for (name, shape), r in commit.items():
            tr.write_line(f"  {name + ' ' + shape:28} {r['commits_per_s']:9,.0f} commits/s  "
                          f"p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  "
                          f"{_cpu_text(r['cpu'])}")
        for shape in COMMIT_SHAPES:
            ours = commit.get(("kraftcore", shape))
            theirs = next((r for (n, s), r in commit.items()
                           if s == shape and n != "kraftcore"), None)
            if ours and theirs:
                tr.write_line(f"  kraftcore / Kafka, {shape}: "
                              f"{ours['commits_per_s'] / theirs['commits_per_s']:.2f}x")
        best = max((r["commits_per_s"] for (n, _), r in commit.items() if n == "kraftcore"),
                   default=None)
        if best is not None:
            tr.write_line(f"groups goal {_status(best >= COMMIT_GOAL_PER_S)}: OffsetCommit at "
                          f"{COMMIT_WINDOW} in flight >= {COMMIT_GOAL_PER_S:,} commits/s -- "
                          f"best {best:,.0f}")
