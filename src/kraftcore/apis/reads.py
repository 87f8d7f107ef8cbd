"""The answers any role reads from its committed `MetadataImage`: Metadata (3),
DescribeCluster (60) and DescribeConfigs (32) (kafka-facts §6.2-§6.5). A controller answers
them from the image its controller replayed, a broker Metadata from the image it follows,
so a client sees the same cluster from either.

The handlers change nothing and submit nothing; they read the facade's:

* `image`: the committed `MetadataImage`;
* `cluster_id`; `controller_id()`: the active controller's id or None;
* `controllers()`: {voter id: (host, port)} of the controller listeners (DescribeCluster's
  controller endpoints, and which node ids DescribeConfigs takes as a broker resource).

| API (key) | versions | answer |
|---|---|---|
| Metadata (3) | 0-13 | active brokers (`visible_brokers`), topics, partitions |
| DescribeCluster (60) | 0-2 | controllers() (endpoint type 2) or the image's brokers (1) |
| DescribeConfigs (32) | 0-4 | topic, cluster default (broker "") or node configs |

DescribeCluster's brokers carry kraftcore's tagged BrokerEpoch (tag 10000, their
registration epoch), which Kafka clients skip as an unknown tag.

DescribeConfigs answers from the image alone: a config's levels are the topic's own (or the
node's own), the cluster default (broker resource "") and Kafka's default for the two
configs the controller manages; no static (server.properties) values, Documentation is
null, and ReadOnly is false. Other resource types are INVALID_REQUEST per resource.
"""

from kraftcore.apis.errors import invalid_request
from kraftcore.broker.metadata import visible_brokers
from kraftcore.controller.replication import (MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION,
                                             topic_name_error)
from kraftcore.errors import ControllerError
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import ZERO_UUID

__all__ = ["metadata", "describe_cluster", "describe_configs", "broker_endpoint",
           "ENDPOINT_TYPE_BROKER", "ENDPOINT_TYPE_CONTROLLER", "CONFIG_DEFAULTS",
           "CONFIG_SOURCE_TOPIC", "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER", "CONFIG_SOURCE_DEFAULT", "INTERNAL_TOPICS",
           "TOPIC_AUTHORIZED_OPERATIONS", "CLUSTER_AUTHORIZED_OPERATIONS"]

# DescribeCluster EndpointType (KIP-919).
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
# ConfigSource values (Kafka's DescribeConfigsResponse.ConfigSource), in DescribeConfigs
# v1+ and CreateTopics v5+ results. A cluster default (broker resource "") is a dynamic
# default broker config (3); a broker's own (broker resource "<id>") a dynamic broker config.
CONFIG_SOURCE_UNKNOWN = 0
CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_DYNAMIC_BROKER = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER = 3
CONFIG_SOURCE_STATIC_BROKER = 4
CONFIG_SOURCE_DEFAULT = 5
CONFIG_SOURCE_DYNAMIC_BROKER_LOGGER = 6
# ConfigType values (DescribeConfigs v3+).
CONFIG_TYPE_UNKNOWN, CONFIG_TYPE_BOOLEAN, CONFIG_TYPE_INT = 0, 1, 3
# Kafka's defaults of the configs kraftcore's controller manages, and their types.
CONFIG_DEFAULTS = {MIN_INSYNC_REPLICAS: "1", UNCLEAN_LEADER_ELECTION: "false"}
CONFIG_TYPES = {MIN_INSYNC_REPLICAS: CONFIG_TYPE_INT, UNCLEAN_LEADER_ELECTION: CONFIG_TYPE_BOOLEAN}

_E = ErrorCode


def broker_endpoint(broker, listener=None):
    """(host, port) of `broker` on listener `listener`, the one the request came in on
    (Kafka answers with the endpoints of that listener, so a client that reached a TLS
    listener is sent to the TLS listeners); None when the broker has no such listener.
    `listener` None (a controller's answer): the broker's first registered listener."""
    for ep in broker.end_points:
        if listener is None or ep.name == listener:
            return ep.host, ep.port
    return None


def _endpoint(broker, facade):
    return broker_endpoint(broker, getattr(facade, "listener_name", None))


def _controller_id(facade):
    cid = facade.controller_id()
    return -1 if cid is None else cid


# ------------------------------------------------------------------------------ DescribeCluster

async def describe_cluster(facade, version, body):
    cls = m.DescribeClusterResponse
    endpoint_type = body.endpoint_type if version >= 1 else ENDPOINT_TYPE_BROKER
    brokers = []
    if endpoint_type == ENDPOINT_TYPE_CONTROLLER:
        for node_id, (host, port) in sorted(facade.controllers().items()):
            brokers.append(cls.DescribeClusterBroker(broker_id=node_id, host=host, port=port))
    elif endpoint_type == ENDPOINT_TYPE_BROKER:
        include_fenced = version >= 2 and body.include_fenced_brokers
        image = facade.image
        for broker_id in sorted(image.brokers):
            broker = image.brokers[broker_id]
            endpoint = _endpoint(broker, facade)
            if endpoint is None or (broker.fenced and not include_fenced):
                continue
            entry = cls.DescribeClusterBroker(broker_id=broker_id, host=endpoint[0],
                                              port=endpoint[1], rack=broker.rack,
                                              broker_epoch=broker.broker_epoch)
            if version >= 2:
                entry.is_fenced = bool(broker.fenced)
            brokers.append(entry)
    else:
        raise ControllerError(_E.UNSUPPORTED_ENDPOINT_TYPE,
                              f"unknown endpoint type {endpoint_type} (brokers 1, "
                              "controllers 2)")
    response = cls(error_code=0, cluster_id=facade.cluster_id,
                   controller_id=_controller_id(facade), brokers=brokers)
    if version >= 1:
        response.endpoint_type = endpoint_type
    return response


# ------------------------------------------------------------------------------ Metadata

# The topics Kafka counts as internal (IsInternal, whether they exist or not): the group and
# transaction coordinators' and the share groups' state.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# Authorized operations (KIP-430) are a bit field of ACL operation codes. kraftcore has no
# authorizer, so a client may do every operation the resource type has, which is what Kafka
# answers without an authorizer too: for a topic READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7,
# DESCRIBE 8, DESCRIBE_CONFIGS 10 and ALTER_CONFIGS 11; for the cluster CREATE 5, ALTER 7,
# DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11 and IDEMPOTENT_WRITE 12.
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))


def _metadata_topic(cls, version, image, topic, alive):
    partitions = []
    for pid in sorted(topic.partitions):
        p = topic.partitions[pid]
        leader = p.leader if p.leader in alive else -1
        offline = [r for r in p.replicas
                   if r not in image.brokers or image.brokers[r].fenced]
        partitions.append(cls.MetadataResponsePartition(
            error_code=0 if leader != -1 else _E.LEADER_NOT_AVAILABLE, partition_index=pid,
            leader_id=leader, leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
            isr_nodes=list(p.isr), offline_replicas=offline))
    return cls.MetadataResponseTopic(error_code=0, name=topic.name, topic_id=topic.topic_id,
                                     is_internal=topic.name in INTERNAL_TOPICS,
                                     partitions=partitions)


def _metadata_by_name(cls, version, image, wanted, alive):
    """The answer for topics named (kraftcore never creates a topic a Metadata asks for:
    auto.create.topics.enable is false). A name that cannot name a topic is
    INVALID_TOPIC_EXCEPTION, one that names no topic UNKNOWN_TOPIC_OR_PARTITION."""
    topics = []
    for name in dict.fromkeys(t.name for t in wanted):
        if name is None:  # (v12+: a topic neither named nor given by id)
            topics.append(cls.MetadataResponseTopic(error_code=_E.INVALID_REQUEST, name=None))
            continue
        topic = image.topic(name)
        if topic is not None:
            topics.append(_metadata_topic(cls, version, image, topic, alive))
            continue
        code = (_E.INVALID_TOPIC_EXCEPTION if topic_name_error(name) is not None
                else _E.UNKNOWN_TOPIC_OR_PARTITION)
        topics.append(cls.MetadataResponseTopic(error_code=code, name=name,
                                                is_internal=name in INTERNAL_TOPICS))
    return topics


def _metadata_by_id(cls, version, image, ids, alive):
    """The answer for topics given by id (v12+); UNKNOWN_TOPIC_ID, with a null name, for an
    id that names no topic."""
    topics = []
    for topic_id in dict.fromkeys(ids):
        topic = image.topics.get(topic_id)
        if topic is None:
            topics.append(cls.MetadataResponseTopic(error_code=_E.UNKNOWN_TOPIC_ID, name=None,
                                                    topic_id=topic_id))
        else:
            topics.append(_metadata_topic(cls, version, image, topic, alive))
    return topics


async def metadata(facade, version, body):
    """Brokers, then the topics asked for: all of them (Topics null, or empty at v0), those
    named, or (v12+) those given by id. A request that gives any topic id is answered by id
    alone: its entries without one are left out, as Kafka does. Before v12 a topic id or a
    null name fails the whole request (INVALID_REQUEST). Authorized operations are answered
    when asked for (`TOPIC_AUTHORIZED_OPERATIONS` on every topic but an unknown id,
    `CLUSTER_AUTHORIZED_OPERATIONS` at v8-10)."""
    cls = m.MetadataResponse
    image = facade.image
    wanted = body.topics
    if wanted and version < 12:
        for t in wanted:
            if t.name is None or t.topic_id != ZERO_UUID:
                raise invalid_request(f"Metadata v{version} takes topic names only (topic ids "
                                      "and null names from v12)")
    visible = visible_brokers(image)
    alive = {b.broker_id for b in visible}
    brokers = []
    for b in visible:
        endpoint = _endpoint(b, facade)
        if endpoint is not None:
            brokers.append(cls.MetadataResponseBroker(node_id=b.broker_id, host=endpoint[0],
                                                      port=endpoint[1], rack=b.rack))
    if wanted is None or (version == 0 and not wanted):
        topics = [_metadata_topic(cls, version, image, image.topic(name), alive)
                  for name in sorted(image.topic_ids)]
    else:
        ids = [t.topic_id for t in wanted if t.topic_id != ZERO_UUID]
        topics = (_metadata_by_id(cls, version, image, ids, alive) if ids
                  else _metadata_by_name(cls, version, image, wanted, alive))
    response = cls(brokers=brokers, cluster_id=facade.cluster_id,
                   controller_id=_controller_id(facade), topics=topics)
    if version >= 8 and body.include_topic_authorized_operations:
        for t in topics:
            if t.error_code not in (_E.UNKNOWN_TOPIC_ID, _E.INVALID_REQUEST):
                t.topic_authorized_operations = TOPIC_AUTHORIZED_OPERATIONS
    if 8 <= version <= 10 and body.include_cluster_authorized_operations:
        response.cluster_authorized_operations = CLUSTER_AUTHORIZED_OPERATIONS
    return response


# ------------------------------------------------------------------------------ DescribeConfigs

def _sensitive(name):
    """Whether a config's value must not be shown (Kafka's PASSWORD-type configs; kraftcore
    knows none of its own, but an image written by Kafka may hold such names)."""
    return "password" in name or name.endswith("jaas.config")


def _config_levels(facade, image, rtype, rname):
    """[(source, {name: value})] that decide the configs of resource (`rtype`, `rname`), in
    precedence order; raises ControllerError for a resource kraftcore cannot describe."""
    cluster = image.configs.get((CONFIG_BROKER, ""), {})
    defaults = [(CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER, cluster),
                (CONFIG_SOURCE_DEFAULT, CONFIG_DEFAULTS)]
    if rtype == CONFIG_TOPIC:
        if image.topic(rname) is None:
            raise ControllerError(_E.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"topic {rname!r} does not exist")
        return [(CONFIG_SOURCE_TOPIC, image.configs.get((CONFIG_TOPIC, rname), {}))] + defaults
    if rtype == CONFIG_BROKER:
        if rname == "":
            return defaults
        if not (rname.isascii() and rname.isdigit()):
            raise invalid_request(f"broker resource {rname!r} is neither '' (the cluster "
                                  "default) nor a node id")
        node_id = int(rname)
        if node_id not in image.brokers and node_id not in facade.controllers():
            raise invalid_request(f"node {node_id} is neither a registered broker nor a "
                                  "controller")
        own = image.configs.get((CONFIG_BROKER, str(node_id)), {})
        return [(CONFIG_SOURCE_DYNAMIC_BROKER, own)] + defaults
    raise invalid_request(f"resource type {rtype} cannot be described; use topic "
                          f"({CONFIG_TOPIC}) or broker ({CONFIG_BROKER})")


def _describe_resource(cls, version, facade, image, resource, synonyms):
    rtype, rname = resource.resource_type, resource.resource_name
    result = cls.DescribeConfigsResult(error_code=0, error_message=None, resource_type=rtype,
                                       resource_name=rname)
    try:
        levels = _config_levels(facade, image, rtype, rname)
    except ControllerError as exc:
        result.error_code, result.error_message = exc.code, str(exc)
        return result
    names = set()
    for _, configs in levels:
        names.update(configs)
    if resource.configuration_keys:  # null or empty: every config
        names &= set(resource.configuration_keys)
    for name in sorted(names):
        found = [(source, configs[name]) for source, configs in levels
                 if configs.get(name) is not None]
        if not found:
            continue
        source, value = found[0]
        hidden = _sensitive(name)
        entry = cls.DescribeConfigsResourceResult(name=name, value=None if hidden else value,
                                                  read_only=False, is_sensitive=hidden)
        if version == 0:
            entry.is_default = source == CONFIG_SOURCE_DEFAULT
        else:
            entry.config_source = source
            if synonyms:
                entry.synonyms = [cls.DescribeConfigsSynonym(
                    name=name, value=None if hidden else v, source=s) for s, v in found]
        if version >= 3:  # Documentation stays null: kraftcore keeps none
            entry.config_type = CONFIG_TYPES.get(name, CONFIG_TYPE_UNKNOWN)
        result.configs.append(entry)
    return result


async def describe_configs(facade, version, body):
    cls = m.DescribeConfigsResponse
    image = facade.image
    synonyms = version >= 1 and body.include_synonyms
    return cls(throttle_time_ms=0, results=[
        _describe_resource(cls, version, facade, image, r, synonyms)
        for r in body.resources])
