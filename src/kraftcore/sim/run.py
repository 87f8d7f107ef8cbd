"""The simulator's entry points: `run_seed` runs one seed's `Simulation` (or
`ControllerSimulation`) and returns its `SimResult`, `run_seeds` many, and `main(argv)` is
`python -m kraftcore.sim`.

A `RaftStateError` from a core is a failure of the seed (the core detected a safety
violation), and so is any other exception. The failure report carries the command that
replays the seed (with the hostile sender's plan, when it had one).
"""

import argparse
import traceback

from kraftcore.errors import RaftStateError
from kraftcore.limits import SIM_TRACE_TAIL_LINES_MAX
from kraftcore.sim.controller import ControllerSimulation
from kraftcore.sim.hostile import plan_from_json
from kraftcore.sim.invariants import SimViolation
from kraftcore.sim.params import (CONTROLLER_BROKERS_DEFAULT, LIVENESS_MS_DEFAULT, WORKLOADS,
                                  default_observers, params_for_seed)
from kraftcore.sim.simulation import SimResult, SimStats, Simulation


def run_seed(seed, voters=3, observers=None, duration_ms=None, liveness_ms=LIVENESS_MS_DEFAULT,
             trace_output=None, workload="raft", hostile=None):
    """Run one seed; returns a `SimResult` (never raises for a failure of the run).
    `observers` defaults to 0, or to 3 brokers for the controller workload. `hostile`: a
    plan for the hostile sender (`kraftcore.sim.hostile`; the raft workload only)."""
    if observers is None:
        observers = default_observers(workload)
    params = params_for_seed(seed, voters, observers, duration_ms, liveness_ms, workload)
    if workload == "controller":
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
                        help=f"print the last {SIM_TRACE_TAIL_LINES_MAX} trace lines of a "
                        "failed seed")
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
