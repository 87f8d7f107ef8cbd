"""kraftcore's RPC schemas against kafka-python 3.x's protocol classes (generated from
Kafka's JSON schemas), for every message and version both define.

For each value (hypothesis-generated, plus hand-built ones):

* kraftcore encodes -> kafka-python decodes -> the same values;
* kafka-python encodes the same value -> the same bytes -> kraftcore decodes the same
  value and re-encodes the same bytes.

kafka-python accepts every version from 0 up to its maximum (it does not enforce Kafka 4.0's
raised minimums), so the overlap is kraftcore's range capped at kafka-python's maximum.
"""

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftcore import codec
from kraftcore.protocol import messages as M
from kraftcore.protocol.schema import Struct, in_range
from kraftcore.types import Uuid

from .strategies import message_at

from kafka.protocol import api_message as kp_protocol
from kafka.protocol.admin.cluster import (  # noqa: E402
    DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse,
)
from kafka.protocol.admin.configs import (  # noqa: E402
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.topics import (  # noqa: E402
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, ElectLeadersRequest,
    ElectLeadersResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse  # noqa: E402
from kafka.protocol.consumer.group import (  # noqa: E402
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
)
from kafka.protocol.metadata.api_versions import (  # noqa: E402
    ApiVersionsRequest, ApiVersionsResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse  # noqa: E402

KERNELS = {name: kernels.protocol for name, kernels in codec.implementations().items()}

PEERS = {
    M.ApiVersionsRequest: ApiVersionsRequest, M.ApiVersionsResponse: ApiVersionsResponse,
    M.MetadataRequest: MetadataRequest, M.MetadataResponse: MetadataResponse,
    M.FetchRequest: FetchRequest, M.FetchResponse: FetchResponse,
    M.CreateTopicsRequest: CreateTopicsRequest, M.CreateTopicsResponse: CreateTopicsResponse,
    M.DeleteTopicsRequest: DeleteTopicsRequest, M.DeleteTopicsResponse: DeleteTopicsResponse,
    M.CreatePartitionsRequest: CreatePartitionsRequest,
    M.CreatePartitionsResponse: CreatePartitionsResponse,
    M.IncrementalAlterConfigsRequest: IncrementalAlterConfigsRequest,
    M.IncrementalAlterConfigsResponse: IncrementalAlterConfigsResponse,
    M.DescribeConfigsRequest: DescribeConfigsRequest,
    M.DescribeConfigsResponse: DescribeConfigsResponse,
    M.ElectLeadersRequest: ElectLeadersRequest, M.ElectLeadersResponse: ElectLeadersResponse,
    M.DescribeClusterRequest: DescribeClusterRequest,
    M.DescribeClusterResponse: DescribeClusterResponse,
    M.DescribeQuorumRequest: DescribeQuorumRequest,
    M.DescribeQuorumResponse: DescribeQuorumResponse,
    M.OffsetCommitRequest: OffsetCommitRequest, M.OffsetCommitResponse: OffsetCommitResponse,
    M.OffsetFetchRequest: OffsetFetchRequest, M.OffsetFetchResponse: OffsetFetchResponse,
}


def _overlap(cls):
    peer = PEERS[cls]
    assert peer.API_KEY == cls.api_key and peer.type == cls.kind
    low, high = cls.valid_versions
    return range(low, min(high, peer.max_version) + 1)


CASES = [(cls, v) for cls in PEERS for v in _overlap(cls)]


def _case_id(case):
    return f"{case[0].__name__}-v{case[1]}"


# ------------------------------------------------------------------------------ conversion

# kraftcore's own fields, which Kafka's schemas (and so kafka-python) do not have: the peer
# never sees them and skips them on the wire as unknown tags.
EXTENSIONS = {(M.DescribeClusterResponse.DescribeClusterBroker, "broker_epoch")}

# kafka-python renames the int32 authorized-operations fields of MetadataResponse and
# DescribeClusterResponse to `authorized_operations` and holds them as a set of bit numbers
# (None for INT32_MIN, Kafka's "not requested").
BITFIELD = "authorized_operations"
INT32_MIN = -(1 << 31)


def _peer_name(field, peer_fields):
    if field.attr not in peer_fields and field.attr.endswith(BITFIELD):
        assert BITFIELD in peer_fields
        return BITFIELD
    return field.attr


def _to_bits(value):
    bits = {i for i in range(32) if (value & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits


def _from_bits(bits):
    if bits is None:
        return INT32_MIN
    value = sum(1 << i for i in bits)
    return value - (1 << 32) if value >= 1 << 31 else value


def _fields_at(obj, version):
    return [f for f in obj._fields if in_range(version, f.versions)]


def _to_peer_value(value, field, peer_field, version):
    if value is None:
        return None
    if field.struct is not None:
        if field.is_array:
            return [to_peer(v, peer_field.data_class, version) for v in value]
        return to_peer(value, peer_field.data_class, version)
    if isinstance(value, list):
        return [_to_peer_value(v, field, peer_field, version) for v in value]
    if isinstance(value, Uuid):
        return uuid.UUID(bytes=bytes(value))
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def to_peer(obj, peer_cls, version):
    """A kafka-python container with the values of kraftcore struct `obj` at `version`.
    Tagged fields at their default are left out (kafka-python writes every tagged field it
    was given; Kafka, like kraftcore, leaves out those at their default)."""
    fields = peer_cls._struct.fields
    kwargs = {}
    for f in _fields_at(obj, version):
        if (type(obj), f.attr) in EXTENSIONS:
            continue
        value = getattr(obj, f.attr)
        if f.tag is not None and in_range(version, f.tagged) and value == f.default_value():
            continue
        name = _peer_name(f, fields)
        if name != f.attr:
            kwargs[name] = _to_bits(value)
            continue
        kwargs[name] = _to_peer_value(value, f, fields[name], version)
    return peer_cls(version=version, **kwargs)


def _from_peer_value(value, field, version):
    if value is None:
        # kafka-python reads an all-zero uuid as None and leaves an absent tagged struct
        # None; kraftcore holds the field's default there.
        return None if in_range(version, field.nullable) else field.default_value()
    if field.struct is not None:
        if field.is_array:
            return [from_peer(v, field.struct, version) for v in value]
        return from_peer(value, field.struct, version)
    if isinstance(value, list):
        return [_from_peer_value(v, field, version) for v in value]
    if isinstance(value, uuid.UUID):
        return Uuid(value.bytes)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


def from_peer(peer_obj, cls, version):
    """A kraftcore `cls` with the values of kafka-python container `peer_obj`."""
    values = {}
    peer_fields = peer_obj._struct.fields
    for f in cls._fields:
        if not in_range(version, f.versions) or (cls, f.attr) in EXTENSIONS:
            continue
        name = _peer_name(f, peer_fields)
        if name != f.attr:
            values[f.attr] = _from_bits(getattr(peer_obj, name))
        else:
            values[f.attr] = _from_peer_value(getattr(peer_obj, name), f, version)
    return cls(**values)


def strip_unknown_tags(obj):
    """kafka-python cannot be given unknown tags: drop those the strategy invented."""
    if isinstance(obj, Struct):
        obj._unknown_tags = None
        for f in obj._fields:
            strip_unknown_tags(getattr(obj, f.attr))
    elif isinstance(obj, list):
        for item in obj:
            strip_unknown_tags(item)
    return obj


def strip_extensions(obj):
    """Put kraftcore's own fields back to their defaults (the peer cannot carry them)."""
    if isinstance(obj, Struct):
        for f in obj._fields:
            if (type(obj), f.attr) in EXTENSIONS:
                setattr(obj, f.attr, f.default_value())
            else:
                strip_extensions(getattr(obj, f.attr))
    elif isinstance(obj, list):
        for item in obj:
            strip_extensions(item)
    return obj


def _peer_decode(peer_cls, data, version):
    if peer_cls is ApiVersionsResponse:
        # kafka-python's ApiVersionsResponse.decode reads an error response as v0 (what
        # a broker sends for an unsupported request version); decode the body as given.
        return super(ApiVersionsResponse, peer_cls).decode.__func__(peer_cls, data, version)
    return peer_cls.decode(data, version=version)


def check_both_ways(cls, version, obj):
    peer_cls = PEERS[cls]
    prog = cls.program(version)
    ours = {name: k.encode_struct(prog, obj) for name, k in KERNELS.items()}
    data = next(iter(ours.values()))
    assert all(b == data for b in ours.values())
    # kraftcore -> kafka-python
    peer_obj = _peer_decode(peer_cls, data, version)
    assert from_peer(peer_obj, cls, version) == obj
    # kafka-python -> kraftcore
    theirs = bytes(to_peer(obj, peer_cls, version).encode(version=version))
    assert theirs == data, (data.hex(), theirs.hex())
    for k in KERNELS.values():
        back = k.decode_message(prog, theirs)
        assert back == obj
        assert k.encode_struct(prog, back) == theirs


# ------------------------------------------------------------------------------ tests


def test_overlap_covers_every_shared_version():
    covered = {(c.__name__, v) for c, v in CASES}
    assert ("FetchResponse", 0) in covered and ("FetchResponse", 17) in covered
    assert ("MetadataRequest", 13) in covered and ("ApiVersionsResponse", 4) in covered
    assert len(CASES) == sum(len(_overlap(c)) for c in PEERS)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_peer_generated(case, data):
    cls, version = case
    obj = strip_extensions(strip_unknown_tags(data.draw(message_at(cls, version))))
    check_both_ways(cls, version, obj)


@pytest.mark.parametrize("version", range(3))
def test_peer_skips_the_broker_epoch_extension(version):
    """kafka-python, like any client built from Kafka's schemas, reads a DescribeCluster
    answer carrying kraftcore's BrokerEpoch and keeps the epoch as an unknown tag."""
    cls = M.DescribeClusterResponse
    obj = cls(cluster_id="c", controller_id=1, brokers=[
        cls.DescribeClusterBroker(broker_id=b, host="h", port=9092, broker_epoch=40 + b)
        for b in (1, 2)])
    data = obj.encode(version)
    peer = _peer_decode(DescribeClusterResponse, data, version)
    assert [(b.broker_id, b.host, b.port) for b in peer.brokers] == [(1, "h", 9092),
                                                                    (2, "h", 9092)]
    assert [b.unknown_tags for b in peer.brokers] == [
        {f"_{M.BROKER_EPOCH_TAG}": (40 + b).to_bytes(8, "big")} for b in (1, 2)]
    assert from_peer(peer, cls, version) == strip_extensions(cls.decode(data, version))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_peer_defaults(case):
    cls, version = case
    check_both_ways(cls, version, cls())


def _hand_built():
    U = Uuid(bytes(range(1, 17)))
    fq = M.FetchRequest
    for v in _overlap(fq):
        yield fq, v, fq(
            cluster_id="cluster" if v >= 12 else None, replica_id=2 if v <= 14 else -1,
            replica_state=fq.ReplicaState(replica_id=3, replica_epoch=7) if v >= 15
            else fq.ReplicaState(),
            max_wait_ms=500, min_bytes=1, max_bytes=8 << 20 if v >= 3 else 0x7FFFFFFF,
            isolation_level=1 if v >= 4 else 0,
            session_id=0, session_epoch=-1, topics=[fq.FetchTopic(
                topic="__cluster_metadata" if v <= 12 else "",
                topic_id=U if v >= 13 else Uuid(bytes(16)), partitions=[fq.FetchPartition(
                    partition=0, current_leader_epoch=4 if v >= 9 else -1, fetch_offset=120,
                    last_fetched_epoch=4 if v >= 12 else -1, log_start_offset=0 if v >= 5 else -1,
                    partition_max_bytes=1 << 20,
                    replica_directory_id=U if v >= 17 else Uuid(bytes(16)))])],
            rack_id="r1" if v >= 11 else "")
    fr = M.FetchResponse
    for v in _overlap(fr):
        flex = v >= 12
        yield fr, v, fr(
            throttle_time_ms=0, error_code=0, session_id=0, responses=[
                fr.FetchableTopicResponse(
                    topic="t" if v <= 12 else "", topic_id=U if v >= 13 else Uuid(bytes(16)),
                    partitions=[fr.PartitionData(
                        partition_index=0, error_code=0, high_watermark=100,
                        last_stable_offset=100 if v >= 4 else -1,
                        log_start_offset=0 if v >= 5 else -1,
                        diverging_epoch=fr.EpochEndOffset(epoch=3, end_offset=90) if flex
                        else fr.EpochEndOffset(),
                        current_leader=fr.LeaderIdAndEpoch(leader_id=1, leader_epoch=4) if flex
                        else fr.LeaderIdAndEpoch(),
                        snapshot_id=fr.SnapshotId(end_offset=80, epoch=2) if flex
                        else fr.SnapshotId(),
                        aborted_transactions=None if v >= 4 else [],
                        preferred_read_replica=-1,
                        records=b"\x00" * 61)])],
            node_endpoints=[fr.NodeEndpoint(node_id=1, host="localhost", port=9093,
                                            rack=None)] if v >= 16 else [])
    av = M.ApiVersionsResponse
    for v in _overlap(av):
        yield av, v, av(error_code=0, throttle_time_ms=5 if v >= 1 else 0, api_keys=[
            av.ApiVersion(api_key=k, min_version=0, max_version=m) for k, m in
            ((0, 11), (1, 17), (18, 4), (52, 2))],
            supported_features=[av.SupportedFeatureKey(name="kraft.version", min_version=0,
                                                       max_version=1)] if v >= 3 else [],
            finalized_features_epoch=12 if v >= 3 else -1,
            finalized_features=[av.FinalizedFeatureKey(name="metadata.version",
                                                       max_version_level=21,
                                                       min_version_level=21)]
            if v >= 3 else [],
            zk_migration_ready=False)
    mr = M.MetadataRequest
    for v in _overlap(mr):
        yield mr, v, mr(topics=None if v >= 1 else [], allow_auto_topic_creation=v < 4 or False,
                        include_topic_authorized_operations=v >= 8)
    dq = M.DescribeQuorumResponse
    for v in _overlap(dq):
        def state(i):
            return dq.ReplicaState(replica_id=i, replica_directory_id=U if v >= 2 else
                                   Uuid(bytes(16)), log_end_offset=100 + i,
                                   last_fetch_timestamp=1_700_000_000_000 if v >= 1 else -1,
                                   last_caught_up_timestamp=1_700_000_000_000 if v >= 1
                                   else -1)
        yield dq, v, dq(error_code=0, topics=[dq.TopicData(
            topic_name="__cluster_metadata", partitions=[dq.PartitionData(
                partition_index=0, leader_id=1, leader_epoch=7, high_watermark=99,
                current_voters=[state(1), state(2), state(3)], observers=[state(4)])])],
            nodes=[dq.Node(node_id=1, listeners=[dq.Listener(
                name="CONTROLLER", host="h1", port=9093)])] if v >= 2 else [])

    cq = M.DescribeConfigsRequest
    for v in _overlap(cq):
        yield cq, v, cq(resources=[
            cq.DescribeConfigsResource(resource_type=2, resource_name="orders",
                                       configuration_keys=None),
            cq.DescribeConfigsResource(resource_type=4, resource_name="",
                                       configuration_keys=["min.insync.replicas"])],
            include_synonyms=v >= 1, include_documentation=v >= 3)
    cr = M.DescribeConfigsResponse
    for v in _overlap(cr):
        synonyms = [cr.DescribeConfigsSynonym(name="min.insync.replicas", value=x, source=s)
                    for x, s in (("2", 1), ("1", 5))] if v >= 1 else []
        yield cr, v, cr(throttle_time_ms=0, results=[
            cr.DescribeConfigsResult(
                error_code=0, error_message=None, resource_type=2, resource_name="orders",
                configs=[cr.DescribeConfigsResourceResult(
                    name="min.insync.replicas", value="2", read_only=False,
                    is_default=False, config_source=1 if v >= 1 else -1, is_sensitive=False,
                    synonyms=synonyms, config_type=3 if v >= 3 else 0,
                    documentation=None)]),
            cr.DescribeConfigsResult(error_code=3, error_message="topic 'x' does not exist",
                                     resource_type=2, resource_name="x")])


HAND_BUILT = list(_hand_built())


@pytest.mark.smoke
@pytest.mark.parametrize("cls,version,obj", HAND_BUILT,
                         ids=[f"{c.__name__}-v{v}" for c, v, _ in HAND_BUILT])
def test_peer_hand_built(cls, version, obj):
    check_both_ways(cls, version, obj)
