"""HighWatermarks (`kraftcore.broker.high_watermarks`): the leader's HW rules of
kafka-broker-facts §C.1 one by one (min over the ISR, replicas outside the ISR, strict min
ISR, monotonic HW, followers that never fetched), bad input, slot reuse and growth, and a
stateful hypothesis test against a dict-based model over random operation sequences."""

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kraftcore.broker.high_watermarks import HighWatermarks


def table(**kwargs):
    return HighWatermarks(**kwargs)


def leader_of_three(hws, isr=(1, 2, 3), leo=100, hw=10, min_isr=1):
    """A partition led by broker 1, followers 2 and 3."""
    return hws.add([1, 2, 3], list(isr), 1, leo, hw, min_isr)


def fetch(hws, replica, slots, offsets):
    moved, new = hws.on_follower_fetch(replica, slots, offsets)
    assert moved.dtype == np.int64 and new.dtype == np.int64
    return dict(zip(moved.tolist(), new.tolist()))


# ------------------------------------------------------------------ the rules


def test_hw_is_min_of_leader_and_isr_followers():
    hws = table()
    s = leader_of_three(hws)
    assert hws.high_watermark(s) == 10
    assert fetch(hws, 2, [s], [50]) == {}  # follower 3 still at 10 (its last known LEO)
    assert fetch(hws, 3, [s], [40]) == {s: 40}
    assert fetch(hws, 3, [s], [120]) == {s: 50}  # now follower 2 holds it
    assert fetch(hws, 2, [s], [120]) == {s: 100}  # capped by the leader's LEO
    assert hws.high_watermark(s) == 100
    assert hws.on_leader_append(s, 110) == 110  # both followers were already ahead
    assert hws.on_leader_append(s, 130) == 120
    assert hws.on_leader_append(s, 130) is None


def test_replicas_outside_the_isr_do_not_hold_the_hw_back():
    hws = table()
    s = leader_of_three(hws, isr=(1, 2))
    assert fetch(hws, 3, [s], [0]) == {}  # recorded, moves nothing
    assert hws.follower_end_offset(s, 3) == 0
    assert fetch(hws, 2, [s], [60]) == {s: 60}
    # Joining the ISR (maximal ISR: a pending addition) with a low LEO cannot lower it.
    assert hws.set_isr(s, [1, 2, 3]) is None
    assert hws.high_watermark(s) == 60
    assert fetch(hws, 2, [s], [90]) == {}
    # Leaving it again lets the HW go to the remaining members' minimum.
    assert hws.set_isr(s, [2, 1]) == 90


def test_no_move_while_the_isr_is_below_the_effective_min_isr():
    hws = table()
    s = leader_of_three(hws, isr=(1,), min_isr=2)
    assert hws.high_watermark(s) == 10  # frozen from the start
    assert hws.on_leader_append(s, 200) is None
    assert fetch(hws, 2, [s], [150]) == {}  # not in the ISR, and the ISR is too small
    assert hws.high_watermark(s) == 10
    assert hws.set_isr(s, [1, 2]) == 150  # the ISR reaches min_isr: min(200, 150)
    assert hws.set_isr(s, [1]) is None
    assert hws.on_leader_append(s, 300) is None
    assert hws.high_watermark(s) == 150
    assert hws.set_min_isr(s, 1) == 300  # a lower minimum lets it go
    assert hws.set_min_isr(s, 3) is None
    assert hws.on_leader_append(s, 400) is None


def test_a_frozen_hw_stays_when_an_isr_follower_fetches():
    hws = table()
    s = leader_of_three(hws, isr=(1, 2), min_isr=3)
    frozen_too = leader_of_three(hws, isr=(1, 2, 3), min_isr=3)
    moving = leader_of_three(hws, isr=(1, 2), min_isr=2)
    assert fetch(hws, 2, [s, frozen_too, moving], [50, 60, 70]) == {moving: 70}
    assert hws.high_watermark(s) == 10
    assert hws.set_isr(frozen_too, [1, 2]) is None
    assert fetch(hws, 3, [frozen_too], [80]) == {}  # out of the ISR now


def test_effective_min_isr_is_capped_by_the_replication_factor():
    hws = table()
    s = hws.add([7], [7], 7, 50, 0, 3)  # min_isr 3, one replica: effective min ISR 1
    assert hws.high_watermark(s) == 50  # the ISR is the leader alone: HW = its LEO at once
    assert hws.on_leader_append(s, 60) == 60
    t = hws.add([1, 2], [1, 2], 2, 50, 5, 5)  # effective 2, ISR 2: not frozen
    assert fetch(hws, 1, [t], [30]) == {t: 30}
    assert hws.set_min_isr(t, 1) is None
    assert hws.min_isr(t) == 1


def test_hw_never_decreases_when_a_follower_truncates():
    hws = table()
    s = leader_of_three(hws)
    fetch(hws, 2, [s], [80])
    assert fetch(hws, 3, [s], [70]) == {s: 70}
    assert fetch(hws, 3, [s], [20]) == {}  # it truncated after a divergence
    assert hws.follower_end_offset(s, 3) == 20
    assert hws.high_watermark(s) == 70
    assert fetch(hws, 3, [s], [75]) == {s: 75}


def test_a_follower_that_never_fetched_holds_the_hw_at_the_given_one():
    hws = table()
    s = leader_of_three(hws, leo=100, hw=30)
    assert hws.follower_end_offset(s, 2) == -1
    assert hws.follower_end_offset(s, 3) == -1
    assert fetch(hws, 2, [s], [90]) == {}
    assert hws.high_watermark(s) == 30  # follower 3 is taken to be at 30
    assert hws.follower_end_offset(s, 2) == 90
    assert hws.follower_end_offset(s, 3) == -1


def test_a_fetch_round_returns_the_moved_slots_in_the_given_order():
    hws = table()
    slots = [leader_of_three(hws, isr=(1, 2)) for _ in range(5)]
    order = [slots[3], slots[0], slots[4], slots[1], slots[2]]
    moved, new = hws.on_follower_fetch(2, np.array(order, dtype=np.int32),
                                       np.array([50, 5, 60, 70, 80], dtype=np.uint32))
    assert moved.tolist() == [slots[3], slots[4], slots[1], slots[2]]  # 5 < 10: no move
    assert new.tolist() == [50, 60, 70, 80]
    assert [hws.high_watermark(s) for s in slots] == [10, 70, 80, 50, 60]
    moved, new = hws.on_follower_fetch(2, [], [])
    assert moved.tolist() == [] and new.tolist() == []


def test_a_fetch_offset_above_the_leader_leo_is_recorded_and_capped():
    hws = table()
    s = leader_of_three(hws, isr=(1, 3))
    assert fetch(hws, 3, [s], [500]) == {s: 100}
    assert hws.follower_end_offset(s, 3) == 500
    assert hws.leader_end_offset(s) == 100


def test_reads():
    hws = table()
    s = hws.add([4, 5, 6], [6, 4], 4, 9, 3, 2)
    assert hws.replicas(s) == [4, 5, 6]
    assert hws.isr(s) == [4, 6]
    assert hws.leader_end_offset(s) == 9
    assert hws.high_watermark(s) == 3
    assert len(hws) == 1


# ------------------------------------------------------------------ slots


def test_slots_are_reused_last_freed_first_and_storage_grows():
    hws = table(replicas_max=3, capacity=2)
    slots = [leader_of_three(hws, hw=i, leo=100 + i) for i in range(10)]
    assert slots == list(range(10)) and len(hws) == 10
    assert [hws.high_watermark(s) for s in slots] == list(range(10))
    hws.remove(3)
    hws.remove(7)
    assert len(hws) == 8
    with pytest.raises(ValueError, match="unknown slot 3"):
        hws.high_watermark(3)
    assert hws.add([9, 8], [8, 9], 8, 5, 5, 1) == 7
    assert hws.add([1, 2, 3], [1], 1, 1, 0, 1) == 3
    assert hws.add([1], [1], 1, 0, 0, 1) == 10
    # A reused slot starts clean: nothing of the removed partition is left.
    assert hws.replicas(7) == [9, 8] and hws.isr(7) == [9, 8]
    assert hws.follower_end_offset(7, 9) == -1
    assert hws.high_watermark(3) == 1 and hws.replicas(3) == [1, 2, 3]
    assert fetch(hws, 2, [0, 1, 2], [200, 200, 200]) == {}  # follower 3 holds them
    assert fetch(hws, 3, np.arange(3), [200, 200, 200]) == {0: 100, 1: 101, 2: 102}


def test_a_fetch_round_touches_only_the_named_slots():
    hws = table()
    a, b, c = (leader_of_three(hws, isr=(1, 2)) for _ in range(3))
    assert fetch(hws, 2, [b], [40]) == {b: 40}
    assert hws.high_watermark(a) == 10 and hws.high_watermark(c) == 10
    assert hws.follower_end_offset(a, 2) == -1 and hws.follower_end_offset(c, 2) == -1


# ------------------------------------------------------------------ bad input


def snapshot(hws, slots):
    return [(hws.high_watermark(s), hws.leader_end_offset(s), hws.isr(s),
             [hws.follower_end_offset(s, r) for r in hws.replicas(s)
              if r != hws.replicas(s)[0]]) for s in slots]


@pytest.mark.parametrize("replica, slots, offsets, message", [
    (2, [0, 1], [5, -1], "fetch offset -1 for slot 1 is negative"),
    (2, [0, 9], [5, 5], "unknown slot 9"),
    (2, [0, -1], [5, 5], "unknown slot -1"),
    (2, [0, 2], [5, 5], "unknown slot 2"),  # removed
    (2, [0, 1, 0], [5, 6, 7], "slot 0 is named more than once"),
    (4, [0, 1], [5, 5], "broker 4 is not a replica of slot\\(s\\) 0$"),
    (1, [0, 1], [5, 5], "broker 1 is the leader of slot 0"),
    (2, [0, 1], [5], "differ in length"),
    (2, [[0, 1]], [[5, 5]], "one-dimensional"),
    (2, [0], [2**64], "outside the int64 range"),
    (2, [0], np.array([2**63], dtype=np.uint64), "outside the int64 range"),
])
def test_a_bad_fetch_round_raises_value_error_and_changes_nothing(replica, slots, offsets,
                                                                 message):
    hws = table()
    leader_of_three(hws)
    hws.add([1, 2, 4], [1, 2, 4], 1, 100, 10, 1)
    leader_of_three(hws)
    hws.remove(2)
    before = snapshot(hws, [0, 1])
    with pytest.raises(ValueError, match=message):
        hws.on_follower_fetch(replica, slots, offsets)
    assert snapshot(hws, [0, 1]) == before


@pytest.mark.parametrize("replica, slots, offsets", [
    (2, [0], [5.0]),
    (2, [0.0], [5]),
    (2, [True], [5]),
    (2.0, [0], [5]),
    (True, [0], [5]),
    (2, ["0"], [5]),
])
def test_a_fetch_round_of_non_integers_raises_type_error(replica, slots, offsets):
    hws = table()
    leader_of_three(hws)
    with pytest.raises(TypeError):
        hws.on_follower_fetch(replica, slots, offsets)
    assert hws.follower_end_offset(0, 2) == -1


@pytest.mark.parametrize("args, error, message", [
    (([1, 2, 3, 4], [1], 1, 0, 0, 1), ValueError, "replicas_max=3"),
    (([], [], 1, 0, 0, 1), ValueError, "1 to replicas_max"),
    (([1, 2, 2], [1], 1, 0, 0, 1), ValueError, "more than once"),
    (([1, 2], [1], 3, 0, 0, 1), ValueError, "leader 3 is not one of the replicas"),
    (([1, 2], [1, 5], 1, 0, 0, 1), ValueError, "not replicas"),
    (([1, 2], [2], 1, 0, 0, 1), ValueError, "must hold the leader 1"),
    (([1, 2], [1, 1], 1, 0, 0, 1), ValueError, "more than once"),
    (([1, 2], [1], 1, -1, 0, 1), ValueError, "leader_end_offset"),
    (([1, 2], [1], 1, 5, -1, 1), ValueError, "high_watermark"),
    (([1, 2], [1], 1, 5, 6, 1), ValueError, "above the leader's log end offset"),
    (([1, 2], [1], 1, 5, 0, 0), ValueError, "min_isr must be >= 1"),
    (([1, -2], [1], 1, 5, 0, 1), ValueError, "outside"),
    (([1, 2], [1], 1, 5, 0, 1.5), TypeError, "min_isr"),
    (([1, 2], [1], 1, 5.0, 0, 1), TypeError, "leader_end_offset"),
    ((5, [1], 1, 5, 0, 1), TypeError, "replicas"),
    (([1, 2], [1], "1", 5, 0, 1), TypeError, "leader_id"),
])
def test_add_rejects_bad_input(args, error, message):
    hws = table(replicas_max=3)
    with pytest.raises(error, match=message):
        hws.add(*args)
    assert len(hws) == 0
    assert hws.add([1], [1], 1, 0, 0, 1) == 0  # no slot was used up


def test_the_other_calls_reject_bad_input_and_change_nothing():
    hws = table()
    s = leader_of_three(hws, isr=(1, 2), min_isr=2)
    fetch(hws, 2, [s], [50])
    before = snapshot(hws, [s])
    with pytest.raises(ValueError, match="cannot go down"):
        hws.on_leader_append(s, 99)
    with pytest.raises(ValueError, match="leader_end_offset"):
        hws.on_leader_append(s, -1)
    with pytest.raises(ValueError, match="unknown slot 5"):
        hws.on_leader_append(5, 200)
    with pytest.raises(TypeError):
        hws.on_leader_append("0", 200)
    with pytest.raises(ValueError, match="must hold the leader"):
        hws.set_isr(s, [2, 3])
    with pytest.raises(ValueError, match="not replicas"):
        hws.set_isr(s, [1, 9])
    with pytest.raises(ValueError, match="min_isr must be >= 1"):
        hws.set_min_isr(s, 0)
    with pytest.raises(ValueError, match="not a replica"):
        hws.follower_end_offset(s, 9)
    with pytest.raises(ValueError, match="is the leader"):
        hws.follower_end_offset(s, 1)
    with pytest.raises(ValueError, match="unknown slot"):
        hws.remove(1)
    assert snapshot(hws, [s]) == before and hws.min_isr(s) == 2
    hws.remove(s)
    with pytest.raises(ValueError, match="unknown slot"):
        hws.remove(s)
    with pytest.raises(ValueError):
        HighWatermarks(replicas_max=0)
    with pytest.raises(ValueError):
        HighWatermarks(capacity=0)


# ------------------------------------------------------------------ against a model

BROKERS = range(6)


class ModelPartition:
    """The rules written out plainly, one partition in dicts and sets."""

    def __init__(self, replicas, isr, leader, leo, hw, min_isr):
        self.replicas, self.isr, self.leader = list(replicas), set(isr), leader
        self.min_isr, self.hw = min_isr, hw
        self.leo = {b: hw for b in replicas}  # last known LEO, followers start at the HW
        self.leo[leader] = leo
        self.fetched = {}  # follower -> LEO reported by its last fetch

    def maybe_increment(self):
        if len(self.isr) < min(self.min_isr, len(self.replicas)):
            return None
        candidate = min(self.leo[b] for b in self.isr)
        if candidate > self.hw:
            self.hw = candidate
            return candidate
        return None


class HighWatermarksMachine(RuleBasedStateMachine):
    @initialize(replicas_max=st.integers(3, 5), capacity=st.integers(1, 4))
    def start(self, replicas_max, capacity):
        self.hws = HighWatermarks(replicas_max=replicas_max, capacity=capacity)
        self.replicas_max = replicas_max
        self.model = {}
        self.free = []
        self.high = 0

    @rule(data=st.data())
    def add(self, data):
        size = data.draw(st.integers(1, self.replicas_max))
        replicas = data.draw(st.permutations(BROKERS))[:size]
        leader = data.draw(st.sampled_from(replicas))
        others = [b for b in data.draw(st.permutations(replicas)) if b != leader]
        isr = [leader] + others[:data.draw(st.integers(0, len(others)))]
        leo = data.draw(st.integers(0, 50))
        hw = data.draw(st.integers(0, leo))
        min_isr = data.draw(st.integers(1, size + 1))
        slot = self.hws.add(replicas, isr, leader, leo, hw, min_isr)
        expected = self.free.pop() if self.free else self.high
        assert slot == expected
        self.high = max(self.high, slot + 1)
        part = self.model[slot] = ModelPartition(replicas, isr, leader, leo, hw, min_isr)
        part.maybe_increment()

    def _slot(self, data):
        return data.draw(st.sampled_from(sorted(self.model)))

    @rule(data=st.data())
    def remove(self, data):
        if not self.model:
            return
        slot = self._slot(data)
        self.hws.remove(slot)
        del self.model[slot]
        self.free.append(slot)

    @rule(data=st.data())
    def set_isr(self, data):
        if not self.model:
            return
        slot = self._slot(data)
        part = self.model[slot]
        others = data.draw(st.lists(st.sampled_from(part.replicas), unique=True))
        isr = [b for b in others if b != part.leader]
        isr.insert(data.draw(st.integers(0, len(isr))), part.leader)
        got = self.hws.set_isr(slot, isr)
        part.isr = set(isr)
        assert got == part.maybe_increment()

    @rule(data=st.data())
    def set_min_isr(self, data):
        if not self.model:
            return
        slot = self._slot(data)
        part = self.model[slot]
        part.min_isr = data.draw(st.integers(1, 4))
        assert self.hws.set_min_isr(slot, part.min_isr) == part.maybe_increment()

    @rule(data=st.data())
    def leader_append(self, data):
        if not self.model:
            return
        slot = self._slot(data)
        part = self.model[slot]
        part.leo[part.leader] += data.draw(st.integers(0, 30))
        assert self.hws.on_leader_append(slot, part.leo[part.leader]) == \
            part.maybe_increment()

    @rule(data=st.data(), as_numpy=st.booleans())
    def follower_fetch(self, data, as_numpy):
        """A fetch round of a broker that follows at least one slot, naming some of them
        (an empty round is a unit test)."""
        followers = sorted({b for p in self.model.values() for b in p.replicas
                            if b != p.leader})
        if not followers:
            return
        replica = data.draw(st.sampled_from(followers))
        following = [s for s, p in self.model.items()
                     if replica in p.replicas and replica != p.leader]
        slots = data.draw(st.lists(st.sampled_from(following), min_size=1, unique=True))
        offsets = [data.draw(st.integers(0, self.model[s].leo[self.model[s].leader] + 10))
                   for s in slots]
        if as_numpy:
            moved, new = self.hws.on_follower_fetch(replica, np.array(slots, dtype=np.int64),
                                                    np.array(offsets, dtype=np.int64))
        else:
            moved, new = self.hws.on_follower_fetch(replica, slots, offsets)
        expected = []
        for slot, offset in zip(slots, offsets):
            part = self.model[slot]
            part.leo[replica] = offset
            part.fetched[replica] = offset
            hw = part.maybe_increment()
            if hw is not None:
                expected.append((slot, hw))
        assert list(zip(moved.tolist(), new.tolist())) == expected

    @rule(data=st.data())
    def bad_fetch(self, data):
        """A round that names one slot the broker does not follow (or a slot twice, or a
        negative offset) raises ValueError and changes nothing (the invariant checks)."""
        if not self.model:
            return
        replica = data.draw(st.sampled_from(BROKERS))
        good = [s for s, p in self.model.items()
                if replica in p.replicas and replica != p.leader]
        bad = [s for s, p in self.model.items()
               if replica not in p.replicas or replica == p.leader]
        kind = data.draw(st.sampled_from(["not-a-follower", "twice", "negative"]))
        slots = data.draw(st.permutations(good))
        if kind == "not-a-follower":
            if not bad:
                return
            slots.insert(data.draw(st.integers(0, len(slots))), data.draw(st.sampled_from(bad)))
            match = f"broker {replica} is"
        elif kind == "twice":
            if not good:
                return
            slots.append(data.draw(st.sampled_from(good)))
            match = "more than once"
        else:
            if not good:
                return
            match = "negative"
        offsets = [1] * len(slots)
        if kind == "negative":
            offsets[data.draw(st.integers(0, len(slots) - 1))] = -1
        with pytest.raises(ValueError, match=match):
            self.hws.on_follower_fetch(replica, slots, offsets)

    @invariant()
    def agrees_with_the_model(self):
        assert len(self.hws) == len(self.model)
        for slot, part in self.model.items():
            assert self.hws.high_watermark(slot) == part.hw
            assert self.hws.leader_end_offset(slot) == part.leo[part.leader]
            assert part.hw <= part.leo[part.leader]
            assert self.hws.replicas(slot) == part.replicas
            assert set(self.hws.isr(slot)) == part.isr
            for b in part.replicas:
                if b != part.leader:
                    assert self.hws.follower_end_offset(slot, b) == part.fetched.get(b, -1)


HighWatermarksMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                                   deadline=None)
test_high_watermarks_agree_with_the_model = HighWatermarksMachine.TestCase
