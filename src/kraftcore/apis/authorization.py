"""Which permission each request needs, as Kafka's request handlers ask their authorizer.

`required(request, image)` lists the checks a request must pass, each a tuple of the
(operation, resource type, resource name) that pass it; `refusal(request, image, allowed)`
runs them through `allowed(operation, resource type, name) -> bool` (name None: any
resource of the type) and returns the error answer of the first one that fails
(None: the request may go on). The answer is the request's whole-request error
(`kraftcore.apis.errors`), with Kafka's code for the resource: CLUSTER_AUTHORIZATION_FAILED,
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED or
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.

The rules:

* the requests between nodes need CLUSTER_ACTION on the cluster: Vote, BeginQuorumEpoch,
  EndQuorumEpoch, FetchSnapshot, UpdateRaftVoter, the controllers' Fetch of the metadata
  log, BrokerRegistration, BrokerHeartbeat, ControllerRegistration, AlterPartition,
  AllocateProducerIds, and a follower's Fetch and OffsetForLeaderEpoch on a broker;
* cluster changes need ALTER on the cluster (UnregisterBroker, ElectLeaders, AddRaftVoter,
  RemoveRaftVoter, CreateAcls, DeleteAcls, AlterUserScramCredentials); DescribeQuorum,
  DescribeAcls and DescribeUserScramCredentials need DESCRIBE on it;
* topics: Produce WRITE, a consumer's Fetch READ, ListOffsets and OffsetForLeaderEpoch
  DESCRIBE, CreateTopics CREATE (on the cluster or on the topic),
  DeleteTopics DELETE, CreatePartitions ALTER, DescribeConfigs DESCRIBE_CONFIGS and
  IncrementalAlterConfigs ALTER_CONFIGS (on the topic, or on the cluster for a broker's
  configs and loggers);
* groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit READ (and READ on
  the committed topics), OffsetFetch and DescribeGroups DESCRIBE, DeleteGroups and
  OffsetDelete DELETE, FindCoordinator DESCRIBE on the group (or the transactional id);
* InitProducerId: WRITE on its transactional id; without one, IDEMPOTENT_WRITE on the
  cluster or WRITE on any topic (KIP-679).

Where Kafka answers per topic or per group, kraftcore refuses the whole request when any of
them is refused (every item then carries the error). Answers that list what exists are
filtered as Kafka filters them (`filtered(request, answer, allowed)`): a Metadata request
for every topic lists only the topics the client may DESCRIBE, one naming topics gets
TOPIC_AUTHORIZATION_FAILED for each it may not DESCRIBE (whether it exists or not; the
brokers are listed as always), and ListGroups lists only the groups the client may
DESCRIBE (all of them with DESCRIBE on the cluster).
"""

from kraftcore.apis.errors import error_response
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.security.acls import AclOperation as Op
from kraftcore.security.acls import ResourceType as Res

__all__ = ["required", "refusal", "filtered", "CLUSTER_NAME"]

CLUSTER_NAME = "kafka-cluster"
_E = ErrorCode
_REFUSAL_CODE = {
    Res.CLUSTER: _E.CLUSTER_AUTHORIZATION_FAILED,
    Res.TOPIC: _E.TOPIC_AUTHORIZATION_FAILED,
    Res.GROUP: _E.GROUP_AUTHORIZATION_FAILED,
    Res.TRANSACTIONAL_ID: _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
# API key -> the operation it needs on the cluster, whatever it carries.
_CLUSTER = {
    52: Op.CLUSTER_ACTION, 53: Op.CLUSTER_ACTION, 54: Op.CLUSTER_ACTION,
    59: Op.CLUSTER_ACTION, 82: Op.CLUSTER_ACTION, 56: Op.CLUSTER_ACTION,
    62: Op.CLUSTER_ACTION, 63: Op.CLUSTER_ACTION, 70: Op.CLUSTER_ACTION,
    67: Op.CLUSTER_ACTION,
    64: Op.ALTER, 43: Op.ALTER, 80: Op.ALTER, 81: Op.ALTER, 30: Op.ALTER, 31: Op.ALTER,
    51: Op.ALTER,
    55: Op.DESCRIBE, 29: Op.DESCRIBE, 50: Op.DESCRIBE,
}
_GROUP_READ = (11, 12, 13, 14)  # JoinGroup, Heartbeat, LeaveGroup, SyncGroup
_CONFIG_TOPIC = 2  # DescribeConfigs / IncrementalAlterConfigs resource types
_CONFIG_CLUSTER_TYPES = (4, 8)  # BROKER, BROKER_LOGGER: the cluster's


def _one(operation, resource_type, name):
    """A check with one way to pass it."""
    return ((operation, resource_type, name),)


def _cluster(operation):
    return [_one(operation, Res.CLUSTER, CLUSTER_NAME)]


def _topics(operation, names):
    return [_one(operation, Res.TOPIC, name) for name in dict.fromkeys(names) if name]


def _name_of(image, name, topic_id):
    if name:
        return name
    topic = image.topics.get(topic_id) if image is not None else None
    return topic.name if topic is not None else None


def _replica_id(version, body):
    if version >= 15 and getattr(body, "replica_state", None) is not None:
        return body.replica_state.replica_id
    return getattr(body, "replica_id", -1)


def required(request, image, controller_listener=False):
    """The checks `request` needs, in order. A check is a tuple of the ways to pass it,
    each (operation, resource type, name), the first giving the refusal's code; a name of None stands for any resource of the
    type (Kafka's `authorizeByResourceType`). `controller_listener`: the request came to a
    controller (a Fetch there reads the metadata log)."""
    key, version, body = request.api_key, request.api_version, request.body
    operation = _CLUSTER.get(key)
    if operation is not None:
        return _cluster(operation)
    if key == 0:  # Produce
        return _topics(Op.WRITE, (_name_of(image, t.name, getattr(t, "topic_id", None))
                                  for t in body.topic_data))
    if key == 1:  # Fetch
        if controller_listener or _replica_id(version, body) >= 0:
            return _cluster(Op.CLUSTER_ACTION)
        return _topics(Op.READ, (_name_of(image, getattr(t, "topic", None),
                                          getattr(t, "topic_id", None)) for t in body.topics))
    if key == 2:  # ListOffsets
        return _topics(Op.DESCRIBE, (t.name for t in body.topics))
    if key == 23:  # OffsetForLeaderEpoch
        if getattr(body, "replica_id", -1) >= 0:
            return _cluster(Op.CLUSTER_ACTION)
        return _topics(Op.DESCRIBE, (t.topic for t in body.topics))
    if key == 19:  # CreateTopics: CREATE on the cluster, else on each topic
        return [((Op.CREATE, Res.TOPIC, name), (Op.CREATE, Res.CLUSTER, CLUSTER_NAME))
                for name in dict.fromkeys(t.name for t in body.topics)]
    if key == 20:  # DeleteTopics
        names = list(body.topic_names or ())
        names += [_name_of(image, t.name, t.topic_id) for t in (body.topics or ())]
        return _topics(Op.DELETE, names)
    if key == 37:  # CreatePartitions
        return _topics(Op.ALTER, (t.name for t in body.topics))
    if key in (32, 44):  # DescribeConfigs, IncrementalAlterConfigs
        operation = Op.DESCRIBE_CONFIGS if key == 32 else Op.ALTER_CONFIGS
        checks = []
        for resource in body.resources:
            if resource.resource_type == _CONFIG_TOPIC:
                checks.append(_one(operation, Res.TOPIC, resource.resource_name))
            elif resource.resource_type in _CONFIG_CLUSTER_TYPES:
                checks.append(_one(operation, Res.CLUSTER, CLUSTER_NAME))
        return checks
    if key in _GROUP_READ:
        return [_one(Op.READ, Res.GROUP, body.group_id)]
    if key == 8:  # OffsetCommit
        return [_one(Op.READ, Res.GROUP, body.group_id)] + _topics(
            Op.READ, (t.name for t in body.topics))
    if key == 9:  # OffsetFetch
        groups = [g.group_id for g in body.groups] if version >= 8 else [body.group_id]
        return [_one(Op.DESCRIBE, Res.GROUP, g) for g in groups]
    if key == 15:  # DescribeGroups
        return [_one(Op.DESCRIBE, Res.GROUP, g) for g in body.groups]
    if key == 42:  # DeleteGroups
        return [_one(Op.DELETE, Res.GROUP, g) for g in body.groups_names]
    if key == 47:  # OffsetDelete
        return [_one(Op.DELETE, Res.GROUP, body.group_id)]
    if key == 10:  # FindCoordinator
        keys = list(body.coordinator_keys) if version >= 4 else [body.key]
        resource = Res.TRANSACTIONAL_ID if body.key_type == 1 else Res.GROUP
        return [_one(Op.DESCRIBE, resource, k) for k in keys]
    if key == 22:  # InitProducerId
        if body.transactional_id:
            return [_one(Op.WRITE, Res.TRANSACTIONAL_ID, body.transactional_id)]
        # KIP-679: WRITE on any topic lets a producer be idempotent too
        return [((Op.IDEMPOTENT_WRITE, Res.CLUSTER, CLUSTER_NAME), (Op.WRITE, Res.TOPIC, None))]
    return []


def refusal(request, image, allowed, controller_listener=False):
    """The error answer of the first check `request` fails, or None when it passes all.
    `allowed(operation, resource type, name)`; a name of None: any resource of the type."""
    for ways in required(request, image, controller_listener):
        if any(allowed(*way) for way in ways):
            continue
        operation, resource_type, name = ways[0]  # the first way names the refusal
        code = _REFUSAL_CODE[resource_type]
        detail = f"{operation.name} on {resource_type.name.lower()} " + (
            repr(name) if name is not None else "any")
        answer = error_response(request.api_key, request.api_version, request.body, code,
                                f"not authorized: {detail}")
        if request.api_key == 1 and resource_type == Res.TOPIC:
            answer.error_code = 0  # as Kafka: the fetch goes on, its partitions are refused
        return answer
    return None


def filtered(request, answer, allowed):
    """`answer` to `request` without what the client may not see (the answer itself,
    changed in place)."""
    key = request.api_key
    if answer is None:
        return answer
    if key == 3:  # Metadata
        if not request.body.topics:  # of every topic: the ones the client may describe
            answer.topics = [t for t in answer.topics
                             if allowed(Op.DESCRIBE, Res.TOPIC, t.name)]
        else:  # of named topics: the others are refused, whether they exist or not
            answer.topics = [t if allowed(Op.DESCRIBE, Res.TOPIC, t.name) else
                             type(t)(name=t.name, topic_id=t.topic_id,
                                     error_code=_E.TOPIC_AUTHORIZATION_FAILED)
                             for t in answer.topics]
    elif key == 16 and not allowed(Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):  # ListGroups
        answer.groups = [g for g in answer.groups
                         if allowed(Op.DESCRIBE, Res.GROUP, g.group_id)]
    return answer
