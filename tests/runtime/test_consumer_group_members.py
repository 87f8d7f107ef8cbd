"""Consumer groups with members, shown with four real Kafka clients' own group consumers
(subscribe(): kafka-python, confluent-kafka, aiokafka, KafkaJS; `tests.peers.group_members`,
each member a process of its own) against a `kraftcore cluster up` of three controllers and
three brokers on 127.0.0.1.

* Three members of one group over a topic of 6 partitions: each partition is owned by
  exactly one member, as the clients report their assignments and as DescribeGroups
  answers them; every record is processed and committed; a new member of the group alone
  resumes exactly at the committed offsets (it reads the records produced since, and none
  before).
* A member SIGKILLed mid-stream: the other two get its partitions once its session times
  out, start them at its last commit, and every record is processed at least once (the
  members commit after processing; duplicates are allowed, gaps are not).
* The coordinator's broker SIGKILLed while a group of members is Stable: another broker
  loads the group and its committed offsets, the members go on with it without going back
  before their commits, and read what is produced after.

The brokers use `group.initial.rebalance.delay.ms` 300 and the members a session timeout of
6 s (`group.min.session.timeout.ms`) with a heartbeat every 500 ms, so a rebalance takes
about a second and a death is noticed in about six. Every wait is bounded; none is a timing
goal (bench/test_bench_groups.py measures them).
"""

import time
import uuid

import pytest

from tests.peers import group_members as gm
from tests.peers.clients import key_of, value_of
from tests.runtime.processes import LocalCluster, wait_for
from tests.runtime.scenarios import FAST_SETTINGS

PARTITIONS = 6
GROUP_SETTINGS = ("group.initial.rebalance.delay.ms=300",)
SESSION_MS = 6000  # the brokers' group.min.session.timeout.ms (Kafka's default)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("members"), FAST_SETTINGS + GROUP_SETTINGS,
                     brokers=3)
    try:
        wait_for("three unfenced brokers",
                 lambda: sorted(c.brokers().values()) == ["unfenced"] * 3)
        # the first FindCoordinator creates __consumer_offsets; wait until it is served
        gm.coordinator(bootstrap(c), "warm-up")
        yield c
    finally:
        c.down()


def broker_nodes(cluster, exclude=()):
    return [n for n in cluster.nodes.values()
            if "broker" in n["roles"] and n["id"] not in exclude]


def bootstrap(cluster, exclude=()):
    return ",".join(f"127.0.0.1:{n['port']}" for n in broker_nodes(cluster, exclude))


def node_of(cluster, address):
    port = int(address.rsplit(":", 1)[1])
    return next(n["id"] for n in broker_nodes(cluster) if n["port"] == port)


def produce(boot, topic, first, count, create=True):
    """Records `first` .. `first + count - 1` (value_of(i)), record i to partition
    i % PARTITIONS, acks=all; the topic (RF 3) is created first when `create`."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    if create:
        admin = KafkaAdminClient(bootstrap_servers=boot)
        try:
            admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 3}})
        finally:
            admin.close()
    producer = KafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, key=key_of(i), value=value_of(i),
                                 partition=i % PARTITIONS) for i in range(first, first + count)]
        producer.flush(timeout=60)
        assert all(f.succeeded() for f in futures)
    finally:
        producer.close(timeout=5)


def all_records(per_partition):
    """Every (partition, offset) of a fresh topic with `per_partition` records in each."""
    return {(p, o) for p in range(PARTITIONS) for o in range(per_partition)}


def start(client, boot, topic, group, count, **options):
    options.setdefault("session_ms", SESSION_MS)
    return [gm.Member(client, boot, topic, group, name=f"{client}-{i}", **options)
            for i in range(count)]


def check_described(boot, group, members, topic):
    """DescribeGroups agrees with the members: Stable, one entry per live member, and the
    partitions it assigns are exactly the ones the clients report."""
    live = [x for x in members if x.alive()]
    d = gm.describe(boot, group)
    assert d["error"] == 0 and d["state"] == "Stable", d
    assert len(d["members"]) == len(live), (d, [x.summary() for x in live])
    described = sorted(sorted(x["partitions"].get(topic, [])) for x in d["members"])
    reported = sorted(sorted(x.assignment) for x in live)
    assert described == reported, (described, reported)
    return d


def settled(boot, group, members, topic):
    """The members' assignments and DescribeGroups agree: one owner per partition."""
    found = gm.one_owner_each(members, PARTITIONS)
    check_described(boot, group, members, topic)
    return found


# ----------------------------------------------------------------------------- three members

CLIENT_PARAMS = [
    pytest.param("kafka-python"),
    pytest.param("confluent-kafka", marks=pytest.mark.slow),
    pytest.param("aiokafka", marks=pytest.mark.slow),
    pytest.param("kafkajs", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("client", CLIENT_PARAMS)
def test_three_members_own_each_partition_once_and_a_new_member_resumes(cluster, client):
    """Three subscribe() consumers of one client share the 6 partitions, one owner each
    (their own reports and DescribeGroups), process and commit every record; after they
    left, a new consumer of the group reads exactly the records produced since."""
    boot = bootstrap(cluster)
    run = uuid.uuid4().hex[:6]
    topic, group = f"members-{run}", f"{client}-members-{run}"
    per = 50
    produce(boot, topic, 0, per * PARTITIONS)
    members = start(client, boot, topic, group, 3)
    try:
        gm.wait_until("one owner per partition, as DescribeGroups says",
                      lambda: settled(boot, group, members, topic), members)
        gm.wait_until("every record processed and committed", lambda: (
            set().union(*(x.processed for x in members)) == all_records(per)
            and gm.committed(boot, group, topic, PARTITIONS) == {p: per for p in range(PARTITIONS)}),
            members)
        # each member processed only partitions it was assigned at some point
        for x in members:
            ever = {p for _, parts in x.assignments() for p in parts}
            assert {p for p, _ in x.processed} <= ever, x.summary()
    finally:
        gm.stop_all(members)
    assert all(x.closed_cleanly() for x in members), [x.summary() for x in members]
    gm.wait_until("the group empty once its members left",
                  lambda: gm.describe(boot, group)["state"] == "Empty")

    produce(boot, topic, per * PARTITIONS, 2 * PARTITIONS, create=False)
    [resumed] = start(client, boot, topic, group, 1)
    try:
        gm.wait_until("the new member owning every partition",
                      lambda: resumed.assignment == list(range(PARTITIONS)), [resumed])
        gm.wait_until("the records produced since",
                      lambda: len(resumed.processed) >= 2 * PARTITIONS, [resumed])
    finally:
        resumed.stop()
    assert resumed.processed == {(p, o) for p in range(PARTITIONS) for o in (per, per + 1)}, \
        resumed.summary()


# ----------------------------------------------------------------------------- a member killed

KILL_PARAMS = [pytest.param("kafka-python"),
               pytest.param("confluent-kafka", marks=pytest.mark.slow)]


@pytest.mark.parametrize("client", KILL_PARAMS)
def test_a_killed_members_partitions_move_and_no_record_is_skipped(cluster, client):
    """SIGKILL one of three members while it processes: the two others get its partitions
    after its session timeout, start each at its last commit (not before, and not past
    what it processed), and the union of what all processed is every record."""
    boot = bootstrap(cluster)
    run = uuid.uuid4().hex[:6]
    topic, group = f"kill-{run}", f"{client}-kill-{run}"
    per = 60
    produce(boot, topic, 0, per * PARTITIONS)
    members = start(client, boot, topic, group, 3, process_ms=5, max_records=10)
    try:
        gm.wait_until("one owner per partition", lambda: settled(boot, group, members, topic),
                      members)
        victim = members[0]
        mine = set(victim.assignment)
        # mid-stream: it has committed something and has more of its partitions to go
        gm.wait_until("the victim's first commit", lambda: victim.committed, members)
        assert len(victim.processed) < per * len(mine), victim.summary()
        victim.kill()
        last_commit = victim.committed
        processed_by_victim = victim.processed
        survivors = members[1:]
        gm.wait_until("the survivors owning every partition once",
                      lambda: settled(boot, group, survivors, topic), members)
        gm.wait_until("every record processed and committed", lambda: (
            set().union(*(x.processed for x in members)) == all_records(per)
            and gm.committed(boot, group, topic, PARTITIONS) == {p: per for p in range(PARTITIONS)}),
            members)
        for p in mine:
            firsts = [o for x in survivors for _, q, o in x.processed_in_order() if q == p]
            first = min(firsts)
            done = max((o for q, o in processed_by_victim if q == p), default=-1)
            assert last_commit.get(p, 0) <= first <= done + 1, (
                f"partition {p}: the victim committed {last_commit.get(p)} and processed up "
                f"to {done}, the survivors started at {first}")
    finally:
        gm.stop_all(members)


# ----------------------------------------------------------------------------- coordinator killed

@pytest.mark.slow
def test_members_go_on_with_a_new_coordinator_after_the_old_ones_death(cluster):
    """The broker coordinating a Stable group of three confluent-kafka members is
    SIGKILLed: another broker answers FindCoordinator for the group with the same committed
    offsets, DescribeGroups there shows the three members Stable again, and they read the
    records produced afterwards without going back before their commits. (Runs last: the
    broker is restarted at the end.)"""
    client = "confluent-kafka"
    boot = bootstrap(cluster)
    run = uuid.uuid4().hex[:6]
    topic, group = f"failover-{run}", f"{client}-failover-{run}"
    per = 40
    produce(boot, topic, 0, per * PARTITIONS)
    members = start(client, boot, topic, group, 3)
    killed = None
    try:
        gm.wait_until("one owner per partition", lambda: settled(boot, group, members, topic),
                      members)
        gm.wait_until("every record committed", lambda: gm.committed(
            boot, group, topic, PARTITIONS) == {p: per for p in range(PARTITIONS)}, members)
        old = gm.coordinator(boot, group)
        killed = node_of(cluster, old)
        killed_at = time.monotonic()
        cluster.kill(killed)
        survivors = bootstrap(cluster, exclude=(killed,))
        gm.wait_until("another coordinator", lambda: (
            c := gm.coordinator(survivors, group)) != old and c, members)
        # a new leader's high watermark passes the last commits once its followers fetch
        # again (a moment): until then it answers the offsets committed below it, as
        # Kafka's coordinator answers from its last committed state
        gm.wait_until("the committed offsets at the new coordinator", lambda: gm.committed(
            survivors, group, topic, PARTITIONS) == {p: per for p in range(PARTITIONS)}, members)
        gm.wait_until("the members Stable at the new coordinator",
                      lambda: settled(survivors, group, members, topic), members)
        produce(survivors, topic, per * PARTITIONS, 5 * PARTITIONS, create=False)
        gm.wait_until("the records produced after the failover", lambda: (
            set().union(*(x.processed for x in members)) == all_records(per + 5)), members)
        for x in members:
            again = [(p, o) for t, p, o in x.processed_in_order() if t > killed_at and o < per]
            assert not again, f"{x.name} went back before its commits: {sorted(again)}"
        gm.wait_until("the new commits", lambda: gm.committed(
            survivors, group, topic, PARTITIONS) == {p: per + 5 for p in range(PARTITIONS)},
            members)
    finally:
        gm.stop_all(members)
        if killed is not None:
            cluster.restart(killed)
