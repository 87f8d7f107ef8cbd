"""A hostile sender against simulated quorums (kraftcore.sim.hostile): requests and
responses of every Raft RPC with any field values — epochs 0, -1, 2^31-2, 2^31-1 and past
int32, offsets past int64, unknown and negative ids, non-voters, real voters' ids, replays
of earlier genuine messages — interleaved with the simulator's drops, delays, partitions
and crashes. After every event the simulator's safety invariants hold; every message that
must be refused changes nothing on its target; once faults and injections stop, the quorum
elects a leader and commits a fresh write within the liveness phase.

Hypothesis draws the seed (so every fault parameter), the cluster shape and the plan of
injections. `make test` runs a fixed set of examples (derandomized, a few seconds);
`pytest -m slow tests/sim` runs many more, longer and random. A failing example's message
is the simulator's report, with the command that replays it:
`python -m kraftcore.sim --seed N ... --hostile '<plan>'` (add --trace to see every event).
"""

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftcore.limits import RAFT_EPOCH_ACCEPTED_MAX, RAFT_EPOCH_STEP_MAX
from kraftcore.raft import core as core_module
from kraftcore.sim.hostile import (EXTREME_VALUES, FOREIGN_IDS, KINDS, REQUESTS, RESPONSES,
                                   plan_from_json, plan_to_json)
from kraftcore.sim.run import main, run_seed

SHAPES = [(3, 0), (3, 1), (5, 0), (5, 2)]
FAST_DURATION_MS = 2_500
FAST_EXAMPLES = 100
SLOW_DURATION_MS = 6_000
SLOW_EXAMPLES = 1_000

VALUES = st.one_of(
    st.sampled_from(EXTREME_VALUES + FOREIGN_IDS),
    st.integers(-3, 12),
    st.integers(-8, 8).map(lambda d: f"{d:+d}"),  # relative to the target's epoch or log end
    st.integers(-2**64, 2**64),
)


@st.composite
def hostile_runs(draw, duration_ms):
    voters, observers = draw(st.sampled_from(SHAPES))
    seed = draw(st.integers(0, 2**32 - 1))
    injection = st.tuples(st.integers(0, duration_ms - 1),
                          st.integers(1, voters + observers),
                          st.sampled_from(KINDS),
                          st.lists(VALUES, max_size=10))
    plan = draw(st.lists(injection, min_size=3, max_size=80))
    return seed, voters, observers, plan


def check_run(seed, voters, observers, plan, duration_ms):
    result = run_seed(seed, voters, observers, duration_ms, hostile=plan)
    assert result.passed, result.report()
    return result


@settings(max_examples=FAST_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_runs(FAST_DURATION_MS))
def test_hostile_messages_are_refused_or_survived(run):
    check_run(*run, FAST_DURATION_MS)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_runs(SLOW_DURATION_MS))
def test_hostile_messages_are_refused_or_survived_at_length(run):
    check_run(*run, SLOW_DURATION_MS)


# ---------------------------------------------------------------------- fixed plans

OVERFLOW = 2**31 - 1


def overflow_plan(voters):
    """The overflow packets, at each voter, three times over the run: a Vote and a pre-vote
    at epoch 2^31-1 from node 99, then the same naming a real voter as candidate."""
    plan = []
    for at_ms in (300, 900, 1700):
        for target in voters:
            spoofed = voters[target % len(voters)]
            # [sender, epoch, voter id choice, last epoch, last offset]; naming a voter,
            # the epoch is a choice among those no message may carry: 3 is 2^31-1
            plan += [(at_ms, target, "vote", [99, OVERFLOW, 0, 0, 5]),
                     (at_ms, target, "pre_vote", [99, OVERFLOW, 0, 0, 5]),
                     (at_ms + 1, target, "vote", [spoofed, 3, 0, 0, 5]),
                     (at_ms + 1, target, "pre_vote", [spoofed, 3, 0, 0, 5])]
    return plan


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_the_overflow_votes_change_nothing_and_the_quorum_keeps_committing(seed):
    result = check_run(seed, 3, 0, overflow_plan((1, 2, 3)), 2_500)
    assert result.stats.hostile_injected >= 20 and result.stats.committed_records > 0


def test_a_quorum_pushed_into_the_upper_half_of_the_epochs_keeps_electing():
    """Pushes naming real voters: to RAFT_EPOCH_ACCEPTED_MAX (adopted), then one past the
    node's epoch (adopted), then by a response's step, to RAFT_EPOCH_MAX and to 2^31-1
    (refused: a request moves a node one epoch at most up there). The quorum elects in the
    upper half, under faults, and commits a fresh write after them."""
    # [voter choice, 1: a bound, bound index, 1: pre-vote / 0: EndQuorumEpoch]; bounds:
    # 0 ceiling, 1 ceiling + 1, 2 accepted maximum, 3 accepted maximum + 1,
    # 4 epoch + request step + 1, 5 epoch + response step, 6 epoch maximum,
    # 7 epoch maximum + 1, 8 2^31-1
    plan = [(400, 1, "push", [0, 1, 2, 1]), (900, 2, "push", [1, 1, 5, 0]),
            (1000, 3, "push", [1, 1, 4, 1]), (1300, 3, "push", [0, 1, 6, 1]),
            (1300, 1, "push", [0, 1, 8, 0]), (1600, 2, "push", [0, 1, 0, 1]),
            (2000, 3, "push", [1, 1, 3, 1])]
    for seed in (1, 2, 3):
        result = check_run(seed, 3, 0, plan, 2_500)
        # in the upper half only elections and one-epoch pushes move the quorum
        assert (RAFT_EPOCH_ACCEPTED_MAX < result.stats.epoch_max
                < RAFT_EPOCH_ACCEPTED_MAX + RAFT_EPOCH_STEP_MAX)


def test_every_kind_of_injection_is_exercised():
    plan = [(100 + 40 * i, 1 + i % 3, kind, [i, "+1", "+0", 7, i]) for i, kind in
            enumerate(KINDS * 3)]
    result = check_run(11, 3, 1, plan, 2_500)
    assert result.stats.hostile_injected >= len(KINDS)
    assert set(REQUESTS) | set(RESPONSES) | {"push", "replay"} == set(KINDS)


def test_the_check_has_teeth(monkeypatch):
    """A core that lets non-voters take part (the bug this guards against) fails the
    overflow plan with a report that says how to replay it."""
    original = core_module.RaftCore._voter_only_error

    def careless(self, sender, epoch):
        error = original(self, sender, epoch)
        return None if error == core_module.INCONSISTENT_VOTER_SET else error

    monkeypatch.setattr(core_module.RaftCore, "_voter_only_error", careless)
    # A vote for node 99 at the next epoch, up to date: granted by such a core.
    plan = [(300, target, "vote", [99, "+1", 0, 0, 2**40]) for target in (1, 2, 3)]
    result = run_seed(1, 3, 0, 2_500, hostile=plan)
    assert not result.passed
    assert "acted on a hostile vote request it must refuse" in result.violation
    report = result.report()
    assert "replay: python -m kraftcore.sim --seed 1 --voters 3 --observers 0" in report
    assert f" --hostile '{plan_to_json(plan)}'" in report
    # The overflow packets themselves make such a core try to store epoch 2^31-1.
    result = run_seed(1, 3, 0, 2_500, hostile=overflow_plan((1, 2, 3)))
    assert not result.passed and "would become unattached at epoch 2147483647" in \
        result.violation


def test_a_plan_round_trips_through_its_replay_command():
    plan = [(10, 1, "vote", [99, "+1", 2**63]), (20, 2, "push", [])]
    assert plan_from_json(plan_to_json(plan)) == plan
    with pytest.raises(ValueError):
        plan_from_json('[[1, 2, "nonsense", []]]')
    with pytest.raises(ValueError):
        plan_from_json("not json")


def test_the_cli_replays_a_plan(capsys):
    plan = plan_to_json(overflow_plan((1, 2, 3)))
    assert main(["--seed", "2", "--duration-ms", "2000", "--hostile", plan]) == 0
    assert capsys.readouterr().out.startswith("passed 1 seeds")
    out = subprocess.run([sys.executable, "-m", "kraftcore.sim", "--seeds", "1..2",
                          "--hostile", plan], check=False, capture_output=True, text=True)
    assert out.returncode == 2 and "one seed" in out.stderr
