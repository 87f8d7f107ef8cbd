"""High-watermark tracking of a partition leader (`kraftcore.broker.high_watermarks`): one
follower's fetch round over many partitions, the numpy kernel against a pure-Python dict
loop doing the same work, in the same run.

The load: one broker (1) leads 100,000 partitions, replication factor 3 (followers 2 and
3), every ISR all three, min.insync.replicas 2, the leader's log end offset far ahead
(10^12). Follower 3 has fetched up to the leader's end; follower 2 is the laggard, so its
fetch offset is every partition's HW and each of its fetch rounds moves the HW of every
partition it names by one. The offsets advance before every round, outside the timed call
(pytest-benchmark's `pedantic` setup): the timed call is exactly one
`on_follower_fetch(2, slots, fetch_offsets)` (numpy arrays in, numpy arrays out), or one
pass of the dict loop over Python lists.

Groups (the `records` of the suite's table = partitions whose HW moved in one call):

* `hw-fetch-100k-all-move`: a round naming all 100,000 partitions, all of which move (a
  full fetch while every partition has new data). Goal: < 10 ms.
* `hw-fetch-1k-all-move`: a round naming 1,000 of them (every 100th), all of which move
  (an incremental fetch session, KIP-227, names only partitions with changes). Goal: < 1 µs
  per moved partition.
* `hw-fetch-100k-1k-move`: a round naming all 100,000 while only those 1,000 advance (a
  full fetch in a mostly idle cluster): what naming partitions that do not move costs.

Peers: `kraftcore-numpy` (the kernel) and `python-dict` (one object per partition holding
a dict of replica LEOs and the ISR; per named partition: look it up, check the fetcher is a
follower, record the offset, and when the fetcher is in a large enough ISR take the min
over the ISR and keep it if it is higher). `test_peers_agree` checks that both return the
same moves on a mixed table (ISRs of 1 to 3, min ISR 1 to 3, followers behind and ahead).

At the end of the run this file prints min and median of each peer, the ratio dict / numpy
(median), the cost per moved partition, and the two goals as MET / NOT MET. Nothing
asserts on a timing.
"""

import random

import numpy as np
import pytest

from kraftcore.broker.high_watermarks import HighWatermarks

PARTITIONS = 100_000
MOVED_SUBSET = 1_000
LEADER, LAGGARD, AHEAD = 1, 2, 3
LEADER_END_OFFSET = 10**12
GOAL_FULL_ROUND_S = 10e-3
GOAL_PER_MOVED_S = 1e-6
ROUNDS = {  # (group, peer) -> rounds; each after 2 warm-up rounds
    ("hw-fetch-100k-all-move", "kraftcore-numpy"): 100,
    ("hw-fetch-100k-all-move", "python-dict"): 10,
    ("hw-fetch-1k-all-move", "kraftcore-numpy"): 1000,
    ("hw-fetch-1k-all-move", "python-dict"): 200,
    ("hw-fetch-100k-1k-move", "kraftcore-numpy"): 100,
    ("hw-fetch-100k-1k-move", "python-dict"): 10,
}
PEERS = ("kraftcore-numpy", "python-dict")
_STATE = {}  # (group, peer) -> (min s, median s, moved per call)


# ------------------------------------------------------------------------------ the peer


class DictPartition:
    __slots__ = ("hw", "isr", "leader", "leo", "min_isr_effective")

    def __init__(self, replicas, isr, leader, leader_end_offset, hw, min_isr):
        self.leader = leader
        self.isr = tuple(isr)
        self.min_isr_effective = min(min_isr, len(replicas))
        self.leo = dict.fromkeys(replicas, hw)
        self.leo[leader] = leader_end_offset
        self.hw = hw


def dict_follower_fetch(partitions, replica_id, slots, fetch_offsets):
    """The same work as HighWatermarks.on_follower_fetch, as a plain Python loop."""
    moved_slots, new_hws = [], []
    for slot, offset in zip(slots, fetch_offsets):
        p = partitions[slot]
        leo = p.leo
        if replica_id not in leo or replica_id == p.leader or offset < 0:
            raise ValueError(f"bad fetch of broker {replica_id} for slot {slot}")
        leo[replica_id] = offset
        isr = p.isr
        if replica_id in isr and len(isr) >= p.min_isr_effective:
            candidate = min([leo[b] for b in isr])
            if candidate > p.hw:
                p.hw = candidate
                moved_slots.append(slot)
                new_hws.append(candidate)
    return moved_slots, new_hws


# ------------------------------------------------------------------------------ the load


class Load:
    """One peer's table and the laggard's current fetch offsets (advanced by every round,
    whichever group runs it: the HW always equals them, so every advance moves it)."""

    def __init__(self, peer):
        self.peer = peer
        replicas = [LEADER, LAGGARD, AHEAD]
        if peer == "kraftcore-numpy":
            self.table = HighWatermarks(replicas_max=8, capacity=PARTITIONS)
            slots = [self.table.add(replicas, replicas, LEADER, LEADER_END_OFFSET, 0, 2)
                     for _ in range(PARTITIONS)]
            self.slots = np.array(slots, dtype=np.int64)
            self.table.on_follower_fetch(AHEAD, self.slots,
                                         np.full(PARTITIONS, LEADER_END_OFFSET))
            self.offsets = np.zeros(PARTITIONS, dtype=np.int64)
        else:
            self.table = {s: DictPartition(replicas, replicas, LEADER, LEADER_END_OFFSET, 0, 2)
                          for s in range(PARTITIONS)}
            self.slots = list(range(PARTITIONS))
            dict_follower_fetch(self.table, AHEAD, self.slots,
                                [LEADER_END_OFFSET] * PARTITIONS)
            self.offsets = [0] * PARTITIONS
        self.subset = list(range(0, PARTITIONS, PARTITIONS // MOVED_SUBSET))

    def fetch(self, slots, offsets):
        if self.peer == "kraftcore-numpy":
            return self.table.on_follower_fetch(LAGGARD, slots, offsets)
        return dict_follower_fetch(self.table, LAGGARD, slots, offsets)

    def round_all(self):
        """Setup of a round naming every partition, all advancing by one."""
        if self.peer == "kraftcore-numpy":
            self.offsets += 1
            return (self.slots, self.offsets), {}
        self.offsets = [o + 1 for o in self.offsets]
        return (self.slots, self.offsets), {}

    def round_subset(self):
        """Setup of a round naming the subset only, all of it advancing by one."""
        if self.peer == "kraftcore-numpy":
            sub = self.slots[self.subset]
            self.offsets[sub] += 1
            return (sub, self.offsets[sub]), {}
        for s in self.subset:
            self.offsets[s] += 1
        return (self.subset, [self.offsets[s] for s in self.subset]), {}

    def round_all_subset_moves(self):
        """Setup of a round naming every partition while only the subset advances."""
        if self.peer == "kraftcore-numpy":
            self.offsets[self.slots[self.subset]] += 1
            return (self.slots, self.offsets), {}
        offsets = list(self.offsets)  # a fresh list, as a new request would bring
        for s in self.subset:
            offsets[s] += 1
        self.offsets = offsets
        return (self.slots, self.offsets), {}


@pytest.fixture(scope="module")
def loads():
    return {}


def _load(loads, peer):
    if peer not in loads:
        loads[peer] = Load(peer)
    return loads[peer]


def _run(benchmark, loads, group, peer, setup_name, expected_moved):
    load = _load(loads, peer)
    moved, _ = benchmark.pedantic(load.fetch, setup=getattr(load, setup_name),
                                  rounds=ROUNDS[(group, peer)], warmup_rounds=2)
    assert len(moved) == expected_moved
    benchmark.extra_info.update(peer=peer, records=expected_moved)
    stats = benchmark.stats
    if stats is not None and stats.stats.data:
        _STATE[(group, peer)] = (stats.stats.min, stats.stats.median, expected_moved)


@pytest.mark.benchmark(group="hw-fetch-100k-all-move")
@pytest.mark.parametrize("peer", PEERS)
def test_fetch_round_100k_all_move(benchmark, loads, peer):
    _run(benchmark, loads, "hw-fetch-100k-all-move", peer, "round_all", PARTITIONS)


@pytest.mark.benchmark(group="hw-fetch-1k-all-move")
@pytest.mark.parametrize("peer", PEERS)
def test_fetch_round_1k_all_move(benchmark, loads, peer):
    _run(benchmark, loads, "hw-fetch-1k-all-move", peer, "round_subset", MOVED_SUBSET)


@pytest.mark.benchmark(group="hw-fetch-100k-1k-move")
@pytest.mark.parametrize("peer", PEERS)
def test_fetch_round_100k_1k_move(benchmark, loads, peer):
    _run(benchmark, loads, "hw-fetch-100k-1k-move", peer, "round_all_subset_moves",
         MOVED_SUBSET)


def test_peers_agree():
    """The dict loop does the kernel's work: the same moves and HWs, round after round, on
    a mixed table (ISRs of 1 to 3, min ISR 1 to 3, followers behind and ahead)."""
    rng = random.Random(0x6877)
    table, parts = HighWatermarks(), {}
    for _ in range(2000):
        replicas = rng.sample(range(5), 3)
        leader = replicas[0]
        isr = [leader] + [b for b in replicas[1:] if rng.random() < 0.7]
        leo = rng.randrange(100, 200)
        hw = rng.randrange(0, 100)
        min_isr = rng.randrange(1, 4)
        slot = table.add(replicas, isr, leader, leo, hw, min_isr)
        parts[slot] = DictPartition(replicas, isr, leader, leo, hw, min_isr)
        parts[slot].hw = table.high_watermark(slot)  # an ISR of the leader alone moves at add
    for _ in range(20):
        replica = rng.randrange(5)
        slots = [s for s, p in parts.items() if replica in p.leo and replica != p.leader]
        rng.shuffle(slots)
        slots = slots[:rng.randrange(len(slots) + 1)]
        offsets = [rng.randrange(0, 220) for _ in slots]
        moved, new = table.on_follower_fetch(replica, np.array(slots, dtype=np.int64),
                                             np.array(offsets, dtype=np.int64))
        assert (moved.tolist(), new.tolist()) == dict_follower_fetch(parts, replica, slots,
                                                                     offsets)
    assert all(table.high_watermark(s) == p.hw for s, p in parts.items())


# ------------------------------------------------------------------------------ summary


def _fmt(seconds):
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.1f} us"
    return f"{seconds * 1e9:.0f} ns"


def terminal_summary(tr):
    """Min and median of each peer, dict / numpy, per moved partition, and the goals."""
    if not _STATE:
        return
    tr.write_line("")
    groups = dict.fromkeys(g for g, _ in _STATE)
    for group in groups:
        parts = []
        for peer in PEERS:
            found = _STATE.get((group, peer))
            if found is None:
                continue
            lo, median, moved = found
            parts.append(f"{peer} min {_fmt(lo)} median {_fmt(median)} "
                         f"({_fmt(median / moved)} per moved partition)")
        numpy_ = _STATE.get((group, "kraftcore-numpy"))
        dict_ = _STATE.get((group, "python-dict"))
        if numpy_ and dict_:
            parts.append(f"python-dict / kraftcore-numpy {dict_[1] / numpy_[1]:.1f}x")
        tr.write_line(f"{group}: " + "; ".join(parts))
    full = _STATE.get(("hw-fetch-100k-all-move", "kraftcore-numpy"))
    goal = f"a fetch round moving 100k partitions < {GOAL_FULL_ROUND_S * 1e3:g} ms"
    if full is None:
        tr.write_line(f"high-watermark goal NOT MEASURED: {goal}")
    else:
        status = "MET" if full[1] < GOAL_FULL_ROUND_S else "NOT MET"
        tr.write_line(f"high-watermark goal {status}: {goal} -- median {_fmt(full[1])}")
    sub = _STATE.get(("hw-fetch-1k-all-move", "kraftcore-numpy"))
    goal = f"a round moving 1k partitions < {GOAL_PER_MOVED_S * 1e6:g} us per moved partition"
    if sub is None:
        tr.write_line(f"high-watermark goal NOT MEASURED: {goal}")
    else:
        per = sub[1] / sub[2]
        status = "MET" if per < GOAL_PER_MOVED_S else "NOT MET"
        tr.write_line(f"high-watermark goal {status}: {goal} -- {_fmt(per)} (median "
                      f"{_fmt(sub[1])} per call)")
