"""The controller's Kafka RPCs (`kraftcore.apis.controller`) against a real
`QuorumController` over a one-voter `LocalQuorum`: every request goes through the wire
(request encoded and decoded at its version, the response encoded and decoded back), at
every version the module claims, with the error paths Kafka defines and NOT_CONTROLLER
from a standby."""

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kraftcore.apis.controller import CONTROLLER_API_KEYS, OP_APPEND, OP_DELETE, OP_SET
from kraftcore.apis.reads import CONFIG_SOURCE_DEFAULT, CONFIG_SOURCE_TOPIC
from kraftcore.controller.local import LocalQuorum
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.types import ZERO_UUID

from tests.apis.helpers import (FailingFacade, LocalFacade, StandbyFacade, add_broker,
                                alter_configs, call, codes, create_topics, describe_configs,
                                heartbeat, incarnation, metadata, registration, versions)
from tests.protocol.strategies import message_at


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


def _controller_registration(controller_id, port, **fields):
    cls = m.ControllerRegistrationRequest
    fields.setdefault("features", [cls.Feature(name="metadata.version", min_supported_version=1,
                                               max_supported_version=21)])
    return cls(controller_id=controller_id, incarnation_id=incarnation(controller_id),
               listeners=[cls.Listener(name="CONTROLLER", host="127.0.0.1", port=port,
                                       security_protocol=0)], **fields)


def test_controller_registration_writes_the_record_and_describe_cluster_lists_it(facade):
    assert call(facade, _controller_registration(2, 9192), 0).error_code == 0
    record = facade.image.controllers[2]
    assert (record.incarnation_id, record.zk_migration_ready) == (incarnation(2), False)
    assert [(e.name, e.host, e.port, e.security_protocol) for e in record.end_points] == \
        [("CONTROLLER", "127.0.0.1", 9192, 0)]
    assert [(f.name, f.min_supported_version, f.max_supported_version)
            for f in record.features] == [("metadata.version", 1, 21)]
    # A new incarnation replaces the registration (a restarted controller moved).
    body = _controller_registration(2, 9292)
    body.incarnation_id = incarnation(22)
    assert call(facade, body, 0).error_code == 0
    assert facade.image.controllers[2].incarnation_id == incarnation(22)
    assert facade.image.controller_endpoints("CONTROLLER") == {2: ("127.0.0.1", 9292)}


def test_controller_registration_errors(facade):
    none = call(facade, _controller_registration(2, 9192, features=[]), 0)
    assert none.error_code == E.UNSUPPORTED_VERSION  # no features: 3.0-IV1 only
    assert "metadata.version 1-1" in none.error_message
    zk = call(facade, _controller_registration(2, 9192, zk_migration_ready=True), 0)
    assert zk.error_code == E.INVALID_REQUEST and "ZooKeeper" in zk.error_message
    twice = _controller_registration(2, 9192)
    twice.listeners.append(twice.listeners[0])
    assert call(facade, twice, 0).error_code == E.INVALID_REGISTRATION
    assert call(facade, _controller_registration(-5, 9192), 0).error_code == E.INVALID_REQUEST
    assert facade.image.controllers == {}


def test_controller_registration_needs_metadata_version_3_7():
    from kraftcore.controller.config import ControllerConfig
    from kraftcore.metadata.records import METADATA_VERSION_LEVELS

    old = LocalFacade(LocalQuorum(config=ControllerConfig(
        bootstrap_metadata_version=METADATA_VERSION_LEVELS["3.6-IV2"])))
    old.quorum.run()
    refused = call(old, _controller_registration(2, 9192), 0)
    assert refused.error_code == E.UNSUPPORTED_VERSION
    assert "3.7-IV0" in refused.error_message
    assert old.image.controllers == {}


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
        assert configs == {"min.insync.replicas": ("2", CONFIG_SOURCE_TOPIC),
                           "unclean.leader.election.enable": ("false",
                                                              CONFIG_SOURCE_DEFAULT)}
    else:
        assert (result.num_partitions, result.replication_factor) == (-1, -1)


def test_create_topics_errors_per_topic(cluster):
    facade, _ = cluster
    call(facade, create_topics(("exists", 1, 1)), 7)
    body = create_topics(("dup", 1, 1), ("dup", 2, 1), ("exists", 1, 1), ("big", 1, 9),
                         ("conf", 1, 1, {}, {"retention.ms": "-5"}), ("bad name!", 1, 1),
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


@pytest.mark.parametrize("version", versions(m.IncrementalAlterConfigsRequest))
def test_incremental_alter_configs_every_version(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1, {}, {"min.insync.replicas": "1"})), 7)
    response = call(facade, alter_configs(
        (CONFIG_TOPIC, "t", [("min.insync.replicas", OP_SET, "2"),
                             ("unclean.leader.election.enable", OP_SET, "false")]),
        (CONFIG_BROKER, "", [("min.insync.replicas", OP_SET, "3")])), version)
    assert [(r.resource_type, r.resource_name, r.error_code) for r in response.responses] == [
        (CONFIG_TOPIC, "t", 0), (CONFIG_BROKER, "", 0)]
    assert facade.image.configs[(CONFIG_TOPIC, "t")] == {
        "min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert facade.image.configs[(CONFIG_BROKER, "")] == {"min.insync.replicas": "3"}
    deleted = call(facade, alter_configs(
        (CONFIG_TOPIC, "t", [("min.insync.replicas", OP_DELETE, None)])), version)
    assert deleted.responses[0].error_code == 0
    assert facade.image.configs[(CONFIG_TOPIC, "t")] == {"unclean.leader.election.enable":
                                                         "false"}


def test_incremental_alter_configs_errors(cluster):
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1)), 7)
    response = call(facade, alter_configs(
        (CONFIG_TOPIC, "missing", [("min.insync.replicas", OP_SET, "2")]),
        (CONFIG_TOPIC, "t", [("retention.ms", OP_SET, "-5")]),
        (CONFIG_BROKER, "", [("min.insync.replicas", OP_APPEND, "2")]),
        (CONFIG_BROKER, "1", [("min.insync.replicas", 9, "2")]),
        (CONFIG_BROKER, "2", [("min.insync.replicas", OP_SET, None)]),
        (CONFIG_BROKER, "3", [("min.insync.replicas", OP_SET, "2"),
                              ("min.insync.replicas", OP_SET, "3")]),
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
                                                                OP_SET, "1")])), 1)
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
    assert 52 not in CONTROLLER_API_KEYS and 62 in CONTROLLER_API_KEYS


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


@pytest.mark.parametrize("key", sorted(CONTROLLER_API_KEYS))
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
