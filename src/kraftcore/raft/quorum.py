"""The roles of a KRaft node and `QuorumState`, the one owner of every transition between
them (kafka-facts §7.2; Kafka's `QuorumState` and its `*State` classes).

Each role is a class holding what only that role needs (its timers, its vote tally, the
leader's replica tracking lives in `kraftcore.raft.leader`). `QuorumState` checks every
transition against the rules that keep one leader per epoch and one vote per epoch:

* the epoch never goes back;
* within an epoch a node votes at most once (a Voted node keeps its vote) and follows at
  most one leader; a leader never becomes a follower of its own epoch;
* only voters become Prospective, Candidate or Leader;
* no role is entered at an epoch above `limits.RAFT_EPOCH_MAX`: the core never adopts one
  from a message, so only the node's own next election (or a stored state) can need one,
  and that raises `RaftEpochExhaustedError` — the node stops rather than store an epoch
  that could never be followed by another.

Durable roles (Unattached, Voted, Candidate, Leader, Follower) hand their `ElectionState`
to the core, which puts it first in the next `Ready`: the node acts on a vote or an epoch
only in messages sent after that state is persisted. Prospective and Resigned are
memory-only (a pre-vote promises nothing; a resigned leader's state is its leader state).
A violation raises `RaftStateError`: continuing could elect two leaders in one epoch.
"""

import collections

from kraftcore.errors import RaftEpochExhaustedError, RaftStateError
from kraftcore.limits import RAFT_EPOCH_MAX
from kraftcore.types import ElectionState

# How many role changes `QuorumState.transitions` keeps for a driver that has not read them.
TRANSITIONS_KEPT = 64

UNRECORDED, GRANTED, REJECTED = 0, 1, 2


class EpochState:
    """A role at an epoch. `deadline_ms` is the role's own timer (election or fetch
    timeout); None when the role has none."""

    name = None
    durable = True
    leader_id = None
    voted_id = None

    def __init__(self, epoch, deadline_ms=None):
        self.epoch = epoch
        self.deadline_ms = deadline_ms

    def election_state(self):
        return ElectionState(self.epoch, leader_id=self.leader_id, voted_id=self.voted_id)

    def __repr__(self):
        return (f"{type(self).__name__}(epoch={self.epoch}, leader={self.leader_id}, "
                f"voted={self.voted_id}, deadline={self.deadline_ms})")


class UnattachedState(EpochState):
    """Knows the epoch, no leader, no vote (voters wait for an election timeout)."""

    name = "unattached"


class VotedState(EpochState):
    """Voted for `voted_id` in this epoch; grants no other standard vote in it."""

    name = "voted"

    def __init__(self, epoch, voted_id, deadline_ms):
        super().__init__(epoch, deadline_ms)
        self.voted_id = voted_id


class FollowerState(EpochState):
    """Fetches from `leader_id`. `fetched` turns True at the first successful Fetch
    response: from then on it refuses pre-votes (the leader is alive, KIP-996)."""

    name = "follower"

    def __init__(self, epoch, leader_id, deadline_ms, voted_id=None):
        super().__init__(epoch, deadline_ms)
        self.leader_id = leader_id
        self.voted_id = voted_id
        self.fetched = False


class _Election(EpochState):
    """A vote tally over the voters; the local node grants itself."""

    def __init__(self, epoch, node_id, voters, deadline_ms):
        super().__init__(epoch, deadline_ms)
        self.votes = {voter: UNRECORDED for voter in voters}
        self.votes[node_id] = GRANTED
        self.majority = len(self.votes) // 2 + 1

    def record(self, voter, granted):
        if self.votes.get(voter, GRANTED) == UNRECORDED:
            self.votes[voter] = GRANTED if granted else REJECTED

    def granted(self):
        return sum(v == GRANTED for v in self.votes.values()) >= self.majority

    def lost(self):
        count = sum(v != REJECTED for v in self.votes.values())
        return count < self.majority

    def unrecorded(self):
        return [voter for voter, vote in self.votes.items() if vote == UNRECORDED]

    def granting(self):
        return sorted(voter for voter, vote in self.votes.items() if vote == GRANTED)


class ProspectiveState(_Election):
    """Running a pre-vote at the current epoch (nothing persisted). Keeps the leader and
    the vote of the state it came from, to return there if the pre-vote fails."""

    name = "prospective"
    durable = False

    def __init__(self, epoch, node_id, voters, deadline_ms, leader_id=None, voted_id=None):
        super().__init__(epoch, node_id, voters, deadline_ms)
        self.leader_id = leader_id
        self.voted_id = voted_id


class CandidateState(_Election):
    """Has bumped the epoch and voted for itself; `retries` counts consecutive
    candidacies (it sizes the backoff after a loss)."""

    name = "candidate"

    def __init__(self, epoch, node_id, voters, deadline_ms, retries):
        super().__init__(epoch, node_id, voters, deadline_ms)
        self.voted_id = node_id
        self.retries = retries
        self.backing_off = False


class ResignedState(EpochState):
    """A leader that stepped down in its epoch: it appends nothing more, grants no vote in
    this epoch, and waits for another leader or its election timeout."""

    name = "resigned"
    durable = False

    def __init__(self, epoch, node_id, deadline_ms, preferred=()):
        super().__init__(epoch, deadline_ms)
        self.leader_id = node_id
        self.voted_id = node_id
        self.preferred = list(preferred)


class QuorumState:
    """The current role of one node and the only code that changes it. `leader` (the
    `LeaderState` of `kraftcore.raft.leader`) is built by the core and handed in."""

    def __init__(self, node_id, voters):
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.is_voter = node_id in self.voters
        self.state = None
        self.role = None  # state.name, kept beside it: read once per append by a driver
        self.unpersisted = None  # ElectionState not yet handed to a Ready
        self.last_durable = None  # the last durable ElectionState handed out
        # The latest role changes, oldest first, for a driver to report (it empties it):
        # (role, epoch, leader id) before and (role, epoch, leader id, voted id) after.
        self.transitions = collections.deque(maxlen=TRANSITIONS_KEPT)

    # ---------------------------------------------------------------- queries

    @property
    def epoch(self):
        return self.state.epoch

    def leader_id(self):
        return self.state.leader_id

    # ---------------------------------------------------------------- transitions

    def _enter(self, state):
        old = self.state
        if old is not None and state.epoch < old.epoch:
            raise RaftStateError(
                f"node {self.node_id}: epoch would go back from {old.epoch} to {state.epoch}")
        if state.epoch > RAFT_EPOCH_MAX:
            raise RaftEpochExhaustedError(
                f"node {self.node_id} would become {state.name} at epoch {state.epoch}, above "
                f"the last epoch kraftcore uses ({RAFT_EPOCH_MAX}): the quorum's epochs are "
                "exhausted and it can elect no leader any more. The node stops; its committed "
                "metadata is intact: move it to a newly formatted quorum")
        if old is not None:
            self.transitions.append((old.name, old.epoch, old.leader_id, state.name,
                                     state.epoch, state.leader_id, state.voted_id))
        self.state = state
        self.role = state.name
        if state.durable:
            election = state.election_state()
            if election != self.last_durable:
                self.unpersisted = self.last_durable = election
        return state

    def _require_voter(self, role):
        if not self.is_voter:
            raise RaftStateError(f"node {self.node_id} is an observer and cannot be {role}")

    def initialize(self, stored, log_last_epoch, deadline_ms):
        """The role on startup, from the persisted election state and the log (§7.2)."""
        self.last_durable = stored
        if stored is None or stored.epoch < log_last_epoch:
            return self._enter(UnattachedState(max(log_last_epoch, 0), deadline_ms))
        epoch = stored.epoch
        if not self.is_voter and self.node_id in (stored.leader_id, stored.voted_id):
            # A former voter that now runs as an observer keeps only the epoch.
            return self._enter(UnattachedState(epoch, deadline_ms))
        if stored.leader_id == self.node_id:
            # It led this epoch before the restart: never append in it again.
            return self._enter(ResignedState(epoch, self.node_id, deadline_ms))
        if stored.voted_id == self.node_id and stored.leader_id is None:
            return self._enter(CandidateState(epoch, self.node_id, self.voters, deadline_ms, 1))
        if stored.leader_id is not None:
            return self._enter(FollowerState(epoch, stored.leader_id, deadline_ms,
                                             voted_id=stored.voted_id))
        if stored.voted_id is not None:
            return self._enter(VotedState(epoch, stored.voted_id, deadline_ms))
        return self._enter(UnattachedState(epoch, deadline_ms))

    def transition_to_unattached(self, epoch, deadline_ms):
        """A higher epoch with no known leader; or, at the same epoch, the way back from a
        failed pre-vote (keeping the vote held before it)."""
        state = self.state
        if epoch < state.epoch or (epoch == state.epoch and state.name != "prospective"):
            raise RaftStateError(f"node {self.node_id}: {state!r} cannot become Unattached "
                                 f"at epoch {epoch}")
        if epoch == state.epoch and state.voted_id is not None:
            return self._enter(VotedState(epoch, state.voted_id, deadline_ms))
        return self._enter(UnattachedState(epoch, deadline_ms))

    def transition_to_voted(self, epoch, candidate_id, deadline_ms):
        state = self.state
        self._require_voter("voting")
        if epoch < state.epoch or (epoch == state.epoch and (
                state.voted_id is not None or state.leader_id is not None)):
            raise RaftStateError(
                f"node {self.node_id}: cannot vote for {candidate_id} in epoch {epoch} "
                f"(state {state!r})")
        return self._enter(VotedState(epoch, candidate_id, deadline_ms))

    def transition_to_follower(self, epoch, leader_id, deadline_ms):
        state = self.state
        if leader_id == self.node_id:
            raise RaftStateError(f"node {self.node_id} was told it leads epoch {epoch}, "
                                 "but it never won that election")
        if epoch == state.epoch:
            if state.name == "leader":
                raise RaftStateError(f"node {self.node_id} leads epoch {epoch}, but node "
                                     f"{leader_id} claims it too")
            if state.leader_id is not None and state.leader_id != leader_id:
                raise RaftStateError(
                    f"node {self.node_id}: epoch {epoch} has leader {state.leader_id}, "
                    f"but node {leader_id} claims it too")
        voted = state.voted_id if epoch == state.epoch else None
        return self._enter(FollowerState(epoch, leader_id, deadline_ms, voted_id=voted))

    def transition_to_prospective(self, deadline_ms):
        self._require_voter("prospective")
        state = self.state
        if state.name in ("leader", "prospective"):
            raise RaftStateError(f"node {self.node_id}: {state.name} cannot start a pre-vote")
        return self._enter(ProspectiveState(
            state.epoch, self.node_id, self.voters, deadline_ms,
            leader_id=state.leader_id if state.name == "follower" else None,
            voted_id=state.voted_id))

    def transition_to_candidate(self, deadline_ms):
        self._require_voter("candidate")
        state = self.state
        if state.name == "leader":
            raise RaftStateError(f"node {self.node_id}: a leader cannot become a candidate")
        retries = state.retries + 1 if state.name == "candidate" else 1
        return self._enter(CandidateState(state.epoch + 1, self.node_id, self.voters,
                                          deadline_ms, retries))

    def transition_to_leader(self, leader_state):
        state = self.state
        if state.name != "candidate" or not state.granted() or leader_state.epoch != state.epoch:
            raise RaftStateError(f"node {self.node_id}: {state!r} has not won epoch "
                                 f"{leader_state.epoch}")
        return self._enter(leader_state)

    def transition_to_resigned(self, deadline_ms, preferred):
        state = self.state
        if state.name != "leader":
            raise RaftStateError(f"node {self.node_id}: only a leader resigns, not {state!r}")
        return self._enter(ResignedState(state.epoch, self.node_id, deadline_ms, preferred))

    def forget_leader(self, deadline_ms):
        """An observer whose leader stopped answering looks for one again (same epoch;
        observers hold no vote, so nothing can be promised twice)."""
        if self.is_voter:
            raise RaftStateError(f"node {self.node_id} is a voter: it elects, it does not "
                                 "forget its leader")
        return self._enter(UnattachedState(self.epoch, deadline_ms))

    def take_unpersisted(self):
        election, self.unpersisted = self.unpersisted, None
        return election
