"""`QuorumState` (kraftcore.raft.quorum) on its own: every transition from every role, as a
table of what it leads to (role, epoch, leader, vote, and whether the new election state
must be persisted) or that it is refused with `RaftStateError` and changes nothing; the
role a node starts in from its stored `ElectionState` and its log's last epoch; the rules
for observers; and the end of the epoch space."""

import pytest

from kraftcore.errors import RaftEpochExhaustedError, RaftStateError
from kraftcore.limits import RAFT_EPOCH_MAX
from kraftcore.raft.leader import LeaderState
from kraftcore.raft.quorum import QuorumState
from kraftcore.types import ElectionState

NODE = 1
VOTERS = (1, 2, 3)
OBSERVER = 4
EPOCH = 5
DEADLINE_MS = 1000
REFUSED = "refused"


def leader_state(epoch, node_id=NODE):
    # an observer's claim is built as if it were a voter: QuorumState must refuse it
    return LeaderState(epoch, node_id, set(VOTERS) | {node_id}, 0, [node_id], 0, 3000)


def start(role, node_id=NODE):
    """A QuorumState of `node_id` in `role` at EPOCH, its election state taken (persisted).
    Voters go through `initialize` and real transitions; observer roles start with 'o-'."""
    qs = QuorumState(node_id, VOTERS)
    stored = {
        "unattached": ElectionState(EPOCH),
        "voted": ElectionState(EPOCH, voted_id=2),
        "follower": ElectionState(EPOCH, leader_id=2),
        "prospective": ElectionState(EPOCH),
        "candidate": ElectionState(EPOCH, voted_id=NODE),
        "leader": ElectionState(EPOCH, voted_id=NODE),
        "resigned": ElectionState(EPOCH, voted_id=NODE),
    }[role]
    qs.initialize(stored, 0, DEADLINE_MS)
    if role == "prospective":
        qs.transition_to_prospective(DEADLINE_MS)
    if role in ("leader", "resigned"):
        qs.state.record(2, True)
        qs.transition_to_leader(leader_state(EPOCH, node_id))
    if role == "resigned":
        qs.transition_to_resigned(DEADLINE_MS, [2, 3])
    assert (qs.role, qs.epoch) == (role, EPOCH)
    qs.take_unpersisted()
    return qs


def start_observer(role):
    qs = QuorumState(OBSERVER, VOTERS)
    stored = {"unattached": ElectionState(EPOCH),
              "follower": ElectionState(EPOCH, leader_id=2)}[role]
    qs.initialize(stored, 0, DEADLINE_MS)
    assert (qs.role, qs.epoch, qs.is_voter) == (role, EPOCH, False)
    assert qs.take_unpersisted() is None
    return qs


def _win(qs):
    """Grant the other voters' votes if the role tallies any, then claim leadership."""
    if hasattr(qs.state, "record"):
        for voter in VOTERS:
            qs.state.record(voter, True)
    return qs.transition_to_leader(leader_state(qs.epoch, qs.node_id))


MOVES = {
    "unattached +1": lambda qs: qs.transition_to_unattached(EPOCH + 1, DEADLINE_MS),
    "unattached =": lambda qs: qs.transition_to_unattached(EPOCH, DEADLINE_MS),
    "unattached -1": lambda qs: qs.transition_to_unattached(EPOCH - 1, DEADLINE_MS),
    "vote 3 +1": lambda qs: qs.transition_to_voted(EPOCH + 1, 3, DEADLINE_MS),
    "vote 3 =": lambda qs: qs.transition_to_voted(EPOCH, 3, DEADLINE_MS),
    "vote 3 -1": lambda qs: qs.transition_to_voted(EPOCH - 1, 3, DEADLINE_MS),
    "follow 3 +1": lambda qs: qs.transition_to_follower(EPOCH + 1, 3, DEADLINE_MS),
    "follow 2 =": lambda qs: qs.transition_to_follower(EPOCH, 2, DEADLINE_MS),
    "follow 3 =": lambda qs: qs.transition_to_follower(EPOCH, 3, DEADLINE_MS),
    "follow 2 -1": lambda qs: qs.transition_to_follower(EPOCH - 1, 2, DEADLINE_MS),
    "follow itself +1": lambda qs: qs.transition_to_follower(EPOCH + 1, qs.node_id,
                                                             DEADLINE_MS),
    "prospective": lambda qs: qs.transition_to_prospective(DEADLINE_MS),
    "candidate": lambda qs: qs.transition_to_candidate(DEADLINE_MS),
    "leader, not won": lambda qs: qs.transition_to_leader(leader_state(qs.epoch, qs.node_id)),
    "leader, won": _win,
    "resign": lambda qs: qs.transition_to_resigned(DEADLINE_MS, [2, 3]),
    "forget leader": lambda qs: qs.forget_leader(DEADLINE_MS),
}

# What each move does from each role: (role, epoch, leader, vote, persisted) or REFUSED.
# `persisted`: the move hands a new ElectionState to the next Ready (durable roles only,
# and only when it differs from the last one handed out).
_OLDER = {"unattached -1": REFUSED, "vote 3 -1": REFUSED, "follow 2 -1": REFUSED,
          "follow itself +1": REFUSED}
_AWAY = {"unattached +1": ("unattached", 6, None, None, True),
         "unattached =": REFUSED,
         "vote 3 +1": ("voted", 6, None, 3, True),
         "follow 3 +1": ("follower", 6, 3, None, True),
         **_OLDER}
TABLE = {
    "unattached": {
        **_AWAY,
        "vote 3 =": ("voted", 5, None, 3, True),
        "follow 2 =": ("follower", 5, 2, None, True),
        "follow 3 =": ("follower", 5, 3, None, True),
        "prospective": ("prospective", 5, None, None, False),
        "candidate": ("candidate", 6, None, 1, True),
        "leader, not won": REFUSED, "leader, won": REFUSED,
        "resign": REFUSED, "forget leader": REFUSED,
    },
    "voted": {
        **_AWAY,
        "vote 3 =": REFUSED,  # one vote per epoch
        "follow 2 =": ("follower", 5, 2, 2, True),
        "follow 3 =": ("follower", 5, 3, 2, True),  # another won: the vote stays recorded
        "prospective": ("prospective", 5, None, 2, False),
        "candidate": ("candidate", 6, None, 1, True),
        "leader, not won": REFUSED, "leader, won": REFUSED,
        "resign": REFUSED, "forget leader": REFUSED,
    },
    "follower": {
        **_AWAY,
        "vote 3 =": REFUSED,  # the epoch has a leader
        "follow 2 =": ("follower", 5, 2, None, False),  # nothing new to persist
        "follow 3 =": REFUSED,  # a second leader in one epoch
        "prospective": ("prospective", 5, 2, None, False),
        "candidate": ("candidate", 6, None, 1, True),
        "leader, not won": REFUSED, "leader, won": REFUSED,
        "resign": REFUSED, "forget leader": REFUSED,
    },
    "prospective": {
        **_AWAY,
        # the pre-vote failed: back to unattached, which is what is stored already
        "unattached =": ("unattached", 5, None, None, False),
        "vote 3 =": ("voted", 5, None, 3, True),
        "follow 2 =": ("follower", 5, 2, None, True),
        "follow 3 =": ("follower", 5, 3, None, True),
        "prospective": REFUSED,
        "candidate": ("candidate", 6, None, 1, True),
        "leader, not won": REFUSED, "leader, won": REFUSED,  # a pre-vote wins nothing
        "resign": REFUSED, "forget leader": REFUSED,
    },
    "candidate": {
        **_AWAY,
        "vote 3 =": REFUSED,  # it voted for itself
        "follow 2 =": ("follower", 5, 2, 1, True),
        "follow 3 =": ("follower", 5, 3, 1, True),
        "prospective": ("prospective", 5, None, 1, False),
        "candidate": ("candidate", 6, None, 1, True),
        "leader, not won": REFUSED,
        "leader, won": ("leader", 5, 1, 1, True),
        "resign": REFUSED, "forget leader": REFUSED,
    },
    "leader": {
        **_AWAY,
        "vote 3 =": REFUSED,
        "follow 2 =": REFUSED, "follow 3 =": REFUSED,  # never a follower of its own epoch
        "prospective": REFUSED, "candidate": REFUSED,
        "leader, not won": REFUSED, "leader, won": REFUSED,
        "resign": ("resigned", 5, 1, 1, False),
        "forget leader": REFUSED,
    },
    "resigned": {
        **_AWAY,
        "vote 3 =": REFUSED,
        "follow 2 =": REFUSED, "follow 3 =": REFUSED,  # it led this epoch
        "prospective": ("prospective", 5, None, 1, False),
        "candidate": ("candidate", 6, None, 1, True),
        "leader, not won": REFUSED, "leader, won": REFUSED,
        "resign": REFUSED, "forget leader": REFUSED,
    },
}

OBSERVER_TABLE = {
    "unattached": {
        **_OLDER,
        "unattached +1": ("unattached", 6, None, None, True),
        "unattached =": REFUSED,
        "vote 3 +1": REFUSED, "vote 3 =": REFUSED,  # observers never vote
        "follow 3 +1": ("follower", 6, 3, None, True),
        "follow 2 =": ("follower", 5, 2, None, True),
        "follow 3 =": ("follower", 5, 3, None, True),
        "prospective": REFUSED, "candidate": REFUSED,
        "leader, not won": REFUSED, "leader, won": REFUSED, "resign": REFUSED,
        "forget leader": ("unattached", 5, None, None, False),
    },
    "follower": {
        **_OLDER,
        "unattached +1": ("unattached", 6, None, None, True),
        "unattached =": REFUSED,
        "vote 3 +1": REFUSED, "vote 3 =": REFUSED,
        "follow 3 +1": ("follower", 6, 3, None, True),
        "follow 2 =": ("follower", 5, 2, None, False),
        "follow 3 =": REFUSED,
        "prospective": REFUSED, "candidate": REFUSED,
        "leader, not won": REFUSED, "leader, won": REFUSED, "resign": REFUSED,
        # the leader stopped answering: look for one again, in the same epoch
        "forget leader": ("unattached", 5, None, None, True),
    },
}


def _cases(table):
    return [pytest.param(role, move, table[role][move], id=f"{role}: {move}")
            for role in table for move in MOVES]


def test_every_role_has_an_outcome_for_every_move():
    for table in (TABLE, OBSERVER_TABLE):
        for role, outcomes in table.items():
            assert set(outcomes) == set(MOVES), role


def _check(qs, move, expected):
    before, role_before = qs.state, qs.role
    if expected == REFUSED:
        with pytest.raises(RaftStateError):
            MOVES[move](qs)
        assert qs.state is before and qs.role == role_before
        assert qs.take_unpersisted() is None
        return
    role, epoch, leader_id, voted_id, persisted = expected
    entered = MOVES[move](qs)
    assert entered is qs.state
    assert (qs.role, qs.state.name, qs.epoch, qs.leader_id(), qs.state.voted_id) == (
        role, role, epoch, leader_id, voted_id)
    election = ElectionState(epoch, leader_id=leader_id, voted_id=voted_id)
    assert qs.take_unpersisted() == (election if persisted else None)
    assert qs.take_unpersisted() is None  # handed out once
    if role != "leader":
        assert qs.state.deadline_ms == DEADLINE_MS


@pytest.mark.parametrize("role, move, expected", _cases(TABLE))
def test_a_voters_transitions(role, move, expected):
    _check(start(role), move, expected)


@pytest.mark.parametrize("role, move, expected", _cases(OBSERVER_TABLE))
def test_an_observers_transitions(role, move, expected):
    _check(start_observer(role), move, expected)


def test_a_failed_pre_vote_returns_to_the_vote_it_held():
    qs = start("voted")
    qs.transition_to_prospective(DEADLINE_MS)
    qs.transition_to_unattached(EPOCH, DEADLINE_MS)
    assert (qs.role, qs.epoch, qs.state.voted_id) == ("voted", EPOCH, 2)
    assert qs.take_unpersisted() is None  # the vote is what was stored


def test_a_candidate_counts_its_candidacies_and_wins_only_with_a_majority():
    qs = start("candidate")
    assert qs.state.retries == 1 and qs.state.votes == {1: 1, 2: 0, 3: 0}
    qs.transition_to_candidate(DEADLINE_MS)
    assert (qs.epoch, qs.state.retries) == (EPOCH + 1, 2)
    qs.state.record(2, False)
    assert not qs.state.granted() and not qs.state.lost()
    with pytest.raises(RaftStateError):
        qs.transition_to_leader(leader_state(EPOCH + 1))
    qs.state.record(2, True)  # a recorded vote is not recorded again
    qs.state.record(3, False)
    assert qs.state.lost() and not qs.state.granted()
    qs.transition_to_candidate(DEADLINE_MS)
    qs.state.record(3, True)
    assert qs.state.granted() and qs.state.granting() == [1, 3]
    with pytest.raises(RaftStateError):  # a LeaderState of another epoch
        qs.transition_to_leader(leader_state(EPOCH + 3))
    assert qs.role == "candidate"
    qs.transition_to_leader(leader_state(EPOCH + 2))
    assert (qs.role, qs.epoch) == ("leader", EPOCH + 2)


# ====================================================================== initialize

VOTER_STARTS = [
    # (stored, log's last epoch) -> (role, epoch, leader, vote, persisted)
    ("never stored", None, 0, ("unattached", 0, None, None, True)),
    ("never stored, log at epoch 3", None, 3, ("unattached", 3, None, None, True)),
    ("stored epoch below the log's", ElectionState(2, leader_id=2), 3,
     ("unattached", 3, None, None, True)),
    ("stored at the log's epoch", ElectionState(3), 3, ("unattached", 3, None, None, False)),
    ("led its stored epoch", ElectionState(5, leader_id=1, voted_id=1), 3,
     ("resigned", 5, 1, 1, False)),
    ("led its stored epoch, no vote stored", ElectionState(5, leader_id=1), 3,
     ("resigned", 5, 1, 1, False)),
    ("voted for itself", ElectionState(5, voted_id=1), 3, ("candidate", 5, None, 1, False)),
    ("voted for another", ElectionState(5, voted_id=2), 3, ("voted", 5, None, 2, False)),
    ("knew a leader", ElectionState(5, leader_id=2), 3, ("follower", 5, 2, None, False)),
    ("voted for the leader", ElectionState(5, leader_id=2, voted_id=2), 3,
     ("follower", 5, 2, 2, False)),
    ("voted for itself, another won", ElectionState(5, leader_id=3, voted_id=1), 5,
     ("follower", 5, 3, 1, False)),
]

OBSERVER_STARTS = [
    ("never stored", None, 0, ("unattached", 0, None, None, True)),
    ("a former voter that led", ElectionState(5, leader_id=4, voted_id=4), 3,
     ("unattached", 5, None, None, True)),
    ("a former voter that was a candidate", ElectionState(5, voted_id=4), 3,
     ("unattached", 5, None, None, True)),
    ("knew a leader", ElectionState(5, leader_id=2), 3, ("follower", 5, 2, None, False)),
    ("a vote for another, kept", ElectionState(5, voted_id=2), 3,
     ("voted", 5, None, 2, False)),
]


def _check_start(node_id, stored, log_last_epoch, expected):
    qs = QuorumState(node_id, VOTERS)
    entered = qs.initialize(stored, log_last_epoch, DEADLINE_MS)
    role, epoch, leader_id, voted_id, persisted = expected
    assert entered is qs.state and qs.state.deadline_ms == DEADLINE_MS
    assert (qs.role, qs.epoch, qs.leader_id(), qs.state.voted_id) == (
        role, epoch, leader_id, voted_id)
    election = ElectionState(epoch, leader_id=leader_id, voted_id=voted_id)
    assert qs.take_unpersisted() == (election if persisted else None)
    return qs


@pytest.mark.parametrize("stored, log_last_epoch, expected",
                         [pytest.param(*case[1:], id=case[0]) for case in VOTER_STARTS])
def test_a_voter_starts_from_its_stored_state_and_log(stored, log_last_epoch, expected):
    qs = _check_start(NODE, stored, log_last_epoch, expected)
    if qs.role == "candidate":
        assert qs.state.retries == 1 and qs.state.votes == {1: 1, 2: 0, 3: 0}
    if qs.role == "resigned":  # it never appends in that epoch again
        with pytest.raises(RaftStateError):
            _win(qs)


@pytest.mark.parametrize("stored, log_last_epoch, expected",
                         [pytest.param(*case[1:], id=case[0]) for case in OBSERVER_STARTS])
def test_an_observer_starts_from_its_stored_state_and_log(stored, log_last_epoch, expected):
    qs = _check_start(OBSERVER, stored, log_last_epoch, expected)
    with pytest.raises(RaftStateError):
        qs.transition_to_voted(EPOCH + 1, 2, DEADLINE_MS)


# ====================================================================== the epoch space

def test_no_role_is_entered_above_the_last_epoch():
    with pytest.raises(RaftEpochExhaustedError):
        QuorumState(NODE, VOTERS).initialize(ElectionState(RAFT_EPOCH_MAX + 1), 0, DEADLINE_MS)
    qs = QuorumState(NODE, VOTERS)
    qs.initialize(ElectionState(RAFT_EPOCH_MAX, voted_id=2), 0, DEADLINE_MS)
    qs.take_unpersisted()
    before = qs.state
    for move in (lambda: qs.transition_to_candidate(DEADLINE_MS),
                 lambda: qs.transition_to_unattached(RAFT_EPOCH_MAX + 1, DEADLINE_MS),
                 lambda: qs.transition_to_follower(RAFT_EPOCH_MAX + 1, 2, DEADLINE_MS)):
        with pytest.raises(RaftEpochExhaustedError):
            move()
        assert qs.state is before and qs.take_unpersisted() is None
    qs.transition_to_follower(RAFT_EPOCH_MAX, 3, DEADLINE_MS)  # the last epoch itself is fine
    assert (qs.role, qs.epoch) == ("follower", RAFT_EPOCH_MAX)
