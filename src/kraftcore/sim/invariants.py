"""The safety invariants the simulator checks after every event, and at the end of a run.

`Checker` owns the cluster-wide memory these checks need, kept incrementally so that each
event costs a few dictionary look-ups (Kafka's `RaftEventSimulationTest` invariants,
kafka-facts §9.1, extended):

* **Single leader**: over every persisted election state and every running node's view
  (its role when leader or resigned, the leader it follows), an epoch has at most one
  leader. A node never persists two different votes in one epoch.
* **Monotonic epoch**: the epoch a node persists never decreases (crashes included), and a
  running node's in-memory epoch is at least its persisted one and never decreases. No
  node persists an epoch above `limits.RAFT_EPOCH_MAX`.
* **High watermark**: within one incarnation (between crashes) a node's high watermark never
  goes back, and it never passes the node's log end offset.
* **Majority reached the high watermark**: whenever a leader reports a new high watermark,
  a majority of *voters* hold that prefix durably (observers never count).
* **Log matching of committed data**: every committed batch a node delivers (below its high
  watermark) has the same offsets, epoch and bytes as every other node's batch there; the
  global `CommittedLog` remembers each committed batch.
* **Nothing committed is lost**: when a node becomes leader, and at the end, its snapshot and
  log cover every offset ever committed, with identical batches.
* **Same state everywhere**: every state machine has the same (count, digest) after the same
  offset; a committed value was proposed by the client and sits at one offset only.
* **Observers never vote**: no Vote request from an observer, no vote in an observer's
  election state, no observer ever in a leader or candidate role.

A violation raises `SimViolation` (defined with the state machine, which raises it too) with
what was seen, on which node, when.

Note on log matching: a node that has not caught up may hold, below the cluster's committed
offset, an uncommitted batch of an old epoch that it will truncate later (Raft §5.4); that
is legal, so only batches below the node's *own* high watermark are compared.
"""

import bisect

from kraftcore.limits import RAFT_EPOCH_MAX
from kraftcore.sim.state_machine import SimViolation, decode_snapshot

LEADER_ROLES = ("leader", "resigned")
VOTER_ONLY_ROLES = ("prospective", "candidate", "leader", "resigned")


class CommittedLog:
    """Every batch known to be committed, by base offset: `(last_offset, epoch, data)`.

    Gaps are allowed (a range may be known only through a snapshot); overlapping batches
    with different boundaries are a log-matching violation."""

    __slots__ = ("_entries", "_bases", "end_offset")

    def __init__(self):
        self._entries = {}
        self._bases = []
        # One past the last committed offset recorded.
        self.end_offset = 0

    def __len__(self):
        return len(self._entries)

    def get(self, base_offset):
        return self._entries.get(base_offset)

    def epoch_at(self, offset):
        """The epoch of the committed batch holding `offset`, None if none is recorded."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return None
        base = self._bases[i]
        last, epoch, _ = self._entries[base]
        return epoch if offset <= last else None

    def record(self, base_offset, last_offset, epoch, data, where):
        """Compare a committed batch with what is known, or remember it. Raises
        `SimViolation` naming `where` on any difference."""
        known = self._entries.get(base_offset)
        if known is not None:
            if known[0] != last_offset or known[1] != epoch or known[2] != data:
                same_shape = known[0] == last_offset and known[1] == epoch
                raise SimViolation(
                    f"log matching: {where} holds committed batch at {base_offset} as "
                    f"[{base_offset}, {last_offset}] epoch {epoch} ({len(data)} bytes) but it "
                    f"was committed as [{base_offset}, {known[0]}] epoch {known[1]} "
                    f"({len(known[2])} bytes{', different bytes' if same_shape else ''})")
            return
        bases = self._bases
        i = bisect.bisect_left(bases, base_offset)
        if i > 0:
            previous = bases[i - 1]
            if self._entries[previous][0] >= base_offset:
                raise SimViolation(
                    f"log matching: {where} holds committed batch [{base_offset}, "
                    f"{last_offset}] inside committed batch [{previous}, "
                    f"{self._entries[previous][0]}]")
        if i < len(bases) and bases[i] <= last_offset:
            raise SimViolation(
                f"log matching: {where} holds committed batch [{base_offset}, {last_offset}] "
                f"overlapping committed batch [{bases[i]}, {self._entries[bases[i]][0]}]")
        bases.insert(i, base_offset)
        self._entries[base_offset] = (last_offset, epoch, data)
        if last_offset + 1 > self.end_offset:
            self.end_offset = last_offset + 1


class _Track:
    """What the checker remembers about one node."""

    __slots__ = ("persisted_epoch", "memory_epoch", "high_watermark", "role", "role_epoch",
                 "ready_number")

    def __init__(self):
        self.persisted_epoch = -1
        self.reset_incarnation()

    def reset_incarnation(self):
        self.memory_epoch = -1
        self.high_watermark = None
        self.role = None
        self.role_epoch = None
        self.ready_number = None


class Checker:
    """Cluster-wide invariants over the nodes of one simulation (see the module docstring).

    `nodes` maps node id to an object with `node_id`, `is_voter`, `up`, `core` (when up),
    `storage`, `election_state` (the persisted one) and `now_ms()`; the simulator's
    `SimNode` is one."""

    def __init__(self, nodes, proposed=None):
        self.nodes = nodes
        self.voter_ids = tuple(sorted(n for n, node in nodes.items() if node.is_voter))
        self.majority = len(self.voter_ids) // 2 + 1
        # Values the client proposed (None: not checked).
        self.proposed = proposed
        self.committed = CommittedLog()
        # epoch -> (leader id, who said so)
        self.leaders = {}
        # (node id, epoch) -> voted id, from persisted election states
        self.votes = {}
        # state machine next offset -> (count, digest, node id)
        self.digests = {}
        # committed value -> offset
        self.value_offsets = {}
        # The highest high watermark any node ever reported.
        self.high_watermark_max = 0
        self._tracks = {node_id: _Track() for node_id in nodes}

    # ------------------------------------------------------------------ leaders and epochs

    def _claim_leader(self, epoch, leader_id, who):
        known = self.leaders.get(epoch)
        if known is None:
            self.leaders[epoch] = (leader_id, who)
        elif known[0] != leader_id:
            raise SimViolation(f"single leader: epoch {epoch} has leader {known[0]} "
                               f"({known[1]}) and leader {leader_id} ({who})")

    def on_persisted_election(self, node, state):
        """`node` made `state` durable (its quorum-state file)."""
        track = self._tracks[node.node_id]
        where = f"node {node.node_id} at {node.now_ms()} ms"
        if state.epoch < track.persisted_epoch:
            raise SimViolation(f"monotonic epoch: {where} persisted epoch {state.epoch} after "
                               f"epoch {track.persisted_epoch}")
        if state.epoch > RAFT_EPOCH_MAX:
            raise SimViolation(f"{where} persisted epoch {state.epoch}, above the last epoch "
                               f"{RAFT_EPOCH_MAX}")
        track.persisted_epoch = state.epoch
        if state.leader_id is not None:
            if state.leader_id not in self.voter_ids:
                raise SimViolation(f"{where} persisted leader {state.leader_id}, not a voter, "
                                   f"for epoch {state.epoch}")
            self._claim_leader(state.epoch, state.leader_id, f"persisted by {where}")
        if state.voted_id is not None:
            if not node.is_voter:
                raise SimViolation(f"observers never vote: observer {where} persisted a vote "
                                   f"for {state.voted_id} in epoch {state.epoch}")
            if state.voted_id not in self.voter_ids:
                raise SimViolation(f"{where} persisted a vote for {state.voted_id}, not a "
                                   f"voter, in epoch {state.epoch}")
            key = (node.node_id, state.epoch)
            previous = self.votes.setdefault(key, state.voted_id)
            if previous != state.voted_id:
                raise SimViolation(f"one vote per epoch: {where} persisted a vote for "
                                   f"{state.voted_id} in epoch {state.epoch} after voting for "
                                   f"{previous}")

    def on_send(self, node, message):
        if message.source != node.node_id:
            raise SimViolation(f"node {node.node_id} sent a message from {message.source}")
        if not node.is_voter and type(message.body).__name__ == "VoteRequest":
            raise SimViolation(f"observers never vote: observer {node.node_id} at "
                               f"{node.now_ms()} ms sent a VoteRequest to {message.destination}")

    # ------------------------------------------------------------------ incarnations

    def on_start(self, node):
        self._tracks[node.node_id].reset_incarnation()

    def on_crash(self, node):
        self._tracks[node.node_id].reset_incarnation()

    # ------------------------------------------------------------------ after each event

    def check_node(self, node):
        """The per-event checks of a running node's in-memory state."""
        core = node.core
        if core is None:
            return
        track = self._tracks[node.node_id]
        epoch = core.epoch
        role = core.role
        if epoch < track.memory_epoch:
            raise SimViolation(f"monotonic epoch: node {node.node_id} at {node.now_ms()} ms went "
                               f"from epoch {track.memory_epoch} to {epoch}")
        track.memory_epoch = epoch
        if epoch < track.persisted_epoch:
            raise SimViolation(f"monotonic epoch: node {node.node_id} at {node.now_ms()} ms is at "
                               f"epoch {epoch} below its persisted epoch {track.persisted_epoch}")
        if role in LEADER_ROLES:
            if not node.is_voter:
                raise SimViolation(f"observer {node.node_id} at {node.now_ms()} ms is {role}")
            self._claim_leader(epoch, node.node_id,
                               f"node {node.node_id} is {role} at {node.now_ms()} ms")
        elif role in VOTER_ONLY_ROLES and not node.is_voter:
            raise SimViolation(f"observers never vote: observer {node.node_id} at "
                               f"{node.now_ms()} ms is {role}")
        leader_id = core.leader_id
        if leader_id is not None:
            self._claim_leader(epoch, leader_id,
                               f"node {node.node_id} follows it at {node.now_ms()} ms")
        high_watermark = core.high_watermark
        if high_watermark is not None:
            previous = track.high_watermark
            if previous is not None and high_watermark < previous:
                raise SimViolation(f"monotonic high watermark: node {node.node_id} at "
                                   f"{node.now_ms()} ms moved it from {previous} to "
                                   f"{high_watermark}")
            log_end_offset = core.log_end_offset
            if high_watermark > log_end_offset:
                raise SimViolation(f"node {node.node_id} at {node.now_ms()} ms has high "
                                   f"watermark {high_watermark} past its log end offset "
                                   f"{log_end_offset}")
            track.high_watermark = high_watermark
            if high_watermark > self.high_watermark_max:
                self.high_watermark_max = high_watermark
        if role == "leader" and (track.role != "leader" or track.role_epoch != epoch):
            self.check_leader_log(node)
        track.role = role
        track.role_epoch = epoch

    # ------------------------------------------------------------------ readys and commits

    def on_ready(self, node, ready):
        """A Ready was taken from `node`'s core (before any of it is acted on)."""
        track = self._tracks[node.node_id]
        if track.ready_number is not None and ready.number <= track.ready_number:
            raise SimViolation(f"node {node.node_id}: Ready {ready.number} after Ready "
                               f"{track.ready_number}")
        track.ready_number = ready.number
        high_watermark = ready.high_watermark
        if high_watermark is not None and node.core.role == "leader":
            self.check_majority_reached(node, high_watermark)
        if ready.commits:
            limit = node.core.high_watermark
            last = ready.commits[-1].last_offset
            if limit is None or last >= limit:
                raise SimViolation(f"node {node.node_id} at {node.now_ms()} ms delivered a "
                                   f"commit up to offset {last} with high watermark {limit}")

    def check_majority_reached(self, node, high_watermark):
        """Kafka's MajorityReachedHighWatermark, over durable log ends of voters only."""
        holders = []
        for voter_id in self.voter_ids:
            storage = self.nodes[voter_id].storage
            if min(storage.log_end_offset, storage.durable_end_offset) >= high_watermark:
                holders.append(voter_id)
        if len(holders) < self.majority:
            ends = {v: (self.nodes[v].storage.log_end_offset,
                        self.nodes[v].storage.durable_end_offset) for v in self.voter_ids}
            raise SimViolation(
                f"majority reached high watermark: leader {node.node_id} at {node.now_ms()} ms "
                f"reported high watermark {high_watermark} but only voters {holders} hold it "
                f"durably (voter: (log end, durable end) = {ends})")

    def on_commit(self, node, batch, applied, state_machine):
        """`node`'s state machine applied committed `batch`, whose data records were
        `applied` = [(offset, value)]."""
        self.record_commit(node, batch)
        if applied:
            value_offsets = self.value_offsets
            proposed = self.proposed
            for offset, value in applied:
                known = value_offsets.setdefault(value, offset)
                if known != offset:
                    raise SimViolation(f"node {node.node_id} applied value {value!r} at offset "
                                       f"{offset}; it was committed at offset {known}")
                if proposed is not None and value not in proposed:
                    raise SimViolation(f"node {node.node_id} applied value {value!r} at offset "
                                       f"{offset} that nobody proposed")
        self._check_digest(node, state_machine)

    def record_commit(self, node, batch):
        """Log matching: `node` delivered committed `batch`."""
        self.committed.record(batch.base_offset, batch.last_offset, batch.epoch, batch.data,
                              f"node {node.node_id} at {node.now_ms()} ms")

    def on_snapshot_loaded(self, node, snapshot_id, state_machine):
        epoch = self.committed.epoch_at(snapshot_id.end_offset - 1)
        if epoch is not None and epoch != snapshot_id.epoch:
            raise SimViolation(f"node {node.node_id} loaded snapshot {snapshot_id} but offset "
                               f"{snapshot_id.end_offset - 1} was committed in epoch {epoch}")
        if snapshot_id.end_offset > self.high_watermark_max:
            raise SimViolation(f"node {node.node_id} loaded snapshot {snapshot_id} beyond every "
                               f"high watermark seen ({self.high_watermark_max})")
        self._check_digest(node, state_machine)

    def _check_digest(self, node, state_machine):
        key = state_machine.next_offset
        known = self.digests.get(key)
        if known is None:
            self.digests[key] = (state_machine.count, state_machine.digest, node.node_id)
        elif known[0] != state_machine.count or known[1] != state_machine.digest:
            raise SimViolation(
                f"state machines differ: node {node.node_id} at offset {key} has count "
                f"{state_machine.count} digest {state_machine.digest:#010x}; node {known[2]} "
                f"had count {known[0]} digest {known[1]:#010x}")

    # ------------------------------------------------------------------ whole logs

    def check_leader_log(self, node):
        """Nothing committed is lost: `node`'s snapshot and log cover every offset ever
        committed, and the batches there are the committed ones."""
        storage = node.storage
        where = f"leader {node.node_id} at {node.now_ms()} ms"
        needed = max(self.committed.end_offset, self.high_watermark_max)
        if storage.log_end_offset < needed:
            raise SimViolation(f"committed data lost: {where} has log end offset "
                               f"{storage.log_end_offset} but offsets below {needed} were "
                               "committed")
        start = storage.log_start_offset
        if start > 0:
            snapshot = storage.latest_snapshot_id()
            if snapshot is None or snapshot.end_offset < start:
                raise SimViolation(f"committed data lost: {where} has log start offset {start} "
                                   f"and latest snapshot {snapshot}")
        self.check_log_prefix(node, needed, where)

    def check_log_prefix(self, node, end_offset, where):
        """Every batch of `node`'s log below `end_offset` matches the committed log."""
        committed = self.committed
        start = node.storage.log_start_offset
        expected = None
        for base, last, epoch, _control, data in node.storage.batches():
            if base >= end_offset:
                break
            if last < start:
                continue
            if expected is not None and base != expected:
                raise SimViolation(f"{where}: log has a gap or overlap at {base} (expected "
                                   f"{expected})")
            expected = last + 1
            if last >= end_offset:
                # A batch straddling the committed end is not committed as a whole.
                break
            committed.record(base, last, epoch, data, where)

    def check_snapshots(self, node):
        """Kafka's SnapshotAtLogStart, and every stored snapshot holds the state every state
        machine had at its end offset."""
        storage = node.storage
        ids = storage.snapshot_ids()
        start = storage.log_start_offset
        if start > 0 and not any(s.end_offset == start for s in ids):
            raise SimViolation(f"node {node.node_id}: log start offset {start} is not the end "
                               f"of a stored snapshot ({ids})")
        for snapshot_id in ids:
            self.check_snapshot_state(node, snapshot_id, storage.snapshot_bytes(snapshot_id))
            epoch = self.committed.epoch_at(snapshot_id.end_offset - 1)
            if epoch is not None and epoch != snapshot_id.epoch:
                raise SimViolation(f"node {node.node_id}: snapshot {snapshot_id} but offset "
                                   f"{snapshot_id.end_offset - 1} was committed in epoch {epoch}")

    def check_snapshot_state(self, node, snapshot_id, data):
        """A stored snapshot holds the state every state machine had at its end offset."""
        state = decode_snapshot(data)
        known = self.digests.get(snapshot_id.end_offset)
        if state[0] != snapshot_id.end_offset or (
                known is not None and (known[0], known[1]) != (state[1], state[2])):
            raise SimViolation(f"node {node.node_id}: snapshot {snapshot_id} holds state "
                               f"{state}; state machines had {known} there")

    def final_check(self):
        """End of run: every running node's log below its high watermark is the committed
        log, its snapshots hold the committed state, and every running leader holds
        everything committed."""
        for node in self.nodes.values():
            core = node.core
            if core is None:
                continue
            self.check_snapshots(node)
            if core.high_watermark is not None:
                self.check_log_prefix(node, core.high_watermark,
                                      f"node {node.node_id} at the end")
            if core.role == "leader":
                self.check_leader_log(node)
