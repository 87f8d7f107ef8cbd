"""The controller's Kafka RPCs: a decoded request from the network becomes a
`QuorumController` operation, and its result or error becomes Kafka's response
(kafka-facts §6.2-§6.5, §8).

This module owns the mapping between the wire messages of `kraftcore.protocol.messages` and
the controller's Python API; it holds no state. The node process plugs it in:

    response = await handle_controller_request(facade, request)

`request` is a `kraftcore.protocol.framing.Request`; the answer is the response message for
`request.api_version` (the listener encodes it). `facade` is any object with:

* `submit(method, *args, **kwargs) -> asyncio.Future`: runs `QuorumController.<method>`
  and resolves with its result, or fails with its exception (`ControllerError` with
  `.code`; `NotControllerError`, code 41, on a standby or a deposed controller). A
  `concurrent.futures.Future` (what `QuorumController` returns) is accepted too, and
  `submit` may also raise at once;
* `image`: the committed `MetadataImage` (Metadata, DescribeCluster and DescribeConfigs
  read it);
* `node_id`; `controller_id()`: the active controller's id or None;
  `controllers()`: {voter id: (host, port)} of the controller listeners; `cluster_id`.

| API (key) | versions | controller operation |
|---|---|---|
| BrokerRegistration (62) | 0-4 | `register_broker` |
| BrokerHeartbeat (63) | 0-1 | `broker_heartbeat` |
| UnregisterBroker (64) | 0 | `unregister_broker` |
| CreateTopics (19) | 0-7 | `create_topics` |
| DeleteTopics (20) | 0-6, by name; by id from v6 | `delete_topics` |
| CreatePartitions (37) | 0-3 | `create_partitions`, one call per topic |
| IncrementalAlterConfigs (44) | 0-1 | `incremental_alter_configs` |
| ElectLeaders (43) | 0-2 | `elect_leaders` |
| AlterPartition (56) | 0-3 | `alter_partition`, one call per partition |
| DescribeCluster (60) | 0-2 | reads `controllers()` (endpoint type 2) or the image (1) |
| Metadata (3) | 0-13 | reads the image |
| DescribeConfigs (32) | 0-4 | reads the image: topic, cluster default (broker "") or node configs |
| ControllerRegistration (70) | 0 | none: answered UNSUPPORTED_VERSION (see below) |

DescribeCluster's brokers carry kraftcore's tagged BrokerEpoch (tag 10000, their
registration epoch), which Kafka clients skip as an unknown tag.

Error rules, as Kafka's `ControllerApis` and the requests' `getErrorResponse` have them:

* a per-item error (one topic, one partition, one config resource) goes into that item;
* an error of the whole request (NOT_CONTROLLER, REQUEST_TIMED_OUT, INVALID_REQUEST) goes
  into the response's top-level ErrorCode when the schema has one, and otherwise into
  every item the request named (CreateTopics, DeleteTopics, CreatePartitions,
  IncrementalAlterConfigs; ElectLeaders and Metadata v13 get both);
* bad input never raises: a value the controller cannot take (a malformed field, an
  unknown operation) is INVALID_REQUEST; an unexpected failure is UNKNOWN_SERVER_ERROR
  (logged). Every response is checked to encode at the request's version before it is
  returned, so the listener never has to drop a connection because of this module.

Deliberate limits, each answered explicitly rather than ignored:

* `validate_only` (CreateTopics v1+, CreatePartitions, IncrementalAlterConfigs): the
  controller has no dry-run mode, so such requests are refused with INVALID_REQUEST.
* APPEND / SUBTRACT config operations: kraftcore's two topic configs are not lists
  (INVALID_CONFIG, as Kafka answers for a non-list config).
* DescribeConfigs answers from the image alone: a config's levels are the topic's own (or
  the node's own), the cluster default (broker resource "") and Kafka's default for the two
  configs the controller manages; no static (server.properties) values, Documentation is
  null, and ReadOnly is false. Other resource types are INVALID_REQUEST per resource.
* ControllerRegistration: `QuorumController` keeps no controller registrations (the
  controller endpoints come from `controller.quorum.voters`); UNSUPPORTED_VERSION.
* A request's TimeoutMs > 0 bounds the wait for the commit (REQUEST_TIMED_OUT after it; the
  operation may still take effect). TimeoutMs <= 0 sets no bound of its own.

The inverse helpers are for the broker side of a node, which talks to the active
controller over the network and feeds `BrokerLifecycle` the results it would get from a
local controller: `registration_request` / `registration_result` and `heartbeat_request`
/ `heartbeat_result`.
"""

import asyncio
import concurrent.futures
import logging

from kraftcore.broker.metadata import visible_brokers
from kraftcore.controller import election as E
from kraftcore.controller.cluster import HeartbeatResult, RegistrationResult
from kraftcore.controller.replication import MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION, NewTopic
from kraftcore.errors import ControllerError, KraftcoreError, NotControllerError
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC, METADATA_VERSION
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.protocol import messages as m
from kraftcore.protocol.apis import API_BY_KEY
from kraftcore.protocol.error_codes import ErrorCode, error_name
from kraftcore.protocol.schema import in_range
from kraftcore.types import ZERO_UUID

__all__ = ["handle_controller_request", "error_response", "CONTROLLER_API_KEYS",
           "registration_request", "registration_result", "heartbeat_request",
           "heartbeat_result", "ENDPOINT_TYPE_BROKER", "ENDPOINT_TYPE_CONTROLLER"]

log = logging.getLogger("kraftcore.runtime")

# DescribeCluster EndpointType (KIP-919).
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPE_CONTROLLER = 2
# ElectLeaders ElectionType.
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
# IncrementalAlterConfigs ConfigOperation.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
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
# The most partitions one CreateTopics or CreatePartitions request may add (Kafka's
# ReplicationControlManager MAX_PARTITIONS_PER_BATCH): placement runs before the controller
# counts records, so a request for 2^31 partitions must be refused before it gets there.
PARTITIONS_PER_REQUEST_MAX = 10_000

_E = ErrorCode
# Exceptions a handler raises on a value it cannot take: the request's fault.
_INPUT_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                 KraftcoreError)


# ------------------------------------------------------------------------------ entry point

async def handle_controller_request(facade, request):
    """The response to `request` (a `framing.Request`) at its version; never raises for a
    request's content (see the module docstring)."""
    key, version, body = request.api_key, request.api_version, request.body
    handler = _HANDLERS.get(key)
    try:
        if handler is None:
            raise ControllerError(_E.INVALID_REQUEST, f"{_api_name(key)} is not a controller "
                                  "API; send it to the node that serves it")
        response = await handler(facade, version, body)
    except ControllerError as exc:  # NotControllerError included (code 41)
        response = error_response(key, version, body, exc.code, str(exc))
    except _INPUT_ERRORS as exc:
        log.warning("%s v%d: refused as INVALID_REQUEST: %r", _api_name(key), version, exc,
                    exc_info=True)
        response = error_response(key, version, body, _E.INVALID_REQUEST,
                                  f"the request could not be processed: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug must not escape to the listener
        log.exception("%s v%d: unexpected failure", _api_name(key), version)
        response = error_response(key, version, body, _E.UNKNOWN_SERVER_ERROR,
                                  f"unexpected server error: {exc!r}")
    try:
        response.encode(version)
    except Exception as exc:  # noqa: BLE001 - EncodeError: our bug, answered not raised
        log.error("%s v%d: the response does not encode (%s); answering "
                  "UNKNOWN_SERVER_ERROR", _api_name(key), version, exc)
        response = _bare_response(key, version, _E.UNKNOWN_SERVER_ERROR,
                                  f"the server could not encode its response: {exc}")
    return response


def _api_name(key):
    api = API_BY_KEY.get(key)
    return api.name if api is not None else f"API key {key}"


# ------------------------------------------------------------------------------ helpers

def _present(cls, attr, version):
    """Whether message class `cls` carries field `attr` at `version`."""
    for f in cls._fields:
        if f.attr == attr:
            return in_range(version, f.versions)
    return False


def _swallow(future):
    """Retrieve a future's outcome so an abandoned one (timed out) logs nothing."""
    if not future.cancelled():
        future.exception()


async def _call(facade, method, *args, timeout_ms=None, **kwargs):
    """Run `method` on the controller through the facade; `timeout_ms` > 0 bounds the wait
    (REQUEST_TIMED_OUT after it; the operation is not withdrawn)."""
    future = facade.submit(method, *args, **kwargs)
    if isinstance(future, concurrent.futures.Future):
        future = asyncio.wrap_future(future)
    future = asyncio.ensure_future(future)
    if timeout_ms is None or timeout_ms <= 0:
        return await future
    future.add_done_callback(_swallow)
    try:
        return await asyncio.wait_for(asyncio.shield(future), timeout_ms / 1000)
    except asyncio.TimeoutError:
        if future.done() and not future.cancelled():
            return future.result()
        raise ControllerError(_E.REQUEST_TIMED_OUT,
                              f"the controller did not commit the operation within "
                              f"{timeout_ms} ms; it may still take effect") from None


async def _outcome(awaitable):
    """(result, None), or (None, ControllerError) when the operation was refused."""
    try:
        return await awaitable, None
    except ControllerError as exc:
        return None, exc


def _invalid(message):
    return ControllerError(_E.INVALID_REQUEST, message)


def _duplicates(keys):
    seen, dups = set(), set()
    for k in keys:
        if k in seen:
            dups.add(k)
        seen.add(k)
    return dups


def _first_endpoint(broker):
    """The broker's first registered listener as (host, port), or None."""
    if not broker.end_points:
        return None
    ep = broker.end_points[0]
    return ep.host, ep.port


def _check_partition_total(total):
    if total > PARTITIONS_PER_REQUEST_MAX:
        raise ControllerError(_E.POLICY_VIOLATION,
                              f"the request would add {total} partitions; at most "
                              f"{PARTITIONS_PER_REQUEST_MAX} may be added per request")


def _controller_id(facade):
    cid = facade.controller_id()
    return -1 if cid is None else cid


# ------------------------------------------------------------------------------ brokers

async def _broker_registration(facade, version, body):
    if body.is_migrating_zk_broker:
        raise ControllerError(_E.BROKER_ID_NOT_REGISTERED,
                              f"broker {body.broker_id} registers as a migrating ZooKeeper "
                              "broker; kraftcore's controller does not support ZooKeeper "
                              "migration")
    listeners = tuple((ep.name, ep.host, ep.port, ep.security_protocol)
                      for ep in body.listeners)
    if _duplicates(name for name, _, _, _ in listeners):
        raise ControllerError(_E.INVALID_REGISTRATION,
                              f"broker {body.broker_id} registers two listeners with one name")
    features = {}
    for f in body.features:
        if f.name in features:
            raise _invalid(f"feature {f.name!r} appears twice in the registration")
        features[f.name] = (f.min_supported_version, f.max_supported_version)
    if _duplicates(body.log_dirs):
        raise ControllerError(_E.INVALID_REGISTRATION,
                              f"broker {body.broker_id} registers a log directory twice")
    result = await _call(facade, "register_broker", body.broker_id, body.incarnation_id,
                         cluster_id=body.cluster_id, rack=body.rack, listeners=listeners,
                         features=features, log_dirs=tuple(body.log_dirs))
    return m.BrokerRegistrationResponse(error_code=0, broker_epoch=result.broker_epoch)


async def _broker_heartbeat(facade, version, body):
    result = await _call(facade, "broker_heartbeat", body.broker_id, body.broker_epoch,
                         metadata_offset=body.current_metadata_offset,
                         want_fence=body.want_fence, want_shutdown=body.want_shut_down)
    return m.BrokerHeartbeatResponse(error_code=0, is_caught_up=result.is_caught_up,
                                     is_fenced=result.is_fenced,
                                     should_shut_down=result.should_shut_down)


async def _unregister_broker(facade, version, body):
    await _call(facade, "unregister_broker", body.broker_id)
    return m.UnregisterBrokerResponse(error_code=0)


async def _controller_registration(facade, version, body):
    raise ControllerError(_E.UNSUPPORTED_VERSION,
                          "kraftcore's controller keeps no controller registrations; the "
                          "controller endpoints come from controller.quorum.voters")


# ------------------------------------------------------------------------------ topics

def _validate_only(version, body, cls, attr="validate_only"):
    if _present(cls, attr, version) and getattr(body, attr):
        raise _invalid("validate_only is not supported: kraftcore's controller has no "
                       "dry-run mode; send the request without it")


def _topic_configs(image, name, configs):
    """CreateTopics v5+ `Configs` of a new topic: the configs kraftcore manages, with the
    value and source that apply to it."""
    cls = m.CreateTopicsResponse.CreatableTopicConfigs
    cluster = image.configs.get((CONFIG_BROKER, ""), {})
    out = []
    for key in sorted(CONFIG_DEFAULTS):
        if configs and key in configs:
            value, source = configs[key], CONFIG_SOURCE_TOPIC
        elif key in cluster:
            value, source = cluster[key], CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
        else:
            value, source = CONFIG_DEFAULTS[key], CONFIG_SOURCE_DEFAULT
        out.append(cls(name=key, value=value, read_only=False, config_source=source,
                       is_sensitive=False))
    return out


async def _create_topics(facade, version, body):
    cls = m.CreateTopicsResponse
    _validate_only(version, body, m.CreateTopicsRequest)
    _check_partition_total(sum(len(t.assignments) or max(t.num_partitions, 0)
                               for t in body.topics))
    duplicates = _duplicates(t.name for t in body.topics)
    refused = {}  # name -> (code, message), decided here
    new_topics = []
    for t in body.topics:
        if t.name in duplicates:
            refused[t.name] = (_E.INVALID_REQUEST, "Duplicate topic name.")
            continue
        try:
            assignments = None
            if t.assignments:
                if _duplicates(a.partition_index for a in t.assignments):
                    raise _invalid("an assignment names a partition twice")
                assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            configs = None
            if t.configs:
                if _duplicates(c.name for c in t.configs):
                    raise _invalid("a config is given twice")
                configs = {c.name: c.value for c in t.configs}
        except ControllerError as exc:
            refused[t.name] = (exc.code, str(exc))
            continue
        new_topics.append(NewTopic(t.name, t.num_partitions, t.replication_factor,
                                   assignments, configs))
    results = {}
    if new_topics:
        for result in await _call(facade, "create_topics", new_topics,
                                  timeout_ms=body.timeout_ms):
            results[result.name] = result
    configs_of = {t.name: t.configs for t in new_topics}
    image = facade.image
    topics = []
    for name in dict.fromkeys(t.name for t in body.topics):
        if name in refused:
            code, message = refused[name]
            topics.append(cls.CreatableTopicResult(name=name, error_code=code,
                                                   error_message=message))
            continue
        r = results[name]
        entry = cls.CreatableTopicResult(
            name=name, topic_id=r.topic_id or ZERO_UUID, error_code=r.error_code,
            error_message=r.error_message, num_partitions=r.num_partitions,
            replication_factor=r.replication_factor)
        if r.error_code == 0:
            entry.configs = _topic_configs(image, name, configs_of[name])
        topics.append(entry)
    return cls(topics=topics)


async def _delete_topics(facade, version, body):
    cls = m.DeleteTopicsResponse
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in body.topic_names]
    image = facade.image
    entries = []  # [name, topic id, code, message], request order
    by_name = {}  # name -> entry to fill from the controller's result
    dup_names = _duplicates(n for n, i in wanted if n is not None and i == ZERO_UUID)
    dup_ids = _duplicates(i for n, i in wanted if n is None and i != ZERO_UUID)
    seen = set()
    for name, topic_id in wanted:
        if name is None and topic_id == ZERO_UUID:
            entries.append([None, ZERO_UUID, _E.INVALID_REQUEST,
                            "Neither topic name nor id were specified."])
        elif name is not None and topic_id != ZERO_UUID:
            entries.append([name, topic_id, _E.INVALID_REQUEST,
                            "You may not specify both topic name and topic id."])
        elif name is not None:
            if name in seen:
                continue
            seen.add(name)
            if name in dup_names:
                entries.append([name, ZERO_UUID, _E.INVALID_REQUEST, "Duplicate topic name."])
            else:
                entry = [name, ZERO_UUID, 0, None]
                entries.append(entry)
                by_name[name] = entry
        else:
            if topic_id in seen:
                continue
            seen.add(topic_id)
            topic = image.topics.get(topic_id)
            if topic_id in dup_ids:
                entries.append([None, topic_id, _E.INVALID_REQUEST, "Duplicate topic id."])
            elif topic is None:
                entries.append([None, topic_id, _E.UNKNOWN_TOPIC_ID,
                                f"topic id {topic_id} does not exist"])
            elif topic.name in by_name or topic.name in dup_names:
                entries.append([topic.name, topic_id, _E.INVALID_REQUEST,
                                f"topic {topic.name!r} is named twice (by name and by id)"])
            else:
                entry = [topic.name, topic_id, 0, None]
                entries.append(entry)
                by_name[topic.name] = entry
    if by_name:
        results = await _call(facade, "delete_topics", list(by_name),
                              timeout_ms=body.timeout_ms)
        for r in results:
            entry = by_name[r.name]
            if r.error_code == 0 and entry[1] != ZERO_UUID and r.topic_id != entry[1]:
                # The name was taken by a new topic between the lookup and the delete.
                entry[2:] = [_E.UNKNOWN_TOPIC_ID, f"topic id {entry[1]} no longer exists; "
                             f"topic {r.name!r} (id {r.topic_id}) was deleted instead"]
                continue
            entry[1] = r.topic_id or entry[1]
            entry[2:] = [r.error_code, r.error_message]
    responses = []
    for name, topic_id, code, message in entries:
        if name is None and version < 6:
            name = ""
        responses.append(cls.DeletableTopicResult(name=name, topic_id=topic_id,
                                                  error_code=code, error_message=message))
    return cls(responses=responses)


async def _create_partitions(facade, version, body):
    cls = m.CreatePartitionsResponse
    _validate_only(version, body, m.CreatePartitionsRequest)
    image = facade.image
    # A topic the committed image lacks counts whole (its creation may be in flight).
    _check_partition_total(sum(
        max(t.count - (len(image.topic(t.name).partitions) if image.topic(t.name) else 0), 0)
        for t in body.topics))
    duplicates = _duplicates(t.name for t in body.topics)
    names, calls = [], []
    refused = {}
    for t in body.topics:
        if t.name in duplicates:
            refused[t.name] = (_E.INVALID_REQUEST, "Duplicate topic name.")
            continue
        assignments = None
        if t.assignments is not None:
            if not t.assignments:
                refused[t.name] = (_E.INVALID_REPLICA_ASSIGNMENT,
                                   "an empty assignment list adds no partitions; give one "
                                   "replica list per new partition, or none at all")
                continue
            assignments = {i: list(a.broker_ids) for i, a in enumerate(t.assignments)}
        names.append(t.name)
        calls.append(_outcome(_call(facade, "create_partitions", t.name, t.count,
                                    assignments, timeout_ms=body.timeout_ms)))
    outcomes = dict(zip(names, await asyncio.gather(*calls)))
    results = []
    for name in dict.fromkeys(t.name for t in body.topics):
        if name in refused:
            code, message = refused[name]
        else:
            _, exc = outcomes[name]
            code, message = (0, None) if exc is None else (exc.code, str(exc))
        results.append(cls.CreatePartitionsTopicResult(name=name, error_code=code,
                                                       error_message=message))
    return cls(results=results)


# ------------------------------------------------------------------------------ configs

async def _incremental_alter_configs(facade, version, body):
    cls = m.IncrementalAlterConfigsResponse
    _validate_only(version, body, m.IncrementalAlterConfigsRequest)
    keys = [(r.resource_type, r.resource_name) for r in body.resources]
    duplicates = _duplicates(keys)
    outcome = {}  # (type, name) -> (code, message) decided here
    resources = []
    for r in body.resources:
        key = (r.resource_type, r.resource_name)
        if key in duplicates:
            outcome[key] = (_E.INVALID_REQUEST, "Duplicate resource.")
            continue
        try:
            if _duplicates(c.name for c in r.configs):
                raise _invalid("a config name appears twice for this resource")
            ops = []
            for c in r.configs:
                op = c.config_operation
                if op == OP_SET:
                    if c.value is None:
                        raise _invalid(f"null value for config {c.name!r}; use DELETE (1) to "
                                       "remove a config")
                    ops.append((c.name, "set", c.value))
                elif op == OP_DELETE:
                    ops.append((c.name, "delete", None))
                elif op in (OP_APPEND, OP_SUBTRACT):
                    raise ControllerError(_E.INVALID_CONFIG,
                                          f"config {c.name!r} is not a list; APPEND and "
                                          "SUBTRACT apply only to list configs")
                else:
                    raise _invalid(f"unknown config operation {op} for {c.name!r} (SET 0, "
                                   "DELETE 1, APPEND 2, SUBTRACT 3)")
        except ControllerError as exc:
            outcome[key] = (exc.code, str(exc))
            continue
        resources.append((r.resource_type, r.resource_name, ops))
    if resources:
        results = await _call(facade, "incremental_alter_configs", resources)
        for (rtype, rname, _), (code, message) in zip(resources, results):
            outcome[(rtype, rname)] = (code, message)
    responses = []
    for key in dict.fromkeys(keys):
        code, message = outcome[key]
        responses.append(cls.AlterConfigsResourceResponse(
            error_code=code, error_message=message, resource_type=key[0],
            resource_name=key[1]))
    return cls(responses=responses)


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
            raise _invalid(f"broker resource {rname!r} is neither '' (the cluster default) "
                           "nor a node id")
        node_id = int(rname)
        if node_id not in image.brokers and node_id not in facade.controllers():
            raise _invalid(f"node {node_id} is neither a registered broker nor a controller")
        own = image.configs.get((CONFIG_BROKER, str(node_id)), {})
        return [(CONFIG_SOURCE_DYNAMIC_BROKER, own)] + defaults
    raise _invalid(f"resource type {rtype} cannot be described; use topic ({CONFIG_TOPIC}) "
                   f"or broker ({CONFIG_BROKER})")


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


async def _describe_configs(facade, version, body):
    cls = m.DescribeConfigsResponse
    image = facade.image
    synonyms = version >= 1 and body.include_synonyms
    return cls(throttle_time_ms=0, results=[
        _describe_resource(cls, version, facade, image, r, synonyms)
        for r in body.resources])


# ------------------------------------------------------------------------------ leaders, ISRs

async def _elect_leaders(facade, version, body):
    cls = m.ElectLeadersResponse
    election_type = body.election_type if version >= 1 else ELECTION_PREFERRED
    if election_type == ELECTION_PREFERRED:
        election = E.PREFERRED
    elif election_type == ELECTION_UNCLEAN:
        election = E.UNCLEAN
    else:
        raise _invalid(f"unknown election type {election_type} (PREFERRED 0, UNCLEAN 1)")
    partitions = None
    if body.topic_partitions is not None:
        partitions = list(dict.fromkeys((t.topic, p) for t in body.topic_partitions
                                        for p in t.partitions))
    results = {}
    if partitions is None or partitions:
        results = await _call(facade, "elect_leaders", election, partitions,
                              timeout_ms=body.timeout_ms)
    by_topic = {}
    for (topic, pid), (code, message) in results.items():
        by_topic.setdefault(topic, []).append(cls.PartitionResult(
            partition_id=pid, error_code=code, error_message=message))
    return cls(error_code=0, replica_election_results=[
        cls.ReplicaElectionResult(topic=topic, partition_result=parts)
        for topic, parts in by_topic.items()])


# Errors of AlterPartition that concern the whole request (Kafka checks the broker epoch
# before any partition, and answers at the top level).
_ALTER_PARTITION_TOP = {_E.STALE_BROKER_EPOCH: _E.STALE_BROKER_EPOCH,
                        _E.BROKER_ID_NOT_REGISTERED: _E.STALE_BROKER_EPOCH,
                        _E.NOT_CONTROLLER: _E.NOT_CONTROLLER}


async def _alter_partition(facade, version, body):
    cls = m.AlterPartitionResponse
    image = facade.image
    plan = []  # (topic entry, partition data, topic id, refusal or None)
    calls = []
    for t in body.topics:
        if version >= 2:
            topic = image.topics.get(t.topic_id)
            missing = (_E.UNKNOWN_TOPIC_ID, f"topic id {t.topic_id} does not exist")
        else:
            topic = image.topic(t.topic_name)
            missing = (_E.UNKNOWN_TOPIC_OR_PARTITION, f"topic {t.topic_name!r} does not exist")
        for p in t.partitions:
            if topic is None:
                plan.append((t, p, None, missing))
                continue
            refusal = None
            if version >= 3:
                new_isr = [s.broker_id for s in p.new_isr_with_epochs]
                for s in p.new_isr_with_epochs:
                    broker = image.brokers.get(s.broker_id)
                    if s.broker_epoch != -1 and (broker is None
                                                 or broker.broker_epoch != s.broker_epoch):
                        refusal = (_E.INELIGIBLE_REPLICA,
                                   f"broker {s.broker_id} has no registration with epoch "
                                   f"{s.broker_epoch}")
                        break
            else:
                new_isr = list(p.new_isr)
            if refusal is None and version >= 1 and p.leader_recovery_state not in (0, 1):
                refusal = (_E.INVALID_REQUEST,
                           f"unknown leader recovery state {p.leader_recovery_state}")
            plan.append((t, p, topic.topic_id, refusal))
            if refusal is None:
                calls.append(_outcome(_call(
                    facade, "alter_partition", body.broker_id, body.broker_epoch,
                    topic.topic_id, p.partition_index, leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch, new_isr=new_isr)))
    outcomes = list(await asyncio.gather(*calls))
    codes = {exc.code if exc is not None else 0 for _, exc in outcomes}
    if outcomes and len(codes) == 1 and next(iter(codes)) in _ALTER_PARTITION_TOP:
        return cls(error_code=_ALTER_PARTITION_TOP[next(iter(codes))])
    results = iter(outcomes)
    image = facade.image
    topics = []
    by_topic = {}
    for t, p, topic_id, refusal in plan:
        entry = by_topic.get(id(t))
        if entry is None:
            entry = by_topic[id(t)] = cls.TopicData(topic_name=t.topic_name,
                                                    topic_id=t.topic_id)
            topics.append(entry)
        if refusal is not None:
            code, _ = refusal
            entry.partitions.append(cls.PartitionData(partition_index=p.partition_index,
                                                      error_code=code))
            continue
        state, exc = next(results)
        if exc is not None:
            entry.partitions.append(cls.PartitionData(partition_index=p.partition_index,
                                                      error_code=exc.code))
            continue
        part = cls.PartitionData(partition_index=p.partition_index, error_code=0,
                                 leader_id=state.leader, leader_epoch=state.leader_epoch,
                                 isr=list(state.isr), partition_epoch=state.partition_epoch)
        if version >= 1:
            current = image.partition(topic_id, p.partition_index)
            if current is not None:
                part.leader_recovery_state = current.leader_recovery_state
        entry.partitions.append(part)
    return cls(error_code=0, topics=topics)


# ------------------------------------------------------------------------------ reads

async def _describe_cluster(facade, version, body):
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
            endpoint = _first_endpoint(broker)
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
                                     is_internal=False, partitions=partitions)


async def _metadata(facade, version, body):
    cls = m.MetadataResponse
    image = facade.image
    visible = visible_brokers(image)
    alive = {b.broker_id for b in visible}
    brokers = []
    for b in visible:
        endpoint = _first_endpoint(b)
        if endpoint is not None:
            brokers.append(cls.MetadataResponseBroker(node_id=b.broker_id, host=endpoint[0],
                                                      port=endpoint[1], rack=b.rack))
    wanted = body.topics
    topics = []
    if wanted is None or (version == 0 and not wanted):
        for name in sorted(image.topic_ids):
            topics.append(_metadata_topic(cls, version, image, image.topic(name), alive))
    else:
        seen = set()
        for t in wanted:
            key = t.name if t.name is not None else t.topic_id
            if key in seen:
                continue
            seen.add(key)
            if t.name is not None:
                topic = image.topic(t.name)
                if topic is None:
                    topics.append(cls.MetadataResponseTopic(
                        error_code=_E.UNKNOWN_TOPIC_OR_PARTITION, name=t.name))
                    continue
            elif t.topic_id != ZERO_UUID:
                topic = image.topics.get(t.topic_id)
                if topic is None:
                    topics.append(cls.MetadataResponseTopic(
                        error_code=_E.UNKNOWN_TOPIC_ID, name=None if version >= 12 else "",
                        topic_id=t.topic_id))
                    continue
            else:
                topics.append(cls.MetadataResponseTopic(
                    error_code=_E.INVALID_REQUEST, name=None if version >= 12 else ""))
                continue
            topics.append(_metadata_topic(cls, version, image, topic, alive))
    return cls(brokers=brokers, cluster_id=facade.cluster_id,
               controller_id=_controller_id(facade), topics=topics)


_HANDLERS = {
    62: _broker_registration, 63: _broker_heartbeat, 64: _unregister_broker,
    70: _controller_registration, 19: _create_topics, 20: _delete_topics,
    37: _create_partitions, 44: _incremental_alter_configs, 43: _elect_leaders,
    56: _alter_partition, 60: _describe_cluster, 3: _metadata, 32: _describe_configs,
}

CONTROLLER_API_KEYS = frozenset(_HANDLERS)
"""The API keys `handle_controller_request` answers (route the Raft RPCs and DescribeQuorum
to the Raft driver; the listener answers ApiVersions)."""


# ------------------------------------------------------------------------------ error responses

def _bare_response(key, version, code, message):
    """The response class of `key` with only its top-level error fields set."""
    cls = API_BY_KEY[key].response if key in API_BY_KEY else None
    if cls is None:
        raise ValueError(f"no response schema for API key {key}")
    response = cls()
    if _present(cls, "error_code", version):
        response.error_code = int(code)
    if _present(cls, "error_message", version):
        response.error_message = message
    return response


def _error_create_topics(version, body, code, message):
    cls = m.CreateTopicsResponse
    return cls(topics=[cls.CreatableTopicResult(name=name, error_code=code,
                                                error_message=message)
                       for name in dict.fromkeys(t.name for t in body.topics)])


def _error_delete_topics(version, body, code, message):
    cls = m.DeleteTopicsResponse
    if version >= 6:
        items = [(t.name, t.topic_id) for t in body.topics]
    else:
        items = [(name, ZERO_UUID) for name in body.topic_names]
    return cls(responses=[cls.DeletableTopicResult(name=name, topic_id=topic_id,
                                                   error_code=code, error_message=message)
                          for name, topic_id in dict.fromkeys(items)])


def _error_create_partitions(version, body, code, message):
    cls = m.CreatePartitionsResponse
    return cls(results=[cls.CreatePartitionsTopicResult(name=name, error_code=code,
                                                        error_message=message)
                        for name in dict.fromkeys(t.name for t in body.topics)])


def _error_alter_configs(version, body, code, message):
    cls = m.IncrementalAlterConfigsResponse
    keys = dict.fromkeys((r.resource_type, r.resource_name) for r in body.resources)
    return cls(responses=[cls.AlterConfigsResourceResponse(
        error_code=code, error_message=message, resource_type=rtype, resource_name=rname)
        for rtype, rname in keys])


def _error_elect_leaders(version, body, code, message):
    cls = m.ElectLeadersResponse
    response = cls()
    if version >= 1:
        response.error_code = code
    for t in body.topic_partitions or ():
        response.replica_election_results.append(cls.ReplicaElectionResult(
            topic=t.topic, partition_result=[
                cls.PartitionResult(partition_id=p, error_code=code, error_message=message)
                for p in dict.fromkeys(t.partitions)]))
    return response


def _error_metadata(version, body, code, message):
    cls = m.MetadataResponse
    response = cls()
    if version >= 13:
        response.error_code = code
    for t in body.topics or ():
        name = t.name if t.name is not None or version >= 12 else ""
        response.topics.append(cls.MetadataResponseTopic(error_code=code, name=name,
                                                         topic_id=t.topic_id))
    return response


def _error_describe_cluster(version, body, code, message):
    response = m.DescribeClusterResponse(error_code=code, error_message=message)
    if version >= 1:
        response.endpoint_type = body.endpoint_type
    return response


def _error_describe_configs(version, body, code, message):
    cls = m.DescribeConfigsResponse
    return cls(results=[cls.DescribeConfigsResult(
        error_code=code, error_message=message, resource_type=r.resource_type,
        resource_name=r.resource_name) for r in body.resources])


_ERROR_BUILDERS = {
    19: _error_create_topics, 20: _error_delete_topics, 37: _error_create_partitions,
    44: _error_alter_configs, 43: _error_elect_leaders, 3: _error_metadata,
    60: _error_describe_cluster, 32: _error_describe_configs,
}


def error_response(key, version, body, code, message=None):
    """The response to request `body` (API `key` at `version`) that fails it as a whole with
    `code`: in the top-level ErrorCode when the schema has one, else in every item the
    request named (Kafka's `getErrorResponse`)."""
    builder = _ERROR_BUILDERS.get(key)
    if builder is not None:
        try:
            return builder(version, body, int(code), message)
        except Exception:  # noqa: BLE001 - a body we cannot walk: top-level fields only
            log.warning("%s v%d: could not list the request's items in an error response",
                        _api_name(key), version, exc_info=True)
    return _bare_response(key, version, code, message)


# ------------------------------------------------------------------------------ the broker side

def registration_request(lifecycle_request, *, previous_broker_epoch=-1):
    """The BrokerRegistrationRequest for a `BrokerLifecycle` `RegisterRequest`.

    A request whose `features` is None (no check wanted) advertises every metadata.version
    kraftcore knows: on the wire an empty feature list means "3.0-IV1 only" (Kafka's rule),
    which a cluster above that level would refuse."""
    r = lifecycle_request
    if r.cluster_id is None:
        raise ValueError("a broker registration needs the cluster id (meta.properties "
                         "cluster.id); format the broker's log directories first")
    cls = m.BrokerRegistrationRequest
    features = r.features
    if features is None:
        features = {METADATA_VERSION: (1, max(METADATA_VERSION_LEVELS.values()))}
    return cls(
        broker_id=r.broker_id, cluster_id=r.cluster_id, incarnation_id=r.incarnation_id,
        listeners=[cls.Listener(name=name, host=host, port=port, security_protocol=protocol)
                   for name, host, port, protocol in r.listeners],
        features=[cls.Feature(name=name, min_supported_version=low, max_supported_version=high)
                  for name, (low, high) in sorted(features.items())],
        rack=r.rack, log_dirs=list(r.log_dirs), previous_broker_epoch=previous_broker_epoch)


def heartbeat_request(lifecycle_request):
    """The BrokerHeartbeatRequest for a `BrokerLifecycle` `HeartbeatRequest`."""
    r = lifecycle_request
    return m.BrokerHeartbeatRequest(
        broker_id=r.broker_id, broker_epoch=r.broker_epoch,
        current_metadata_offset=r.metadata_offset, want_fence=bool(r.want_fence),
        want_shut_down=bool(r.want_shutdown))


def _raise_for(code, what, node_id):
    where = "the controller" if node_id is None else f"controller {node_id}"
    if code == _E.NOT_CONTROLLER:
        exc = NotControllerError(-1 if node_id is None else node_id, None)
        exc.args = (f"{where} answered the {what} with NOT_CONTROLLER (41): it is not the "
                    "active controller; find the active controller and retry there",)
        raise exc
    raise ControllerError(code, f"{where} refused the {what}: {error_name(code)} ({code})")


def registration_result(response, *, node_id=None):
    """`RegistrationResult` from a BrokerRegistrationResponse, or raise its error:
    `NotControllerError` (without a controller id: the response names none) for
    NOT_CONTROLLER, `ControllerError(code)` otherwise. `node_id`: who answered, for the
    message."""
    if response.error_code != 0:
        _raise_for(response.error_code, "broker registration", node_id)
    return RegistrationResult(response.broker_epoch)


def heartbeat_result(response, *, node_id=None):
    """`HeartbeatResult` from a BrokerHeartbeatResponse, or raise its error (as
    `registration_result`)."""
    if response.error_code != 0:
        _raise_for(response.error_code, "broker heartbeat", node_id)
    return HeartbeatResult(bool(response.is_caught_up), bool(response.is_fenced),
                           bool(response.should_shut_down))
