"""The records of Kafka's offsets topic (`__consumer_offsets`) that kraftcore reads and writes,
byte for byte as Kafka 4.x writes them, and the group -> offsets partition rule.

A record's key and value each start with a big-endian int16: the key's with the record type
(Kafka's `CoordinatorRecordType`), the value's with the version of its schema; the rest is
the struct in Kafka's classic encoding (flexible versions with compact strings and tagged
fields). A null value is a tombstone: it deletes its key.

| record type | key (version 0 schema) | value |
|---|---|---|
| 0, 1 (offset commit; 0 is the legacy type, the same layout) | group string, topic string, partition int32 | `OffsetCommitValue` v0-4 |
| 2 (group metadata) | group string | `GroupMetadataValue` v0-4: a classic group's generation, protocol, leader and members with their subscriptions and assignments |
| 3+ | the consumer / share / streams groups of KIP-848 and later | (not read here) |

`OffsetCommitValue` versions: v0 offset int64, metadata string, commitTimestamp int64; v1
adds expireTimestamp int64 (v1 only); v2 is v0; v3 adds leaderEpoch int32 after the
offset; v4 is v3 flexible with a tagged topicId (tag 0, written only when not zero). Kafka
4.x writes v4, and v1 for a commit that asks for a retention time (OffsetCommit v2-4 with
RetentionTimeMs other than -1); kraftcore does the same (`offset_commit_record`).

`GroupMetadataValue` versions: v1 adds each member's rebalanceTimeout, v2 the
currentStateTimestamp, v3 each member's groupInstanceId, v4 is v3 flexible. Kafka 4.x writes
v3 (`group_metadata_record`); a group with no members is written with a null protocol and
leader and no members.

The member metadata of the "consumer" protocol type (a subscription) starts with an int16
version, then the subscribed topics as an int32 count of int16-length strings, in every
version (`subscription_topics`); the rest (user data, owned partitions, generation, rack)
is the clients' business. A member's assignment (Kafka's `ConsumerProtocolAssignment`,
versions 0-3 alike) is an int16 version, an int32 count of (topic string, int32 count of
int32 partitions), then user data as nullable int32-length bytes
(`decode_assignment`); bytes after it (a later version's fields) are skipped, as Kafka's
consumer reads a newer version with the newest schema it knows.

The coordinator of group `g` is the leader of partition
`abs(javaStringHashCode(g)) % offsets.topic.num.partitions`, where the hash is Java's
`String.hashCode` over the UTF-16 code units as a signed 32-bit integer and `abs` maps
Integer.MIN_VALUE to 0 (Kafka's `Utils.abs`) — `partition_for`.
"""

import struct
from typing import NamedTuple

from kraftcore.errors import CorruptRecordError, ProtocolError
from kraftcore.protocol.schema import Field as F, adopt, message
from kraftcore.types import ZERO_UUID

__all__ = ["OFFSETS_TOPIC", "OffsetCommitKey", "OffsetCommitValue", "GroupMetadataKey",
           "OffsetAndMetadata", "OFFSET_COMMIT_VALUE_VERSION", "offset_commit_record",
           "decode_key", "decode_offset_value", "java_string_hash", "partition_for",
           "RECORD_TYPE_LEGACY_OFFSET_COMMIT", "RECORD_TYPE_OFFSET_COMMIT",
           "RECORD_TYPE_GROUP_METADATA", "GroupMetadataValue", "GROUP_METADATA_VALUE_VERSION",
           "group_metadata_record", "group_tombstone", "offset_tombstone",
           "decode_group_value", "subscription_topics", "ConsumerAssignment",
           "decode_assignment"]

OFFSETS_TOPIC = "__consumer_offsets"
RECORD_TYPE_LEGACY_OFFSET_COMMIT = 0
RECORD_TYPE_OFFSET_COMMIT = 1
RECORD_TYPE_GROUP_METADATA = 2
# The version Kafka 4.x writes, and the one it writes for a commit with a retention time.
OFFSET_COMMIT_VALUE_VERSION = 4
OFFSET_COMMIT_VALUE_VERSION_EXPIRING = 1
GROUP_METADATA_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT32_MIN = -(1 << 31)

OffsetCommitKey = message("OffsetCommitKey", kind="data", valid="0", flexible="none", fields=[
    F("group", "string"),
    F("topic", "string"),
    F("partition", "int32"),
])

OffsetCommitValue = message("OffsetCommitValue", kind="data", valid="0-4", flexible="4+",
                            fields=[
    F("offset", "int64"),
    F("leaderEpoch", "int32", "3+", default=-1, ignorable=True),
    F("metadata", "string"),
    F("commitTimestamp", "int64"),
    F("expireTimestamp", "int64", "1", default=-1, ignorable=True),
    F("topicId", "uuid", "4+", tag=0, ignorable=True),
])

GroupMetadataKey = message("GroupMetadataKey", kind="data", valid="0", flexible="none",
                           fields=[F("group", "string")])

GroupMetadataValue = message("GroupMetadataValue", kind="data", valid="0-4", flexible="4+",
                             fields=[
    F("protocolType", "string"),
    F("generation", "int32"),
    F("protocol", "string", nullable="0+"),
    F("leader", "string", nullable="0+"),
    F("currentStateTimestamp", "int64", "2+", default=-1, ignorable=True),
    F("members", "[]MemberMetadata", fields=[
        F("memberId", "string"),
        F("groupInstanceId", "string", "3+", nullable="3+", default=None, ignorable=True),
        F("clientId", "string"),
        F("clientHost", "string"),
        F("rebalanceTimeout", "int32", "1+", default=-1, ignorable=True),
        F("sessionTimeout", "int32"),
        F("subscription", "bytes"),
        F("assignment", "bytes"),
    ]),
])

for _cls in (OffsetCommitKey, OffsetCommitValue, GroupMetadataKey, GroupMetadataValue):
    adopt(_cls, __name__)
del _cls


class OffsetAndMetadata(NamedTuple):
    """One committed offset: what OffsetFetch answers for a group's partition."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1
    topic_id: object = ZERO_UUID


def offset_commit_record(group, topic, partition, value):
    """(key bytes, value bytes) of the record committing `value` (an `OffsetAndMetadata`)
    for `group`'s `topic`-`partition`: value v1 when it expires, else v4."""
    key = OffsetCommitKey(group=group, topic=topic, partition=partition)
    key_bytes = _INT16.pack(RECORD_TYPE_OFFSET_COMMIT) + key.encode(0)
    expiring = value.expire_timestamp_ms != -1
    version = OFFSET_COMMIT_VALUE_VERSION_EXPIRING if expiring else OFFSET_COMMIT_VALUE_VERSION
    body = OffsetCommitValue(offset=value.offset, leader_epoch=value.leader_epoch,
                             metadata=value.metadata,
                             commit_timestamp=value.commit_timestamp_ms,
                             expire_timestamp=value.expire_timestamp_ms,
                             topic_id=value.topic_id)
    return key_bytes, _INT16.pack(version) + body.encode(version)


def offset_tombstone(group, topic, partition):
    """The key bytes of the record that deletes `group`'s offset of `topic`-`partition`
    (written with a null value)."""
    key = OffsetCommitKey(group=group, topic=topic, partition=partition)
    return _INT16.pack(RECORD_TYPE_OFFSET_COMMIT) + key.encode(0)


def group_tombstone(group):
    """The key bytes of `group`'s metadata record (a null value deletes the group)."""
    return _INT16.pack(RECORD_TYPE_GROUP_METADATA) + GroupMetadataKey(group=group).encode(0)


def group_metadata_record(group, now_ms):
    """(key bytes, value bytes) of the record that stores `group` (a
    `kraftcore.broker.classic_group.ClassicGroup`), value v3 as Kafka 4.x writes it."""
    cls = GroupMetadataValue
    protocol = group.protocol_name
    members = [cls.MemberMetadata(
        member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
        client_host=m.client_host, rebalance_timeout=m.rebalance_ms,
        session_timeout=m.session_ms,
        subscription=bytes(m.metadata(protocol)) if protocol is not None else b"",
        assignment=bytes(m.assignment)) for m in group.members.values()]
    value = cls(protocol_type=group.protocol_type or "", generation=group.generation,
                protocol=protocol, leader=group.leader_id if members else None,
                current_state_timestamp=now_ms, members=members)
    version = GROUP_METADATA_VALUE_VERSION
    return group_tombstone(group.group_id), _INT16.pack(version) + value.encode(version)


def decode_group_value(data):
    """The `GroupMetadataValue` of a group metadata record's value (versions 0-4). Raises
    `CorruptRecordError` on bytes that are not such a value."""
    return _decode_value(GroupMetadataValue, data, "group metadata")


def _decode_value(cls, data, what):
    """A record value of message `cls`: its int16 version, then the struct at it."""
    if len(data) < 2:
        raise CorruptRecordError(f"a {what} value is shorter than its version")
    data = bytes(data)
    version = _INT16.unpack_from(data)[0]
    if not 0 <= version <= cls.valid_versions[1]:
        raise CorruptRecordError(f"{what} value version {version} is not one of "
                                 f"0-{cls.valid_versions[1]}")
    try:
        return cls.decode(data[2:], version)
    except Exception as exc:  # noqa: BLE001 - ProtocolError, UnicodeDecodeError, ...
        raise CorruptRecordError(f"a {what} value v{version} does not decode: "
                                 f"{exc}") from None


def subscription_topics(metadata):
    """The topics a consumer-protocol subscription names, or None when `metadata` is not
    one."""
    data = bytes(metadata)
    try:
        (count,) = struct.unpack_from(">i", data, 2)
        if count < 0 or count > len(data):
            return None
        topics, pos = [], 6
        for _ in range(count):
            (size,) = _INT16.unpack_from(data, pos)
            if size < 0 or pos + 2 + size > len(data):
                return None
            topics.append(data[pos + 2:pos + 2 + size].decode("utf-8"))
            pos += 2 + size
    except (struct.error, UnicodeDecodeError):
        return None
    return topics


class ConsumerAssignment(NamedTuple):
    """A consumer-protocol assignment: `partitions` [(topic, [partition, ...])] in the order
    written; `user_data` bytes or None."""

    version: int
    partitions: list
    user_data: object = None


def decode_assignment(data):
    """The `ConsumerAssignment` in a "consumer" group member's assignment bytes (what
    SyncGroup hands it, what DescribeGroups shows). Raises `ProtocolError`, with the byte
    position, on bytes that are not one: empty or truncated, a negative version, a count or
    length that is negative or runs past the end, a null topic, a topic that is not UTF-8."""
    data = bytes(data)
    end = len(data)
    pos = 0

    def take(size, what):
        nonlocal pos
        if size < 0 or pos + size > end:
            raise ProtocolError(f"a consumer assignment ends inside its {what} "
                                f"({end} bytes)", pos)
        start, pos = pos, pos + size
        return start

    def count(what, item_bytes_min):
        at = take(4, what)
        (n,) = _INT32.unpack_from(data, at)
        if n < 0 or n * item_bytes_min > end - pos:
            raise ProtocolError(f"a consumer assignment's {what} {n} does not fit in its "
                                f"{end} bytes", at)
        return n

    (version,) = _INT16.unpack_from(data, take(2, "version"))
    if version < 0:
        raise ProtocolError(f"a consumer assignment has version {version}, not 0 or more", 0)
    partitions = []
    for _ in range(count("topic count", 6)):
        at = take(2, "topic name length")
        (size,) = _INT16.unpack_from(data, at)
        if size < 0:
            raise ProtocolError("a consumer assignment has a null topic name", at)
        start = take(size, "topic name")
        try:
            topic = data[start:pos].decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("a consumer assignment's topic name is not UTF-8",
                                start) from None
        n = count(f"partition count of {topic!r}", 4)
        start = take(4 * n, f"partitions of {topic!r}")
        partitions.append((topic, list(struct.unpack_from(f">{n}i", data, start))))
    at = take(4, "user data length")
    (size,) = _INT32.unpack_from(data, at)
    if size < -1:
        raise ProtocolError(f"a consumer assignment's user data has length {size}", at)
    user_data = None
    if size != -1:
        start = take(size, "user data")
        user_data = data[start:pos]
    return ConsumerAssignment(version, partitions, user_data)


def decode_key(data):
    """A record key of the offsets topic: ("offset", group, topic, partition) for an offset
    commit, ("group", group) for group metadata, (None, record type) for a type kraftcore
    does not read. Raises `CorruptRecordError` on bytes that are not such a key."""
    if data is None or len(data) < 2:
        raise CorruptRecordError("an offsets topic record has no key, or one shorter than "
                                 "its type")
    data = bytes(data)
    record_type = _INT16.unpack_from(data)[0]
    try:
        if record_type in (RECORD_TYPE_LEGACY_OFFSET_COMMIT, RECORD_TYPE_OFFSET_COMMIT):
            key = OffsetCommitKey.decode(data[2:], 0)
            return ("offset", key.group, key.topic, key.partition)
        if record_type == RECORD_TYPE_GROUP_METADATA:
            return ("group", GroupMetadataKey.decode(data[2:], 0).group)
    except Exception as exc:  # noqa: BLE001 - ProtocolError, UnicodeDecodeError, ...
        raise CorruptRecordError(f"an offsets topic key of type {record_type} does not "
                                 f"decode: {exc}") from None
    return (None, record_type)


def decode_offset_value(data):
    """The `OffsetAndMetadata` of an offset commit record's value (versions 0-4). Raises
    `CorruptRecordError` on bytes that are not such a value."""
    v = _decode_value(OffsetCommitValue, data, "offset commit")
    return OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                             v.expire_timestamp, v.topic_id)


def java_string_hash(text):
    """Java's `String.hashCode()` of `text`: s[0]*31^(n-1) + ... + s[n-1] over its UTF-16
    code units (a character beyond the BMP counts as its two surrogates), as a signed
    32-bit integer."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group, partitions):
    """The offsets topic partition whose leader coordinates `group` (Kafka's
    `Utils.abs(group.hashCode()) % partitions`)."""
    if partitions < 1:
        raise ValueError(f"the offsets topic needs at least one partition, got {partitions}")
    h = java_string_hash(group)
    return (0 if h == _INT32_MIN else abs(h)) % partitions
