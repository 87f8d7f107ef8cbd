"""Control records of the KRaft metadata log (kafka-facts §2.7): their key, their value
schemas, and the control batches that carry them.

A control record's key is a classic struct `version int16 (0) | type int16`. A reader needs
at least 4 bytes (extra bytes are ignored), a negative version is corruption, an unknown
version is read as v0, and an unknown type reads as UNKNOWN (-1), which is skipped. The value
depends on the type:

  type  name             value
  0     ABORT            EndTransactionMarker (classic: version int16, coordinator epoch int32)
  1     COMMIT           EndTransactionMarker
  2     LEADER_CHANGE    LeaderChangeMessage (written at v0)
  3     SNAPSHOT_HEADER  SnapshotHeaderRecord
  4     SNAPSHOT_FOOTER  SnapshotFooterRecord
  5     KRAFT_VERSION    KRaftVersionRecord
  6     KRAFT_VOTERS     VotersRecord

Each KRaft value is the plain flexible message body (its first field, `Version`, is part of
the message, not a prefix). `encode_control_batch` writes a control batch as KRaft does:
magic 2, CREATE_TIME, no producer, not transactional, control.
"""

import struct

from kraftcore import codec
from kraftcore.errors import EncodeError, ProtocolError
from kraftcore.protocol.schema import Field as F, adopt, message

__all__ = [
    "ABORT", "COMMIT", "LEADER_CHANGE", "SNAPSHOT_HEADER", "SNAPSHOT_FOOTER",
    "KRAFT_VERSION", "KRAFT_VOTERS", "UNKNOWN", "CONTROL_TYPE_NAMES", "CONTROL_TYPES",
    "LeaderChangeMessage", "SnapshotHeaderRecord", "SnapshotFooterRecord",
    "KRaftVersionRecord", "VotersRecord", "EndTransactionMarker", "control_key",
    "parse_control_key", "control_type_of", "encode_control_value", "decode_control_record",
    "encode_control_batch", "decode_control_batches",
]

ABORT, COMMIT, LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS = (
    range(7))
UNKNOWN = -1
CONTROL_TYPE_NAMES = {
    ABORT: "ABORT", COMMIT: "COMMIT", LEADER_CHANGE: "LEADER_CHANGE",
    SNAPSHOT_HEADER: "SNAPSHOT_HEADER", SNAPSHOT_FOOTER: "SNAPSHOT_FOOTER",
    KRAFT_VERSION: "KRAFT_VERSION", KRAFT_VOTERS: "KRAFT_VOTERS", UNKNOWN: "UNKNOWN",
}
_TYPE_BY_NAME = {name: type_id for type_id, name in CONTROL_TYPE_NAMES.items()}

CONTROL_KEY_VERSION = 0
_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")


def _control(name, valid, fields, flexible="0+"):
    cls = message(name, kind="control", valid=valid, flexible=flexible, fields=fields)
    adopt(cls, __name__)
    return cls


# ------------------------------------------------------------------------------ schemas

LeaderChangeMessage = _control("LeaderChangeMessage", "0-1", [
    F("Version", "int16"),
    F("LeaderId", "int32"),
    F("Voters", "[]Voter", fields=[
        F("VoterId", "int32"), F("VoterDirectoryId", "uuid", "1+")]),
    F("GrantingVoters", "[]Voter"),
])

SnapshotHeaderRecord = _control("SnapshotHeaderRecord", "0", [
    F("Version", "int16"), F("LastContainedLogTimestamp", "int64"),
])

SnapshotFooterRecord = _control("SnapshotFooterRecord", "0", [
    F("Version", "int16"),
])

KRaftVersionRecord = _control("KRaftVersionRecord", "0", [
    F("Version", "int16"), F("KRaftVersion", "int16"),
])

VotersRecord = _control("VotersRecord", "0", [
    F("Version", "int16"),
    F("Voters", "[]Voter", fields=[
        F("VoterId", "int32"),
        F("VoterDirectoryId", "uuid"),
        F("Endpoints", "[]Endpoint", fields=[
            F("Name", "string"), F("Host", "string"), F("Port", "uint16")]),
        F("KRaftVersionFeature", "KRaftVersionFeature", fields=[
            F("MinSupportedVersion", "int16"), F("MaxSupportedVersion", "int16")]),
    ]),
])

# The transaction marker of ABORT / COMMIT control records: a classic (non-flexible) struct.
EndTransactionMarker = _control("EndTransactionMarker", "0", [
    F("Version", "int16"), F("CoordinatorEpoch", "int32"),
], flexible="none")

# type id -> (class, version written)
CONTROL_TYPES = {
    ABORT: (EndTransactionMarker, 0),
    COMMIT: (EndTransactionMarker, 0),
    LEADER_CHANGE: (LeaderChangeMessage, 0),
    SNAPSHOT_HEADER: (SnapshotHeaderRecord, 0),
    SNAPSHOT_FOOTER: (SnapshotFooterRecord, 0),
    KRAFT_VERSION: (KRaftVersionRecord, 0),
    KRAFT_VOTERS: (VotersRecord, 0),
}
_TYPE_OF_CLASS = {cls: type_id for type_id, (cls, _) in CONTROL_TYPES.items()
                  if cls is not EndTransactionMarker}


# ------------------------------------------------------------------------------ keys


def control_key(type_id):
    """The 4-byte key of a control record of `type_id` (version 0)."""
    return _KEY.pack(CONTROL_KEY_VERSION, type_id)


def parse_control_key(key):
    """`key` bytes -> the control type id; UNKNOWN (-1) for a type this reader does not know.
    Fewer than 4 bytes or a negative key version raise `ProtocolError`; a newer key
    version is read as v0."""
    if key is None:
        raise ProtocolError("a control record has a null key", 0)
    if len(key) < _KEY.size:
        raise ProtocolError(
            f"a control record key needs {_KEY.size} bytes, found {len(key)}", 0)
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise ProtocolError(f"control record key version {version} (corrupt)", 0)
    return type_id if type_id in CONTROL_TYPES else UNKNOWN


# ------------------------------------------------------------------------------ values


def control_type_of(record):
    """The control type id of a record given to `encode_control_batch`: a control message,
    or a `(type, message)` pair (type as an id or a name such as "COMMIT")."""
    if isinstance(record, tuple):
        type_id, msg = record
        if isinstance(type_id, str):
            type_id = _TYPE_BY_NAME.get(type_id, UNKNOWN)
        cls = CONTROL_TYPES.get(type_id, (None,))[0]
        if cls is None or not isinstance(msg, cls):
            raise EncodeError(f"control type {record[0]!r} does not take a "
                              f"{type(msg).__name__}")
        return type_id, msg
    type_id = _TYPE_OF_CLASS.get(type(record))
    if type_id is None:
        if isinstance(record, EndTransactionMarker):
            raise EncodeError("an EndTransactionMarker needs its type: pass "
                              "(\"ABORT\", marker) or (\"COMMIT\", marker)")
        raise EncodeError(f"{type(record).__name__} is not a control record")
    return type_id, record


def encode_control_value(type_id, msg):
    """The value bytes of control record `type_id` holding `msg` (at the written version)."""
    cls, version = CONTROL_TYPES[type_id]
    return msg.encode(version)


def _decode_marker(value):
    if len(value) < _MARKER.size:
        raise ProtocolError(
            f"an end transaction marker needs {_MARKER.size} bytes, found {len(value)}", 0)
    version, epoch = _MARKER.unpack_from(value)
    if version < 0:
        raise ProtocolError(f"end transaction marker version {version} (corrupt)", 0)
    # A newer marker version is read as v0 (its leading fields are v0's), as Kafka does.
    return EndTransactionMarker(version=version, coordinator_epoch=epoch)


def decode_control_record(key, value):
    """Decode one control record: `(type_id, type_name, message)`.

    An unknown type gives `(-1, "UNKNOWN", None)`, to be skipped. LeaderChangeMessage is
    decoded at the version its own Version field names when this reader knows it, else at
    v0 (Kafka always reads v0); the other KRaft messages have only v0. Malformed keys or
    values raise `ProtocolError` (its position counts from the start of the key or value).
    """
    type_id = parse_control_key(key)
    if type_id == UNKNOWN:
        return UNKNOWN, "UNKNOWN", None
    name = CONTROL_TYPE_NAMES[type_id]
    if value is None:
        raise ProtocolError(f"{name} control record has a null value", 0)
    if type_id in (ABORT, COMMIT):
        return type_id, name, _decode_marker(value)
    cls, version = CONTROL_TYPES[type_id]
    if type_id == LEADER_CHANGE and len(value) >= 2:
        stated = struct.unpack_from(">h", value)[0]
        if 0 <= stated <= cls.valid_versions[1]:
            version = stated
    try:
        msg = codec.decode_message(cls.program(version), value)
    except ProtocolError as exc:
        raise ProtocolError(f"{name} control record: {exc.reason}", exc.position) from None
    msg._version = version
    return type_id, name, msg


# ------------------------------------------------------------------------------ batches


def encode_control_batch(records, *, base_offset=0, leader_epoch, timestamp,
                         producer_id=-1, producer_epoch=-1):
    """A control batch holding `records` (control messages, or `(type, message)` pairs).

    KRaft control batches (LeaderChange, snapshot header / footer, KRaft version, voters):
    magic 2, CREATE_TIME with every record at `timestamp`, no producer, not
    transactional, uncompressed, partitionLeaderEpoch = `leader_epoch`; a LeaderChange
    record needs `leader_epoch >= 0`. A transaction marker (ABORT / COMMIT) is written
    alone in a transactional control batch and needs `producer_id >= 0` and
    `producer_epoch >= 0`. Record i gets offset `base_offset + i`. Returns bytes."""
    if not records:
        raise ValueError("a control batch needs at least one record")
    typed = [control_type_of(r) for r in records]
    types = [t for t, _ in typed]
    markers = sum(t in (ABORT, COMMIT) for t in types)
    transactional = False
    if markers:
        if len(typed) != 1:
            raise EncodeError("a transaction marker batch holds exactly one record")
        if producer_id < 0 or producer_epoch < 0:
            raise EncodeError("a transaction marker needs a producer id and epoch")
        transactional = True
    elif producer_id != -1 or producer_epoch != -1:
        raise EncodeError("KRaft control batches carry no producer id or epoch")
    if LEADER_CHANGE in types and leader_epoch < 0:
        raise EncodeError(
            f"a LeaderChange control record needs a leader epoch >= 0, not {leader_epoch}")
    keys = [control_key(t) for t in types]
    values = [encode_control_value(t, m) for t, m in typed]
    return codec.encode_batch(values, keys=keys, timestamp=timestamp, base_offset=base_offset,
                              leader_epoch=leader_epoch, control=True,
                              transactional=transactional, producer_id=producer_id,
                              producer_epoch=producer_epoch)


def decode_control_batches(buffer, *, verify=True, skip_data=False):
    """Decode the control records of every batch in `buffer`: a list of
    `(offset, type_id, type_name, message)` in log order (message None for UNKNOWN types).
    A data batch raises `ProtocolError` at its position unless `skip_data` is set (decode
    those with `kraftcore.metadata.records.decode_batch`)."""
    out = []
    for batch in codec.decode_batches(buffer, verify=verify):
        if not batch.is_control:
            if skip_data:
                continue
            raise ProtocolError(
                f"the batch at offset {batch.base_offset} is not a control batch",
                batch.position)
        for r in batch.records:
            try:
                out.append((r.offset, *decode_control_record(r.key, r.value)))
            except ProtocolError as exc:
                raise ProtocolError(f"batch at byte {batch.position}, control record at "
                                    f"offset {r.offset}: {exc.reason}", exc.position) from None
    return out
