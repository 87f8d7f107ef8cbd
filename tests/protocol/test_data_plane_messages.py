"""The data-plane APIs of kraftcore.protocol.messages (Produce, ListOffsets,
OffsetForLeaderEpoch, FindCoordinator, InitProducerId, AllocateProducerIds) and Fetch v18:
their registry entries, round trips at every version with every field the version carries
set to a non-default value, the version rules, and checks against kafka-python 3's classes
(generated from Kafka's JSON schemas): requests kafka-python encodes decode with kraftcore,
and kraftcore's bytes decode with kafka-python and match its own encoding byte for byte."""

import itertools
import uuid

import pytest
from kafka.protocol.consumer import fetch as kp_fetch
from kafka.protocol.consumer import offsets as kp_offsets
from kafka.protocol.metadata import find_coordinator as kp_find_coordinator
from kafka.protocol.producer import produce as kp_produce
from kafka.protocol.producer import transaction as kp_transaction

from kraftcore import codec
from kraftcore.errors import EncodeError
from kraftcore.protocol import apis, framing
from kraftcore.protocol import messages as M
from kraftcore.protocol.schema import in_range
from kraftcore.types import Uuid

from .test_messages_peer import from_peer, to_peer

# kafka-python's classes (K-prefixed: kraftcore's have the same names)
KFetchRequest = kp_fetch.FetchRequest
KProduceRequest, KProduceResponse = kp_produce.ProduceRequest, kp_produce.ProduceResponse
KListOffsetsRequest = kp_offsets.ListOffsetsRequest
KListOffsetsResponse = kp_offsets.ListOffsetsResponse
KOffsetForLeaderEpochRequest = kp_offsets.OffsetForLeaderEpochRequest
KOffsetForLeaderEpochResponse = kp_offsets.OffsetForLeaderEpochResponse
KFindCoordinatorRequest = kp_find_coordinator.FindCoordinatorRequest
KFindCoordinatorResponse = kp_find_coordinator.FindCoordinatorResponse
KInitProducerIdRequest = kp_transaction.InitProducerIdRequest
KInitProducerIdResponse = kp_transaction.InitProducerIdResponse

INT64_MAX = (1 << 63) - 1
KERNELS = {name: kernels.protocol for name, kernels in codec.implementations().items()}

# key -> (name, versions, first flexible version)
DATA_PLANE = {
    0: ("Produce", (0, 13), 9), 1: ("Fetch", (0, 18), 12), 2: ("ListOffsets", (0, 11), 6),
    10: ("FindCoordinator", (0, 6), 3), 22: ("InitProducerId", (0, 5), 2),
    23: ("OffsetForLeaderEpoch", (0, 4), 4), 67: ("AllocateProducerIds", (0, 0), 0),
}
NEW = [cls for key, (name, _, _) in DATA_PLANE.items() if key != 1
       for cls in (getattr(M, name + "Request"), getattr(M, name + "Response"))]
CASES = [(cls, v) for cls in NEW
         for v in range(cls.valid_versions[0], cls.valid_versions[1] + 1)]

PEERS = {
    M.ProduceRequest: KProduceRequest, M.ProduceResponse: KProduceResponse,
    M.ListOffsetsRequest: KListOffsetsRequest, M.ListOffsetsResponse: KListOffsetsResponse,
    M.OffsetForLeaderEpochRequest: KOffsetForLeaderEpochRequest,
    M.OffsetForLeaderEpochResponse: KOffsetForLeaderEpochResponse,
    M.FindCoordinatorRequest: KFindCoordinatorRequest,
    M.FindCoordinatorResponse: KFindCoordinatorResponse,
    M.InitProducerIdRequest: KInitProducerIdRequest,
    M.InitProducerIdResponse: KInitProducerIdResponse,
}


def _overlap(cls):
    peer = PEERS[cls]
    assert peer.API_KEY == cls.api_key
    low, high = cls.valid_versions
    return range(max(low, peer.min_version), min(high, peer.max_version) + 1)


PEER_CASES = [(cls, v) for cls in PEERS for v in _overlap(cls)]


def _case_id(case):
    return f"{case[0].__name__}-v{case[1]}"


# ------------------------------------------------------------------------------ values


def filled(cls, version, seed=1):
    """An instance of `cls` in which every field `version` carries holds a value other than
    its default (distinct per field), every struct array two elements; the fields the version
    lacks keep their defaults."""
    counter = itertools.count(seed)
    return _fill(cls, version, counter)


def _fill(cls, version, counter):
    values = {}
    for f in cls._fields:
        if not in_range(version, f.versions):
            continue
        if f.struct is not None:
            if f.is_array:
                values[f.attr] = [_fill(f.struct, version, counter) for _ in range(2)]
            else:
                values[f.attr] = _fill(f.struct, version, counter)
        elif f.is_array:
            values[f.attr] = [_scalar(f.element, None, counter) for _ in range(3)]
        else:
            values[f.attr] = _scalar(f.type, f.default_value(), counter)
    return cls(**values)


def _scalar(kind, default, counter):
    n = next(counter)
    if kind == "bool":
        return not default
    if kind in ("int8", "int16", "int32", "int64"):
        value = n % 100 + 2
        return value + 1 if value == default else value
    if kind == "string":
        return f"s{n}"
    if kind == "uuid":
        return Uuid(bytes([n % 255 + 1]) * 16)
    if kind in ("bytes", "records"):
        return bytes([n % 256]) * 7
    raise AssertionError(kind)


def roundtrip(cls, version, obj):
    """Encode with every kernel (same bytes), decode with every kernel (== obj), re-encode
    (same bytes). Returns the bytes."""
    prog = cls.program(version)
    encoded = {name: k.encode_struct(prog, obj) for name, k in KERNELS.items()}
    data = next(iter(encoded.values()))
    assert all(b == data for b in encoded.values())
    for name, k in KERNELS.items():
        back = k.decode_message(prog, data)
        assert back == obj, name
        assert k.encode_struct(prog, back) == data, name
    assert cls.decode(data, version) == obj and obj.encode(version) == data
    return data


# ------------------------------------------------------------------------------ registry


@pytest.mark.smoke
def test_registry_lists_the_data_plane_apis():
    for key, (name, valid, flexible_from) in DATA_PLANE.items():
        api = apis.api(key)
        assert api is apis.API_BY_NAME[name]
        assert api.request is getattr(M, name + "Request")
        assert api.response is getattr(M, name + "Response")
        for cls in (api.request, api.response):
            assert cls in M.REQUESTS + M.RESPONSES
            assert cls.api_key == key and cls.valid_versions == valid
            assert cls.flexible_versions == (flexible_from, None)
            assert cls.__module__ == M.__name__


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_roundtrip_non_default_values_at_every_version(case):
    cls, version = case
    obj = filled(cls, version)
    assert obj != cls() or not any(in_range(version, f.versions) for f in cls._fields)
    data = roundtrip(cls, version, obj)
    assert data != cls().encode(version)
    if cls.kind == "request":
        frame = framing.encode_request(obj, version, correlation_id=5, client_id="c")
        request = framing.decode_request(frame[4:])
        assert request.body == obj and request.trailing_bytes == 0
    else:
        frame = framing.encode_response(obj, version, correlation_id=5)
        assert framing.decode_response(frame[4:], cls.api_key, version) == (5, obj)


@pytest.mark.parametrize("version", range(19))
def test_fetch_request_roundtrips_at_every_version_including_18(version):
    cls = M.FetchRequest
    obj = filled(cls, version)
    roundtrip(cls, version, obj)
    carried = obj.topics[0].partitions[0].high_watermark != INT64_MAX
    assert carried == (version >= 18)


def test_fetch_v18_high_watermark_is_tag_1_and_dropped_before_18():
    cls = M.FetchRequest
    assert cls.FetchPartition().high_watermark == INT64_MAX
    part = cls.FetchPartition(partition=0, fetch_offset=10, partition_max_bytes=1 << 20,
                              high_watermark=42)
    obj = cls(max_wait_ms=500, topics=[cls.FetchTopic(topic_id=Uuid(b"\x01" * 16),
                                                      partitions=[part])])
    v18 = obj.encode(18)
    # the partition's tagged fields end the body's partition: one tag, tag 1, 8 bytes, 42
    assert bytes.fromhex("01" "01" "08" "000000000000002a") in v18
    assert cls.decode(v18, 18).topics[0].partitions[0].high_watermark == 42
    # ignorable: v17 drops it, and a default partition writes no tag at v18
    back = cls.decode(obj.encode(17), 17)
    assert back.topics[0].partitions[0].high_watermark == INT64_MAX
    default = obj.replace(topics=[cls.FetchTopic(topic_id=Uuid(b"\x01" * 16), partitions=[
        part.replace(high_watermark=INT64_MAX)])])
    assert len(default.encode(18)) == len(v18) - 10  # tag count 1 + tag, size, 8 bytes


@pytest.mark.parametrize("version", [17, 18])
def test_the_raft_fetch_encodes_the_same_at_17_and_18(version):
    """The KRaft core's Fetch never sets HighWatermark, so v18 is v17's bytes."""
    from kraftcore.raft import rpc

    body = rpc.fetch_request("cluster", 2, 5, 120, 4, 500, 1 << 20)
    back = M.FetchRequest.decode(body.encode(version), version)
    # the topic travels by id from v13: the name the body also holds is dropped
    assert back.topics[0].partitions == body.topics[0].partitions
    assert rpc.fetch_replica_id(back) == 2 and rpc.fetch_partition(back) is not None
    assert back.encode(version) == body.encode(version) == body.encode(17)
    response = rpc.fetch_response(0, 1, 5, high_watermark=100, records=b"\x00" * 9)
    back = M.FetchResponse.decode(response.encode(version), version)
    assert back.responses[0].partitions == response.responses[0].partitions
    assert rpc.fetch_response_partition(back).high_watermark == 100


def test_kafka_python_fetch_v18_decodes():
    k = KFetchRequest
    peer = k(version=18, replica_state=k.ReplicaState(replica_id=-1, replica_epoch=-1),
             max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
             session_id=0, session_epoch=-1, topics=[k.FetchTopic(
                 topic_id=uuid.UUID(bytes=b"\x02" * 16), partitions=[k.FetchTopic.FetchPartition(
                     partition=3, current_leader_epoch=5, fetch_offset=77,
                     last_fetched_epoch=4, log_start_offset=0, partition_max_bytes=4096,
                     high_watermark=70)])],
             forgotten_topics_data=[], rack_id="")
    ours = M.FetchRequest.decode(bytes(peer.encode(version=18)), 18)
    part = ours.topics[0].partitions[0]
    assert (part.partition, part.fetch_offset, part.high_watermark) == (3, 77, 70)
    assert ours.topics[0].topic_id == Uuid(b"\x02" * 16)


# ------------------------------------------------------------------------------ version rules


def test_produce_version_rules():
    cls = M.ProduceRequest
    records = b"\x00" * 61
    obj = cls(transactional_id="tx", acks=-1, timeout_ms=30000, topic_data=[
        cls.TopicProduceData(name="orders", topic_id=Uuid(b"\x07" * 16), partition_data=[
            cls.PartitionProduceData(index=0, records=records)])])
    # the transactional id is not ignorable: v0-2 cannot carry it
    for version in (0, 1, 2):
        with pytest.raises(EncodeError, match="transactional_id"):
            obj.encode(version)
        assert cls.decode(obj.replace(transactional_id=None).encode(version), version) \
            .topic_data[0].name == "orders"
    # Name up to v12 and TopicId from v13 are ignorable: each version keeps its own
    at12 = cls.decode(obj.encode(12), 12).topic_data[0]
    at13 = cls.decode(obj.encode(13), 13).topic_data[0]
    assert (at12.name, at12.topic_id) == ("orders", Uuid(bytes(16)))
    assert (at13.name, at13.topic_id) == ("", Uuid(b"\x07" * 16))
    assert bytes(at13.partition_data[0].records) == records
    # null records
    nulls = obj.replace(topic_data=[cls.TopicProduceData(name="t", partition_data=[
        cls.PartitionProduceData(index=1, records=None)])])
    assert cls.decode(nulls.encode(9), 9).topic_data[0].partition_data[0].records is None


def test_produce_response_v10_leader_hints_are_tagged():
    cls = M.ProduceResponse
    part = cls.PartitionProduceResponse(index=0, error_code=6, base_offset=-1)
    hinted = part.replace(current_leader=cls.LeaderIdAndEpoch(leader_id=2, leader_epoch=9))
    obj = cls(responses=[cls.TopicProduceResponse(name="t", partition_responses=[hinted])],
              node_endpoints=[cls.NodeEndpoint(node_id=2, host="h", port=9092)])
    assert cls.decode(obj.encode(10), 10) == obj
    # CurrentLeader and NodeEndpoints are not ignorable: v9 cannot carry them
    with pytest.raises(EncodeError):
        obj.encode(9)
    plain = cls(responses=[cls.TopicProduceResponse(name="t", partition_responses=[part])])
    assert plain.encode(10) == plain.encode(9) and len(plain.encode(9)) > 0


def test_list_offsets_v0_uses_the_offset_list():
    cls = M.ListOffsetsResponse
    obj = cls(topics=[cls.ListOffsetsTopicResponse(name="t", partitions=[
        cls.ListOffsetsPartitionResponse(partition_index=0, error_code=0,
                                         old_style_offsets=[100, 0])])])
    assert cls.decode(obj.encode(0), 0) == obj
    with pytest.raises(EncodeError, match="old_style_offsets"):
        obj.encode(1)
    new = obj.replace(topics=[cls.ListOffsetsTopicResponse(name="t", partitions=[
        cls.ListOffsetsPartitionResponse(partition_index=0, timestamp=5, offset=100)])])
    with pytest.raises(EncodeError, match="timestamp"):
        new.encode(0)
    assert M.ListOffsetsRequest.ListOffsetsPartition().max_num_offsets == 1


def test_find_coordinator_batches_from_v4():
    rq = M.FindCoordinatorRequest
    single = rq(key="group-a", key_type=0)
    batched = rq(key_type=0, coordinator_keys=["group-a", "group-b"])
    for version in range(4):
        assert rq.decode(single.encode(version), version) == single
        with pytest.raises(EncodeError, match="coordinator_keys"):
            batched.encode(version)
    for version in range(4, 7):
        assert rq.decode(batched.encode(version), version) == batched
        with pytest.raises(EncodeError, match="key"):
            single.encode(version)
    with pytest.raises(EncodeError, match="key_type"):
        rq(key="tx", key_type=1).encode(0)
    rs = M.FindCoordinatorResponse
    answer = rs(coordinators=[rs.Coordinator(key="group-a", node_id=1, host="h", port=9092,
                                             error_code=0, error_message=None)])
    assert rs.decode(answer.encode(6), 6) == answer


def test_init_producer_id_epoch_bump_needs_v3():
    cls = M.InitProducerIdRequest
    bump = cls(transactional_id=None, transaction_timeout_ms=60000, producer_id=1000,
               producer_epoch=3)
    for version in (0, 1, 2):
        with pytest.raises(EncodeError, match="producer_id"):
            bump.encode(version)
    for version in (3, 4, 5):
        assert cls.decode(bump.encode(version), version) == bump
    fresh = cls(transactional_id=None, transaction_timeout_ms=60000)
    assert (fresh.producer_id, fresh.producer_epoch) == (-1, -1)
    # v0: nullable int16 string (-1 = null), int32 timeout
    assert fresh.encode(0) == bytes.fromhex("ffff" "0000ea60")
    # v2 (flexible): compact nullable string 0 = null, timeout, empty tag section
    assert fresh.encode(2) == bytes.fromhex("00" "0000ea60" "00")


def test_allocate_producer_ids_bytes():
    rq = M.AllocateProducerIdsRequest(broker_id=1, broker_epoch=5)
    assert rq.encode(0) == bytes.fromhex("00000001" "0000000000000005" "00")
    rs = M.AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=2000,
                                       producer_id_len=1000)
    assert rs.encode(0) == bytes.fromhex("00000000" "0000" "00000000000007d0" "000003e8" "00")
    assert M.AllocateProducerIdsResponse.decode(rs.encode(0), 0) == rs
    assert M.AllocateProducerIdsRequest().broker_epoch == -1


# ------------------------------------------------------------------------------ kafka-python


def _check_both_ways(cls, version, obj):
    """kraftcore's bytes decode with kafka-python to the same values, and kafka-python's
    encoding of those values is the same bytes."""
    peer_cls = PEERS[cls]
    data = roundtrip(cls, version, obj)
    peer_obj = peer_cls.decode(data, version=version)
    assert from_peer(peer_obj, cls, version) == obj
    theirs = bytes(to_peer(obj, peer_cls, version).encode(version=version))
    assert theirs == data, (data.hex(), theirs.hex())


@pytest.mark.parametrize("case", PEER_CASES, ids=_case_id)
def test_peer_filled_values_both_ways(case):
    cls, version = case
    _check_both_ways(cls, version, filled(cls, version, seed=version + 3))


@pytest.mark.parametrize("case", PEER_CASES, ids=_case_id)
def test_peer_defaults_both_ways(case):
    cls, version = case
    _check_both_ways(cls, version, cls())


RECORDS = bytes(range(70))
TOPIC_ID = uuid.UUID(bytes=bytes(range(1, 17)))


@pytest.mark.smoke
@pytest.mark.parametrize("version", [3, 7, 9, 10, 13])
def test_kafka_python_produce_request_decodes(version):
    k = KProduceRequest
    topic = {"name": "orders"} if version < 13 else {"topic_id": TOPIC_ID}
    partition = k.TopicProduceData.PartitionProduceData
    peer = k(version=version, transactional_id="tx-1", acks=-1, timeout_ms=30000,
             topic_data=[k.TopicProduceData(**topic, partition_data=[
                 partition(index=2, records=RECORDS), partition(index=5, records=None)])])
    data = bytes(peer.encode(version=version))
    ours = M.ProduceRequest.decode(data, version)
    assert (ours.transactional_id, ours.acks, ours.timeout_ms) == ("tx-1", -1, 30000)
    topic = ours.topic_data[0]
    if version < 13:
        assert topic.name == "orders"
    else:
        assert topic.topic_id == Uuid(TOPIC_ID.bytes) and topic.name == ""
    assert [(p.index, None if p.records is None else bytes(p.records))
            for p in topic.partition_data] == [(2, RECORDS), (5, None)]
    assert ours.encode(version) == data


@pytest.mark.parametrize("version", [3, 7, 9, 10, 13])
def test_produce_response_decodes_with_kafka_python(version):
    cls = M.ProduceResponse
    part = cls.PartitionProduceResponse(
        index=2, error_code=0, base_offset=1234, log_append_time_ms=-1,
        log_start_offset=0 if version >= 5 else -1,
        record_errors=[cls.BatchIndexAndErrorMessage(batch_index=1,
                                                     batch_index_error_message="bad")]
        if version >= 8 else [],
        current_leader=cls.LeaderIdAndEpoch(leader_id=1, leader_epoch=4) if version >= 10
        else cls.LeaderIdAndEpoch())
    obj = cls(responses=[cls.TopicProduceResponse(
        name="orders" if version < 13 else "",
        topic_id=Uuid(TOPIC_ID.bytes) if version >= 13 else Uuid(bytes(16)),
        partition_responses=[part])], throttle_time_ms=3)
    peer = KProduceResponse.decode(obj.encode(version), version=version)
    topic = peer.responses[0]
    if version < 13:
        assert topic.name == "orders"
    else:
        assert topic.topic_id == TOPIC_ID
    p = topic.partition_responses[0]
    assert (p.index, p.error_code, p.base_offset) == (2, 0, 1234)
    assert peer.throttle_time_ms == 3
    if version >= 8:
        assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
            (1, "bad")]
    if version >= 10:
        assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 4)


@pytest.mark.parametrize("version", [1, 5, 7, 10, 11])
def test_kafka_python_list_offsets_request_decodes(version):
    k = KListOffsetsRequest
    peer = k(version=version, replica_id=-1, isolation_level=1 if version >= 2 else 0,
             topics=[k.ListOffsetsTopic(name="orders", partitions=[
                 k.ListOffsetsTopic.ListOffsetsPartition(partition_index=0,
                                                         current_leader_epoch=7,
                                                         timestamp=-2)])],
             timeout_ms=5000)
    data = bytes(peer.encode(version=version))
    ours = M.ListOffsetsRequest.decode(data, version)
    assert ours.replica_id == -1 and ours.topics[0].name == "orders"
    part = ours.topics[0].partitions[0]
    assert (part.partition_index, part.timestamp) == (0, -2)
    assert part.current_leader_epoch == (7 if version >= 4 else -1)
    assert ours.isolation_level == (1 if version >= 2 else 0)
    assert ours.timeout_ms == (5000 if version >= 10 else 0)


@pytest.mark.parametrize("version", [0, 1, 5])
def test_list_offsets_response_decodes_with_kafka_python(version):
    cls = M.ListOffsetsResponse
    part = (cls.ListOffsetsPartitionResponse(partition_index=0, error_code=0,
                                             old_style_offsets=[42]) if version == 0 else
            cls.ListOffsetsPartitionResponse(partition_index=0, error_code=0, timestamp=-1,
                                             offset=42, leader_epoch=3 if version >= 4 else -1))
    obj = cls(throttle_time_ms=2 if version >= 2 else 0,
              topics=[cls.ListOffsetsTopicResponse(name="orders", partitions=[part])])
    peer = KListOffsetsResponse.decode(obj.encode(version), version=version)
    p = peer.topics[0].partitions[0]
    if version == 0:
        assert p.old_style_offsets == [42]
    else:
        assert (p.offset, p.timestamp) == (42, -1)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_kafka_python_offset_for_leader_epoch_request_decodes(version):
    k = KOffsetForLeaderEpochRequest
    peer = k(version=version, replica_id=-2, topics=[k.OffsetForLeaderTopic(
        topic="orders", partitions=[k.OffsetForLeaderTopic.OffsetForLeaderPartition(
            partition=1, current_leader_epoch=6, leader_epoch=5)])])
    data = bytes(peer.encode(version=version))
    ours = M.OffsetForLeaderEpochRequest.decode(data, version)
    part = ours.topics[0].partitions[0]
    assert ours.replica_id == -2 and ours.topics[0].topic == "orders"
    assert (part.partition, part.current_leader_epoch, part.leader_epoch) == (1, 6, 5)
    assert ours.encode(version) == data
    cls = M.OffsetForLeaderEpochResponse
    answer = cls(throttle_time_ms=1, topics=[cls.OffsetForLeaderTopicResult(
        topic="orders", partitions=[cls.EpochEndOffset(error_code=0, partition=1,
                                                       leader_epoch=5, end_offset=900)])])
    back = KOffsetForLeaderEpochResponse.decode(answer.encode(version), version=version)
    p = back.topics[0].partitions[0]
    assert (p.partition, p.leader_epoch, p.end_offset) == (1, 5, 900)


@pytest.mark.parametrize("version", [0, 1, 3, 4, 6])
def test_kafka_python_find_coordinator_request_decodes(version):
    if version < 4:
        peer = KFindCoordinatorRequest(version=version, key="group-a", key_type=0)
    else:
        peer = KFindCoordinatorRequest(version=version, key_type=1,
                                       coordinator_keys=["tx-1", "tx-2"])
    data = bytes(peer.encode(version=version))
    ours = M.FindCoordinatorRequest.decode(data, version)
    if version < 4:
        assert (ours.key, ours.key_type, ours.coordinator_keys) == ("group-a", 0, [])
    else:
        assert (ours.key, ours.key_type, ours.coordinator_keys) == ("", 1, ["tx-1", "tx-2"])
    assert ours.encode(version) == data
    cls = M.FindCoordinatorResponse
    if version < 4:
        answer = cls(error_code=15, error_message=None, node_id=-1, host="", port=-1)
    else:
        answer = cls(coordinators=[cls.Coordinator(key=k, node_id=1, host="h", port=9092,
                                                   error_code=0, error_message=None)
                                   for k in ("tx-1", "tx-2")])
    back = KFindCoordinatorResponse.decode(answer.encode(version), version=version)
    if version < 4:
        assert (back.error_code, back.node_id) == (15, -1)
    else:
        assert [(c.key, c.node_id, c.port) for c in back.coordinators] == [
            ("tx-1", 1, 9092), ("tx-2", 1, 9092)]


@pytest.mark.parametrize("version", [0, 1, 3, 4, 5])
def test_kafka_python_init_producer_id_request_decodes(version):
    fields = {"transactional_id": None, "transaction_timeout_ms": 60000}
    if version >= 3:
        fields.update(producer_id=-1, producer_epoch=-1)
    peer = KInitProducerIdRequest(version=version, **fields)
    data = bytes(peer.encode(version=version))
    ours = M.InitProducerIdRequest.decode(data, version)
    assert (ours.transactional_id, ours.transaction_timeout_ms) == (None, 60000)
    assert (ours.producer_id, ours.producer_epoch) == (-1, -1)
    assert ours.encode(version) == data
    cls = M.InitProducerIdResponse
    answer = cls(throttle_time_ms=0, error_code=0, producer_id=4000, producer_epoch=0)
    back = KInitProducerIdResponse.decode(answer.encode(version), version=version)
    assert (back.error_code, back.producer_id, back.producer_epoch) == (0, 4000, 0)


# ------------------------------------------------------------------------------ file regions

@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_responses_with_file_regions_encode_as_parts_in_both_kernels(tmp_path, version):
    """Records held as `FileRegion`s become parts of the output, between the bytes around
    them; with the regions' bytes put back the parts are the inline encoding, byte for byte,
    in both kernels. `encode_struct` (one bytes) refuses a region."""
    from kraftcore.types import FileRegion

    data = bytes(range(256)) * 64
    path = tmp_path / "segment"
    path.write_bytes(data)
    cls = M.FetchResponse
    spans = [(0, 5000), None, (100, 1), (7000, 9000)]  # None: records inline

    def body(as_regions):
        parts = []
        for i, span in enumerate(spans):
            if span is None:
                records = b"inline"
            elif as_regions:
                records = FileRegion(open(path, "rb", buffering=0), *span)
            else:
                records = data[span[0]:span[0] + span[1]]
            parts.append(cls.PartitionData(partition_index=i, error_code=0, high_watermark=9,
                                           records=records))
        topic = cls.FetchableTopicResponse(partitions=parts)
        if version >= 13:
            topic.topic_id = Uuid(bytes(range(16)))
        else:
            topic.topic = "t"
        return cls(throttle_time_ms=0, error_code=0, session_id=0, responses=[topic])

    prog = cls.program(version)
    inline = codec.encode_struct(prog, body(False))
    with_regions = body(True)
    try:
        outputs = {name: k.encode_struct_parts(prog, with_regions) for name, k in KERNELS.items()}
        for name, parts in outputs.items():
            kinds = [type(p) for p in parts]
            assert kinds == [bytes, FileRegion, bytes, FileRegion, bytes, FileRegion, bytes], name
            joined = b"".join(p.read() if isinstance(p, FileRegion) else p for p in parts)
            assert joined == inline, name
        first = next(iter(outputs.values()))
        assert all(parts[0::2] == first[0::2] for parts in outputs.values())
        for k in KERNELS.values():
            with pytest.raises(EncodeError, match="bytes-like"):
                k.encode_struct(prog, with_regions)
        assert codec.encode_struct_parts(prog, body(False)) == [inline]
    finally:
        for p in with_regions.responses[0].partitions:
            if isinstance(p.records, FileRegion):
                p.records.close()
