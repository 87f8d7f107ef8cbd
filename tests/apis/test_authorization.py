"""What each request needs from the authorizer (kraftcore.apis.authorization): the checks,
the refusal answers with Kafka's codes, and the answers filtered to what a client may see."""

import pytest

from kraftcore.apis.authorization import CLUSTER_NAME, filtered, refusal, required
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.protocol.framing import Request
from kraftcore.security.acls import AclOperation as Op
from kraftcore.security.acls import ResourceType as Res
from kraftcore.types import Uuid

TOPIC_ID = Uuid.random(__import__("random").Random(3))


class Image:
    """The part of a metadata image the checks read: topic ids to names."""

    class Topic:
        name = "orders"

    topics = {TOPIC_ID: Topic()}


def request(body, version):
    return Request(body.api_key, version, 1, "test", body, None)


def produce(*names, version=9):
    return m.ProduceRequest(acks=-1, timeout_ms=100, topic_data=[
        m.ProduceRequest.TopicProduceData(name=n, partition_data=[]) for n in names])


CLUSTER_ACTION = [((Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME),)]


@pytest.mark.parametrize("body,version", [
    (m.BrokerRegistrationRequest(broker_id=2), 4),
    (m.BrokerHeartbeatRequest(broker_id=2, broker_epoch=5), 1),
    (m.VoteRequest(), 2),
    (m.BeginQuorumEpochRequest(), 1),
    (m.EndQuorumEpochRequest(), 1),
    (m.FetchSnapshotRequest(), 1),
    (m.AlterPartitionRequest(), 3),
    (m.ControllerRegistrationRequest(), 0),
    (m.AllocateProducerIdsRequest(), 0),
])
def test_the_requests_between_nodes_need_cluster_action(body, version):
    assert required(request(body, version), Image()) == CLUSTER_ACTION


def test_a_fetch_is_the_cluster_s_on_a_controller_or_from_a_follower():
    raft_fetch = m.FetchRequest(replica_id=-1, topics=[
        m.FetchRequest.FetchTopic(topic="__cluster_metadata", partitions=[])])
    assert required(request(raft_fetch, 12), Image(), controller_listener=True) == \
        CLUSTER_ACTION
    follower = m.FetchRequest(replica_id=3, topics=[])
    assert required(request(follower, 12), Image()) == CLUSTER_ACTION
    consumer = m.FetchRequest(replica_id=-1, topics=[
        m.FetchRequest.FetchTopic(topic_id=TOPIC_ID, partitions=[])])
    assert required(request(consumer, 13), Image()) == [((Op.READ, Res.TOPIC, "orders"),)]


def test_cluster_changes_need_alter_and_views_describe():
    alter = [((Op.ALTER, Res.CLUSTER, CLUSTER_NAME),)]
    assert required(request(m.UnregisterBrokerRequest(broker_id=2), 0), Image()) == alter
    assert required(request(m.CreateAclsRequest(creations=[]), 3), Image()) == alter
    assert required(request(m.DescribeAclsRequest(), 3), Image()) == \
        [((Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME),)]
    assert required(request(m.DescribeClusterRequest(), 1), Image()) == []  # as in Kafka


def test_topics_and_groups():
    assert required(request(produce("a", "b", "a"), 9), Image()) == [
        ((Op.WRITE, Res.TOPIC, "a"),), ((Op.WRITE, Res.TOPIC, "b"),)]
    commit = m.OffsetCommitRequest(group_id="g", topics=[
        m.OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[])])
    assert required(request(commit, 8), Image()) == [
        ((Op.READ, Res.GROUP, "g"),), ((Op.READ, Res.TOPIC, "t"),)]
    join = m.JoinGroupRequest(group_id="g", protocol_type="consumer", protocols=[])
    assert required(request(join, 9), Image()) == [((Op.READ, Res.GROUP, "g"),)]
    # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE, or WRITE on any topic
    assert required(request(m.InitProducerIdRequest(transactional_id=None), 4), Image()) == \
        [((Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME), (Op.WRITE, Res.TOPIC, None))]
    assert required(request(m.MetadataRequest(topics=None), 12), Image()) == []


def test_a_refusal_is_kafka_s_code_for_the_resource():
    def nothing(operation, resource_type, name):
        return False

    answer = refusal(request(m.BrokerHeartbeatRequest(broker_id=2, broker_epoch=5), 1),
                     Image(), nothing)
    assert answer.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    answer = refusal(request(produce("orders"), 9), Image(), nothing)
    (topic,) = answer.responses
    assert all(p.error_code == E.TOPIC_AUTHORIZATION_FAILED
               for p in topic.partition_responses)

    def only_orders(operation, resource_type, name):
        return resource_type == Res.TOPIC and name == "orders"

    assert refusal(request(produce("orders"), 9), Image(), only_orders) is None
    created = m.CreateTopicsRequest(topics=[
        m.CreateTopicsRequest.CreatableTopic(name="orders", num_partitions=1,
                                             replication_factor=1),
        m.CreateTopicsRequest.CreatableTopic(name="other", num_partitions=1,
                                             replication_factor=1)])
    answer = refusal(request(created, 7), Image(), only_orders)  # CREATE on "other": no
    assert {t.error_code for t in answer.topics} == {E.TOPIC_AUTHORIZATION_FAILED}
    group = m.JoinGroupRequest(group_id="g", protocol_type="consumer", protocols=[])
    assert refusal(request(group, 9), Image(), only_orders).error_code == \
        E.GROUP_AUTHORIZATION_FAILED


def test_lists_are_filtered_to_what_the_client_may_describe():
    def only_orders(operation, resource_type, name):
        return name == "orders"

    cls = m.MetadataResponse
    answer = cls(topics=[cls.MetadataResponseTopic(name="orders"),
                         cls.MetadataResponseTopic(name="secret")])
    filtered(request(m.MetadataRequest(topics=None), 12), answer, only_orders)
    assert [t.name for t in answer.topics] == ["orders"]
    groups = m.ListGroupsResponse(groups=[
        m.ListGroupsResponse.ListedGroup(group_id="orders"),
        m.ListGroupsResponse.ListedGroup(group_id="payroll")])
    filtered(request(m.ListGroupsRequest(), 4), groups, only_orders)
    assert [g.group_id for g in groups.groups] == ["orders"]


def test_a_consumer_s_refused_fetch_is_refused_per_partition():
    fetch = m.FetchRequest(replica_id=-1, topics=[m.FetchRequest.FetchTopic(
        topic="orders", partitions=[m.FetchRequest.FetchPartition(partition=0),
                                    m.FetchRequest.FetchPartition(partition=1)])])
    answer = refusal(request(fetch, 11), Image(), lambda *check: False)
    assert answer.error_code == 0
    (topic,) = answer.responses
    assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
        (0, E.TOPIC_AUTHORIZATION_FAILED), (1, E.TOPIC_AUTHORIZATION_FAILED)]


def test_an_idempotent_producer_with_write_on_some_topic_may_start():
    def writes_a_topic(operation, resource_type, name):
        return operation == Op.WRITE and resource_type == Res.TOPIC and name is None

    init = request(m.InitProducerIdRequest(transactional_id=None), 4)
    assert refusal(init, Image(), writes_a_topic) is None
    answer = refusal(init, Image(), lambda *check: False)
    assert answer.error_code == E.CLUSTER_AUTHORIZATION_FAILED  # as Kafka answers it


def test_a_metadata_request_keeps_its_brokers_and_refuses_topics_one_by_one():
    def only_orders(operation, resource_type, name):
        return name == "orders"

    cls = m.MetadataResponse
    body = m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name="orders"),
                                     m.MetadataRequest.MetadataRequestTopic(name="secret")])
    assert required(request(body, 12), Image()) == []
    answer = cls(brokers=[cls.MetadataResponseBroker(node_id=1, host="h", port=1)],
                 topics=[cls.MetadataResponseTopic(name="orders", error_code=0),
                         cls.MetadataResponseTopic(name="secret", error_code=3)])
    filtered(request(body, 12), answer, only_orders)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("orders", 0), ("secret", E.TOPIC_AUTHORIZATION_FAILED)]
    assert [b.node_id for b in answer.brokers] == [1]
