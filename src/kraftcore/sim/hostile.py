"""A hostile sender in the simulator: requests and responses of every Raft RPC, with any
field values, injected into a running quorum at planned times
(`run_seed(..., hostile=plan)`, `python -m kraftcore.sim --hostile PLAN`).

`Hostile` owns its plan and a record of the genuine messages it may replay. What it may
send is what a static quorum without authentication faces (docs/raft.md, "Epochs and ids
from other nodes"): anyone can connect to a controller and claim any id in a request, but
a response travels only on the connection of the request it answers.

* **request** (`vote`, `pre_vote`, `begin`, `end`, `fetch`, `fetch_snapshot`, `describe`):
  sent from outside the quorum (the answer goes to `HOSTILE_ID`, which is no node), in the
  right shape or not, naming any sender: a non-voter, a negative or unknown id, an
  observer, or a real voter. A request naming a real voter carries an epoch no message may
  carry (out of range, or beyond what one message may move the target to): with a
  plausible one it would *be* that voter as far as Raft can tell, and Raft, like Kafka,
  does not survive a voter that lies about its log. None of these may change the target's
  election state.
* **push**: a pre-vote or EndQuorumEpoch naming a real voter, with no vote or leader at
  stake, at an epoch near the target's or far from it. The target moves to that epoch
  exactly when one message may move it there (`RaftCore.epoch_ceiling`), else stays.
* **replay**: a genuine message delivered earlier, again: a request (its answer lost), or a
  response to the node that asked, while that node has not restarted (the connection of
  its request still exists). What it changes, it may change.
* **response** (`vote_response`, `begin_response`, `end_response`, `fetch_response`,
  `fetch_snapshot_response`): forged. Either with a correlation id the target does not
  wait for (plausible values; ignored), or answering a request the target waits for with
  a value no peer could send (an epoch or leader out of range, a high watermark below -1,
  a diverging epoch above the leader's, a snapshot chunk past its size): dropped whole.
  Neither may change the target's election state, log end or high watermark.

The check runs right after the target's core handled the message, before the node drives
on (a timer due at that instant may change the core legitimately); a change is a
`SimViolation`. The simulator's invariants run after every event as always, and its
liveness phase, after faults and injections stop, needs a leader and a fresh commit.

A plan is a list of `[at_ms, target, what, values]`: `values` (a list, consumed in order,
0 once exhausted) fill the fields of `what`; an int is taken as it is, a string `"+d"` /
`"-d"` is relative to the target's epoch (epoch fields) or log end offset (offset fields).
Injections at or after the end of the safety phase, or at a node that is down, do
nothing. No randomness is drawn: a plan and a seed replay the identical run.
"""

import collections
import copy
import json

from kraftcore.layout import INT32_MAX, INT64_MAX
from kraftcore.limits import (RAFT_EPOCH_ACCEPTED_MAX, RAFT_EPOCH_MAX,
                              RAFT_EPOCH_REQUEST_STEP_MAX, RAFT_EPOCH_STEP_MAX,
                              SIM_HOSTILE_REPLAY_MESSAGES_MAX)
from kraftcore.protocol import messages as m
from kraftcore.types import ZERO_UUID
from kraftcore.raft import rpc
from kraftcore.raft.types import RaftMessage
from kraftcore.types import SnapshotId
from kraftcore.sim.state_machine import SimViolation

# The sender id of every injected request: no node has it, so answers to it are lost.
HOSTILE_ID = 1_000_999
# Correlation ids of forged responses the target does not wait for (cores count from 1).
UNMATCHED_CORRELATION_ID_BASE = 10**12

REQUESTS = ("vote", "pre_vote", "begin", "end", "fetch", "fetch_snapshot", "describe")
RESPONSES = ("vote_response", "begin_response", "end_response", "fetch_response",
             "fetch_snapshot_response")
KINDS = REQUESTS + ("push", "replay") + RESPONSES

# Ids no node of a simulated cluster has (nodes are 1..N).
FOREIGN_IDS = (99, -1, -2, 0, INT32_MAX, 2**31, 10**6)
# Values worth trying in any field.
EXTREME_VALUES = (0, -1, 1, INT32_MAX, INT32_MAX - 1, 2**31, -2**31, INT64_MAX, 2**63,
                  -2**63, RAFT_EPOCH_ACCEPTED_MAX, RAFT_EPOCH_ACCEPTED_MAX + 1)


class _Values:
    """The values of one injection, consumed in order (0 once exhausted)."""

    def __init__(self, values, epoch, end_offset):
        self._values = list(values)
        self._epoch = epoch
        self._end = end_offset

    def raw(self):
        value = self._values.pop(0) if self._values else 0
        if isinstance(value, str):
            return int(value)
        return value

    def _relative(self, base):
        value = self._values.pop(0) if self._values else 0
        if isinstance(value, str):
            return base + int(value)
        return value

    def epoch(self):
        return self._relative(self._epoch)

    def offset(self):
        return self._relative(self._end)

    def pick(self, choices):
        return choices[self.raw() % len(choices)]


def _election_view(core):
    return (core.role, core.epoch, core.leader_id, core.voted_id, core.quorum.last_durable)


def _log_view(core):
    return core.high_watermark, core.log_end_offset


def _reshape(body, shape):
    """A request body in another shape than the one partition of the metadata topic: no
    topic, the partition twice, another topic, another partition (shape 0: unchanged)."""
    if shape == 0 or not getattr(body, "topics", None):
        return body
    topic = body.topics[0]
    part = topic.partitions[0]
    if shape == 1:
        body.topics = []
    elif shape == 2:
        topic.partitions = [part, copy.copy(part)]
    elif shape == 3:
        for name in ("topic_name", "topic", "name"):
            if hasattr(topic, name):
                setattr(topic, name, "other-topic")
        if hasattr(topic, "topic_id"):
            topic.topic_id = ZERO_UUID
    else:
        for name in ("partition_index", "partition", "index"):
            if hasattr(part, name):
                setattr(part, name, 1)
    return body


class Hostile:
    """Injects `plan` into `sim` (a `kraftcore.sim.simulation.Simulation`); see the module
    docstring."""

    def __init__(self, sim, plan):
        self.sim = sim
        self.plan = [tuple(entry) for entry in plan]
        self.active = False
        self.recorded = collections.deque(maxlen=SIM_HOSTILE_REPLAY_MESSAGES_MAX)
        self.injected = 0
        self.refused_checks = 0
        self.pushes_adopted = 0

    def start(self):
        self.active = True
        end = self.sim.params.duration_ms
        for at_ms, target, what, values in self.plan:
            if 0 <= at_ms < end:
                self.sim.scheduler.at(at_ms, self._inject, target, what, tuple(values))

    def stop(self):
        self.active = False

    def observe(self, message):
        """A genuine message was delivered (the simulator calls this for each one)."""
        node = self.sim.nodes.get(message.destination)
        if node is not None:
            self.recorded.append((message, node.incarnation))

    # ------------------------------------------------------------------ injections

    def _inject(self, target, what, values):
        if not self.active:
            return
        sim = self.sim
        node = sim.nodes.get(target)
        now = sim.scheduler.now_ms
        if what not in KINDS:
            raise ValueError(f"unknown injection {what!r}; one of {', '.join(KINDS)}")
        if node is None or not node.up:
            sim.trace(f"{now} hostile {what} -> {target}: not running")
            return
        core = node.core
        picks = _Values(values, core.epoch, core.log_end_offset)
        self.injected += 1
        if what == "replay":
            return self._replay(picks)
        if what == "push":
            return self._push(node, picks)
        if what in RESPONSES:
            return self._respond(node, what, picks)
        message = RaftMessage(HOSTILE_ID, target, self._next_cid(), self._request(node, what,
                                                                                  picks))
        self._deliver_unchanged(node, message, f"{what} request")

    def _next_cid(self):
        return UNMATCHED_CORRELATION_ID_BASE - self.injected

    def _deliver_unchanged(self, node, message, what, log_too=False):
        """Deliver `message` to `node`; its election state (and with `log_too` its high
        watermark and log end) must stay as it was."""
        core = node.core
        sim = self.sim
        before = _election_view(core), _log_view(core) if log_too else None
        sim.trace(f"{sim.scheduler.now_ms} hostile {what} {message.source}->{node.node_id} "
                  f"{message.body!r}" if sim.tracing else
                  f"{sim.scheduler.now_ms} hostile {what} {message.source}->{node.node_id}")

        def inspect():
            self.refused_checks += 1
            after = _election_view(core), _log_view(core) if log_too else None
            if after != before:
                raise SimViolation(
                    f"node {node.node_id} at {sim.scheduler.now_ms} ms acted on a hostile "
                    f"{what} it must refuse: {before} became {after}; the message: "
                    f"{message.body!r}")

        node.deliver_inspected(message, inspect)

    # ------------------------------------------------------------------ requests

    def _epoch_for(self, node, claim, picks):
        """A request's epoch: any, unless it names a real voter (then one no message may
        carry to this node, see the module docstring)."""
        core = node.core
        if claim not in core.voters:
            return picks.epoch()
        ceiling = core.epoch_ceiling(RAFT_EPOCH_REQUEST_STEP_MAX)
        refused = (-1, -2**31, RAFT_EPOCH_MAX + 1, INT32_MAX, 2**31, 2**63,
                   ceiling + 1, RAFT_EPOCH_MAX if ceiling < RAFT_EPOCH_MAX else -5)
        return picks.pick(refused)

    def _request(self, node, what, picks):
        """A request of kind `what`. Its values, in order: the sender it names (an id as
        it is: a node of the cluster, the target itself, or any other), the epoch, the
        other fields, and last the shape (0, the default: one partition of the metadata
        topic)."""
        claim = picks.raw()
        if what in ("vote", "pre_vote"):
            epoch = self._epoch_for(node, claim, picks)
            voter_id = picks.pick((-1, node.node_id, claim, 99))
            body = rpc.vote_request(None, voter_id, epoch, claim, picks.epoch(),
                                    picks.offset(), what == "pre_vote")
        elif what == "begin":
            epoch = self._epoch_for(node, claim, picks)
            voter_id = picks.pick((-1, node.node_id, claim, 99))
            body = rpc.begin_quorum_epoch_request(None, voter_id, claim, epoch)
        elif what == "end":
            epoch = self._epoch_for(node, claim, picks)
            preferred = [picks.raw() for _ in range(picks.raw() % 4)]
            body = rpc.end_quorum_epoch_request(None, claim, epoch, preferred)
        elif what == "fetch":
            epoch = self._epoch_for(node, claim, picks)
            body = rpc.fetch_request(None, claim, epoch, picks.offset(), picks.epoch(),
                                     picks.raw(), picks.raw())
            if picks.raw() % 2:  # the replica id in the old field instead of ReplicaState
                body.replica_id, body.replica_state = claim, None
        elif what == "fetch_snapshot":
            epoch = self._epoch_for(node, claim, picks)
            body = rpc.fetch_snapshot_request(
                None, claim, epoch, SnapshotId(picks.offset(), picks.epoch()), picks.raw(),
                picks.raw())
        else:
            body = rpc.describe_quorum_request()
        return _reshape(body, picks.raw() % 5)

    # ------------------------------------------------------------------ pushes

    def _push(self, node, picks):
        """A pre-vote or EndQuorumEpoch naming another voter at epoch E: the target moves
        to E (no leader, no vote) exactly when E lies in (its epoch, its ceiling]. Values:
        the voter (a choice), whether E is one of the bounds (odd) or a plain epoch, E (a
        choice of bound, or the epoch), the message (odd: pre-vote)."""
        core = node.core
        others = sorted(v for v in core.voters if v != node.node_id)
        if not core.is_voter or not others:
            return
        sim = self.sim
        spoofed = picks.pick(others)
        local, ceiling = core.epoch, core.epoch_ceiling(RAFT_EPOCH_REQUEST_STEP_MAX)
        targets = (ceiling, ceiling + 1, RAFT_EPOCH_ACCEPTED_MAX, RAFT_EPOCH_ACCEPTED_MAX + 1,
                   local + RAFT_EPOCH_REQUEST_STEP_MAX + 1, local + RAFT_EPOCH_STEP_MAX,
                   RAFT_EPOCH_MAX, RAFT_EPOCH_MAX + 1, INT32_MAX)
        epoch = picks.pick(targets) if picks.raw() % 2 else picks.epoch()
        if picks.raw() % 2:
            body = rpc.vote_request(None, -1, epoch, spoofed, 0, 0, True)
        else:
            body = rpc.end_quorum_epoch_request(None, spoofed, epoch, others)
        message = RaftMessage(HOSTILE_ID, node.node_id, self._next_cid(), body)
        before = _election_view(core)
        adopt = local < epoch <= ceiling
        sim.trace(f"{sim.scheduler.now_ms} hostile push {type(body).__name__} epoch {epoch} "
                  f"as {spoofed} -> {node.node_id} (epoch {local}, ceiling {ceiling})")

        def inspect():
            self.refused_checks += 1
            after = _election_view(core)
            if adopt:
                self.pushes_adopted += 1
                if after[:4] != ("unattached", epoch, None, None):
                    raise SimViolation(
                        f"node {node.node_id} at {sim.scheduler.now_ms} ms should have moved "
                        f"to epoch {epoch} (its epoch {local}, ceiling {ceiling}) with no "
                        f"leader or vote; it is {after}")
            elif after != before:
                raise SimViolation(
                    f"node {node.node_id} at {sim.scheduler.now_ms} ms took epoch {epoch} "
                    f"from one message (its epoch {local}, ceiling {ceiling}): {before} "
                    f"became {after}")

        node.deliver_inspected(message, inspect)

    # ------------------------------------------------------------------ replays

    def _replay(self, picks):
        if not self.recorded:
            return
        sim = self.sim
        message, incarnation = self.recorded[-1 - picks.raw() % len(self.recorded)]
        node = sim.nodes[message.destination]
        if not node.up:
            return
        if message.body.kind == "request":
            message = RaftMessage(HOSTILE_ID, message.destination, self._next_cid(),
                                  message.body)
        elif node.incarnation != incarnation:
            return  # the connection that response belonged to is gone
        sim.trace(f"{sim.scheduler.now_ms} hostile replay {message.source}->"
                  f"{message.destination} {type(message.body).__name__} "
                  f"{message.correlation_id}")
        node.deliver(message)

    # ------------------------------------------------------------------ responses

    def _respond(self, node, what, picks):
        core = node.core
        waiting = sorted(core.requests_in_flight().items())
        if waiting and picks.raw() % 3:
            source, cid = picks.pick(waiting)
            body = self._impossible_response(node, what, source, picks)
        else:
            source = picks.pick(tuple(sorted(self.sim.nodes)) + (HOSTILE_ID,))
            cid = UNMATCHED_CORRELATION_ID_BASE + picks.raw() % 1000
            body = self._response(what, picks.raw(), picks.epoch(), picks.raw(), picks)
        message = RaftMessage(source, node.node_id, cid, body)
        self._deliver_unchanged(node, message, what, log_too=True)

    def _response(self, what, leader_id, epoch, error, picks):
        """A response of kind `what` with the given leader and epoch, the rest from
        `picks`."""
        if what == "vote_response":
            return rpc.vote_response(0, leader_id, epoch, bool(picks.raw() % 2),
                                     partition_error=error % 128)
        if what in ("begin_response", "end_response"):
            cls = (m.BeginQuorumEpochResponse if what == "begin_response"
                   else m.EndQuorumEpochResponse)
            return rpc.quorum_epoch_response(cls, 0, leader_id, epoch,
                                             partition_error=error % 128)
        if what == "fetch_response":
            return rpc.fetch_response(error % 128, leader_id, epoch,
                                      high_watermark=picks.offset())
        return rpc.fetch_snapshot_response(
            error % 128, leader_id, epoch, SnapshotId(picks.offset(), picks.epoch()),
            size=picks.raw(), position=picks.raw(), data=b"x" * (picks.raw() % 8))

    def _impossible_response(self, node, what, source, picks):
        """A response to the target's request to `source` holding a value no peer could
        send. Never one naming the target as leader: that one is a fatal inconsistency by
        design (a RaftStateError, as in Kafka), not a value out of range."""
        core = node.core
        epoch = core.epoch
        voters = sorted(core.voters)
        foreign = sorted(set(FOREIGN_IDS + tuple(self.sim.nodes)) - set(voters) - {-1})
        which = picks.raw()
        if which % 2 == 0 or what not in ("fetch_response", "fetch_snapshot_response"):
            # the leader and epoch every response carries
            if which % 4 < 2:
                bad_epoch = picks.pick((-2, -1, -2**31, RAFT_EPOCH_MAX + 1, INT32_MAX, 2**31,
                                        2**63))
                leader = picks.pick(tuple(v for v in voters if v != node.node_id) + (-1,))
                return self._response(what, leader, bad_epoch, 0, picks)
            return self._response(what, picks.pick(foreign), epoch + picks.raw() % 3, 0, picks)
        leader = source if source != node.node_id else -1
        if what == "fetch_response":
            body = rpc.fetch_response(0, leader, epoch)
            part = body.responses[0].partitions[0]
            cls = m.FetchResponse
            choice = which // 2 % 6
            if choice == 0:
                part.high_watermark = picks.pick((-2, -2**63, 2**63))
            elif choice == 1:
                part.diverging_epoch = cls.EpochEndOffset(epoch=epoch + 1 + picks.raw() % 3,
                                                          end_offset=0)
            elif choice == 2:
                part.diverging_epoch = cls.EpochEndOffset(epoch=epoch, end_offset=picks.pick(
                    (-1, -2**63, 2**63)))
            elif choice == 3:
                part.diverging_epoch = cls.EpochEndOffset(epoch=picks.pick((-2, -2**31)),
                                                          end_offset=0)
            elif choice == 4:
                part.snapshot_id = cls.SnapshotId(end_offset=1, epoch=epoch + 1)
            else:
                part.snapshot_id = cls.SnapshotId(end_offset=picks.pick((-5, 2**63)), epoch=0)
            return body
        snapshot_id = SnapshotId(1, epoch)
        choice = which // 2 % 4
        if choice == 0:
            return rpc.fetch_snapshot_response(0, leader, epoch, snapshot_id, size=3,
                                               position=0, data=b"12345")
        if choice == 1:
            return rpc.fetch_snapshot_response(0, leader, epoch, snapshot_id, size=10,
                                               position=-1, data=b"1")
        if choice == 2:
            return rpc.fetch_snapshot_response(0, leader, epoch, SnapshotId(1, epoch + 1),
                                               size=10, position=0, data=b"1")
        return rpc.fetch_snapshot_response(0, leader, epoch, SnapshotId(-3, epoch), size=10,
                                           position=0, data=b"1")


def plan_to_json(plan):
    return json.dumps([list(entry[:3]) + [list(entry[3])] for entry in plan],
                      separators=(",", ":"))


def plan_from_json(text):
    """A plan from its JSON text (`--hostile`); ValueError when it is not one."""
    try:
        plan = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--hostile is not JSON: {exc}") from None
    if not isinstance(plan, list) or not all(
            isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], int)
            and isinstance(entry[1], int) and entry[2] in KINDS and isinstance(entry[3], list)
            for entry in plan):
        raise ValueError("--hostile must be a JSON list of [at_ms, target, what, values] with "
                         f"what one of {', '.join(KINDS)}")
    return [tuple(entry) for entry in plan]
