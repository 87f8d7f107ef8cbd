"""One simulation run: `Simulation` builds the scheduler, the network, the nodes, the client,
the faults and the checker from a run's `SimParams`, and runs its two phases:

1. **safety**: `duration_ms` of workload under faults, every invariant checked after every
   event (`kraftcore.sim.invariants`);
2. **liveness**: faults stop, the network heals, every node restarts, the client stops;
   within `liveness_ms` of simulated time a leader must exist and a fresh proposal (the
   liveness probe's) must be applied by every node (voters and observers).

Then the end-of-run checks. With a `hostile` plan (`kraftcore.sim.hostile`), a hostile
sender injects forged, malformed and replayed Raft messages during the safety phase as
well, each of which must be refused or survived. Nothing reads a real clock: the same seed
and shape give the same event trace, whose hash `SimResult` carries.
"""

import collections
import dataclasses
import hashlib

from kraftcore.limits import SIM_EVENTS_PER_SEED_MAX, SIM_TRACE_TAIL_LINES_MAX
from kraftcore.sim.faults import Faults
from kraftcore.sim.hostile import Hostile, plan_to_json
from kraftcore.sim.invariants import Checker, SimViolation
from kraftcore.sim.network import Network
from kraftcore.sim.node import SimNode
from kraftcore.sim.params import SimParams
from kraftcore.sim.scheduler import Rngs, Scheduler
from kraftcore.sim.workload import Workload

# How often the liveness phase looks for a leader and re-proposes (ms).
LIVENESS_PROBE_MS = 10
LIVENESS_REPROPOSE_MS = 500


@dataclasses.dataclass
class SimStats:
    events: int = 0
    simulated_ms: int = 0
    committed_records: int = 0
    committed_offset: int = 0
    elections: int = 0
    crashes: int = 0
    partitions: int = 0
    resignations: int = 0
    proposals: int = 0
    messages_sent: int = 0
    messages_dropped: int = 0
    snapshots_created: int = 0
    snapshots_loaded: int = 0
    liveness_ms: int = None
    # The controller workload: answered operations, and brokers the active controllers
    # fenced because their session expired.
    operations: int = 0
    brokers_fenced: int = 0
    # Messages the hostile sender injected (kraftcore.sim.hostile).
    hostile_injected: int = 0
    # The highest epoch any node persisted.
    epoch_max: int = 0


@dataclasses.dataclass
class SimResult:
    seed: int
    params: SimParams
    passed: bool
    violation: str
    stats: SimStats
    trace_hash: str
    trace_tail: list
    # The hostile sender's plan, when it had one.
    hostile: list = None

    def replay_command(self):
        command = self.params.replay_command()
        if self.hostile:
            command += f" --hostile '{plan_to_json(self.hostile)}'"
        return command

    def report(self):
        """The failure report: seed, every parameter, the command that replays it."""
        lines = [f"seed {self.seed} FAILED at {self.stats.simulated_ms} ms: {self.violation}",
                 f"  parameters: {self.params.describe()}",
                 f"  replay: {self.replay_command()}"]
        return "\n".join(lines)


class Simulation:
    """One run: the scheduler, the network, the nodes, the client, the faults, the checker."""

    def __init__(self, params, trace_output=None, hostile=None):
        self.params = params
        rngs = Rngs(params.seed)
        rngs.child()  # the parameters' stream (params_for_seed)
        network_rng, faults_rng, workload_rng, start_rng = (
            rngs.child(), rngs.child(), rngs.child(), rngs.child())
        self.scheduler = Scheduler()
        # trace_output(line) receives every trace line when set (--trace).
        self.trace_output = trace_output
        self.tracing = trace_output is not None
        self._trace_hash = hashlib.blake2b(digest_size=16)
        self.trace_tail = collections.deque(maxlen=SIM_TRACE_TAIL_LINES_MAX)
        self.dirty = set()
        self.network = Network(self.scheduler, network_rng, params.network, self._deliver,
                               self._on_network_event)
        voter_ids = tuple(range(1, params.voters + 1))
        all_ids = range(1, params.voters + params.observers + 1)
        self.nodes = {node_id: self._make_node(node_id, voter_ids, rngs.child())
                      for node_id in all_ids}
        self.workload = self._make_workload(workload_rng)
        self.checker = self._make_checker()
        self.faults = Faults(self, faults_rng, params.faults)
        self._start_rng = start_rng
        self.live_done = False
        self.live_started_ms = None
        self.live_probes = []
        # Draws no randomness: a seed runs the same with or without a hostile sender
        # until its first injection.
        self.hostile = Hostile(self, hostile) if hostile else None

    # The parts a workload replaces (kraftcore.sim.controller).

    def _make_node(self, node_id, voter_ids, rng):
        return SimNode(node_id, voter_ids, self.params.raft, rng, self)

    def _make_workload(self, rng):
        return Workload(self, rng, self.params.propose_interval_ms_max,
                        self.params.values_per_proposal_max)

    def _make_checker(self):
        return Checker(self.nodes, self.workload.proposed)

    # ------------------------------------------------------------------ trace

    def trace(self, text):
        self._trace_hash.update(text.encode())
        self._trace_hash.update(b"\n")
        self.trace_tail.append(text)
        if self.trace_output is not None:
            self.trace_output(text)

    def _on_network_event(self, kind, message):
        self.trace(f"{self.scheduler.now_ms} {kind} {message.source}->{message.destination} "
                   f"{type(message.body).__name__} {message.correlation_id}")

    def _deliver(self, message):
        self.trace(f"{self.scheduler.now_ms} deliver {message.source}->{message.destination} "
                   f"{type(message.body).__name__} {message.correlation_id}")
        if self.tracing:
            self.trace_output(f"    {message.body!r}")
        if self.hostile is not None:
            self.hostile.observe(message)
        self.nodes[message.destination].deliver(message)

    # ------------------------------------------------------------------ queries

    def current_leader(self):
        """The running leader of the highest epoch, or None."""
        best = None
        for node in self.nodes.values():
            core = node.core
            if core is not None and core.role == "leader":
                if best is None or core.epoch > best.core.epoch:
                    best = node
        return best

    def describe_nodes(self):
        return "; ".join(repr(node) for node in self.nodes.values())

    # ------------------------------------------------------------------ phases

    def _after_event(self):
        dirty = self.dirty
        if dirty:
            check = self.checker.check_node
            for node in sorted(dirty, key=_node_id):
                check(node)
            dirty.clear()
        if self.scheduler.events_run > SIM_EVENTS_PER_SEED_MAX:
            raise SimViolation(f"more than {SIM_EVENTS_PER_SEED_MAX} events: the run is stuck "
                               f"({self.describe_nodes()})")

    def run(self):
        params = self.params
        scheduler = self.scheduler
        for node_id in sorted(self.nodes):
            scheduler.at(self._start_rng.randint(0, 20), self.nodes[node_id].start)
        self.workload.start()
        self.faults.start()
        if self.hostile is not None:
            self.hostile.start()
        scheduler.run_until(params.duration_ms, after_event=self._after_event)
        if self.hostile is not None:
            self.hostile.stop()
        self.faults.stop()
        # Only the liveness probe proposes from now on: a backlog the client built up may
        # drain, and "a fresh proposal commits" does not race an unbounded stream.
        self.workload.stop()
        self._after_event()
        self.live_started_ms = scheduler.now_ms
        scheduler.after(0, self._probe)
        scheduler.run_until(self.live_started_ms + params.liveness_ms,
                            stop=self._is_live, after_event=self._after_event)
        if not self.live_done:
            raise SimViolation(f"liveness: {params.liveness_ms} ms after faults stopped, "
                               f"{self._liveness_failure()}; nodes: {self.describe_nodes()}")
        self._final_check()

    def _liveness_failure(self):
        probes = [(value, offset, node_id) for value, offset, node_id, _ in self.live_probes]
        return f"no fresh proposal was applied by every node (proposals {probes[-5:]})"

    def _final_check(self):
        self.checker.final_check()

    def _is_live(self):
        return self.live_done

    def _probe(self):
        if self.live_done:
            return
        checker = self.checker
        for value, offset, _, _ in self.live_probes:
            if checker.value_offsets.get(value) != offset:
                continue
            if all(node.up and node.sm.next_offset > offset for node in self.nodes.values()):
                self.live_done = True
                self.trace(f"{self.scheduler.now_ms} live {value!r} at {offset}")
                return
        now = self.scheduler.now_ms
        leader = self.current_leader()
        if leader is not None and (not self.live_probes
                                   or now - self.live_probes[-1][3] >= LIVENESS_REPROPOSE_MS):
            proposed = self.workload.propose(1, prefix=b"live-", node=leader)
            if proposed is not None:
                node_id, values, offset = proposed
                self.live_probes.append((values[0], offset, node_id, now))
        self.scheduler.after(LIVENESS_PROBE_MS, self._probe)

    def stats(self):
        nodes = self.nodes.values()
        network = self.network
        checker = self.checker
        return SimStats(
            events=self.scheduler.events_run,
            simulated_ms=self.scheduler.now_ms,
            committed_records=len(checker.value_offsets),
            committed_offset=checker.high_watermark_max,
            elections=len(checker.leaders),
            crashes=self.faults.crashes,
            partitions=self.faults.partitions,
            resignations=self.faults.resignations,
            proposals=self.workload.proposals,
            messages_sent=network.sent,
            messages_dropped=network.dropped,
            snapshots_created=sum(n.snapshots_created for n in nodes),
            snapshots_loaded=sum(n.snapshots_loaded for n in nodes),
            liveness_ms=(None if not self.live_done
                         else self.scheduler.now_ms - self.live_started_ms),
            hostile_injected=0 if self.hostile is None else self.hostile.injected,
            epoch_max=max((n.election_state.epoch for n in nodes
                           if n.election_state is not None), default=0),
        )


def _node_id(node):
    return node.node_id
