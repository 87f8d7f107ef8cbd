"""The broker's data plane through its handlers (`kraftcore.apis.broker`) over real partition
logs (`kraftcore.broker.replicas.ReplicaManager`): Produce with acks 0 / 1 / all, the high
watermark a consumer reads up to, followers' fetches moving it, min.insync.replicas,
divergence, ListOffsets and OffsetForLeaderEpoch, and Kafka's error codes for bad input —
each refusal leaving the log as it was. Every request and answer goes through the wire
encoding (`call`)."""

import asyncio

import pytest

from kraftcore import codec
from kraftcore.apis.broker import handle_broker_request
from kraftcore.broker.replicas import ReplicaConfig, ReplicaManager
from kraftcore.protocol import framing, messages as m
from kraftcore.protocol.error_codes import ErrorCode as E

from tests.apis.helpers import call, create_topics, through_wire

PRODUCE_V, FETCH_V, LIST_V, EPOCH_V = 9, 12, 7, 4


class DataFacade:
    """A broker's facade over the quorum's image and its own ReplicaManager."""

    def __init__(self, quorum_facade, broker_id, directory, **config):
        self.quorum = quorum_facade
        self.node_id = broker_id
        self.cluster_id = quorum_facade.cluster_id
        self.replicas = ReplicaManager(broker_id, [str(directory)], ReplicaConfig(
            log_settings=(("fsync", "never"),), **config), clock=lambda: self.now)
        self.now = 1_000_000
        # every read goes out as a file region (zero-copy), as a node's large reads do
        self.fetch_region_bytes_min = 1

    @property
    def image(self):
        return self.quorum.image

    def sync(self):
        return self.replicas.apply_image(self.quorum.image, self.now)

    def controller_id(self):
        return self.node_id

    def now_ms(self):
        return self.now


def answer(facade, body, version):
    return call(facade, body, version, handle=handle_broker_request)


async def answer_async(facade, body, version):
    frame = framing.encode_request(body, version, 7, client_id="test")
    response = await handle_broker_request(facade, framing.decode_request(frame[4:]))
    return None if response is None else through_wire(response, body.api_key, version)


def produce(topic, partition, values, acks=-1, timeout_ms=1000, batch=None):
    cls = m.ProduceRequest
    data = batch if batch is not None else bytes(codec.encode_batch(values, timestamp=1000))
    return cls(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[
            cls.PartitionProduceData(index=partition, records=data)])])


def fetch(topic, partition, offset, *, replica_id=-1, last_epoch=-1, leader_epoch=-1,
          max_wait_ms=0):
    cls = m.FetchRequest
    return cls(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
               topics=[cls.FetchTopic(topic=topic, partitions=[cls.FetchPartition(
                   partition=partition, fetch_offset=offset, last_fetched_epoch=last_epoch,
                   current_leader_epoch=leader_epoch, partition_max_bytes=1 << 20)])])


def list_offsets(topic, partition, timestamp):
    cls = m.ListOffsetsRequest
    return cls(replica_id=-1, topics=[cls.ListOffsetsTopic(name=topic, partitions=[
        cls.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)])])


def one(response):
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition


def fetched(response):
    (topic,) = response.responses
    (partition,) = topic.partitions
    values = [r.value for b in codec.decode_batches(partition.records or b"") for r in b.records]
    return partition, values


@pytest.fixture
def broker(cluster, tmp_path):
    """Broker 1 leading t-0 (replicas [1, 2, 3]), u-0 (replicas [1]) and following v-0
    (led by 2)."""
    facade, _ = cluster
    call(facade, create_topics(("t", -1, -1, {0: [1, 2, 3]}), ("u", -1, -1, {0: [1]}),
                               ("v", -1, -1, {0: [2, 1]})), 7)
    broker = DataFacade(facade, 1, tmp_path / "b1")
    changes = broker.sync()
    assert sorted(p.name for p in changes.leaders) == ["t-0", "u-0"]
    assert [p.name for p in changes.followers] == ["v-0"]
    yield broker
    broker.replicas.close()


def test_acks_1_appends_and_a_consumer_reads_up_to_the_high_watermark(broker):
    first = one(answer(broker, produce("u", 0, [b"a", b"b"], acks=1), PRODUCE_V))
    second = one(answer(broker, produce("u", 0, [b"c"], acks=1), PRODUCE_V))
    assert (first.error_code, first.base_offset, second.base_offset) == (0, 0, 2)
    partition, values = fetched(answer(broker, fetch("u", 0, 0), FETCH_V))
    assert (partition.error_code, partition.high_watermark, values) == (0, 3, [b"a", b"b", b"c"])
    earliest = answer(broker, list_offsets("u", 0, -2), LIST_V).topics[0].partitions[0]
    latest = answer(broker, list_offsets("u", 0, -1), LIST_V).topics[0].partitions[0]
    assert (earliest.offset, latest.offset, latest.leader_epoch) == (0, 3, 0)


def test_acks_0_gets_no_answer_and_the_records_are_stored(broker):
    request = produce("u", 0, [b"x"], acks=0)
    assert asyncio.run(answer_async(broker, request, PRODUCE_V)) is None
    assert broker.replicas.get("u", 0).log_end_offset == 1


def test_acks_all_waits_for_the_followers_and_the_high_watermark(broker):
    partition = broker.replicas.get("t", 0)

    async def scenario():
        produce_task = asyncio.ensure_future(
            answer_async(broker, produce("t", 0, [b"a", b"b"], timeout_ms=5000), PRODUCE_V))
        await asyncio.sleep(0.05)
        assert not produce_task.done() and partition.high_watermark == 0
        # a consumer sees nothing yet: the records are above the high watermark
        response = await answer_async(broker, fetch("t", 0, 0), FETCH_V)
        assert not response.responses[0].partitions[0].records
        for follower in (2, 3):
            await answer_async(broker, fetch("t", 0, 2, replica_id=follower), FETCH_V)
        return await asyncio.wait_for(produce_task, 5)

    result = asyncio.run(scenario()).responses[0].partition_responses[0]
    assert (result.error_code, result.base_offset) == (0, 0)
    assert partition.high_watermark == 2


def test_acks_all_times_out_when_the_isr_does_not_catch_up(broker):
    result = one(answer(broker, produce("t", 0, [b"a"], timeout_ms=50), PRODUCE_V))
    assert result.error_code == E.REQUEST_TIMED_OUT
    assert broker.replicas.get("t", 0).log_end_offset == 1  # written: a retry duplicates it


def test_min_insync_replicas_refuses_acks_all_and_hides_acks_1(cluster, tmp_path):
    facade, _ = cluster
    call(facade, create_topics(("m", -1, -1, {0: [1, 2, 3]},
                                {"min.insync.replicas": "2"})), 7)
    broker = DataFacade(facade, 1, tmp_path / "b1")
    broker.sync()
    partition = broker.replicas.get("m", 0)
    partition.isr = (1,)  # the ISR after both followers dropped out
    partition.end_isr_change(partition.leader_epoch, partition.partition_epoch, [1])
    refused = one(answer(broker, produce("m", 0, [b"a"]), PRODUCE_V))
    assert refused.error_code == E.NOT_ENOUGH_REPLICAS
    assert partition.log_end_offset == 0  # refused before anything was written
    accepted = one(answer(broker, produce("m", 0, [b"b"], acks=1), PRODUCE_V))
    assert (accepted.error_code, partition.log_end_offset, partition.high_watermark) == (0, 1, 0)
    _, values = fetched(answer(broker, fetch("m", 0, 0), FETCH_V))
    assert values == []  # appended, but invisible until the ISR recovers
    broker.replicas.close()


def test_a_follower_whose_log_diverges_is_told_where(broker):
    for values in ([b"a", b"b"], [b"c"]):
        answer(broker, produce("u", 0, values, acks=1), PRODUCE_V)
    broker.replicas.get("t", 0)
    # broker 2 claims records of epoch 0 up to offset 7 on t-0, whose leader has none
    answer(broker, produce("t", 0, [b"x"], acks=1), PRODUCE_V)
    partition, _ = fetched(answer(broker, fetch("t", 0, 7, replica_id=2, last_epoch=0),
                                  FETCH_V))
    assert (partition.diverging_epoch.epoch, partition.diverging_epoch.end_offset) == (0, 1)
    ends = answer(broker, m.OffsetForLeaderEpochRequest(replica_id=-1, topics=[
        m.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic="u", partitions=[
            m.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=0, current_leader_epoch=0, leader_epoch=0)])]), EPOCH_V)
    end = ends.topics[0].partitions[0]
    assert (end.error_code, end.leader_epoch, end.end_offset) == (0, 0, 3)


@pytest.mark.parametrize("case", ["unknown topic", "unknown partition", "not the leader",
                                  "bad crc", "bad magic", "lying length", "bad acks",
                                  "fenced epoch", "too large"])
def test_bad_produce_gets_kafkas_error_and_stores_nothing(broker, case):
    good = bytes(codec.encode_batch([b"a", b"b"], timestamp=1000))
    topic, partition, acks, batch, expect = "u", 0, 1, good, None
    if case == "unknown topic":
        topic, expect = "nope", E.UNKNOWN_TOPIC_OR_PARTITION
    elif case == "unknown partition":
        partition, expect = 9, E.UNKNOWN_TOPIC_OR_PARTITION
    elif case == "not the leader":
        topic, expect = "v", E.NOT_LEADER_OR_FOLLOWER
    elif case == "bad crc":
        batch, expect = good[:-1] + bytes([good[-1] ^ 1]), E.CORRUPT_MESSAGE
    elif case == "bad magic":
        batch, expect = good[:16] + b"\x01" + good[17:], E.CORRUPT_MESSAGE
    elif case == "lying length":
        batch, expect = good[:8] + (len(good)).to_bytes(4, "big") + good[12:], E.CORRUPT_MESSAGE
    elif case == "bad acks":
        acks, expect = 2, E.INVALID_REQUIRED_ACKS
    elif case == "too large":
        batch = bytes(codec.encode_batch([bytes(1100 * 1024)], timestamp=1000))
        expect = E.MESSAGE_TOO_LARGE
    if case == "fenced epoch":
        response = answer(broker, fetch("u", 0, 0, leader_epoch=0), FETCH_V)
        assert response.responses[0].partitions[0].error_code == 0
        response = answer(broker, fetch("u", 0, 0, leader_epoch=-5 + 4), FETCH_V)
        assert response.responses[0].partitions[0].error_code == 0  # -1: no check
        stale = fetch("u", 0, 0, leader_epoch=0)
        broker.replicas.get("u", 0).leader_epoch = 3  # a newer epoch than the client's
        response = answer(broker, stale, FETCH_V)
        assert response.responses[0].partitions[0].error_code == E.FENCED_LEADER_EPOCH
        return
    before = {p.name: p.log_end_offset for p in broker.replicas.partitions.values()}
    result = one(answer(broker, produce(topic, partition, None, acks=acks, batch=batch),
                        PRODUCE_V))
    assert result.error_code == expect, result
    assert result.error_message
    assert {p.name: p.log_end_offset for p in broker.replicas.partitions.values()} == before
    # the broker goes on: a good batch is taken
    assert one(answer(broker, produce("u", 0, [b"ok"], acks=1), PRODUCE_V)).error_code == 0


def test_a_refusal_because_the_leader_moved_names_the_current_leader(broker):
    """KIP-951: NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH carry CurrentLeader (Produce
    v10+, Fetch v12+) and the answer lists that leader's endpoint (Produce v10+, Fetch
    v16+) when the image has one; older versions carry neither."""
    image = broker.image
    led = image.topic("v").partitions[0]
    assert led.leader == 2
    endpoints = {b.broker_id: b.end_points for b in image.brokers.values()}
    assert endpoints[2], "broker 2 registered an endpoint"

    def check(partition, response, version, with_endpoints):
        assert (partition.current_leader.leader_id,
                partition.current_leader.leader_epoch) == (2, led.leader_epoch)
        listed = [(e.node_id, e.host, e.port) for e in response.node_endpoints]
        if with_endpoints and endpoints.get(2):
            ep = endpoints[2][0]
            assert listed == [(2, ep.host, ep.port)]
        else:
            assert listed == []

    response = answer(broker, produce("v", 0, [b"x"], acks=1), 10)
    assert one(response).error_code == E.NOT_LEADER_OR_FOLLOWER
    check(one(response), response, 10, True)
    old = one(answer(broker, produce("v", 0, [b"x"], acks=1), 9))
    assert old.error_code == E.NOT_LEADER_OR_FOLLOWER and old.current_leader.leader_id == -1
    for version in (12, 16):
        request = fetch("v", 0, 0)
        request.topics[0].topic_id = image.topic("v").topic_id  # v13+ name topics by id
        response = answer(broker, request, version)
        (part,) = response.responses[0].partitions
        assert part.error_code == E.NOT_LEADER_OR_FOLLOWER
        check(part, response, version, version >= 16)
    # a fenced epoch on a partition this broker leads: its own id and epoch
    broker.replicas.get("u", 0).leader_epoch = 3
    response = answer(broker, fetch("u", 0, 0, leader_epoch=0), FETCH_V)
    (part,) = response.responses[0].partitions
    assert part.error_code == E.FENCED_LEADER_EPOCH
    assert part.current_leader.leader_id == 1
    assert part.current_leader.leader_epoch == image.topic("u").partitions[0].leader_epoch
    # other refusals carry none
    response = answer(broker, fetch("nope", 0, 0), FETCH_V)
    assert response.responses[0].partitions[0].current_leader.leader_id == -1


def test_one_fetch_answer_holds_at_most_so_many_file_regions(broker, monkeypatch):
    """Each zero-copy partition holds a file descriptor until it is sent: past
    `limits.BROKER_FETCH_REGIONS_PER_RESPONSE_MAX` (2 here) the reads are copied, and the
    client gets the same records either way."""
    import kraftcore.apis.broker as handlers
    from kraftcore.types import FileRegion

    call(broker.quorum, create_topics(("w", -1, -1, {i: [1] for i in range(3)})), 7)
    broker.sync()
    for i in range(3):
        assert one(answer(broker, produce("w", i, [b"w%d" % i], acks=1), PRODUCE_V)).error_code == 0
    monkeypatch.setattr(handlers, "_REGIONS_MAX", 2)
    request = fetch("w", 0, 0)
    request.topics[0].partitions = [m.FetchRequest.FetchPartition(
        partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in range(3)]
    frame = framing.encode_request(request, FETCH_V, 7, client_id="test")
    response = asyncio.run(handle_broker_request(broker, framing.decode_request(frame[4:])))
    kinds = [isinstance(p.records, FileRegion) for p in response.responses[0].partitions]
    assert kinds == [True, True, False]
    for p in response.responses[0].partitions:
        if isinstance(p.records, FileRegion):
            p.records.close()
    decoded = answer(broker, request, FETCH_V)
    assert [[r.value for b in codec.decode_batches(p.records) for r in b.records]
            for p in decoded.responses[0].partitions] == [[b"w0"], [b"w1"], [b"w2"]]


def test_a_fetch_outside_the_log_is_offset_out_of_range(broker):
    answer(broker, produce("u", 0, [b"a"], acks=1), PRODUCE_V)
    partition, _ = fetched(answer(broker, fetch("u", 0, 5), FETCH_V))
    assert partition.error_code == E.OFFSET_OUT_OF_RANGE


def test_a_long_poll_fetch_returns_when_records_arrive(broker):
    async def scenario():
        waiting = asyncio.ensure_future(
            answer_async(broker, fetch("u", 0, 0, max_wait_ms=5000), FETCH_V))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await answer_async(broker, produce("u", 0, [b"late"], acks=1), PRODUCE_V)
        return await asyncio.wait_for(waiting, 5)

    response = asyncio.run(scenario())
    (partition,) = response.responses[0].partitions
    values = [r.value for b in codec.decode_batches(partition.records) for r in b.records]
    assert values == [b"late"]


def test_a_deleted_topic_deletes_its_log(cluster, broker):
    facade, _ = cluster
    path = broker.replicas.get("u", 0).log.path
    call(facade, m.DeleteTopicsRequest(topic_names=["u"], timeout_ms=1000), 5)
    changes = broker.sync()
    assert [p.name for p in changes.removed] == ["u-0"]
    import os
    assert not os.path.exists(path)


def test_topic_configs_set_the_partition_logs_and_log_append_time(cluster, tmp_path):
    facade, _ = cluster
    call(facade, create_topics(("la", -1, -1, {0: [1]}, {
        "message.timestamp.type": "LogAppendTime", "segment.bytes": "1048576",
        "retention.ms": "60000", "max.message.bytes": "2000"})), 7)
    broker = DataFacade(facade, 1, tmp_path / "b1")
    broker.sync()
    partition = broker.replicas.get("la", 0)
    config = partition.log.config
    assert (config.segment_bytes, config.retention_ms, config.batch_bytes_max) == (
        1048576, 60000, 2000)
    result = one(answer(broker, produce("la", 0, [b"a"], acks=1), PRODUCE_V))
    assert (result.error_code, result.log_append_time_ms) == (0, broker.now)
    (batch,) = codec.decode_batches(partition.log.read(0).records)
    assert batch.timestamp_type == 1 and batch.max_timestamp == broker.now
    too_big = one(answer(broker, produce("la", 0, [bytes(3000)], acks=1), PRODUCE_V))
    assert too_big.error_code == E.MESSAGE_TOO_LARGE
    broker.replicas.close()
