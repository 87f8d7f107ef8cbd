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
| InitProducerId (22) | 0-5 | an idempotent producer's id (no transactions) |
| OffsetForLeaderEpoch (23) | 2-4 | where an epoch ends in the leader's log |
| DescribeConfigs (32), DescribeCluster (60) | | from the image (`kraftcore.apis.reads`) |
| CreateTopics (19), DeleteTopics (20), CreatePartitions (37), ElectLeaders (43), IncrementalAlterConfigs (44) | | forwarded to the active controller |

Per-partition refusals carry Kafka's codes (`kraftcore.broker.partition.PartitionError`);
the rules every answer keeps are `kraftcore.apis.dispatch`'s. A Produce with acks=0 is
answered with nothing (`NO_RESPONSE`), as Kafka does.
"""

import asyncio

from kraftcore.apis.dispatch import request_handler
from kraftcore.apis.reads import describe_cluster, describe_configs, metadata
from kraftcore.broker.partition import PartitionError
from kraftcore.limits import BROKER_FETCH_REGIONS_PER_RESPONSE_MAX
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import FileRegion

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

    def __init__(self, cls, image, by_id):
        self.cls = cls
        self.image = image
        self.by_id = by_id  # topics are keyed by id (v13+), else by name
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
            if broker is not None and broker.end_points:
                ep = broker.end_points[0]
                out.append(self.cls.NodeEndpoint(node_id=node_id, host=ep.host, port=ep.port,
                                                 rack=broker.rack))
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


def _produce_response(cls, version, body, results, facade):
    topics = []
    hints = _LeaderHints(cls, facade.image, version >= 13)
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
        hints = _LeaderHints(cls, image, version >= 13)
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


# ------------------------------------------------------------------------------ forwarding

def _forwarded(key):
    async def forward(facade, version, body):
        return await facade.forward(key, version, body)

    forward.__name__ = f"forward_{key}"
    return forward


FORWARDED_API_KEYS = frozenset((19, 20, 37, 43, 44))
"""CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders, IncrementalAlterConfigs:
sent on to the active controller."""

_HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 3: metadata, 22: init_producer_id,
             23: offset_for_leader_epoch,
             32: describe_configs, 60: describe_cluster,
             **{key: _forwarded(key) for key in FORWARDED_API_KEYS}}

BROKER_API_KEYS = frozenset(_HANDLERS)
"""The API keys `handle_broker_request` answers (the listener answers ApiVersions)."""

BROKER_VERSIONS = {0: (3, 12), 1: (4, 17), 2: (1, 10), 23: (2, 4)}
"""The version ranges the broker listener advertises where they are narrower than the
schemas' (Kafka 4's: Produce from 3, Fetch from 4, ...)."""

handle_broker_request = request_handler("broker", _HANDLERS)
"""`async handle_broker_request(facade, request) -> response`: the broker's answer to
`request` at its version; never raises for a request's content."""
