"""KRaft metadata records (kafka-facts §5): one schema per record type, and bulk encode /
decode of framed record values and of the record batches a KRaft leader writes.

Every record type of §5.2 is a `Message` class (`kind="metadata"`, flexible from v0), with
Kafka's field order, versions, tags, nullability and defaults. Retired or unused api keys
(6, 13, 16) have no class. `RECORD_TYPES` maps api key -> class; `type_name` gives Kafka's
`MetadataRecordType` name ("PARTITION_RECORD").

The bulk functions hand whole lists to the codec kernel (`codec.encode_metadata_values`,
`codec.decode_metadata_values`), which runs the per-record loop natively; nothing here
touches a record's fields one by one.

A value (§5.1) is `uvarint frameVersion (1) | uvarint apiKey | uvarint version | body`. In a
batch it is the value of a record with a null key, no headers and timestampDelta 0.
"""

import contextlib
import gc

from kraftcore import codec
from kraftcore.errors import EncodeError, ProtocolError, UnsupportedVersionError
from kraftcore.protocol.schema import Field as F, _snake, adopt, message

__all__ = [
    "RECORD_TYPES", "TYPE_NAMES", "TABLE", "type_name", "record_class", "encode_values",
    "decode_values", "encode_batch", "decode_batch", "records_version_for",
    "METADATA_VERSION_LEVELS",
] + [
    "RegisterBrokerRecord", "UnregisterBrokerRecord", "TopicRecord", "PartitionRecord",
    "ConfigRecord", "PartitionChangeRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
    "RemoveTopicRecord", "DelegationTokenRecord", "UserScramCredentialRecord",
    "FeatureLevelRecord", "ClientQuotaRecord", "ProducerIdsRecord",
    "BrokerRegistrationChangeRecord", "AccessControlEntryRecord",
    "RemoveAccessControlEntryRecord", "NoOpRecord", "ZkMigrationStateRecord",
    "RemoveUserScramCredentialRecord", "BeginTransactionRecord", "EndTransactionRecord",
    "AbortTransactionRecord", "RemoveDelegationTokenRecord", "RegisterControllerRecord",
    "ClearElrRecord", "UnregisterControllerRecord",
]


def _record(name, api_key, valid, fields):
    cls = message(name, api_key=api_key, kind="metadata", valid=valid, flexible="0+",
                  fields=fields)
    adopt(cls, __name__)
    return cls


# ------------------------------------------------------------------------------ schemas
# Field order, versions, tags and defaults as in Kafka's metadata/*.json (kafka-facts §5.2).

def _endpoints_and_features(role):
    """The listeners and supported features a broker or a controller registers with."""
    return [
        F("EndPoints", f"[]{role}Endpoint", fields=[
            F("Name", "string"), F("Host", "string"), F("Port", "uint16"),
            F("SecurityProtocol", "int16")]),
        F("Features", f"[]{role}Feature", fields=[
            F("Name", "string"), F("MinSupportedVersion", "int16"),
            F("MaxSupportedVersion", "int16")]),
    ]


RegisterBrokerRecord = _record("RegisterBrokerRecord", 0, "0-4", [
    F("BrokerId", "int32"),
    F("IsMigratingZkBroker", "bool", "2+", default=False),
    F("IncarnationId", "uuid"),
    F("BrokerEpoch", "int64"),
    *_endpoints_and_features("Broker"),
    F("Rack", "string", nullable="0+"),
    F("Fenced", "bool", default=True),
    F("InControlledShutdown", "bool", "1+", default=False),
    F("LogDirs", "[]uuid", "3+", tag=0),
    # Kafka 4.4 writes v4: the log dirs cordoned on the broker (none: null)
    F("CordonedLogDirs", "[]uuid", "4+", nullable="4+", tag=1, default=None),
])

UnregisterBrokerRecord = _record("UnregisterBrokerRecord", 1, "0", [
    F("BrokerId", "int32"), F("BrokerEpoch", "int64"),
])

TopicRecord = _record("TopicRecord", 2, "0", [
    F("Name", "string"), F("TopicId", "uuid"),
])

PartitionRecord = _record("PartitionRecord", 3, "0-2", [
    F("PartitionId", "int32", default=-1),
    F("TopicId", "uuid"),
    F("Replicas", "[]int32"),
    F("Isr", "[]int32"),
    F("RemovingReplicas", "[]int32"),
    F("AddingReplicas", "[]int32"),
    F("Leader", "int32", default=-1),
    F("LeaderRecoveryState", "int8", tag=0, default=0),
    F("LeaderEpoch", "int32", default=-1),
    F("PartitionEpoch", "int32", default=-1),
    F("Directories", "[]uuid", "1+"),
    F("EligibleLeaderReplicas", "[]int32", "2+", nullable="2+", tag=1, default=None),
    F("LastKnownElr", "[]int32", "2+", nullable="2+", tag=2, default=None),
])

ConfigRecord = _record("ConfigRecord", 4, "0", [
    F("ResourceType", "int8"),
    F("ResourceName", "string"),
    F("Name", "string"),
    F("Value", "string", nullable="0+"),
])

# Every change field is tagged; null / the sentinel default means "unchanged".
PartitionChangeRecord = _record("PartitionChangeRecord", 5, "0-2", [
    F("PartitionId", "int32", default=-1),
    F("TopicId", "uuid"),
    F("Isr", "[]int32", nullable="0+", tag=0, default=None),
    F("Leader", "int32", tag=1, default=-2),
    F("Replicas", "[]int32", nullable="0+", tag=2, default=None),
    F("RemovingReplicas", "[]int32", nullable="0+", tag=3, default=None),
    F("AddingReplicas", "[]int32", nullable="0+", tag=4, default=None),
    F("LeaderRecoveryState", "int8", tag=5, default=-1),
    F("Directories", "[]uuid", "1+", nullable="1+", tag=8, default=None),
    F("EligibleLeaderReplicas", "[]int32", "2+", nullable="2+", tag=6, default=None),
    F("LastKnownElr", "[]int32", "2+", nullable="2+", tag=7, default=None),
])

FenceBrokerRecord = _record("FenceBrokerRecord", 7, "0", [
    F("Id", "int32"), F("Epoch", "int64"),
])

UnfenceBrokerRecord = _record("UnfenceBrokerRecord", 8, "0", [
    F("Id", "int32"), F("Epoch", "int64"),
])

RemoveTopicRecord = _record("RemoveTopicRecord", 9, "0", [
    F("TopicId", "uuid"),
])

DelegationTokenRecord = _record("DelegationTokenRecord", 10, "0", [
    F("Owner", "string"),
    F("Requester", "string"),
    F("Renewers", "[]string"),
    F("IssueTimestamp", "int64"),
    F("MaxTimestamp", "int64"),
    F("ExpirationTimestamp", "int64"),
    F("TokenId", "string"),
])

UserScramCredentialRecord = _record("UserScramCredentialRecord", 11, "0", [
    F("Name", "string"),
    F("Mechanism", "int8"),
    F("Salt", "bytes"),
    F("StoredKey", "bytes"),
    F("ServerKey", "bytes"),
    F("Iterations", "int32"),
])

FeatureLevelRecord = _record("FeatureLevelRecord", 12, "0", [
    F("Name", "string"), F("FeatureLevel", "int16"),
])

ClientQuotaRecord = _record("ClientQuotaRecord", 14, "0", [
    F("Entity", "[]EntityData", fields=[
        F("EntityType", "string"), F("EntityName", "string", nullable="0+")]),
    F("Key", "string"),
    F("Value", "float64"),
    F("Remove", "bool"),
])

ProducerIdsRecord = _record("ProducerIdsRecord", 15, "0", [
    F("BrokerId", "int32"),
    F("BrokerEpoch", "int64", default=-1),
    F("NextProducerId", "int64"),
])

BrokerRegistrationChangeRecord = _record("BrokerRegistrationChangeRecord", 17, "0-3", [
    F("BrokerId", "int32"),
    F("BrokerEpoch", "int64"),
    F("Fenced", "int8", tag=0, default=0),  # 1 fence, 0 no change, -1 unfence
    F("InControlledShutdown", "int8", "1+", tag=1, default=0),  # 1 enter, 0 no change
    F("LogDirs", "[]uuid", "2+", tag=2),
    F("CordonedLogDirs", "[]uuid", "3+", nullable="3+", tag=3, default=None),
])

AccessControlEntryRecord = _record("AccessControlEntryRecord", 18, "0", [
    F("Id", "uuid"),
    F("ResourceType", "int8"),
    F("ResourceName", "string"),
    F("PatternType", "int8"),
    F("Principal", "string"),
    F("Host", "string"),
    F("Operation", "int8"),
    F("PermissionType", "int8"),
])

RemoveAccessControlEntryRecord = _record("RemoveAccessControlEntryRecord", 19, "0", [
    F("Id", "uuid"),
])

NoOpRecord = _record("NoOpRecord", 20, "0", [])

ZkMigrationStateRecord = _record("ZkMigrationStateRecord", 21, "0", [
    F("ZkMigrationState", "int8"),
])

RemoveUserScramCredentialRecord = _record("RemoveUserScramCredentialRecord", 22, "0", [
    F("Name", "string"), F("Mechanism", "int8"),
])

BeginTransactionRecord = _record("BeginTransactionRecord", 23, "0", [
    F("Name", "string", nullable="0+", tag=0, default=None),
])

EndTransactionRecord = _record("EndTransactionRecord", 24, "0", [])

AbortTransactionRecord = _record("AbortTransactionRecord", 25, "0", [
    F("Reason", "string", nullable="0+", tag=0, default=None),
])

RemoveDelegationTokenRecord = _record("RemoveDelegationTokenRecord", 26, "0", [
    F("TokenId", "string"),
])

RegisterControllerRecord = _record("RegisterControllerRecord", 27, "0", [
    F("ControllerId", "int32"),
    F("IncarnationId", "uuid"),
    F("ZkMigrationReady", "bool"),
    *_endpoints_and_features("Controller"),
])

ClearElrRecord = _record("ClearElrRecord", 28, "0", [
    F("TopicName", "string"),  # empty: every topic
])

UnregisterControllerRecord = _record("UnregisterControllerRecord", 29, "0", [
    F("ControllerId", "int32"),
])

# ------------------------------------------------------------------------------ registry

_CLASSES = (
    RegisterBrokerRecord, UnregisterBrokerRecord, TopicRecord, PartitionRecord, ConfigRecord,
    PartitionChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord, RemoveTopicRecord,
    DelegationTokenRecord, UserScramCredentialRecord, FeatureLevelRecord, ClientQuotaRecord,
    ProducerIdsRecord, BrokerRegistrationChangeRecord, AccessControlEntryRecord,
    RemoveAccessControlEntryRecord, NoOpRecord, ZkMigrationStateRecord,
    RemoveUserScramCredentialRecord, BeginTransactionRecord, EndTransactionRecord,
    AbortTransactionRecord, RemoveDelegationTokenRecord, RegisterControllerRecord,
    ClearElrRecord, UnregisterControllerRecord,
)

RECORD_TYPES = {cls.api_key: cls for cls in _CLASSES}
"""api key -> record class (no entry for the retired keys 6, 13 and 16)."""


def _upper_snake(name):
    return _snake(name).upper()


TYPE_NAMES = {cls.api_key: _upper_snake(cls.__name__) for cls in _CLASSES}
"""api key -> Kafka's `MetadataRecordType` name, e.g. 3 -> "PARTITION_RECORD"."""
_NAME_OF_CLASS = {cls: TYPE_NAMES[cls.api_key] for cls in _CLASSES}
_HIGHEST = {cls: cls.valid_versions[1] for cls in _CLASSES}


def _build_table():
    table = [None] * (max(RECORD_TYPES) + 1)
    for api_key, cls in RECORD_TYPES.items():
        low, high = cls.valid_versions
        table[api_key] = [cls.program(v) if v >= low else None for v in range(high + 1)]
    return table


TABLE = _build_table()
"""The kernel table: `TABLE[api_key][version]` is the compiled program, None where no such
record type or version exists. Built once, at import."""


def type_name(record):
    """Kafka's name of a record type: `type_name(PartitionRecord)`, `type_name(record)` or
    `type_name(3)` -> "PARTITION_RECORD". Unknown types raise KeyError."""
    if isinstance(record, int):
        return TYPE_NAMES[record]
    cls = record if isinstance(record, type) else type(record)
    return _NAME_OF_CLASS[cls]


def record_class(api_key):
    """The class of metadata record type `api_key`; UnsupportedVersionError if unknown."""
    cls = RECORD_TYPES.get(api_key)
    if cls is None:
        raise UnsupportedVersionError(f"unknown metadata record type {api_key!r}")
    return cls


# ------------------------------------------------------------------------------ values


def _versions_for(records, versions):
    if versions is None:
        try:
            return list(map(_HIGHEST.__getitem__, map(type, records)))
        except KeyError as exc:
            raise EncodeError(f"{exc.args[0].__name__} is not a metadata record") from None
    if isinstance(versions, int):
        return [versions] * len(records)
    return versions


def encode_values(records, versions=None):
    """Framed values (§5.1) of `records`, one bytes object per record.

    `versions`: None writes each record at its class's highest version; an int writes every
    record at that version; a sequence gives one version per record. A record that its
    version cannot carry raises `EncodeError` naming the field; nothing is returned then.
    """
    return codec.encode_metadata_values(records, _versions_for(records, versions), TABLE)


def decode_values(values):
    """Decode framed metadata record values: a list of `(record, version)`, one per value.

    A malformed value raises `ProtocolError` naming its index; the position counts from the
    start of that value. Records decoded here have `decoded_version` None (the version is
    the second element of each pair)."""
    return codec.decode_metadata_values(values, TABLE)


# ------------------------------------------------------------------------------ batches


def encode_batch(records, *, base_offset=0, leader_epoch, timestamp, versions=None):
    """One record batch v2 holding `records` as KRaft leaders write it (§5.1): null keys,
    no headers, CREATE_TIME with every record at `timestamp`, no producer id / epoch /
    sequence, not transactional, not control, uncompressed, partitionLeaderEpoch =
    `leader_epoch`. Record i gets offset `base_offset + i`. Returns bytes."""
    if not records:
        raise ValueError("a metadata batch needs at least one record")
    values = encode_values(records, versions)
    return codec.encode_batch(values, timestamp=timestamp, base_offset=base_offset,
                              leader_epoch=leader_epoch)


def decode_batch(buffer, *, verify=True, skip_control=False):
    """Decode the metadata records of every batch in `buffer` (one or many, back to back).

    Returns a list of `(offset, record, version)` in log order. With `verify` every batch's
    CRC is checked (`CorruptRecordError`). A control batch (LeaderChange, snapshot header /
    footer, KRaft version, voters) holds no metadata records: it raises `ProtocolError` at
    its position unless `skip_control` is set, in which case it is left out. Decode control
    batches with `kraftcore.raft.control.decode_control_batches`.
    A bad metadata value raises `ProtocolError` naming the batch position, the record's
    offset and the position inside the value.
    """
    with cyclic_gc_paused():
        return _decode_batches(buffer, verify, skip_control)


@contextlib.contextmanager
def cyclic_gc_paused():
    """Pause the cyclic garbage collector for a bulk step. Records, images and deltas form
    no reference cycles; without this pause the collector would rescan the growing result
    (and the image's millions of objects) every 700 allocations (the kernel pauses it the
    same way inside one call; this covers the loops around it). Nested uses are fine."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decode_batches(buffer, verify, skip_control):
    out = []
    for batch in codec.decode_batches(buffer, verify=verify):
        if batch.is_control:
            if skip_control:
                continue
            raise ProtocolError(
                f"the batch at offset {batch.base_offset} is a control batch, not metadata "
                "records (decode it with kraftcore.raft.control)", batch.position)
        recs = batch.records
        try:
            decoded = codec.decode_metadata_values([r.value for r in recs], TABLE)
        except ProtocolError as exc:
            raise ProtocolError(
                f"batch at byte {batch.position} (base offset {batch.base_offset}): "
                f"{exc.reason}", exc.position) from None
        out += [(r.offset, d[0], d[1]) for r, d in zip(recs, decoded)]
    return out


# ------------------------------------------------------------------------------ versions

METADATA_VERSION_LEVELS = {
    "3.0-IV1": 1, "3.1-IV0": 2, "3.2-IV0": 3, "3.3-IV0": 4, "3.3-IV1": 5, "3.3-IV2": 6,
    "3.3-IV3": 7, "3.4-IV0": 8, "3.5-IV0": 9, "3.5-IV1": 10, "3.5-IV2": 11, "3.6-IV0": 12,
    "3.6-IV1": 13, "3.6-IV2": 14, "3.7-IV0": 15, "3.7-IV1": 16, "3.7-IV2": 17,
    "3.7-IV3": 18, "3.7-IV4": 19, "3.8-IV0": 20, "3.9-IV0": 21, "4.0-IV0": 22, "4.0-IV1": 23,
}
"""metadata.version name -> feature level (kafka-facts §5.4)."""

_MV = METADATA_VERSION_LEVELS


def records_version_for(level):
    """The record versions Kafka writes at metadata.version feature `level` (an int, or a
    name such as "3.7-IV2"): a dict record class -> version for the record types whose
    version depends on it (§5.4). A class maps to None when that level does not write it
    at all (NoOpRecord below 3.3-IV1; BrokerRegistrationChangeRecord below 3.3-IV2, where
    Fence/UnfenceBrokerRecord are written instead). Record types not listed are always v0.

    BrokerRegistrationChangeRecord's rule (v2 with directory assignment, v1 with controlled
    shutdown) follows the fields each version adds; §5.4 states the other rules."""
    if isinstance(level, str):
        level = _MV[level]
    if not isinstance(level, int) or level < 1:
        raise UnsupportedVersionError(f"not a KRaft metadata.version level: {level!r}")
    elr = level >= _MV["4.0-IV1"]
    directories = level >= _MV["3.7-IV2"]
    partition = 2 if elr else 1 if directories else 0
    return {
        RegisterBrokerRecord: (3 if directories else 2 if level >= _MV["3.4-IV0"]
                               else 1 if level >= _MV["3.3-IV3"] else 0),
        PartitionRecord: partition,
        PartitionChangeRecord: partition,
        BrokerRegistrationChangeRecord: (2 if directories else 1 if level >= _MV["3.3-IV3"]
                                         else 0 if level >= _MV["3.3-IV2"] else None),
        FenceBrokerRecord: 0 if level < _MV["3.3-IV2"] else None,
        UnfenceBrokerRecord: 0 if level < _MV["3.3-IV2"] else None,
        NoOpRecord: 0 if level >= _MV["3.3-IV1"] else None,
        RegisterControllerRecord: 0 if level >= _MV["3.7-IV0"] else None,
    }
