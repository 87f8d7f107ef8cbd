"""`LeaderState`: what a leader tracks about the replicas that fetch from it — their end
offsets (the high watermark), fetch times (check-quorum, DescribeQuorum), which voters
acknowledged its epoch — and the rules that move the high watermark (kafka-facts §7.4,
Kafka's `LeaderState`).

High watermark: sort the voters' end offsets (the leader's own is its *durable* log end
offset, a follower's is the offset of its last valid Fetch, which it sends only after
flushing) in descending order and take the one at index `voters // 2`: the offset a
majority holds. It moves only forward, and only past `epoch_start_offset` — the
LeaderChange record that opens this epoch must be committed first (Raft thesis §3.6.2: a
leader commits entries of earlier epochs only by committing one of its own). Observers
never count.

Check-quorum: a leader that has not had a Fetch (or FetchSnapshot) from a majority of
voters, itself included, within 1.5 x fetch timeout resigns; a one-voter quorum never does.

Observers (any other replica id that fetches) are tracked for DescribeQuorum only, at most
`limits.RAFT_OBSERVERS_MAX` of them: the one that fetched least recently goes first, so
fetchers naming ever new ids cannot grow the leader's memory.
"""

from kraftcore.limits import RAFT_OBSERVERS_MAX
from kraftcore.raft.quorum import EpochState


class ReplicaState:
    __slots__ = ("replica_id", "end_offset", "last_fetch_ms", "last_caught_up_ms",
                 "previous_fetch_ms", "leader_end_at_previous_fetch", "acknowledged",
                 "begin_epoch_due_ms", "hw_sent")

    def __init__(self, replica_id, now_ms):
        self.replica_id = replica_id
        self.end_offset = -1
        self.last_fetch_ms = -1
        self.last_caught_up_ms = -1
        self.previous_fetch_ms = -1
        self.leader_end_at_previous_fetch = -1
        self.acknowledged = False
        self.begin_epoch_due_ms = now_ms
        self.hw_sent = -1

    def on_fetch(self, fetch_offset, leader_end_offset, now_ms):
        """Kafka's caught-up rule: caught up now if the fetch reaches the leader's end;
        caught up as of the previous fetch if it reaches the end the leader had then."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = now_ms
        elif fetch_offset >= self.leader_end_at_previous_fetch >= 0:
            self.last_caught_up_ms = self.previous_fetch_ms
        self.previous_fetch_ms = now_ms
        self.leader_end_at_previous_fetch = leader_end_offset
        self.last_fetch_ms = now_ms
        self.end_offset = fetch_offset


class LeaderState(EpochState):
    name = "leader"

    def __init__(self, epoch, node_id, voters, epoch_start_offset, granting, now_ms,
                 check_quorum_timeout_ms):
        super().__init__(epoch, None)
        self.leader_id = node_id
        self.voted_id = node_id
        self.node_id = node_id
        self.epoch_start_offset = epoch_start_offset
        self.granting = list(granting)
        self.voters = {voter: ReplicaState(voter, now_ms) for voter in voters}
        self.voters[node_id].acknowledged = True
        self.observers = {}
        self.majority = len(self.voters) // 2 + 1
        self._median_index = len(self.voters) // 2
        self.high_watermark = None
        self.check_quorum_timeout_ms = check_quorum_timeout_ms
        self.fetched_voters = set()
        self.check_quorum_deadline_ms = (
            None if len(self.voters) == 1 else now_ms + check_quorum_timeout_ms)

    def others(self):
        return [r for voter, r in self.voters.items() if voter != self.node_id]

    def replica(self, replica_id, now_ms):
        """The tracking entry of a fetcher: a voter's, or an observer's (made on first use;
        `observers` is kept in the order of their last fetch)."""
        state = self.voters.get(replica_id)
        if state is None:
            observers = self.observers
            state = observers.pop(replica_id, None)
            if state is None:
                if len(observers) >= RAFT_OBSERVERS_MAX:
                    del observers[next(iter(observers))]
                state = ReplicaState(replica_id, now_ms)
            observers[replica_id] = state
        return state

    def update_local_end(self, durable_end_offset, now_ms):
        local = self.voters[self.node_id]
        local.end_offset = durable_end_offset
        local.last_fetch_ms = local.last_caught_up_ms = now_ms
        return self._maybe_advance()

    def update_replica(self, replica, fetch_offset, leader_end_offset, now_ms):
        """A valid Fetch at `fetch_offset`; True if the high watermark moved."""
        replica.on_fetch(fetch_offset, leader_end_offset, now_ms)
        replica.acknowledged = True
        if replica.replica_id in self.voters:
            return self._maybe_advance()
        return False

    def _maybe_advance(self):
        offsets = sorted((r.end_offset for r in self.voters.values()), reverse=True)
        candidate = offsets[self._median_index]
        if candidate > self.epoch_start_offset and (
                self.high_watermark is None or candidate > self.high_watermark):
            self.high_watermark = candidate
            return True
        return False

    def on_voter_fetch(self, voter_id, now_ms):
        """A Fetch or FetchSnapshot from a voter: evidence for check-quorum."""
        if voter_id == self.node_id or voter_id not in self.voters:
            return
        self.fetched_voters.add(voter_id)
        if len(self.fetched_voters) >= self.majority - 1:
            self.fetched_voters.clear()
            self.check_quorum_deadline_ms = now_ms + self.check_quorum_timeout_ms

    def check_quorum_expired(self, now_ms):
        return self.check_quorum_deadline_ms is not None and now_ms >= self.check_quorum_deadline_ms

    def preferred_successors(self):
        """The other voters, most up to date first (EndQuorumEpoch's PreferredCandidates)."""
        others = self.others()
        others.sort(key=lambda r: (-r.end_offset, r.replica_id))
        return [r.replica_id for r in others]
