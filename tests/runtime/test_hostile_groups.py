"""Hostile group requests against a broker process (one broker, three controllers on
127.0.0.1), sent as Kafka frames over raw connections (`group_members.Wire`): stale and
future generations, member ids the group never gave, session timeouts outside the broker's
range, an empty group id, clashing protocols, member metadata larger than the offsets
topic's `message.max.bytes`, and bytes that are no request at all. Each gets Kafka's error
code, as Kafka's classic group coordinator answers it; the group concerned goes on (an
assignment that cannot be stored makes it rebalance, and it is Stable again once its member
rejoins with metadata that fits); a malformed frame closes only its own connection.

Meanwhile a real kafka-python consumer (`group_members.Member`) is the one member of
another group on the same coordinator: after each test it is still Stable in its first
generation (it never had to rejoin), and at the end it reads and commits what is produced.
"""

import struct
import uuid

import pytest

from kraftcore.protocol import framing
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from tests.peers import group_members as gm
from tests.peers.clients import key_of, value_of
from tests.runtime.processes import LocalCluster, wait_for

MESSAGE_BYTES_MAX = 64 * 1024  # message.max.bytes: also the offsets topic's batch limit
SESSION_MS = 6000
TOPIC = "calm"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("hostile-groups"),
                           [f"message.max.bytes={MESSAGE_BYTES_MAX}",
                            "group.initial.rebalance.delay.ms=0"], brokers=1)
    try:
        wait_for("the broker", lambda: cluster.brokers() == {4: "unfenced"})
        address = f"127.0.0.1:{cluster.nodes[4]['port']}"
        with gm.Wire.to(address) as w:
            response = w.call(m.CreateTopicsRequest(topics=[
                m.CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=2,
                                                     replication_factor=1)],
                timeout_ms=30000), 7)
            assert response.topics[0].error_code == 0

            def known():  # the broker's image has the topic (it may lag the controller)
                topics = w.call(m.MetadataRequest(topics=[
                    m.MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                    allow_auto_topic_creation=False), 9).topics
                return topics[0].error_code == 0 and len(topics[0].partitions) == 2

            wait_for("the topic in the broker's metadata", known)
        gm.coordinator(address, "warm-up")  # creates the offsets topic
        yield address
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def bystander(broker):
    """A kafka-python member of group "bystander", Stable before the first test."""
    member = gm.Member("kafka-python", broker, TOPIC, "bystander", name="bystander",
                       session_ms=SESSION_MS)
    try:
        gm.wait_until("the bystander's assignment", lambda: member.assignment == [0, 1]
                      and gm.describe(broker, "bystander")["state"] == "Stable", [member])
        # (the client may have joined once before it knew the topic: an empty assignment)
        member.assignments_before = len(member.assignments())
        yield member
    finally:
        member.stop()


@pytest.fixture(autouse=True)
def bystander_undisturbed(broker, bystander):
    yield
    assert bystander.alive(), bystander.summary()
    assert len(bystander.assignments()) == bystander.assignments_before, bystander.summary()
    d = gm.describe(broker, "bystander")
    assert d["state"] == "Stable" and len(d["members"]) == 1, d


# ----------------------------------------------------------------------------- raw members

def subscription(topics=(TOPIC,), user_data=b""):
    """A consumer protocol subscription, version 0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def assignment(partitions, topic=TOPIC):
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode()
            + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
            + struct.pack(">i", -1))


def join_body(group, member_id="", metadata=None, protocol_type="consumer",
              session_ms=SESSION_MS, protocols=None):
    cls = m.JoinGroupRequest
    if protocols is None:
        protocols = [("range", subscription() if metadata is None else metadata)]
    return cls(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=10_000,
               member_id=member_id, group_instance_id=None, protocol_type=protocol_type,
               protocols=[cls.JoinGroupRequestProtocol(name=n, metadata=d)
                          for n, d in protocols])


def join(w, group, member_id="", **kw):
    return w.call(join_body(group, member_id, **kw), 5)


def join_new(w, group, **kw):
    """A new member's two JoinGroups (v5: MEMBER_ID_REQUIRED first); the second answer."""
    first = join(w, group, **kw)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id, first
    return join(w, group, first.member_id, **kw)


def sync(w, group, generation, member_id, assignments=()):
    cls = m.SyncGroupRequest
    return w.call(cls(group_id=group, generation_id=generation, member_id=member_id,
                      group_instance_id=None, protocol_type="consumer", protocol_name="range",
                      assignments=[cls.SyncGroupRequestAssignment(member_id=i, assignment=a)
                                   for i, a in assignments]), 5)


def heartbeat(w, group, generation, member_id):
    return w.call(m.HeartbeatRequest(group_id=group, generation_id=generation,
                                     member_id=member_id, group_instance_id=None), 4).error_code


def commit(w, group, generation, member_id, offset=1):
    cls = m.OffsetCommitRequest
    r = w.call(cls(group_id=group, generation_id_or_member_epoch=generation,
                   member_id=member_id, group_instance_id=None, topics=[
                       cls.OffsetCommitRequestTopic(name=TOPIC, partitions=[
                           cls.OffsetCommitRequestPartition(partition_index=0,
                                                            committed_offset=offset,
                                                            committed_leader_epoch=-1,
                                                            committed_metadata="")])]), 8)
    return r.topics[0].partitions[0].error_code


def stable_member(w, group, **kw):
    """A group of one raw member, Stable: (member id, generation)."""
    joined = join_new(w, group, **kw)
    assert joined.error_code == 0 and joined.leader == joined.member_id, joined
    synced = sync(w, group, joined.generation_id, joined.member_id,
                  [(joined.member_id, assignment([0, 1]))])
    assert synced.error_code == 0, synced
    return joined.member_id, joined.generation_id


def new_group():
    return f"hostile-{uuid.uuid4().hex[:8]}"


# ----------------------------------------------------------------------------- tests

def test_stale_generations_and_unknown_members_get_kafkas_errors(broker):
    """Sync, Heartbeat, OffsetCommit and LeaveGroup with a generation the group is not in,
    or a member id it never gave, are refused with ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID;
    a commit without membership into a group with members is UNKNOWN_MEMBER_ID; the real
    member's requests go on succeeding in between."""
    group = new_group()
    with gm.Wire.to(broker) as w:
        member, generation = stable_member(w, group)
        for bad in (generation + 1, generation - 1, -1, 2**31 - 1):
            assert sync(w, group, bad, member).error_code == E.ILLEGAL_GENERATION, bad
            assert heartbeat(w, group, bad, member) == E.ILLEGAL_GENERATION, bad
            if bad >= 0:
                assert commit(w, group, bad, member) == E.ILLEGAL_GENERATION, bad
        for ghost in ("ghost", "", member + "x", "\u00e9" * 300):
            assert sync(w, group, generation, ghost).error_code == E.UNKNOWN_MEMBER_ID, ghost
            assert heartbeat(w, group, generation, ghost) == E.UNKNOWN_MEMBER_ID, ghost
            assert commit(w, group, generation, ghost) == E.UNKNOWN_MEMBER_ID, ghost
            if ghost:
                # a known member id is only taken back in the group that gave it
                assert join(w, group, ghost).error_code == E.UNKNOWN_MEMBER_ID, ghost
        assert commit(w, group, -1, "") == E.UNKNOWN_MEMBER_ID  # members own the offsets
        assert join(w, new_group(), member).error_code == E.UNKNOWN_MEMBER_ID
        leave = w.call(m.LeaveGroupRequest(group_id=group, members=[
            m.LeaveGroupRequest.MemberIdentity(member_id="ghost", group_instance_id=None)]), 3)
        assert leave.error_code == 0 and leave.members[0].error_code == E.UNKNOWN_MEMBER_ID
        # the real member was never disturbed
        assert heartbeat(w, group, generation, member) == 0
        assert commit(w, group, generation, member, offset=7) == 0
        d = gm.describe(broker, group)
        assert d["state"] == "Stable" and [x["member_id"] for x in d["members"]] == [member]
        assert gm.committed(broker, group, TOPIC, 1) == {0: 7}
        deleted = w.call(m.DeleteGroupsRequest(groups_names=[group]), 2)
        assert deleted.results[0].error_code == E.NON_EMPTY_GROUP


def test_joins_outside_the_rules_are_refused(broker):
    """Session timeouts outside group.min/max.session.timeout.ms, an empty group id, no
    protocols, and a protocol type or protocol names the group's member does not share:
    INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID, INCONSISTENT_GROUP_PROTOCOL. The group keeps
    its generation."""
    group = new_group()
    with gm.Wire.to(broker) as w:
        member, generation = stable_member(w, group)
        for session_ms in (0, SESSION_MS - 1, -1, 1_800_001, 2**31 - 1):
            assert join(w, group, session_ms=session_ms).error_code == \
                E.INVALID_SESSION_TIMEOUT, session_ms
        assert join(w, "").error_code == E.INVALID_GROUP_ID
        assert join(w, group, protocols=[]).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert join(w, group, protocol_type="connect").error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL
        assert join(w, group, protocols=[("sticky", subscription())]).error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL
        assert heartbeat(w, group, generation, member) == 0
        d = gm.describe(broker, group)
        assert d["state"] == "Stable" and len(d["members"]) == 1, d


def test_metadata_larger_than_the_offsets_topic_takes_fails_the_sync_and_rebalances(broker):
    """A member whose subscription is larger than message.max.bytes joins (the JoinGroup
    has no such limit), but its group's record cannot be stored: the leader's SyncGroup is
    answered UNKNOWN_SERVER_ERROR (Kafka's answer for MESSAGE_TOO_LARGE from the log) and the
    group prepares a rebalance; once the member rejoins with a subscription that fits it is
    Stable in a new generation."""
    group = new_group()
    big = subscription(user_data=b"\x01" * (MESSAGE_BYTES_MAX + 1024))
    with gm.Wire.to(broker) as w:
        joined = join_new(w, group, metadata=big)
        assert joined.error_code == 0 and joined.leader == joined.member_id
        assert [bytes(x.metadata) for x in joined.members] == [big]
        member, generation = joined.member_id, joined.generation_id
        synced = sync(w, group, generation, member, [(member, assignment([0, 1]))])
        assert synced.error_code == E.UNKNOWN_SERVER_ERROR, synced
        assert gm.describe(broker, group)["state"] == "PreparingRebalance"
        assert heartbeat(w, group, generation, member) == E.REBALANCE_IN_PROGRESS
        rejoined = join(w, group, member)
        assert rejoined.error_code == 0 and rejoined.generation_id == generation + 1
        synced = sync(w, group, rejoined.generation_id, member, [(member, assignment([0, 1]))])
        assert synced.error_code == 0 and bytes(synced.assignment) == assignment([0, 1])
        d = gm.describe(broker, group)
        assert d["state"] == "Stable" and d["members"][0]["partitions"] == {TOPIC: [0, 1]}


def test_garbage_gets_kafkas_answers_and_closes_only_its_connection(broker):
    """A subscription that is not the consumer protocol's bytes is opaque to the
    coordinator: the member joins and syncs, and OffsetDelete of any topic is then
    GROUP_SUBSCRIBED_TO_TOPIC (Kafka's answer when it cannot read what a consumer group
    subscribes to). A JoinGroup frame whose body is cut short, and a frame of random bytes,
    close their own connection; a new connection is served."""
    group = new_group()
    with gm.Wire.to(broker) as w:
        member, generation = stable_member(w, group, metadata=b"\xff" * 7)
        d = gm.describe(broker, group)
        assert d["state"] == "Stable", d
        cls = m.OffsetDeleteRequest
        r = w.call(cls(group_id=group, topics=[cls.OffsetDeleteRequestTopic(
            name=TOPIC, partitions=[cls.OffsetDeleteRequestPartition(partition_index=0)])]), 0)
        assert r.error_code == 0 and r.topics[0].partitions[0].error_code == \
            E.GROUP_SUBSCRIBED_TO_TOPIC
    for frame in (_truncated_join(group), b"\x00\x00\x00\x10" + bytes(range(16))):
        with gm.Wire.to(broker) as w:
            w.send_frame(frame)
            with pytest.raises((ConnectionError, OSError)):
                w.read(11, 5)
    with gm.Wire.to(broker) as w:
        assert heartbeat(w, group, generation, member) == 0


def _truncated_join(group):
    whole = framing.encode_request(join_body(group), 5, 1, "hostile")
    body = whole[4:-20]
    return struct.pack(">i", len(body)) + body


def test_the_bystander_still_reads_and_commits(broker, bystander):
    """The other group on the same coordinator, after everything above: its member reads
    what is produced now and commits it, in the generation it first joined."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker, acks="all")
    try:
        for i in range(10):
            producer.send(TOPIC, key=key_of(i), value=value_of(i), partition=i % 2)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=5)
    gm.wait_until("the bystander's commits", lambda: gm.committed(
        broker, "bystander", TOPIC, 2) == {0: 5, 1: 5}, [bystander])
    assert bystander.processed == {(p, o) for p in (0, 1) for o in range(5)}
