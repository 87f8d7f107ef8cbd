"""A compacted topic on a real node process (`kraftcore cluster up`, one node that is
controller and broker): with small segments and a short log.cleaner.backoff.ms its old
segments are cleaned while it serves — its node.log says so with the bytes before and
after — and a Kafka client (kafka-python) reading it from the start gets the last value of
every key at its original offset, fewer records than were produced, and is refused a
record without a key (INVALID_RECORD)."""

import os
import re

import pytest

from tests.runtime.processes import LocalCluster, kraftcore, wait_for
from tests.runtime.scenarios import FAST_SETTINGS

TOPIC = "compacted"
RECORDS = 1500
KEYS = 15


@pytest.fixture
def cluster(tmp_path):
    c = LocalCluster(tmp_path / "cluster",
                     list(FAST_SETTINGS) + ["log.cleaner.backoff.ms=200"],
                     brokers=1, controllers=1, combined=True)
    try:
        yield c
    finally:
        c.down()


def node_log(cluster):
    return open(os.path.join(cluster.directory, "node-1", "node.log")).read()


def test_a_compacted_topics_old_segments_are_cleaned_while_it_serves(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError

    wait_for("the broker unfenced", lambda: cluster.brokers() == {1: "unfenced"})
    kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap(), "--topic",
              TOPIC, "--partitions", "1", "--replication-factor", "1",
              "--config", "cleanup.policy=compact", "--config", "segment.bytes=4096",
              "--config", "min.cleanable.dirty.ratio=0.1")
    boot = f"127.0.0.1:{cluster.nodes[1]['ports']['broker']}"
    producer = KafkaProducer(bootstrap_servers=boot, acks="all", linger_ms=0,
                             batch_size=1024, max_in_flight_requests_per_connection=1,
                             enable_idempotence=False)
    try:
        futures = [producer.send(TOPIC, key=b"key-%d" % (i % KEYS), value=b"%d" % i)
                   for i in range(RECORDS)]
        producer.flush(timeout=60)
        assert [f.get(timeout=10).offset for f in futures] == list(range(RECORDS))
        with pytest.raises(KafkaError, match="INVALID_RECORD|InvalidRecord"):
            producer.send(TOPIC, value=b"no key").get(timeout=10)
    finally:
        producer.close(timeout=5)

    def cleans():
        return [tuple(map(int, c)) for c in re.findall(
            r"cleaned compacted-0: offsets \[(\d+), (\d+)\) of (\d+) segments into (\d+), "
            r"(\d+) bytes -> (\d+) bytes", node_log(cluster))]

    # the cleaner may start while the records still come: wait for one past the middle
    (_, end, _, _, before, after), *_ = wait_for(
        "a clean past the middle of the log in node.log",
        lambda: [c for c in cleans() if c[1] > RECORDS // 2])
    assert cleans()[0][0] == 0 and after < before

    consumer = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False,
                             consumer_timeout_ms=30_000)
    read = []
    try:
        partition = TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        for message in consumer:  # the last record produced is the last of its key: kept
            read.append(message)
            if message.offset == RECORDS - 1:
                break
    finally:
        consumer.close()
    offsets = [m.offset for m in read]
    assert offsets == sorted(set(offsets)) and len(read) < RECORDS
    assert all(m.value == b"%d" % m.offset for m in read)  # every record at its own offset
    last = {}
    for m in read:
        last[m.key] = m.value
    assert last == {b"key-%d" % k: b"%d" % max(i for i in range(RECORDS) if i % KEYS == k)
                    for k in range(KEYS)}
    # below the clean's end each key is there once
    below = [m.key for m in read if m.offset < end]
    assert len(below) == len(set(below))
