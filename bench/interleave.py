"""Interleaved rounds for benchmarks whose peers share something that drifts during a run
(the disk's fsync time, the machine's load): every peer runs one round in turn, in a
rotating order, so each sees the same conditions; pytest-benchmark is then handed the
measured times through `ReplayTimer`, so its statistics are those of those rounds.

Used by test_bench_log.py (group commit against raw write + fdatasync) and
test_bench_verify.py (Spark's start against the JVM's own).
"""

__all__ = ["interleaved", "ReplayTimer", "REPLAY"]


def interleaved(peers, rounds):
    """Run `rounds` rounds of every callable in `peers` (name -> callable), one of each per
    round, the order rotated by one each round. Returns name -> list of what each call
    returned, in round order."""
    order = list(peers)
    samples = {name: [] for name in order}
    for r in range(rounds):
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            samples[name].append(peers[name]())
    return samples


class ReplayTimer:
    """A pytest-benchmark timer (`@pytest.mark.benchmark(timer=REPLAY)`) that replays times
    measured elsewhere: `replay(benchmark, seconds)` runs one round per time, each moving
    this clock on by that time."""

    def __init__(self):
        self.now = 0.0
        self.pending = []

    def __call__(self):
        return self.now

    def _step(self):
        self.now += self.pending.pop(0)

    def replay(self, benchmark, seconds):
        self.pending = list(seconds)
        benchmark.pedantic(self._step, rounds=len(self.pending))


REPLAY = ReplayTimer()
