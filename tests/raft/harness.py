"""A small, deterministic, hand-driven cluster of `RaftCore`s for scenario tests.

Nothing happens unless the test says so:

* time moves only in `advance(ms)` / `run(ms)` / `run_until(...)`; a node is polled exactly
  at the deadline its last `poll()` returned (earliest first, ties by node id);
* messages wait in one FIFO queue and are delivered, with zero latency, only by
  `deliver()` (everything, until the queue is empty), `deliver_one()`, or by `run(...)`,
  which delivers after every timer. A message on a blocked link, or to or from a node that
  is down, is dropped when its turn comes; one to an id outside the cluster (the answer to
  a request `inject`ed from a made-up sender) is kept in `outside`;
* every `Ready` is drained exactly as `kraftcore.raft.types` says: persist the election
  state, `storage.flush()`, then queue the messages, then `on_persisted(number)`; the
  state machine gets `load_snapshot` and `commits` as soon as the Ready is taken.

Every event goes into `cluster.transcript` as one short line (`t=1500 1: unattached ->
prospective (epoch 0)`, `1 -> 2 Vote(pre, epoch=0, last_epoch=0, leo=0)`, ...): messages
are written when they are *delivered* (`a -x b ...` when dropped), so the transcript reads
as a sequence of inputs, each followed by what it changed. `assert_transcript` checks that
given lines appear in order (a subsequence), so a test reads like a transcript but
tolerates unrelated lines.
"""

import collections
import json
import random
import re
import struct
import textwrap

from kraftcore import codec
from kraftcore.errors import NotLeaderError
from kraftcore.raft.control import decode_control_record
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.raft import RaftConfig, RaftCore
from kraftcore.raft.types import RaftMessage
from kraftcore.raft.memory import MemoryStorage

# A loop guard: this many deliveries in one deliver() means something is spinning.
DELIVERIES_MAX = 100_000
READYS_MAX = 1_000
_BATCH_HEADER = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23


# ============================================================================ formatting
# One function per message kind; each returns the text after "src -> dst ".

def _error_name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _id(value):
    return "-" if value is None or value < 0 else str(value)


def _batch_ranges(data):
    """(first offset, last offset) of the v2 batches in `data`, from their headers."""
    if not data:
        return None
    data = bytes(data)
    pos, first, last = 0, None, None
    while pos + 27 <= len(data):
        base, length = _BATCH_HEADER.unpack_from(data, pos)
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(data, pos + 23)
        first = base if first is None else first
        last = base + delta
        pos += length + 12
    return first, last


def fmt_vote_request(body, request=None):
    part = body.topics[0].partitions[0]
    kind = "pre, " if part.pre_vote else ""
    return (f"Vote({kind}epoch={part.replica_epoch}, last_epoch={part.last_offset_epoch}, "
            f"leo={part.last_offset})")


def fmt_vote_response(body, request=None):
    part = body.topics[0].partitions[0]
    pre = request is not None and request.topics[0].partitions[0].pre_vote
    name = "Vote(pre)" if pre else "Vote"
    error = body.error_code or part.error_code
    leader = f", leader {part.leader_id}" if part.leader_id >= 0 else ""
    if error:
        return f"{name} {_error_name(error)} (epoch {part.leader_epoch}{leader})"
    verdict = "granted" if part.vote_granted else "refused"
    return f"{name} {verdict} (epoch {part.leader_epoch}{leader})"


def fmt_begin_quorum_epoch_request(body, request=None):
    part = body.topics[0].partitions[0]
    return f"BeginQuorumEpoch(epoch={part.leader_epoch}, leader={part.leader_id})"


def fmt_end_quorum_epoch_request(body, request=None):
    part = body.topics[0].partitions[0]
    preferred = [c.candidate_id for c in part.preferred_candidates or ()] or list(
        part.preferred_successors or ())
    return (f"EndQuorumEpoch(epoch={part.leader_epoch}, leader={part.leader_id}, "
            f"preferred={preferred})")


def _fmt_quorum_epoch_response(name, body):
    part = body.topics[0].partitions[0]
    error = body.error_code or part.error_code
    verdict = _error_name(error) if error else "ok"
    leader = f", leader {part.leader_id}" if part.leader_id >= 0 else ""
    return f"{name} {verdict} (epoch {part.leader_epoch}{leader})"


def fmt_begin_quorum_epoch_response(body, request=None):
    return _fmt_quorum_epoch_response("BeginQuorumEpoch", body)


def fmt_end_quorum_epoch_response(body, request=None):
    return _fmt_quorum_epoch_response("EndQuorumEpoch", body)


def fmt_fetch_request(body, request=None):
    part = body.topics[0].partitions[0]
    return f"Fetch(offset={part.fetch_offset}, last_epoch={part.last_fetched_epoch})"


def fmt_fetch_response(body, request=None):
    if body.error_code:
        return f"Fetch: {_error_name(body.error_code)}"
    part = body.responses[0].partitions[0]
    hw = _id(part.high_watermark)
    leader = part.current_leader
    if part.error_code:
        return (f"Fetch: {_error_name(part.error_code)} (epoch {leader.leader_epoch}, "
                f"leader {_id(leader.leader_id)})")
    if part.diverging_epoch is not None and part.diverging_epoch.epoch >= 0:
        d = part.diverging_epoch
        return f"Fetch: diverging (epoch {d.epoch}, end offset {d.end_offset}), hw={hw}"
    if part.snapshot_id is not None and part.snapshot_id.end_offset >= 0:
        s = part.snapshot_id
        return f"Fetch: snapshot (end offset {s.end_offset}, epoch {s.epoch}), hw={hw}"
    span = _batch_ranges(part.records)
    if span is None:
        return f"Fetch: empty, hw={hw}"
    return f"Fetch: records {span[0]}..{span[1]}, hw={hw}"


def fmt_fetch_snapshot_request(body, request=None):
    part = body.topics[0].partitions[0]
    s = part.snapshot_id
    return (f"FetchSnapshot(snapshot=(end offset {s.end_offset}, epoch {s.epoch}), "
            f"position={part.position})")


def fmt_fetch_snapshot_response(body, request=None):
    if body.error_code:
        return f"FetchSnapshot: {_error_name(body.error_code)}"
    part = body.topics[0].partitions[0]
    if part.error_code:
        return f"FetchSnapshot: {_error_name(part.error_code)}"
    data = part.unaligned_records or b""
    return (f"FetchSnapshot: bytes [{part.position}, {part.position + len(data)}) "
            f"of {part.size}")


def fmt_other(body, request=None):
    return type(body).__name__


_FORMATTERS = {
    "VoteRequest": fmt_vote_request,
    "VoteResponse": fmt_vote_response,
    "BeginQuorumEpochRequest": fmt_begin_quorum_epoch_request,
    "BeginQuorumEpochResponse": fmt_begin_quorum_epoch_response,
    "EndQuorumEpochRequest": fmt_end_quorum_epoch_request,
    "EndQuorumEpochResponse": fmt_end_quorum_epoch_response,
    "FetchRequest": fmt_fetch_request,
    "FetchResponse": fmt_fetch_response,
    "FetchSnapshotRequest": fmt_fetch_snapshot_request,
    "FetchSnapshotResponse": fmt_fetch_snapshot_response,
}


def format_message(body, request=None):
    try:
        return _FORMATTERS.get(type(body).__name__, fmt_other)(body, request)
    except (AttributeError, IndexError, TypeError):  # a hand-made body of another shape
        return fmt_other(body, request)


def fmt_election_state(state):
    parts = [f"epoch {state.epoch}"]
    if state.leader_id is not None:
        parts.append(f"leader {state.leader_id}")
    if state.voted_id is not None:
        parts.append(f"voted {state.voted_id}")
    return ", ".join(parts)


def fmt_role(core):
    extra = ""
    if core.role == "follower":
        extra = f", leader {core.leader_id}"
    elif core.role == "voted":
        extra = f", voted {core.voted_id}"
    return core.role, f"(epoch {core.epoch}{extra})"


def _batch_kind(batch):
    if not batch.control:
        return ""
    names = []
    for decoded in codec.decode_batches(batch.data):
        for record in decoded.records:
            names.append(decode_control_record(record.key, record.value)[1])
    return ", " + "+".join(names)


# ============================================================================ nodes

class TracingStorage(MemoryStorage):
    """MemoryStorage that reports the log changes worth a transcript line."""

    __slots__ = ("trace",)

    def __init__(self, trace):
        super().__init__()
        self.trace = trace

    def append_as_leader(self, batch, epoch):
        base, last = super().append_as_leader(batch, epoch)
        stored = self._batches[-1]
        self.trace(f"append {base}..{last} (epoch {epoch}{_batch_kind(stored)})")
        return base, last

    def truncate_to(self, offset):
        before = self.log_end_offset
        super().truncate_to(offset)
        if self.log_end_offset < before:
            self.trace(f"truncate to {self.log_end_offset} (was {before})")

    def truncate_fully_and_start_at(self, snapshot_id):
        super().truncate_fully_and_start_at(snapshot_id)
        self.trace(f"log restarts empty at {snapshot_id.end_offset} (snapshot epoch "
                   f"{snapshot_id.epoch})")

    def advance_log_start_offset(self, snapshot_id):
        super().advance_log_start_offset(snapshot_id)
        self.trace(f"log start -> {self.log_start_offset}")

    def write_snapshot(self, snapshot_id, data):
        result = super().write_snapshot(snapshot_id, data)
        self.trace(f"snapshot written (end offset {snapshot_id.end_offset}, epoch "
                   f"{snapshot_id.epoch}, {len(data)} bytes)")
        return result


class StateMachine:
    """Applies committed batches in offset order; remembers every data record value.
    Its snapshot is JSON: the next offset and every (offset, value hex)."""

    def __init__(self):
        self.next_offset = 0
        self.values = []  # (offset, bytes)
        self.loaded = []  # SnapshotIds loaded, in order

    def load_snapshot(self, snapshot_id, data):
        doc = json.loads(data)
        if doc["next_offset"] != snapshot_id.end_offset:
            raise AssertionError(f"snapshot {snapshot_id} holds state up to "
                                 f"{doc['next_offset']}")
        self.next_offset = doc["next_offset"]
        self.values = [(offset, bytes.fromhex(value)) for offset, value in doc["values"]]
        self.loaded.append(snapshot_id)

    def apply(self, batch):
        if batch.last_offset < self.next_offset:
            return
        if batch.base_offset != self.next_offset:
            raise AssertionError(f"commit gap: batch {batch.base_offset}..{batch.last_offset} "
                                 f"after {self.next_offset}")
        if not batch.control:
            for decoded in codec.decode_batches(batch.data):
                for record in decoded.records:
                    self.values.append((record.offset, record.value))
        self.next_offset = batch.last_offset + 1

    def snapshot_bytes(self):
        return json.dumps({"next_offset": self.next_offset,
                           "values": [[o, v.hex()] for o, v in self.values]}).encode()


class Node:
    def __init__(self, node_id, cluster):
        self.id = node_id
        self.storage = TracingStorage(lambda text: cluster._storage_event(self, text))
        self.election_state = None  # the persisted quorum-state
        self.core = None
        self.sm = None
        self.deadline = None
        self.incarnation = 0
        self.seen = None  # (role, epoch, leader, voted) last written to the transcript
        self.seen_hw = None

    @property
    def up(self):
        return self.core is not None

    def __repr__(self):
        return f"Node({self.id}, {self.core!r}, persisted={self.election_state})"


# ============================================================================ cluster

class Cluster:
    def __init__(self, voters=(1, 2, 3), observers=(), seed=0, **config):
        self.voters = tuple(voters)
        self.observers = tuple(observers)
        self.seed = seed
        self.config = RaftConfig(**config)
        self.now = 0
        self.transcript = []  # (t, text)
        self.queue = collections.deque()  # RaftMessage, FIFO
        self.blocked = set()  # (source, destination)
        self._requests = {}  # (source, destination, correlation id) -> request body
        self.last_request = {}  # (source, destination) -> the last request queued
        self._injected_cid = 1_000_000
        self.outside = []  # messages delivered to ids outside the cluster, in order
        self.leaders = {}  # epoch -> leader id, every leader ever seen
        self.nodes = {n: Node(n, self) for n in self.voters + self.observers}
        for node in self.nodes.values():
            self._start(node)

    # ------------------------------------------------------------------ queries

    def core(self, node_id):
        return self.nodes[node_id].core

    def leader(self):
        """The id of the one running leader, or None."""
        leaders = [n.id for n in self.nodes.values() if n.up and n.core.role == "leader"]
        assert len(leaders) <= 1, f"several running leaders: {leaders}"
        return leaders[0] if leaders else None

    def roles(self):
        return {n.id: (n.core.role if n.up else "down") for n in self.nodes.values()}

    def epochs(self):
        return {n.id: n.core.epoch for n in self.nodes.values() if n.up}

    def log_of(self, node_id):
        """The node's stored batches as (base, last, epoch, control, bytes) tuples."""
        return [tuple(b) for b in self.nodes[node_id].storage.batches()]

    # ------------------------------------------------------------------ transcript

    def log(self, text):
        self.transcript.append((self.now, text))

    def lines(self):
        return [f"t={t} {text}" for t, text in self.transcript]

    def text(self):
        return "\n".join(self.lines())

    # ------------------------------------------------------------------ driving a node

    def _start(self, node):
        node.incarnation += 1
        rng = random.Random(self.seed * 1_000_003 + node.id * 1_009 + node.incarnation)
        node.sm = StateMachine()
        node.seen = node.seen_hw = None
        node.core = RaftCore(node.id, self.voters, node.storage, node.election_state,
                             self.config, rng, self.now)
        self._note_state(node)
        self._drive(node)

    def _note_state(self, node):
        core = node.core
        seen = (core.role, core.epoch, core.leader_id, core.voted_id)
        if seen != node.seen:
            role, detail = fmt_role(core)
            if node.seen is None:
                self.log(f"{node.id}: starts {role} {detail}")
            else:
                self.log(f"{node.id}: {node.seen[0]} -> {role} {detail}")
            node.seen = seen
            if core.role == "leader":
                other = self.leaders.setdefault(core.epoch, node.id)
                assert other == node.id, (
                    f"two leaders in epoch {core.epoch}: {other} and {node.id}\n{self.text()}")
        hw = core.high_watermark
        if hw != node.seen_hw:
            if hw is not None:
                self.log(f"{node.id}: hw {hw}")
            node.seen_hw = hw

    def _storage_event(self, node, text):
        if node.core is not None:
            self._note_state(node)  # a role change that led to it comes first
        self.log(f"{node.id}: {text}")

    def _drive(self, node):
        """Poll the node and drain its Readys per the contract in kraftcore.raft.types."""
        core = node.core
        for _ in range(READYS_MAX):
            deadline = core.poll(self.now)
            self._note_state(node)
            ready = core.take_ready()
            if ready is None:
                break
            self._apply(node, ready)
            if ready.election_state is not None:
                node.election_state = ready.election_state
                self.log(f"{node.id}: persist quorum-state "
                         f"({fmt_election_state(ready.election_state)})")
            if ready.flush_offset is not None:
                node.storage.flush()
            for message in ready.messages:
                self._queue(message)
            core.on_persisted(ready.number)
            self._note_state(node)
        else:
            raise AssertionError(f"node {node.id} produced more than {READYS_MAX} Readys")
        node.deadline = deadline if deadline > self.now else self.now + 1

    def _apply(self, node, ready):
        sm = node.sm
        if ready.load_snapshot is not None:
            snapshot_id = ready.load_snapshot
            sm.load_snapshot(snapshot_id, node.storage.snapshot_bytes(snapshot_id))
            self.log(f"{node.id}: load snapshot (end offset {snapshot_id.end_offset}, "
                     f"epoch {snapshot_id.epoch})")
        if ready.commits:
            for batch in ready.commits:
                sm.apply(batch)
            self.log(f"{node.id}: apply {ready.commits[0].base_offset}.."
                     f"{ready.commits[-1].last_offset}")

    def _queue(self, message):
        if type(message.body).__name__.endswith("Request"):
            self._requests[(message.source, message.destination, message.correlation_id)] = \
                message.body
            self.last_request[(message.source, message.destination)] = message
        self.queue.append(message)

    # ------------------------------------------------------------------ the network

    def _describe(self, message):
        request = self._requests.get(
            (message.destination, message.source, message.correlation_id))
        return format_message(message.body, request)

    def deliver_one(self):
        """Deliver (or drop) the message at the head of the queue; False if it was empty."""
        if not self.queue:
            return False
        message = self.queue.popleft()
        src, dst = message.source, message.destination
        text = self._describe(message)
        if dst not in self.nodes:
            self.log(f"{src} -> {dst} {text} (outside the cluster)")
            self.outside.append(message)
            return True
        if (src, dst) in self.blocked:
            self.log(f"{src} -x {dst} {text} (dropped: link blocked)")
            return True
        node = self.nodes[dst]
        if not node.up:
            self.log(f"{src} -x {dst} {text} (dropped: {dst} is down)")
            return True
        self.log(f"{src} -> {dst} {text}")
        node.core.handle(message, self.now)
        self._drive(node)
        return True

    def deliver(self):
        """Deliver everything, including what the deliveries send, until the queue is
        empty."""
        for _ in range(DELIVERIES_MAX):
            if not self.deliver_one():
                return
        raise AssertionError(f"still delivering after {DELIVERIES_MAX} messages")

    def inject(self, source, destination, body, correlation_id=None):
        """Queue a hand-made message (a request from a fake peer, or a forged response:
        pass the correlation id of the request it answers)."""
        if correlation_id is None:
            self._injected_cid += 1
            correlation_id = self._injected_cid
        message = RaftMessage(source, destination, correlation_id, body)
        self._queue(message)
        return message

    def take_queued(self, source, destination, kind):
        """Remove and return the first queued message src -> dst whose body is `kind`
        (a class name such as "FetchRequest"); None if there is none."""
        for message in self.queue:
            if (message.source, message.destination) == (source, destination) and \
                    type(message.body).__name__ == kind:
                self.queue.remove(message)
                return message
        return None

    def partition(self, *groups):
        """Only nodes in the same group talk; every node not named forms one more group."""
        groups = [set(g) for g in groups]
        rest = set(self.nodes) - set().union(*groups)
        if rest:
            groups.append(rest)
        self.blocked = {(a, b) for a in self.nodes for b in self.nodes
                        if a != b and not any(a in g and b in g for g in groups)}
        self.log("partition " + " | ".join(
            "{" + ",".join(map(str, sorted(g))) + "}" for g in groups))

    def isolate(self, node_id):
        self.partition({node_id})

    def block(self, source, destination):
        """Drop messages one way only."""
        self.blocked.add((source, destination))
        self.log(f"block {source} -> {destination}")

    def heal(self):
        self.blocked = set()
        self.log("heal")

    # ------------------------------------------------------------------ time

    def advance(self, ms, deliver=False):
        """Move the clock `ms` forward, polling each node at its deadline (earliest first).
        With `deliver`, the network delivers everything after every timer."""
        target = self.now + ms
        while True:
            if deliver:
                self.deliver()
            due = [(n.deadline, n.id) for n in self.nodes.values()
                   if n.up and n.deadline <= target]
            if not due:
                break
            deadline, node_id = min(due)
            self.now = max(self.now, deadline)
            self._drive(self.nodes[node_id])
        self.now = target

    def step(self):
        """Jump to the earliest deadline and poll that node (nothing is delivered);
        returns the node id."""
        deadline, node_id = min((n.deadline, n.id) for n in self.nodes.values() if n.up)
        self.now = max(self.now, deadline)
        self._drive(self.nodes[node_id])
        return node_id

    def run(self, ms):
        """`advance(ms)` with instant delivery: the cluster runs freely for `ms`."""
        self.advance(ms, deliver=True)

    def run_until(self, predicate, timeout_ms=60_000):
        """Run (instant delivery) until `predicate(cluster)` holds, stopping at the first
        moment it does; AssertionError after `timeout_ms`."""
        limit = self.now + timeout_ms
        while True:
            self.deliver()
            if predicate(self):
                return self.now
            due = [(n.deadline, n.id) for n in self.nodes.values() if n.up]
            if not due or min(due)[0] > limit:
                tail = "\n".join(self.lines()[-200:])
                raise AssertionError(f"not reached within {timeout_ms} ms; the transcript "
                                     f"ends:\n{tail}")
            deadline, node_id = min(due)
            self.now = max(self.now, deadline)
            self._drive(self.nodes[node_id])

    def run_until_leader(self, timeout_ms=60_000):
        self.run_until(lambda c: c.leader() is not None, timeout_ms)
        return self.leader()

    # ------------------------------------------------------------------ faults

    def crash(self, node_id):
        """Power loss: unflushed writes are lost, queued messages to and from it dropped,
        the core and the state machine discarded."""
        node = self.nodes[node_id]
        node.storage.crash()
        node.core = node.sm = None
        node.deadline = None
        before = len(self.queue)
        self.queue = collections.deque(
            m for m in self.queue if node_id not in (m.source, m.destination))
        self.log(f"crash {node_id} ({before - len(self.queue)} queued messages dropped)")

    def restart(self, node_id):
        """A new core from the durable storage and the persisted election state."""
        node = self.nodes[node_id]
        assert not node.up, f"node {node_id} is running"
        self.log(f"restart {node_id} (quorum-state: "
                 f"{fmt_election_state(node.election_state) if node.election_state else '-'}"
                 f", log [{node.storage.log_start_offset}, {node.storage.log_end_offset}))")
        self._start(node)

    # ------------------------------------------------------------------ client inputs

    def propose(self, node_id, values):
        """Propose `values` (bytes) on a node; returns the last offset. NotLeaderError on
        a node that does not lead."""
        node = self.nodes[node_id]
        try:
            last = node.core.propose(list(values), self.now)
        except NotLeaderError:
            self.log(f"{node_id}: propose {len(values)} records -> NotLeaderError")
            raise
        self.log(f"{node_id}: propose {len(values)} records -> last offset {last}")
        self._drive(node)
        return last

    def resign(self, node_id):
        node = self.nodes[node_id]
        self.log(f"{node_id}: resign")
        node.core.resign(self.now)
        self._drive(node)

    def snapshot(self, node_id):
        """The node's state machine snapshots everything it applied; returns the id."""
        node = self.nodes[node_id]
        snapshot_id = node.core.create_snapshot(node.sm.next_offset, node.sm.snapshot_bytes())
        self._drive(node)
        return snapshot_id


# ============================================================================ assertions

def _pattern(line):
    """An expected line: exact text, `*` matching anything."""
    return re.compile(".*".join(re.escape(piece) for piece in line.split("*")) + r"\Z")


def assert_transcript(cluster, expected):
    """Each non-blank line of `expected` (dedented; `#` lines are comments) must match a
    transcript line, in order. A line starting with `t=` is matched against the whole
    transcript line, any other against the text after the time; `*` is a wildcard."""
    lines = cluster.transcript
    pos = 0
    for raw in textwrap.dedent(expected).splitlines():
        want = raw.strip()
        if not want or want.startswith("#"):
            continue
        timed = want.startswith("t=")
        pattern = _pattern(want)
        while pos < len(lines):
            t, text = lines[pos]
            pos += 1
            if pattern.match(f"t={t} {text}" if timed else text):
                break
        else:
            raise AssertionError(
                f"transcript line not found (in order): {want!r}\n--- transcript ---\n"
                + cluster.text())


def find_line(cluster, pattern, start=0):
    """(index, t) of the first transcript entry at or after `start` matching `pattern`
    (`*` wildcards, matched against the text after the time); None if none."""
    compiled = _pattern(pattern)
    for index in range(start, len(cluster.transcript)):
        t, text = cluster.transcript[index]
        if compiled.match(text):
            return index, t
    return None


def count_lines(cluster, pattern):
    compiled = _pattern(pattern)
    return sum(1 for _, text in cluster.transcript if compiled.match(text))


__all__ = ["Cluster", "StateMachine", "TracingStorage", "assert_transcript", "find_line",
           "count_lines", "format_message"]
