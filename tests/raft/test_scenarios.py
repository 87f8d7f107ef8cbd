"""Scenario tests for the Raft core: each drives a small `Cluster` (tests/harness/quorum.py)
by hand and checks the transcript of what happened — the important lines, in order —
plus the roles, epochs, high watermarks and logs it ends with.

Transcript lines (see the harness): `t=<ms> <text>`; `a -> b Msg(...)` is a message
delivered to b, `a -x b ... (dropped: ...)` one the network dropped; `n: x -> y (epoch e)`
a role change; `n: hw h` a high watermark move; `n: persist quorum-state (...)` the election
state written before that node's next messages. Kafka's behaviour being checked is in
../shared/reference/kafka-facts.md §7.

Seeds are fixed, so every run is the same; which node times out first (and so leads) is
part of the recorded transcript.
"""

import random

import pytest

from kraftcore import codec
from kraftcore.errors import NotLeaderError, RaftStateError
from kraftcore.types import ElectionState
from kraftcore.raft.control import LEADER_CHANGE, decode_control_record
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.raft import RaftConfig, RaftCore, rpc
from kraftcore.raft.config import CLUSTER_METADATA_TOPIC
from kraftcore.raft.types import RaftMessage
from kraftcore.types import SnapshotId
from kraftcore.raft.memory import MemoryStorage

from tests.harness.quorum import Cluster
from tests.harness.transcript import assert_transcript, count_lines, find_line

# Short timeouts (same ratios as Kafka's defaults) where they keep transcripts short.
FAST = dict(election_timeout_ms=100, fetch_timeout_ms=200, election_backoff_ms_max=100,
            election_backoff_base_ms=10, request_timeout_ms=200, fetch_wait_ms_max=50,
            retry_backoff_ms=5)


def values(prefix, count):
    return [b"%s-%03d" % (prefix.encode(), i) for i in range(count)]


def hws(cluster):
    return {n: node.core.high_watermark for n, node in cluster.nodes.items() if node.up}


def leos(cluster):
    return {n: node.core.log_end_offset for n, node in cluster.nodes.items() if node.up}


def leader_change_of(batch):
    """The LeaderChangeMessage held by a stored control batch."""
    (decoded,) = codec.decode_batches(batch[4])
    (record,) = decoded.records
    type_id, _, message = decode_control_record(record.key, record.value)
    assert type_id == LEADER_CHANGE
    return message


# =============================================================================== scenarios

def test_a_first_election_on_kafka_defaults():
    """Three voters on Kafka's defaults: the first election timeout (drawn from
    [1000, 2000) ms) fires on node 1; it wins a pre-vote, bumps the epoch, wins the vote,
    writes LeaderChange at offset 0, announces itself with BeginQuorumEpoch; the followers
    fetch offset 0 then offset 1, and the high watermark reaches 1 everywhere."""
    c = Cluster(seed=0)
    assert c.config == RaftConfig()
    c.run_until(lambda c: set(hws(c).values()) == {1})

    assert_transcript(c, """
        t=0 1: starts unattached (epoch 0)
        t=0 2: starts unattached (epoch 0)
        t=0 3: starts unattached (epoch 0)
        t=1618 1: unattached -> prospective (epoch 0)
        1 -> 2 Vote(pre, epoch=0, last_epoch=0, leo=0)
        2 -> 1 Vote(pre) granted (epoch 0)
        # a majority (itself + 2) granted the pre-vote: now the real election
        1: prospective -> candidate (epoch 1)
        1: persist quorum-state (epoch 1, voted 1)
        1 -> 2 Vote(epoch=1, last_epoch=0, leo=0)
        2: unattached -> voted (epoch 1, voted 1)
        2: persist quorum-state (epoch 1, voted 1)
        2 -> 1 Vote granted (epoch 1)
        1: candidate -> leader (epoch 1)
        1: append 0..0 (epoch 1, LEADER_CHANGE)
        1: persist quorum-state (epoch 1, leader 1, voted 1)
        1 -> 2 BeginQuorumEpoch(epoch=1, leader=1)
        2: voted -> follower (epoch 1, leader 1)
        2 -> 1 BeginQuorumEpoch ok (epoch 1, leader 1)
        2 -> 1 Fetch(offset=0, last_epoch=0)
        1 -> 2 Fetch: records 0..0, hw=-
        # the follower asks for offset 1 only after flushing offset 0: the leader counts it
        2 -> 1 Fetch(offset=1, last_epoch=1)
        1: hw 1
        1 -> 2 Fetch: empty, hw=1
        2: hw 1
    """)
    # The third voter went through the same steps.
    assert_transcript(c, """
        1 -> 3 Vote(epoch=1, last_epoch=0, leo=0)
        3: unattached -> voted (epoch 1, voted 1)
        1 -> 3 BeginQuorumEpoch(epoch=1, leader=1)
        3: voted -> follower (epoch 1, leader 1)
        1 -> 3 Fetch: records 0..0, hw=-
        3: hw 1
    """)
    assert c.roles() == {1: "leader", 2: "follower", 3: "follower"}
    assert c.epochs() == {1: 1, 2: 1, 3: 1}
    assert hws(c) == {1: 1, 2: 1, 3: 1}
    assert c.leaders == {1: 1}
    # The election state each node acted on is the one it persisted.
    assert c.nodes[1].election_state == ElectionState(1, leader_id=1, voted_id=1)
    assert c.nodes[2].election_state == ElectionState(1, leader_id=1, voted_id=1)
    # Offset 0 is the LeaderChange control record of epoch 1, everywhere.
    for n in (1, 2, 3):
        (batch,) = c.log_of(n)
        assert batch[:4] == (0, 0, 1, True)
        assert batch == c.log_of(1)[0]
    change = leader_change_of(c.log_of(1)[0])
    assert change.leader_id == 1
    assert [v.voter_id for v in change.voters] == [1, 2, 3]
    granting = {v.voter_id for v in change.granting_voters}
    assert 1 in granting and len(granting) >= 2 and granting <= {1, 2, 3}
    # The election timeout was drawn from [T, 2T).
    _, t = find_line(c, "1: unattached -> prospective (epoch 0)")
    assert 1000 <= t < 2000


def test_b_pre_vote_keeps_a_partitioned_follower_from_bumping_the_epoch():
    """A follower cut off for ~8 s (four fetch timeouts) goes prospective again and
    again, but a pre-vote bumps nothing: its epoch stays 1. Back on the network, its
    pre-vote is refused by the leader and by the follower that still hears the leader,
    and it simply follows again. Kafka's defaults."""
    c = Cluster(seed=0)
    assert c.run_until_leader() == 1
    c.run(1000)
    c.isolate(3)
    c.run(8000)
    c.heal()
    c.run(3000)

    assert_transcript(c, """
        partition {3} | {1,2}
        # no Fetch response for fetch.timeout: pre-vote, which nobody hears
        3: follower -> prospective (epoch 1)
        3 -x 1 Vote(pre, epoch=1, last_epoch=1, leo=1) (dropped: link blocked)
        3 -x 2 Vote(pre, epoch=1, last_epoch=1, leo=1) (dropped: link blocked)
        # the pre-vote times out: back to following the leader it knew, same epoch
        3: prospective -> follower (epoch 1, leader 1)
        3: follower -> prospective (epoch 1)
        3: prospective -> follower (epoch 1, leader 1)
        heal
        3: follower -> prospective (epoch 1)
        3 -> 1 Vote(pre, epoch=1, last_epoch=1, leo=1)
        3 -> 2 Vote(pre, epoch=1, last_epoch=1, leo=1)
        1 -> 3 Vote(pre) refused (epoch 1, leader 1)
        2 -> 3 Vote(pre) refused (epoch 1, leader 1)
        3: prospective -> follower (epoch 1, leader 1)
        3 -> 1 Fetch(offset=1, last_epoch=1)
        1 -> 3 Fetch: empty, hw=1
    """)
    heal_index, _ = find_line(c, "heal")
    isolated = [text for _, text in c.transcript[:heal_index]]
    assert isolated.count("3: follower -> prospective (epoch 1)") >= 2
    assert count_lines(c, "3: * -> candidate *") == 0
    # The only standard (epoch-bumping) Vote requests are node 1's first election.
    assert count_lines(c, "* Vote(epoch=*") == count_lines(c, "1 -> * Vote(epoch=1,*") == 2
    assert c.roles() == {1: "leader", 2: "follower", 3: "follower"}
    assert c.epochs() == {1: 1, 2: 1, 3: 1}
    assert c.leaders == {1: 1}
    assert c.nodes[3].election_state.epoch == 1
    assert c.core(3).leader_id == 1


def test_b2_without_pre_vote_the_same_partition_disrupts_the_leader():
    """The contrast (pre-vote off, Kafka before 4.0): the isolated follower bumps the epoch
    with every candidacy, and on rejoining its higher epoch unseats a healthy leader."""
    c = Cluster(seed=0, pre_vote=False)
    first = c.run_until_leader()
    c.run(1000)
    lonely = max(n for n in c.nodes if n != first)
    c.isolate(lonely)
    c.run(8000)
    assert c.core(lonely).role == "candidate"
    assert c.core(lonely).epoch > 2
    c.heal()
    c.run(3000)
    assert_transcript(c, f"""
        {lonely}: follower -> candidate (epoch 2)
        {lonely}: candidate -> candidate (epoch 3)
        heal
        {lonely} -> {first} Vote(epoch=*, last_epoch=1, leo=1)
        # a higher epoch unseats the healthy leader, which even votes for the intruder
        {first}: leader -> voted (epoch *, voted {lonely})
        {lonely}: candidate -> leader *
    """)
    assert min(c.epochs().values()) > 2


def test_c_divergence_and_truncation_after_a_leader_change():
    """The leader (2) appends 6 records that reach nobody; 1 and 3 elect 3 in epoch 2,
    which commits its own records at the same offsets. When 2 hears of epoch 2 it fetches
    with its epoch-1 log end, gets DivergingEpoch (epoch 1 ends at 6 on the leader),
    truncates its uncommitted suffix and catches up. Short timeouts."""
    c = Cluster(seed=0, **FAST)
    assert c.run_until_leader() == 2
    c.propose(2, values("a", 5))  # offsets 1..5, committed on all three
    c.run(10)
    assert hws(c) == {1: 6, 2: 6, 3: 6}

    c.isolate(2)
    assert c.propose(2, values("x", 3)) == 8
    assert c.propose(2, values("y", 3)) == 11
    c.run_until(lambda c: c.core(3).role == "leader")
    assert c.propose(3, values("z", 4)) == 10
    c.run(10)
    assert hws(c)[3] == 11 and hws(c)[2] == 6
    c.heal()
    c.run(600)

    assert_transcript(c, """
        partition {2} | {1,3}
        2: append 6..8 (epoch 1)
        2: append 9..11 (epoch 1)
        2 -x 1 Fetch: records 6..8, hw=6 (dropped: link blocked)
        3: prospective -> candidate (epoch 2)
        1 -> 3 Vote granted (epoch 2)
        3: candidate -> leader (epoch 2)
        3: append 6..6 (epoch 2, LEADER_CHANGE)
        3 -x 2 BeginQuorumEpoch(epoch=2, leader=3) (dropped: link blocked)
        3: hw 7
        3: append 7..10 (epoch 2)
        3: hw 11
        heal
        # check-quorum: no Fetch from a majority for 1.5 x fetch timeout
        2: leader -> resigned (epoch 1)
        2 -> 1 EndQuorumEpoch(epoch=1, leader=2, preferred=[1, 3])
        1 -> 2 EndQuorumEpoch FENCED_LEADER_EPOCH (epoch 2, leader 3)
        2: resigned -> follower (epoch 2, leader 3)
        2 -> 3 Fetch(offset=12, last_epoch=1)
        3 -> 2 Fetch: diverging (epoch 1, end offset 6), hw=11
        2: truncate to 6 (was 12)
        2 -> 3 Fetch(offset=6, last_epoch=1)
        3 -> 2 Fetch: records 6..10, hw=11
        2: hw 11
        2 -> 3 Fetch(offset=11, last_epoch=2)
    """)
    assert c.roles() == {1: "follower", 2: "follower", 3: "leader"}
    assert c.epochs() == {1: 2, 2: 2, 3: 2}
    assert hws(c) == {1: 11, 2: 11, 3: 11}
    assert c.log_of(1) == c.log_of(2) == c.log_of(3)
    assert [(b[0], b[1], b[2]) for b in c.log_of(2)] == [
        (0, 0, 1), (1, 5, 1), (6, 6, 2), (7, 10, 2)]
    # Every node applied the same committed records; the x and y proposals are gone.
    applied = [v for _, v in c.nodes[1].sm.values]
    assert applied == values("a", 5) + values("z", 4)
    assert [v for _, v in c.nodes[2].sm.values] == applied
    assert c.leaders == {1: 2, 2: 3}


def test_d_snapshot_catch_up_of_a_node_far_behind():
    """Node 3 crashes; 1 and 2 commit 22 batches and both take two snapshots, so the log
    start (101) passes 3's log end (1). Restarted, 3 fetches offset 1, is told the latest
    snapshot id, pulls it with FetchSnapshot in 1 KiB chunks, restarts its log at the
    snapshot's end, loads it into its state machine and fetches on from there."""
    c = Cluster(seed=0, fetch_bytes_max=1024)
    assert c.run_until_leader() == 1
    c.run(100)
    c.crash(3)
    for i in range(10):
        c.propose(1, values("v%02d" % i, 10))
        c.run(10)
    first = c.snapshot(1)
    assert c.snapshot(2) == first == SnapshotId(101, 1)
    for i in range(10, 20):
        c.propose(1, values("v%02d" % i, 10))
        c.run(10)
    second = c.snapshot(1)
    assert c.snapshot(2) == second == SnapshotId(201, 1)
    for i in range(20, 22):
        c.propose(1, values("v%02d" % i, 10))
        c.run(10)
    leader_storage = c.nodes[1].storage
    assert leader_storage.log_start_offset == 101 > c.nodes[3].storage.log_end_offset == 1
    assert leader_storage.snapshot_ids() == [first, second]
    size = len(leader_storage.snapshot_bytes(second))
    assert size > 3 * 1024  # several chunks

    c.restart(3)
    c.run(1000)

    chunks = "\n".join(
        f"3 -> 1 FetchSnapshot(snapshot=(end offset 201, epoch 1), position={p})\n"
        f"1 -> 3 FetchSnapshot: bytes [{p}, {min(p + 1024, size)}) of {size}"
        for p in range(0, size, 1024))
    assert_transcript(c, """
        1: snapshot written (end offset 101, epoch 1, *)
        1: snapshot written (end offset 201, epoch 1, *)
        1: log start -> 101
        restart 3 (quorum-state: epoch 1, leader 1, voted 1, log [0, 1))
        3: starts follower (epoch 1, leader 1)
        3 -> 1 Fetch(offset=1, last_epoch=1)
        1 -> 3 Fetch: snapshot (end offset 201, epoch 1), hw=221
    """ + chunks + """
        3: log restarts empty at 201 (snapshot epoch 1)
        3: load snapshot (end offset 201, epoch 1)
        3 -> 1 Fetch(offset=201, last_epoch=1)
        1 -> 3 Fetch: records 201..220, hw=221
        3: hw 221
        3: apply 201..220
    """)
    assert count_lines(c, "1 -> 3 FetchSnapshot: bytes *") == (size + 1023) // 1024 >= 4
    assert c.roles() == {1: "leader", 2: "follower", 3: "follower"}
    assert c.epochs() == {1: 1, 2: 1, 3: 1}
    assert hws(c) == {1: 221, 2: 221, 3: 221}
    node3 = c.nodes[3]
    assert node3.storage.log_start_offset == 201
    assert node3.storage.snapshot_ids() == [second]
    assert node3.storage.snapshot_bytes(second) == leader_storage.snapshot_bytes(second)
    assert node3.sm.loaded == [second]
    assert node3.sm.next_offset == c.nodes[1].sm.next_offset == 221
    assert node3.sm.values == c.nodes[1].sm.values == c.nodes[2].sm.values
    assert len(node3.sm.values) == 220
    assert c.log_of(3) == [b for b in c.log_of(1) if b[0] >= 201]


def test_e_check_quorum_resignation_on_kafka_defaults():
    """The leader is cut off from both followers. It hears no Fetch, so 1.5 x fetch
    timeout (3000 ms) after the last one it resigns and sends EndQuorumEpoch (lost in the
    partition); the followers, whose fetch timeout (2000 ms) fired first, elect node 3 in
    epoch 2. Healed, the old leader follows the new one."""
    c = Cluster(seed=0)
    assert c.run_until_leader() == 1
    c.run(1000)
    c.isolate(1)
    c.run(4000)
    c.heal()
    c.run(1000)

    assert_transcript(c, """
        partition {1} | {2,3}
        3: prospective -> candidate (epoch 2)
        3: candidate -> leader (epoch 2)
        1: leader -> resigned (epoch 1)
        1 -x 2 EndQuorumEpoch(epoch=1, leader=1, preferred=[2, 3]) (dropped: link blocked)
        1 -x 3 EndQuorumEpoch(epoch=1, leader=1, preferred=[2, 3]) (dropped: link blocked)
        heal
        3 -> 1 BeginQuorumEpoch(epoch=2, leader=3)
        1: resigned -> follower (epoch 2, leader 3)
        3 -> 1 Fetch: records 1..1, hw=2
        1: hw 2
    """)
    cut, _ = find_line(c, "partition {1} | {2,3}")
    resigned, t_resign = find_line(c, "1: leader -> resigned (epoch 1)")
    last_fetch = max(t for t, text in c.transcript[:resigned]
                     if text.startswith(("2 -> 1 Fetch(", "3 -> 1 Fetch(")))
    assert t_resign - last_fetch == 3000 == c.config.check_quorum_timeout_ms
    assert c.transcript[cut][0] - last_fetch <= c.config.fetch_wait_ms_max
    assert c.roles() == {1: "follower", 2: "follower", 3: "leader"}
    assert c.epochs() == {1: 2, 2: 2, 3: 2}
    assert hws(c) == {1: 2, 2: 2, 3: 2}
    assert c.leaders == {1: 1, 2: 3}
    assert c.log_of(1) == c.log_of(2) == c.log_of(3)


def test_f_graceful_resignation():
    """`resign()` on the leader: it answers its held Fetches, sends EndQuorumEpoch naming
    the most up-to-date voters first, and the first of them (2) stands for election at
    once (backoff 0) and wins epoch 2. Kafka's defaults."""
    c = Cluster(seed=0)
    assert c.run_until_leader() == 1
    c.propose(1, [b"one"])
    c.run(1000)
    c.resign(1)
    c.run(1000)

    assert_transcript(c, """
        1: resign
        1: leader -> resigned (epoch 1)
        1 -> 2 EndQuorumEpoch(epoch=1, leader=1, preferred=[2, 3])
        2: follower -> prospective (epoch 1)
        1 -> 3 EndQuorumEpoch(epoch=1, leader=1, preferred=[2, 3])
        2 -> 1 Vote(pre, epoch=1, last_epoch=1, leo=2)
        2 -> 3 Vote(pre, epoch=1, last_epoch=1, leo=2)
        # a resigned leader refuses; a follower told its leader left grants
        1 -> 2 Vote(pre) refused (epoch 1)
        3 -> 2 Vote(pre) granted (epoch 1, leader 1)
        2: prospective -> candidate (epoch 2)
        2: candidate -> leader (epoch 2)
        2: append 2..2 (epoch 2, LEADER_CHANGE)
        2 -> 3 BeginQuorumEpoch(epoch=2, leader=2)
        3: voted -> follower (epoch 2, leader 2)
        2: hw 3
    """)
    _, t_resign = find_line(c, "1: resign")
    _, t_run = find_line(c, "2: follower -> prospective (epoch 1)")
    assert t_run == t_resign  # backoff 0 for the first preferred successor
    assert count_lines(c, "3: * -> prospective *") == 0
    assert c.roles() == {1: "follower", 2: "leader", 3: "follower"}
    assert c.epochs() == {1: 2, 2: 2, 3: 2}
    assert hws(c) == {1: 3, 2: 3, 3: 3}
    assert c.log_of(1) == c.log_of(2) == c.log_of(3)


# =============================================================================== edges

def test_duplicate_vote_is_granted_again_but_another_candidate_is_refused():
    c = Cluster(seed=0)
    request = rpc.vote_request(None, 2, 1, 1, 0, 0, False)
    first = c.inject(1, 2, request)
    c.deliver()
    c.inject(1, 2, request, first.correlation_id)  # the network duplicates it
    c.deliver()
    c.inject(3, 2, rpc.vote_request(None, 2, 1, 3, 0, 0, False))
    c.deliver()
    assert_transcript(c, """
        1 -> 2 Vote(epoch=1, last_epoch=0, leo=0)
        2: unattached -> voted (epoch 1, voted 1)
        2: persist quorum-state (epoch 1, voted 1)
        2 -> 1 Vote granted (epoch 1)
        1 -> 2 Vote(epoch=1, last_epoch=0, leo=0)
        2 -> 1 Vote granted (epoch 1)
        3 -> 2 Vote(epoch=1, last_epoch=0, leo=0)
        2 -> 3 Vote refused (epoch 1)
    """)
    assert count_lines(c, "2: persist quorum-state *") == 2  # epoch 0 at start, then the vote
    assert c.core(2).role == "voted" and c.core(2).voted_id == 1
    assert c.nodes[2].election_state == ElectionState(1, voted_id=1)


def _drained_core(node_id=2):
    core = RaftCore(node_id, {1, 2, 3}, MemoryStorage(), None, RaftConfig(),
                    random.Random(0), 0)
    while core.take_ready() is not None:
        pass
    return core


def _vote_granted(message):
    part = message.body.topics[0].partitions[0]
    return part.vote_granted


def test_vote_grant_goes_out_in_the_ready_that_persists_the_vote():
    core = _drained_core()
    core.handle(RaftMessage(1, 2, 7, rpc.vote_request(None, 2, 1, 1, 0, 0, False)), 10)
    ready = core.take_ready()
    assert ready.election_state == ElectionState(1, voted_id=1)
    assert ready.needs_persist
    (grant,) = [m for m in ready.messages if type(m.body).__name__ == "VoteResponse"]
    assert (grant.destination, grant.correlation_id) == (1, 7) and _vote_granted(grant)
    rest = core.take_ready()
    assert rest is None or rest.election_state is None
    # A pre-vote promises nothing: granted without any election state to persist.
    core = _drained_core()
    core.handle(RaftMessage(1, 2, 8, rpc.vote_request(None, 2, 0, 1, 0, 0, True)), 10)
    ready = core.take_ready()
    assert ready.election_state is None
    (grant,) = ready.messages
    assert _vote_granted(grant)
    assert core.voted_id is None


def test_restarted_leader_comes_back_resigned_and_never_appends_in_its_old_epoch():
    c = Cluster(seed=0, **FAST)
    leader = c.run_until_leader()
    c.propose(leader, [b"before the crash"])
    c.run(10)
    old_epoch = c.core(leader).epoch
    before = [b for b in c.log_of(leader) if b[2] == old_epoch]
    c.crash(leader)
    c.restart(leader)
    assert c.core(leader).role == "resigned"
    assert c.core(leader).epoch == old_epoch
    with pytest.raises(NotLeaderError):
        c.propose(leader, [b"after the restart"])
    restart, _ = find_line(c, f"restart {leader} *")
    c.run(2000)
    assert_transcript(c, f"""
        restart {leader} (quorum-state: epoch 1, leader {leader}, voted {leader}, log [0, 2))
        {leader}: starts resigned (epoch 1)
        {leader}: propose 1 records -> NotLeaderError
        {leader}: resigned -> * (epoch 2*
    """)
    assert [b for b in c.log_of(leader) if b[2] == old_epoch] == before
    assert find_line(c, f"{leader}: append * (epoch {old_epoch}*", start=restart) is None
    new = c.leader()
    # It may well lead again, but only in a new epoch it won.
    assert new is not None and c.core(new).epoch > old_epoch
    assert c.leaders[old_epoch] == leader
    assert len(set(map(tuple, (c.log_of(n) for n in c.nodes)))) == 1


def test_follower_told_to_truncate_below_its_high_watermark_raises():
    c = Cluster(seed=0, **FAST)
    leader = c.run_until_leader()
    follower = min(n for n in c.nodes if n != leader)
    c.propose(leader, values("a", 10))
    c.run(10)
    assert c.core(follower).high_watermark == 11
    leo = c.core(follower).log_end_offset
    # Forge the answer to the follower's outstanding Fetch: "your log diverges at 3".
    fetch = c.last_request[(follower, leader)]
    assert type(fetch.body).__name__ == "FetchRequest"
    c.inject(leader, follower, rpc.fetch_response(
        ErrorCode.NONE, leader, c.core(leader).epoch, high_watermark=11,
        diverging=(1, 3)), fetch.correlation_id)
    with pytest.raises(RaftStateError):
        c.deliver_one()
    assert c.nodes[follower].storage.log_end_offset == leo  # nothing was truncated


def test_propose_on_a_follower_raises_not_leader():
    c = Cluster(seed=0, **FAST)
    leader = c.run_until_leader()
    follower = max(n for n in c.nodes if n != leader)
    with pytest.raises(NotLeaderError) as info:
        c.propose(follower, [b"nope"])
    assert info.value.leader_id == leader
    assert info.value.epoch == c.core(leader).epoch
    assert c.core(follower).log_end_offset == c.core(leader).log_end_offset == 1
    # And before any leader is known.
    c = Cluster(seed=0, **FAST)
    with pytest.raises(NotLeaderError) as info:
        c.propose(1, [b"nope"])
    assert info.value.leader_id is None


def test_one_voter_commits_with_its_observers_down():
    c = Cluster(voters=(1,), observers=(2, 3), seed=0, **FAST)
    assert c.roles() == {1: "leader", 2: "unattached", 3: "unattached"}
    c.run(100)
    c.crash(2)
    c.crash(3)
    assert c.propose(1, values("solo", 3)) == 3
    c.run(100)
    assert c.core(1).high_watermark == 4
    assert [v for _, v in c.nodes[1].sm.values] == values("solo", 3)
    c.restart(2)
    c.restart(3)
    c.run(500)
    assert hws(c) == {1: 4, 2: 4, 3: 4}
    assert c.roles() == {1: "leader", 2: "follower", 3: "follower"}
    for observer in (2, 3):
        assert count_lines(c, f"{observer} -> * Vote(*") == 0
        assert count_lines(c, f"{observer}: * -> prospective *") == 0
        assert c.nodes[observer].election_state.voted_id is None


def test_observers_never_count_for_the_high_watermark_or_check_quorum():
    """Voters 1-3 and observers 4, 5; voters 2 and 3 crash. The observers fetch every
    record, yet the leader's high watermark stays put, and 3 s later it resigns: observer
    Fetches are no evidence of a quorum. The observers never stand for election."""
    c = Cluster(voters=(1, 2, 3), observers=(4, 5), seed=0, **FAST)
    leader = c.run_until_leader()
    c.run(100)
    assert hws(c) == {n: 1 for n in c.nodes}
    down = [n for n in (1, 2, 3) if n != leader]
    for n in down:
        c.crash(n)
    last = c.propose(leader, values("b", 5))
    c.run(100)
    assert c.core(4).log_end_offset == c.core(5).log_end_offset == last + 1
    assert c.core(leader).high_watermark == 1
    assert c.core(4).high_watermark == c.core(5).high_watermark == 1
    c.run_until(lambda c: c.core(leader).role != "leader", timeout_ms=1000)
    assert c.core(leader).role == "resigned"
    assert_transcript(c, f"""
        {leader}: hw 1
        crash {down[0]} *
        {leader}: propose 5 records -> last offset 5
        {leader} -> 4 Fetch: records 1..5, hw=1
        4 -> {leader} Fetch(offset=6, last_epoch=1)
        {leader}: leader -> resigned (epoch 1)
    """)
    for observer in (4, 5):
        assert count_lines(c, f"{observer} -> * Vote(*") == 0
        assert count_lines(c, f"{observer}: * -> prospective *") == 0
        assert count_lines(c, f"{observer}: * -> candidate *") == 0


def test_candidate_sends_its_vote_requests_in_the_ready_that_persists_its_own_vote():
    """The candidate's Vote requests leave in the Ready that persists its own vote — to
    every other voter, including one that has not answered the pre-vote yet (kafka-facts
    §7.3: Vote requests go to every voter still UNRECORDED in the new tally)."""
    core = _drained_core(node_id=1)
    deadline = core.poll(0)
    core.poll(deadline)
    assert core.role == "prospective"
    ready = core.take_ready()
    assert ready.election_state is None  # a pre-vote is memory-only
    pre_votes = [m for m in ready.messages if type(m.body).__name__ == "VoteRequest"]
    assert sorted(m.destination for m in pre_votes) == [2, 3]
    assert all(m.body.topics[0].partitions[0].pre_vote for m in pre_votes)
    core.on_persisted(ready.number)
    grant = pre_votes[0]
    core.handle(RaftMessage(grant.destination, 1, grant.correlation_id,
                            rpc.vote_response(0, None, 0, True)), deadline)
    assert core.role == "candidate" and core.epoch == 1
    ready = core.take_ready()
    assert ready.election_state == ElectionState(1, voted_id=1)
    votes = [m for m in ready.messages if type(m.body).__name__ == "VoteRequest"]
    assert sorted(m.destination for m in votes) == [2, 3]
    assert not any(m.body.topics[0].partitions[0].pre_vote for m in votes)


def test_a_vote_survives_a_crash():
    """The vote is in the quorum-state before the grant leaves: after a crash and restart
    the voter still refuses any other candidate in that epoch."""
    c = Cluster(seed=0)
    c.inject(1, 2, rpc.vote_request(None, 2, 1, 1, 0, 0, False))
    c.deliver()
    c.crash(2)
    c.restart(2)
    c.inject(3, 2, rpc.vote_request(None, 2, 1, 3, 0, 0, False))
    c.inject(1, 2, rpc.vote_request(None, 2, 1, 1, 0, 0, False))
    c.deliver()
    assert_transcript(c, """
        2 -> 1 Vote granted (epoch 1)
        crash 2 *
        restart 2 (quorum-state: epoch 1, voted 1, log [0, 0))
        2: starts voted (epoch 1, voted 1)
        2 -> 3 Vote refused (epoch 1)
        2 -> 1 Vote granted (epoch 1)
    """)


def test_candidate_asks_voters_whose_pre_vote_answer_was_lost():
    """Five voters. Node 3's pre-votes to 4 and 5 are lost; 1 and 2 grant, so 3 runs for
    epoch 1 — and 2 crashes before voting. Self + 1 is not a majority of five, but 4 and
    5 are up and have voted for nobody: asked, they grant and 3 wins epoch 1 at once."""
    c = Cluster(voters=(1, 2, 3, 4, 5), seed=0)
    while c.core(c.step()).role != "prospective":
        pass
    assert c.core(3).role == "prospective"
    for lost in (4, 5):
        assert c.take_queued(3, lost, "VoteRequest") is not None
    while c.core(3).role != "candidate":
        c.deliver_one()
    c.crash(2)
    c.run(100)
    assert_transcript(c, """
        3: prospective -> candidate (epoch 1)
        crash 2 *
        3 -> 4 Vote(epoch=1, last_epoch=0, leo=0)
        3 -> 5 Vote(epoch=1, last_epoch=0, leo=0)
        3: candidate -> leader (epoch 1)
    """)
    assert c.leader() == 3 and c.core(3).epoch == 1


def test_describe_quorum_is_answered_by_the_leader_only():
    """DescribeQuorum (kafka-metadata-quorum describe): the leader reports its epoch, high
    watermark and every voter's log end offset; a follower answers NOT_LEADER_OR_FOLLOWER
    and names the leader."""
    c = Cluster(voters=(1, 2, 3), seed=0)
    leader = c.run_until_leader()
    c.propose(leader, [b"a", b"b"])
    c.run(500)
    request = m.DescribeQuorumRequest(topics=[m.DescribeQuorumRequest.TopicData(
        topic_name=CLUSTER_METADATA_TOPIC,
        partitions=[m.DescribeQuorumRequest.PartitionData(partition_index=0)])])
    follower = next(n for n in (1, 2, 3) if n != leader)
    answers = {}
    for node in (leader, follower):
        c.inject(99, node, request)
        while c.queue[0].destination != node or c.queue[0].source != 99:
            c.deliver_one()
        c.deliver_one()
        answers[node] = c.take_queued(node, 99, "DescribeQuorumResponse").body
    part = answers[leader].topics[0].partitions[0]
    hw = c.core(leader).high_watermark
    assert (part.error_code, part.leader_id, part.leader_epoch) == (0, leader, c.core(leader).epoch)
    assert part.high_watermark == hw == 3  # LeaderChange + two records
    assert sorted(v.replica_id for v in part.current_voters) == [1, 2, 3]
    assert all(v.log_end_offset == 3 for v in part.current_voters)
    assert part.observers == []
    other = answers[follower].topics[0].partitions[0]
    assert other.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and other.leader_id == leader
    # The body encodes at the version the runtime will use.
    assert m.DescribeQuorumResponse.decode(answers[leader].encode(2), 2) == answers[leader]


def _leader_of_three():
    """Node 1 of voters {1, 2, 3}, made leader by granting its (pre-)votes by hand, every
    Ready persisted at once; followers 2 and 3 have fetched the epoch's first batch and
    wait parked. Returns (core, storage, now)."""
    core, storage, now, readys = _becoming_leader()
    storage.flush()
    core.on_persisted(readys[-1].number)
    for cid in (10, 20):  # the first fetches commit the LeaderChange batch; then they park
        for replica in (2, 3):
            _fetch(core, replica, core.log_end_offset, now, cid + replica)
        _drain(core, storage)
    return core, storage, now


def _drain(core, storage):
    """Take and persist every Ready; returns their messages."""
    messages = []
    while (ready := core.take_ready()) is not None:
        storage.flush()
        core.on_persisted(ready.number)
        messages += ready.messages
    return messages


def _fetch(core, replica, offset, now, cid):
    core.handle(RaftMessage(replica, 1, cid, rpc.fetch_request(
        None, replica, core.epoch, offset, core.epoch, 500, 1 << 20)), now)


def _fetch_answers(ready):
    return {m.destination: rpc.fetch_response_partition(m.body) for m in ready.messages
            if type(m.body).__name__ == "FetchResponse"}


def test_a_high_watermark_answer_waits_for_what_the_state_machine_appends_on_the_commit():
    """The Fetch that moves the high watermark has nothing new to carry: it is held while
    the Ready delivering the commits goes out; what the state machine appends on seeing
    them leaves in the answer, with the new high watermark (one round trip, not two)."""
    core, storage, now = _leader_of_three()
    last = core.propose([b"a"], now)
    assert set(_fetch_answers(core.take_ready())) == {2, 3}  # the parked fetches get "a"
    storage.flush()
    core.on_persisted(core._ready_number)
    _fetch(core, 2, last + 1, now, 31)  # follower 2 has "a": it commits
    ready = core.take_ready()
    assert [c.last_offset for c in ready.commits] == [last] and ready.high_watermark == last + 1
    assert 2 not in _fetch_answers(ready)
    reaction = core.propose([b"b"], now)
    answer = _fetch_answers(core.take_ready())[2]
    assert answer.high_watermark == last + 1
    assert [r.value for b in codec.decode_batches(bytes(answer.records))
            for r in b.records] == [b"b"] and reaction == last + 1


def test_a_high_watermark_answer_goes_in_the_next_ready_when_nothing_is_appended():
    core, storage, now = _leader_of_three()
    last = core.propose([b"a"], now)
    _drain(core, storage)
    _fetch(core, 2, last + 1, now, 31)
    ready = core.take_ready()
    assert ready.commits and 2 not in _fetch_answers(ready)
    answer = _fetch_answers(core.take_ready())[2]
    assert answer.high_watermark == last + 1 and not answer.records


def test_a_held_fetch_superseded_by_a_newer_one_from_its_replica_still_gets_an_answer():
    """A replica that gave a held Fetch up and fetches again: the old one is answered at
    once (empty, under its own correlation id) so that no driver waits on it forever; the
    new one is held as usual and gets what is appended next."""
    core, storage, now = _leader_of_three()
    end = storage.log_end_offset

    def answers_to_2():
        return {m.correlation_id: rpc.fetch_response_partition(m.body)
                for m in _drain(core, storage)
                if type(m.body).__name__ == "FetchResponse" and m.destination == 2}

    # follower 2 waits parked (see _leader_of_three); it fetches again
    _fetch(core, 2, end, now, 41)
    answers = answers_to_2()
    assert len(answers) == 1 and 41 not in answers  # the old one, under its own id
    assert not next(iter(answers.values())).records
    last = core.propose([b"x"], now)  # the new one gets the record
    answer = answers_to_2()[41]
    assert [r.value for b in codec.decode_batches(bytes(answer.records))
            for r in b.records] == [b"x"] and last == end


def _becoming_leader():
    """Node 1 of voters {1, 2, 3} granted its (pre-)votes by hand; returns (core, storage,
    now, the Readys it produced on the way, none of the last ones persisted yet)."""
    storage = MemoryStorage()
    core = RaftCore(1, {1, 2, 3}, storage, None, RaftConfig(), random.Random(0), 0)
    now, readys = 0, []
    while core.role != "leader":
        assert now < 50_000, "no leader"
        now += 1000
        core.poll(now)
        while (ready := core.take_ready()) is not None:
            readys.append(ready)
            if core.role == "leader":
                break  # keep the Ready that made it leader unpersisted
            storage.flush()
            core.on_persisted(ready.number)
            for message in ready.messages:
                if type(message.body).__name__ == "VoteRequest":
                    part = rpc.vote_partition(message.body)
                    core.handle(RaftMessage(message.destination, 1, message.correlation_id,
                                            rpc.vote_response(0, None, part.replica_epoch,
                                                              True)), now)
    return core, storage, now, readys


def test_only_a_leader_whose_election_state_is_persisted_may_send_before_its_flush():
    """`send_first`: never on a candidate's Readys, nor on the one that persists the
    leadership, nor on one taken while an earlier held-back Ready is unpersisted; on every
    leader Ready after that, also when it has records to flush."""
    core, storage, now, readys = _becoming_leader()
    assert not any(ready.send_first for ready in readys)
    elected = readys[-1]
    assert elected.election_state.leader_id == 1 and elected.flush_offset is not None
    _fetch(core, 2, 0, now, 50)  # answered while the leadership is not yet durable
    held = core.take_ready()
    assert held.messages and not held.send_first
    storage.flush()
    core.on_persisted(elected.number)
    _fetch(core, 3, 0, now, 51)
    assert not core.take_ready().send_first  # `held` itself is still unpersisted
    core.on_persisted(held.number + 1)
    last = core.propose([b"x"], now)
    _fetch(core, 2, last, now, 52)
    ready = core.take_ready()
    assert ready.send_first and ready.flush_offset == last + 1 and ready.messages


def test_a_leaders_unflushed_records_commit_only_once_both_followers_hold_them():
    """The leader counts its own log only once flushed: records it sent before flushing
    them are committed by the two followers' acknowledgements, not by one."""
    core, storage, now = _leader_of_three()
    last = core.propose([b"a"], now)
    ready = core.take_ready()
    assert ready.send_first and set(_fetch_answers(ready)) == {2, 3}  # not flushed
    _fetch(core, 2, last + 1, now, 61)
    assert core.high_watermark == last
    _fetch(core, 3, last + 1, now, 62)
    assert core.high_watermark == last + 1


def test_a_fetch_answers_line_spans_its_batches_read_from_their_headers():
    """The transcript line of a Fetch answer names the first offset of its first batch and
    the last offset of its last one, read from the batch headers (kraftcore.layout's
    offsets), whatever the base offsets; bytes short of a whole header at the end are not
    a batch."""
    from tests.harness.transcript import format_message

    base = 2**40
    records = (codec.encode_batch(values("a", 3), base_offset=base)
               + codec.encode_batch([b"x" * 300] * 2, base_offset=base + 3))
    assert format_message(rpc.fetch_response(0, 1, 5, high_watermark=7, records=records)) \
        == f"Fetch: records {base}..{base + 4}, hw=7"
    assert format_message(rpc.fetch_response(0, 1, 5, records=records + records[:26])) \
        == f"Fetch: records {base}..{base + 4}, hw=-"
    assert format_message(rpc.fetch_response(0, 1, 5, records=b"")) == "Fetch: empty, hw=-"
