"""KRaft control records: Kafka's bytes (kafka-facts §11.4, §11.6), the control key rules
(§2.7), control batches readable by kafka-python, and round trips on both kernels."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore import codec
from kraftcore.errors import EncodeError, ProtocolError
from kraftcore.metadata import records as R
from kraftcore.raft import control as C
from kraftcore.types import Uuid
from tests.protocol.strategies import message_at

KERNELS = {name: kernels.protocol for name, kernels in codec.implementations().items()}
TS = 1_700_000_000_000

LC = C.LeaderChangeMessage
VR = C.VotersRecord
LEADER_CHANGE = LC(version=0, leader_id=1, voters=[LC.Voter(voter_id=1)],
                   granting_voters=[LC.Voter(voter_id=1)])
VOTERS = VR(voters=[VR.Voter(
    voter_id=1, voter_directory_id=Uuid(bytes(range(16))),
    endpoints=[VR.Endpoint(name="CONTROLLER", host="localhost", port=9093)],
    k_raft_version_feature=VR.KRaftVersionFeature(min_supported_version=0,
                                                  max_supported_version=1))])

GOLDEN_VALUES = [
    (C.LEADER_CHANGE, LEADER_CHANGE, "0000 00000001 02 00000001 00 02 00000001 00 00"),
    (C.SNAPSHOT_HEADER, C.SnapshotHeaderRecord(last_contained_log_timestamp=TS),
     "0000 0000018bcfe56800 00"),
    (C.SNAPSHOT_FOOTER, C.SnapshotFooterRecord(), "0000 00"),
    (C.KRAFT_VERSION, C.KRaftVersionRecord(k_raft_version=1), "0000 0001 00"),
    (C.KRAFT_VOTERS, VOTERS,
     "0000 02 00000001 000102030405060708090a0b0c0d0e0f 02 0b434f4e54524f4c4c4552 "
     "0a6c6f63616c686f7374 2385 00 0000 0001 00 00 00"),
]
LEADER_CHANGE_BATCH = (
    "00000000000000000000004f00000001021154eaf90020000000000000018bcfe568000000018bcfe56800"
    "ffffffffffffffffffffffffffff000000013a0000000800000002260000000000010200000001000200"
    "000001000000")


@pytest.mark.smoke
@pytest.mark.parametrize("type_id,msg,hexed", GOLDEN_VALUES,
                         ids=[C.CONTROL_TYPE_NAMES[t] for t, _, _ in GOLDEN_VALUES])
def test_golden_values_kafka_facts_11_4_and_11_6(impl, type_id, msg, hexed):
    data = bytes.fromhex(hexed.replace(" ", ""))
    prog = type(msg).program(0)
    assert impl.protocol.encode_struct(prog, msg) == data
    assert impl.protocol.decode_message(prog, data) == msg
    assert C.encode_control_value(type_id, msg) == data
    got = C.decode_control_record(C.control_key(type_id), data)
    assert got == (type_id, C.CONTROL_TYPE_NAMES[type_id], msg)


@pytest.mark.smoke
def test_leader_change_batch_kafka_facts_11_4(impl):
    # epoch 1, base offset 0, baseTimestamp = maxTimestamp = 1700000000000, CRC 0x1154EAF9
    expected = bytes.fromhex(LEADER_CHANGE_BATCH)
    assert C.encode_control_batch([LEADER_CHANGE], leader_epoch=1, timestamp=TS) == expected
    key = C.control_key(C.LEADER_CHANGE)
    value = C.encode_control_value(C.LEADER_CHANGE, LEADER_CHANGE)
    assert impl.records.encode_batch([value], keys=[key], timestamp=TS, leader_epoch=1,
                                     control=True) == expected
    assert struct.unpack_from(">I", expected, 17)[0] == 0x1154EAF9
    assert C.decode_control_batches(expected) == [
        (0, C.LEADER_CHANGE, "LEADER_CHANGE", LEADER_CHANGE)]


# ------------------------------------------------------------------------------ keys


@pytest.mark.smoke
def test_control_key_rules():
    assert C.control_key(C.KRAFT_VOTERS) == b"\x00\x00\x00\x06"
    assert C.parse_control_key(b"\x00\x00\x00\x03") == C.SNAPSHOT_HEADER
    assert C.parse_control_key(b"\x00\x00\x00\x02extra") == C.LEADER_CHANGE  # extra ignored
    assert C.parse_control_key(b"\x00\x07\x00\x04") == C.SNAPSHOT_FOOTER  # newer: as v0
    assert C.parse_control_key(b"\x00\x00\x00\x63") == C.UNKNOWN
    assert C.parse_control_key(b"\x00\x00\xff\xff") == C.UNKNOWN
    for bad in (b"", b"\x00\x00\x00", None):
        with pytest.raises(ProtocolError):
            C.parse_control_key(bad)
    with pytest.raises(ProtocolError, match="corrupt"):
        C.parse_control_key(b"\xff\xff\x00\x02")
    assert C.decode_control_record(b"\x00\x00\x00\x63", b"whatever") == (-1, "UNKNOWN", None)


def test_transaction_markers():
    value = struct.pack(">hi", 0, 17)
    for type_id, name in ((C.ABORT, "ABORT"), (C.COMMIT, "COMMIT")):
        assert C.decode_control_record(C.control_key(type_id), value) == (
            type_id, name, C.EndTransactionMarker(coordinator_epoch=17))
    assert C.EndTransactionMarker(coordinator_epoch=17).encode(0) == value
    # a newer marker version is read as v0; a negative one is corrupt; 6 bytes at least
    assert C.decode_control_record(b"\x00\x00\x00\x01", struct.pack(">hi", 1, 3) + b"\x00")[
        2].coordinator_epoch == 3
    with pytest.raises(ProtocolError, match="corrupt"):
        C.decode_control_record(b"\x00\x00\x00\x01", struct.pack(">hi", -1, 3))
    with pytest.raises(ProtocolError, match="6 bytes"):
        C.decode_control_record(b"\x00\x00\x00\x00", b"\x00\x00\x00")
    batch = C.encode_control_batch([("COMMIT", C.EndTransactionMarker(coordinator_epoch=5))],
                                   base_offset=9, leader_epoch=2, timestamp=TS,
                                   producer_id=1000, producer_epoch=0)
    [b] = codec.decode_batches(batch)
    assert b.is_control and b.is_transactional and b.producer_id == 1000
    assert C.decode_control_batches(batch) == [
        (9, C.COMMIT, "COMMIT", C.EndTransactionMarker(coordinator_epoch=5))]
    with pytest.raises(EncodeError, match="needs its type"):
        C.encode_control_batch([C.EndTransactionMarker()], leader_epoch=0, timestamp=TS)
    with pytest.raises(EncodeError, match="producer"):
        C.encode_control_batch([(C.ABORT, C.EndTransactionMarker())], leader_epoch=0,
                               timestamp=TS)
    with pytest.raises(EncodeError, match="exactly one"):
        C.encode_control_batch([(C.ABORT, C.EndTransactionMarker()), LEADER_CHANGE],
                               leader_epoch=0, timestamp=TS, producer_id=1, producer_epoch=0)


# ------------------------------------------------------------------------------ values


def test_leader_change_versions():
    v1 = LC(version=1, leader_id=2,
            voters=[LC.Voter(voter_id=2, voter_directory_id=Uuid(bytes(range(16))))])
    data = v1.encode(1)
    assert C.decode_control_record(C.control_key(C.LEADER_CHANGE), data)[2] == v1
    # written at v0 in batches, as Kafka does: a directory id cannot be carried
    with pytest.raises(EncodeError, match="voter_directory_id"):
        C.encode_control_batch([v1], leader_epoch=0, timestamp=TS)
    # an unknown Version field is read with the v0 layout
    v0 = LC(version=9, leader_id=3)
    assert C.decode_control_record(b"\x00\x00\x00\x02", v0.encode(0))[2] == v0


@pytest.mark.smoke
def test_malformed_control_values():
    for type_id, msg, hexed in GOLDEN_VALUES:
        data = bytes.fromhex(hexed.replace(" ", ""))
        key = C.control_key(type_id)
        for cut in range(len(data)):
            with pytest.raises(ProtocolError) as info:
                C.decode_control_record(key, data[:cut])
            assert info.value.position is not None
        with pytest.raises(ProtocolError, match="unexpected bytes"):
            C.decode_control_record(key, data + b"\x00")
        with pytest.raises(ProtocolError, match="null value"):
            C.decode_control_record(key, None)


@pytest.mark.parametrize("cls", [LC, C.SnapshotHeaderRecord, C.SnapshotFooterRecord,
                                 C.KRaftVersionRecord, VR])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_control_messages_round_trip_on_both_kernels(cls, data):
    version = data.draw(st.integers(*cls.valid_versions))
    msg = data.draw(message_at(cls, version))
    prog = cls.program(version)
    encoded = {name: k.encode_struct(prog, msg) for name, k in KERNELS.items()}
    assert len(set(encoded.values())) == 1
    for k in KERNELS.values():
        assert k.decode_message(prog, encoded["py"]) == msg


# ------------------------------------------------------------------------------ batches

from kafka.record import default_records as kafka_records


@pytest.mark.smoke
def test_kafka_python_reads_control_batches():
    records = [C.SnapshotHeaderRecord(last_contained_log_timestamp=TS),
               C.KRaftVersionRecord(k_raft_version=1), VOTERS]
    raw = C.encode_control_batch(records, base_offset=50, leader_epoch=3, timestamp=TS)
    batch = kafka_records.DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    assert batch.is_control_batch and not batch.is_transactional
    assert (batch.base_offset, batch.leader_epoch, batch.producer_id) == (50, 3, -1)
    got = list(batch)
    assert [bytes(r.key) for r in got] == [b"\x00\x00\x00\x03", b"\x00\x00\x00\x05",
                                           b"\x00\x00\x00\x06"]
    assert [bytes(r.value) for r in got] == [bytes.fromhex(h.replace(" ", ""))
                                             for _, _, h in GOLDEN_VALUES[1:2]] + [
        r.encode(0) for r in records[1:]]
    assert [(o, t, m) for o, t, _, m in C.decode_control_batches(raw)] == [
        (50, C.SNAPSHOT_HEADER, records[0]), (51, C.KRAFT_VERSION, records[1]),
        (52, C.KRAFT_VOTERS, VOTERS)]


def test_control_batch_rules():
    with pytest.raises(EncodeError, match="leader epoch"):
        C.encode_control_batch([LEADER_CHANGE], leader_epoch=-1, timestamp=TS)
    # other control records may go in a batch without a valid epoch (e.g. snapshots)
    C.encode_control_batch([C.SnapshotFooterRecord()], leader_epoch=-1, timestamp=TS)
    with pytest.raises(EncodeError, match="not a control record"):
        C.encode_control_batch([R.NoOpRecord()], leader_epoch=0, timestamp=TS)
    with pytest.raises(EncodeError, match="producer"):
        C.encode_control_batch([LEADER_CHANGE], leader_epoch=0, timestamp=TS, producer_id=5)
    with pytest.raises(ValueError):
        C.encode_control_batch([], leader_epoch=0, timestamp=TS)
    data = R.encode_batch([R.NoOpRecord()], leader_epoch=0, timestamp=TS)
    with pytest.raises(ProtocolError, match="not a control batch"):
        C.decode_control_batches(data)
    assert C.decode_control_batches(data, skip_data=True) == []
    # an unknown control type in a batch decodes as UNKNOWN and is kept in place
    raw = codec.encode_batch([b"?"], keys=[b"\x00\x00\x00\x2a"], timestamp=TS, control=True)
    assert C.decode_control_batches(raw) == [(0, -1, "UNKNOWN", None)]
    raw = codec.encode_batch([b"\x00"], keys=[b"\x00\x00\x00\x04"], timestamp=TS, control=True,
                             base_offset=8)
    with pytest.raises(ProtocolError, match="control record at offset 8"):
        C.decode_control_batches(raw)
