"""Committed offsets that survive a coordinator's death, shown with Kafka's own clients
(kafka-python, confluent-kafka, aiokafka; `tests.peers.group_clients`) against a
`kraftcore cluster up` of three controllers and three brokers on 127.0.0.1.

One topic of 6 partitions replicated on the three brokers holds RECORDS records. For each
client, a consumer with a group id and assign() reads half of them and commits; a second
consumer of the same group resumes exactly at the committed offsets (its `committed()`
returns them, and it reads exactly the other half). The three groups are picked so that
one broker coordinates all of them (the leader of their `__consumer_offsets` partitions,
created by the first FindCoordinator with Kafka's 50 partitions, replicated three times).
That broker is SIGKILLed; once another broker leads those partitions, a third consumer of
each group resumes from the same offsets through the new coordinator.

Brokers are fenced 4 s after they stop heartbeating (`scenarios.FAST_SETTINGS`), so the
failover takes seconds; every wait is bounded and none is a timing goal.
"""

import uuid

import pytest

from kraftcore.broker.group_records import OFFSETS_TOPIC, partition_for
from tests.peers import group_clients
from tests.peers.clients import key_of, value_of
from tests.runtime.processes import LocalCluster, wait_for
from tests.runtime.scenarios import FAST_SETTINGS

RECORDS = 600
PARTITIONS = 6
OFFSETS_PARTITIONS = 50  # Kafka's default, which the brokers use


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("groups"), FAST_SETTINGS, brokers=3)
    try:
        wait_for("three unfenced brokers",
                 lambda: sorted(c.brokers().values()) == ["unfenced"] * 3)
        yield c
    finally:
        c.down()


def brokers(cluster, exclude=()):
    return [n for n in cluster.nodes.values() if "broker" in n["roles"] and n["id"] not in exclude]


def bootstrap(cluster, exclude=()):
    return ",".join(f"127.0.0.1:{n['port']}" for n in brokers(cluster, exclude))


def partitions_of(boot, topic):
    """{partition: (leader, [isr])} from a broker's Metadata answer (confluent-kafka)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": boot}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p.id: (p.leader, list(p.isrs)) for p in t.partitions.values()}


def produce(boot, topic):
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=boot)
    try:
        admin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 3}})
    finally:
        admin.close()
    # small batches: a consumer's small fetches then interleave the partitions
    producer = KafkaProducer(bootstrap_servers=boot, acks="all", batch_size=512, linger_ms=0)
    try:
        futures = [producer.send(topic, key=key_of(i), value=value_of(i),
                                 partition=i % PARTITIONS) for i in range(RECORDS)]
        producer.flush(timeout=60)
        assert all(f.succeeded() for f in futures)
    finally:
        producer.close(timeout=5)


def groups_led_by_one_broker(boot, clients):
    """A group id per client, all coordinated by one broker; that broker's id."""
    def led():
        found = partitions_of(boot, OFFSETS_TOPIC)
        return len(found) == OFFSETS_PARTITIONS and all(
            leader >= 0 for leader, _ in found.values()) and found

    leaders = wait_for(f"{OFFSETS_TOPIC} with a leader for each partition", led)
    run = uuid.uuid4().hex[:6]
    coordinator = leaders[partition_for(f"{clients[0]}-{run}-0", OFFSETS_PARTITIONS)][0]
    picked = {}
    for client in clients:
        for i in range(1000):
            group = f"{client}-{run}-{i}"
            if leaders[partition_for(group, OFFSETS_PARTITIONS)][0] == coordinator:
                picked[client] = group
                break
    return picked, coordinator


def check_resume(result, first, client, what):
    expected = sorted({value_of(i) for i in range(RECORDS)} - set(first["values"]))
    wanted = {p: (o if o > 0 else None) for p, o in first["positions"].items()}
    got = {p: (o if o else None) for p, o in result["committed"].items()}
    assert got == wanted, f"{client} {what}: committed() {got}, committed were {wanted}"
    assert sorted(result["values"]) == expected, (
        f"{client} {what}: read {len(result['values'])} records, expected the "
        f"{len(expected)} the first consumer did not read")


def test_committed_offsets_survive_the_coordinators_death(cluster):
    boot = bootstrap(cluster)
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    produce(boot, topic)
    clients = list(group_clients.CLIENTS)
    firsts = {}
    # the first consumer's FindCoordinator creates the offsets topic: a group of the first
    # client, whatever its coordinator, reads and commits before the groups are picked
    warmup = group_clients.commit_part(clients[0], boot, topic, f"warmup-{topic}",
                                       PARTITIONS, 10)
    assert len(warmup["values"]) == 10
    groups, coordinator = groups_led_by_one_broker(boot, clients)
    assert len(groups) == len(clients), groups

    for client in clients:
        group = groups[client]
        first = group_clients.commit_part(client, boot, topic, group, PARTITIONS, RECORDS // 2)
        assert len(first["values"]) == RECORDS // 2 == len(set(first["values"]))
        # mid-partition offsets, each as the client itself reads it back
        assert any(0 < o < RECORDS // PARTITIONS for o in first["positions"].values()), first
        # a partition the consumer never fetched from has no position (librdkafka: -1001)
        # and no commit
        got = {p: o for p, o in first["committed"].items() if o is not None and o > 0}
        assert got == {p: o for p, o in first["positions"].items() if o is not None and o > 0}, \
            (client, first)
        firsts[client] = first
        again = group_clients.resume(client, boot, topic, group, PARTITIONS,
                                     RECORDS - RECORDS // 2)
        check_resume(again, first, client, "before the coordinator died")

    cluster.kill(coordinator)
    survivors = bootstrap(cluster, exclude=(coordinator,))
    indexes = {partition_for(g, OFFSETS_PARTITIONS) for g in groups.values()}

    def moved():
        offsets = partitions_of(survivors, OFFSETS_TOPIC)
        data = partitions_of(survivors, topic)
        return (all(offsets.get(i, (-1,))[0] not in (-1, coordinator) for i in indexes)
                and len(data) == PARTITIONS
                and all(leader not in (-1, coordinator) for leader, _ in data.values()))

    wait_for(f"a new leader for the groups' {OFFSETS_TOPIC} partitions", moved)
    for client in clients:
        after = group_clients.resume(client, survivors, topic, groups[client], PARTITIONS,
                                     RECORDS - RECORDS // 2)
        check_resume(after, firsts[client], client, "after the coordinator died")
