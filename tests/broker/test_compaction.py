"""Compacted topics on brokers' `ReplicaManager`s (cleanup.policy=compact): a leader refuses
a record without a key with Kafka's INVALID_RECORD; leader and followers are cleaned
alike with their topic's settings; a follower that was away fetches past the gaps its
leader's cleaner left; the log directory's root keeps Kafka's cleaner-offset-checkpoint;
a compact-only topic's segments are never deleted by retention."""

import pytest

from kraftcore import codec
from kraftcore.broker.partition import PartitionError
from kraftcore.log import cleaner
from kraftcore.protocol.error_codes import ErrorCode as E

from kraftcore.metadata.image import CONFIG_TOPIC
from tests.apis.helpers import alter_configs, call, create_topics

SET = 0  # IncrementalAlterConfigs' SET operation
from tests.broker.test_replicas import LAG_MS, Cluster

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "1024",
             "delete.retention.ms": "1000", "min.cleanable.dirty.ratio": "0.1"}


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    call(c.facade, create_topics(("t", -1, -1, {0: [1, 2, 3]}, COMPACTED),
                                 ("plain", -1, -1, {0: [1, 2, 3]})), 7)
    c.sync()
    yield c
    c.close()


def leader_of(cluster, topic="t"):
    return next(r for r in cluster.brokers.values() if r.get(topic, 0).is_leader)


def produce(cluster, keys, values, topic="t"):
    data = codec.encode_batch(values, keys=keys, timestamp=1000)
    return leader_of(cluster, topic).produce(topic, 0, data, 1)


def folded(log):
    """{key: value} a consumer reading the whole log ends with."""
    out, offset = {}, log.log_start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, 1 << 20)
        for batch in read.batches():
            for record in batch.records:
                out[record.key] = record.value
        offset = read.next_offset
    return out


def test_a_compacted_topic_refuses_a_record_without_a_key(cluster):
    produce(cluster, [b"k"], [b"v"])
    with pytest.raises(PartitionError) as refused:
        produce(cluster, [b"k", None], [b"v", b"w"])
    assert refused.value.code == E.INVALID_RECORD
    assert str(refused.value) == ("Compacted topic cannot accept message without key in "
                                  "topic partition t-0")
    assert leader_of(cluster).get("t", 0).log_end_offset == 1  # nothing of it written
    assert produce(cluster, None, [b"no key"], topic="plain") == 0


def test_leaders_and_followers_are_cleaned_and_a_late_follower_fetches_past_the_gaps(cluster):
    for i in range(120):
        produce(cluster, [b"k%d" % (i % 5)], [b"value %d" % i])
        if i < 60:
            cluster.replicate(2)  # broker 3 stays behind
    produce(cluster, [b"k1"], [None])  # a tombstone
    leader = leader_of(cluster)
    while cluster.replicate(2):
        pass
    cluster.now += LAG_MS + 1
    cluster.replicate(2)  # caught up now: only broker 3 lags
    cluster.alter_isrs(leader.broker_id)
    assert leader.get("t", 0).isr == (1, 2)  # broker 3 is out: the high watermark moves
    cluster.replicate(2)
    assert leader.get("t", 0).high_watermark == leader.get("t", 0).log_end_offset
    assert leader.get("t", 0).log.config.compact
    assert len(leader.get("t", 0).log.segment_base_offsets) > 5
    for broker in (1, 2):
        [(partition, settings, last_offsets)] = cluster.brokers[broker].compacted_partitions()
        assert settings["delete_retention_ms"] == 1000
        assert settings["min_cleanable_dirty_ratio"] == 0.1
        config = cleaner.CleanerConfig(**settings)
        before = partition.log.size_bytes
        assert cleaner.clean(partition.log, 5000, config,
                             producer_last_offsets=last_offsets) is not None
        assert partition.log.size_bytes < before
    while cluster.replicate(3):
        pass
    logs = [cluster.brokers[b].get("t", 0).log for b in (1, 2, 3)]
    assert folded(logs[0]) == folded(logs[1]) == folded(logs[2])
    assert folded(logs[0])[b"k1"] is None
    # the late follower took the leader's cleaned log: offsets with gaps, same end
    assert logs[2].log_end_offset == logs[0].log_end_offset


def test_the_cleaner_offset_is_kept_at_the_log_dirs_root(cluster, tmp_path):
    for i in range(60):
        produce(cluster, [b"k%d" % (i % 3)], [b"v%d" % i])
    partition = leader_of(cluster).get("t", 0)
    partition.log.update_high_watermark(partition.log.log_end_offset)
    broker = partition.broker_id
    result = cleaner.clean(partition.log, 5000, force=True)
    cluster.brokers[broker].close()
    lines = (tmp_path / f"b{broker}" / "cleaner-offset-checkpoint").read_text().split("\n")
    assert lines[:3] == ["0", "1", f"t 0 {result.end_offset}"]
    cluster.brokers[broker] = cluster.open(broker)
    cluster.sync()
    assert cluster.brokers[broker].get("t", 0).log.cleaner_offset == result.end_offset


def test_a_compact_only_topic_keeps_its_segments_whatever_their_age(cluster):
    log = leader_of(cluster).get("t", 0).log
    assert (log.config.retention_ms, log.config.retention_bytes) == (-1, -1)
    both = dict(COMPACTED, **{"cleanup.policy": "compact,delete", "retention.ms": "5000"})
    call(cluster.facade, create_topics(("both", -1, -1, {0: [1, 2, 3]}, both)), 7)
    cluster.sync()
    log = leader_of(cluster, "both").get("both", 0).log
    assert log.config.compact and log.config.retention_ms == 5000


def test_a_topic_made_compacted_while_its_logs_are_open_is_cleaned_too(cluster):
    """Its logs were opened strict: from the image that makes the topic compacted on, they
    take a compacted leader's gaps and are cleaned (retention waits for a reopen)."""
    produce(cluster, [b"k"], [b"v"], topic="plain")
    before = leader_of(cluster, "plain").get("plain", 0).log
    assert not before.compacted
    call(cluster.facade, alter_configs(
        (CONFIG_TOPIC, "plain", [("cleanup.policy", SET, "compact")])), 1)
    cluster.sync()
    for broker in cluster.brokers.values():
        partition = broker.get("plain", 0)
        assert partition.compacted and partition.log.compacted
        assert partition in [p for p, _, _ in broker.compacted_partitions()]
    with pytest.raises(PartitionError):
        produce(cluster, None, [b"no key"], topic="plain")
