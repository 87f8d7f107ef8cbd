"""Topic configs (`kraftcore.metadata.topic_configs`): the values the controller takes or
refuses, and the partition-log settings a broker derives from them."""

import pytest

from kraftcore.log import LogConfig
from kraftcore.log.cleaner import CleanerConfig
from kraftcore.metadata.topic_configs import (TOPIC_CONFIGS, check, cleaner_settings,
                                              compacted, deletes, log_settings)


@pytest.mark.parametrize("name,value", [
    ("min.insync.replicas", "2"), ("unclean.leader.election.enable", "true"),
    ("message.timestamp.type", "LogAppendTime"), ("cleanup.policy", "compact,delete"),
    ("retention.ms", "-1"), ("segment.bytes", "1048576"), ("compression.type", "zstd"),
    ("flush.messages", "1"), ("max.message.bytes", "0"), ("retention.bytes", None),
    ("min.cleanable.dirty.ratio", "0.25"), ("min.compaction.lag.ms", "0"),
    ("delete.retention.ms", "86400000")])
def test_values_kafka_takes(name, value):
    assert check(name, value) is None


@pytest.mark.parametrize("name,value,why", [
    ("min.insync.replicas", "0", "min.insync.replicas must be in"),
    ("retention.ms", "-2", "retention.ms must be in"),
    ("segment.bytes", "ten", "must be an integer"),
    ("message.timestamp.type", "Now", "must be one of"),
    ("cleanup.policy", "keep", "delete, compact"),
    ("min.cleanable.dirty.ratio", "1.5", "must be in [0, 1]"),
    ("min.cleanable.dirty.ratio", "half", "must be a number"),
    ("delete.retention.ms", "-1", "delete.retention.ms must be in"),
    ("no.such", "1", "unknown topic config 'no.such'")])
def test_values_refused_say_why(name, value, why):
    assert why in check(name, value)


def test_log_settings_from_a_topics_values():
    settings = log_settings({"segment.bytes": "2097152", "retention.bytes": "100",
                             "flush.ms": "250", "min.insync.replicas": "2",
                             "segment.ms": "bad"}, {"fsync": "never"})
    assert settings == {"segment_bytes": 2097152, "retention_bytes": 100, "fsync": "interval",
                        "fsync_interval_ms": 250}
    LogConfig.of(**settings)  # a config the log takes
    assert log_settings({"flush.messages": "1"}, {})["fsync"] == "always"
    assert "batch_bytes_max" not in log_settings({"max.message.bytes": "10"}, {})


def test_every_log_field_named_exists():
    fields = set(LogConfig.__dataclass_fields__)
    assert {f for _, f in TOPIC_CONFIGS.values() if f} <= fields


def test_a_compacted_topics_log_settings():
    """compact: the log accepts the cleaner's offset gaps; without delete no retention
    removes its segments (Kafka applies retention only with cleanup.policy delete)."""
    base = {"retention_ms": 604_800_000, "retention_bytes": -1}
    assert log_settings({"cleanup.policy": "compact"}, base) == {
        "retention_ms": -1, "retention_bytes": -1, "compact": True}
    assert log_settings({"cleanup.policy": "compact,delete", "retention.ms": "5"}, base) == {
        "retention_ms": 5, "retention_bytes": -1, "compact": True}
    assert log_settings({}, base) == base
    assert compacted({"cleanup.policy": "delete,compact"}) and not compacted({})
    assert deletes({}) and not deletes({"cleanup.policy": "compact"})
    LogConfig.of(**log_settings({"cleanup.policy": "compact"}, base))


def test_cleaner_settings_from_a_topics_values_over_the_brokers():
    base = {"delete_retention_ms": 5, "min_compaction_lag_ms": 6, "offset_map_bytes": 7}
    settings = cleaner_settings({"min.cleanable.dirty.ratio": "0.75",
                                 "delete.retention.ms": "1000", "min.compaction.lag.ms": "-3"},
                                base)
    assert settings == {"delete_retention_ms": 1000, "min_compaction_lag_ms": 6,
                        "offset_map_bytes": 7, "min_cleanable_dirty_ratio": 0.75}
    CleanerConfig(**settings)
