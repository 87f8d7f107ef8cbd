"""KRaft metadata records: Kafka's bytes for known values (kafka-facts §11.5), every record
type at every version round-trips on both kernels with identical bytes, batches readable
by kafka-python, and malformed values rejected with a position."""

import re
import pytest
from hypothesis import given, settings, strategies as st

from kraftcore import codec
from kraftcore.errors import CorruptRecordError, EncodeError, ProtocolError
from kraftcore.metadata import records as R
from kraftcore.raft import control as C
from kraftcore.types import METADATA_TOPIC_ID, ZERO_UUID, Uuid
from tests.protocol.strategies import message_at

KERNELS = {name: kernels.protocol for name, kernels in codec.implementations().items()}
TS = 1_700_000_000_000

CASES = [(cls, v) for cls in R.RECORD_TYPES.values()
         for v in range(cls.valid_versions[0], cls.valid_versions[1] + 1)]


def _id(case):
    return f"{case[0].__name__}-v{case[1]}"


# ------------------------------------------------------------------------------ registry


@pytest.mark.smoke
def test_every_record_type_of_kafka_facts_5_2():
    # 28 and 29 are Kafka 4.x's ClearElrRecord and UnregisterControllerRecord (the schemas
    # in Kafka 4.4.0's kafka-metadata jar, common/metadata/*.json)
    assert sorted(R.RECORD_TYPES) == [k for k in range(30) if k not in (6, 13, 16)]
    versions = {k: cls.valid_versions for k, cls in R.RECORD_TYPES.items()}
    # RegisterBrokerRecord v4 and BrokerRegistrationChangeRecord v3 (CordonedLogDirs) are
    # what Kafka 4.4 writes (tests/peers/test_kraftcore_reads_kafka.py)
    assert versions[0] == (0, 4) and versions[3] == (0, 2) and versions[5] == (0, 2)
    assert versions[17] == (0, 3)
    assert all(v == (0, 0) for k, v in versions.items() if k not in (0, 3, 5, 17))
    for api_key, cls in R.RECORD_TYPES.items():
        assert cls.api_key == api_key and cls.kind == "metadata"
        assert cls.flexible_versions == (0, None)
        assert cls.__module__ == "kraftcore.metadata.records"
        progs = R.TABLE[api_key]
        assert len(progs) == cls.valid_versions[1] + 1
        assert all(p[0] is cls for p in progs)
    assert [R.TABLE[k] for k in (6, 13, 16)] == [None, None, None]


@pytest.mark.smoke
def test_type_names():
    assert R.type_name(R.PartitionRecord) == "PARTITION_RECORD"
    assert R.type_name(R.NoOpRecord()) == "NO_OP_RECORD"
    assert R.type_name(17) == "BROKER_REGISTRATION_CHANGE_RECORD"
    assert R.type_name(R.ZkMigrationStateRecord) == "ZK_MIGRATION_STATE_RECORD"
    assert R.type_name(R.RemoveUserScramCredentialRecord) == "REMOVE_USER_SCRAM_CREDENTIAL_RECORD"
    assert R.TYPE_NAMES[27] == "REGISTER_CONTROLLER_RECORD"
    assert R.TYPE_NAMES[28] == "CLEAR_ELR_RECORD"
    assert R.TYPE_NAMES[29] == "UNREGISTER_CONTROLLER_RECORD"
    with pytest.raises(KeyError):
        R.type_name(6)


def test_schema_details_of_kafka_facts_5_2():
    p = R.PartitionRecord()
    assert (p.partition_id, p.leader, p.leader_epoch, p.partition_epoch) == (-1, -1, -1, -1)
    assert p.leader_recovery_state == 0 and p.eligible_leader_replicas is None
    tags = {op[0]: op[5] for op in R.PartitionRecord.program(2)[2]}
    assert tags == {"leader_recovery_state": 0, "eligible_leader_replicas": 1,
                    "last_known_elr": 2}
    pc = R.PartitionChangeRecord()
    assert (pc.partition_id, pc.leader, pc.isr, pc.leader_recovery_state) == (-1, -2, None, -1)
    tags = {op[0]: op[5] for op in R.PartitionChangeRecord.program(2)[2]}
    assert tags == {"isr": 0, "leader": 1, "replicas": 2, "removing_replicas": 3,
                    "adding_replicas": 4, "leader_recovery_state": 5,
                    "eligible_leader_replicas": 6, "last_known_elr": 7, "directories": 8}
    assert "directories" not in {op[0] for op in R.PartitionChangeRecord.program(0)[2]}
    assert R.RegisterBrokerRecord().fenced is True
    assert {op[0]: op[5] for op in R.RegisterBrokerRecord.program(3)[2]} == {"log_dirs": 0}
    assert R.RegisterBrokerRecord.program(2)[2] == ()
    assert {op[0]: op[5] for op in R.BrokerRegistrationChangeRecord.program(2)[2]} == {
        "fenced": 0, "in_controlled_shutdown": 1, "log_dirs": 2}
    assert R.ProducerIdsRecord().broker_epoch == -1
    assert R.BeginTransactionRecord().name is None


# ------------------------------------------------------------------------------ golden bytes

GOLDEN = [
    (R.NoOpRecord(), "01140000"),
    (R.TopicRecord(name="foo", topic_id=METADATA_TOPIC_ID),
     "01020004666f6f" "00000000000000000000000000000001" "00"),
    (R.FeatureLevelRecord(name="metadata.version", feature_level=22),
     "010c0011" + b"metadata.version".hex() + "0016" "00"),
]


@pytest.mark.smoke
@pytest.mark.parametrize("record,expected", GOLDEN, ids=lambda x: type(x).__name__
                         if not isinstance(x, str) else "hex")
def test_golden_values_kafka_facts_11_5(impl, record, expected):
    data = bytes.fromhex(expected)
    assert impl.protocol.encode_metadata_values([record], [0], R.TABLE) == [data]
    assert impl.protocol.decode_metadata_values([data], R.TABLE) == [(record, 0)]


@pytest.mark.smoke
def test_bulk_api_uses_the_active_kernel():
    records = [r for r, _ in GOLDEN]
    values = R.encode_values(records)
    assert values == [bytes.fromhex(h) for _, h in GOLDEN]
    assert R.decode_values(values) == [(r, 0) for r in records]
    assert R.encode_values(records, 0) == values
    assert R.encode_values(records, [0, 0, 0]) == values


def test_default_version_is_the_highest():
    pc = R.PartitionChangeRecord(partition_id=3, topic_id=METADATA_TOPIC_ID)
    [value] = R.encode_values([pc])
    assert value[:3] == b"\x01\x05\x02"
    [(back, version)] = R.decode_values([value])
    assert version == 2 and back == pc and back.decoded_version is None


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("case", CASES, ids=_id)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_type_and_version_round_trips_on_both_kernels(case, data):
    cls, version = case
    record = data.draw(message_at(cls, version))
    encoded = {name: k.encode_metadata_values([record], [version], R.TABLE)
               for name, k in KERNELS.items()}
    assert len({tuple(v) for v in encoded.values()}) == 1, encoded
    [value] = encoded["py"]
    assert value[:1] == b"\x01"
    for k in KERNELS.values():
        [(back, back_version)] = k.decode_metadata_values([value], R.TABLE)
        assert back_version == version
        assert type(back) is cls and back == record
        assert k.encode_metadata_values([back], [version], R.TABLE) == [value]


@pytest.mark.smoke
def test_mixed_bulk_round_trip(impl):
    rng_ids = [Uuid(bytes([i] * 16)) for i in range(1, 4)]
    records = [
        R.RegisterBrokerRecord(broker_id=1, incarnation_id=rng_ids[0], broker_epoch=10,
                               end_points=[R.RegisterBrokerRecord.BrokerEndpoint(
                                   name="PLAINTEXT", host="h", port=9092)],
                               rack=None, log_dirs=rng_ids[1:]),
        R.PartitionRecord(partition_id=0, topic_id=rng_ids[2], replicas=[1, 2, 3], isr=[1, 2],
                          leader=1, leader_epoch=0, partition_epoch=0,
                          directories=rng_ids, eligible_leader_replicas=[3]),
        R.PartitionChangeRecord(partition_id=0, topic_id=rng_ids[2], isr=[1]),
        R.ConfigRecord(resource_type=2, resource_name="t", name="retention.ms", value=None),
        R.ClientQuotaRecord(entity=[R.ClientQuotaRecord.EntityData(entity_type="user",
                                                                    entity_name=None)],
                            key="producer_byte_rate", value=1024.5, remove=False),
        R.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=10, fenced=-1),
        R.AbortTransactionRecord(reason="too big"),
    ]
    versions = [3, 2, 1, 0, 0, 1, 0]
    values = impl.protocol.encode_metadata_values(records, versions, R.TABLE)
    assert impl.protocol.decode_metadata_values(values, R.TABLE) == list(zip(records, versions))


@pytest.mark.smoke
def test_partition_change_defaults_survive_round_trips(impl):
    # Leader -2 ("no change") and a null ISR ("unchanged") are the defaults: not written
    pc = R.PartitionChangeRecord(partition_id=4, topic_id=METADATA_TOPIC_ID)
    for version in (0, 1, 2):
        [value] = impl.protocol.encode_metadata_values([pc], [version], R.TABLE)
        assert value == bytes([1, 5, version]) + bytes.fromhex("00000004") + bytes(
            METADATA_TOPIC_ID) + b"\x00"
        [(back, _)] = impl.protocol.decode_metadata_values([value], R.TABLE)
        assert back.leader == -2 and back.isr is None and back.directories is None
        assert back.leader_recovery_state == -1
    # -1 ("no leader") and an empty ISR are changes, and written
    pc = R.PartitionChangeRecord(partition_id=4, topic_id=METADATA_TOPIC_ID, leader=-1, isr=[])
    [value] = impl.protocol.encode_metadata_values([pc], [0], R.TABLE)
    assert value.endswith(bytes.fromhex("02" "0001" "01" "0104" "ffffffff"))
    [(back, _)] = impl.protocol.decode_metadata_values([value], R.TABLE)
    assert back.leader == -1 and back.isr == []


def test_version_limits_on_encode(impl):
    with pytest.raises(EncodeError, match="directories"):
        impl.protocol.encode_metadata_values(
            [R.PartitionChangeRecord(directories=[ZERO_UUID])], [0], R.TABLE)
    with pytest.raises(EncodeError, match="log_dirs"):
        impl.protocol.encode_metadata_values(
            [R.RegisterBrokerRecord(log_dirs=[ZERO_UUID])], [2], R.TABLE)
    with pytest.raises(EncodeError):
        impl.protocol.encode_metadata_values([C.SnapshotFooterRecord()], [0], R.TABLE)
    with pytest.raises(EncodeError):
        R.encode_values([C.SnapshotFooterRecord()])


# ------------------------------------------------------------------------------ malformed

_NOOP = bytes.fromhex("01140000")
_TOPIC = bytes.fromhex(GOLDEN[1][1])
_RICH = R.encode_values([R.PartitionRecord(
    partition_id=7, topic_id=METADATA_TOPIC_ID, replicas=[1, 2, 3], isr=[1, 2, 3],
    leader=1, leader_recovery_state=1, directories=[ZERO_UUID] * 3,
    eligible_leader_replicas=[2], last_known_elr=None)])[0]


def _rejects(impl, values, position=None, match=None):
    with pytest.raises(ProtocolError, match=match) as info:
        impl.protocol.decode_metadata_values(values, R.TABLE)
    assert info.value.position is not None
    if position is not None:
        assert info.value.position == position
    return info.value


@pytest.mark.smoke
@pytest.mark.parametrize("value,position,match", [
    (b"\x00\x14\x00\x00", 0, "frame version 0"),
    (b"\x02\x14\x00\x00", 0, "frame version 2"),
    (b"\x01\x06\x00\x00", 0, "unknown metadata record type 6"),
    (b"\x01\x0d\x00\x00", 0, "unknown metadata record type 13"),
    (b"\x01\x63\x00\x00", 0, "unknown metadata record type 99"),
    (_NOOP + b"\x00", 4, "1 unexpected bytes"),
    (_TOPIC + b"garbage", len(_TOPIC), "7 unexpected bytes"),
    (b"", 0, "truncated varint"),
    (b"\x81", 0, "truncated varint"),
    (b"\x01\xff\xff\xff\xff\x7f\x00", 1, "bad varint"),
    (b"\x01\x80\x80\x02\x00\x00", 0, "above 32767"),
    (b"\x01\x14\x80\x80\x02\x00", 0, "above 32767"),
    (b"\x01\x14\x00\x01\x05\x80", None, "truncated varint"),
    (b"\x01\x14\x00\x01\x05\x03ab", None, "truncated tagged field"),
])
def test_malformed_values_raise_with_a_position(impl, value, position, match):
    _rejects(impl, [value], position, match)


# Versions past a record type's highest: a clear error naming the record, on both kernels
# (the error path once indexed the version table out of bounds in the native kernel).
UNSUPPORTED = [("decode", b"\x01\x14\x01\x00"), ("decode", b"\x01\x03\x03" + _RICH[3:]),
               ("decode", b"\x01\x05\x7f\x00"), ("encode", 3), ("encode", 7)]


@pytest.mark.parametrize("case", UNSUPPORTED, ids=lambda c: f"{c[0]}-{c[1]!r}"[:24])
def test_unsupported_record_versions(impl, case):
    mode, arg = case
    if mode == "decode":
        with pytest.raises(ProtocolError, match="unsupported version") as info:
            impl.protocol.decode_metadata_values([arg], R.TABLE)
        assert info.value.position == 0
        assert re.search(r"\((PartitionRecord|NoOpRecord|PartitionChangeRecord)\)",
                         info.value.reason), info.value.reason
    else:
        with pytest.raises(EncodeError, match=r"unsupported version .*\(PartitionRecord\)"):
            impl.protocol.encode_metadata_values([R.PartitionRecord()], [arg],
                                                 R.TABLE)


@pytest.mark.smoke
def test_error_names_the_value_index(impl):
    err = _rejects(impl, [_NOOP, _NOOP, b"\x00"], 0)
    assert "metadata record 2" in str(err)
    err = _rejects(impl, [_NOOP, None], 0)
    assert "metadata record 1" in str(err)


@pytest.mark.parametrize("value", [_TOPIC, _RICH, bytes.fromhex(GOLDEN[2][1])],
                         ids=["topic", "partition", "feature"])
def test_truncation_at_every_byte(impl, value):
    for cut in range(len(value)):
        _rejects(impl, [value[:cut]])


def test_bad_lengths_inside_the_body(impl):
    # a compact string claiming more bytes than remain; an array claiming too many ints
    _rejects(impl, [b"\x01\x02\x00\x7f" + _TOPIC[7:]], 4, "needs 126 bytes")
    bad = bytearray(_RICH)
    bad[3 + 4 + 16] = 0x7F  # replicas: 126 elements of 4 bytes, impossible
    _rejects(impl, [bytes(bad)], None, "claims 126 elements")
    bad = bytearray(_TOPIC)
    bad[4:7] = b"\xff\xfe\xfd"  # not UTF-8
    _rejects(impl, [bytes(bad)], 4, "UTF-8")


# ------------------------------------------------------------------------------ batches

from kafka.record import default_records as kafka_records

_BATCH_RECORDS = [
    R.FeatureLevelRecord(name="metadata.version", feature_level=22),
    R.TopicRecord(name="foo", topic_id=METADATA_TOPIC_ID),
    R.PartitionRecord(partition_id=0, topic_id=METADATA_TOPIC_ID, replicas=[1, 2, 3],
                      isr=[1, 2, 3], leader=1, leader_epoch=0, partition_epoch=0),
    R.PartitionChangeRecord(partition_id=0, topic_id=METADATA_TOPIC_ID, leader=2),
    R.NoOpRecord(),
]


@pytest.mark.smoke
def test_kafka_python_reads_metadata_batches():
    versions = [0, 0, 0, 0, 0]
    raw = R.encode_batch(_BATCH_RECORDS, base_offset=100, leader_epoch=7, timestamp=TS,
                         versions=versions)
    batch = kafka_records.DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    assert (batch.base_offset, batch.leader_epoch, batch.magic) == (100, 7, 2)
    assert (batch.compression_type, batch.timestamp_type) == (0, 0)
    assert not batch.is_control_batch and not batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert (batch.first_timestamp, batch.max_timestamp) == (TS, TS)
    records = list(batch)
    assert [r.offset for r in records] == list(range(100, 105))
    assert all(r.key is None and list(r.headers) == [] and r.timestamp == TS for r in records)
    assert [bytes(r.value) for r in records] == R.encode_values(_BATCH_RECORDS, versions)
    assert R.decode_batch(raw) == [(100 + i, rec, 0) for i, rec in enumerate(_BATCH_RECORDS)]


@pytest.mark.smoke
def test_decode_batch_many_batches_and_control_batches():
    first = R.encode_batch(_BATCH_RECORDS[:2], leader_epoch=1, timestamp=TS)
    control = C.encode_control_batch([C.KRaftVersionRecord(k_raft_version=1)], base_offset=2,
                                     leader_epoch=1, timestamp=TS)
    second = R.encode_batch(_BATCH_RECORDS[2:], base_offset=3, leader_epoch=1, timestamp=TS)
    log = first + control + second
    with pytest.raises(ProtocolError, match="control batch") as info:
        R.decode_batch(log)
    assert info.value.position == len(first)
    got = R.decode_batch(log, skip_control=True)
    assert [(o, r) for o, r, _ in got] == [(0, _BATCH_RECORDS[0]), (1, _BATCH_RECORDS[1])] + [
        (3 + i, r) for i, r in enumerate(_BATCH_RECORDS[2:])]
    assert [v for _, _, v in got] == [0, 0, 2, 2, 0]
    assert C.decode_control_batches(log, skip_data=True) == [
        (2, C.KRAFT_VERSION, "KRAFT_VERSION", C.KRaftVersionRecord(k_raft_version=1))]


def test_decode_batch_reports_bad_values_and_bad_crc():
    raw = codec.encode_batch([_NOOP, b"\x01\x06\x00\x00"], timestamp=TS, leader_epoch=0)
    with pytest.raises(ProtocolError, match="metadata record 1: unknown metadata record type"):
        R.decode_batch(raw)
    good = R.encode_batch([R.NoOpRecord()], leader_epoch=0, timestamp=TS)
    bad = bytearray(good)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        R.decode_batch(bytes(bad))
    with pytest.raises(ValueError):
        R.encode_batch([], leader_epoch=0, timestamp=TS)


# ------------------------------------------------------------------------------ versions


@pytest.mark.smoke
def test_records_version_for_metadata_versions():
    v = R.records_version_for
    assert v("3.3-IV0")[R.RegisterBrokerRecord] == 0
    assert v("3.3-IV3")[R.RegisterBrokerRecord] == 1
    assert v("3.4-IV0")[R.RegisterBrokerRecord] == 2
    assert v("3.7-IV2")[R.RegisterBrokerRecord] == 3
    assert v(16)[R.PartitionRecord] == 0 and v(17)[R.PartitionRecord] == 1
    assert v("4.0-IV0")[R.PartitionChangeRecord] == 1
    assert v("4.0-IV1")[R.PartitionChangeRecord] == 2
    assert v("3.3-IV0")[R.NoOpRecord] is None and v("3.3-IV1")[R.NoOpRecord] == 0
    assert v("3.3-IV1")[R.BrokerRegistrationChangeRecord] is None
    assert v("3.3-IV1")[R.FenceBrokerRecord] == 0
    assert v("3.3-IV2")[R.BrokerRegistrationChangeRecord] == 0
    assert v("3.3-IV2")[R.UnfenceBrokerRecord] is None
    with pytest.raises(ValueError):
        v(0)


def test_to_json_in_kafkas_style():
    pr = R.PartitionRecord(partition_id=1, topic_id=METADATA_TOPIC_ID, replicas=[1])
    out = pr.to_json(0)
    assert out["partitionId"] == 1 and out["topicId"] == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert "directories" not in out and "eligibleLeaderReplicas" not in out
    assert "directories" in pr.to_json(1)
