"""Kafka's own clients against a kraftcore cluster of real processes on 127.0.0.1 (three
controllers, three brokers from `kraftcore cluster up`): kafka-python, confluent-kafka
(librdkafka), aiokafka and KafkaJS each create a topic through a broker with their own admin
client, produce 10 000 records with acks=all to three partitions replicated three times,
list offsets, and read exactly those records back with assign(). Also: librdkafka's
all-topics Metadata request (which carries trailing bytes), and kafka-python 3's default,
idempotent producer (InitProducerId, a producer-id block from the controller).

The clients are `tests.peers.clients`; the same functions run against a real Kafka in
`tests/peers/test_against_kafka.py`. A client that is not installed fails the test."""

import uuid

import pytest

from tests.peers import clients
from tests.runtime.processes import LocalCluster, wait_for

RECORDS = 10_000
PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("data-plane")
    c = LocalCluster(directory, [], brokers=3)
    try:
        wait_for("three unfenced brokers",
                 lambda: sorted(s for s in c.brokers().values()) == ["unfenced"] * 3)
        yield c
    finally:
        c.down()


def bootstrap(cluster):
    return ",".join(f"127.0.0.1:{n['port']}" for n in cluster.nodes.values()
                    if "broker" in n["roles"])


@pytest.mark.parametrize("client", sorted(clients.RUNNERS))
def test_a_client_creates_produces_lists_and_reads_back(cluster, client):
    if client == "kafkajs":
        clients.ensure_kafkajs()
    topic = f"{client}-{uuid.uuid4().hex[:6]}"
    result = clients.RUNNERS[client](bootstrap(cluster), topic, records=RECORDS,
                                     partitions=PARTITIONS, replication_factor=3, acks="all",
                                     timeout_s=240)
    assert clients.problems(result, RECORDS, PARTITIONS) == [], result
    # every replica holds the records: the high watermark is the log end on each
    assert sum(result["latest"].values()) == RECORDS


def test_librdkafka_reads_all_topics_metadata(cluster):
    topic = f"meta-{uuid.uuid4().hex[:6]}"
    result = clients.run_confluent(bootstrap(cluster), topic, records=10, partitions=2,
                                   replication_factor=3)
    assert clients.problems(result, 10, 2) == [], result
    metadata = clients.librdkafka_all_topics_metadata(bootstrap(cluster))
    assert len(metadata["brokers"]) == 3
    assert set(metadata["topics"][topic]["partitions"]) == {0, 1}


def test_kafka_python_default_producer_is_idempotent(cluster):
    topic = f"idem-{uuid.uuid4().hex[:6]}"
    result = clients.kafka_python_idempotent(bootstrap(cluster), topic, records=1000)
    assert clients.problems(result, 1000, 1) == [], result
    assert result["idempotent_by_default"] and result["enable_idempotence"] is True
    assert result["producer_id"] is not None and result["producer_id"] >= 0


@pytest.mark.slow  # about 40 s of partition creation and reads
def test_thousands_of_partitions_per_broker(cluster):
    """A topic of 2 000 partitions replicated on all three brokers: each broker takes up
    its 2 000 partition logs a few dozen per event-loop turn, so its heartbeats go on and
    it stays unfenced; every partition gets its leader, and records go in and out."""
    topic = f"wide-{uuid.uuid4().hex[:6]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    admin.create_topics([NewTopic(topic, 2000, 3)])[topic].result(60)

    def all_led():
        md = admin.list_topics(topic, timeout=10).topics[topic]
        return len(md.partitions) == 2000 and all(
            p.leader >= 0 and len(p.isrs) == 3 for p in md.partitions.values())

    wait_for("2 000 partitions with a leader and a full ISR", all_led, wait_s=180)
    assert sorted(cluster.brokers().values()) == ["unfenced"] * 3
    result = clients.run_confluent(bootstrap(cluster), topic, records=2000, partitions=2000,
                                   replication_factor=3, timeout_s=240)
    assert clients.problems(result, 2000, 2000) == [], result
