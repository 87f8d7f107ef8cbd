"""Commit throughput of the Raft core alone, in the simulator without I/O
(`kraftcore.sim.throughput`): 3 (and 5) voters, the leader proposing one proposal of 100
records every simulated millisecond for 1000 simulated ms, so one call commits ~100,000
records through elections-free replication: Fetch long polls, follower appends, the
majority high watermark and commit delivery.

Peer in the same run, `codec-floor`: the codec work the same records cost with no Raft at
all — encoding each 100-record batch once and validating it once per follower (what the
followers' storage does). core / floor says what the Raft layer adds on top of the bytes.

The goal (>= 200 k records/s committed, 3 voters) is printed as MET / NOT MET with the
simulated events/s; nothing asserts on a timing.
"""

import pytest

from kraftcore import codec
from kraftcore.sim.throughput import run_throughput

VALUES_PER_PROPOSAL = 100
DURATION_MS = 1000
GOAL_RECORDS_PER_S = 200_000
ROUNDS = 5
_STATE = {}


def _values():
    return [bytes([i % 256]) * 16 for i in range(VALUES_PER_PROPOSAL)]


@pytest.mark.benchmark(group="raft-commit-100k")
@pytest.mark.parametrize("voters", [3, 5])
def test_core_commit_throughput(benchmark, voters):
    def run():
        return run_throughput(voters=voters, proposals_per_ms=1,
                              values_per_proposal=VALUES_PER_PROPOSAL, duration_ms=DURATION_MS)

    result = benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=1)
    # A fault-free quorum commits all but the last millisecond or two of proposals.
    assert result.committed_records >= (DURATION_MS - 5) * VALUES_PER_PROPOSAL
    benchmark.extra_info.update(peer=f"kraftcore-core-{voters}-voters",
                                records=result.committed_records, events=result.events)
    _STATE[voters] = (benchmark.stats.stats.median, result)


@pytest.mark.benchmark(group="raft-commit-100k")
def test_codec_floor(benchmark):
    values = _values()
    proposals = DURATION_MS

    def run():
        for i in range(proposals):
            batch = codec.encode_batch(values, base_offset=i * VALUES_PER_PROPOSAL,
                                       leader_epoch=1, timestamp=i)
            codec.validate_batches(batch)
            codec.validate_batches(batch)
        return proposals * VALUES_PER_PROPOSAL

    records = benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=1)
    benchmark.extra_info.update(peer="codec-floor", records=records)
    _STATE["floor"] = (benchmark.stats.stats.median, records)


def terminal_summary(tr):
    """What this file prints after the suite's summary table (conftest.py)."""
    if not _STATE:
        return
    tr.write_line("")
    floor = _STATE.get("floor")
    floor_rate = floor[1] / floor[0] if floor else None
    for voters in (3, 5):
        if voters not in _STATE:
            continue
        median, result = _STATE[voters]
        rate = result.committed_records / median
        line = (f"raft core, {voters} voters: {rate / 1e3:,.0f} k records/s committed, "
                f"{result.events / median / 1e3:,.1f} k simulated events/s "
                f"({result.events} events per {result.simulated_ms} simulated ms)")
        if floor_rate:
            line += f"; codec floor {floor_rate / 1e3:,.0f} k records/s, core/floor " \
                    f"{rate / floor_rate:.2f}x"
        tr.write_line(line)
    if 3 in _STATE:
        median, result = _STATE[3]
        rate = result.committed_records / median
        status = "MET" if rate >= GOAL_RECORDS_PER_S else "NOT MET"
        tr.write_line(f"raft goal {status}: core commit throughput >= "
                      f"{GOAL_RECORDS_PER_S / 1e3:g} k records/s (3 voters, proposals of "
                      f"{VALUES_PER_PROPOSAL}) -- {rate / 1e3:,.0f} k/s")
