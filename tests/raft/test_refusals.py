"""What a node does with requests and responses it must not act on: Vote, BeginQuorumEpoch
and EndQuorumEpoch from a non-voter (Kafka's static quorum answers INCONSISTENT_VOTER_SET),
epochs, offsets and ids outside their ranges, epochs beyond what one message may move a
node to (kraftcore.limits.RAFT_EPOCH_*), and responses no peer could send. Each refusal
leaves the election state, in memory and persisted, as it was, and the quorum goes on
electing and committing. Then the other end of the epoch space: a quorum that really
exhausts it stops with RaftEpochExhaustedError instead of wedging.

Messages are `inject`ed into a `Cluster` (tests/harness/quorum.py) from made-up senders; the
answers to those come back to ids outside the cluster (`cluster.outside`)."""

import random

import pytest

from kraftcore.errors import RaftEpochExhaustedError, RaftStateError
from kraftcore.limits import (RAFT_EPOCH_ACCEPTED_MAX, RAFT_EPOCH_MAX,
                              RAFT_EPOCH_REQUEST_STEP_MAX, RAFT_EPOCH_STEP_MAX,
                              RAFT_OBSERVERS_MAX)
from kraftcore.types import ElectionState
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.raft import RaftConfig, RaftCore, rpc
from kraftcore.raft import leader as leader_module
from kraftcore.types import SnapshotId
from kraftcore.raft.memory import MemoryStorage

from tests.harness.quorum import Cluster
from tests.harness.transcript import assert_transcript

FAST = dict(election_timeout_ms=100, fetch_timeout_ms=200, election_backoff_ms_max=100,
            election_backoff_base_ms=10, request_timeout_ms=200, fetch_wait_ms_max=50,
            retry_backoff_ms=5)
HOSTILE = 99  # no node of the cluster
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


# ============================================================================ helpers

def running(seed=3, voters=(1, 2, 3), observers=()):
    """A cluster with a leader and a committed write; returns (cluster, leader id)."""
    c = Cluster(voters=voters, observers=observers, seed=seed, **FAST)
    leader = c.run_until_leader()
    commit(c, leader, b"before")
    return c, leader


def commit(c, leader, value):
    """Propose `value` on `leader` and run until every running node applied it."""
    offset = c.propose(leader, [value])
    c.run_until(lambda c: all(node.sm.next_offset > offset for node in c.nodes.values()
                              if node.up))
    return offset


def election(c, node_id):
    """What a refusal must leave alone: the role, epoch, leader and vote in memory, and
    the persisted election state."""
    node = c.nodes[node_id]
    core = node.core
    return core.role, core.epoch, core.leader_id, core.voted_id, node.election_state


def ask(c, target, body, source=HOSTILE):
    """Deliver `body` from `source` to `target` (after what is already queued) and return
    the answer sent back to `source`."""
    c.deliver()
    request = c.inject(source, target, body)
    c.deliver()
    answers = [message for message in c.outside
               if message.correlation_id == request.correlation_id
               and message.source == target]
    assert len(answers) == 1, c.text()
    return answers[0].body


def vote(c, target, epoch, candidate, last_epoch=0, last_offset=INT64_MAX, pre_vote=False,
         voter_id=-1):
    """Ask `target` for a vote; returns the answer's partition."""
    return rpc.vote_response_partition(ask(c, target, rpc.vote_request(
        None, voter_id, epoch, candidate, last_epoch, last_offset, pre_vote)))


def begin_epoch(c, target, leader_id, epoch, voter_id=-1):
    return rpc.quorum_epoch_partition(ask(c, target, rpc.begin_quorum_epoch_request(
        None, voter_id, leader_id, epoch)))


def end_epoch(c, target, leader_id, epoch):
    return rpc.quorum_epoch_partition(ask(c, target, rpc.end_quorum_epoch_request(
        None, leader_id, epoch, [t for t in c.voters if t != leader_id])))


def fetch(c, target, replica_id, epoch, offset, last_epoch, max_wait_ms=0):
    return rpc.fetch_response_partition(ask(c, target, rpc.fetch_request(
        None, replica_id, epoch, offset, last_epoch, max_wait_ms, 1 << 20)))


def followers(c, leader):
    return [n for n in c.voters if n != leader]


def intercept(c, source, destination, kind, limit=10_000):
    """Run the cluster until `source` sends a `kind` request to `destination`; take it out
    of the queue (it is never delivered) and return it."""
    for _ in range(limit):
        message = c.take_queued(source, destination, kind)
        if message is not None:
            return message
        if not c.deliver_one():
            c.step()
    raise AssertionError(f"no {kind} from {source} to {destination}:\n{c.text()}")


def answer_with(c, request, body):
    """Deliver `body` as the answer to the intercepted `request` (same correlation id), and
    what was queued before it; what it causes stays queued."""
    answer = c.inject(request.destination, request.source, body,
                      correlation_id=request.correlation_id)
    while any(queued is answer for queued in c.queue):
        c.deliver_one()


# ============================================================================ Vote

@pytest.mark.parametrize("epoch", [INT32_MAX, RAFT_EPOCH_MAX, 2**31, 7, 2])
@pytest.mark.parametrize("pre_vote", [False, True])
def test_a_vote_for_a_non_voter_is_refused_and_nothing_changes(epoch, pre_vote):
    """Node 99, not a voter, asks for a vote at epoch 2^31-1 (and at
    other epochs, up to a plausible next one). Kafka's static quorum answers
    INCONSISTENT_VOTER_SET; no node moves, persists or grants anything, the leader stays
    and commits."""
    c, leader = running()
    for target in c.voters:
        before = election(c, target)
        answer = vote(c, target, epoch, HOSTILE, pre_vote=pre_vote)
        assert answer.error_code == E.INCONSISTENT_VOTER_SET and not answer.vote_granted
        assert election(c, target) == before
    assert c.leader() == leader
    commit(c, leader, b"after")


@pytest.mark.parametrize("epoch", [INT32_MAX, RAFT_EPOCH_MAX, 2**31, 2**63,
                                   RAFT_EPOCH_ACCEPTED_MAX + 1])
def test_a_vote_at_an_epoch_no_message_may_reach_is_refused_even_from_a_voter(epoch):
    """The same packets naming a real voter as the candidate (which a sender can always
    claim): an epoch above what one message may move a node to is refused as
    INVALID_REQUEST before anything changes, so it is never persisted."""
    c, leader = running()
    for target in c.voters:
        spoofed = next(v for v in c.voters if v != target)
        before = election(c, target)
        for pre_vote in (False, True):
            answer = vote(c, target, epoch, spoofed, pre_vote=pre_vote)
            assert answer.error_code == E.INVALID_REQUEST and not answer.vote_granted
            assert answer.leader_epoch == before[1]
        assert election(c, target) == before
    assert c.leader() == leader
    commit(c, leader, b"after")


@pytest.mark.parametrize("fields", [
    dict(candidate=-1), dict(candidate=INT32_MAX + 1), dict(last_offset=-1),
    dict(last_offset=INT64_MAX + 1), dict(last_epoch=-1), dict(last_epoch=9, epoch=9),
], ids=["negative-candidate", "candidate-past-int32", "negative-offset",
        "offset-past-int64", "negative-last-epoch", "last-epoch-not-below-epoch"])
def test_a_vote_with_a_value_out_of_range_is_invalid(fields):
    c, leader = running()
    target = followers(c, leader)[0]
    request = dict(epoch=c.core(target).epoch + 1, candidate=leader, last_epoch=0,
                   last_offset=INT64_MAX)
    request.update(fields)
    before = election(c, target)
    answer = vote(c, target, **request)
    assert answer.error_code == E.INVALID_REQUEST and not answer.vote_granted
    assert election(c, target) == before


def test_a_vote_naming_the_receiver_as_its_candidate_is_refused():
    """A node never asks itself for a vote: such a request did not come from a peer, and
    it must not move the node to a new epoch."""
    c, _ = running()
    for target in c.voters:
        before = election(c, target)
        answer = vote(c, target, before[1] + 1, target)
        assert answer.error_code == E.INVALID_REQUEST and not answer.vote_granted
        assert election(c, target) == before


def test_an_observer_refuses_votes_and_epoch_requests():
    """An observer takes part in no election (Kafka: INCONSISTENT_VOTER_SET), whoever
    asks."""
    c, leader = running(observers=(4,))
    before = election(c, 4)
    epoch = before[1] + 1
    assert vote(c, 4, epoch, leader).error_code == E.INCONSISTENT_VOTER_SET
    assert vote(c, 4, epoch, leader, pre_vote=True).error_code == E.INCONSISTENT_VOTER_SET
    assert begin_epoch(c, 4, leader, epoch).error_code == E.INCONSISTENT_VOTER_SET
    assert end_epoch(c, 4, leader, epoch).error_code == E.INCONSISTENT_VOTER_SET
    assert election(c, 4) == before
    commit(c, leader, b"after")


# ============================================================================ Begin/EndQuorumEpoch

@pytest.mark.parametrize("request_epoch", [
    lambda e: e + 1, lambda e: INT32_MAX, lambda e: RAFT_EPOCH_MAX])
def test_begin_and_end_quorum_epoch_from_a_non_voter_are_refused(request_epoch):
    c, leader = running()
    for target in c.voters:
        before = election(c, target)
        epoch = request_epoch(before[1])
        assert begin_epoch(c, target, HOSTILE, epoch).error_code == E.INCONSISTENT_VOTER_SET
        assert end_epoch(c, target, HOSTILE, epoch).error_code == E.INCONSISTENT_VOTER_SET
        assert begin_epoch(c, target, -1, epoch).error_code == E.INVALID_REQUEST
        assert election(c, target) == before
    assert c.leader() == leader
    commit(c, leader, b"after")


def test_begin_and_end_quorum_epoch_at_an_impossible_epoch_are_refused():
    """A real voter's id at epoch 2^31-1 or 2^31-2 (beyond what one message may reach), or
    at epoch 0 (which no leader ever leads: every election bumps the epoch)."""
    c, leader = running()
    target = followers(c, leader)[0]
    other = next(v for v in c.voters if v not in (leader, target))
    before = election(c, target)
    for epoch in (INT32_MAX, RAFT_EPOCH_MAX, 2**31):
        for spoofed in (leader, other):
            assert begin_epoch(c, target, spoofed, epoch).error_code == E.INVALID_REQUEST
            assert end_epoch(c, target, spoofed, epoch).error_code == E.INVALID_REQUEST
    assert election(c, target) == before

    fresh = Cluster(seed=1, **FAST)  # everyone still at epoch 0
    assert begin_epoch(fresh, 1, 2, 0).error_code == E.INVALID_REQUEST
    assert end_epoch(fresh, 1, 2, 0).error_code == E.INVALID_REQUEST
    assert fresh.core(1).leader_id is None
    assert fresh.nodes[1].election_state == ElectionState(0)


def test_a_second_leader_claimed_for_the_current_epoch_is_refused_not_fatal():
    """BeginQuorumEpoch naming another voter as leader of an epoch whose leader the node
    knows (itself included) cannot be true; it is refused, and the node goes on — a
    request must never stop a node."""
    c, leader = running()
    follower, other = followers(c, leader)
    epoch = c.core(leader).epoch
    before = election(c, follower)
    answer = begin_epoch(c, follower, other, epoch)
    assert answer.error_code == E.INVALID_REQUEST and answer.leader_id == leader
    assert election(c, follower) == before
    before = election(c, leader)
    answer = begin_epoch(c, leader, other, epoch)
    assert answer.error_code == E.INVALID_REQUEST and answer.leader_id == leader
    assert election(c, leader) == before
    commit(c, leader, b"after")


def test_epoch_requests_meant_for_another_voter_or_naming_the_receiver_are_refused():
    c, leader = running()
    follower, other = followers(c, leader)
    epoch = c.core(leader).epoch
    before = election(c, follower)
    answer = begin_epoch(c, follower, leader, epoch + 1, voter_id=other)
    assert answer.error_code == E.INVALID_VOTER_KEY
    assert begin_epoch(c, follower, follower, epoch + 1).error_code == E.INVALID_REQUEST
    assert end_epoch(c, follower, follower, epoch + 1).error_code == E.INVALID_REQUEST
    assert election(c, follower) == before


# ============================================================================ Fetch, FetchSnapshot

def test_fetch_requests_with_values_out_of_range_are_invalid_and_change_nothing():
    c, leader = running()
    core = c.core(leader)
    epoch, end = core.epoch, core.log_end_offset
    hw = core.high_watermark
    for replica_id, fetch_epoch, offset, last_epoch, error in [
            (HOSTILE, epoch, -1, 0, E.INVALID_REQUEST),
            (HOSTILE, epoch, INT64_MAX + 1, 0, E.INVALID_REQUEST),
            (HOSTILE, epoch, 0, -1, E.INVALID_REQUEST),
            (HOSTILE, epoch, 0, epoch + 1, E.INVALID_REQUEST),
            (INT32_MAX + 1, epoch, 0, 0, E.INVALID_REQUEST),
            (leader, epoch, end, epoch, E.INVALID_REQUEST),  # the leader's own id
            (HOSTILE, INT32_MAX, 0, 0, E.UNKNOWN_LEADER_EPOCH),
            (HOSTILE, -1, 0, 0, E.INVALID_REQUEST)]:
        answer = fetch(c, leader, replica_id, fetch_epoch, offset, last_epoch)
        assert answer.error_code == error, (replica_id, fetch_epoch, offset, last_epoch)
    assert core.high_watermark == hw and core.role == "leader"
    assert not core.quorum.state.observers
    commit(c, leader, b"after")


def test_a_fetch_far_past_the_log_end_is_told_where_the_log_diverges():
    c, leader = running()
    core = c.core(leader)
    answer = fetch(c, leader, HOSTILE, core.epoch, INT64_MAX, core.epoch)
    assert answer.error_code == E.NONE and answer.diverging_epoch.end_offset == \
        core.log_end_offset
    assert core.quorum.state.voters[leader].end_offset <= core.log_end_offset


def test_a_fetch_from_a_negative_replica_id_is_answered_but_not_tracked():
    """Not a replica (Kafka ignores its offsets): it gets the records, counts for nothing,
    and is not held for a long poll."""
    c, leader = running()
    core = c.core(leader)
    answer = fetch(c, leader, -1, core.epoch, 0, 0, max_wait_ms=10_000)
    assert answer.error_code == E.NONE and answer.records
    assert not core.quorum.state.observers and -1 not in core._parked
    described = rpc.describe_quorum_partition(ask(c, leader, rpc.describe_quorum_request()))
    assert [o.replica_id for o in described.observers] == []


def test_the_leader_tracks_a_bounded_number_of_observers(monkeypatch):
    """Fetchers naming ever new ids: the leader forgets the one that fetched least
    recently, so its memory does not grow with them."""
    monkeypatch.setattr(leader_module, "RAFT_OBSERVERS_MAX", 3)
    c, leader = running()
    core = c.core(leader)
    for replica_id in (100, 101, 102, 100, 103, 104):
        fetch(c, leader, replica_id, core.epoch, 0, 0)
    assert list(core.quorum.state.observers) == [100, 103, 104]
    assert RAFT_OBSERVERS_MAX >= 1000  # room for every broker of a large cluster


def test_a_fetch_snapshot_for_an_impossible_snapshot_finds_none():
    c, leader = running()
    core = c.core(leader)
    for end_offset, epoch in [(-1, 1), (INT64_MAX + 1, 1), (1, -1), (1, INT32_MAX)]:
        body = ask(c, leader, rpc.fetch_snapshot_request(
            None, HOSTILE, core.epoch, SnapshotId(end_offset, epoch), 0, 1 << 20))
        assert rpc.fetch_snapshot_partition(body).error_code == E.SNAPSHOT_NOT_FOUND


# ============================================================================ responses

def forged_fetch_answers(leader, epoch):
    """Fetch responses to a follower's Fetch that no leader could send."""
    cls = m.FetchResponse
    return {
        "epoch past int32": rpc.fetch_response(E.NONE, leader, INT32_MAX),
        "epoch past the maximum": rpc.fetch_response(E.NONE, leader, RAFT_EPOCH_MAX + 1),
        "negative epoch": rpc.fetch_response(E.NONE, leader, -2),
        "leader not a voter": rpc.fetch_response(E.NONE, HOSTILE, epoch + 1),
        "leader id below -1": rpc.fetch_response(E.NONE, -7, epoch + 1),
        "high watermark below -1": rpc.fetch_response(E.NONE, leader, epoch,
                                                      high_watermark=-5),
        "high watermark past int64": rpc.fetch_response(E.NONE, leader, epoch,
                                                        high_watermark=INT64_MAX + 1),
        "diverging epoch above the leader's": rpc.fetch_response(
            E.NONE, leader, epoch, diverging=(epoch + 1, 0)),
        "diverging at a negative offset": rpc.fetch_response(
            E.NONE, leader, epoch, diverging=(epoch, -3)),
        "snapshot epoch above the leader's": rpc.fetch_response(
            E.NONE, leader, epoch, snapshot_id=SnapshotId(1, epoch + 1)),
        "snapshot at a negative offset": rpc.fetch_response(
            E.NONE, leader, epoch, snapshot_id=SnapshotId(-5, epoch)),
        "top-level error with an impossible epoch": rpc.fetch_response(
            E.NONE, leader, INT32_MAX, top_error=E.NOT_LEADER_OR_FOLLOWER),
    } | {"diverging epoch below -1": _with_diverging(
        rpc.fetch_response(E.NONE, leader, epoch), cls.EpochEndOffset(epoch=-4, end_offset=0))}


def _with_diverging(body, value):
    body.responses[0].partitions[0].diverging_epoch = value
    return body


def test_a_response_no_peer_could_send_is_dropped_before_anything_is_done():
    """Answers to a follower's real Fetch (same correlation id, from its leader) that hold
    an impossible value anywhere: dropped whole. Before, an epoch of 2^31-1 in an answer
    was adopted and persisted."""
    c, leader = running()
    follower = followers(c, leader)[0]
    epoch = c.core(follower).epoch
    for name, body in forged_fetch_answers(leader, epoch).items():
        request = intercept(c, follower, leader, "FetchRequest")
        before = election(c, follower)
        hw, end = c.core(follower).high_watermark, c.core(follower).log_end_offset
        answer_with(c, request, body)
        assert election(c, follower) == before, name
        assert (c.core(follower).high_watermark, c.core(follower).log_end_offset) == \
            (hw, end), name
    assert c.leader() == leader
    commit(c, leader, b"after")


def test_records_above_the_leaders_epoch_are_not_kept():
    """A leader's log holds no epoch above its own: records that claim one, in an answer
    to a follower's Fetch, are taken back out before anything relies on them."""
    from kraftcore import codec

    c, leader = running()
    follower = followers(c, leader)[0]
    core = c.core(follower)
    epoch, end, hw = core.epoch, core.log_end_offset, core.high_watermark
    request = intercept(c, follower, leader, "FetchRequest")
    batch = codec.encode_batch([b"forged"], base_offset=end, leader_epoch=epoch + 5,
                               timestamp=0)
    answer_with(c, request, rpc.fetch_response(E.NONE, leader, epoch, high_watermark=end + 1,
                                               records=batch))
    assert core.log_end_offset == end and core.storage.last_fetched_epoch() <= epoch
    assert core.high_watermark == hw
    commit(c, leader, b"after")
    assert all(value != b"forged" for _, value in c.nodes[follower].sm.values)


def test_a_snapshot_chunk_past_its_size_or_of_a_changing_size_is_dropped():
    c, leader = running()
    follower = followers(c, leader)[0]
    core = c.core(follower)
    epoch = core.epoch
    request = intercept(c, follower, leader, "FetchRequest")
    answer_with(c, request, rpc.fetch_response(E.NONE, leader, epoch,
                                               snapshot_id=SnapshotId(1, epoch)))
    assert core._download is not None  # it now asks for snapshot (1, epoch)
    request = intercept(c, follower, leader, "FetchSnapshotRequest")
    answer_with(c, request, rpc.fetch_snapshot_response(
        E.NONE, leader, epoch, SnapshotId(1, epoch), size=3, position=0, data=b"12345"))
    assert core._download.size == 0
    request = intercept(c, follower, leader, "FetchSnapshotRequest")
    answer_with(c, request, rpc.fetch_snapshot_response(
        E.NONE, leader, epoch, SnapshotId(1, epoch), size=10, position=0, data=b"12345"))
    assert core._download.size == 5
    request = intercept(c, follower, leader, "FetchSnapshotRequest")
    answer_with(c, request, rpc.fetch_snapshot_response(
        E.NONE, leader, epoch, SnapshotId(1, epoch), size=5, position=5, data=b""))
    assert core._download is not None and core._download.size == 5  # not frozen short


# ============================================================================ epoch headroom

def test_one_accepted_message_leaves_the_quorum_half_the_epoch_space():
    """A message forging a voter's id at RAFT_EPOCH_ACCEPTED_MAX (the most one message can
    move a node to) is accepted — nothing tells it from that voter — but the quorum
    elects at the next epoch and commits, with 2^30 elections still ahead of it."""
    c, leader = running()
    target = followers(c, leader)[0]
    spoofed = next(v for v in c.voters if v != target)
    answer = vote(c, target, RAFT_EPOCH_ACCEPTED_MAX, spoofed, pre_vote=True,
                  last_epoch=0, last_offset=0)
    assert answer.error_code == E.NONE
    assert c.core(target).epoch == RAFT_EPOCH_ACCEPTED_MAX
    assert c.nodes[target].election_state == ElectionState(RAFT_EPOCH_ACCEPTED_MAX)
    c.run_until(lambda c: c.leader() is not None
                and c.core(c.leader()).epoch > RAFT_EPOCH_ACCEPTED_MAX)
    new = c.leader()
    commit(c, new, b"after")
    assert RAFT_EPOCH_MAX - c.core(new).epoch >= 2**30 - 3


def test_a_voter_far_behind_in_the_upper_half_climbs_to_the_quorum():
    """Above RAFT_EPOCH_ACCEPTED_MAX a request may move a node at most
    RAFT_EPOCH_REQUEST_STEP_MAX past its own epoch, and is refused beyond; an answer to its
    own request moves it up to RAFT_EPOCH_STEP_MAX. Node 3, left at epoch 5 while the others run near
    2^30 + 100, refuses their requests but climbs in two answers, and follows."""
    c = Cluster(seed=5, **FAST)
    high = RAFT_EPOCH_ACCEPTED_MAX + 100
    for n in (1, 2, 3):
        c.crash(n)
    c.nodes[1].election_state = c.nodes[2].election_state = ElectionState(high)
    c.nodes[3].election_state = ElectionState(5)
    for n in (1, 2, 3):
        c.restart(n)
    # Their requests are refused: 2^30 + 100 is more than one message may move node 3.
    answer = vote(c, 3, high, 1, pre_vote=True, last_epoch=0, last_offset=0)
    assert answer.error_code == E.INVALID_REQUEST and c.core(3).epoch == 5
    c.run_until(lambda c: c.leader() is not None and c.core(3).role == "follower"
                and c.core(3).high_watermark is not None)
    leader = c.leader()
    assert c.core(leader).epoch > high and c.core(3).epoch == c.core(leader).epoch
    # The answers to its own requests: first as far as one may move it, then all the way.
    assert_transcript(c, f"""
        3: starts unattached (epoch 5)
        3: * -> unattached (epoch {RAFT_EPOCH_ACCEPTED_MAX})
        3: * (epoch {c.core(leader).epoch}*
    """)
    commit(c, leader, b"after")


def test_a_request_past_the_step_in_the_upper_half_is_refused():
    """Anyone can send a request (forging a voter's id): above RAFT_EPOCH_ACCEPTED_MAX one
    moves a node by at most one epoch, so spending the epoch space takes 2^30 of them."""
    c = Cluster(seed=2, **FAST)
    base = RAFT_EPOCH_ACCEPTED_MAX + 10
    for n in (1, 2, 3):
        c.crash(n)
        c.nodes[n].election_state = ElectionState(base)
        c.restart(n)
    leader = c.run_until_leader()
    follower = followers(c, leader)[0]
    epoch = c.core(follower).epoch
    before = election(c, follower)
    for too_far in (epoch + RAFT_EPOCH_REQUEST_STEP_MAX + 1, epoch + RAFT_EPOCH_STEP_MAX):
        assert vote(c, follower, too_far, leader, pre_vote=True).error_code == \
            E.INVALID_REQUEST
        assert end_epoch(c, follower, leader, too_far).error_code == E.INVALID_REQUEST
        assert election(c, follower) == before
    answer = vote(c, follower, epoch + RAFT_EPOCH_REQUEST_STEP_MAX, leader, pre_vote=True)
    assert answer.error_code == E.NONE
    assert c.core(follower).epoch == epoch + RAFT_EPOCH_REQUEST_STEP_MAX


# ============================================================================ exhaustion

def _core(election_state, voters=(1, 2, 3)):
    return RaftCore(1, voters, MemoryStorage(), election_state, RaftConfig(**FAST),
                    random.Random(1), 0)


def test_a_node_whose_next_election_passes_the_last_epoch_stops_with_a_clear_error():
    """A leader of RAFT_EPOCH_MAX restarts resigned; when its election timer fires it
    needs epoch RAFT_EPOCH_MAX + 1, which kraftcore never uses: RaftEpochExhaustedError
    (a RaftStateError, so the node stops) instead of a wedged or overflowing node."""
    core = _core(ElectionState(RAFT_EPOCH_MAX, leader_id=1, voted_id=1))
    assert core.role == "resigned"
    with pytest.raises(RaftEpochExhaustedError) as raised:
        core.poll(10_000)
    assert isinstance(raised.value, RaftStateError)
    text = str(raised.value)
    assert "node 1" in text and str(RAFT_EPOCH_MAX + 1) in text and "exhausted" in text


def test_a_quorum_elects_up_to_the_last_epoch_and_then_stops():
    """Stored at RAFT_EPOCH_MAX - 1, a quorum elects once more (at RAFT_EPOCH_MAX), commits;
    when that leader is gone, the next candidacy raises RaftEpochExhaustedError."""
    c = Cluster(seed=4, **FAST)
    for n in (1, 2, 3):
        c.crash(n)
        c.nodes[n].election_state = ElectionState(RAFT_EPOCH_MAX - 1)
        c.restart(n)
    leader = c.run_until_leader()
    assert c.core(leader).epoch == RAFT_EPOCH_MAX
    commit(c, leader, b"last")
    c.crash(leader)
    with pytest.raises(RaftEpochExhaustedError):
        c.run(10_000)


def test_a_stored_epoch_past_the_last_one_is_refused_at_start():
    with pytest.raises(RaftEpochExhaustedError):
        _core(ElectionState(RAFT_EPOCH_MAX + 1))
    _core(ElectionState(RAFT_EPOCH_MAX))  # the last epoch itself may be stored


def test_the_epoch_limits_fit_int32_and_leave_headroom():
    assert RAFT_EPOCH_MAX + 1 == INT32_MAX  # int32 max is never stored: it has no successor
    assert RAFT_EPOCH_MAX - RAFT_EPOCH_ACCEPTED_MAX >= 2**30 - 2
    assert (RAFT_EPOCH_MAX - RAFT_EPOCH_ACCEPTED_MAX) // RAFT_EPOCH_STEP_MAX > 16_000
