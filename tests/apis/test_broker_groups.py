"""Committed offsets through the broker's handlers (FindCoordinator, OffsetCommit,
OffsetFetch in `kraftcore.apis.broker`) over a real `GroupCoordinator` and real partition
logs: every version the clients send, through the wire encoding (`call`); a commit answered
only once the high watermark passed it; the load of a new coordinator from the offsets
partition's log; Kafka's error codes for hostile requests, none of which touches another
group's offsets."""

import asyncio

import pytest

from kraftcore import codec
from kraftcore.broker.group_records import (OFFSETS_TOPIC, GroupMetadataValue, OffsetAndMetadata,
                                            offset_commit_record, partition_for)
from kraftcore.broker.groups import (GroupConfig, GroupCoordinator, GroupError,
                                     offsets_topic_request)
from kraftcore.broker.replicas import RoleChanges
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.types import Uuid

from tests.apis.helpers import call, create_topics
from tests.apis.test_broker_data import (FETCH_V, PRODUCE_V, DataFacade, answer, answer_async,
                                         fetch, one, produce)

OFFSETS_PARTITIONS = 4
# __consumer_offsets: 0, 1 and 3 led by broker 1, 2 by broker 2; without followers, or
# (REPLICATED) with followers, which a commit then waits for
OFFSETS_ASSIGNMENT = {0: [1], 1: [1], 2: [2], 3: [1]}
REPLICATED = {0: [1, 2, 3], 1: [1, 2, 3], 2: [2, 1, 3], 3: [1, 2, 3]}


def group_on(index, prefix="group"):
    """A group id whose offsets partition is `index`."""
    return next(g for g in (f"{prefix}-{i}" for i in range(1000))
                if partition_for(g, OFFSETS_PARTITIONS) == index)


A, B = group_on(0, "a"), group_on(0, "b")  # coordinated by broker 1
SLOW = group_on(1)  # coordinated by broker 1, used with REPLICATED
ELSEWHERE = group_on(2)  # coordinated by broker 2


class GroupFacade(DataFacade):
    """A broker's facade with its group coordinator; loads run to the end on each sync."""

    def __init__(self, quorum_facade, broker_id, directory, commit_timeout_ms=2000):
        super().__init__(quorum_facade, broker_id, directory)
        self.groups = GroupCoordinator(broker_id, GroupConfig(
            offsets_partitions=OFFSETS_PARTITIONS, commit_timeout_ms=commit_timeout_ms))
        self.topic_requests = 0
        # as the broker's runtime does: each high watermark move reaches the coordinator
        self.replicas.watch(lambda p: self.groups.on_partition_change(p, self.now))

    def ensure_offsets_topic(self):
        self.topic_requests += 1

    def sync(self):
        changes = super().sync()
        self.groups.on_role_changes(changes)
        while self.groups.load_step(1 << 20):
            pass
        return changes


def create_offsets_topic(quorum_facade, assignment=OFFSETS_ASSIGNMENT):
    response = call(quorum_facade, create_topics(
        (OFFSETS_TOPIC, -1, -1, assignment, {"cleanup.policy": "compact"}),
        ("orders", -1, -1, {0: [1], 1: [2], 2: [3]})), 7)
    assert [t.error_code for t in response.topics] == [0, 0]


@pytest.fixture
def broker(cluster, tmp_path):
    facade, _ = cluster
    create_offsets_topic(facade)
    broker = GroupFacade(facade, 1, tmp_path / "b1")
    broker.sync()
    assert sorted(broker.groups.shards) == [0, 1, 3]
    yield broker
    broker.replicas.close()


@pytest.fixture
def replicated(cluster, tmp_path):
    """Broker 1 leading offsets partitions 0, 1 and 3 with followers 2 and 3."""
    facade, _ = cluster
    create_offsets_topic(facade, REPLICATED)
    broker = GroupFacade(facade, 1, tmp_path / "b1", commit_timeout_ms=2000)
    broker.sync()
    yield broker
    broker.replicas.close()


# ------------------------------------------------------------------------------ requests

def commit(group, offsets, version=8, generation=-1, member="", topic_ids=None,
           retention_ms=-1):
    """OffsetCommit of {(topic, partition): (offset, epoch, metadata)}."""
    cls = m.OffsetCommitRequest
    by_topic = {}
    for (topic, index), (offset, epoch, metadata) in offsets.items():
        by_topic.setdefault(topic, []).append(cls.OffsetCommitRequestPartition(
            partition_index=index, committed_offset=offset, committed_leader_epoch=epoch,
            committed_metadata=metadata))
    topics = []
    for topic, parts in by_topic.items():
        t = cls.OffsetCommitRequestTopic(partitions=parts)
        if version >= 10:
            t.topic_id = topic_ids[topic]
        else:
            t.name = topic
        topics.append(t)
    body = cls(group_id=group, generation_id_or_member_epoch=generation, member_id=member,
               topics=topics)
    if 2 <= version <= 4:
        body.retention_time_ms = retention_ms
    return body


def commit_codes(response, topic_names=None):
    """{(topic, partition): code} of an OffsetCommit answer."""
    out = {}
    for t in response.topics:
        name = t.name if topic_names is None else topic_names[t.topic_id]
        for p in t.partitions:
            out[(name, p.partition_index)] = p.error_code
    return out


def offset_fetch(groups, version, topic_ids=None):
    """OffsetFetch of {group: {topic: [partitions]} or None (all)}; v0-7 take one group."""
    cls = m.OffsetFetchRequest
    if version < 8:
        ((group, topics),) = groups.items()
        body = cls(group_id=group, topics=None if topics is None else [
            cls.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])
        return body
    entries = []
    for group, topics in groups.items():
        req_topics = None
        if topics is not None:
            req_topics = []
            for t, ps in topics.items():
                entry = cls.OffsetFetchRequestTopics(partition_indexes=ps)
                if version >= 10:
                    entry.topic_id = topic_ids[t]
                else:
                    entry.name = t
                req_topics.append(entry)
        entries.append(cls.OffsetFetchRequestGroup(group_id=group, topics=req_topics))
    return cls(groups=entries)


def fetched_offsets(response, version, topic_names=None):
    """{group or None: (group error, {(topic, partition): (offset, epoch, metadata, code)})}."""
    def parts(topics):
        out = {}
        for t in topics:
            name = t.name if version < 10 else topic_names.get(t.topic_id, t.topic_id)
            for p in t.partitions:
                out[(name, p.partition_index)] = (p.committed_offset, p.committed_leader_epoch,
                                                  p.metadata, p.error_code)
        return out
    if version >= 8:
        return {g.group_id: (g.error_code, parts(g.topics)) for g in response.groups}
    return {None: (response.error_code if version >= 2 else 0, parts(response.topics))}


def find(version, *keys, key_type=0):
    cls = m.FindCoordinatorRequest
    if version >= 4:
        return cls(key_type=key_type, coordinator_keys=list(keys))
    (key,) = keys
    return cls(key=key, key_type=key_type)


def topic_ids(broker):
    return {name: broker.image.topic(name).topic_id for name in ("orders",)}


# ------------------------------------------------------------------------------ FindCoordinator

@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator_asks_for_the_offsets_topic_then_names_its_leader(cluster, tmp_path,
                                                                          version):
    facade, _ = cluster
    broker = GroupFacade(facade, 1, tmp_path / "b1")
    broker.sync()
    response = answer(broker, find(version, A), version)
    code = response.error_code if version < 4 else response.coordinators[0].error_code
    assert code == E.COORDINATOR_NOT_AVAILABLE and broker.topic_requests == 1
    request = offsets_topic_request(broker.image, broker.groups.config)
    topic = request.topics[0]
    assert (topic.name, topic.num_partitions, topic.replication_factor) == (OFFSETS_TOPIC, 4, 3)
    assert {c.name: c.value for c in topic.configs}["cleanup.policy"] == "compact"

    create_offsets_topic(facade)
    broker.sync()
    assert offsets_topic_request(broker.image, broker.groups.config) is None
    if version < 4:
        for group, node in ((A, 1), (ELSEWHERE, 2)):
            r = answer(broker, find(version, group), version)
            assert (r.error_code, r.node_id, r.host, r.port) == (0, node, "127.0.0.1", 9090 + node)
    else:
        r = answer(broker, find(version, A, ELSEWHERE, SLOW), version)
        assert [(c.key, c.error_code, c.node_id, c.port) for c in r.coordinators] == [
            (A, 0, 1, 9091), (ELSEWHERE, 0, 2, 9092), (SLOW, 0, 1, 9091)]
    assert broker.topic_requests == 1
    if version >= 1:
        r = answer(broker, find(version, "txn", key_type=1), version)
        code = r.error_code if version < 4 else r.coordinators[0].error_code
        assert code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        for key_type in (2, 9):
            r = answer(broker, find(version, "x", key_type=key_type), version)
            code = r.error_code if version < 4 else r.coordinators[0].error_code
            assert code == E.INVALID_REQUEST
    broker.replicas.close()


# ------------------------------------------------------------------------------ commit, fetch

@pytest.mark.parametrize("commit_version", range(2, 11))
def test_a_commit_reads_back_at_every_version(broker, commit_version):
    ids = topic_ids(broker)
    names = {v: k for k, v in ids.items()}
    offsets = {("orders", 0): (10 + commit_version, 5, f"m{commit_version}"),
               ("orders", 2): (7, 6, None)}
    response = answer(broker, commit(A, offsets, commit_version, topic_ids=ids), commit_version)
    assert commit_codes(response, names if commit_version >= 10 else None) == {
        ("orders", 0): 0, ("orders", 2): 0}
    epoch = 5 if commit_version >= 6 else -1
    for version in range(1, 11):
        asked = {A: {"orders": [0, 1, 2]}}
        got = fetched_offsets(answer(broker, offset_fetch(asked, version, ids), version),
                              version, names)
        group_error, parts = got[A if version >= 8 else None]
        seen_epoch = epoch if version >= 5 else -1
        assert group_error == 0
        assert parts == {("orders", 0): (10 + commit_version, seen_epoch, f"m{commit_version}", 0),
                         ("orders", 1): (-1, -1, "", 0),
                         ("orders", 2): (7, 6 if commit_version >= 6 and version >= 5 else -1,
                                         "", 0)}, version


def test_fetching_all_of_a_groups_offsets(broker):
    answer(broker, commit(A, {("orders", 2): (3, -1, ""), ("orders", 0): (4, -1, "x")}), 8)
    answer(broker, commit(B, {("orders", 1): (9, -1, "")}), 8)
    for version in (2, 7):
        _, parts = fetched_offsets(answer(broker, offset_fetch({A: None}, version), version),
                                   version)[None]
        assert parts == {("orders", 0): (4, -1, "x", 0),
                         ("orders", 2): (3, -1, "", 0)}
    none = group_on(0, "none")
    got = fetched_offsets(answer(broker, offset_fetch({A: None, B: None, none: None}, 8), 8), 8)
    assert got[B] == (0, {("orders", 1): (9, -1, "", 0)})
    assert got[none] == (0, {})


def test_the_last_commit_wins_and_groups_are_apart(broker):
    answer(broker, commit(A, {("orders", 0): (1, -1, "")}), 8)
    answer(broker, commit(B, {("orders", 0): (50, -1, "")}), 8)
    answer(broker, commit(A, {("orders", 0): (2, -1, "")}), 8)
    got = fetched_offsets(answer(broker, offset_fetch({A: {"orders": [0]},
                                                       B: {"orders": [0]}}, 8), 8), 8)
    assert got[A][1][("orders", 0)][0] == 2 and got[B][1][("orders", 0)][0] == 50


def test_a_retention_time_is_written_as_an_expiring_value(broker):
    response = answer(broker, commit(A, {("orders", 0): (3, -1, "")}, 2, retention_ms=60_000), 2)
    assert commit_codes(response) == {("orders", 0): 0}
    shard = broker.groups.shards[0]
    assert shard.committed[A][("orders", 0)].expire_timestamp_ms == broker.now + 60_000


def test_a_commit_is_answered_once_the_high_watermark_passes_it(replicated):
    broker = replicated
    partition = broker.replicas.get(OFFSETS_TOPIC, 1)

    async def scenario():
        task = asyncio.ensure_future(answer_async(
            broker, commit(SLOW, {("orders", 0): (8, -1, "")}), 8))
        await asyncio.sleep(0.05)
        assert not task.done() and partition.log_end_offset == 1 and partition.high_watermark == 0
        # committed reads only: the record is in the leader's log, not yet committed
        before = await answer_async(broker, offset_fetch({SLOW: {"orders": [0]}}, 8), 8)
        assert fetched_offsets(before, 8)[SLOW][1][("orders", 0)][0] == -1
        for follower in (2, 3):
            await answer_async(broker, fetch(OFFSETS_TOPIC, 1, 1, replica_id=follower), FETCH_V)
        return await asyncio.wait_for(task, 5)

    assert commit_codes(asyncio.run(scenario())) == {("orders", 0): 0}
    after = answer(broker, offset_fetch({SLOW: {"orders": [0]}}, 8), 8)
    assert fetched_offsets(after, 8)[SLOW][1][("orders", 0)][0] == 8


def test_a_commit_not_replicated_in_time_is_coordinator_not_available(cluster, tmp_path):
    facade, _ = cluster
    create_offsets_topic(facade, REPLICATED)
    broker = GroupFacade(facade, 1, tmp_path / "b1", commit_timeout_ms=50)
    broker.sync()

    async def scenario():
        waiting = asyncio.ensure_future(
            answer_async(broker, commit(SLOW, {("orders", 0): (8, -1, "")}), 8))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()
        broker.now += 49
        broker.groups.tick(broker.now)  # the broker's timer: not yet
        await asyncio.sleep(0)
        assert not waiting.done()
        broker.now += 1
        broker.groups.tick(broker.now)
        return await asyncio.wait_for(waiting, 10)

    response = asyncio.run(scenario())
    assert commit_codes(response) == {("orders", 0): E.COORDINATOR_NOT_AVAILABLE}
    broker.replicas.close()


# ------------------------------------------------------------------------------ refusals

def test_hostile_commits_get_kafkas_codes_and_never_touch_another_group(broker):
    answer(broker, commit(B, {("orders", 0): (100, 1, "keep")}), 8)
    base = {("orders", 0): (1, -1, "")}

    def codes(body, version=8):
        return commit_codes(answer(broker, body, version))

    assert codes(commit("", base)) == {("orders", 0): E.INVALID_GROUP_ID}
    # unknown topics and partitions go no further; the rest of the request commits
    assert codes(commit(A, {**base, ("nope", 0): (1, -1, ""), ("orders", 7): (1, -1, "")})) == {
        ("orders", 0): 0, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        ("orders", 7): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert codes(commit("", {("nope", 0): (1, -1, "")})) == {
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    unknown_id = Uuid(bytes(range(16)))
    response = answer(broker, commit(A, {("ghost", 0): (1, -1, "")}, 10,
                                     topic_ids={"ghost": unknown_id}), 10)
    assert [(t.topic_id, t.partitions[0].error_code) for t in response.topics] == [
        (unknown_id, E.UNKNOWN_TOPIC_ID)]
    # metadata is counted in UTF-16 code units, as Kafka (Java) counts it
    assert codes(commit(A, {("orders", 0): (2, -1, "x" * 4097),
                            ("orders", 1): (2, -1, "é" * 4096)})) == {
        ("orders", 0): E.OFFSET_METADATA_TOO_LARGE, ("orders", 1): 0}
    assert codes(commit(A, {("orders", 0): (2, -1, "\U0001F600" * 2049)})) == {
        ("orders", 0): E.OFFSET_METADATA_TOO_LARGE}
    # a generation or a member for a group without members
    fresh = group_on(0, "fresh")
    assert codes(commit(fresh, base, 8, generation=1)) == {("orders", 0): E.ILLEGAL_GENERATION}
    assert codes(commit(fresh, base, 9, generation=1), 9) == {
        ("orders", 0): E.GROUP_ID_NOT_FOUND}
    assert codes(commit(A, base, 8, generation=3, member="m")) == {
        ("orders", 0): E.UNKNOWN_MEMBER_ID}
    assert codes(commit(A, base, 8, generation=0)) == {("orders", 0): E.UNKNOWN_MEMBER_ID}
    assert codes(commit(A, base, 8, generation=-1, member="m")) == {("orders", 0): 0}
    assert codes(commit(ELSEWHERE, base)) == {("orders", 0): E.NOT_COORDINATOR}
    # a commit too large for one batch of the offsets topic writes nothing
    end = broker.replicas.get(OFFSETS_TOPIC, 0).log_end_offset
    cls = m.OffsetCommitRequest
    huge = cls(group_id=A, generation_id_or_member_epoch=-1, member_id="", topics=[
        cls.OffsetCommitRequestTopic(name="orders", partitions=[
            cls.OffsetCommitRequestPartition(partition_index=0, committed_offset=i,
                                             committed_metadata="x" * 4000)
            for i in range(300)])])
    assert set(codes(huge).values()) == {E.UNKNOWN_SERVER_ERROR}
    assert broker.replicas.get(OFFSETS_TOPIC, 0).log_end_offset == end
    # a producer may not write the offsets topic
    end = broker.replicas.get(OFFSETS_TOPIC, 0).log_end_offset
    refused = one(answer(broker, produce(OFFSETS_TOPIC, 0, [b"junk"]), PRODUCE_V))
    assert refused.error_code == E.INVALID_TOPIC_EXCEPTION
    assert broker.replicas.get(OFFSETS_TOPIC, 0).log_end_offset == end

    got = fetched_offsets(answer(broker, offset_fetch({B: {"orders": [0]}}, 8), 8), 8)
    assert got[B] == (0, {("orders", 0): (100, 1, "keep", 0)})


@pytest.mark.parametrize("version", range(1, 11))
def test_a_fetch_for_groups_this_broker_cannot_answer(broker, version):
    answer(broker, commit(A, {("orders", 0): (5, -1, "")}), 8)
    for group, code in (("", E.INVALID_GROUP_ID), (ELSEWHERE, E.NOT_COORDINATOR)):
        if version < 8:
            got = fetched_offsets(answer(broker, offset_fetch({group: {"orders": [0, 1]}},
                                                              version), version), version)
            if version < 2:  # no group-level error: each partition carries it
                assert got[None] == (0, {("orders", 0): (-1, -1, "", code),
                                         ("orders", 1): (-1, -1, "", code)})
            else:
                assert got[None] == (code, {})
    if version >= 8:
        ids = topic_ids(broker)
        got = fetched_offsets(answer(broker, offset_fetch(
            {"": {"orders": [0]}, ELSEWHERE: {"orders": [0]}, A: {"orders": [0]}},
            version, ids), version), version, {v: k for k, v in ids.items()})
        assert got[""] == (E.INVALID_GROUP_ID, {})
        assert got[ELSEWHERE] == (E.NOT_COORDINATOR, {})
        assert got[A] == (0, {("orders", 0): (5, -1, "", 0)})


def test_requests_while_loading_are_coordinator_load_in_progress(broker):
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    broker.groups.on_role_changes(RoleChanges([partition], [], [], []))
    code = commit_codes(answer(broker, commit(A, {("orders", 0): (1, -1, "")}), 8))
    assert code == {("orders", 0): E.COORDINATOR_LOAD_IN_PROGRESS}
    got = fetched_offsets(answer(broker, offset_fetch({A: {"orders": [0]}}, 8), 8), 8)
    assert got[A] == (E.COORDINATOR_LOAD_IN_PROGRESS, {})
    broker.groups.load_step(1 << 20)
    got = fetched_offsets(answer(broker, offset_fetch({A: {"orders": [0]}}, 8), 8), 8)
    assert got[A][0] == 0


# ------------------------------------------------------------------------------ load

def test_a_new_coordinator_loads_the_groups_from_the_log(broker):
    for offsets in ({("orders", 0): (1, 1, "a"), ("orders", 1): (2, 1, "b")},
                    {("orders", 0): (3, 2, "c")}):
        answer(broker, commit(A, offsets), 8)
    answer(broker, commit(B, {("orders", 2): (9, -1, "")}), 8)
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    key_a1 = next(r.key for b in partition.log.read(0, 1 << 20).batches() for r in b.records
                  if b"orders" in r.key and r.key.endswith(b"\0\0\0\1"))
    # what Kafka's coordinator may also have written: a tombstone, a group's metadata, a
    # KIP-848 record and a transaction marker; only the tombstone changes offsets
    empty_group = b"\0\3" + GroupMetadataValue(
        protocol_type="consumer", generation=4, protocol=None, leader=None,
        members=[]).encode(3)
    partition.append_as_leader(codec.encode_batch(
        [None, empty_group, b"\0\0"], keys=[
            key_a1, b"\0\2\0\1" + A[:1].encode(), b"\0\x07whatever"], timestamp=5), -1)
    partition.append_as_leader(codec.encode_batch(
        [b"\0\0\0\0\0\0"], keys=[b"\0\0\0\1"], control=True, producer_id=1, producer_epoch=0,
        transactional=True, timestamp=6), -1)
    expected_a = broker.groups.committed(A)
    expected_a.pop(("orders", 1))

    fresh = GroupCoordinator(1, broker.groups.config)
    fresh.on_role_changes(RoleChanges([partition], [], [], []))
    with pytest.raises(GroupError) as refused:
        fresh.committed(A)
    assert refused.value.code == E.COORDINATOR_LOAD_IN_PROGRESS
    steps = 1
    while fresh.load_step(1):  # one batch per step
        steps += 1
    assert steps > 3 and not fresh.load_failures and fresh.load_failures_total == 0
    assert fresh.committed(A) == expected_a == {
        ("orders", 0): fresh.committed(A)[("orders", 0)]}
    assert fresh.committed(A)[("orders", 0)][:3] == (3, 2, "c")
    assert fresh.committed(B)[("orders", 2)].offset == 9
    # a broker that stops leading the partition drops its groups
    fresh.on_role_changes(RoleChanges([], [partition], [], []))
    with pytest.raises(GroupError) as refused:
        fresh.committed(A)
    assert refused.value.code == E.NOT_COORDINATOR


def test_records_above_the_high_watermark_count_once_it_passes_them(replicated):
    broker = replicated
    partition = broker.replicas.get(OFFSETS_TOPIC, 1)
    answers = []
    broker.groups.commit(SLOW, [("orders", 0, OffsetAndMetadata(4))], broker.now,
                         lambda code, _: answers.append(code))
    assert answers == []  # appended; the followers have not fetched it
    fresh = GroupCoordinator(1, broker.groups.config)
    fresh.on_role_changes(RoleChanges([partition], [], [], []))
    while fresh.load_step(1 << 20):
        pass
    assert fresh.committed(SLOW) == {}  # in the log, above the high watermark
    for follower in (2, 3):
        answer(broker, fetch(OFFSETS_TOPIC, 1, 1, replica_id=follower), FETCH_V)
    assert partition.high_watermark == 1 and answers == [0]
    assert fresh.committed(SLOW)[("orders", 0)].offset == 4


def test_a_log_that_does_not_decode_fails_the_load_and_its_groups_are_not_served(broker):
    partition = broker.replicas.get(OFFSETS_TOPIC, 3)
    group = group_on(3)
    partition.append_as_leader(codec.encode_batch(
        [b"\0\4garbage"], keys=[b"\0\1\0\1g\0\1t\0\0\0\0"], timestamp=5), -1)
    fresh = GroupCoordinator(1, broker.groups.config)
    fresh.on_role_changes(RoleChanges([partition], [], [], []))
    while fresh.load_step(1 << 20):
        pass
    assert [index for index, _ in fresh.load_failures] == [3] and fresh.load_failures_total == 1
    with pytest.raises(GroupError) as refused:
        fresh.committed(group)
    assert refused.value.code == E.NOT_COORDINATOR


def test_any_string_is_a_group_id(broker):
    answer(broker, commit(B, {("orders", 0): (100, -1, "")}), 8)
    for prefix in ("\0", " ", "☃" * 300, "\U0001F600", "x" * 20_000, "__consumer_offsets"):
        group = next(g for g in (f"{prefix}{i}" for i in range(100))
                     if partition_for(g, OFFSETS_PARTITIONS) in (0, 1, 3))
        for version in (8, 9):  # classic strings (int16 length) and compact ones
            response = answer(broker, commit(group, {("orders", 1): (version, -1, "")}, version),
                              version)
            assert commit_codes(response) == {("orders", 1): 0}
            got = fetched_offsets(answer(broker, offset_fetch({group: {"orders": [1]}}, 8), 8), 8)
            assert got[group] == (0, {("orders", 1): (version, -1, "", 0)})
    got = fetched_offsets(answer(broker, offset_fetch({B: None}, 8), 8), 8)
    assert got[B] == (0, {("orders", 0): (100, -1, "", 0)})


@pytest.mark.parametrize("version", [7, 8])
def test_a_stable_fetch_waits_for_the_groups_written_offsets(cluster, tmp_path, version):
    """A new coordinator holds a commit above its high watermark (written by the old leader,
    not yet acknowledged by its followers): a plain OffsetFetch answers the committed past,
    one with RequireStable (librdkafka's and the Java consumer's) waits until the followers
    have the commit and answers it; one that cannot get it in time answers
    UNSTABLE_OFFSET_COMMIT for that partition, which the clients ask again for."""
    facade, _ = cluster
    create_offsets_topic(facade, REPLICATED)
    broker = GroupFacade(facade, 1, tmp_path / "b1", commit_timeout_ms=300)
    broker.sync()
    partition = broker.replicas.get(OFFSETS_TOPIC, 1)
    key, value = offset_commit_record(SLOW, "orders", 0, OffsetAndMetadata(8))
    partition.append_as_leader(codec.encode_batch([value], keys=[key], timestamp=5), -1)
    fresh = GroupCoordinator(1, broker.groups.config)
    fresh.on_role_changes(RoleChanges([partition], [], [], []))
    while fresh.load_step(1 << 20):
        pass
    broker.groups = fresh

    def stable_fetch(version):
        body = offset_fetch({SLOW: {"orders": [0, 1]}}, version)
        body.require_stable = True
        return body

    async def scenario():
        plain = await answer_async(broker, offset_fetch({SLOW: {"orders": [0]}}, version),
                                   version)
        timed_out = await answer_async(broker, stable_fetch(version), version)
        waiting = asyncio.ensure_future(answer_async(broker, stable_fetch(version), version))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()
        for follower in (2, 3):
            await answer_async(broker, fetch(OFFSETS_TOPIC, 1, 1, replica_id=follower),
                               FETCH_V)
        return plain, timed_out, await asyncio.wait_for(waiting, 10)

    plain, timed_out, stable = asyncio.run(scenario())
    key = SLOW if version >= 8 else None
    assert fetched_offsets(plain, version)[key][1][("orders", 0)][0] == -1
    assert fetched_offsets(timed_out, version)[key][1] == {
        ("orders", 0): (-1, -1, "", E.UNSTABLE_OFFSET_COMMIT), ("orders", 1): (-1, -1, "", 0)}
    got = fetched_offsets(stable, version)[key][1]
    assert got[("orders", 0)][0] == 8 and got[("orders", 0)][3] == 0
    broker.replicas.close()
