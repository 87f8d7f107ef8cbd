"""What a broker node answers itself (Kafka's `KafkaApis`): the broker role's request
dispatch table and its handlers. The node process plugs it into its broker listener:

    response = await handle_broker_request(facade, request)

`facade` is the broker's own view:

* `image`: the `MetadataImage` its metadata follower holds; `node_id`, `cluster_id`;
* `replicas`: its `kraftcore.broker.replicas.ReplicaManager` (None on a node that is not a
  broker);
* `controller_id()`: the node id clients are told is the controller — a live broker, this
  one (KIP-590: clients send admin requests there and the broker forwards them);
* `controllers()`: the controller endpoints (DescribeCluster with the controller type);
* `now_ms()`; `async forward(api_key, version, body)`: the active controller's answer to an
  admin request (the node follows it across elections and gives up after the request's
  timeout with REQUEST_TIMED_OUT);
* `async next_producer_id()`: a producer id from the broker's block (a new block from
  the active controller when it is used up).
* `groups`: its `kraftcore.broker.groups.GroupCoordinator` (the members and committed
  offsets of the groups it coordinates); `client_id`, `client_host`: the request's client
  id and the address it came from (a group member's); `ensure_offsets_topic()`: ask the active controller, in the
  background, to create `__consumer_offsets` (once at a time; a no-op while it exists).
* `fetch_region_bytes_min` (optional): Fetch answers carry a partition's records of at
  least that many bytes as a `kraftcore.types.FileRegion` of the segment file, which the
  listener sends with `sendfile` (at most `limits.BROKER_FETCH_REGIONS_PER_RESPONSE_MAX`
  per answer: each holds a descriptor); without it every read is copied into memory.

| API (key) | versions | answer |
|---|---|---|
| Produce (0) | 3-12 | the leader's append; acks=all waits for the high watermark |
| Fetch (1) | 4-17 | consumers read up to the high watermark, followers to the log end |
| ListOffsets (2) | 1-10 | earliest, latest, max timestamp, by timestamp (time index) |
| Metadata (3) | 0-13 | from the broker's image; ControllerId names this broker |
| OffsetCommit (8), OffsetFetch (9) | 2-10, 1-10 | a group's committed offsets, from its coordinator |
| FindCoordinator (10) | 0-6 | the leader of the group's `__consumer_offsets` partition (created on first use) |
| JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13) | 0-9, 0-5, 0-4, 0-5 | the classic group protocol; JoinGroup and SyncGroup wait for the group |
| DescribeGroups (15), ListGroups (16) | 0-6, 0-5 | the groups this broker coordinates |
| DeleteGroups (42), OffsetDelete (47) | 0-3, 0 | tombstones for an empty group, or for offsets its members do not consume |
| InitProducerId (22) | 0-5 | an idempotent producer's id (no transactions) |
| OffsetForLeaderEpoch (23) | 2-4 | where an epoch ends in the leader's log |
| DescribeConfigs (32), DescribeCluster (60) | | from the image (`kraftcore.apis.reads`) |
| CreateTopics (19), DeleteTopics (20), CreatePartitions (37), ElectLeaders (43), IncrementalAlterConfigs (44) | | forwarded to the active controller |
| DescribeAcls (29), DescribeUserScramCredentials (50) | 0-3, 0 | from the image (`kraftcore.apis.security`) |
| CreateAcls (30), DeleteAcls (31), AlterUserScramCredentials (51) | 0-3, 0-3, 0 | forwarded to the active controller |

Per-partition refusals carry Kafka's codes (`kraftcore.broker.partition.PartitionError`);
the rules every answer keeps are `kraftcore.apis.dispatch`'s. A Produce with acks=0 is
answered with nothing (`NO_RESPONSE`), as Kafka does; a Produce to an internal topic is
INVALID_TOPIC_EXCEPTION (only its coordinator writes it).
"""

import asyncio

from kraftcore.apis.dispatch import request_handler
from kraftcore.apis.errors import invalid_request
from kraftcore.apis.reads import (INTERNAL_TOPICS, broker_endpoint, describe_cluster,
                                  describe_configs, metadata)
from kraftcore.apis.security import SECURITY_READS, SECURITY_WRITES
from kraftcore.broker.group_records import OFFSETS_TOPIC, OffsetAndMetadata
from kraftcore.broker.groups import GroupError, JoinRequest
from kraftcore.broker.partition import PartitionError
from kraftcore.limits import BROKER_FETCH_REGIONS_PER_RESPONSE_MAX
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import ZERO_UUID, FileRegion

__all__ = ["handle_broker_request", "BROKER_API_KEYS", "FORWARDED_API_KEYS", "NO_RESPONSE",
           "BROKER_VERSIONS"]

_E = ErrorCode
NO_RESPONSE = None
"""What a handler returns for a request that gets no answer (Produce with acks=0)."""

EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP = -2, -1, -3
EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP = -4, -5


def _partition(facade, topic, index):
    replicas = facade.replicas
    if replicas is None:
        raise PartitionError(_E.NOT_LEADER_OR_FOLLOWER, "this node hosts no partitions")
    return replicas.get(topic, index)


# ------------------------------------------------------------------------------ leader hints

_MOVED = (_E.NOT_LEADER_OR_FOLLOWER, _E.FENCED_LEADER_EPOCH)
_REGIONS_MAX = BROKER_FETCH_REGIONS_PER_RESPONSE_MAX


class _LeaderHints:
    """KIP-951: a Produce or Fetch refused because the leader moved carries the current
    leader and epoch from this broker's image (CurrentLeader), and the answer lists the
    endpoints of those leaders (NodeEndpoints), so a client goes there without a Metadata
    round trip."""

    def __init__(self, cls, image, by_id, listener=None):
        self.cls = cls
        self.image = image
        self.by_id = by_id  # topics are keyed by id (v13+), else by name
        self.listener = listener  # the listener the request came in on
        self.leaders = set()

    def current_leader(self, topic, index, code):
        """The CurrentLeader for a refusal with `code`, or None (not a moved leader)."""
        if code not in _MOVED:
            return None
        image = self.image
        t = image.topics.get(topic) if self.by_id else image.topic(topic)
        p = t.partitions.get(index) if t is not None else None
        if p is None:
            return None
        if p.leader >= 0:
            self.leaders.add(p.leader)
        return self.cls.LeaderIdAndEpoch(leader_id=p.leader, leader_epoch=p.leader_epoch)

    def node_endpoints(self):
        out = []
        for node_id in sorted(self.leaders):
            broker = self.image.brokers.get(node_id)
            endpoint = None if broker is None else broker_endpoint(broker, self.listener)
            if endpoint is not None:
                out.append(self.cls.NodeEndpoint(node_id=node_id, host=endpoint[0],
                                                 port=endpoint[1], rack=broker.rack))
        return out


# ------------------------------------------------------------------------------ waiting

async def _wait_for(facade, partitions, ready, timeout_ms):
    """Wait until `ready()` is true, re-checked whenever one of `partitions` changes (log
    end offset or high watermark), or `timeout_ms` passes. Returns `ready()`."""
    if ready() or timeout_ms <= 0:
        return ready()
    loop = asyncio.get_running_loop()
    woken = loop.create_future()
    watched = set(map(id, partitions))

    def on_change(partition):
        if id(partition) in watched and not woken.done() and ready():
            woken.set_result(True)

    replicas = facade.replicas
    replicas.watch(on_change)
    try:
        await asyncio.wait_for(woken, timeout_ms / 1000)
    except asyncio.TimeoutError:
        pass
    finally:
        replicas.unwatch(on_change)
    return ready()


# ------------------------------------------------------------------------------ Produce

async def produce(facade, version, body):
    cls = m.ProduceResponse
    acks = body.acks
    if acks not in (0, 1, -1):
        results = {(t.name, p.index): (_E.INVALID_REQUIRED_ACKS,
                                       f"acks must be 0, 1 or -1 (all), got {acks}")
                   for t in body.topic_data for p in t.partition_data}
        return _produce_response(cls, version, body, results, facade)
    if body.transactional_id is not None:
        results = {(t.name, p.index): (_E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                       "transactions are not supported")
                   for t in body.topic_data for p in t.partition_data}
        return _produce_response(cls, version, body, results, facade)
    results, waiting = {}, []
    for t in body.topic_data:
        topic = t.name if version < 13 else t.topic_id
        for p in t.partition_data:
            key = (t.name if version < 13 else t.topic_id, p.index)
            try:
                if p.records is None or not len(p.records):
                    raise PartitionError(_E.INVALID_RECORD, "no record batches")
                if _is_internal(facade, topic):
                    raise PartitionError(_E.INVALID_TOPIC_EXCEPTION, (
                        f"{topic} is an internal topic: only its coordinator writes to it"))
                partition = _partition(facade, topic, p.index)
                now = facade.now_ms()
                base = facade.replicas.produce(topic, p.index, bytes(p.records), acks, now)
                results[key] = (0, None, base, partition, now)
                if acks == -1:
                    waiting.append((key, partition, partition.log_end_offset))
            except PartitionError as exc:
                results[key] = (exc.code, str(exc))
    if acks == 0:
        return NO_RESPONSE
    if waiting:
        def replicated():
            return all(p.high_watermark >= end or not p.is_leader for _, p, end in waiting)

        await _wait_for(facade, [p for _, p, _ in waiting], replicated, body.timeout_ms)
        for key, partition, end in waiting:
            code, _, base, _, _ = results[key]
            if not partition.is_leader:
                results[key] = (_E.NOT_LEADER_OR_FOLLOWER,
                                f"{partition.name}: leadership moved before the records "
                                "were replicated")
            elif partition.high_watermark < end:
                results[key] = (_E.REQUEST_TIMED_OUT,
                                f"{partition.name}: the records were not replicated to the "
                                f"ISR within {body.timeout_ms} ms")
            elif not partition.enough_replicas():
                results[key] = (_E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                f"{partition.name}: written, but the ISR shrank below "
                                "min.insync.replicas")
    return _produce_response(cls, version, body, results, facade)


def _is_internal(facade, topic):
    """Whether `topic` (a name, or an id at Produce v13+) is one of Kafka's internal topics,
    which producers may not write (Kafka answers INVALID_TOPIC_EXCEPTION)."""
    if not isinstance(topic, str):
        t = facade.image.topics.get(topic)
        topic = t.name if t is not None else None
    return topic in INTERNAL_TOPICS


def _produce_response(cls, version, body, results, facade):
    topics = []
    hints = _LeaderHints(cls, facade.image, version >= 13,
                         getattr(facade, "listener_name", None))
    for t in body.topic_data:
        parts = []
        for p in t.partition_data:
            key = (t.name if version < 13 else t.topic_id, p.index)
            result = results[key]
            r = cls.PartitionProduceResponse(index=p.index, error_code=result[0],
                                             base_offset=-1)
            if result[0] == 0:
                r.base_offset = result[2]
                if version >= 2 and result[3].log_append_time:
                    r.log_append_time_ms = result[4]
                if version >= 5:
                    r.log_start_offset = result[3].log.log_start_offset
            else:
                if version >= 8:
                    r.error_message = result[1]
                if version >= 10:
                    leader = hints.current_leader(key[0], p.index, result[0])
                    if leader is not None:
                        r.current_leader = leader
            parts.append(r)
        if version >= 13:
            topics.append(cls.TopicProduceResponse(topic_id=t.topic_id, partition_responses=parts))
        else:
            topics.append(cls.TopicProduceResponse(name=t.name, partition_responses=parts))
    response = cls(responses=topics, throttle_time_ms=0)
    if version >= 10:
        response.node_endpoints = hints.node_endpoints()
    return response


# ------------------------------------------------------------------------------ Fetch

def _replica_id(version, body):
    if version >= 15:
        state = body.replica_state
        return state.replica_id, state.replica_epoch
    return body.replica_id, -1


async def fetch(facade, version, body):
    cls = m.FetchResponse
    replica_id, broker_epoch = _replica_id(version, body)
    follower = replica_id >= 0
    image = facade.image
    now = facade.now_ms()
    wanted = []  # (topic key, name, index, request partition, Partition or error)
    leader_fetches = []
    for t in body.topics:
        if version >= 13:
            topic_image = image.topics.get(t.topic_id)
            name = topic_image.name if topic_image is not None else None
            key = t.topic_id
        else:
            name = key = t.topic
        for p in t.partitions:
            try:
                if name is None:
                    raise PartitionError(_E.UNKNOWN_TOPIC_ID, f"unknown topic id {t.topic_id}")
                partition = _partition(facade, name, p.partition)
                partition.check_leader(p.current_leader_epoch if version >= 9 else -1)
                if follower:
                    leader_fetches.append((partition, p.fetch_offset,
                                           p.last_fetched_epoch if version >= 12 else -1))
                wanted.append((key, name, p, partition))
            except PartitionError as exc:
                wanted.append((key, name, p, exc))
    diverging = {}
    if leader_fetches:
        try:
            diverging = facade.replicas.follower_fetch(replica_id, broker_epoch,
                                                       leader_fetches, now)
        except PartitionError as exc:
            return cls(error_code=exc.code, responses=[])

    region_bytes_min = getattr(facade, "fetch_region_bytes_min", None)

    def build():
        total = regions = 0
        bytes_max = body.max_bytes if version >= 3 else 0x7FFFFFFF
        topics, by_key = [], {}
        hints = _LeaderHints(cls, image, version >= 13, getattr(facade, "listener_name", None))
        for key, name, p, partition in wanted:
            r = cls.PartitionData(partition_index=p.partition, error_code=0,
                                  high_watermark=-1, records=None)
            if isinstance(partition, PartitionError):
                r.error_code = partition.code
                if version >= 12:
                    leader = hints.current_leader(key, p.partition, partition.code)
                    if leader is not None:
                        r.current_leader = leader
            else:
                log = partition.log
                hw = log.high_watermark
                r.high_watermark = hw
                r.last_stable_offset = hw
                r.log_start_offset = log.log_start_offset
                d = diverging.get(partition)
                if d is not None:
                    r.diverging_epoch = cls.EpochEndOffset(epoch=d[0], end_offset=d[1])
                    r.records = b""
                else:
                    limit = min(p.partition_max_bytes, max(0, bytes_max - total))
                    try:
                        if limit <= 0:
                            r.records = b""
                        else:
                            read = partition.read(
                                p.fetch_offset, limit, committed=not follower,
                                region_bytes_min=region_bytes_min if regions < _REGIONS_MAX
                                else None)
                            r.records = read.records
                            total += len(read.records)
                            regions += isinstance(read.records, FileRegion)
                    except PartitionError as exc:
                        r.error_code = exc.code
                        r.high_watermark = -1
            entry = by_key.get(key)
            if entry is None:
                entry = cls.FetchableTopicResponse(partitions=[])
                if version >= 13:
                    entry.topic_id = key
                else:
                    entry.topic = name
                by_key[key] = entry
                topics.append(entry)
            entry.partitions.append(r)
        response = cls(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
        if version >= 16:
            response.node_endpoints = hints.node_endpoints()
        return response, total

    response, total = build()
    if total < max(1, body.min_bytes) and body.max_wait_ms > 0 and not diverging:
        parts = [w[3] for w in wanted if not isinstance(w[3], PartitionError)]
        if parts:
            # the data the fetch may return is what lies past each fetch offset: below the
            # HW for a consumer, below the log end for a follower
            positions = [(w[3], w[2].fetch_offset) for w in wanted
                         if not isinstance(w[3], PartitionError)]

            def arrived():
                if follower:
                    return any(p.log_end_offset > o for p, o in positions)
                return any(p.high_watermark > o for p, o in positions)

            if await _wait_for(facade, parts, arrived, body.max_wait_ms):
                _close_regions(response)
                response, total = build()
    facade.replicas.count_bytes_out(total, follower)
    return response


def _close_regions(response):
    """Close the file regions of a Fetch answer that is not sent."""
    for topic in response.responses:
        for p in topic.partitions:
            if isinstance(p.records, FileRegion):
                p.records.close()


# ------------------------------------------------------------------------------ ListOffsets

async def list_offsets(facade, version, body):
    cls = m.ListOffsetsResponse
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            r = cls.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                 error_code=0)
            try:
                partition = _partition(facade, t.name, p.partition_index)
                partition.check_leader(p.current_leader_epoch if version >= 4 else -1)
                offset, timestamp, epoch = _offset_for(partition, p.timestamp, body, version)
                if version == 0:
                    r.old_style_offsets = [] if offset < 0 else [offset]
                else:
                    r.offset, r.timestamp = offset, timestamp
                    if version >= 4:
                        r.leader_epoch = epoch
            except PartitionError as exc:
                r.error_code = exc.code
            parts.append(r)
        topics.append(cls.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return cls(throttle_time_ms=0, topics=topics)


def _offset_for(partition, timestamp, body, version):
    """(offset, timestamp, leader epoch) answering one ListOffsets partition."""
    log = partition.log
    # a consumer sees offsets up to the high watermark (read_committed: the same, as there
    # are no transactions)
    end = log.high_watermark if body.replica_id < 0 else log.log_end_offset
    epochs = log.epoch_entries()

    def epoch_of(offset):
        epoch = -1
        for e, start in epochs:
            if start <= offset:
                epoch = e
        return epoch

    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        offset = log.log_start_offset
        return offset, -1, epoch_of(offset)
    if timestamp in (LATEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1, -1
        return end, -1, partition.leader_epoch if end == log.log_end_offset else epoch_of(end)
    if timestamp == MAX_TIMESTAMP:
        best = (-1, -1)
        offset = log.log_start_offset
        while offset < end:
            read = log.read(offset, 1 << 20, committed=body.replica_id < 0)
            if not len(read.records):
                break
            for batch in read.batches():
                if batch.max_timestamp > best[0]:
                    best = (batch.max_timestamp, batch.last_offset)
            offset = read.next_offset
        if best[1] < 0:
            return -1, -1, -1
        return best[1], best[0], epoch_of(best[1])
    if timestamp < 0:
        raise PartitionError(_E.INVALID_REQUEST, f"unknown ListOffsets timestamp {timestamp}")
    found = log.offset_for_timestamp(timestamp)
    if found is None or found >= end:
        return -1, -1, -1
    read = log.read(found, 1, committed=False)
    for batch in read.batches():
        for record in batch.records:
            if record.offset == found:
                return found, record.timestamp, epoch_of(found)
    return found, timestamp, epoch_of(found)


# ------------------------------------------------------------------------------ OffsetForLeaderEpoch

async def offset_for_leader_epoch(facade, version, body):
    cls = m.OffsetForLeaderEpochResponse
    topics = []
    for t in body.topics:
        parts = []
        for p in t.partitions:
            r = cls.EpochEndOffset(partition=p.partition, error_code=0, leader_epoch=-1,
                                   end_offset=-1)
            try:
                partition = _partition(facade, t.topic, p.partition)
                partition.check_leader(p.current_leader_epoch if version >= 2 else -1)
                epoch, end = partition.log.end_offset_for_epoch(p.leader_epoch)
                r.leader_epoch, r.end_offset = epoch, end
            except PartitionError as exc:
                r.error_code = exc.code
            parts.append(r)
        topics.append(cls.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return cls(throttle_time_ms=0, topics=topics)


# ------------------------------------------------------------------------------ InitProducerId

async def init_producer_id(facade, version, body):
    """An idempotent producer's id: a new one from the broker's block (the controller
    hands out blocks, AllocateProducerIds), epoch 0. Transactions are not served."""
    cls = m.InitProducerIdResponse
    if body.transactional_id is not None:
        return cls(throttle_time_ms=0, error_code=_E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                   producer_id=-1, producer_epoch=-1)
    producer_id = await facade.next_producer_id()
    return cls(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)


# ------------------------------------------------------------------------------ groups
#
# Committed offsets (`kraftcore.broker.groups`): the coordinator
# of a group is the leader of its `__consumer_offsets` partition.

COORDINATOR_GROUP, COORDINATOR_TRANSACTION, COORDINATOR_SHARE = 0, 1, 2
_NO_NODE = (-1, "", -1)


def _coordinator(facade, key_type, key):
    """(error code, error message, node id, host, port) answering one FindCoordinator key."""
    if key_type == COORDINATOR_TRANSACTION:
        return (_E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "transactions are not supported", *_NO_NODE)
    groups = facade.groups
    image = facade.image
    topic = image.topic(OFFSETS_TOPIC)
    if topic is None:
        facade.ensure_offsets_topic()
        return (_E.COORDINATOR_NOT_AVAILABLE,
                f"the offsets topic {OFFSETS_TOPIC} does not exist yet: it is being created",
                *_NO_NODE)
    index = groups.partition_for(key)
    p = topic.partitions.get(index)
    if p is None or p.leader < 0 or not image.broker_is_active(p.leader):
        return (_E.COORDINATOR_NOT_AVAILABLE,
                f"{OFFSETS_TOPIC}-{index} has no leader", *_NO_NODE)
    listener = getattr(facade, "listener_name", None)
    endpoint = broker_endpoint(image.brokers[p.leader], listener)
    if endpoint is None:
        return (_E.COORDINATOR_NOT_AVAILABLE, f"broker {p.leader} has no endpoint"
                + (f" on listener {listener}" if listener else ""), *_NO_NODE)
    return 0, None, p.leader, *endpoint


async def find_coordinator(facade, version, body):
    """The broker leading the offsets partition of each group key (v4+: a batch of keys).
    The first request finds no offsets topic: the broker asks the active controller to
    create it and answers COORDINATOR_NOT_AVAILABLE until it has a leader, as Kafka does.
    Transaction keys are refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: no transactions),
    share-group keys and unknown key types are INVALID_REQUEST."""
    cls = m.FindCoordinatorResponse
    key_type = body.key_type if version >= 1 else COORDINATOR_GROUP
    if key_type == COORDINATOR_SHARE:
        raise invalid_request("share groups are not supported")
    if key_type not in (COORDINATOR_GROUP, COORDINATOR_TRANSACTION):
        raise invalid_request(f"unknown coordinator key type {key_type} (0 group, "
                              "1 transaction, 2 share)")
    if version < 4:
        code, message, node_id, host, port = _coordinator(facade, key_type, body.key)
        return cls(throttle_time_ms=0, error_code=code, error_message=message,
                   node_id=node_id, host=host, port=port)
    coordinators = []
    for key in body.coordinator_keys:
        code, message, node_id, host, port = _coordinator(facade, key_type, key)
        coordinators.append(cls.Coordinator(key=key, node_id=node_id, host=host, port=port,
                                            error_code=code, error_message=message))
    return cls(throttle_time_ms=0, coordinators=coordinators)


async def offset_commit(facade, version, body):
    """Commit a group's offsets (a group without members: generation -1). Partitions of
    topics the cluster does not have are UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by
    id, v10) and go no further, as in Kafka; the rest are written as one batch to the
    group's offsets partition and answered once the high watermark passed it."""
    cls = m.OffsetCommitResponse
    image = facade.image
    by_id = version >= 10
    answers, accepted = [], []
    for t in body.topics:
        topic = image.topic(t.topic_id if by_id else t.name)
        slots = []
        for p in t.partitions:
            slot = [p.partition_index, 0]
            if topic is None:
                slot[1] = _E.UNKNOWN_TOPIC_ID if by_id else _E.UNKNOWN_TOPIC_OR_PARTITION
            elif p.partition_index not in topic.partitions:
                slot[1] = _E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                accepted.append((slot, topic, p))
            slots.append(slot)
        answers.append((t, slots))
    if accepted:
        waiting = _commit(facade, version, body, accepted)
        if waiting is not None:
            # NOT_COORDINATOR when leadership moved; COORDINATOR_NOT_AVAILABLE when the ISR
            # did not take it within offsets.commit.timeout.ms (the coordinator's timer:
            # Kafka's timeout, REQUEST_TIMED_OUT, reaches the committer so)
            future, writes = waiting
            code = await future
            if code:
                for slot, *_ in writes:
                    slot[1] = code
    topics = []
    for t, slots in answers:
        entry = cls.OffsetCommitResponseTopic(partitions=[
            cls.OffsetCommitResponsePartition(partition_index=index, error_code=code)
            for index, code in slots])
        if by_id:
            entry.topic_id = t.topic_id
        else:
            entry.name = t.name
        topics.append(entry)
    return cls(throttle_time_ms=0, topics=topics)


def _commit(facade, version, body, accepted):
    """Set the code of each accepted (slot, topic image, request partition) that is
    answered at once; returns None, or (future of the code, [(slot, ...)]) for those
    written (a function, not a coroutine: one less per commit)."""
    groups = facade.groups
    group = body.group_id
    now = facade.now_ms()

    def fail(code, slots=None):
        for slot, *_ in (accepted if slots is None else slots):
            slot[1] = code

    try:
        groups.validate_commit(group, body.generation_id_or_member_epoch if version >= 1 else -1,
                               body.member_id if version >= 1 else "",
                               body.group_instance_id if version >= 7 else None, version,
                               now)
    except GroupError as exc:
        return fail(exc.code)
    expire = -1
    if 2 <= version <= 4 and body.retention_time_ms != -1:
        expire = now + body.retention_time_ms  # Kafka writes such a commit as value v1
    writes = []
    for slot, topic, p in accepted:
        code = groups.metadata_error(p.committed_metadata)
        if code is not None:
            slot[1] = code
            continue
        value = OffsetAndMetadata(
            p.committed_offset, p.committed_leader_epoch if version >= 6 else -1,
            p.committed_metadata or "", now, expire,
            topic.topic_id if version >= 10 else ZERO_UUID)
        writes.append((slot, topic.name, p.partition_index, value))
    if not writes:
        return None
    future = asyncio.get_running_loop().create_future()

    def done(code, _):
        if not future.done():
            future.set_result(code)

    try:
        groups.commit(group, [w[1:] for w in writes], now, done)
    except GroupError as exc:
        return fail(exc.code, writes)
    return future, writes


async def _stable(facade, group):
    """RequireStable (v7+): wait until the group's written offsets are committed (within
    `offsets.commit.timeout.ms`), as Kafka's coordinator orders such a read after the
    writes before it; returns the (topic, partition) keys still not committed then."""
    groups = facade.groups
    try:
        pending = groups.pending_offsets(group)
    except GroupError:
        return set()  # answered by the read itself
    if pending is None:
        return set()
    partition, end, keys = pending
    def settled():
        return groups.is_committed(partition, end) or groups.commit_failed(partition)

    if await _wait_for(facade, [partition], settled, groups.config.commit_timeout_ms):
        return set()
    return keys


async def _group_offsets(facade, version, group, topics, require_stable=False):
    """(group error code, [(request topic or name, [(index, OffsetAndMetadata or None, code)])])
    answering one group of an OffsetFetch: the committed offsets of the partitions asked
    for (None: not committed, -1 in the answer), or all of them when `topics` is None. With
    `require_stable`, the group's offsets written before are committed first; a partition
    whose offset still is not is UNSTABLE_OFFSET_COMMIT (the client asks again)."""
    unstable = await _stable(facade, group) if require_stable else set()
    try:
        offsets = facade.groups.committed(group)
    except GroupError as exc:
        return exc.code, []
    image = facade.image
    by_id = version >= 10
    out = []
    if topics is None:
        by_topic = {}
        for (name, index), value in offsets.items():
            by_topic.setdefault(name, []).append((index, value, 0))
        for name in sorted(by_topic):
            key = name
            if by_id:
                t = image.topic(name)
                if t is None:
                    continue  # deleted since: no id to name it by
                key = t.topic_id
            out.append((key, sorted(by_topic[name], key=lambda part: part[0])))
        return 0, out
    for t in topics:
        if by_id:
            topic = image.topics.get(t.topic_id)
            if topic is None:
                out.append((t.topic_id, [(i, None, _E.UNKNOWN_TOPIC_ID)
                                         for i in t.partition_indexes]))
                continue
            name, key = topic.name, t.topic_id
        else:
            name = key = t.name
        out.append((key, [(i, None, _E.UNSTABLE_OFFSET_COMMIT) if (name, i) in unstable
                          else (i, offsets.get((name, i)), 0) for i in t.partition_indexes]))
    return 0, out


def _fetched_partition(cls, version, index, value, code):
    if value is None:
        value = OffsetAndMetadata(-1)
    r = cls(partition_index=index, committed_offset=value.offset, metadata=value.metadata,
            error_code=code)
    if version >= 5:
        r.committed_leader_epoch = value.leader_epoch
    return r


async def offset_fetch(facade, version, body):
    """The committed offsets of a group (v8+: of several groups, each answered on its own,
    so one group's error never touches another's); with RequireStable (v7+, what
    librdkafka and the Java consumer send) after the group's own writes are committed, so
    a new coordinator never answers offsets older than ones it holds already."""
    cls = m.OffsetFetchResponse
    if version >= 8:
        answers = []
        for g in body.groups:
            code, topics = await _group_offsets(facade, version, g.group_id, g.topics,
                                                body.require_stable)
            entry = cls.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
            for key, parts in topics:
                t = cls.OffsetFetchResponseTopics(partitions=[
                    _fetched_partition(cls.OffsetFetchResponsePartitions, version, *part)
                    for part in parts])
                if version >= 10:
                    t.topic_id = key
                else:
                    t.name = key
                entry.topics.append(t)
            answers.append(entry)
        return cls(throttle_time_ms=0, groups=answers)
    topics = body.topics if version >= 2 else (body.topics or [])
    code, answer = await _group_offsets(facade, version, body.group_id, topics,
                                        version >= 7 and body.require_stable)
    if code and version < 2:
        # v0-1 have no group-level error: every partition asked for carries it
        answer = [(t.name, [(i, None, code) for i in t.partition_indexes]) for t in topics]
    response = cls(throttle_time_ms=0, topics=[
        cls.OffsetFetchResponseTopic(name=name, partitions=[
            _fetched_partition(cls.OffsetFetchResponsePartition, version, *part)
            for part in parts]) for name, parts in answer])
    if version >= 2:
        response.error_code = code
    return response


# ------------------------------------------------------------------------------ membership
#
# Kafka's classic group protocol (`kraftcore.broker.classic_group`): a JoinGroup or
# SyncGroup may wait for the rest of the group; the coordinator answers it through a
# callback, which resolves the handler's future.

# DescribeGroups' AuthorizedOperations of a group when asked for: READ, DELETE, DESCRIBE
# (every operation on a group; no authorizer is configured).
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_NO_OPERATIONS = -(1 << 31)


def _answer_later():
    """(future, callback): the callback resolves the future once; later calls, and calls
    after the request was given up (its connection closed), are ignored."""
    future = asyncio.get_running_loop().create_future()

    def callback(result):
        if not future.done():
            future.set_result(result)

    return future, callback


async def join_group(facade, version, body):
    """Join a group; answered when the group's rebalance completes (or at once: an error,
    MEMBER_ID_REQUIRED for a new member of v4+)."""
    cls = m.JoinGroupResponse
    request = JoinRequest(
        group_id=body.group_id, member_id=body.member_id,
        instance_id=body.group_instance_id if version >= 5 else None,
        client_id=facade.client_id or "", client_host=facade.client_host or "",
        session_ms=body.session_timeout_ms,
        rebalance_ms=body.rebalance_timeout_ms if version >= 1 else body.session_timeout_ms,
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
        require_known_member_id=version >= 4)
    future, callback = _answer_later()
    facade.groups.join(request, facade.now_ms(), callback)
    r = await future
    protocol_name = r.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    response = cls(throttle_time_ms=0, error_code=r.error, generation_id=r.generation,
                   protocol_name=protocol_name, leader=r.leader, member_id=r.member_id,
                   members=[cls.JoinGroupResponseMember(member_id=mid, group_instance_id=iid,
                                                        metadata=data)
                            for mid, iid, data in r.members])
    if version >= 7:
        response.protocol_type = r.protocol_type
    if version >= 9:
        response.skip_assignment = r.skip_assignment
    return response


async def sync_group(facade, version, body):
    """The member's assignment, once the leader has sent (and the coordinator stored) the
    group's."""
    cls = m.SyncGroupResponse
    assignments = {}
    for a in body.assignments:
        if a.member_id in assignments:
            raise invalid_request(f"member {a.member_id!r} is assigned twice")
        assignments[a.member_id] = bytes(a.assignment)
    future, callback = _answer_later()
    facade.groups.sync(body.group_id, body.generation_id, body.member_id,
                       body.group_instance_id if version >= 3 else None,
                       body.protocol_type if version >= 5 else None,
                       body.protocol_name if version >= 5 else None,
                       assignments, facade.now_ms(), callback)
    r = await future
    response = cls(throttle_time_ms=0, error_code=r.error, assignment=r.assignment)
    if version >= 5:
        response.protocol_type = r.protocol_type
        response.protocol_name = r.protocol_name
    return response


async def heartbeat(facade, version, body):
    code = facade.groups.heartbeat(body.group_id, body.generation_id, body.member_id,
                                   body.group_instance_id if version >= 3 else None,
                                   facade.now_ms())
    return m.HeartbeatResponse(throttle_time_ms=0, error_code=code)


async def leave_group(facade, version, body):
    """Members leave (v3+: several, static ones by instance id, each answered on its
    own)."""
    cls = m.LeaveGroupResponse
    if version < 3:
        code, codes = facade.groups.leave(body.group_id, [(body.member_id, None)],
                                          facade.now_ms())
        return cls(throttle_time_ms=0, error_code=code or (codes[0] if codes else 0))
    members = [(x.member_id, x.group_instance_id) for x in body.members]
    code, codes = facade.groups.leave(body.group_id, members, facade.now_ms())
    if code:
        return cls(throttle_time_ms=0, error_code=code)
    return cls(throttle_time_ms=0, error_code=0, members=[
        cls.MemberResponse(member_id=mid, group_instance_id=iid, error_code=c)
        for (mid, iid), c in zip(members, codes)])


async def describe_groups(facade, version, body):
    """Each group's state, protocol and members (their subscriptions and assignments
    when Stable). A group that does not exist is Dead (v6+: GROUP_ID_NOT_FOUND)."""
    cls = m.DescribeGroupsResponse
    out = []
    for group_id in body.groups:
        d = facade.groups.describe(group_id)
        code = d.error
        if code == _E.GROUP_ID_NOT_FOUND and version < 6:
            code = 0
        entry = cls.DescribedGroup(
            error_code=code, group_id=group_id, group_state=d.state,
            protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            members=[cls.DescribedGroupMember(
                member_id=mid, group_instance_id=iid, client_id=client, client_host=host,
                member_metadata=meta, member_assignment=assignment)
                for mid, iid, client, host, meta, assignment in d.members])
        if version >= 6:
            entry.error_message = d.message if code else None
        if version >= 3:
            entry.authorized_operations = (
                _GROUP_OPERATIONS if body.include_authorized_operations and not code
                else _NO_OPERATIONS)
        out.append(entry)
    return cls(throttle_time_ms=0, groups=out)


async def list_groups(facade, version, body):
    """The groups this broker coordinates, filtered by state (v4+) and type (v5+: only
    "classic" groups exist here), case-insensitively as Kafka does."""
    cls = m.ListGroupsResponse
    code, groups = facade.groups.list_groups()
    states = {x.lower() for x in body.states_filter} if version >= 4 else set()
    types = {x.lower() for x in body.types_filter} if version >= 5 else set()
    if types and "classic" not in types:
        groups = []
    return cls(throttle_time_ms=0, error_code=code, groups=[
        cls.ListedGroup(group_id=g, protocol_type=ptype, group_state=state,
                        group_type="classic")
        for g, ptype, state in groups if not states or state.lower() in states])


async def _written(facade, partition, end):
    """0 once a group write (partition, end offset) is committed; else its error code."""
    groups = facade.groups
    await _wait_for(facade, [partition],
                    lambda: groups.is_committed(partition, end) or groups.commit_failed(partition),
                    groups.config.commit_timeout_ms)
    if groups.is_committed(partition, end):
        return 0
    # leadership moved (NOT_COORDINATOR), or not replicated in time: Kafka's timeout
    # (REQUEST_TIMED_OUT) reaches the client as COORDINATOR_NOT_AVAILABLE
    return (_E.NOT_COORDINATOR if groups.commit_failed(partition)
            else _E.COORDINATOR_NOT_AVAILABLE)


async def delete_groups(facade, version, body):
    """Delete empty groups with their offsets, each answered on its own."""
    cls = m.DeleteGroupsResponse
    results = []
    for group_id in dict.fromkeys(body.groups_names):
        code, message = 0, None
        try:
            partition, end = facade.groups.delete_group(group_id, facade.now_ms())
        except GroupError as exc:
            code, message = exc.code, str(exc)
        else:
            code = await _written(facade, partition, end)
        entry = cls.DeletableGroupResult(group_id=group_id, error_code=code)
        if version >= 3:
            entry.error_message = message
        results.append(entry)
    return cls(throttle_time_ms=0, results=results)


async def offset_delete(facade, version, body):
    """Delete a group's offsets of some partitions; those of a topic its members
    subscribe to are GROUP_SUBSCRIBED_TO_TOPIC, of a topic the cluster does not have
    UNKNOWN_TOPIC_OR_PARTITION."""
    cls = m.OffsetDeleteResponse
    image = facade.image
    asked, codes = [], {}
    for t in body.topics:
        known = image.topic(t.name) is not None
        for p in t.partitions:
            key = (t.name, p.partition_index)
            if known:
                asked.append(key)
            else:
                codes[key] = _E.UNKNOWN_TOPIC_OR_PARTITION
    try:
        found, write = facade.groups.delete_offsets(body.group_id, asked, facade.now_ms())
    except GroupError as exc:
        return cls(error_code=exc.code, throttle_time_ms=0, topics=[])
    codes.update(found)
    if write is not None:
        code = await _written(facade, *write)
        if code:
            return cls(error_code=code, throttle_time_ms=0, topics=[])
    return cls(error_code=0, throttle_time_ms=0, topics=[
        cls.OffsetDeleteResponseTopic(name=t.name, partitions=[
            cls.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                              error_code=codes[(t.name, p.partition_index)])
            for p in t.partitions]) for t in body.topics])


# ------------------------------------------------------------------------------ forwarding

def _forwarded(key):
    async def forward(facade, version, body):
        return await facade.forward(key, version, body)

    forward.__name__ = f"forward_{key}"
    return forward


FORWARDED_API_KEYS = frozenset((19, 20, 37, 43, 44, *SECURITY_WRITES))
"""CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, IncrementalAlterConfigs,
CreateAcls, DeleteAcls, AlterUserScramCredentials: sent on to the active controller."""

_HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit,
             9: offset_fetch, 10: find_coordinator, 11: join_group, 12: heartbeat,
             13: leave_group, 14: sync_group, 15: describe_groups, 16: list_groups,
             22: init_producer_id, 23: offset_for_leader_epoch, 42: delete_groups,
             47: offset_delete,
             32: describe_configs, 60: describe_cluster, **SECURITY_READS,
             **{key: _forwarded(key) for key in FORWARDED_API_KEYS}}

BROKER_API_KEYS = frozenset(_HANDLERS)
"""The API keys `handle_broker_request` answers (the listener answers ApiVersions)."""

BROKER_VERSIONS = {0: (3, 12), 1: (4, 17), 2: (1, 10), 8: (2, 10), 9: (1, 10), 23: (2, 4)}
"""The version ranges the broker listener advertises where they are narrower than the
schemas' (Kafka 4's: Produce from 3, Fetch from 4, ...)."""

handle_broker_request = request_handler("broker", _HANDLERS)
"""`async handle_broker_request(facade, request) -> response`: the broker's answer to
`request` at its version; never raises for a request's content."""
