"""One simulated node: a `RaftCore` driven exactly as the `Ready` contract says.

`SimNode` owns what survives a crash — its `MemoryStorage` and its persisted `ElectionState`
(the quorum-state file) — and what does not: the core, the queue of Readys being persisted,
the state machine and the pending poll.

Driving (kraftcore.raft.types): after every input (`handle`, `poll`, `propose`, `resign`,
`on_persisted`, `create_snapshot`) the node calls `take_ready()` until the core has nothing
more. A taken Ready goes at once to the state machine (snapshot to load, commits,
leader change) and then into the persist queue; a Ready marked `send_first` (a leader's)
sends its messages at once, before its fsync. Readys complete strictly in the order they
were taken: one that must persist something takes a simulated fsync latency once it reaches
the head of the queue; then its election state becomes the persisted one, the storage is
flushed (when the Ready has a flush offset), its messages go to the network and
`on_persisted(number)` is called. A Ready with nothing to persist completes as soon as it
reaches the head. The core is polled at the deadline `poll()` returned (one pending poll at
a time; a later deadline replaces it).

A crash drops the core, the queue (messages not sent yet never are) and the state machine,
and loses the storage's unflushed writes. A restart builds a fresh core from the storage
and the persisted election state, and a fresh state machine that the core rebuilds with a
snapshot and commits.
"""

import collections
import random

from kraftcore.errors import RaftStateError
from kraftcore.limits import SIM_READYS_PER_INPUT_MAX
from kraftcore.log import quorum_state
from kraftcore.raft.core import RaftCore
from kraftcore.sim.invariants import SimViolation
from kraftcore.sim.state_machine import StateMachine
from kraftcore.raft.memory import MemoryStorage



class SimNode:
    def __init__(self, node_id, voters, config, rng, sim):
        self.node_id = node_id
        self.voters = tuple(voters)
        self.is_voter = node_id in self.voters
        self.config = config
        # This node's stream: fsync latencies and each incarnation's core rng.
        self.rng = rng
        self.sim = sim
        self.storage = MemoryStorage()
        self.election_state = None
        self.quorum_state_file = None  # the bytes of the node's quorum-state file
        self.core = None
        self.sm = None
        self.incarnation = 0
        self.leader_change = None
        self._pending = collections.deque()
        self._head_scheduled = False
        self._poll_at = None
        self._poll_token = 0
        self.crashes = 0
        self.snapshots_created = 0
        self.snapshots_loaded = 0

    def __repr__(self):
        if self.core is None:
            return f"SimNode({self.node_id}, down, persisted={self.election_state})"
        core = self.core
        return (f"SimNode({self.node_id}, {core.role}, epoch={core.epoch}, "
                f"leader={core.leader_id}, hwm={core.high_watermark}, "
                f"leo={core.log_end_offset}, persisted={self.election_state})")

    @property
    def up(self):
        return self.core is not None

    def now_ms(self):
        return self.sim.scheduler.now_ms

    # ------------------------------------------------------------------ life cycle

    def start(self):
        """Start (or restart) the node from what its storage and quorum-state hold."""
        if self.core is not None:
            raise RuntimeError(f"node {self.node_id} is already running")
        sim = self.sim
        now = sim.scheduler.now_ms
        self.incarnation += 1
        self.leader_change = None
        self._new_incarnation()
        sim.checker.on_start(self)
        sim.trace(f"{now} start {self.node_id} inc={self.incarnation} "
                  f"state={self.election_state} log=[{self.storage.log_start_offset},"
                  f"{self.storage.log_end_offset})")
        core_rng = random.Random(self.rng.getrandbits(64))
        try:
            self.core = RaftCore(self.node_id, self.voters, self.storage, self.election_state,
                                 self.config, core_rng, now)
        except RaftStateError as exc:
            raise SimViolation(f"node {self.node_id} at {now} ms: the core refused to start: "
                               f"RaftStateError: {exc}") from exc
        sim.network.node_up(self.node_id, self.incarnation)
        self._drive()

    def _new_incarnation(self):
        """What a node rebuilds at each start, before its core exists (the workload's
        state machine)."""
        self.sm = StateMachine()

    def _drop_incarnation(self):
        """What a crash loses besides the core."""
        self.sm = None

    def crash(self):
        """Power loss: everything not persisted is gone."""
        if self.core is None:
            return
        sim = self.sim
        sim.trace(f"{sim.scheduler.now_ms} crash {self.node_id} pending={len(self._pending)}")
        self.core = None
        self._drop_incarnation()
        self._pending.clear()
        self._head_scheduled = False
        self._poll_at = None
        self._poll_token += 1
        self.crashes += 1
        self.storage.crash()
        sim.network.node_down(self.node_id)
        sim.checker.on_crash(self)
        sim.dirty.add(self)

    # ------------------------------------------------------------------ inputs

    def deliver(self, message):
        if self.core is None:
            return
        self._call("handle", message)

    def deliver_inspected(self, message, inspect):
        """`deliver`, with `inspect()` called right after the core handled `message` and
        before the node drives on (timers due now could change the core again): how the
        hostile sender (`kraftcore.sim.hostile`) checks that a message changed nothing."""
        if self.core is None:
            return
        self._call("handle", message, inspect=inspect)

    def propose(self, values, *, timestamp_ms=None):
        """Propose `values`; returns the last offset. Raises NotLeaderError."""
        offset = self._call("propose", values, timestamp_ms=timestamp_ms)
        return offset

    def resign(self):
        self._call("resign")

    def _call(self, name, *args, inspect=None, **kwargs):
        now = self.sim.scheduler.now_ms
        try:
            result = getattr(self.core, name)(*args, now, **kwargs)
        except RaftStateError as exc:
            raise SimViolation(f"node {self.node_id} at {now} ms: {name} raised "
                               f"RaftStateError: {exc}") from exc
        if inspect is not None:
            inspect()
        self._drive()
        return result

    def _on_poll(self, token):
        if token != self._poll_token or self.core is None:
            return
        self._poll_at = None
        self._drive()

    # ------------------------------------------------------------------ Readys

    def _drive(self):
        """Poll the core, take every Ready it has, complete what can complete now, and
        schedule the next poll."""
        sim = self.sim
        sim.dirty.add(self)
        now = sim.scheduler.now_ms
        core = self.core
        for _ in range(SIM_READYS_PER_INPUT_MAX):
            try:
                deadline = core.poll(now)
                ready = core.take_ready()
            except RaftStateError as exc:
                raise SimViolation(f"node {self.node_id} at {now} ms: the core raised "
                                   f"RaftStateError: {exc}") from exc
            if ready is not None:
                self._accept(ready)
            finished = self._advance_queue()
            if ready is None and not finished:
                break
        else:
            raise SimViolation(f"node {self.node_id} at {now} ms: the core produced more than "
                               f"{SIM_READYS_PER_INPUT_MAX} Readys after one input")
        if deadline is None or deadline <= now:
            # A deadline that is already due after poll(now): look again 1 ms later rather
            # than spin at this instant.
            deadline = now + 1
        if deadline != self._poll_at:
            self._poll_at = deadline
            self._poll_token += 1
            sim.scheduler.at(deadline, self._on_poll, self._poll_token)

    def _accept(self, ready):
        """A Ready was taken: the state machine gets its part now; it joins the queue."""
        sim = self.sim
        sim.checker.on_ready(self, ready)
        if sim.tracing:
            sim.trace(f"{sim.scheduler.now_ms} ready {self.node_id} {ready!r}")
        else:
            sim.trace(f"{sim.scheduler.now_ms} ready {self.node_id} {ready.number} "
                      f"{ready.high_watermark} {len(ready.messages)} {len(ready.commits)}")
        self._apply(ready)
        if ready.send_first:
            self._send(ready)  # a leader's messages go before its fsync (Ready contract)
        self._pending.append(ready)

    def _apply(self, ready):
        """The state machine's part of a Ready: the snapshot to load, the commits, the leader
        change; then a snapshot when one is due."""
        sim = self.sim
        sm = self.sm
        if ready.load_snapshot is not None:
            snapshot_id = ready.load_snapshot
            size = self.storage.snapshot_size(snapshot_id)
            if size is None:
                raise SimViolation(f"node {self.node_id} was told to load snapshot "
                                   f"{snapshot_id}, which its storage does not hold")
            sm.load_snapshot(snapshot_id, self.storage.read_snapshot(snapshot_id, 0, size))
            self.snapshots_loaded += 1
            sim.checker.on_snapshot_loaded(self, snapshot_id, sm)
        last_epoch = None
        for batch in ready.commits:
            applied = sm.apply(batch)
            sim.checker.on_commit(self, batch, applied, sm)
            last_epoch = batch.epoch
        if ready.leader_change is not None:
            self.leader_change = ready.leader_change
        if last_epoch is not None and sm.records_since_snapshot >= sim.params.snapshot_records:
            self._maybe_snapshot(last_epoch)

    def _maybe_snapshot(self, epoch):
        sm = self.sm
        latest = self.storage.latest_snapshot_id()
        if latest is not None and latest.end_offset >= sm.next_offset:
            sm.records_since_snapshot = 0
            return
        now = self.sim.scheduler.now_ms
        padding = self.sim.params.snapshot_padding_bytes
        data = sm.snapshot(epoch=epoch, timestamp=now, padding_bytes=padding)
        try:
            snapshot_id = self.core.create_snapshot(sm.next_offset, data)
        except RaftStateError as exc:
            raise SimViolation(f"node {self.node_id} at {now} ms: create_snapshot raised "
                               f"RaftStateError: {exc}") from exc
        if snapshot_id.end_offset != sm.next_offset or snapshot_id.epoch != epoch:
            raise SimViolation(f"node {self.node_id} at {now} ms: create_snapshot at offset "
                               f"{sm.next_offset} (last epoch {epoch}) returned {snapshot_id}")
        self.snapshots_created += 1
        self.sim.trace(f"{now} snapshot {self.node_id} {snapshot_id}")

    def _advance_queue(self):
        """Complete the Readys at the head that need no persistence; start the fsync of the
        first one that does. Returns whether any Ready completed."""
        finished = False
        pending = self._pending
        while pending and not self._head_scheduled:
            head = pending[0]
            if head.election_state is not None or head.flush_offset is not None:
                self._head_scheduled = True
                latency_ms = self.rng.randint(0, self.sim.params.fsync_ms_max)
                self.sim.scheduler.after(latency_ms, self._on_persist_done, self.incarnation)
                break
            pending.popleft()
            self._finish(head)
            finished = True
        return finished

    def _on_persist_done(self, incarnation):
        if incarnation != self.incarnation or self.core is None:
            return  # the node crashed while the fsync was in flight
        sim = self.sim
        head = self._pending.popleft()
        self._head_scheduled = False
        if head.election_state is not None:
            # Through the quorum-state file's bytes, as a real node stores it: what a
            # restart reads back is what Kafka's format kept.
            self.quorum_state_file = quorum_state.encode(head.election_state, data_version=1)
            self.election_state = quorum_state.decode(self.quorum_state_file)
            sim.checker.on_persisted_election(self, self.election_state)
        if head.flush_offset is not None:
            self.storage.flush()
        self._finish(head)
        self._drive()

    def _send(self, ready):
        checker = self.sim.checker
        network = self.sim.network
        for message in ready.messages:
            checker.on_send(self, message)
            network.send(message)

    def _finish(self, ready):
        """The Ready's persistence is done: send its messages (unless they went first),
        tell the core."""
        sim = self.sim
        if not ready.send_first:
            self._send(ready)
        try:
            self.core.on_persisted(ready.number)
        except RaftStateError as exc:
            raise SimViolation(f"node {self.node_id} at {sim.scheduler.now_ms} ms: "
                               f"on_persisted raised RaftStateError: {exc}") from exc
