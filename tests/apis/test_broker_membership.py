"""Consumer groups of Kafka's classic protocol through the broker's handlers (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete and
the commits of members in `kraftcore.apis.broker`), over a real `GroupCoordinator` and real
partition logs, every request through the wire encoding. Time is the facade's `now`, moved
by the test, and the coordinator's `tick` acts on it: session timeouts, rebalance timeouts,
the initial rebalance delay. Each answer is Kafka's: the codes, who leads, what each member
is handed, and what a new coordinator loads from the log."""

import asyncio
import struct

import pytest

from kraftcore.broker.group_records import (OFFSETS_TOPIC, decode_group_value, decode_key,
                                            subscription_topics)
from kraftcore.broker.groups import GroupConfig, GroupCoordinator
from kraftcore.broker.replicas import RoleChanges
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E

from tests.apis.helpers import call, create_topics
from tests.apis.test_broker_data import FETCH_V, answer_async, fetch
from tests.apis.test_broker_groups import (A, B, ELSEWHERE, REPLICATED, SLOW, GroupFacade, commit,
                                           commit_codes,
                                           create_offsets_topic, group_on)

MISSING = group_on(0, "missing")  # coordinated by broker 1, never used

SESSION_MS, REBALANCE_MS = 10_000, 30_000


def subscription(*topics, user_data=None):
    """A consumer-protocol subscription (v0): version, topics, user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + (struct.pack(">i", -1) if user_data is None
                  else struct.pack(">i", len(user_data)) + user_data)


class MemberFacade(GroupFacade):
    client_id = "test"
    client_host = "/127.0.0.1"

    def __init__(self, quorum_facade, broker_id, directory, **config):
        super().__init__(quorum_facade, broker_id, directory)
        self.groups = GroupCoordinator(broker_id, GroupConfig(**{
            "offsets_partitions": 4, "commit_timeout_ms": 2000,
            "initial_rebalance_delay_ms": 0, **config}))

    def advance(self, ms):
        self.now += ms
        self.groups.tick(self.now)


@pytest.fixture
def broker(cluster, tmp_path):
    facade, _ = cluster
    create_offsets_topic(facade)
    b = MemberFacade(facade, 1, tmp_path / "b1")
    b.sync()
    yield b
    b.replicas.close()


DELAY_MS = 3000


@pytest.fixture
def delayed(cluster, tmp_path):
    """A broker whose groups' first rebalance waits `group.initial.rebalance.delay.ms`."""
    facade, _ = cluster
    create_offsets_topic(facade)
    b = MemberFacade(facade, 1, tmp_path / "b1", initial_rebalance_delay_ms=DELAY_MS)
    b.sync()
    yield b
    b.replicas.close()


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


def run(coro):
    """Run a scenario; one that waits for an answer that never comes fails, not hangs."""
    return asyncio.run(asyncio.wait_for(coro, 20))


# ------------------------------------------------------------------------------ requests

def join(group, member="", version=9, instance=None, protocols=(("range", None),),
         session_ms=SESSION_MS, protocol_type="consumer", topics=("orders",)):
    cls = m.JoinGroupRequest
    return cls(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=REBALANCE_MS,
               member_id=member, group_instance_id=instance, protocol_type=protocol_type,
               protocols=[cls.JoinGroupRequestProtocol(
                   name=name, metadata=data if data is not None else subscription(*topics))
                   for name, data in protocols])


def sync(group, generation, member, assignments=None, version=5, instance=None):
    cls = m.SyncGroupRequest
    return cls(group_id=group, generation_id=generation, member_id=member,
               group_instance_id=instance, protocol_type="consumer", protocol_name="range",
               assignments=[cls.SyncGroupRequestAssignment(member_id=k, assignment=v)
                            for k, v in (assignments or {}).items()])


def heartbeat(group, generation, member, instance=None):
    return m.HeartbeatRequest(group_id=group, generation_id=generation, member_id=member,
                              group_instance_id=instance)


def leave(group, *members):
    cls = m.LeaveGroupRequest
    return cls(group_id=group, members=[cls.MemberIdentity(member_id=mid, group_instance_id=iid)
                                        for mid, iid in members])


async def join_new(b, group, version=9, **kw):
    """A new dynamic member's two JoinGroups (MEMBER_ID_REQUIRED, then with its id), as a
    task: the second one waits for the rebalance."""
    first = await answer_async(b, join(group, version=version, **kw), version)
    assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
    return await answer_async(b, join(group, first.member_id, version=version, **kw), version)


async def join_all(b, group, n, **kw):
    """`n` new dynamic members ask for their ids, then all join with them."""
    firsts = [await answer_async(b, join(group, **kw), 9) for _ in range(n)]
    assert {f.error_code for f in firsts} == {E.MEMBER_ID_REQUIRED}
    return await asyncio.gather(*(answer_async(b, join(group, f.member_id, **kw), 9)
                                  for f in firsts))


async def form_group(b, group, n, assign=None):
    """`n` members join `group` and sync; returns ({member id: join answer}, leader id)."""
    answers = await join_all(b, group, n)
    assert {a.error_code for a in answers} == {0}
    leader = answers[0].leader
    generation = answers[0].generation_id
    assert {a.generation_id for a in answers} == {generation}
    by_id = {a.member_id: a for a in answers}
    assignments = assign(list(by_id)) if assign else {mid: mid.encode()[-8:] for mid in by_id}
    syncs = await asyncio.gather(*(
        answer_async(b, sync(group, generation, mid, assignments if mid == leader else None), 5)
        for mid in by_id))
    assert [s.error_code for s in syncs] == [0] * n
    assert [s.assignment for s in syncs] == [assignments[mid] for mid in by_id]
    return by_id, leader


def describe(b, *groups, version=5):
    return run(answer_async(b, m.DescribeGroupsRequest(
        groups=list(groups), include_authorized_operations=True), version)).groups


# ------------------------------------------------------------------------------ joining

def test_three_members_join_and_get_the_leaders_assignment(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 3)
        assert leader in by_id
        # only the leader is told the members, with their subscriptions
        lead = by_id[leader]
        assert sorted(x.member_id for x in lead.members) == sorted(by_id)
        assert all(subscription_topics(x.metadata) == ["orders"] for x in lead.members)
        assert all(not a.members for mid, a in by_id.items() if mid != leader)
        assert {a.protocol_name for a in by_id.values()} == {"range"}
        assert {a.protocol_type for a in by_id.values()} == {"consumer"}
        assert all(mid.startswith("test-") for mid in by_id)  # client id, then a uuid
        return by_id

    by_id = run(scenario())
    (g,) = describe(broker, A)
    assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
        0, "Stable", "consumer", "range")
    assert sorted(x.member_id for x in g.members) == sorted(by_id)
    assert {x.client_host for x in g.members} == {"/127.0.0.1"}
    assert all(x.member_assignment == x.member_id.encode()[-8:] for x in g.members)
    listed = run(answer_async(broker, m.ListGroupsRequest(states_filter=[], types_filter=[]), 5))
    assert [(x.group_id, x.protocol_type, x.group_state, x.group_type)
            for x in listed.groups] == [(A, "consumer", "Stable", "classic")]


def test_the_protocol_is_one_every_member_supports_and_most_prefer(broker):
    async def scenario():
        protocols = [(("cooperative-sticky", None), ("range", None)),
                     (("range", None), ("cooperative-sticky", None)),
                     (("cooperative-sticky", None), ("roundrobin", None), ("range", None))]
        firsts = [await answer_async(broker, join(A, protocols=p), 9) for p in protocols]
        answers = await asyncio.gather(*(answer_async(broker, join(A, f.member_id, protocols=p), 9)
                                         for f, p in zip(firsts, protocols)))
        return {a.protocol_name for a in answers}

    assert run(scenario()) == {"cooperative-sticky"}


def test_a_member_with_no_protocol_in_common_is_refused(broker):
    async def scenario():
        await form_group(broker, A, 1)
        other = await answer_async(broker, join(A, protocols=(("roundrobin", None),)), 9)
        assert other.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        other = await answer_async(broker, join(A, protocol_type="connect"), 9)
        assert other.error_code == E.INCONSISTENT_GROUP_PROTOCOL
        empty = await answer_async(broker, join(B, protocols=()), 9)
        assert empty.error_code == E.INCONSISTENT_GROUP_PROTOCOL

    run(scenario())
    (g,) = describe(broker, A)
    assert g.group_state == "Stable" and len(g.members) == 1


def test_the_first_rebalance_waits_the_initial_delay_while_members_arrive(delayed):
    """Old clients join without the MEMBER_ID_REQUIRED round trip; the first rebalance
    waits 3 s, and 3 s more because members came in the first 3 s, then completes."""
    broker = delayed

    async def scenario():
        joins = [asyncio.ensure_future(answer_async(broker, join(A, version=v), v))
                 for v in (0, 2, 3)]
        await settle()
        broker.advance(DELAY_MS)
        await settle()
        assert not any(j.done() for j in joins)  # new members came: it waits again
        broker.advance(DELAY_MS)
        answers = await asyncio.gather(*joins)
        assert {a.error_code for a in answers} == {0}
        assert len({a.member_id for a in answers}) == 3
        assert {a.protocol_name for a in answers} == {"range"}

    run(scenario())


@pytest.mark.parametrize("session_ms", [5999, 1_800_001])
def test_session_timeouts_outside_the_brokers_bounds_are_refused(broker, session_ms):
    answer = run(answer_async(broker, join(A, session_ms=session_ms), 9))
    assert answer.error_code == E.INVALID_SESSION_TIMEOUT


def test_the_group_size_limit(cluster, tmp_path):
    facade, _ = cluster
    create_offsets_topic(facade)
    b = MemberFacade(facade, 1, tmp_path / "b1", group_size_max=2)
    b.sync()
    try:
        async def scenario():
            await form_group(b, A, 2)
            third = await answer_async(b, join(A), 9)
            assert third.error_code == E.GROUP_MAX_SIZE_REACHED

        run(scenario())
    finally:
        b.replicas.close()


# ------------------------------------------------------------------------------ rebalances

def test_a_new_member_makes_the_others_rejoin(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 2)
        generation = next(iter(by_id.values())).generation_id
        newcomer = asyncio.ensure_future(join_new(broker, A))
        await asyncio.sleep(0)
        for mid in by_id:
            hb = await answer_async(broker, heartbeat(A, generation, mid), 4)
            assert hb.error_code == E.REBALANCE_IN_PROGRESS
        rejoined = await asyncio.gather(*(answer_async(broker, join(A, mid), 9) for mid in by_id))
        new = await newcomer
        assert {a.generation_id for a in (*rejoined, new)} == {generation + 1}
        assert {a.leader for a in (*rejoined, new)} == {leader}  # the leader rejoined
        old = await answer_async(broker, heartbeat(A, generation, leader), 4)
        assert old.error_code == E.ILLEGAL_GENERATION

    run(scenario())


def test_a_member_that_stops_heartbeating_is_removed(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 2)
        return by_id, leader

    by_id, leader = run(scenario())
    generation = next(iter(by_id.values())).generation_id
    alive = next(mid for mid in by_id if mid != leader)
    for _ in range(3):  # the live member heartbeats; the leader does not
        broker.advance(SESSION_MS // 2)
        assert run(answer_async(broker, heartbeat(A, generation, alive), 4)).error_code in (
            0, E.REBALANCE_IN_PROGRESS)
    (g,) = describe(broker, A)
    assert [x.member_id for x in g.members] == [alive]
    assert g.group_state == "PreparingRebalance"
    again = run(answer_async(broker, join(A, alive), 9))
    assert (again.error_code, again.generation_id, again.leader) == (0, generation + 1, alive)
    gone = run(answer_async(broker, heartbeat(A, generation + 1, leader), 4))
    assert gone.error_code == E.UNKNOWN_MEMBER_ID


def test_members_that_do_not_rejoin_in_the_rebalance_timeout_are_removed(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 3)
        # one member rejoins, starting a rebalance; the others never do
        waiting = asyncio.ensure_future(answer_async(broker, join(A, leader, topics=("x",)), 9))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        broker.advance(REBALANCE_MS)
        answer = await waiting
        return by_id, leader, answer

    by_id, leader, answer = run(scenario())
    assert answer.error_code == 0 and [x.member_id for x in answer.members] == [leader]


def test_a_member_that_leaves_makes_the_group_rebalance_and_the_last_one_empties_it(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 2)
        other = next(mid for mid in by_id if mid != leader)
        left = await answer_async(broker, leave(A, (leader, None), ("nobody", None)), 5)
        assert left.error_code == 0
        assert [x.error_code for x in left.members] == [0, E.UNKNOWN_MEMBER_ID]
        again = await answer_async(broker, join(A, other), 9)
        assert again.leader == other and len(again.members) == 1
        left = await answer_async(broker, m.LeaveGroupRequest(group_id=A, member_id=other), 2)
        return left

    assert run(scenario()).error_code == 0
    (g,) = describe(broker, A)
    assert (g.group_state, list(g.members)) == ("Empty", [])


def test_a_member_that_never_syncs_is_removed(broker):
    async def scenario():
        answers = await join_all(broker, A, 2)
        leader = answers[0].leader
        generation = answers[0].generation_id
        silent = next(a.member_id for a in answers if a.member_id != leader)
        plan = {leader: b"a", silent: b"b"}
        s = await answer_async(broker, sync(A, generation, leader, plan), 5)
        assert s.error_code == 0 and s.assignment == b"a"
        return leader, silent

    leader, silent = run(scenario())
    for _ in range(REBALANCE_MS // 5000 + 1):  # the leader heartbeats throughout
        broker.advance(5000)
        run(answer_async(broker, heartbeat(A, 1, leader), 4))
    (g,) = describe(broker, A)
    assert [x.member_id for x in g.members] == [leader]


# ------------------------------------------------------------------------------ static members

def test_a_static_member_that_restarts_keeps_its_assignment_without_a_rebalance(delayed):
    broker = delayed

    async def scenario():
        joins = [asyncio.ensure_future(answer_async(broker, join(A, instance=f"i-{n}"), 9))
                 for n in range(2)]
        await settle()
        broker.advance(DELAY_MS)
        await settle()
        broker.advance(DELAY_MS)
        answers = await asyncio.gather(*joins)
        assert {a.error_code for a in answers} == {0}  # no MEMBER_ID_REQUIRED for them
        assert all(a.member_id.startswith(f"i-{n}-") for n, a in enumerate(answers))
        leader = answers[0].leader
        generation = answers[0].generation_id
        follower = next(a for a in answers if a.member_id != leader)
        instance = f"i-{answers.index(follower)}"
        await asyncio.gather(*(answer_async(broker, sync(
            A, generation, a.member_id, {x.member_id: x.member_id.encode()[:6] for x in answers}
            if a.member_id == leader else None, instance=f"i-{n}"), 5)
            for n, a in enumerate(answers)))
        back = await answer_async(broker, join(A, instance=instance), 9)
        assert back.error_code == 0 and back.generation_id == generation
        assert back.member_id != follower.member_id and back.leader == leader
        s = await answer_async(broker, sync(A, generation, back.member_id, instance=instance), 5)
        assert s.assignment == follower.member_id.encode()[:6]
        fenced = await answer_async(broker, heartbeat(A, generation, follower.member_id,
                                                      instance=instance), 4)
        assert fenced.error_code == E.FENCED_INSTANCE_ID
        ok = await answer_async(broker, heartbeat(A, generation, back.member_id, instance), 4)
        assert ok.error_code == 0
        # the admin removes a static member by its instance id alone
        out = await answer_async(broker, leave(A, ("", instance)), 4)
        assert [x.error_code for x in out.members] == [0]

    run(scenario())
    (g,) = describe(broker, A)
    assert g.group_state == "PreparingRebalance" and len(g.members) == 1


# ------------------------------------------------------------------------------ commits

def test_members_commit_in_their_generation(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 2)
        generation = by_id[leader].generation_id
        ok = await answer_async(broker, commit(A, {("orders", 0): (5, -1, "")}, 8,
                                               generation=generation, member=leader), 8)
        stale = await answer_async(broker, commit(A, {("orders", 0): (6, -1, "")}, 8,
                                                  generation=generation - 1, member=leader), 8)
        stranger = await answer_async(broker, commit(A, {("orders", 0): (7, -1, "")}, 8,
                                                     generation=generation, member="x"), 8)
        outsider = await answer_async(broker, commit(A, {("orders", 0): (8, -1, "")}, 8), 8)
        return [commit_codes(r)[("orders", 0)] for r in (ok, stale, stranger, outsider)]

    assert run(scenario()) == [0, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID,
                               E.UNKNOWN_MEMBER_ID]
    assert broker.groups.committed(A)[("orders", 0)].offset == 5


def test_a_commit_while_the_group_completes_a_rebalance_is_refused(broker):
    async def scenario():
        answers = await join_all(broker, A, 2)
        a = answers[0]
        r = await answer_async(broker, commit(A, {("orders", 0): (5, -1, "")}, 8,
                                              generation=a.generation_id, member=a.member_id), 8)
        return commit_codes(r)[("orders", 0)]

    assert run(scenario()) == E.REBALANCE_IN_PROGRESS


# ------------------------------------------------------------------------------ load

def test_a_new_coordinator_loads_the_groups_members_and_assignments(broker):
    async def scenario():
        return await form_group(broker, A, 3)

    by_id, leader = run(scenario())
    generation = by_id[leader].generation_id
    partition = broker.replicas.get(OFFSETS_TOPIC, 0)
    # the stored record is Kafka's GroupMetadataValue v3
    records = [(decode_key(r.key), r.value) for b in partition.log.read(0, 1 << 20).batches()
               for r in b.records]
    (value,) = [v for k, v in records if k == ("group", A)][-1:]
    assert value[:2] == b"\0\3"
    stored = decode_group_value(value)
    assert (stored.generation, stored.protocol, stored.leader) == (generation, "range", leader)
    assert sorted(x.member_id for x in stored.members) == sorted(by_id)

    fresh = GroupCoordinator(1, broker.groups.config)
    fresh.on_role_changes(RoleChanges([partition], [], [], []))
    while fresh.load_step(1 << 20, broker.now):
        pass
    broker.groups = fresh
    (g,) = describe(broker, A)
    assert g.group_state == "Stable" and sorted(x.member_id for x in g.members) == sorted(by_id)
    assert all(x.member_assignment == x.member_id.encode()[-8:] for x in g.members)
    for mid in by_id:
        assert run(answer_async(broker, heartbeat(A, generation, mid), 4)).error_code == 0


def test_a_coordinator_that_loses_the_partition_answers_the_waiting_joins(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 2)
        waiting = asyncio.ensure_future(answer_async(broker, join(A, leader), 9))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        partition = broker.replicas.get(OFFSETS_TOPIC, 0)
        broker.groups.on_role_changes(RoleChanges([], [partition], [], []))
        return await waiting

    assert run(scenario()).error_code == E.NOT_COORDINATOR


# ------------------------------------------------------------------------------ deletes

def test_deleting_groups_and_offsets(broker):
    response = call(broker.quorum, create_topics(("other", -1, -1, {0: [1]}, {})), 7)
    assert response.topics[0].error_code == 0
    broker.sync()

    async def scenario():
        by_id, leader = await form_group(broker, A, 1)
        generation = by_id[leader].generation_id
        offsets = {("orders", 0): (5, -1, ""), ("other", 0): (1, -1, "")}
        await answer_async(broker, commit(A, offsets, 8, generation=generation, member=leader),
                           8)
        await answer_async(broker, commit(B, {("orders", 1): (3, -1, "")}), 8)
        busy = await answer_async(broker, m.DeleteGroupsRequest(
            groups_names=[A, B, MISSING, ELSEWHERE]), 2)
        cls = m.OffsetDeleteRequest
        od = await answer_async(broker, cls(group_id=A, topics=[
            cls.OffsetDeleteRequestTopic(name=t, partitions=[
                cls.OffsetDeleteRequestPartition(partition_index=0)])
            for t in ("orders", "other", "nosuchtopic")]), 0)
        return busy, od

    busy, od = run(scenario())
    assert [(r.group_id, r.error_code) for r in busy.results] == [
        (A, E.NON_EMPTY_GROUP), (B, 0), (MISSING, E.GROUP_ID_NOT_FOUND),
        (ELSEWHERE, E.NOT_COORDINATOR)]
    assert od.error_code == 0
    assert {(t.name, p.error_code) for t in od.topics for p in t.partitions} == {
        ("orders", E.GROUP_SUBSCRIBED_TO_TOPIC), ("other", 0),
        ("nosuchtopic", E.UNKNOWN_TOPIC_OR_PARTITION)}
    assert set(broker.groups.committed(A)) == {("orders", 0)}
    assert broker.groups.committed(B) == {}
    (g,) = describe(broker, B, version=6)
    assert (g.error_code, g.group_state) == (E.GROUP_ID_NOT_FOUND, "Dead")
    (g,) = describe(broker, B, version=5)
    assert (g.error_code, g.group_state) == (0, "Dead")


# ------------------------------------------------------------------------------ hostile

def test_hostile_membership_requests_get_kafkas_codes_and_leave_other_groups_alone(broker):
    async def scenario():
        by_id, leader = await form_group(broker, A, 2)
        generation = by_id[leader].generation_id
        codes = []
        codes.append((await answer_async(broker, join(B, "made-up"), 9)).error_code)
        for request in (heartbeat(A, generation, "made-up"), heartbeat(A, generation + 7, leader)):
            codes.append((await answer_async(broker, request, 4)).error_code)
        codes.append((await answer_async(broker, sync(A, generation + 1, leader), 5)).error_code)
        codes.append((await answer_async(broker, sync(A, generation, "made-up"), 5)).error_code)
        codes.append((await answer_async(broker, heartbeat(B, 1, "x"), 4)).error_code)
        codes.append((await answer_async(broker, join("", ""), 9)).error_code)
        codes.append((await answer_async(broker, join(ELSEWHERE, ""), 9)).error_code)
        # a group whose assignment cannot be stored (bigger than a batch may be)
        big = await join_all(broker, B, 2, protocols=(("range", b"x" * (600 * 1024)),))
        bl = big[0].leader
        stored = await answer_async(broker, sync(B, big[0].generation_id, bl, {bl: b"y"}), 5)
        codes.append(stored.error_code)
        return codes, by_id, generation

    codes, by_id, generation = run(scenario())
    assert codes == [E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION,
                     E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.UNKNOWN_MEMBER_ID,
                     E.INVALID_GROUP_ID, E.NOT_COORDINATOR, E.UNKNOWN_SERVER_ERROR]
    for mid in by_id:
        assert run(answer_async(broker, heartbeat(A, generation, mid), 4)).error_code == 0
    (a, b) = describe(broker, A, B)
    assert a.group_state == "Stable" and b.group_state == "PreparingRebalance"


def test_groups_that_never_had_a_member_are_forgotten(broker):
    """A refused join, and a new member that never comes back with its id, leave no group
    behind (nothing to list, nothing held)."""
    refused = run(answer_async(broker, join(A, protocols=()), 9))
    assert refused.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    first = run(answer_async(broker, join(B), 9))
    assert first.error_code == E.MEMBER_ID_REQUIRED
    listed = run(answer_async(broker, m.ListGroupsRequest(), 4))
    assert [g.group_id for g in listed.groups] == [B]  # waiting for its member
    broker.advance(SESSION_MS)
    listed = run(answer_async(broker, m.ListGroupsRequest(), 4))
    assert listed.groups == [] and broker.groups.shards[0].groups == {}


def test_the_assignment_is_answered_once_the_followers_have_the_groups_record(cluster, tmp_path):
    """With followers on the offsets partition, the SyncGroups wait until the high watermark
    passes the group's record (the runtime hands each high watermark move to the
    coordinator, as `ReplicaManager.watch` does here)."""
    facade, _ = cluster
    create_offsets_topic(facade, REPLICATED)
    b = MemberFacade(facade, 1, tmp_path / "b1")
    b.sync()
    try:
        async def scenario():
            answers = await join_all(b, SLOW, 2)
            leader = answers[0].leader
            generation = answers[0].generation_id
            syncs = [asyncio.ensure_future(answer_async(b, sync(
                SLOW, generation, a.member_id,
                {x.member_id: b"p" for x in answers} if a.member_id == leader else None), 5))
                for a in answers]
            await settle()
            assert not any(s.done() for s in syncs)
            for follower in (2, 3):
                await answer_async(b, fetch(OFFSETS_TOPIC, 1, 0, replica_id=follower), FETCH_V)
            await settle()
            assert not any(s.done() for s in syncs)  # fetched, not yet acknowledged
            for follower in (2, 3):
                await answer_async(b, fetch(OFFSETS_TOPIC, 1, 1, replica_id=follower), FETCH_V)
            return [s.error_code for s in await asyncio.gather(*syncs)]

        assert run(scenario()) == [0, 0]
    finally:
        b.replicas.close()


def test_a_new_generations_assignment_is_stored_while_an_older_store_is_in_flight(
        cluster, tmp_path):
    """The leader of generation 1 syncs and its store waits for the followers; a member
    joins meanwhile, and the leader of generation 2 syncs before that store is committed:
    generation 2's assignment is stored too, and its members are answered once the
    followers have it."""
    facade, _ = cluster
    create_offsets_topic(facade, REPLICATED)
    b = MemberFacade(facade, 1, tmp_path / "b1")
    b.sync()
    try:
        async def replicate():
            end = b.replicas.get(OFFSETS_TOPIC, 1).log_end_offset
            for follower in (2, 3):
                await answer_async(b, fetch(OFFSETS_TOPIC, 1, end, replica_id=follower),
                                   FETCH_V)

        async def scenario():
            await replicate()
            (first,) = await join_all(b, SLOW, 1)
            mid = first.member_id
            stored_1 = asyncio.ensure_future(answer_async(b, sync(
                SLOW, first.generation_id, mid, {mid: b"all"}), 5))
            await settle()
            assert not stored_1.done()
            newcomer = await answer_async(b, join(SLOW), 9)
            second = asyncio.ensure_future(answer_async(b, join(SLOW, newcomer.member_id), 9))
            assert (await stored_1).error_code == E.REBALANCE_IN_PROGRESS
            again = await answer_async(b, join(SLOW, mid), 9)
            other = await second
            assert again.generation_id == other.generation_id == first.generation_id + 1
            plan = {mid: b"half-1", other.member_id: b"half-2"}
            syncs = [asyncio.ensure_future(answer_async(b, sync(
                SLOW, again.generation_id, x, plan if x == again.leader else None), 5))
                for x in (mid, other.member_id)]
            await settle()
            assert not any(s.done() for s in syncs)
            await replicate()
            await replicate()
            return [(s.error_code, s.assignment) for s in await asyncio.gather(*syncs)]

        assert run(scenario()) == [(0, b"half-1"), (0, b"half-2")]
    finally:
        b.replicas.close()


RETENTION_MS = 60_000


def test_offsets_expire_after_the_retention_once_their_group_is_empty(cluster, tmp_path):
    """Kafka's offsets retention: a group without members loses its offsets
    `offsets.retention.minutes` after it became empty (a group that never had members:
    after each offset's commit; a commit with its own retention time: at that time), a
    group with members keeps them, and an empty group left without offsets is deleted."""
    facade, _ = cluster
    create_offsets_topic(facade)
    b = MemberFacade(facade, 1, tmp_path / "b1", offsets_retention_ms=RETENTION_MS)
    b.sync()
    try:
        async def scenario():
            by_id, leader = await form_group(b, A, 1)
            generation = by_id[leader].generation_id
            await answer_async(b, commit(A, {("orders", 0): (5, -1, "")}, 8,
                                         generation=generation, member=leader), 8)
            await answer_async(b, commit(B, {("orders", 1): (7, -1, "")}), 8)
            await answer_async(b, commit(B, {("orders", 2): (9, -1, "")}, 2,
                                         retention_ms=1000), 2)

        run(scenario())
        start = b.now
        b.now = start + 999
        assert b.groups.expire_offsets(b.now) == []
        b.now = start + 1000  # the v2 commit's own retention
        assert b.groups.expire_offsets(b.now) == [(B, "orders", 2)]
        b.now = start + RETENTION_MS  # B never had members: counted from the commit
        assert b.groups.expire_offsets(b.now) == [(B, "orders", 1)]
        assert b.groups.committed(B) == {}
        assert set(b.groups.committed(A)) == {("orders", 0)}  # A has a member

        b.groups.tick(b.now)  # A's member sent no heartbeat: its session ended
        (g,) = describe(b, A)
        assert (g.group_state, list(g.members)) == ("Empty", [])
        empty_at = b.now
        b.now = empty_at + RETENTION_MS - 1
        assert b.groups.expire_offsets(b.now) == []
        b.now = empty_at + RETENTION_MS
        assert b.groups.expire_offsets(b.now) == [(A, "orders", 0)]
        (g,) = describe(b, A, version=6)
        assert (g.error_code, g.group_state) == (E.GROUP_ID_NOT_FOUND, "Dead")
        # the tombstones are in the log: a new coordinator loads nothing of A or B
        partition = b.replicas.get(OFFSETS_TOPIC, 0)
        fresh = GroupCoordinator(1, b.groups.config)
        fresh.on_role_changes(RoleChanges([partition], [], [], []))
        while fresh.load_step(1 << 20, b.now):
            pass
        assert fresh.committed(A) == fresh.committed(B) == {}
        assert fresh.list_groups() == (0, [])
    finally:
        b.replicas.close()
