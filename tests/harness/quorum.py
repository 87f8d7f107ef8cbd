"""A small, deterministic, hand-driven quorum of `RaftCore`s, and `drain`, the loop that
takes a core's Readys. Every test that builds a quorum of Raft cores uses them: the Raft
scenarios and refusals (tests/raft/), the broker's metadata follower (tests/broker/), a core
over files surviving a restart (tests/runtime/test_raft_storage.py).

Nothing happens unless the test says so:

* time moves only in `advance(ms)` / `run(ms)` / `run_until(...)`; a node is polled exactly
  at the deadline its last `poll()` returned (earliest first, ties by node id);
* messages wait in one FIFO queue and are delivered, with zero latency, only by
  `deliver()` (everything, until the queue is empty), `deliver_one()`, or by `run(...)`,
  which delivers after every timer. A message on a blocked link, or to or from a node that
  is down, is dropped when its turn comes; one to an id outside the cluster (the answer to
  a request `inject`ed from a made-up sender) is kept in `outside`;
* every `Ready` is drained by `drain`, exactly as `kraftcore.raft.types` says: the state
  machine gets `load_snapshot` and `commits` as soon as the Ready is taken, then the
  election state is persisted, the storage flushed, the messages queued, and
  `on_persisted(number)` called.

Each node keeps its log in a `MemoryStorage` (so `crash()` is a power loss that loses what
was not flushed) and its election state in a `MemoryElectionStore`; with `directory`, in a
`FileRaftStorage` and a `FileElectionStore` under `directory/<id>/__cluster_metadata-0`
(then `stop()` and `restart()` reopen the files). A node's state machine is a
`StateMachine` unless `state_machine(node_id, now_ms)` makes another (anything with
`on_ready(ready, storage, now_ms)`, such as a broker's `BrokerMetadata`).

Every event goes into `cluster.transcript` as one short line (tests/harness/transcript.py);
messages are written when they are *delivered* (`a -x b ...` when dropped), so the
transcript reads as a sequence of inputs, each followed by what it changed.
"""

import collections
import json
import os
import random

from kraftcore import codec
from kraftcore.errors import NotLeaderError
from kraftcore.raft import RaftConfig, RaftCore
from kraftcore.raft.memory import MemoryElectionStore, MemoryStorage
from kraftcore.raft.storage import ElectionStore
from kraftcore.raft.types import RaftMessage
from kraftcore.runtime.raft_storage import FileElectionStore, FileRaftStorage

from tests.harness.transcript import batch_kind, fmt_election_state, fmt_role, format_message

# Loop guards: this many deliveries in one deliver(), or Readys in one drain(), means
# something is spinning.
DELIVERIES_MAX = 100_000
READYS_MAX = 1_000
PARTITION = "__cluster_metadata-0"


# ============================================================================ draining

def drain(core, now_ms, storage, election_store=None, *, apply=None, send=None,
          observe=None):
    """Poll `core` at `now_ms` and take its Readys until there are none, each as
    `kraftcore.raft.types` says: `apply(ready)` first (the state machine: `load_snapshot`,
    `commits`), then the election state is written to `election_store`, `storage` flushed
    when the Ready has a `flush_offset`, each message handed to `send`, and
    `core.on_persisted(ready.number)`. `observe()` runs after every poll and every
    `on_persisted`. Returns the deadline of the last poll."""
    for _ in range(READYS_MAX):
        deadline = core.poll(now_ms)
        if observe is not None:
            observe()
        ready = core.take_ready()
        if ready is None:
            return deadline
        if apply is not None:
            apply(ready)
        if ready.election_state is not None:
            if election_store is None:
                raise AssertionError(f"{core!r} has an election state to persist and no store")
            election_store.write(ready.election_state)
        if ready.flush_offset is not None:
            storage.flush()
        if ready.messages:
            if send is None:
                raise AssertionError(f"{core!r} sends {ready.messages} and nothing delivers")
            for message in ready.messages:
                send(message)
        core.on_persisted(ready.number)
        if observe is not None:
            observe()
    raise AssertionError(f"{core!r} produced more than {READYS_MAX} Readys")


def running_leaders(cores):
    """The cores that believe they lead, newest epoch first (shared with the quorum of
    drivers, tests/harness/drivers.py)."""
    return sorted((core for core in cores if core.role == "leader"),
                  key=lambda core: -core.epoch)


# ============================================================================ nodes

class TracingStorage:
    """Mixed into a `RaftStorage` class: reports the log changes worth a transcript line
    to `self.trace`."""

    def trace(self, text):
        pass

    def append_as_leader(self, batch, epoch):
        base, last = super().append_as_leader(batch, epoch)
        stored = self.read_batches(base, last + 1)[-1]
        self.trace(f"append {base}..{last} (epoch {epoch}{batch_kind(stored)})")
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


class TracingMemoryStorage(TracingStorage, MemoryStorage):
    pass


class TracingFileStorage(TracingStorage, FileRaftStorage):
    pass


class TracingElectionStore(ElectionStore):
    """An `ElectionStore` that writes a transcript line for every write to the store it
    wraps."""

    def __init__(self, inner, trace):
        self.inner = inner
        self.trace = trace

    def read(self):
        return self.inner.read()

    def write(self, state):
        self.inner.write(state)
        self.trace(f"persist quorum-state ({fmt_election_state(state)})")


class StateMachine:
    """Applies committed batches in offset order; remembers every data record value.
    Its snapshot is JSON: the next offset and every (offset, value hex)."""

    def __init__(self):
        self.next_offset = 0
        self.values = []  # (offset, bytes)
        self.loaded = []  # SnapshotIds loaded, in order

    def on_ready(self, ready, storage, now_ms):
        if ready.load_snapshot is not None:
            self.load_snapshot(ready.load_snapshot, storage.snapshot_bytes(ready.load_snapshot))
        for batch in ready.commits:
            self.apply(batch)

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

    def snapshot_bytes(self, end_offset=None):
        """The state up to `end_offset` (default: everything applied), which must not be
        past what was applied."""
        end = self.next_offset if end_offset is None else end_offset
        if end > self.next_offset:
            raise AssertionError(f"no state up to {end}: applied up to {self.next_offset}")
        return json.dumps({"next_offset": end,
                           "values": [[o, v.hex()] for o, v in self.values if o < end]}).encode()


class Node:
    def __init__(self, node_id, cluster):
        self.id = node_id
        self.directory = None
        self.storage = None
        self.election_store = None
        self.core = None
        self.sm = None
        self.deadline = None
        self.incarnation = 0
        self.seen = None  # (role, epoch, leader, voted) last written to the transcript
        self.seen_hw = None

    @property
    def up(self):
        return self.core is not None

    @property
    def election_state(self):
        """The persisted quorum-state (None before the first write)."""
        return self.election_store.read()

    @election_state.setter
    def election_state(self, state):
        """Replace the persisted quorum-state by hand (no transcript line)."""
        self.election_store.inner.write(state)

    def __repr__(self):
        return f"Node({self.id}, {self.core!r}, persisted={self.election_state})"


# ============================================================================ cluster

class Cluster:
    def __init__(self, voters=(1, 2, 3), observers=(), seed=0, *, directory=None,
                 state_machine=None, node_config=None, **config):
        """`config` (RaftConfig fields) applies to every node, `node_config[node_id]` on top
        of it to one node."""
        self.voters = tuple(voters)
        self.observers = tuple(observers)
        self.seed = seed
        self.directory = None if directory is None else str(directory)
        self.state_machine = state_machine or (lambda node_id, now_ms: StateMachine())
        self.config = RaftConfig(**config)
        self.node_configs = {node_id: RaftConfig(**{**config, **overrides})
                             for node_id, overrides in (node_config or {}).items()}
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
            self._open(node)
            self._start(node)

    # ------------------------------------------------------------------ queries

    def core(self, node_id):
        return self.nodes[node_id].core

    def leader(self):
        """The id of the one running leader, or None."""
        leaders = running_leaders(n.core for n in self.nodes.values() if n.up)
        assert len(leaders) <= 1, f"several running leaders: {[c.node_id for c in leaders]}"
        return leaders[0].node_id if leaders else None

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

    def _open(self, node):
        """Give the node its storage and election store (again, after a stop, for files)."""
        def trace(text):
            self._storage_event(node, text)

        def node_log(text):
            self.log(f"{node.id}: {text}")

        if self.directory is None:
            if node.storage is None:
                node.storage = TracingMemoryStorage()
                node.election_store = TracingElectionStore(MemoryElectionStore(), node_log)
        else:
            node.directory = os.path.join(self.directory, str(node.id), PARTITION)
            os.makedirs(node.directory, exist_ok=True)
            node.storage = TracingFileStorage.open(node.directory)
            node.election_store = TracingElectionStore(FileElectionStore(node.directory),
                                                       node_log)
        node.storage.trace = trace

    def _start(self, node):
        node.incarnation += 1
        rng = random.Random(self.seed * 1_000_003 + node.id * 1_009 + node.incarnation)
        node.sm = self.state_machine(node.id, self.now)
        node.seen = node.seen_hw = None
        node.core = RaftCore(node.id, self.voters, node.storage, node.election_state,
                             self.node_configs.get(node.id, self.config), rng, self.now)
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
        """Poll the node and drain its Readys (`drain`)."""
        deadline = drain(node.core, self.now, node.storage, node.election_store,
                         apply=lambda ready: self._apply(node, ready), send=self._queue,
                         observe=lambda: self._note_state(node))
        node.deadline = deadline if deadline > self.now else self.now + 1

    def _apply(self, node, ready):
        node.sm.on_ready(ready, node.storage, self.now)
        if ready.load_snapshot is not None:
            snapshot_id = ready.load_snapshot
            self.log(f"{node.id}: load snapshot (end offset {snapshot_id.end_offset}, "
                     f"epoch {snapshot_id.epoch})")
        if ready.commits:
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

    def _take_down(self, node, what):
        node.core = node.sm = None
        node.deadline = None
        before = len(self.queue)
        self.queue = collections.deque(
            m for m in self.queue if node.id not in (m.source, m.destination))
        self.log(f"{what} {node.id} ({before - len(self.queue)} queued messages dropped)")

    def crash(self, node_id):
        """Power loss: unflushed writes are lost, queued messages to and from it dropped,
        the core and the state machine discarded. In-memory storage only."""
        node = self.nodes[node_id]
        if self.directory is not None:
            raise TypeError("a node on files cannot lose power here; stop() it")
        node.storage.crash()
        self._take_down(node, "crash")

    def stop(self, node_id):
        """A clean stop: nothing written is lost (files are closed), queued messages to
        and from it are dropped, the core and the state machine discarded."""
        node = self.nodes[node_id]
        assert node.up, f"node {node_id} is not running"
        if self.directory is not None:
            node.storage.close()
        self._take_down(node, "stop")

    def restart(self, node_id):
        """A new core from the durable storage and the persisted election state."""
        node = self.nodes[node_id]
        assert not node.up, f"node {node_id} is running"
        if self.directory is not None:
            self._open(node)
        self.log(f"restart {node_id} (quorum-state: "
                 f"{fmt_election_state(node.election_state) if node.election_state else '-'}"
                 f", log [{node.storage.log_start_offset}, {node.storage.log_end_offset}))")
        self._start(node)

    def close(self):
        """Close the files of every node (a cluster on files)."""
        if self.directory is not None:
            for node in self.nodes.values():
                if node.up:
                    node.storage.close()

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

    def snapshot(self, node_id, end_offset=None):
        """The node's state machine snapshots what it applied (up to `end_offset`); returns
        the id."""
        node = self.nodes[node_id]
        if end_offset is None:
            end_offset = node.sm.next_offset
        snapshot_id = node.core.create_snapshot(end_offset, node.sm.snapshot_bytes(end_offset))
        self._drive(node)
        return snapshot_id


__all__ = ["Cluster", "StateMachine", "TracingStorage", "drain", "running_leaders"]
