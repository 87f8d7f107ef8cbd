"""The data plane's guarantees, shown on real processes: a `kraftcore cluster up` of three
controllers and three brokers on 127.0.0.1, brokers SIGKILLed, SIGSTOPped, SIGCONTinued and
SIGTERMed mid-stream, and Kafka's own clients (confluent-kafka / librdkafka) producing and
reading. Each test prints a transcript — what was done, what the controller, the brokers'
disks and the clients saw, the counts — and attaches it to every failed check.

(a) acks=all, RF 3, min.insync.replicas=2: the partition's leader is SIGKILLed mid-stream;
    nothing acknowledged is lost. Without idempotence retries may write duplicates (they
    are counted, not required); with it there are none.
(b) acks=1: a record the leader acknowledged alone (its followers stopped, the ISR shrunk
    to the leader) is lost when the leader dies and, unclean election allowed, a follower
    takes over.
(c) The ISR drops a stopped follower after replica.lag.time.max.ms and takes it back once
    it caught up.
(d) min.insync.replicas=2 with two of three replicas stopped: acks=all is refused with
    NOT_ENOUGH_REPLICAS; acks=1 records are appended but invisible until the ISR recovers.
(e) Unclean election off: the ISR's only member dies and the partition has no leader.
    Turned on: a replica outside the ISR leads, and the old leader truncates on return.
(f) Controlled shutdown (SIGTERM): the broker's leaderships move first, and a producer sees
    only retriable errors.

The settings (`scenarios.FAST_SETTINGS`) make failures visible in seconds; every wait is
bounded and none is a timing goal.
"""

import time
import uuid

import pytest

from tests.peers.clients import key_of, value_of
from tests.runtime.processes import wait_for
from tests.runtime.scenarios import (
    FAST_SETTINGS,
    ProducerErrors,
    ScenarioCluster,
    Stream,
    Transcript,
    client_partitions,
    index_of,
    list_offsets,
    produce_until,
    ranges,
    read_partition,
    settle_after_election,
    tally,
)


@pytest.fixture
def make_cluster(tmp_path):
    """Start a cluster with the given settings (at most one per test); stop it after."""
    started = []

    def make(settings=FAST_SETTINGS):
        c = ScenarioCluster(tmp_path / "cluster", settings)
        started.append(c)
        c.wait_ready()
        return c
    try:
        yield make
    finally:
        for c in started:
            c.down()


@pytest.fixture
def cluster(make_cluster):
    return make_cluster()


def new_topic(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# ----------------------------------------------------------------------------- (a)


@pytest.mark.parametrize("idempotence", [False, True], ids=["plain", "idempotent"])
def test_a_acks_all_survives_the_leader_killed_mid_stream(cluster, idempotence):
    records, kill_at = 3000, 1000
    topic = new_topic("acks-all")
    t = Transcript(f"(a) acks=all, RF 3, min.insync.replicas=2, leader SIGKILLed mid-stream, "
                   f"enable.idempotence={str(idempotence).lower()}")
    with t.attached(cluster, topic):
        cluster.create_topic(topic, 1, 3, ["min.insync.replicas=2"])
        p = cluster.wait_leaders(topic)[0]
        old = p["leader"]
        t(f"created {topic}: leader {old}, replicas {p['replicas']}, ISR {p['isr']}")
        stream = Stream(cluster.bootstrap_servers(), topic, **{
            "acks": "all", "enable.idempotence": idempotence,
            "message.send.max.retries": 1_000_000, "retry.backoff.ms": 100,
            "request.timeout.ms": 3000, "message.timeout.ms": 90_000})

        def kill_leader():
            cluster.sigkill(old)
            t(f"SIGKILL leader {old} after {stream.sent} records sent, "
              f"{len(stream.acked)} acknowledged")

        t(f"producing {records} records, acks=all, retries 1000000, request.timeout.ms 3000")
        stream.send_range(range(records), pause_s=0.002, actions={kill_at: kill_leader})
        t(f"all {records} handed to the producer; {len(stream.acked)} acknowledged so far")
        p = t.wait("a new leader", lambda: (
            (q := cluster.partition(topic))["leader"] not in (-1, old) and q))
        t(f"controller: leader {p['leader']} (epoch {p['leader_epoch']}), ISR {p['isr']}")
        left = stream.flush(90)
        t(f"flush: {len(stream.acked)} acknowledged, {len(stream.failed)} failed "
          f"{stream.failure_codes()}, {left} still in flight; client errors: "
          f"{[str(e) for e in stream.client_errors][:5]}")
        t.check(left == 0, "every record was acknowledged or failed")

        values, high = read_partition(cluster.bootstrap_servers(exclude={old}), topic)
        present, lost, duplicates, unacked = tally(values, stream.acked)
        copies = sum(n - 1 for n in duplicates.values())
        t(f"read back {len(values)} records (high watermark {high}): {present} of "
          f"{len(stream.acked)} acknowledged present, lost {len(lost)} [{ranges(lost)}], "
          f"{len(duplicates)} records written more than once ({copies} extra copies) "
          f"[{ranges(duplicates)}], {len(unacked)} present but not acknowledged")
        t.check(not lost, "nothing acknowledged is lost")
        t.check(len(stream.acked) == records and not stream.failed,
                "every record was acknowledged in the end (retries rode over the failover)")
        if idempotence:
            t.check(not duplicates, "the idempotent producer wrote no duplicates")
        else:
            t(f"without idempotence: {copies} duplicate copies (timing dependent; may be 0)")
        stream.close()
    t.finish()


# ----------------------------------------------------------------------------- (b)


def test_b_acks_1_loses_what_only_the_dead_leader_had(cluster):
    topic = new_topic("acks-1")
    t = Transcript("(b) acks=1: records acknowledged by the leader alone, the leader dies, "
                   "a follower takes over (unclean.leader.election.enable=true)")
    with t.attached(cluster, topic):
        cluster.create_topic(topic, 1, 3, ["unclean.leader.election.enable=true"])
        p = cluster.wait_leaders(topic)[0]
        leader = p["leader"]
        followers = [b for b in p["replicas"] if b != leader]
        t(f"created {topic}: leader {leader}, replicas {p['replicas']}, ISR {p['isr']}")
        with Stream(cluster.bootstrap_servers(), topic, acks="all") as safe:
            safe.send_range(range(100))
            safe.flush(30)
        t(f"acks=all: {len(safe.acked)} of 100 records 0-99 acknowledged (replicated)")
        t.check(len(safe.acked) == 100, "the replicated records were acknowledged")

        for f in followers:
            cluster.sigstop(f)
        t(f"SIGSTOP followers {followers}: they fetch nothing more (an answer to a fetch "
          f"already pending may still reach their sockets)")
        with Stream(cluster.bootstrap_servers(), topic, acks="1",
                    **{"message.timeout.ms": 30_000}) as risky:
            p, n = produce_until(t, risky, 100, f"the ISR to shrink to [{leader}]", lambda: (
                (q := cluster.partition(topic))["isr"] == [leader] and q))
            t(f"controller: ISR {p['isr']} (replica.lag.time.max.ms=2000 passed), leader "
              f"{p['leader']}; records 100-{n - 1} sent meanwhile")
            risky.send_range(range(n, n + 200))
            risky.flush(30)
            end = n + 200
        t(f"acks=1: {len(risky.acked)} of {end - 100} records 100-{end - 1} acknowledged by "
          f"leader {leader} alone, failed {len(risky.failed)}")
        t.check(len(risky.acked) == end - 100, "the leader acknowledged every acks=1 record")
        leo = {b: cluster.log_end_offset_on_disk(b, topic) for b in p["replicas"]}
        offsets = list_offsets(cluster.bootstrap_servers(exclude=followers), topic)
        t(f"log end offsets on disk {leo}; ListOffsets (earliest, latest) {offsets[0]}: with "
          f"the ISR at [{leader}] and min.insync.replicas=1 consumers already see them")

        cluster.sigkill(leader)
        t(f"SIGKILL leader {leader}")
        for f in followers:
            cluster.sigcont(f)
        t(f"SIGCONT followers {followers}")
        p = t.wait("a follower to lead", lambda: (
            (q := cluster.partition(topic))["leader"] in followers and q))
        t(f"controller: leader {p['leader']} (epoch {p['leader_epoch']}), ISR {p['isr']} — "
          f"elected from outside the ISR [{leader}]")
        live = cluster.bootstrap_servers(exclude={leader})
        t(f"log end offsets on disk: "
          f"{({b: cluster.log_end_offset_on_disk(b, topic) for b in followers})}")
        settle_after_election(t, cluster, topic, p["leader"], live)

        acked = {**safe.acked, **risky.acked}
        values, high = read_partition(live, topic)
        present, lost, _, _ = tally(values, acked)
        t(f"read back {len(values)} records (high watermark {high}): {present} of "
          f"{len(acked)} acknowledged present, LOST {len(lost)} [{ranges(lost)}]")
        t.check(all(i in values_set(values) for i in safe.acked),
                "every acks=all record survived")
        t.check(lost and all(i >= 100 for i in lost),
                "acknowledged acks=1 records were lost, and only those")
        t.check(len(lost) >= 200, "at least the 200 records sent after the ISR shrank were lost")
    t.finish()


def values_set(values):
    """The record numbers among `values`."""
    return {index_of(v) for v in values}


# ----------------------------------------------------------------------------- (c)

# A session long enough that a stopped broker stays registered and unfenced: the ISR change
# seen is the leader's lag rule, not the controller fencing the broker.
LONG_SESSION_SETTINGS = ("broker.session.timeout.ms=30000", "broker.heartbeat.interval.ms=500",
                         "replica.lag.time.max.ms=2000")


def test_c_isr_drops_a_stopped_follower_and_takes_it_back(make_cluster):
    cluster = make_cluster(LONG_SESSION_SETTINGS)
    topic = new_topic("isr")
    t = Transcript("(c) a follower SIGSTOPped leaves the ISR after replica.lag.time.max.ms "
                   "(2000) and comes back after SIGCONT once caught up")
    with t.attached(cluster, topic):
        cluster.create_topic(topic, 1, 3)
        p = cluster.wait_leaders(topic)[0]
        leader = p["leader"]
        stopped = [b for b in p["replicas"] if b != leader][-1]
        full = sorted(p["replicas"])
        without = sorted(b for b in full if b != stopped)
        live = cluster.bootstrap_servers(exclude={stopped})
        t(f"created {topic}: leader {leader}, replicas {p['replicas']}, ISR {p['isr']}")
        with Stream(cluster.bootstrap_servers(), topic, acks="all") as s:
            s.send_range(range(50))
            s.flush(30)
        t(f"acks=all: {len(s.acked)} of 50 acknowledged; client metadata "
          f"{client_partitions(live, topic)[0]} (leader, replicas, ISR)")

        cluster.sigstop(stopped)
        t(f"SIGSTOP follower {stopped}")
        with Stream(live, topic, acks="1") as s:
            p, n = produce_until(t, s, 50, f"the ISR to drop {stopped}", lambda: (
                sorted((q := cluster.partition(topic))["isr"]) == without and q))
            s.flush(30)
        t(f"controller: ISR {p['isr']}, leader {p['leader']} (records 50-{n - 1} produced "
          f"acks=1 meanwhile: an idle follower would stay caught up)")
        md = t.wait("the clients' metadata to show the smaller ISR", lambda: (
            (m := client_partitions(live, topic)[0])[2] == without and m))
        t(f"client metadata from a broker: leader {md[0]}, replicas {md[1]}, ISR {md[2]}")
        states = cluster.brokers()
        t(f"controller's brokers: {states}")
        t.check(states.get(stopped) == "unfenced",
                f"broker {stopped} is still registered and unfenced: the leader's lag rule "
                f"(AlterPartition), not fencing, dropped it")
        shrink = cluster.log_lines(leader, "asking to change the ISR", topic)
        t(f"leader {leader}'s node.log: {shrink[-1].split('broker ', 1)[-1] if shrink else '-'}")
        with Stream(live, topic, acks="all") as s:
            s.send_range(range(n, n + 100))
            s.flush(30)
        t(f"acks=all without {stopped}: {len(s.acked)} of 100 acknowledged")
        t.check(len(s.acked) == 100, "the partition commits with the smaller ISR")
        end = n + 100
        leo = {b: cluster.log_end_offset_on_disk(b, topic) for b in full}
        t(f"log end offsets on disk {leo}")
        t.check(leo[stopped] < end, f"broker {stopped} is behind")

        cluster.sigcont(stopped)
        t(f"SIGCONT follower {stopped}")
        p = t.wait(f"the ISR to take {stopped} back", lambda: (
            sorted((q := cluster.partition(topic))["isr"]) == full and q))
        t(f"controller: ISR {p['isr']}, leader {p['leader']}")
        md = t.wait("the clients' metadata to show the full ISR", lambda: (
            (m := client_partitions(live, topic)[0])[2] == full and m))
        t(f"client metadata: leader {md[0]}, replicas {md[1]}, ISR {md[2]}")
        expand = cluster.log_lines(leader, "asking to change the ISR", topic)
        t(f"leader {leader}'s node.log: {expand[-1].split('broker ', 1)[-1] if expand else '-'}")
        leo = {b: cluster.log_end_offset_on_disk(b, topic) for b in full}
        t(f"log end offsets on disk {leo}")
        t.check(leo[stopped] == leo[leader] == end, f"broker {stopped} caught up to {end}")
    t.finish()


# ----------------------------------------------------------------------------- (d)


def test_d_below_min_isr_acks_all_is_refused_and_acks_1_waits_unseen(cluster):
    import confluent_kafka as ck

    topic = new_topic("min-isr")
    t = Transcript("(d) min.insync.replicas=2, two of three replicas SIGSTOPped: acks=all "
                   "refused, acks=1 appended but invisible until the ISR recovers")
    with t.attached(cluster, topic):
        cluster.create_topic(topic, 1, 3, ["min.insync.replicas=2"])
        p = cluster.wait_leaders(topic)[0]
        leader = p["leader"]
        followers = [b for b in p["replicas"] if b != leader]
        leader_only = cluster.bootstrap_servers(exclude=followers)
        t(f"created {topic}: leader {leader}, replicas {p['replicas']}, ISR {p['isr']}")
        with Stream(cluster.bootstrap_servers(), topic, acks="all") as s:
            s.send_range(range(100))
            s.flush(30)
        before = list_offsets(leader_only, topic)[0]
        t(f"acks=all: {len(s.acked)} of 100 acknowledged; ListOffsets (earliest, latest) "
          f"{before}")
        t.check(before == (0, 100), "the high watermark is at 100")

        for f in followers:
            cluster.sigstop(f)
        t(f"SIGSTOP followers {followers}")
        with Stream(leader_only, topic, acks="1") as ones:
            p, n = produce_until(t, ones, 100, f"the ISR to shrink to [{leader}]", lambda: (
                (q := cluster.partition(topic))["isr"] == [leader] and q))
            t(f"controller: ISR {p['isr']} < min.insync.replicas=2; records 100-{n - 1} sent "
              f"acks=1 meanwhile")
            # the leader learns its new ISR from the controller's answer or the next image:
            # an acks=all record it took just before would wait out its timeout instead
            wait_for("the leader's own metadata to show the ISR [leader]",
                     lambda: client_partitions(leader_only, topic)[0][2] == [leader])
            # acks=all, no retries: the broker's refusal is the delivery report's error
            with Stream(leader_only, topic, **{"acks": "all", "message.send.max.retries": 0,
                                              "message.timeout.ms": 20_000}) as refused:
                refused.send_range(range(10_000, 10_010))
                refused.flush(30)
            codes = {(e.code(), e.name()) for e in refused.failed.values()}
            t(f"acks=all records 10000-10009 (message.send.max.retries=0): "
              f"{len(refused.acked)} acknowledged, {len(refused.failed)} failed with "
              f"{sorted(codes)}: {next(iter(refused.failed.values()), None)}")
            t.check(len(refused.failed) == 10 and codes == {
                (ck.KafkaError.NOT_ENOUGH_REPLICAS, "NOT_ENOUGH_REPLICAS")},
                "every acks=all record failed with the client's NOT_ENOUGH_REPLICAS")
            t.check(ck.KafkaError.NOT_ENOUGH_REPLICAS == 19, "librdkafka's code is Kafka's 19")
            ones.send_range(range(n, n + 200))
            ones.flush(30)
            end = n + 200
        t(f"acks=1: {len(ones.acked)} of {end - 100} records 100-{end - 1} acknowledged, "
          f"{len(ones.failed)} failed")
        t.check(len(ones.acked) == end - 100, "the leader acknowledged every acks=1 record")
        leo = cluster.log_end_offset_on_disk(leader, topic)
        after = list_offsets(leader_only, topic)[0]
        values, high = read_partition(leader_only, topic)
        seen = {i for i in (index_of(v) for v in values)}
        t(f"leader {leader}'s log end offset on disk {leo}; ListOffsets {after}; a consumer "
          f"from the beginning reads {len(values)} records (high watermark {high}), "
          f"{len(seen & set(ones.acked))} of them acks=1 ones")
        t.check(leo == 100 + len(ones.acked), "the acks=1 records are appended (and only they)")
        t.check(after == before and high == 100, "ListOffsets latest did not move")
        t.check(len(values) == 100 and not seen & set(ones.acked),
                "consumers see none of the acks=1 records")

        for f in followers:
            cluster.sigcont(f)
        t(f"SIGCONT followers {followers}")
        p = t.wait("the ISR to recover", lambda: (
            len((q := cluster.partition(topic))["isr"]) >= 2 and q))
        t(f"controller: ISR {p['isr']}, leader {p['leader']}")
        t.wait("the high watermark to reach the log end", lambda: (
            list_offsets(leader_only, topic)[0] == (0, leo)))
        values, high = read_partition(cluster.bootstrap_servers(), topic)
        present, lost, duplicates, unacked = tally(values, {**s.acked, **ones.acked})
        t(f"read back {len(values)} records (high watermark {high}): {present} acknowledged "
          f"present, lost {len(lost)}, duplicates {len(duplicates)}, unacknowledged "
          f"{ranges(unacked) or 'none'}")
        t.check(high == leo and present == len(values) == 100 + len(ones.acked),
                "after the recovery every acks=1 record is visible, and the refused acks=all "
                "records were never written")
    t.finish()


# ----------------------------------------------------------------------------- (e)


def test_e_unclean_election_off_leaves_no_leader_on_elects_and_the_old_leader_truncates(
        cluster):
    topic = new_topic("unclean")
    t = Transcript("(e) the ISR's only member dies: with unclean.leader.election.enable=false "
                   "the partition has no leader; turned on, a replica outside the ISR leads "
                   "and the old leader truncates when it returns")
    with t.attached(cluster, topic):
        cluster.create_topic(topic, 1, 3)
        p = cluster.wait_leaders(topic)[0]
        old = p["leader"]
        followers = [b for b in p["replicas"] if b != old]
        # An unclean election picks the first live replica in replica order: `first`. It
        # gets a few records past the high watermark before it stops too.
        first, second = followers
        t(f"created {topic} (unclean.leader.election.enable=false): leader {old}, replicas "
          f"{p['replicas']}, ISR {p['isr']}")
        with Stream(cluster.bootstrap_servers(), topic, acks="all") as safe:
            safe.send_range(range(100))
            safe.flush(30)
        t(f"acks=all: {len(safe.acked)} of 100 records 0-99 acknowledged")

        cluster.sigstop(second)
        t(f"SIGSTOP follower {second}")
        leader_only = cluster.bootstrap_servers(exclude=followers)
        with Stream(leader_only, topic, acks="1") as ones:
            ones.send_range(range(100, 105))
            ones.flush(30)
            t.wait(f"follower {first} to fetch records 100-104", lambda: (
                cluster.log_end_offset_on_disk(first, topic) == 105))
            cluster.sigstop(first)
            t(f"SIGSTOP follower {first} (it holds 100-104, past the high watermark 100 that "
              f"the stopped {second} holds back)")
            p, n = produce_until(t, ones, 105, f"the ISR to shrink to [{old}]", lambda: (
                (q := cluster.partition(topic))["isr"] == [old] and q))
            ones.send_range(range(n, n + 200))
            ones.flush(30)
            end = n + 200
        t(f"controller: ISR {p['isr']}; acks=1: {len(ones.acked)} of {end - 100} records "
          f"100-{end - 1} acknowledged by {old} alone")
        old_leo = cluster.log_end_offset_on_disk(old, topic)
        t(f"log end offsets on disk: "
          f"{({b: cluster.log_end_offset_on_disk(b, topic) for b in p['replicas']})}")

        cluster.sigkill(old)
        t(f"SIGKILL leader {old}")
        for f in followers:
            cluster.sigcont(f)
        t(f"SIGCONT followers {followers}")
        live = cluster.bootstrap_servers(exclude={old})
        p = t.wait("the controller to take the leadership from the dead broker", lambda: (
            (q := cluster.partition(topic))["leader"] != old and q))
        t(f"controller: leader {p['leader']}, ISR {p['isr']}, replicas {p['replicas']}")
        t.check(p["leader"] in (None, -1), "no leader: the only ISR member is dead and "
                "unclean election is off")
        t.wait(f"followers {followers} unfenced", lambda: all(
            cluster.brokers().get(f) == "unfenced" for f in followers))
        md = t.wait("the clients' metadata to show no leader", lambda: (
            (m := client_partitions(live, topic)[0])[0] == -1 and m))
        t(f"client metadata: leader {md[0]}, replicas {md[1]}, ISR {md[2]} — while "
          f"{followers} are alive and unfenced")
        p = cluster.partition(topic)
        t.check(p["leader"] in (None, -1) and set(p["isr"]) <= {old},
                f"still no leader, ISR {p['isr']} (empty or the dead broker)")

        cluster.set_topic_config(topic, "unclean.leader.election.enable=true")
        t("kraftcore configs set --topic ... unclean.leader.election.enable=true")
        p = t.wait("a replica outside the ISR to lead", lambda: (
            (q := cluster.partition(topic))["leader"] in followers and q))
        new = p["leader"]
        t(f"controller: leader {new} (epoch {p['leader_epoch']}), ISR {p['isr']}; log end "
          f"offsets on disk {({b: cluster.log_end_offset_on_disk(b, topic) for b in followers})}")
        t.expect(new == first, f"the first live replica in replica order, {first}, leads")
        settle_after_election(t, cluster, topic, new, live)
        values, high = read_partition(live, topic)
        present, lost, _, _ = tally(values, {**safe.acked, **ones.acked})
        t(f"read back {len(values)} records (high watermark {high}): "
          f"{present} acknowledged present, LOST {len(lost)} acknowledged records "
          f"[{ranges(lost)}]")
        t.check(lost and all(i >= 100 for i in lost) and present >= 100,
                "acks=1 records only the old leader had are lost; the acks=all ones are there")

        with Stream(live, topic, acks="all") as later:
            later.send_range(range(20_000, 20_050))
            later.flush(30)
        new_leo = cluster.log_end_offset_on_disk(new, topic)
        t(f"acks=all to the new leader: {len(later.acked)} of 50 records 20000-20049 "
          f"acknowledged; its log end offset {new_leo}")

        cluster.start_again(old)
        t(f"restart broker {old} (log end offset on disk {old_leo})")
        p = t.wait(f"broker {old} back in the ISR", lambda: (
            old in (q := cluster.partition(topic))["isr"] and q))
        t(f"controller: leader {p['leader']}, ISR {p['isr']}")
        truncated = cluster.log_lines(old, "diverges", topic)
        t(f"broker {old}'s node.log: "
          f"{truncated[-1].split('kraftcore.runtime: ', 1)[-1] if truncated else '(nothing)'}")
        t.check(truncated and "truncated to offset" in truncated[-1],
                f"broker {old} truncated its divergent records")
        leo = t.wait(f"broker {old}'s log end offset to match the leader's", lambda: (
            (e := cluster.log_end_offset_on_disk(old, topic)) == new_leo and e))
        t(f"broker {old}'s log end offset: {old_leo} -> {leo} (the leader's {new_leo})")
        t.check(cluster.segment_bytes(old, topic) == cluster.segment_bytes(new, topic),
                f"broker {old}'s segment is byte for byte the leader's")
        final, high = read_partition(live, topic)
        t.check(values_set(final) == values_set(values) | set(later.acked),
                f"the partition serves the new leader's history: {len(final)} records")
        t(f"{len(lost)} acknowledged acks=1 records lost by the unclean election")
    t.finish()


# ----------------------------------------------------------------------------- (f)


def test_f_controlled_shutdown_moves_leaderships_first_and_producers_only_retry(cluster):
    import threading

    from kafka import KafkaProducer

    records, term_at, partitions = 3000, 1000, 3
    topic = new_topic("shutdown")
    t = Transcript("(f) controlled shutdown: SIGTERM a broker mid-stream; its leaderships "
                   "move first, the producer (kafka-python, its idempotent acks=all default) "
                   "sees only retriable errors")
    with t.attached(cluster, topic):
        cluster.create_topic(topic, partitions, 3, ["min.insync.replicas=2"])
        d = cluster.wait_leaders(topic, partitions)
        leaders = {i: p["leader"] for i, p in d.items()}
        target = leaders[0]
        led = sorted(i for i, b in leaders.items() if b == target)
        t(f"created {topic}: leaders {leaders}; broker {target} leads partitions {led}")

        timeline = []
        done = threading.Event()

        def watch():
            moved = gone = False
            while not done.is_set() and not (moved and gone):
                alive = cluster.alive(target)
                if not gone and not alive:
                    gone = True
                    timeline.append(("exited", t.elapsed_s()))
                    t(f"broker {target}'s process has exited")
                if not moved:
                    try:
                        now = {i: p["leader"] for i, p in cluster.describe(topic).items()}
                    except AssertionError:
                        continue
                    if target not in now.values():
                        moved = True
                        timeline.append(("moved", t.elapsed_s(), alive))
                        t(f"controller: leaders {now} — broker {target} leads nothing "
                          f"(its process {'still running' if alive else 'already gone'})")
                done.wait(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        with ProducerErrors() as errors:
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers(),
                                     client_id="scenario-kafka-python", linger_ms=5,
                                     request_timeout_ms=3000, retries=1_000_000,
                                     delivery_timeout_ms=90_000)
            t(f"kafka-python producer: enable_idempotence={producer.config['enable_idempotence']}"
              f", acks={producer.config['acks']}")
            futures = {}
            try:
                for i in range(records):
                    futures[i] = producer.send(topic, key=key_of(i), value=value_of(i),
                                               partition=i % partitions)
                    if i == term_at:
                        cluster.sigterm(target)
                        watcher.start()
                        t(f"SIGTERM broker {target} after {i + 1} records sent, "
                          f"{sum(f.is_done for f in futures.values())} completed")
                    time.sleep(0.002)
                t(f"all {records} sent; flushing")
                producer.flush(timeout=90)
            finally:
                producer.close(timeout=10)
            watcher.join(30)
            done.set()
        acked = {i: f.value.offset for i, f in futures.items() if f.succeeded()}
        failed = {i: repr(f.exception) for i, f in futures.items() if f.failed()}
        t(f"producer: {len(acked)} acknowledged, {len(failed)} failed "
          f"{sorted(set(failed.values()))[:3]}")
        t(f"errors the producer logged (error, retriable): {errors.summary()}")
        for name, retriable, message in errors.seen[:3]:
            t(f"  e.g. {message[:200]}")

        d = t.wait(f"broker {target} to lead nothing", lambda: (
            (q := cluster.describe(topic)) and all(p["leader"] not in (target, None, -1)
                                                   for p in q.values()) and q))
        t(f"controller: leaders {({i: p['leader'] for i, p in d.items()})}, ISRs "
          f"{({i: p['isr'] for i, p in d.items()})}")
        t.wait(f"broker {target}'s process to exit", lambda: not cluster.alive(target))
        lines = [ln.split("kraftcore.runtime: ", 1)[-1]
                 for ln in cluster.node_log(target).splitlines()
                 if ("->" in ln and "broker" in ln) or topic in ln or " stopped" in ln
                 or "controlled shutdown" in ln]
        begin = next((k for k, ln in enumerate(lines) if "-> stopping" in ln), 0)
        t(f"broker {target}'s node.log from the SIGTERM on:")
        for ln in lines[begin:]:
            t(f"  {ln}")
        stop_at = next((k for k, ln in enumerate(lines) if ln.endswith(" stopped")), None)
        handed = {p for p in led for ln in lines[begin:stop_at]
                  if f"follower of {topic}-{p} " in ln or f"no longer hosts {topic}-{p}" in ln}
        t.check(begin > 0 and stop_at is not None and handed == set(led),
                f"broker {target} gave up its leaderships {led} after the controlled shutdown "
                f"began and before it stopped")
        t.check(not any("did not finish" in ln for ln in lines),
                "the controlled shutdown finished in time")
        moved = [e for e in timeline if e[0] == "moved"]
        if moved:
            t(f"the controller showed the leaderships moved at {moved[0][1]:.1f}s, the "
              f"process {'still running' if moved[0][2] else 'already gone'}")

        t.check(not failed and len(acked) == records, "no record failed delivery")
        t.check(all(retriable for _, retriable, _ in errors.seen),
                "every error the producer saw was retriable")
        live = cluster.bootstrap_servers(exclude={target})
        values = []
        for p in range(partitions):
            v, _ = read_partition(live, topic, p)
            values += v
        present, lost, duplicates, unacked = tally(values, acked)
        t(f"read back {len(values)} records: {present} of {len(acked)} acknowledged present, "
          f"lost {len(lost)}, duplicates {len(duplicates)}, unacknowledged {len(unacked)}")
        t.check(not lost and not duplicates and not unacked, "exactly the acknowledged records")
    t.finish()
