"""The RPC schemas of kraftcore.protocol.messages on both codec kernels: round trips of every
message at every version, identical bytes from both kernels, version rules (non-ignorable
fields refuse to be dropped), golden bytes from kafka-facts §11.7, malformed bodies, the API
registry and the error codes."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftcore import codec
from kraftcore.errors import EncodeError, ProtocolError, UnsupportedVersionError
from kraftcore.protocol import messages as M
from kraftcore.protocol.apis import API_BY_KEY, API_BY_NAME, Api, api
from kraftcore.protocol.error_codes import ErrorCode, error_name
from kraftcore.protocol.schema import in_range
from kraftcore.types import Uuid

from .strategies import message_at

KERNELS = {name: kernels.protocol for name, kernels in codec.implementations().items()}
ALL = M.REQUESTS + M.RESPONSES
CASES = [(cls, v) for cls in ALL for v in range(cls.valid_versions[0], cls.valid_versions[1] + 1)]


def _case_id(case):
    cls, version = case
    return f"{cls.__name__}-v{version}"


def roundtrip_all_kernels(cls, version, obj):
    """Encode `obj` with every kernel (same bytes), decode with every kernel (equal to obj),
    and re-encode the decoded value (same bytes again). Returns the bytes."""
    prog = cls.program(version)
    encoded = {name: k.encode_struct(prog, obj) for name, k in KERNELS.items()}
    data = next(iter(encoded.values()))
    assert all(b == data for b in encoded.values()), {n: b.hex() for n, b in encoded.items()}
    for name, k in KERNELS.items():
        back = k.decode_message(prog, data)
        assert back == obj, name
        assert k.encode_struct(prog, back) == data, name
    return data


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_every_message_and_version(case, data):
    cls, version = case
    obj = data.draw(message_at(cls, version))
    roundtrip_all_kernels(cls, version, obj)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_defaults_encode_at_every_version(case, impl):
    cls, version = case
    prog = cls.program(version)
    data = impl.protocol.encode_struct(prog, cls())
    assert impl.protocol.decode_message(prog, data) == cls()
    assert cls.decode(cls().encode(version), version) == cls()


def test_uuid_has_one_home():
    """`Uuid` is imported from kraftcore.types only: the protocol package does not hand
    out a second name for it, and the uuid fields hold that very class."""
    import kraftcore.protocol

    assert not hasattr(kraftcore.protocol, "Uuid")
    assert "Uuid" not in kraftcore.protocol.__all__
    assert type(M.VoteRequest.PartitionData().replica_directory_id) is Uuid


@pytest.mark.smoke
def test_message_class_api():
    m = M.VoteRequest(cluster_id="c", voter_id=2, topics=[M.VoteRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[M.VoteRequest.PartitionData(
            partition_index=0, replica_epoch=5, replica_id=1, last_offset_epoch=4,
            last_offset=100, pre_vote=True)])])
    back = M.VoteRequest.decode(m.encode(2), 2)
    assert back == m and back.decoded_version == 2
    assert M.VoteRequest.__module__ == "kraftcore.protocol.messages"
    with pytest.raises(UnsupportedVersionError):
        m.encode(3)
    assert M.FetchRequest().max_bytes == 0x7FFFFFFF
    assert M.FetchRequest().cluster_id is None
    assert M.FetchResponse.PartitionData().current_leader.leader_id == -1
    assert M.BrokerHeartbeatResponse().is_fenced is True


# ------------------------------------------------------------------------------ versions


def _other_value(field):
    """A value of `field` different from its default, or None if there is no simple one."""
    default = field.default_value()
    if field.is_array:
        if field.struct is not None:
            return [field.struct()]
        return [{"int32": 7, "int64": 7, "uuid": Uuid(b"\x01" * 16),
                 "string": "x"}[field.element]]
    if field.struct is not None:
        return None
    t = field.type
    if t == "bool":
        return not default
    if t in ("int8", "int16", "int32", "int64", "uint16"):
        return default - 1 if default > 0 else default + 1
    if t == "uuid":
        return Uuid(b"\x02" * 16)
    if t == "string":
        return "not-default"
    if t in ("bytes", "records"):
        return b"x"
    return None


def _absent_fields(cls, version):
    """(field, value) pairs of top-level fields `version` lacks, with a non-default value."""
    for field in cls._fields:
        if in_range(version, field.versions):
            continue
        value = _other_value(field)
        if value is not None:
            yield field, value


VERSION_CASES = [
    (cls, v, f, value) for cls, v in CASES for f, value in _absent_fields(cls, v)
]


@pytest.mark.parametrize(
    "cls,version,field,value", VERSION_CASES,
    ids=[f"{c.__name__}-v{v}-{f.attr}" for c, v, f, _ in VERSION_CASES])
def test_field_absent_from_version(impl, cls, version, field, value):
    obj = cls(**{field.attr: value})
    prog = cls.program(version)
    if field.ignorable:
        data = impl.protocol.encode_struct(prog, obj)
        assert data == impl.protocol.encode_struct(prog, cls())
        assert getattr(impl.protocol.decode_message(prog, data), field.attr) == \
            field.default_value()
    else:
        with pytest.raises(EncodeError, match=field.attr):
            impl.protocol.encode_struct(prog, obj)


def test_version_rules_cover_both_kinds():
    kinds = {f.ignorable for _, _, f, _ in VERSION_CASES}
    assert kinds == {True, False}


@pytest.mark.parametrize("cls,version,make", [
    # PreVote is v2+ and not ignorable
    (M.VoteRequest, 1, lambda: M.VoteRequest(topics=[M.VoteRequest.TopicData(
        partitions=[M.VoteRequest.PartitionData(pre_vote=True)])])),
    # NewIsr is v0-2 only, NewIsrWithEpochs v3+
    (M.AlterPartitionRequest, 3, lambda: M.AlterPartitionRequest(topics=[
        M.AlterPartitionRequest.TopicData(partitions=[
            M.AlterPartitionRequest.PartitionData(new_isr=[1, 2])])])),
    (M.AlterPartitionRequest, 2, lambda: M.AlterPartitionRequest(topics=[
        M.AlterPartitionRequest.TopicData(partitions=[
            M.AlterPartitionRequest.PartitionData(
                new_isr_with_epochs=[M.AlterPartitionRequest.BrokerState(broker_id=1)])])])),
    # LastFetchedEpoch is v12+ and not ignorable
    (M.FetchRequest, 11, lambda: M.FetchRequest(topics=[M.FetchRequest.FetchTopic(
        partitions=[M.FetchRequest.FetchPartition(last_fetched_epoch=3)])])),
    # the tagged ReplicaState is v15+ (not ignorable)
    (M.FetchRequest, 14, lambda: M.FetchRequest(
        replica_state=M.FetchRequest.ReplicaState(replica_id=1, replica_epoch=2))),
])
def test_nested_field_absent_from_version(impl, cls, version, make):
    with pytest.raises(EncodeError):
        impl.protocol.encode_struct(cls.program(version), make())


def test_ignorable_nested_fields_are_dropped(impl):
    # Vote v0 lacks the directory ids (ignorable); EndQuorumEpoch v1 lacks
    # PreferredSuccessors (ignorable); Fetch v12 lacks TopicId (ignorable).
    p = M.VoteRequest.PartitionData(replica_directory_id=Uuid(b"\x03" * 16), last_offset=9)
    obj = M.VoteRequest(topics=[M.VoteRequest.TopicData(partitions=[p])])
    back = impl.protocol.decode_message(
        M.VoteRequest.program(0), impl.protocol.encode_struct(M.VoteRequest.program(0), obj))
    assert back.topics[0].partitions[0].replica_directory_id == Uuid(bytes(16))
    assert back.topics[0].partitions[0].last_offset == 9
    p = M.EndQuorumEpochRequest.PartitionData(preferred_successors=[1, 2])
    obj = M.EndQuorumEpochRequest(topics=[M.EndQuorumEpochRequest.TopicData(partitions=[p])])
    impl.protocol.encode_struct(M.EndQuorumEpochRequest.program(1), obj)


# ------------------------------------------------------------------------------ golden bytes
# kafka-facts §11.7 (bodies only: the header and size prefix belong to framing).


@pytest.mark.smoke
def test_golden_api_versions_request_v3(impl):
    obj = M.ApiVersionsRequest(client_software_name="kafka-python",
                               client_software_version="2.3.2")
    golden = bytes.fromhex("0d6b61666b612d707974686f6e06322e332e3200")
    prog = M.ApiVersionsRequest.program(3)
    assert impl.protocol.encode_struct(prog, obj) == golden
    assert impl.protocol.decode_message(prog, golden) == obj


@pytest.mark.smoke
def test_golden_api_versions_response_v3(impl):
    obj = M.ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
        M.ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])
    golden = bytes.fromhex("0000" "02" "0012" "0000" "0004" "00" "00000000" "00")
    prog = M.ApiVersionsResponse.program(3)
    assert impl.protocol.encode_struct(prog, obj) == golden
    assert impl.protocol.decode_message(prog, golden) == obj


@pytest.mark.smoke
def test_golden_api_versions_response_v0_unsupported(impl):
    obj = M.ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=[
        M.ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])
    golden = bytes.fromhex("0023" "00000001" "0012" "0000" "0004")
    prog = M.ApiVersionsResponse.program(0)
    assert impl.protocol.encode_struct(prog, obj) == golden
    assert impl.protocol.decode_message(prog, golden) == obj


# ------------------------------------------------------------------------------ malformed


def _samples():
    U = Uuid(bytes(range(16)))
    fr = M.FetchResponse
    yield fr, 17, fr(throttle_time_ms=1, session_id=7, responses=[fr.FetchableTopicResponse(
        topic_id=U, partitions=[fr.PartitionData(
            partition_index=0, high_watermark=10, records=b"\x00" * 70,
            diverging_epoch=fr.EpochEndOffset(epoch=3, end_offset=5),
            aborted_transactions=[fr.AbortedTransaction(producer_id=1, first_offset=2)])])],
        node_endpoints=[fr.NodeEndpoint(node_id=1, host="h", port=9092, rack=None)])
    fq = M.FetchRequest
    yield fq, 4, fq(replica_id=-1, max_wait_ms=500, min_bytes=1, topics=[fq.FetchTopic(
        topic="t", partitions=[fq.FetchPartition(partition=0, fetch_offset=3,
                                                  partition_max_bytes=1 << 20)])])
    yield M.VoteRequest, 2, M.VoteRequest(cluster_id="abc", voter_id=1, topics=[
        M.VoteRequest.TopicData(topic_name="__cluster_metadata", partitions=[
            M.VoteRequest.PartitionData(replica_epoch=2, replica_id=3, pre_vote=True)])])
    dq = M.DescribeQuorumResponse
    yield dq, 2, dq(topics=[dq.TopicData(topic_name="m", partitions=[dq.PartitionData(
        leader_id=1, current_voters=[dq.ReplicaState(replica_id=1, replica_directory_id=U)],
        observers=[dq.ReplicaState(replica_id=4)])])],
        nodes=[dq.Node(node_id=1, listeners=[dq.Listener(name="C", host="h", port=1)])])
    dc = M.DescribeConfigsResponse
    yield dc, 4, dc(results=[dc.DescribeConfigsResult(resource_type=2, resource_name="t",
                                                      configs=[dc.DescribeConfigsResourceResult(
        name="min.insync.replicas", value="2", config_source=1, config_type=3,
        synonyms=[dc.DescribeConfigsSynonym(name="min.insync.replicas", value=None,
                                            source=5)])])])
    mr = M.MetadataResponse
    yield mr, 8, mr(brokers=[mr.MetadataResponseBroker(node_id=1, host="h", port=9092)],
                    cluster_id="c", topics=[mr.MetadataResponseTopic(name="t", partitions=[
                        mr.MetadataResponsePartition(replica_nodes=[1, 2], isr_nodes=[1])])])


SAMPLES = list(_samples())
SAMPLE_IDS = [f"{c.__name__}-v{v}" for c, v, _ in SAMPLES]


def _expect_protocol_error(kernel, prog, data):
    with pytest.raises(ProtocolError) as info:
        kernel.decode_message(prog, data)
    pos = info.value.position
    assert isinstance(pos, int) and 0 <= pos <= len(data), (pos, len(data))
    return info.value


@pytest.mark.parametrize("cls,version,obj", SAMPLES, ids=SAMPLE_IDS)
def test_truncated_at_every_byte(impl, cls, version, obj):
    prog = cls.program(version)
    data = impl.protocol.encode_struct(prog, obj)
    assert impl.protocol.decode_message(prog, data) == obj
    for cut in range(len(data)):
        _expect_protocol_error(impl.protocol, prog, data[:cut])
    err = _expect_protocol_error(impl.protocol, prog, data + b"\x00")
    assert err.position == len(data)


@pytest.mark.parametrize("cls,version,obj", SAMPLES, ids=SAMPLE_IDS)
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_bytes_decode_or_raise_protocol_error(impl, cls, version, obj, data):
    prog = cls.program(version)
    buf = bytearray(impl.protocol.encode_struct(prog, obj))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    try:
        back = impl.protocol.decode_message(prog, bytes(buf))
    except ProtocolError as exc:
        assert 0 <= exc.position <= len(buf)
    else:  # whatever decodes re-encodes (unknown tags are kept)
        impl.protocol.encode_struct(prog, back)


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(CASES), junk=st.binary(max_size=64))
def test_random_bytes_never_raise_anything_else(case, junk):
    cls, version = case
    for kernel in KERNELS.values():
        try:
            kernel.decode_message(cls.program(version), junk)
        except ProtocolError as exc:
            assert 0 <= exc.position <= len(junk)


def test_bad_varint(impl):
    # VoteRequest v0 is flexible: ClusterId is a compact nullable string.
    prog = M.VoteRequest.program(0)
    err = _expect_protocol_error(impl.protocol, prog, b"\xff\xff\xff\xff\xff\x01" + bytes(8))
    assert err.position == 0
    # a varint that never ends
    _expect_protocol_error(impl.protocol, prog, b"\x80\x80\x80")
    # the tagged-field count of an otherwise valid body
    body = bytearray(impl.protocol.encode_struct(prog, M.VoteRequest()))
    body[-1] = 0xFF
    err = _expect_protocol_error(impl.protocol, prog, bytes(body) + b"\xff\xff\xff\xff")
    assert err.position == len(body) - 1


def test_negative_lengths(impl):
    # MetadataRequest v1: Topics is a nullable int32-count array of {Name: int16 string}
    prog = M.MetadataRequest.program(1)
    assert impl.protocol.decode_message(prog, b"\xff\xff\xff\xff").topics is None
    err = _expect_protocol_error(impl.protocol, prog, b"\xff\xff\xff\xfe")
    assert err.position == 0
    # MetadataRequest v0: the array is not nullable
    _expect_protocol_error(impl.protocol, M.MetadataRequest.program(0), b"\xff\xff\xff\xff")
    # a topic name of length -1 (not nullable before v10) and -2
    for length in (b"\xff\xff", b"\xff\xfe"):
        err = _expect_protocol_error(impl.protocol, prog, b"\x00\x00\x00\x01" + length)
        assert err.position == 4
    # records of length -2 in a classic FetchResponse (v4)
    fr = M.FetchResponse
    obj = fr(responses=[fr.FetchableTopicResponse(topic="t", partitions=[fr.PartitionData()])])
    data = impl.protocol.encode_struct(fr.program(4), obj)
    assert data.endswith(b"\xff\xff\xff\xff")  # null records
    err = _expect_protocol_error(impl.protocol, fr.program(4), data[:-4] + b"\xff\xff\xff\xfe")
    assert err.position == len(data) - 4


def test_huge_counts(impl):
    prog = M.MetadataRequest.program(1)
    err = _expect_protocol_error(impl.protocol, prog, b"\x7f\xff\xff\xff" + bytes(16))
    assert err.position == 0
    # compact array count in flexible MetadataRequest v12
    prog = M.MetadataRequest.program(12)
    err = _expect_protocol_error(impl.protocol, prog, b"\xff\xff\xff\xff\x07" + bytes(16))
    assert err.position == 0
    # FetchResponse v17: a records length far beyond the buffer
    fr = M.FetchResponse
    obj = fr(responses=[fr.FetchableTopicResponse(partitions=[fr.PartitionData(
        records=b"abc")])])
    data = bytearray(impl.protocol.encode_struct(fr.program(17), obj))
    at = data.index(b"\x04abc")
    data[at:at + 1] = b"\xff\xff\xff\x7f"
    err = _expect_protocol_error(impl.protocol, fr.program(17), bytes(data))
    assert at <= err.position <= at + 4  # the length, or the bytes it claims


# ------------------------------------------------------------------------------ zero copy


def test_records_decode_as_a_view(impl):
    fr = M.FetchResponse
    payload = bytes(range(256)) * 4
    obj = fr(responses=[fr.FetchableTopicResponse(partitions=[fr.PartitionData(
        records=payload)])])
    data = bytearray(impl.protocol.encode_struct(fr.program(17), obj))
    back = impl.protocol.decode_message(fr.program(17), data)
    records = back.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records == payload
    at = bytes(data).index(payload)
    data[at] ^= 0xFF  # the view shares the buffer
    assert records[0] == payload[0] ^ 0xFF
    records.release()


# ------------------------------------------------------------------------------ registry

# kafka-facts §6.2, widened where §6.2 gives a newer range (Vote 4.0, Metadata 4.0, Fetch
# 4.x v18) and by Kafka's schemas for the APIs it does not list (ElectLeaders, DescribeCluster
# v2, the data-plane APIs of test_data_plane_messages).
EXPECTED = {
    0: ("Produce", (0, 13), 9), 1: ("Fetch", (0, 18), 12), 2: ("ListOffsets", (0, 11), 6),
    3: ("Metadata", (0, 13), 9), 10: ("FindCoordinator", (0, 6), 3),
    8: ("OffsetCommit", (0, 10), 8), 9: ("OffsetFetch", (0, 10), 6),
    18: ("ApiVersions", (0, 4), 3), 22: ("InitProducerId", (0, 5), 2),
    23: ("OffsetForLeaderEpoch", (0, 4), 4), 67: ("AllocateProducerIds", (0, 0), 0),
    19: ("CreateTopics", (0, 7), 5), 20: ("DeleteTopics", (0, 6), 4),
    37: ("CreatePartitions", (0, 3), 2), 43: ("ElectLeaders", (0, 2), 2),
    32: ("DescribeConfigs", (0, 4), 4), 44: ("IncrementalAlterConfigs", (0, 1), 1),
    52: ("Vote", (0, 2), 0),
    53: ("BeginQuorumEpoch", (0, 1), 1), 54: ("EndQuorumEpoch", (0, 1), 1),
    55: ("DescribeQuorum", (0, 2), 0), 56: ("AlterPartition", (0, 3), 0),
    59: ("FetchSnapshot", (0, 1), 0), 60: ("DescribeCluster", (0, 2), 0),
    62: ("BrokerRegistration", (0, 4), 0), 63: ("BrokerHeartbeat", (0, 1), 0),
    64: ("UnregisterBroker", (0, 0), 0), 70: ("ControllerRegistration", (0, 0), 0),
    80: ("AddRaftVoter", (0, 0), 0), 81: ("RemoveRaftVoter", (0, 0), 0),
    82: ("UpdateRaftVoter", (0, 0), 0),
    11: ("JoinGroup", (0, 9), 6), 12: ("Heartbeat", (0, 4), 4), 13: ("LeaveGroup", (0, 5), 4),
    14: ("SyncGroup", (0, 5), 4), 15: ("DescribeGroups", (0, 6), 5),
    16: ("ListGroups", (0, 5), 3), 42: ("DeleteGroups", (0, 3), 2),
    47: ("OffsetDelete", (0, 0), None),
    17: ("SaslHandshake", (0, 1), None), 36: ("SaslAuthenticate", (0, 2), 2),
    29: ("DescribeAcls", (0, 3), 2), 30: ("CreateAcls", (0, 3), 2), 31: ("DeleteAcls", (0, 3), 2),
    50: ("DescribeUserScramCredentials", (0, 0), 0),
    51: ("AlterUserScramCredentials", (0, 0), 0),
}


@pytest.mark.smoke
def test_registry():
    assert set(API_BY_KEY) == set(EXPECTED)
    for key, (name, valid, flexible_from) in EXPECTED.items():
        a = api(key)
        assert isinstance(a, Api) and a is API_BY_NAME[name]
        assert (a.key, a.name) == (key, name)
        assert a.request.__name__ == name + "Request" and a.response.__name__ == name + "Response"
        assert a.request.kind == "request" and a.response.kind == "response"
        for cls in (a.request, a.response):
            assert cls.api_key == key
            assert cls.valid_versions == valid
            # a message with no flexible version has the empty range (1, 0)
            assert cls.flexible_versions == ((1, 0) if flexible_from is None
                                             else (flexible_from, None))
        assert a.valid_versions == valid
        assert [a.is_flexible(v) for v in range(valid[1] + 1)] == \
            [flexible_from is not None and v >= flexible_from for v in range(valid[1] + 1)]


@pytest.mark.smoke
@pytest.mark.parametrize("key", [-1, 4, 99, 1 << 20, "1", None])
def test_unknown_api_key(key):
    with pytest.raises(UnsupportedVersionError, match="unknown API key"):
        api(key)


# ------------------------------------------------------------------------------ error codes

SECTION_6_5 = {
    -1: "UNKNOWN_SERVER_ERROR", 0: "NONE", 1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER",
    7: "REQUEST_TIMED_OUT", 8: "BROKER_NOT_AVAILABLE", 10: "MESSAGE_TOO_LARGE",
    19: "NOT_ENOUGH_REPLICAS", 20: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    31: "CLUSTER_AUTHORIZATION_FAILED", 35: "UNSUPPORTED_VERSION", 36: "TOPIC_ALREADY_EXISTS",
    37: "INVALID_PARTITIONS", 38: "INVALID_REPLICATION_FACTOR", 41: "NOT_CONTROLLER",
    42: "INVALID_REQUEST", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
    77: "STALE_BROKER_EPOCH", 83: "ELIGIBLE_LEADERS_NOT_AVAILABLE", 84: "ELECTION_NOT_NEEDED",
    87: "INVALID_RECORD", 94: "INCONSISTENT_VOTER_SET", 98: "SNAPSHOT_NOT_FOUND",
    99: "POSITION_OUT_OF_RANGE", 100: "UNKNOWN_TOPIC_ID", 101: "DUPLICATE_BROKER_REGISTRATION",
    102: "BROKER_ID_NOT_REGISTERED", 103: "INCONSISTENT_TOPIC_ID",
    104: "INCONSISTENT_CLUSTER_ID", 107: "INELIGIBLE_REPLICA", 119: "INVALID_REGISTRATION",
    125: "INVALID_VOTER_KEY", 126: "DUPLICATE_VOTER", 127: "VOTER_NOT_FOUND",
}


@pytest.mark.smoke
def test_error_codes():
    for code, name in SECTION_6_5.items():
        assert ErrorCode[name] == code and ErrorCode.of(code).name == name
        assert error_name(code) == name
    # the table is contiguous from -1 to its highest code, without aliases
    assert sorted(ErrorCode) == list(range(-1, max(ErrorCode) + 1))
    assert len(ErrorCode.__members__) == len(ErrorCode)
    assert all(-(1 << 15) <= c < (1 << 15) for c in ErrorCode)


def test_error_codes_agree_with_kafka_python():
    from kafka import errors
    # kafka-python keeps a few pre-KIP names; Kafka renamed them.
    renamed = {-1: "UNKNOWN", 0: "NO_ERROR", 6: "NOT_LEADER_FOR_PARTITION",
               10: "MESSAGE_SIZE_TOO_LARGE", 17: "INVALID_TOPIC",
               39: "INVALID_REPLICATION_ASSIGNMENT"}
    for code in ErrorCode:
        peer = errors.for_code(int(code))
        assert peer.errno == code
        assert peer.message == renamed.get(int(code), code.name)


def test_unknown_error_code():
    with pytest.raises(ValueError, match="unknown Kafka error code 4242"):
        ErrorCode.of(4242)
    assert error_name(4242) == "UNKNOWN_ERROR_CODE(4242)"
    assert ErrorCode.of(ErrorCode.NONE) is ErrorCode.NONE
