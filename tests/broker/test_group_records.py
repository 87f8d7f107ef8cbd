"""The offsets topic's records (`kraftcore.broker.group_records`) as Kafka 4.x lays them out:
keys and values byte for byte, every value version read back, the records kraftcore does not
read recognised and skipped, damaged bytes refused; and the group -> partition rule against
Java's String.hashCode (values computed by a JVM).

Kafka's own decoder reading these records from a kraftcore segment:
tests/peers/test_kafka_reads_offsets.py."""

import struct

import pytest

from kraftcore.broker.group_records import (OffsetAndMetadata, OffsetCommitValue, decode_key,
                                            decode_offset_value, java_string_hash,
                                            offset_commit_record, partition_for)
from kraftcore.errors import CorruptRecordError
from kraftcore.types import Uuid


def string(text):  # classic string: int16 length, UTF-8
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def compact(text):  # compact string: uvarint length + 1, UTF-8 (one byte for short ones)
    data = text.encode()
    return bytes([len(data) + 1]) + data


KEY = struct.pack(">h", 1) + string("g") + string("orders") + struct.pack(">i", 3)


def test_the_key_is_record_type_1_then_group_topic_partition():
    key, _ = offset_commit_record("g", "orders", 3, OffsetAndMetadata(42))
    assert key == KEY == bytes.fromhex("0001" "0001" "67" "0006") + b"orders" + b"\0\0\0\3"
    assert decode_key(key) == ("offset", "g", "orders", 3)


def test_the_value_kafka_writes_is_v4_flexible():
    _, value = offset_commit_record("g", "orders", 3, OffsetAndMetadata(
        42, leader_epoch=7, metadata="m", commit_timestamp_ms=1000))
    assert value == (struct.pack(">hqi", 4, 42, 7) + compact("m") + struct.pack(">q", 1000)
                     + b"\0")  # no tagged fields: the topic id is zero
    assert decode_offset_value(value) == OffsetAndMetadata(42, 7, "m", 1000)


def test_a_commit_by_topic_id_carries_it_as_tag_0():
    topic_id = Uuid(bytes(range(1, 17)))
    _, value = offset_commit_record("g", "orders", 3, OffsetAndMetadata(
        42, 7, "", 1000, topic_id=topic_id))
    assert value.endswith(b"\x01\x00\x10" + bytes(range(1, 17)))
    assert decode_offset_value(value).topic_id == topic_id


def test_a_commit_with_a_retention_time_is_v1_with_its_expiry_and_no_epoch():
    _, value = offset_commit_record("g", "orders", 3, OffsetAndMetadata(
        42, leader_epoch=7, metadata="m", commit_timestamp_ms=1000, expire_timestamp_ms=5000))
    assert value == struct.pack(">hq", 1, 42) + string("m") + struct.pack(">qq", 1000, 5000)
    assert decode_offset_value(value) == OffsetAndMetadata(42, -1, "m", 1000, 5000)


@pytest.mark.parametrize("version, body, expected", [
    (0, struct.pack(">q", 5) + string("a") + struct.pack(">q", 9), OffsetAndMetadata(5, -1, "a", 9)),
    (1, struct.pack(">q", 5) + string("") + struct.pack(">qq", 9, 11),
     OffsetAndMetadata(5, -1, "", 9, 11)),
    (2, struct.pack(">q", 5) + string("b") + struct.pack(">q", 9), OffsetAndMetadata(5, -1, "b", 9)),
    (3, struct.pack(">qi", 5, 2) + string("c") + struct.pack(">q", 9), OffsetAndMetadata(5, 2, "c", 9)),
    (4, struct.pack(">qi", 5, 2) + compact("ü") + struct.pack(">q", 9) + b"\0",
     OffsetAndMetadata(5, 2, "ü", 9)),
])
def test_every_value_version_reads(version, body, expected):
    assert decode_offset_value(struct.pack(">h", version) + body) == expected


def test_other_record_types_are_recognised_and_not_read():
    legacy = struct.pack(">h", 0) + KEY[2:]
    assert decode_key(legacy) == ("offset", "g", "orders", 3)
    assert decode_key(struct.pack(">h", 2) + string("g")) == ("group", "g")
    assert decode_key(struct.pack(">h", 5) + b"anything") == (None, 5)


@pytest.mark.parametrize("data", [None, b"", b"\0", KEY[:-1], KEY + b"\0",
                                  struct.pack(">h", 1) + struct.pack(">h", 10) + b"abc"])
def test_a_damaged_key_is_refused(data):
    with pytest.raises(CorruptRecordError):
        decode_key(data)


@pytest.mark.parametrize("data", [b"", b"\0", struct.pack(">h", 5) + bytes(30),
                                  struct.pack(">h", -1) + bytes(30),
                                  struct.pack(">hq", 3, 1), struct.pack(">hq", 4, 1) + b"\xff"])
def test_a_damaged_value_is_refused(data):
    with pytest.raises(CorruptRecordError):
        decode_offset_value(data)


def test_value_versions_are_kafkas():
    assert OffsetCommitValue.valid_versions == (0, 4)
    assert OffsetCommitValue.flexible_versions == (4, None)


# Java's "...".hashCode() and abs(h) % 50 (Integer.MIN_VALUE -> 0), computed by a JVM.
JAVA = [
    ("", 0, 0), ("a", 97, 47), ("hello", 99162322, 22),
    ("polygenelubricants", -2147483648, 0), ("\U0001F600", 1772899, 49), ("é", 233, 33),
    ("console-consumer-12345", 158455506, 6), ("my-group", -1906497762, 12),
    ("grüße-gruppe", 80269105, 5), ("kraftcore", -88311353, 3),
]


@pytest.mark.parametrize("group, hash_code, partition", JAVA)
def test_the_coordinator_partition_is_javas(group, hash_code, partition):
    assert java_string_hash(group) == hash_code
    assert partition_for(group, 50) == partition


def test_partition_for_needs_partitions():
    with pytest.raises(ValueError):
        partition_for("g", 0)
    assert {partition_for(f"group-{i}", 3) for i in range(100)} == {0, 1, 2}
