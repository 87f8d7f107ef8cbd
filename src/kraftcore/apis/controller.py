"""The controller role's Kafka RPCs (Kafka's `ControllerApis`): a decoded request from the
network becomes a `QuorumController` operation, and its result or error becomes Kafka's
response (kafka-facts §6.2-§6.5, §8).

This module owns the mapping between the wire messages of `kraftcore.protocol.messages` and
the controller's Python API; it holds no state. The node process plugs it into its
controller listener:

    response = await handle_controller_request(facade, request)

`request` is a `kraftcore.protocol.framing.Request`; the answer is the response message for
`request.api_version` (`kraftcore.apis.dispatch` keeps the rules every answer follows).
`facade` is any object with:

* `submit(method, *args, **kwargs) -> asyncio.Future`: runs `QuorumController.<method>`
  and resolves with its result, or fails with its exception (`ControllerError` with
  `.code`; `NotControllerError`, code 41, on a standby or a deposed controller). A
  `concurrent.futures.Future` (what `QuorumController` returns) is accepted too, and
  `submit` may also raise at once;
* what the reads take (`kraftcore.apis.reads`): `image`, `cluster_id`, `controller_id()`,
  `controllers()`; and `node_id`.

| API (key) | versions | controller operation |
|---|---|---|
| BrokerRegistration (62) | 0-4 | `register_broker` |
| BrokerHeartbeat (63) | 0-1 | `broker_heartbeat` |
| UnregisterBroker (64) | 0 | `unregister_broker` |
| AllocateProducerIds (67) | 0 | `allocate_producer_ids`: a block of producer ids |
| CreateTopics (19) | 0-7 | `create_topics` |
| DeleteTopics (20) | 0-6, by name; by id from v6 | `delete_topics` |
| CreatePartitions (37) | 0-3 | `create_partitions`, one call per topic |
| IncrementalAlterConfigs (44) | 0-1 | `incremental_alter_configs` |
| ElectLeaders (43) | 0-2 | `elect_leaders` |
| AlterPartition (56) | 0-3 | `alter_partition`, one call per partition |
| DescribeCluster (60), Metadata (3), DescribeConfigs (32) | `kraftcore.apis.reads` | none |
| ControllerRegistration (70) | 0 | `register_controller` (metadata.version 3.7-IV0+) |
| DescribeAcls (29), CreateAcls (30), DeleteAcls (31) | 0-3 | `kraftcore.apis.security` |
| DescribeUserScramCredentials (50), AlterUserScramCredentials (51) | 0 | `kraftcore.apis.security` |

Error rules, as Kafka's `ControllerApis` has them:

* a per-item error (one topic, one partition, one config resource) goes into that item;
* an error of the whole request (NOT_CONTROLLER, REQUEST_TIMED_OUT, INVALID_REQUEST) is the
  whole-request error answer of `kraftcore.apis.errors`;
* bad input never raises: a value the controller cannot take (a malformed field, an
  unknown operation) is INVALID_REQUEST; an unexpected failure is UNKNOWN_SERVER_ERROR.

Deliberate limits, each answered explicitly rather than ignored:

* `validate_only` (CreateTopics v1+, CreatePartitions, IncrementalAlterConfigs): the
  controller has no dry-run mode, so such requests are refused with INVALID_REQUEST.
* APPEND / SUBTRACT config operations: kraftcore's two topic configs are not lists
  (INVALID_CONFIG, as Kafka answers for a non-list config).
* ControllerRegistration below metadata.version 3.7-IV0, which has no
  RegisterControllerRecord: UNSUPPORTED_VERSION, as in Kafka. A controller ready for a
  ZooKeeper migration: INVALID_REQUEST.
* A request's TimeoutMs > 0 bounds the wait for the commit (REQUEST_TIMED_OUT after it; the
  operation may still take effect). TimeoutMs <= 0 sets no bound of its own.
* One CreateTopics or CreatePartitions request adds at most
  `limits.CONTROLLER_PARTITIONS_PER_REQUEST_MAX` partitions (POLICY_VIOLATION beyond).

The broker side of these RPCs (the requests a broker sends, and how it reads the answers)
is `kraftcore.broker.requests`.
"""

import asyncio
import concurrent.futures

from kraftcore.apis.dispatch import request_handler
from kraftcore.apis.errors import has_field, invalid_request
from kraftcore.apis.reads import (CONFIG_DEFAULTS, CONFIG_SOURCE_DEFAULT,
                                  CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER, CONFIG_SOURCE_TOPIC,
                                  describe_cluster, describe_configs, metadata)
from kraftcore.apis.security import SECURITY_HANDLERS
from kraftcore.controller import election as E
from kraftcore.controller.replication import NewTopic
from kraftcore.errors import ControllerError
from kraftcore.limits import CONTROLLER_PARTITIONS_PER_REQUEST_MAX
from kraftcore.metadata.image import CONFIG_BROKER
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import ZERO_UUID

__all__ = ["handle_controller_request", "CONTROLLER_API_KEYS", "OP_SET", "OP_DELETE",
           "OP_APPEND", "OP_SUBTRACT"]

# ElectLeaders ElectionType.
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
# IncrementalAlterConfigs ConfigOperation.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

_E = ErrorCode


# ------------------------------------------------------------------------------ helpers

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


def _duplicates(keys):
    seen, dups = set(), set()
    for k in keys:
        if k in seen:
            dups.add(k)
        seen.add(k)
    return dups


def _check_partition_total(total):
    if total > CONTROLLER_PARTITIONS_PER_REQUEST_MAX:
        raise ControllerError(_E.POLICY_VIOLATION,
                              f"the request would add {total} partitions; at most "
                              f"{CONTROLLER_PARTITIONS_PER_REQUEST_MAX} may be added per request")


# ------------------------------------------------------------------------------ brokers

def _registered_listeners(body, who):
    """A registration's listeners as (name, host, port, security protocol) tuples."""
    listeners = tuple((ep.name, ep.host, ep.port, ep.security_protocol)
                      for ep in body.listeners)
    if _duplicates(name for name, _, _, _ in listeners):
        raise ControllerError(_E.INVALID_REGISTRATION,
                              f"{who} registers two listeners with one name")
    return listeners


def _registered_features(body):
    """A registration's supported features: name -> (min, max)."""
    features = {}
    for f in body.features:
        if f.name in features:
            raise invalid_request(f"feature {f.name!r} appears twice in the registration")
        features[f.name] = (f.min_supported_version, f.max_supported_version)
    return features


async def _broker_registration(facade, version, body):
    if body.is_migrating_zk_broker:
        raise ControllerError(_E.BROKER_ID_NOT_REGISTERED,
                              f"broker {body.broker_id} registers as a migrating ZooKeeper "
                              "broker; kraftcore's controller does not support ZooKeeper "
                              "migration")
    listeners = _registered_listeners(body, f"broker {body.broker_id}")
    features = _registered_features(body)
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


async def _allocate_producer_ids(facade, version, body):
    result = await _call(facade, "allocate_producer_ids", body.broker_id, body.broker_epoch)
    return m.AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0,
                                         producer_id_start=result.first_producer_id,
                                         producer_id_len=result.count)


async def _controller_registration(facade, version, body):
    listeners = _registered_listeners(body, f"controller {body.controller_id}")
    await _call(facade, "register_controller", body.controller_id, body.incarnation_id,
                listeners=listeners, features=_registered_features(body),
                zk_migration_ready=body.zk_migration_ready)
    return m.ControllerRegistrationResponse(error_code=0)


# ------------------------------------------------------------------------------ topics

def _validate_only(version, body, cls, attr="validate_only"):
    if has_field(cls, attr, version) and getattr(body, attr):
        raise invalid_request("validate_only is not supported: kraftcore's controller has "
                              "no dry-run mode; send the request without it")


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
                    raise invalid_request("an assignment names a partition twice")
                assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            configs = None
            if t.configs:
                if _duplicates(c.name for c in t.configs):
                    raise invalid_request("a config is given twice")
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
                raise invalid_request("a config name appears twice for this resource")
            ops = []
            for c in r.configs:
                op = c.config_operation
                if op == OP_SET:
                    if c.value is None:
                        raise invalid_request(f"null value for config {c.name!r}; use "
                                              "DELETE (1) to remove a config")
                    ops.append((c.name, "set", c.value))
                elif op == OP_DELETE:
                    ops.append((c.name, "delete", None))
                elif op in (OP_APPEND, OP_SUBTRACT):
                    raise ControllerError(_E.INVALID_CONFIG,
                                          f"config {c.name!r} is not a list; APPEND and "
                                          "SUBTRACT apply only to list configs")
                else:
                    raise invalid_request(f"unknown config operation {op} for {c.name!r} "
                                          "(SET 0, DELETE 1, APPEND 2, SUBTRACT 3)")
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


# ------------------------------------------------------------------------------ leaders, ISRs

async def _elect_leaders(facade, version, body):
    cls = m.ElectLeadersResponse
    election_type = body.election_type if version >= 1 else ELECTION_PREFERRED
    if election_type == ELECTION_PREFERRED:
        election = E.PREFERRED
    elif election_type == ELECTION_UNCLEAN:
        election = E.UNCLEAN
    else:
        raise invalid_request(f"unknown election type {election_type} (PREFERRED 0, "
                              "UNCLEAN 1)")
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


_HANDLERS = {
    62: _broker_registration, 63: _broker_heartbeat, 64: _unregister_broker,
    67: _allocate_producer_ids,
    70: _controller_registration, 19: _create_topics, 20: _delete_topics,
    37: _create_partitions, 44: _incremental_alter_configs, 43: _elect_leaders,
    56: _alter_partition, 60: describe_cluster, 3: metadata, 32: describe_configs,
    **SECURITY_HANDLERS,
}

CONTROLLER_API_KEYS = frozenset(_HANDLERS)
"""The API keys `handle_controller_request` answers (route the Raft RPCs and DescribeQuorum
to the Raft driver; the listener answers ApiVersions)."""

handle_controller_request = request_handler("controller", _HANDLERS)
"""`async handle_controller_request(facade, request) -> response`: the controller's answer
to `request` at its version; never raises for a request's content."""
