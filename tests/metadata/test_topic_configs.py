"""Topic configs (`kraftcore.metadata.topic_configs`): the values the controller takes or
refuses, and the partition-log settings a broker derives from them."""

import pytest

from kraftcore.log import LogConfig
from kraftcore.metadata.topic_configs import TOPIC_CONFIGS, check, log_settings


@pytest.mark.parametrize("name,value", [
    ("min.insync.replicas", "2"), ("unclean.leader.election.enable", "true"),
    ("message.timestamp.type", "LogAppendTime"), ("cleanup.policy", "compact,delete"),
    ("retention.ms", "-1"), ("segment.bytes", "1048576"), ("compression.type", "zstd"),
    ("flush.messages", "1"), ("max.message.bytes", "0"), ("retention.bytes", None)])
def test_values_kafka_takes(name, value):
    assert check(name, value) is None


@pytest.mark.parametrize("name,value,why", [
    ("min.insync.replicas", "0", "min.insync.replicas must be in"),
    ("retention.ms", "-2", "retention.ms must be in"),
    ("segment.bytes", "ten", "must be an integer"),
    ("message.timestamp.type", "Now", "must be one of"),
    ("cleanup.policy", "keep", "delete, compact"),
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
