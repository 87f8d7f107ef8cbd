"""The data-plane simulator (kraftcore.sim.data_plane): three brokers' real ReplicaManagers
and logs, a real controller, producers and consumers under crashes that lose unflushed
writes, pauses, partitions and message loss; its invariants (kraftcore.sim.data_checks)
after every event; the scripted scenarios (kraftcore.sim.data_scenarios) with their
transcripts; and proof that the checker catches a broken partition leader.

The fast set runs 300 seeds (1 s of faults each, two worker processes); the `slow` set
10 000 (`pytest -m slow tests/sim/test_data_plane_sim.py`). A failing seed's report carries
the command that replays it (`python -m kraftcore.sim.data_plane --seed N --trace ...`).
"""

import collections
import os

import pytest

from kraftcore.broker.partition import Partition
from kraftcore.sim.data_plane import main, run_seed, run_seeds
from kraftcore.sim.data_scenarios import run_scenario

from tests.harness.transcript import assert_transcript

FAST_SEEDS = range(1, 301)
FAST_DURATION_MS = 1000
SLOW_SEEDS = range(100_000, 110_000)
JOBS = max(1, min(2, os.cpu_count() or 1))


def _failures(results):
    return [r.report() for r in results if not r.passed]


@pytest.fixture(scope="module")
def fast_results():
    return list(run_seeds(FAST_SEEDS, FAST_DURATION_MS, jobs=JOBS))


def test_fast_seeds(fast_results):
    failures = _failures(fast_results)
    assert not failures, (f"{len(failures)} of {len(FAST_SEEDS)} seeds failed:\n"
                          + "\n".join(failures))


def test_the_fast_seeds_exercise_the_faults(fast_results):
    total = collections.Counter()
    for r in fast_results:
        total.update({k: v for k, v in r.stats.items() if isinstance(v, int)})
    assert len(fast_results) >= 300
    assert total["acked_all"] > 10_000 and total["acked_1"] > 5_000
    assert total["consumed"] > 10_000
    assert total["lossy_crashes"] > 50 and total["clean_restarts"] > 10
    assert total["pauses"] > 50 and total["partitions"] > 50 and total["dropped"] > 1000
    assert total["idempotent_duplicates"] == 0
    assert total["lost_acked_all"] == 0  # unclean election is off in the random runs
    assert total["duplicates"] > 0 and total["lost_acks_1"] > 0  # what retries and acks=1 cost


@pytest.mark.slow
def test_slow_seeds():
    failures = _failures(run_seeds(SLOW_SEEDS, jobs=JOBS))
    assert not failures, (f"{len(failures)} of {len(SLOW_SEEDS)} seeds failed:\n"
                          + "\n".join(failures))


def test_a_seed_replays_the_identical_trace():
    first, again, other = run_seed(7, 800), run_seed(7, 800), run_seed(8, 800)
    assert first.passed and again.passed
    assert first.trace_hash == again.trace_hash and first.stats == again.stats
    assert other.trace_hash != first.trace_hash


def test_the_command_line(capsys):
    assert main(["--seeds", "3..4", "--duration-ms", "500"]) == 0
    assert "passed 2 seeds" in capsys.readouterr().out


# ---------------------------------------------------------------------- scenarios

def _scenario(name):
    result = run_scenario(name)
    print(result.text())  # the transcript, shown with -s or when the test fails
    assert result.violation is None, result.text()
    assert len(result.transcript) > 20
    return result


def test_a_acks_all_leader_crash_loses_nothing_acknowledged():
    r = _scenario("a")
    o = r.outcome
    assert o["leader_crashes"] == 4 and o["acked_all"] > 100
    assert o["lost_acked"] == 0
    assert o["duplicates_idempotent"] == 0
    assert o["duplicates_non_idempotent"] >= 1  # a retried batch the new leader had already
    assert_transcript(r, """
        scenario: the leader holds an unacknowledged batch of the non-idempotent producer *
        scenario: crash leader * (losing unflushed writes) before it answers *
        broker * CRASHES (losing unflushed writes): *
        controller: t-0 leader * epoch 1 isr *
        scenario: a new leader, and every replica back in the ISR
        scenario: the leader holds an unacknowledged batch of the idempotent producer *
    """)


def test_b_acks_1_unreplicated_record_is_lost_with_its_leader():
    r = _scenario("b")
    o = r.outcome
    assert o["acked_1_unreplicated"] > 0 and o["lost_acks_1"] > 0
    assert o["lost_acks_1"] <= o["acked_1_unreplicated"]
    assert_transcript(r, """
        scenario: followers * paused (SIGSTOP); leader * goes on acknowledging acks=1 *
        scenario: * records acknowledged at offsets >= * crash leader *
        controller: t-0 leader * epoch 1 isr *
        broker *: t-0 truncated from * to * (leader *)
    """)


def test_c_isr_shrinks_after_the_lag_time_and_grows_back():
    r = _scenario("c")
    o = r.outcome
    assert o["shrink_after_caught_up_ms"] > o["lag_ms"]  # Kafka's isCaughtUp rule
    assert o["acked_all_while_shrunk"] > 0  # two replicas still meet min ISR 2
    assert o["grown_at"] > o["resumed_at"]
    assert o["follower_end_at_expand"] >= o["leader_hw_at_expand"]
    assert_transcript(r, """
        scenario: follower * paused; *
        broker *: asks to change the ISR of t-0 from [*] to [*]
        controller: t-0 leader * epoch 0 isr *
        scenario: the ISR without broker *
        scenario: follower * resumes
        broker *: asks to change the ISR of t-0 from * to *
        scenario: broker * back in the ISR
    """)


def test_d_min_isr_refuses_acks_all_and_hides_acks_1_until_the_isr_recovers():
    r = _scenario("d")
    o = r.outcome
    assert o["not_enough_replicas"] > 0
    assert o["acks_1_while_isr_1"] > 0 and o["log_end_grew_by"] > 0
    assert o["hw_frozen"] and o["consumer_saw_none_while_frozen"]
    assert o["visible_after_recovery"]
    assert_transcript(r, """
        scenario: the ISR is the leader * alone
        scenario: * acks=all NOT_ENOUGH_REPLICAS, * acks=1 records appended *
        scenario: every replica back in the ISR
        scenario: the consumer has read past offset *
    """)


def test_e_unclean_election_off_leaves_the_partition_offline():
    r = _scenario("e_off")
    o = r.outcome
    assert o["offline"] and o["isr"] == [] and o["acked_while_offline"] == 0
    assert o["lost_committed_records"] == 0 and o["lost_acked_all"] == 0
    assert_transcript(r, """
        scenario: the ISR is [*]
        broker * CRASHES (writes kept): *
        controller: t-0 leader none (offline) epoch 1 isr []
        scenario: broker * registered again and unfenced
    """)


def test_e_unclean_election_on_elects_outside_the_isr_and_counts_the_loss():
    r = _scenario("e_on")
    o = r.outcome
    assert o["recovering"] == 1
    assert o["lost_committed_records"] > 0 and o["lost_acked_all"] > 0
    assert o["lost_committed_records"] <= o["committed_by_leader_alone"]
    assert_transcript(r, """
        controller: t-0 leader * epoch 1 isr [*] RECOVERING (unclean leader)
        broker *: t-0 truncated from * to * (leader *)
        unclean leader: * committed records of partition t-0 lost from offset *
    """)


# ---------------------------------------------------------------------- the checker

def test_the_checker_catches_a_leader_that_ignores_its_followers(monkeypatch):
    """A partition whose high watermark follows the leader's log end offset alone (the HW
    rule broken): acknowledged records are then not on the ISR, and a crash loses them."""

    def broken_take_hw(self, hw):
        log = self.log
        if log.log_end_offset > log.high_watermark:
            log.update_high_watermark(log.log_end_offset)
            return True
        return False

    monkeypatch.setattr(Partition, "_take_hw", broken_take_hw)
    results = [run_seed(seed, 1000) for seed in range(1, 6)]
    failed = [r for r in results if not r.passed]
    assert failed, "the broken high-watermark rule went unnoticed"
    report = failed[0].report()
    assert "lacks committed records" in report or "acks=all acknowledgement" in report \
        or "disagrees with the committed log" in report, report
    assert f"python -m kraftcore.sim.data_plane --seed {failed[0].seed}" in report


def test_the_checker_catches_a_high_watermark_that_goes_down(monkeypatch):
    """A follower fetch that resets the leader's high watermark to the follower's offset."""
    from kraftcore.broker import replicas as replicas_module

    real = replicas_module.ReplicaManager.follower_fetch

    def lowering(self, replica_id, broker_epoch, fetches, now_ms):
        out = real(self, replica_id, broker_epoch, fetches, now_ms)
        for partition, offset, _ in fetches:
            log = partition.log
            if partition.is_leader and 0 < offset < log.high_watermark:
                log.update_high_watermark(offset)
        return out

    monkeypatch.setattr(replicas_module.ReplicaManager, "follower_fetch", lowering)
    results = [run_seed(seed, 800) for seed in range(1, 4)]
    failed = [r for r in results if not r.passed]
    assert failed and any("went down" in r.violation for r in failed), \
        [r.violation for r in results]
