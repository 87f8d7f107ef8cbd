"""The answers read from the committed image (`kraftcore.apis.reads`): DescribeConfigs,
DescribeCluster and Metadata at every version, through the controller's handler over a
real `QuorumController`, as a client receives them."""

import pytest

from kraftcore.apis import reads
from kraftcore.apis.controller import OP_SET
from kraftcore.apis.reads import CONFIG_SOURCE_TOPIC
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC, MetadataImage
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E

from tests.apis.helpers import (CLUSTER_ID, CONTROLLERS, MIN_ISR, StandbyFacade, UNCLEAN,
                                alter_configs, call, configs_of, create_topics, describe_configs,
                                heartbeat, incarnation, metadata, versions)


# ------------------------------------------------------------------------------ configs

@pytest.mark.parametrize("version", versions(m.DescribeConfigsRequest))
def test_describe_configs_every_version(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("t", 1, 1, {}, {MIN_ISR: "2"}), ("u", 1, 1)), 7)
    call(facade, alter_configs((CONFIG_BROKER, "", [(UNCLEAN, OP_SET, "true")]),
                               (CONFIG_BROKER, "2", [(MIN_ISR, OP_SET, "3")])), 1)
    S = reads  # the ConfigSource constants
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
    assert configs_of(topic, 4)["retention.ms"] == ("1000", CONFIG_SOURCE_TOPIC)
    (secret,) = [c for c in default.configs if c.name.endswith("password")]
    assert (secret.value, secret.is_sensitive, secret.config_type) == (None, True, 0)
    assert [s.value for s in secret.synonyms] == [None]


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


NOT_REQUESTED = -(1 << 31)  # Kafka's "authorized operations not asked for"


@pytest.mark.parametrize("version", versions(m.MetadataRequest))
def test_metadata_names_errors_internal_topics_and_operations_as_kafka_does(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("ok", 1, 1), ("__transaction_state", 1, 1)), 7)
    names = ["ok", "__transaction_state", "missing", "__consumer_offsets", "bad name", ".",
             "..", "x" * 250, ""]
    body = metadata(version, names=names)
    if version >= 8:
        body.include_topic_authorized_operations = True
    if 8 <= version <= 10:
        body.include_cluster_authorized_operations = True
    response = call(facade, body, version)
    by_name = {t.name: t for t in response.topics}
    assert [t.name for t in response.topics] == names
    invalid = E.INVALID_TOPIC_EXCEPTION
    assert {n: t.error_code for n, t in by_name.items()} == {
        "ok": 0, "__transaction_state": 0, "missing": E.UNKNOWN_TOPIC_OR_PARTITION,
        "__consumer_offsets": E.UNKNOWN_TOPIC_OR_PARTITION, "bad name": invalid, ".": invalid,
        "..": invalid, "x" * 250: invalid, "": invalid}
    if version >= 1:  # IsInternal: Kafka's internal topic names, whether they exist or not
        assert {n for n, t in by_name.items() if t.is_internal} == {
            "__transaction_state", "__consumer_offsets"}
    # Without an authorizer every operation is allowed, on any topic named, and the cluster.
    ops = {t.topic_authorized_operations for t in response.topics}
    assert ops == ({reads.TOPIC_AUTHORIZED_OPERATIONS} if version >= 8 else {NOT_REQUESTED})
    assert reads.TOPIC_AUTHORIZED_OPERATIONS == 3576  # READ..ALTER_CONFIGS, Kafka's answer
    assert response.cluster_authorized_operations == (
        reads.CLUSTER_AUTHORIZED_OPERATIONS if 8 <= version <= 10 else NOT_REQUESTED)
    assert reads.CLUSTER_AUTHORIZED_OPERATIONS == 8096
    everything = call(facade, metadata(version), version)
    assert {t.name: t.topic_authorized_operations for t in everything.topics} == {
        "ok": NOT_REQUESTED, "__transaction_state": NOT_REQUESTED}
    assert everything.cluster_authorized_operations == NOT_REQUESTED
    if version >= 1:
        assert {t.name: t.is_internal for t in everything.topics} == {
            "ok": False, "__transaction_state": True}


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_metadata_by_topic_id_as_kafka_does(cluster, version):
    facade, _ = cluster
    call(facade, create_topics(("a", 1, 1), ("b", 1, 1)), 7)
    a = facade.image.topic("a").topic_id
    cls = m.MetadataRequest
    body = metadata(version, names=["b"], ids=[a, incarnation(5), a])
    body.include_topic_authorized_operations = True
    response = call(facade, body, version)
    if version < 12:
        # No topic ids before v12: the whole request is refused, as Kafka does.
        assert (response.brokers, response.controller_id) == ([], -1)
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("b", E.INVALID_REQUEST), ("", E.INVALID_REQUEST), ("", E.INVALID_REQUEST),
            ("", E.INVALID_REQUEST)]
        null = call(facade, cls(topics=[cls.MetadataRequestTopic(name=None)]), version)
        assert [(t.name, t.error_code) for t in null.topics] == [("", E.INVALID_REQUEST)]
        return
    # Given any id, the request is answered by id alone (the name "b" is left out); an
    # unknown id carries no authorized operations.
    assert [(t.name, t.topic_id, t.error_code, t.topic_authorized_operations)
            for t in response.topics] == [
        ("a", a, 0, reads.TOPIC_AUTHORIZED_OPERATIONS),
        (None, incarnation(5), E.UNKNOWN_TOPIC_ID, NOT_REQUESTED)]
