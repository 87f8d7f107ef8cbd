"""Whole-quorum simulations: many fixed seeds over 3 voters, 5 voters and voters with
observers, determinism of the event trace, the command line, and proof that the checker
catches a broken driver.

The fast set runs 300 seeds; the `slow` set 10 000 (`pytest -m slow tests/sim`). A failing
seed's report carries the command that replays it (`python -m kraftcore.sim --seed N ...`).
"""

import os
import subprocess
import sys

import pytest

from kraftcore.sim import node as node_module
from kraftcore.sim.invariants import Checker
from kraftcore.sim.params import params_for_seed
from kraftcore.sim.run import main, run_seed, run_seeds
from kraftcore.raft.memory import MemoryStorage

# (voters, observers, seeds): 300 seeds in all.
FAST_SETS = [
    (3, 0, range(1, 151)),
    (5, 0, range(1001, 1076)),
    (3, 2, range(2001, 2076)),
]
# (voters, observers, seeds): 10 000 seeds in all.
SLOW_SETS = [
    (3, 0, range(100_000, 104_000)),
    (5, 0, range(200_000, 203_000)),
    (3, 2, range(300_000, 301_500)),
    (5, 3, range(400_000, 401_000)),
    (1, 2, range(500_000, 500_500)),
]
SLOW_JOBS = max(1, min(2, os.cpu_count() or 1))


def _failures(results):
    return [result.report() for result in results if not result.passed]


@pytest.mark.parametrize("voters, observers, seeds", FAST_SETS,
                         ids=[f"{v}voters-{o}observers" for v, o, _ in FAST_SETS])
def test_fast_seeds(voters, observers, seeds):
    failures = _failures(run_seeds(seeds, voters, observers))
    assert not failures, f"{len(failures)} of {len(seeds)} seeds failed:\n" + "\n".join(failures)


def test_fast_sets_hold_at_least_300_seeds():
    assert sum(len(seeds) for _, _, seeds in FAST_SETS) >= 300
    assert sum(len(seeds) for _, _, seeds in SLOW_SETS) >= 10_000


@pytest.mark.slow
@pytest.mark.parametrize("voters, observers, seeds", SLOW_SETS,
                         ids=[f"{v}voters-{o}observers" for v, o, _ in SLOW_SETS])
def test_slow_seeds(voters, observers, seeds):
    failures = _failures(run_seeds(seeds, voters, observers, jobs=SLOW_JOBS))
    assert not failures, f"{len(failures)} of {len(seeds)} seeds failed:\n" + "\n".join(failures)


# ---------------------------------------------------------------------- determinism


def test_a_seed_replays_the_identical_trace():
    first = run_seed(11, voters=3, observers=1)
    second = run_seed(11, voters=3, observers=1)
    assert first.trace_hash == second.trace_hash
    assert first.stats == second.stats
    assert first.stats.events > 1000 and first.stats.committed_records > 0
    other = run_seed(12, voters=3, observers=1)
    assert other.trace_hash != first.trace_hash


def test_the_trace_depends_neither_on_the_hash_seed_nor_on_the_kernels():
    code = ("from kraftcore.sim.run import run_seed; "
            "print(run_seed(5, voters=5, observers=1, duration_ms=1500).trace_hash)")
    hashes = set()
    for hash_seed, pure in (("1", "0"), ("2", "0"), ("3", "1")):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, KRAFTCORE_PURE=pure)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
        hashes.add(out.stdout.strip())
    assert len(hashes) == 1


def test_parameters_come_from_the_seed():
    assert params_for_seed(9) == params_for_seed(9)
    assert params_for_seed(9) != params_for_seed(10)
    shaped = params_for_seed(9, voters=5, observers=2, duration_ms=777)
    assert (shaped.voters, shaped.observers, shaped.duration_ms) == (5, 2, 777)
    assert shaped.raft == params_for_seed(9).raft
    assert shaped.replay_command() == (
        "python -m kraftcore.sim --seed 9 --voters 5 --observers 2 --duration-ms 777")
    described = shaped.describe()
    for name in ("seed=9", "election_timeout_ms=", "drop_probability=", "crash_interval_ms=",
                 "snapshot_records="):
        assert name in described


def test_runs_exercise_the_faults():
    """Over a few seeds the simulator really crashes nodes, partitions, elects, snapshots."""
    totals = {}
    for result in run_seeds(range(1, 21), 3, 1):
        for name, value in vars(result.stats).items():
            totals[name] = totals.get(name, 0) + (value or 0)
    for name in ("crashes", "partitions", "resignations", "elections", "snapshots_created",
                 "snapshots_loaded", "messages_dropped", "committed_records"):
        assert totals[name] > 0, name


# ---------------------------------------------------------------------- command line


def test_cli_passes_and_summarises(capsys):
    assert main(["--seeds", "3..4", "--voters", "3", "--duration-ms", "1000"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("passed 2 seeds (3 voters, 0 observers):")
    assert "events" in out and "committed records" in out


def test_cli_reports_a_violation_with_its_replay_command(capsys, monkeypatch):
    def broken(self):
        raise AssertionError("boom")

    monkeypatch.setattr(node_module.SimNode, "start", broken)
    assert main(["--seed", "6", "--voters", "5", "--observers", "1"]) == 1
    out = capsys.readouterr().out
    assert "seed 6 FAILED" in out and "AssertionError: boom" in out
    assert "parameters: seed=6 voters=5 observers=1" in out
    assert "replay: python -m kraftcore.sim --seed 6 --voters 5 --observers 1 --duration-ms" in out
    assert "failing seeds: 6" in out


def test_cli_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "kraftcore.sim", "--seed", "2",
                          "--duration-ms", "500"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("passed 1 seeds")


# ---------------------------------------------------------------------- the checker has teeth


def _first_failure(seeds, voters=3):
    for result in run_seeds(seeds, voters):
        if not result.passed:
            return result
    return None


def test_a_driver_that_never_fsyncs_is_caught(monkeypatch):
    monkeypatch.setattr(MemoryStorage, "flush", lambda self: None)
    failure = _first_failure(range(1, 11))
    assert failure is not None and "majority reached high watermark" in failure.violation


def test_lost_committed_data_is_caught_without_the_majority_check(monkeypatch):
    monkeypatch.setattr(MemoryStorage, "flush", lambda self: None)
    monkeypatch.setattr(Checker, "check_majority_reached", lambda *args: None)
    failure = _first_failure(range(1, 31))
    assert failure is not None
    assert any(text in failure.violation for text in (
        "committed data lost", "log matching", "state machines differ"))


def test_a_driver_that_sends_before_persisting_is_caught(monkeypatch):
    accept = node_module.SimNode._accept

    def send_at_once(self, ready):
        accept(self, ready)
        for message in ready.messages:
            self.sim.network.send(message)
        ready.messages = []

    monkeypatch.setattr(node_module.SimNode, "_accept", send_at_once)
    assert _first_failure(range(1, 21)) is not None


def test_a_driver_that_forgets_its_votes_is_caught(monkeypatch):
    done = node_module.SimNode._on_persist_done

    def forget(self, incarnation):
        kept = self.election_state
        done(self, incarnation)
        if self.node_id == 1:
            self.election_state = kept

    monkeypatch.setattr(node_module.SimNode, "_on_persist_done", forget)
    assert _first_failure(range(1, 31)) is not None
