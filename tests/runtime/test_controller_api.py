"""The controller's Kafka RPCs (`kraftcore.runtime.controller_api`) against a real
`QuorumController` over a one-voter `LocalQuorum`: every request goes through the wire
(request encoded and decoded at its version, the response encoded and decoded back), at
every version the module claims, with the error paths Kafka defines and NOT_CONTROLLER
from a standby."""

import asyncio
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kraftcore.broker.lifecycle import (FENCED, ONLINE, BrokerLifecycle, HeartbeatRequest,
                                        RegisterRequest)
from kraftcore.controller.cluster import HeartbeatResult, RegistrationResult
from kraftcore.errors import ControllerError, NotControllerError
from kraftcore.metadata.image import (CONFIG_BROKER, CONFIG_TOPIC, METADATA_VERSION,
                                      MetadataImage)
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.protocol import framing, messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.types import ZERO_UUID, Uuid
from kraftcore.runtime import controller_api as api
from kraftcore.runtime.controller_api import handle_controller_request
from kraftcore.controller.local import LocalQuorum

from tests.protocol.strategies import message_at

CLUSTER_ID = "kraftcore-cluster"  # ControllerConfig's default
MAX_LEVEL = max(METADATA_VERSION_LEVELS.values())
CONTROLLERS = {1: ("127.0.0.1", 19093), 2: ("127.0.0.1", 29093), 3: ("127.0.0.1", 39093)}


# ------------------------------------------------------------------------------ facades

class LocalFacade:
    """The facade over a LocalQuorum: `submit` runs the controller until idle, so the
    returned future is already done."""

    def __init__(self, quorum, controllers=CONTROLLERS):
        self.quorum = quorum
        self.node_id = quorum.node_id
        self.cluster_id = quorum.controller.config.cluster_id
        self._controllers = dict(controllers)
        self.submitted = []

    def submit(self, method, *args, **kwargs):
        self.submitted.append(method)
        future = getattr(self.quorum.controller, method)(*args, **kwargs)
        self.quorum.run()
        return asyncio.wrap_future(future)

    @property
    def image(self):
        return self.quorum.controller.image

    def controller_id(self):
        return self.node_id if self.quorum.controller.active else self.quorum.core.leader_id

    def controllers(self):
        return dict(self._controllers)


class StandbyFacade:
    """A standby controller: reads its (given) image; every operation fails with
    NOT_CONTROLLER naming node `active`, raised at once or through the future."""

    def __init__(self, image, node_id=2, active=1, raise_at_once=False):
        self.image = image
        self.node_id = node_id
        self.cluster_id = CLUSTER_ID
        self.active = active
        self.raise_at_once = raise_at_once
        self.submitted = []

    def submit(self, method, *args, **kwargs):
        self.submitted.append(method)
        error = NotControllerError(self.node_id, self.active)
        if self.raise_at_once:
            raise error
        future = asyncio.get_running_loop().create_future()
        future.set_exception(error)
        return future

    def controller_id(self):
        return self.active

    def controllers(self):
        return dict(CONTROLLERS)


class FailingFacade(StandbyFacade):
    """Every operation raises `error` (or never completes, when `error` is None)."""

    def __init__(self, image, error):
        super().__init__(image)
        self.error = error

    def submit(self, method, *args, **kwargs):
        self.submitted.append(method)
        if self.error is None:
            return asyncio.get_running_loop().create_future()  # never done
        raise self.error


# ------------------------------------------------------------------------------ helpers

def call(facade, body, version, correlation_id=7):
    """`body` sent at `version` the whole way: encoded and decoded as a request, answered,
    the answer encoded and decoded as a response (what a client receives)."""
    frame = framing.encode_request(body, version, correlation_id, client_id="test")
    request = framing.decode_request(frame[4:])
    response = asyncio.run(handle_controller_request(facade, request))
    assert type(response) is framing._apis().api(body.api_key).response
    out = framing.encode_response(response, version, correlation_id)
    cid, decoded = framing.decode_response(out[4:], body.api_key, version)
    assert cid == correlation_id
    return decoded


def versions(cls):
    low, high = cls.valid_versions
    return range(low, high + 1)


def incarnation(broker_id):
    return Uuid.random(random.Random(broker_id))


def registration(broker_id, version=4, *, cluster_id=CLUSTER_ID, features=None,
                 log_dirs=(), **extra):
    cls = m.BrokerRegistrationRequest
    if features is None:
        features = [cls.Feature(name=METADATA_VERSION, min_supported_version=1,
                                max_supported_version=MAX_LEVEL)]
    return cls(broker_id=broker_id, cluster_id=cluster_id,
               incarnation_id=incarnation(broker_id),
               listeners=[cls.Listener(name="PLAINTEXT", host="127.0.0.1",
                                       port=9090 + broker_id, security_protocol=0)],
               features=features, rack=None, log_dirs=list(log_dirs) if version >= 2 else [],
               **extra)


def heartbeat(broker_id, epoch, *, want_fence=False, want_shut_down=False, offset=10**9):
    return m.BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch,
                                    current_metadata_offset=offset, want_fence=want_fence,
                                    want_shut_down=want_shut_down)


def add_broker(facade, broker_id):
    """Register and unfence `broker_id` through the RPCs; returns its epoch."""
    response = call(facade, registration(broker_id), 4)
    assert response.error_code == 0
    beat = call(facade, heartbeat(broker_id, response.broker_epoch), 1)
    assert (beat.error_code, beat.is_fenced, beat.is_caught_up) == (0, False, True)
    return response.broker_epoch


def create_topics(*topics, timeout_ms=60000, validate_only=False):
    cls = m.CreateTopicsRequest
    entries = []
    for t in topics:
        name, partitions, rf = t[:3]
        assignments = t[3] if len(t) > 3 else {}
        configs = t[4] if len(t) > 4 else {}
        entries.append(cls.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf,
            assignments=[cls.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                         for i, b in assignments.items()],
            configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()]))
    return cls(topics=entries, timeout_ms=timeout_ms, validate_only=validate_only)


def codes(items, name_attr="name"):
    return {getattr(i, name_attr): i.error_code for i in items}


@pytest.fixture
def quorum():
    return LocalQuorum()


@pytest.fixture
def facade(quorum):
    return LocalFacade(quorum)


@pytest.fixture
def cluster(facade):
    """Brokers 1, 2, 3 registered and unfenced; returns the facade and their epochs."""
    epochs = {b: add_broker(facade, b) for b in (1, 2, 3)}
    return facade, epochs


# ------------------------------------------------------------------------------ brokers

@pytest.mark.parametrize("version", versions(m.BrokerRegistrationRequest))
def test_broker_registration_every_version(facade, version):
    body = registration(5, version, log_dirs=[incarnation(50)])
    response = call(facade, body, version)
    assert response.error_code == 0
    record = facade.image.brokers[5]
    assert response.broker_epoch == record.broker_epoch >= 0
    assert record.fenced
    assert [(e.name, e.host, e.port) for e in record.end_points] == [("PLAINTEXT", "127.0.0.1",
                                                                      9095)]
    assert record.log_dirs == ([incarnation(50)] if version >= 2 else [])
    # The same incarnation again keeps its epoch (a retry).
    assert call(facade, body, version).broker_epoch == response.broker_epoch


def test_broker_registration_errors(facade):
    wrong_cluster = call(facade, registration(5, cluster_id="another"), 4)
    assert wrong_cluster.error_code == E.INCONSISTENT_CLUSTER_ID
    assert wrong_cluster.broker_epoch == -1
    # No features at all: Kafka assumes metadata.version 3.0-IV1 only, below this cluster's.
    assert call(facade, registration(5, features=[]), 4).error_code == E.UNSUPPORTED_VERSION
    zk = call(facade, registration(5, is_migrating_zk_broker=True), 1)
    assert zk.error_code == E.BROKER_ID_NOT_REGISTERED
    dirs = call(facade, registration(5, log_dirs=[incarnation(9)] * 2), 2)
    assert dirs.error_code == E.INVALID_REGISTRATION
    assert 5 not in facade.image.brokers


@pytest.mark.parametrize("version", versions(m.BrokerHeartbeatRequest))
def test_broker_heartbeat_every_version(facade, version):
    epoch = call(facade, registration(4), 4).broker_epoch
    not_caught_up = call(facade, heartbeat(4, epoch, offset=0), version)
    assert (not_caught_up.error_code, not_caught_up.is_caught_up,
            not_caught_up.is_fenced) == (0, False, True)
    beat = call(facade, heartbeat(4, epoch), version)
    assert (beat.error_code, beat.is_caught_up, beat.is_fenced,
            beat.should_shut_down) == (0, True, False, False)
    assert not facade.image.brokers[4].fenced
    # An unfenced broker that leads nothing and wants to shut down may go at once.
    bye = call(facade, heartbeat(4, epoch, want_shut_down=True), version)
    assert (bye.error_code, bye.is_fenced, bye.should_shut_down) == (0, True, True)


def test_broker_heartbeat_errors(facade):
    epoch = call(facade, registration(4), 4).broker_epoch
    stale = call(facade, heartbeat(4, epoch + 1), 1)
    assert (stale.error_code, stale.is_fenced) == (E.STALE_BROKER_EPOCH, True)
    unknown = call(facade, heartbeat(99, 0), 0)
    assert unknown.error_code == E.BROKER_ID_NOT_REGISTERED


def test_unregister_broker(cluster):
    facade, _ = cluster
    body = m.UnregisterBrokerRequest(broker_id=3)
    assert call(facade, body, 0).error_code == 0
    assert 3 not in facade.image.brokers
    again = call(facade, body, 0)
    assert again.error_code == E.BROKER_ID_NOT_REGISTERED
    assert "not registered" in again.error_message


def test_controller_registration_is_refused_clearly(facade):
    body = m.ControllerRegistrationRequest(controller_id=2, incarnation_id=incarnation(2))
    response = call(facade, body, 0)
    assert response.error_code == E.UNSUPPORTED_VERSION
    assert "controller.quorum.voters" in response.error_message
    assert facade.submitted == []


# ------------------------------------------------------------------------------ the inverse helpers

def test_registration_and_heartbeat_helpers_round_trip(facade):
    request = RegisterRequest(broker_id=6, incarnation_id=incarnation(6), cluster_id=CLUSTER_ID,
                              rack="r1", listeners=(("PLAINTEXT", "127.0.0.1", 9096, 0),),
                              features=None, log_dirs=(incarnation(60),))
    body = api.registration_request(request)
    assert [(f.name, f.min_supported_version, f.max_supported_version)
            for f in body.features] == [(METADATA_VERSION, 1, MAX_LEVEL)]
    result = api.registration_result(call(facade, body, 4))
    assert result == RegistrationResult(facade.image.brokers[6].broker_epoch)
    assert facade.image.brokers[6].rack == "r1"
    beat = HeartbeatRequest(broker_id=6, broker_epoch=result.broker_epoch,
                            metadata_offset=10**6, want_fence=False, want_shutdown=False)
    assert api.heartbeat_result(call(facade, api.heartbeat_request(beat), 1)) == \
        HeartbeatResult(is_caught_up=True, is_fenced=False, should_shut_down=False)


def test_result_helpers_raise_the_controller_errors():
    with pytest.raises(ControllerError) as info:
        api.registration_result(m.BrokerRegistrationResponse(error_code=104))
    assert info.value.code == 104 and "INCONSISTENT_CLUSTER_ID" in str(info.value)
    with pytest.raises(NotControllerError) as info:
        api.heartbeat_result(m.BrokerHeartbeatResponse(error_code=41), node_id=3)
    assert info.value.code == 41 and info.value.controller_id is None
    assert "controller 3" in str(info.value)
    with pytest.raises(ControllerError) as info:
        api.heartbeat_result(m.BrokerHeartbeatResponse(error_code=77))
    assert info.value.code == 77
    with pytest.raises(ValueError):
        api.registration_request(RegisterRequest(1, incarnation(1), None, None, (), None, ()))


def test_broker_lifecycle_over_the_rpcs(facade):
    """A BrokerLifecycle driven only through the wire messages and the helpers reaches
    ONLINE, as it does against a local controller."""
    lifecycle = BrokerLifecycle(7, incarnation(7), cluster_id=CLUSTER_ID,
                                listeners=(("PLAINTEXT", "127.0.0.1", 9097, 0),))
    lifecycle.set_metadata_offset(10**6)
    now = 0
    lifecycle.start(now)
    for _ in range(10):
        requests, _ = lifecycle.poll(now)
        for request in requests:
            if isinstance(request, RegisterRequest):
                response = call(facade, api.registration_request(request), 4)
                try:
                    result = api.registration_result(response)
                except ControllerError as exc:
                    result = exc
            else:
                response = call(facade, api.heartbeat_request(request), 1)
                try:
                    result = api.heartbeat_result(response)
                except ControllerError as exc:
                    result = exc
            assert lifecycle.on_response(request, result, now)
        if lifecycle.state == ONLINE:
            break
        now += 100
    assert lifecycle.state == ONLINE
    assert lifecycle.broker_epoch == facade.image.brokers[7].broker_epoch
    assert not facade.image.brokers[7].fenced
    assert FENCED in {t.to_state for t in lifecycle.transitions}


# ------------------------------------------------------------------------------ topics

@pytest.mark.parametrize("version", versions(m.CreateTopicsRequest))
def test_create_topics_every_version(cluster, version):
    facade, _ = cluster
    name = f"topic-v{version}"
    body = create_topics((name, 3, 2, {}, {"min.insync.replicas": "2"}))
    (result,) = call(facade, body, version).topics
    assert (result.name, result.error_code) == (name, 0)
    topic = facade.image.topic(name)
    assert len(topic.partitions) == 3
    assert all(len(p.replicas) == 2 for p in topic.partitions.values())
    assert facade.image.configs[(CONFIG_TOPIC, name)] == {"min.insync.replicas": "2"}
    assert result.topic_id == (topic.topic_id if version >= 7 else ZERO_UUID)
    if version >= 5:
        assert (result.num_partitions, result.replication_factor) == (3, 2)
        configs = {c.name: (c.value, c.config_source) for c in result.configs}
        assert configs == {"min.insync.replicas": ("2", api.CONFIG_SOURCE_TOPIC),
                           "unclean.leader.election.enable": ("false",
                                                              api.CONFIG_SOURCE_DEFAULT)}
    else:
        assert (result.num_partitions, result.replication_factor) == (-1, -1)


def test_create_topics_errors_per_topic(cluster):
    facade, _ = cluster
    call(facade, create_topics(("exists", 1, 1)), 7)
    body = create_topics(("dup", 1, 1), ("dup", 2, 1), ("exists", 1, 1), ("big", 1, 9),
                         ("conf", 1, 1, {}, {"retention.ms": "1"}), ("bad name!", 1, 1),
                         ("zero", 0, 1), ("ok", 2, 3),
                         ("manual", -1, -1, {0: [3, 1], 1: [2, 3]}))
    response = call(facade, body, 7)
    assert [t.name for t in response.topics] == ["dup", "exists", "big", "conf", "bad name!",
                                                "zero", "ok", "manual"]
    assert codes(response.topics) == {
        "dup": E.INVALID_REQUEST, "exists": E.TOPIC_ALREADY_EXISTS,
        "big": E.INVALID_REPLICATION_FACTOR, "conf": E.INVALID_CONFIG,
        "bad name!": E.INVALID_TOPIC_EXCEPTION, "zero": E.INVALID_PARTITIONS, "ok": 0,
        "manual": 0}
    by_name = {t.name: t for t in response.topics}
    assert by_name["dup"].error_message == "Duplicate topic name."
    assert "retention.ms" in by_name["conf"].error_message
    assert by_name["exists"].topic_id == ZERO_UUID
    manual = facade.image.topic("manual")
    assert [manual.partitions[i].replicas for i in (0, 1)] == [[3, 1], [2, 3]]
    assert facade.image.topic("dup") is None and facade.image.topic("big") is None


def test_create_topics_whole_request_refusals(cluster):
    facade, _ = cluster
    dry = call(facade, create_topics(("a", 1, 1), ("b", 1, 1), validate_only=True), 7)
    assert codes(dry.topics) == {"a": E.INVALID_REQUEST, "b": E.INVALID_REQUEST}
    assert "validate_only" in dry.topics[0].error_message
    huge = call(facade, create_topics(("a", 2**31 - 1, 1)), 7)
    assert codes(huge.topics) == {"a": E.POLICY_VIOLATION}
    assert facade.image.topic("a") is None and facade.submitted.count("create_topics") == 0


def delete_topics(version, *items, timeout_ms=30000):
    cls = m.DeleteTopicsRequest
    if version >= 6:
        return cls(topics=[cls.DeleteTopicState(name=n, topic_id=i) for n, i in items],
                   timeout_ms=timeout_ms)
    return cls(topic_names=[n for n, _ in items], timeout_ms=timeout_ms)


@pytest.mark.parametrize("version", versions(m.DeleteTopicsRequest))
def test_delete_topics_by_name_every_version(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("gone", 2, 1), ("kept", 1, 1)), 7)
    topic_id = facade.image.topic("gone").topic_id
    response = call(facade, delete_topics(version, ("gone", ZERO_UUID),
                                          ("never", ZERO_UUID)), version)
    assert codes(response.responses) == {"gone": 0, "never": E.UNKNOWN_TOPIC_OR_PARTITION}
    if version >= 6:
        assert response.responses[0].topic_id == topic_id
    if version >= 5:
        assert "does not exist" in response.responses[1].error_message
    assert facade.image.topic("gone") is None and facade.image.topic("kept") is not None


def test_delete_topics_by_id(cluster):
    facade, _ = cluster
    call(facade, create_topics(("a", 1, 1), ("b", 1, 1), ("c", 1, 1)), 7)
    a, b, c = (facade.image.topic(n).topic_id for n in "abc")
    unknown = incarnation(1234)
    response = call(facade, delete_topics(
        6, (None, a), (None, unknown), ("b", b), (None, ZERO_UUID), (None, c), (None, c),
        ("c", ZERO_UUID)), 6)
    results = [(r.name, r.topic_id, r.error_code) for r in response.responses]
    assert results == [
        ("a", a, 0),
        (None, unknown, E.UNKNOWN_TOPIC_ID),
        ("b", b, E.INVALID_REQUEST),  # both a name and an id
        (None, ZERO_UUID, E.INVALID_REQUEST),  # neither
        (None, c, E.INVALID_REQUEST),  # the same id twice
        ("c", c, 0),  # by name; the answer names the deleted id
    ]
    assert response.responses[2].error_message == "You may not specify both topic name and " \
        "topic id."
    assert sorted(facade.image.topic_ids) == ["b"]


def create_partitions(*topics, validate_only=False):
    cls = m.CreatePartitionsRequest
    return cls(topics=[cls.CreatePartitionsTopic(
        name=name, count=count,
        assignments=None if a is None else [cls.CreatePartitionsAssignment(broker_ids=b)
                                            for b in a])
        for name, count, a in topics], timeout_ms=30000, validate_only=validate_only)


@pytest.mark.parametrize("version", versions(m.CreatePartitionsRequest))
def test_create_partitions_every_version(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("grow", 1, 2), ("hand", 1, 2)), 7)
    response = call(facade, create_partitions(("grow", 3, None), ("hand", 3, [[1, 2], [2, 3]]),
                                              ("grow2", 2, None)), version)
    assert codes(response.results) == {"grow": 0, "hand": 0,
                                       "grow2": E.UNKNOWN_TOPIC_OR_PARTITION}
    assert len(facade.image.topic("grow").partitions) == 3
    hand = facade.image.topic("hand").partitions
    assert [hand[1].replicas, hand[2].replicas] == [[1, 2], [2, 3]]


def test_create_partitions_errors(cluster):
    facade, _ = cluster
    call(facade, create_topics(("t", 2, 1), ("u", 1, 1)), 7)
    response = call(facade, create_partitions(("t", 2, None), ("u", 2, []), ("d", 2, None),
                                              ("d", 3, None), ("t2", 5, [[1]])), 3)
    assert codes(response.results) == {"t": E.INVALID_PARTITIONS,
                                       "u": E.INVALID_REPLICA_ASSIGNMENT,
                                       "d": E.INVALID_REQUEST,
                                       "t2": E.UNKNOWN_TOPIC_OR_PARTITION}
    dry = call(facade, create_partitions(("t", 4, None), validate_only=True), 3)
    assert codes(dry.results) == {"t": E.INVALID_REQUEST}
    huge = call(facade, create_partitions(("t", 2**31 - 1, None)), 3)
    assert codes(huge.results) == {"t": E.POLICY_VIOLATION}
    assert len(facade.image.topic("t").partitions) == 2


# ------------------------------------------------------------------------------ configs

def alter_configs(*resources, validate_only=False):
    cls = m.IncrementalAlterConfigsRequest
    return cls(resources=[cls.AlterConfigsResource(
        resource_type=rtype, resource_name=rname,
        configs=[cls.AlterableConfig(name=k, config_operation=op, value=v)
                 for k, op, v in configs])
        for rtype, rname, configs in resources], validate_only=validate_only)


@pytest.mark.parametrize("version", versions(m.IncrementalAlterConfigsRequest))
def test_incremental_alter_configs_every_version(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1, {}, {"min.insync.replicas": "1"})), 7)
    response = call(facade, alter_configs(
        (CONFIG_TOPIC, "t", [("min.insync.replicas", api.OP_SET, "2"),
                             ("unclean.leader.election.enable", api.OP_SET, "false")]),
        (CONFIG_BROKER, "", [("min.insync.replicas", api.OP_SET, "3")])), version)
    assert [(r.resource_type, r.resource_name, r.error_code) for r in response.responses] == [
        (CONFIG_TOPIC, "t", 0), (CONFIG_BROKER, "", 0)]
    assert facade.image.configs[(CONFIG_TOPIC, "t")] == {
        "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert facade.image.configs[(CONFIG_BROKER, "")] == {"min.insync.replicas": "3"}
    deleted = call(facade, alter_configs(
        (CONFIG_TOPIC, "t", [("min.insync.replicas", api.OP_DELETE, None)])), version)
    assert deleted.responses[0].error_code == 0
    assert facade.image.configs[(CONFIG_TOPIC, "t")] == {"unclean.leader.election.enable":
                                                         "false"}


def test_incremental_alter_configs_errors(cluster):
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1)), 7)
    response = call(facade, alter_configs(
        (CONFIG_TOPIC, "missing", [("min.insync.replicas", api.OP_SET, "2")]),
        (CONFIG_TOPIC, "t", [("retention.ms", api.OP_SET, "5")]),
        (CONFIG_BROKER, "", [("min.insync.replicas", api.OP_APPEND, "2")]),
        (CONFIG_BROKER, "1", [("min.insync.replicas", 9, "2")]),
        (CONFIG_BROKER, "2", [("min.insync.replicas", api.OP_SET, None)]),
        (CONFIG_BROKER, "3", [("min.insync.replicas", api.OP_SET, "2"),
                              ("min.insync.replicas", api.OP_SET, "3")]),
        (8, "x", []),
        (CONFIG_TOPIC, "dup", []), (CONFIG_TOPIC, "dup", [])), 1)
    assert [r.error_code for r in response.responses] == [
        E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_CONFIG, E.INVALID_CONFIG, E.INVALID_REQUEST,
        E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST]
    assert response.responses[-1].error_message == "Duplicate resource."
    assert "APPEND" in response.responses[2].error_message
    dry = call(facade, alter_configs((CONFIG_TOPIC, "t", []), validate_only=True), 1)
    assert dry.responses[0].error_code == E.INVALID_REQUEST
    assert (CONFIG_TOPIC, "t") not in facade.image.configs


def describe_configs(*resources, synonyms=False):
    cls = m.DescribeConfigsRequest
    return cls(resources=[cls.DescribeConfigsResource(resource_type=rtype, resource_name=rname,
                                                      configuration_keys=keys)
                          for rtype, rname, keys in resources], include_synonyms=synonyms)


def configs_of(result, version):
    """{name: (value, source)} of one DescribeConfigs result (v0: source from IsDefault)."""
    out = {}
    for c in result.configs:
        if version == 0:
            source = api.CONFIG_SOURCE_DEFAULT if c.is_default else "set"
        else:
            source = c.config_source
        out[c.name] = (c.value, source)
    return out


MIN_ISR, UNCLEAN = "min.insync.replicas", "unclean.leader.election.enable"


@pytest.mark.parametrize("version", versions(m.DescribeConfigsRequest))
def test_describe_configs_every_version(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1, {}, {MIN_ISR: "2"}), ("u", 1, 1)), 7)
    call(facade, alter_configs((CONFIG_BROKER, "", [(UNCLEAN, api.OP_SET, "true")]),
                               (CONFIG_BROKER, "2", [(MIN_ISR, api.OP_SET, "3")])), 1)
    S = api  # the ConfigSource constants
    response = call(facade, describe_configs(
        (CONFIG_TOPIC, "t", None), (CONFIG_TOPIC, "u", []), (CONFIG_BROKER, "", None),
        (CONFIG_BROKER, "1", None), (CONFIG_BROKER, "2", [MIN_ISR, "no.such.config"]),
        synonyms=version >= 1), version)
    assert response.throttle_time_ms == 0
    t, u, default, b1, b2 = response.results
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message)
            for r in response.results] == [
        (CONFIG_TOPIC, "t", 0, None), (CONFIG_TOPIC, "u", 0, None), (CONFIG_BROKER, "", 0, None),
        (CONFIG_BROKER, "1", 0, None), (CONFIG_BROKER, "2", 0, None)]
    if version == 0:
        set_here, cluster_default = "set", "set"
        broker_own = "set"
    else:
        set_here, cluster_default = S.CONFIG_SOURCE_TOPIC, S.CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
        broker_own = S.CONFIG_SOURCE_DYNAMIC_BROKER
    assert configs_of(t, version) == {MIN_ISR: ("2", set_here), UNCLEAN: ("true",
                                                                          cluster_default)}
    assert configs_of(u, version) == {MIN_ISR: ("1", S.CONFIG_SOURCE_DEFAULT),
                                      UNCLEAN: ("true", cluster_default)}
    assert configs_of(default, version) == {MIN_ISR: ("1", S.CONFIG_SOURCE_DEFAULT),
                                            UNCLEAN: ("true", cluster_default)}
    assert configs_of(b1, version) == configs_of(default, version)
    assert configs_of(b2, version) == {MIN_ISR: ("3", broker_own)}  # only the key asked
    for c in t.configs:
        assert (c.read_only, c.is_sensitive) == (False, False)
        if version >= 3:
            assert c.config_type == {MIN_ISR: 3, UNCLEAN: 1}[c.name]  # INT, BOOLEAN
            assert c.documentation is None
    if version >= 1:
        # Every level that sets the config, highest precedence first.
        (min_isr,) = [c for c in t.configs if c.name == MIN_ISR]
        assert [(s.name, s.value, s.source) for s in min_isr.synonyms] == [
            (MIN_ISR, "2", S.CONFIG_SOURCE_TOPIC), (MIN_ISR, "1", S.CONFIG_SOURCE_DEFAULT)]
        (unclean,) = [c for c in t.configs if c.name == UNCLEAN]
        assert [(s.value, s.source) for s in unclean.synonyms] == [
            ("true", S.CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER), ("false", S.CONFIG_SOURCE_DEFAULT)]
        (b2_min,) = b2.configs
        assert [(s.value, s.source) for s in b2_min.synonyms] == [
            ("3", S.CONFIG_SOURCE_DYNAMIC_BROKER), ("1", S.CONFIG_SOURCE_DEFAULT)]
        plain = call(facade, describe_configs((CONFIG_TOPIC, "t", None)), version)
        assert all(c.synonyms == [] for c in plain.results[0].configs)


def test_describe_configs_errors_per_resource(cluster):
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1)), 7)
    response = call(facade, describe_configs(
        (CONFIG_TOPIC, "missing", None), (8, "logger", None), (CONFIG_BROKER, "x", None),
        (CONFIG_BROKER, "99", None), (CONFIG_BROKER, "3", None), (CONFIG_TOPIC, "t", None)),
        4)
    assert [r.error_code for r in response.results] == [
        E.UNKNOWN_TOPIC_OR_PARTITION, E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST,
        0, 0]
    assert response.results[0].error_message == "topic 'missing' does not exist"
    assert "resource type 8" in response.results[1].error_message
    assert all(r.configs == [] for r in response.results[:4])
    # A controller's node id (CONTROLLERS has 1-3; 3 is also a broker here) is describable.
    by_controller = call(facade, describe_configs((CONFIG_BROKER, "1", [MIN_ISR])), 4)
    assert [c.name for c in by_controller.results[0].configs] == [MIN_ISR]


def test_describe_configs_reads_configs_it_does_not_manage(cluster):
    """An image written by Kafka may hold other configs: they are listed with their source,
    and password-like ones hide their value."""
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1)), 7)
    image = facade.image
    configs = dict(image.configs)
    configs[(CONFIG_TOPIC, "t")] = {"retention.ms": "1000"}
    configs[(CONFIG_BROKER, "")] = {"listener.name.x.ssl.key.password": "secret"}
    view = StandbyFacade(MetadataImage(brokers=image.brokers, topics=image.topics,
                                       topic_ids=image.topic_ids, configs=configs))
    topic, default = call(view, describe_configs((CONFIG_TOPIC, "t", None),
                                                 (CONFIG_BROKER, "", None), synonyms=True),
                          4).results
    assert configs_of(topic, 4)["retention.ms"] == ("1000", api.CONFIG_SOURCE_TOPIC)
    (secret,) = [c for c in default.configs if c.name.endswith("password")]
    assert (secret.value, secret.is_sensitive, secret.config_type) == (None, True, 0)
    assert [s.value for s in secret.synonyms] == [None]


# ------------------------------------------------------------------------------ leaders and ISRs

def elect(election_type, partitions, timeout_ms=30000):
    cls = m.ElectLeadersRequest
    topics = None if partitions is None else [
        cls.TopicPartitions(topic=t, partitions=ps) for t, ps in partitions.items()]
    return cls(election_type=election_type, topic_partitions=topics, timeout_ms=timeout_ms)


def fence_and_return(facade, broker_id, epoch):
    assert call(facade, heartbeat(broker_id, epoch, want_fence=True), 1).is_fenced
    assert not call(facade, heartbeat(broker_id, epoch), 1).is_fenced


def rejoin_isr(facade, epochs, name, broker_id):
    """The leader of every partition of `name` that lists `broker_id` as a replica adds it
    back to the ISR (AlterPartition), as a leader does once the replica caught up."""
    topic = facade.image.topic(name)
    for pid, p in topic.partitions.items():
        if broker_id in p.replicas and broker_id not in p.isr:
            body = alter_partition(3, p.leader, epochs[p.leader], topic, pid,
                                   p.isr + [broker_id], leader_epoch=p.leader_epoch,
                                   partition_epoch=p.partition_epoch)
            assert call(facade, body, 3).topics[0].partitions[0].error_code == 0


def results_of(response):
    return {(r.topic, p.partition_id): p.error_code
            for r in response.replica_election_results for p in r.partition_result}


@pytest.mark.parametrize("version", versions(m.ElectLeadersRequest))
def test_elect_leaders_preferred_every_version(cluster, version):
    facade, epochs = cluster
    call(facade, create_topics(("p", -1, -1, {0: [2, 1], 1: [1, 2]})), 7)
    fence_and_return(facade, 2, epochs[2])  # partition 0's leadership moved to 1
    assert facade.image.topic("p").partitions[0].leader == 1
    not_yet = call(facade, elect(0, {"p": [0]}), version)  # 2 is not back in the ISR
    assert results_of(not_yet) == {("p", 0): E.PREFERRED_LEADER_NOT_AVAILABLE}
    assert "ISR" in not_yet.replica_election_results[0].partition_result[0].error_message
    rejoin_isr(facade, epochs, "p", 2)
    response = call(facade, elect(0, {"p": [0, 1, 7], "nope": [0]}), version)
    assert results_of(response) == {("p", 0): 0, ("p", 1): E.ELECTION_NOT_NEEDED,
                                    ("p", 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                                    ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert facade.image.topic("p").partitions[0].leader == 2
    assert response.error_code == 0


def test_elect_leaders_all_partitions_and_bad_type(cluster):
    facade, epochs = cluster
    call(facade, create_topics(("p", -1, -1, {0: [2, 1], 1: [2, 3], 2: [1, 2]})), 7)
    fence_and_return(facade, 2, epochs[2])
    rejoin_isr(facade, epochs, "p", 2)
    everything = call(facade, elect(0, None), 2)
    assert results_of(everything) == {("p", 0): 0, ("p", 1): 0}
    assert call(facade, elect(1, {"p": [2]}), 1).replica_election_results[0] \
        .partition_result[0].error_code == E.ELECTION_NOT_NEEDED
    bad = call(facade, elect(5, {"p": [0, 1]}), 2)
    assert bad.error_code == E.INVALID_REQUEST
    assert results_of(bad) == {("p", 0): E.INVALID_REQUEST, ("p", 1): E.INVALID_REQUEST}


def alter_partition(version, broker_id, epoch, topic, partition, isr, *, leader_epoch,
                    partition_epoch, member_epochs=None):
    cls = m.AlterPartitionRequest
    part = cls.PartitionData(partition_index=partition, leader_epoch=leader_epoch,
                             partition_epoch=partition_epoch)
    if version >= 3:
        part.new_isr_with_epochs = [cls.BrokerState(broker_id=b, broker_epoch=(
            member_epochs or {}).get(b, -1)) for b in isr]
    else:
        part.new_isr = list(isr)
    data = cls.TopicData(partitions=[part])
    if version >= 2:
        data.topic_id = topic.topic_id
    else:
        data.topic_name = topic.name
    return cls(broker_id=broker_id, broker_epoch=epoch, topics=[data])


@pytest.mark.parametrize("version", versions(m.AlterPartitionRequest))
def test_alter_partition_every_version(cluster, version):
    facade, epochs = cluster
    call(facade, create_topics(("isr", -1, -1, {0: [1, 2, 3]})), 7)
    topic = facade.image.topic("isr")
    p = topic.partitions[0]
    body = alter_partition(version, 1, epochs[1], topic, 0, [1, 2], leader_epoch=p.leader_epoch,
                           partition_epoch=p.partition_epoch, member_epochs=epochs)
    response = call(facade, body, version)
    assert response.error_code == 0
    (data,) = response.topics
    assert (data.topic_id if version >= 2 else data.topic_name) == (
        topic.topic_id if version >= 2 else "isr")
    (part,) = data.partitions
    after = facade.image.topic("isr").partitions[0]
    assert after.isr == [1, 2]
    assert (part.error_code, part.leader_id, part.leader_epoch, part.isr,
            part.partition_epoch) == (0, 1, after.leader_epoch, [1, 2], after.partition_epoch)
    assert after.partition_epoch == p.partition_epoch + 1


def test_alter_partition_errors(cluster):
    facade, epochs = cluster
    call(facade, create_topics(("isr", -1, -1, {0: [1, 2, 3]})), 7)
    topic = facade.image.topic("isr")
    p = topic.partitions[0]
    common = dict(leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch)
    stale = call(facade, alter_partition(3, 1, epochs[1] + 1, topic, 0, [1, 2], **common), 3)
    assert (stale.error_code, stale.topics) == (E.STALE_BROKER_EPOCH, [])
    wrong_version = call(facade, alter_partition(
        2, 1, epochs[1], topic, 0, [1, 2], leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch + 5), 2)
    assert wrong_version.topics[0].partitions[0].error_code == E.INVALID_UPDATE_VERSION
    member = call(facade, alter_partition(3, 1, epochs[1], topic, 0, [1, 2], **common,
                                          member_epochs={2: epochs[2] + 1}), 3)
    assert member.topics[0].partitions[0].error_code == E.INELIGIBLE_REPLICA

    class Gone:
        topic_id = incarnation(77)
        name = "gone"
    assert call(facade, alter_partition(2, 1, epochs[1], Gone, 0, [1], **common), 2) \
        .topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_ID
    assert call(facade, alter_partition(1, 1, epochs[1], Gone, 0, [1], **common), 1) \
        .topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    assert facade.image.topic("isr").partitions[0] == p


# ------------------------------------------------------------------------------ reads

@pytest.mark.parametrize("version", versions(m.DescribeClusterRequest))
def test_describe_cluster_every_version(cluster, version):
    facade, epochs = cluster
    assert call(facade, heartbeat(3, epochs[3], want_fence=True), 1).is_fenced
    brokers = call(facade, m.DescribeClusterRequest(), version)
    assert (brokers.error_code, brokers.cluster_id, brokers.controller_id) == (0, CLUSTER_ID, 1)
    assert [(b.broker_id, b.host, b.port) for b in brokers.brokers] == [
        (1, "127.0.0.1", 9091), (2, "127.0.0.1", 9092)]
    # kraftcore's tagged extension: the registration epoch, at every version.
    assert [b.broker_epoch for b in brokers.brokers] == [epochs[1], epochs[2]]
    assert all(e >= 0 for e in epochs.values())
    if version >= 1:
        controllers = call(facade, m.DescribeClusterRequest(endpoint_type=2), version)
        assert controllers.endpoint_type == 2 and controllers.controller_id == 1
        assert {b.broker_id: (b.host, b.port) for b in controllers.brokers} == CONTROLLERS
        assert {b.broker_epoch for b in controllers.brokers} == {-1}
        unknown = call(facade, m.DescribeClusterRequest(endpoint_type=7), version)
        assert unknown.error_code == E.UNSUPPORTED_ENDPOINT_TYPE
    if version >= 2:
        everyone = call(facade, m.DescribeClusterRequest(include_fenced_brokers=True), version)
        assert [(b.broker_id, b.is_fenced, b.broker_epoch) for b in everyone.brokers] == [
            (1, False, epochs[1]), (2, False, epochs[2]), (3, True, epochs[3])]


def metadata(version, names=None, ids=None):
    cls = m.MetadataRequest
    if names is None and ids is None:
        topics = [] if version == 0 else None
    else:
        topics = [cls.MetadataRequestTopic(name=n) for n in names or ()]
        topics += [cls.MetadataRequestTopic(name=None, topic_id=i) for i in ids or ()]
    body = cls(topics=topics)
    if version >= 4:
        body.allow_auto_topic_creation = False
    return body


@pytest.mark.parametrize("version", versions(m.MetadataRequest))
def test_metadata_every_version(cluster, version):
    facade, epochs = cluster
    call(facade, create_topics(("b", -1, -1, {0: [2, 3]}), ("a", 1, 1),
                               ("c", -1, -1, {0: [3]})), 7)
    assert call(facade, heartbeat(3, epochs[3], want_fence=True), 1).is_fenced
    response = call(facade, metadata(version), version)
    assert [b.node_id for b in response.brokers] == [1, 2]  # the fenced broker is hidden
    assert [t.name for t in response.topics] == ["a", "b", "c"]
    if version >= 1:
        assert response.controller_id == 1
    if version >= 2:
        assert response.cluster_id == CLUSTER_ID
    b = response.topics[1]
    assert b.error_code == 0
    if version >= 10:
        assert b.topic_id == facade.image.topic("b").topic_id
    (p0,) = b.partitions
    assert (p0.error_code, p0.leader_id, p0.replica_nodes, p0.isr_nodes) == (0, 2, [2, 3], [2])
    # Topic c lived only on the fenced broker: no leader.
    (p1,) = response.topics[2].partitions
    assert (p1.error_code, p1.leader_id, p1.replica_nodes) == (E.LEADER_NOT_AVAILABLE, -1, [3])
    if version >= 5:
        assert p0.offline_replicas == [3] and p1.offline_replicas == [3]
    one = call(facade, metadata(version, names=["b", "missing", "b"]), version)
    assert [(t.name, t.error_code) for t in one.topics] == [
        ("b", 0), ("missing", E.UNKNOWN_TOPIC_OR_PARTITION)]
    if version >= 12:
        by_id = call(facade, metadata(version, ids=[facade.image.topic("a").topic_id,
                                                    incarnation(5)]), version)
        assert [(t.name, t.error_code) for t in by_id.topics] == [
            ("a", 0), (None, E.UNKNOWN_TOPIC_ID)]


def test_metadata_hides_a_broker_in_controlled_shutdown(cluster):
    facade, epochs = cluster
    call(facade, create_topics(("t", -1, -1, {0: [3, 1]})), 7)
    beat = call(facade, heartbeat(3, epochs[3], want_shut_down=True), 1)
    # It led t-0: the leadership moves away and it stays unfenced, in controlled shutdown.
    assert (beat.is_fenced, beat.should_shut_down) == (False, False)
    assert facade.image.brokers[3].in_controlled_shutdown
    response = call(facade, metadata(12), 12)
    assert [b.node_id for b in response.brokers] == [1, 2]
    described = call(facade, m.DescribeClusterRequest(include_fenced_brokers=True), 2)
    assert [(b.broker_id, b.is_fenced) for b in described.brokers] == [
        (1, False), (2, False), (3, False)]


# ------------------------------------------------------------------------------ NOT_CONTROLLER

@pytest.mark.parametrize("raise_at_once", [False, True])
def test_not_controller_everywhere(cluster, raise_at_once):
    facade, epochs = cluster
    call(facade, create_topics(("t", 1, 1)), 7)
    standby = StandbyFacade(facade.image, raise_at_once=raise_at_once)
    topic = facade.image.topic("t")
    p = topic.partitions[0]
    NC = E.NOT_CONTROLLER

    assert call(standby, registration(9), 4).error_code == NC
    assert call(standby, heartbeat(1, epochs[1]), 1).error_code == NC
    assert call(standby, m.UnregisterBrokerRequest(broker_id=1), 0).error_code == NC
    created = call(standby, create_topics(("x", 1, 1), ("y", 1, 1)), 7)
    assert codes(created.topics) == {"x": NC, "y": NC}
    assert "node 1 is the active controller" in created.topics[0].error_message
    deleted = call(standby, delete_topics(6, ("t", ZERO_UUID)), 6)
    assert codes(deleted.responses) == {"t": NC}
    grown = call(standby, create_partitions(("t", 2, None)), 3)
    assert codes(grown.results) == {"t": NC}
    altered = call(standby, alter_configs((CONFIG_TOPIC, "t", [("min.insync.replicas",
                                                                api.OP_SET, "1")])), 1)
    assert altered.responses[0].error_code == NC
    elected = call(standby, elect(0, {"t": [0]}), 2)
    assert elected.error_code == NC and results_of(elected) == {("t", 0): NC}
    assert results_of(call(standby, elect(0, {"t": [0]}), 0)) == {("t", 0): NC}
    isr = call(standby, alter_partition(3, 1, epochs[1], topic, 0, [1], leader_epoch=
                                        p.leader_epoch, partition_epoch=p.partition_epoch), 3)
    assert (isr.error_code, isr.topics) == (NC, [])
    # Reads are answered from the standby's own image.
    assert call(standby, metadata(12, names=["t"]), 12).topics[0].error_code == 0
    assert call(standby, m.DescribeClusterRequest(endpoint_type=2), 1).controller_id == 1
    read = call(standby, describe_configs((CONFIG_TOPIC, "t", None)), 4)
    assert read.results[0].error_code == 0 and read.results[0].configs
    assert facade.image.topic("x") is None


# ------------------------------------------------------------------------------ failures

def test_timeout_answers_request_timed_out(cluster):
    facade, _ = cluster
    stuck = FailingFacade(facade.image, None)
    response = call(stuck, create_topics(("slow", 1, 1), timeout_ms=5), 7)
    assert codes(response.topics) == {"slow": E.REQUEST_TIMED_OUT}
    assert "may still take effect" in response.topics[0].error_message


def test_a_facade_may_hand_back_the_controllers_own_future(quorum):
    """`submit` returning the concurrent.futures.Future of QuorumController works too."""
    class Direct(LocalFacade):
        def submit(self, method, *args, **kwargs):
            future = getattr(self.quorum.controller, method)(*args, **kwargs)
            self.quorum.run()
            return future

    facade = Direct(quorum)
    assert call(facade, registration(3), 4).broker_epoch == facade.image.brokers[3].broker_epoch


def test_unexpected_errors_do_not_escape(cluster):
    facade, _ = cluster
    bad_input = FailingFacade(facade.image, ValueError("broker id out of range"))
    assert call(bad_input, registration(1), 4).error_code == E.INVALID_REQUEST
    bug = FailingFacade(facade.image, RuntimeError("boom"))
    created = call(bug, create_topics(("x", 1, 1)), 7)
    assert codes(created.topics) == {"x": E.UNKNOWN_SERVER_ERROR}
    assert call(bug, m.UnregisterBrokerRequest(broker_id=1), 0).error_code == \
        E.UNKNOWN_SERVER_ERROR


def test_a_request_that_is_not_a_controller_api(facade):
    from tests.net.helpers import vote

    response = call(facade, vote(3), 2)
    assert response.error_code == E.INVALID_REQUEST
    assert facade.submitted == []
    assert 52 not in api.CONTROLLER_API_KEYS and 62 in api.CONTROLLER_API_KEYS


def test_error_response_builders_cover_every_version():
    """A whole-request error in the shape of every controller API at every version still
    encodes."""
    from kraftcore.protocol.apis import API_BY_KEY

    for key in sorted(api.CONTROLLER_API_KEYS):
        request_cls = API_BY_KEY[key].request
        for version in versions(request_cls):
            body = request_cls()
            response = api.error_response(key, version, body, E.NOT_CONTROLLER, "elsewhere")
            response.encode(version)


# ------------------------------------------------------------------------------ fuzz

_FUZZ = {}


def _fuzz_facade():
    if "facade" not in _FUZZ:
        quorum = LocalQuorum(seed=3)
        facade = LocalFacade(quorum)
        for b in (1, 2, 3):
            add_broker(facade, b)
        call(facade, create_topics(("t", 3, 2), ("u", 1, 1)), 7)
        _FUZZ["facade"] = facade
    return _FUZZ["facade"]


@pytest.mark.parametrize("key", sorted(api.CONTROLLER_API_KEYS))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_request_gets_an_encodable_answer(key, data):
    """Arbitrary well-formed requests of every controller API at every version: the answer
    is that API's response, it encodes at the request's version, and no request produces
    UNKNOWN_SERVER_ERROR (which would mean an exception nobody meant)."""
    from kraftcore.protocol.apis import API_BY_KEY

    request_cls = API_BY_KEY[key].request
    version = data.draw(st.sampled_from(list(versions(request_cls))))
    body = data.draw(message_at(request_cls, version))
    response = call(_fuzz_facade(), body, version)
    assert E.UNKNOWN_SERVER_ERROR not in _error_codes(response)


def _error_codes(obj):
    found = []
    for f in type(obj)._fields:
        value = getattr(obj, f.attr)
        if f.attr == "error_code":
            found.append(value)
        elif isinstance(value, list):
            for item in value:
                if hasattr(type(item), "_fields"):
                    found += _error_codes(item)
    return found
