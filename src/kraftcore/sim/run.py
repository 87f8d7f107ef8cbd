"""One simulation run per seed, its parameters, and the command line that runs seeds.

`params_for_seed(seed, ...)` derives every parameter of a run (Raft timeouts, network fault
rates, crash / partition / resignation rates, workload shape, snapshot cadence) from the
seed alone; only the cluster shape (`voters`, `observers`) and the length of the safety
phase (`duration_ms`) are given. `run_seed` builds a `Simulation` and runs its two phases:

1. **safety**: `duration_ms` of workload under faults, every invariant checked after every
   event (`kraftcore.sim.invariants`);
2. **liveness**: faults stop, the network heals, every node restarts, the client stops;
   within `liveness_ms` of simulated time a leader must exist and a fresh proposal (the
   liveness probe's) must be applied by every node (voters and observers).

Then the end-of-run checks. A `RaftStateError` from a core is a failure of the seed (the
core detected a safety violation), and so is any other exception.

With a `hostile` plan (`kraftcore.sim.hostile`), a hostile sender injects forged, malformed
and replayed Raft messages during the safety phase as well, each of which must be refused
or survived; the plan is part of the failure report's replay command. Nothing reads a real
clock: the same seed and shape give the same event trace, whose hash `SimResult` carries.

`main(argv)` is `python -m kraftcore.sim`.
"""

import argparse
import collections
import dataclasses
import hashlib
import traceback

from kraftcore.errors import RaftStateError
from kraftcore.raft.config import RaftConfig
from kraftcore.sim.faults import FaultParams, Faults
from kraftcore.sim.hostile import Hostile, plan_from_json, plan_to_json
from kraftcore.sim.invariants import Checker, SimViolation
from kraftcore.sim.network import Network, NetworkParams
from kraftcore.sim.node import SimNode
from kraftcore.sim.scheduler import Rngs, Scheduler
from kraftcore.sim.workload import Workload

# Simulated time the liveness phase may take (after faults stop) before it is a failure.
LIVENESS_MS_DEFAULT = 20_000
# The most events one seed may run: a livelocked run fails instead of running forever.
EVENTS_PER_SEED_MAX = 5_000_000
# Trace lines kept for a failure report.
TRACE_TAIL_LINES = 60
# How often the liveness phase looks for a leader and re-proposes (ms).
LIVENESS_PROBE_MS = 10
LIVENESS_REPROPOSE_MS = 500
# Brokers (observers) the controller workload runs when none are asked for.
CONTROLLER_BROKERS_DEFAULT = 3


@dataclasses.dataclass(frozen=True)
class SimParams:
    seed: int
    voters: int
    observers: int
    duration_ms: int
    liveness_ms: int
    raft: RaftConfig
    network: NetworkParams
    faults: FaultParams
    # Simulated fsync latency of a Ready that persists something: [0, fsync_ms_max].
    fsync_ms_max: int
    # The client proposes every [1, propose_interval_ms_max] ms, [1, values_max] values.
    propose_interval_ms_max: int
    values_per_proposal_max: int
    # A node snapshots its state machine after this many applied records.
    snapshot_records: int
    snapshot_padding_bytes: int
    # "raft": the client proposes raw values; "controller": controllers, brokers and client
    # operations (kraftcore.sim.controller), with its parameters in `controller`.
    workload: str = "raft"
    controller: object = None

    def describe(self):
        """Every parameter, one `name=value` list."""
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if dataclasses.is_dataclass(value):
                inner = ", ".join(f"{f.name}={getattr(value, f.name)!r}"
                                  for f in dataclasses.fields(value))
                parts.append(f"{field.name}=({inner})")
            else:
                parts.append(f"{field.name}={value!r}")
        return " ".join(parts)

    def replay_command(self):
        command = (f"python -m kraftcore.sim --seed {self.seed} --voters {self.voters} "
                   f"--observers {self.observers} --duration-ms {self.duration_ms}")
        if self.workload != "raft":
            command += f" --workload {self.workload}"
        if self.liveness_ms != LIVENESS_MS_DEFAULT:
            command += f" --liveness-ms {self.liveness_ms}"
        return command


WORKLOADS = ("raft", "controller")


def params_for_seed(seed, voters=3, observers=0, duration_ms=None,
                    liveness_ms=LIVENESS_MS_DEFAULT, workload="raft"):
    """Every parameter of a run, drawn from the seed (the first stream of `Rngs(seed)`).
    The controller workload draws its own parameters after the shared ones, so a seed's
    Raft, network and fault parameters are the same under both workloads."""
    if voters < 1 or observers < 0:
        raise ValueError(f"need voters >= 1 and observers >= 0, got {voters}, {observers}")
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    if workload == "controller" and observers < 1:
        raise ValueError("the controller workload needs at least one broker (observer)")
    rng = Rngs(seed).child()
    election_timeout_ms = rng.choice((100, 150, 200, 300))
    raft = RaftConfig(
        election_timeout_ms=election_timeout_ms,
        fetch_timeout_ms=election_timeout_ms * rng.choice((2, 3)),
        election_backoff_max_ms=election_timeout_ms,
        election_backoff_base_ms=rng.choice((10, 20, 50)),
        request_timeout_ms=election_timeout_ms * rng.choice((1, 2)),
        retry_backoff_ms=rng.choice((5, 10, 20)),
        # Below the request timeout with room for the network delay (RaftConfig's rule).
        fetch_max_wait_ms=min(rng.choice((10, 25, 50, 100)), election_timeout_ms // 2),
        fetch_max_bytes=rng.choice((512, 4096, 65536, 1 << 20)),
        pre_vote=rng.random() < 0.85,
    )
    network = NetworkParams(
        delay_ms_min=1,
        delay_ms_max=rng.choice((2, 5, 10)),
        drop_probability=rng.choice((0.0, 0.01, 0.05, 0.1)),
        duplicate_probability=rng.choice((0.0, 0.01, 0.05)),
        spike_probability=rng.choice((0.0, 0.01, 0.05)),
        spike_ms_max=rng.choice((50, 200, 500)),
    )
    faults = FaultParams(
        crash_interval_ms=rng.choice((0, 300, 1000, 3000)),
        downtime_ms_max=rng.choice((50, 500, 2000)),
        crash_leader_probability=round(rng.random() * 0.6, 3),
        crash_many_probability=rng.choice((0.0, 0.0, 0.1, 0.3)),
        partition_interval_ms=rng.choice((0, 500, 1500, 4000)),
        partition_ms_max=rng.choice((100, 500, 2000)),
        one_way_probability=0.3,
        isolate_leader_probability=0.3,
        resign_interval_ms=rng.choice((0, 0, 2000, 5000)),
    )
    drawn_duration_ms = rng.choice((3000, 4000, 5000, 6000))
    fsync_ms_max = rng.choice((0, 1, 3, 10, 25))
    propose_interval_ms_max = rng.choice((5, 20, 100))
    values_per_proposal_max = rng.choice((1, 5, 20, 100))
    snapshot_records = rng.choice((20, 100, 500, 1 << 40))
    snapshot_padding_bytes = rng.choice((0, 100, 3000))
    controller = None
    if workload == "controller":
        from kraftcore.sim.controller import controller_params

        controller = controller_params(rng, raft)
    return SimParams(
        seed=seed, voters=voters, observers=observers,
        duration_ms=drawn_duration_ms if duration_ms is None else duration_ms,
        liveness_ms=liveness_ms, raft=raft, network=network, faults=faults,
        fsync_ms_max=fsync_ms_max, propose_interval_ms_max=propose_interval_ms_max,
        values_per_proposal_max=values_per_proposal_max, snapshot_records=snapshot_records,
        snapshot_padding_bytes=snapshot_padding_bytes, workload=workload,
        controller=controller,
    )


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
        self.trace_tail = collections.deque(maxlen=TRACE_TAIL_LINES)
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
        if self.scheduler.events_run > EVENTS_PER_SEED_MAX:
            raise SimViolation(f"more than {EVENTS_PER_SEED_MAX} events: the run is stuck "
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


def default_observers(workload):
    return CONTROLLER_BROKERS_DEFAULT if workload == "controller" else 0


def run_seed(seed, voters=3, observers=None, duration_ms=None, liveness_ms=LIVENESS_MS_DEFAULT,
             trace_output=None, workload="raft", hostile=None):
    """Run one seed; returns a `SimResult` (never raises for a failure of the run).
    `observers` defaults to 0, or to 3 brokers for the controller workload. `hostile`: a
    plan for the hostile sender (`kraftcore.sim.hostile`; the raft workload only)."""
    if observers is None:
        observers = default_observers(workload)
    params = params_for_seed(seed, voters, observers, duration_ms, liveness_ms, workload)
    if workload == "controller":
        from kraftcore.sim.controller import ControllerSimulation

        if hostile:
            raise ValueError("the hostile sender runs with the raft workload only")
        sim = ControllerSimulation(params, trace_output)
    else:
        sim = Simulation(params, trace_output, hostile=hostile)
    violation = None
    try:
        sim.run()
    except SimViolation as exc:
        violation = str(exc)
    except RaftStateError as exc:
        violation = f"the core raised RaftStateError: {exc}"
    except Exception as exc:  # a crash of the core (or the simulator) fails the seed
        violation = (f"unexpected {type(exc).__name__}: {exc}\n"
                     + "".join(traceback.format_exception(exc)).rstrip())
    return SimResult(seed=seed, params=params, passed=violation is None, violation=violation,
                     stats=sim.stats(), trace_hash=sim._trace_hash.hexdigest(),
                     trace_tail=list(sim.trace_tail),
                     hostile=[tuple(entry) for entry in hostile] if hostile else None)


# ---------------------------------------------------------------------- command line


def _parse_seeds(text):
    """`A..B` (inclusive) or `N`."""
    if ".." in text:
        low, high = text.split("..", 1)
        low, high = int(low), int(high)
        if high < low:
            raise argparse.ArgumentTypeError(f"empty seed range {text}")
        return range(low, high + 1)
    return range(int(text), int(text) + 1)


def _run_one(job):
    seed, voters, observers, duration_ms, liveness_ms, workload = job
    return run_seed(seed, voters, observers, duration_ms, liveness_ms, workload=workload)


def run_seeds(seeds, voters=3, observers=None, duration_ms=None, jobs=1,
              liveness_ms=LIVENESS_MS_DEFAULT, workload="raft"):
    """Yield the `SimResult` of each seed, in seed order (`jobs` processes)."""
    if observers is None:
        observers = default_observers(workload)
    work = [(seed, voters, observers, duration_ms, liveness_ms, workload) for seed in seeds]
    if jobs <= 1:
        for job in work:
            yield _run_one(job)
        return
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap(_run_one, work, chunksize=4)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m kraftcore.sim",
        description="Run the deterministic KRaft simulator over seeds; exit 1 on a violation.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, help="run one seed")
    which.add_argument("--seeds", type=_parse_seeds, help="run seeds A..B (inclusive)")
    parser.add_argument("--workload", choices=WORKLOADS, default="raft",
                        help="raft: a client proposes raw values; controller: quorum "
                        "controllers, brokers (the observers) and client operations")
    parser.add_argument("--voters", type=int, default=3)
    parser.add_argument("--observers", type=int, default=None,
                        help="observers (brokers in the controller workload); default 0, "
                        f"or {CONTROLLER_BROKERS_DEFAULT} with --workload controller")
    parser.add_argument("--duration-ms", type=int, default=None,
                        help="length of the safety phase (default: drawn from the seed)")
    parser.add_argument("--liveness-ms", type=int, default=LIVENESS_MS_DEFAULT,
                        help="simulated time the quorum gets to recover once faults stop")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--trace", action="store_true",
                        help="print every event of the run (one seed)")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failure")
    parser.add_argument("--tail", action="store_true",
                        help=f"print the last {TRACE_TAIL_LINES} trace lines of a failed seed")
    parser.add_argument("--hostile", metavar="PLAN",
                        help="a hostile sender's plan, JSON [[at_ms, target, what, values], "
                        "...] (kraftcore.sim.hostile; one seed, raft workload)")
    args = parser.parse_args(argv)
    if args.observers is None:
        args.observers = default_observers(args.workload)
    if args.voters < 1 or args.observers < 0:
        parser.error("--voters must be >= 1 and --observers >= 0")
    if args.workload == "controller" and args.observers < 1:
        parser.error("the controller workload needs --observers >= 1 (the brokers)")
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else args.seeds

    hostile = None
    if args.hostile is not None:
        if len(seeds) != 1 or args.workload != "raft":
            parser.error("--hostile runs one seed of the raft workload")
        try:
            hostile = plan_from_json(args.hostile)
        except ValueError as exc:
            parser.error(str(exc))
    if args.trace or hostile is not None:
        if len(seeds) != 1:
            parser.error("--trace runs one seed")
        results = [run_seed(seeds[0], args.voters, args.observers, args.duration_ms,
                            args.liveness_ms, trace_output=print if args.trace else None,
                            workload=args.workload, hostile=hostile)]
    else:
        results = run_seeds(seeds, args.voters, args.observers, args.duration_ms, args.jobs,
                            args.liveness_ms, args.workload)

    total = SimStats(events=0)
    failures = []
    count = 0
    for result in results:
        count += 1
        stats = result.stats
        total.events += stats.events
        total.committed_records += stats.committed_records
        total.simulated_ms += stats.simulated_ms
        total.elections += stats.elections
        total.crashes += stats.crashes
        total.operations += stats.operations
        if not result.passed:
            failures.append(result.seed)
            print(result.report(), flush=True)
            if args.tail:
                print("  last events:\n    " + "\n    ".join(result.trace_tail), flush=True)
            if args.fail_fast:
                break
    shape = f"{args.voters} voters, {args.observers} observers"
    summary = (f"{count} seeds ({shape}): {total.events} events, {total.committed_records} "
               f"committed records, {total.elections} elections, {total.crashes} crashes, "
               f"{total.simulated_ms / 1000:.1f} s simulated")
    if args.workload == "controller":
        summary += f", {total.operations} answered controller operations"
    if failures:
        print(f"FAILED {len(failures)} of {summary}; failing seeds: "
              f"{' '.join(map(str, failures))}")
        return 1
    print(f"passed {summary}")
    return 0
