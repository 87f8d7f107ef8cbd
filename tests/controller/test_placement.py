"""Striped replica placement (kafka-facts §8.5)."""

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore.controller.placement import StripedReplicaPlacer
from kraftcore.errors import ControllerError
from kraftcore.protocol.error_codes import ErrorCode


class ZeroOffsets:
    """An rng whose every offset is 0, to make placements readable."""

    def randrange(self, n):
        return 0


def place(brokers, partitions, rf, rng=None):
    return StripedReplicaPlacer().place(brokers, partitions, rf, rng or ZeroOffsets())


# Racks A, B, C with brokers A0 A1 A2 = 0 1 2, B0 B1 B2 = 10 11 12, C0 C1 C2 = 20 21 22,
# given in a scrambled order: the placer sorts racks and brokers itself.
THREE_RACKS = [(b, rack, False) for rack, base in (("C", 20), ("A", 0), ("B", 10))
               for b in (base + 2, base, base + 1)]


def test_the_worked_example():
    # p0 = A0, B0, C0; p1 = B1, C1, A1; p2 = C2, A2, B2
    assert place(THREE_RACKS, 3, 3) == [[0, 10, 20], [11, 21, 1], [22, 2, 12]]


def test_striping_wraps_around_racks_and_brokers():
    # p3 stripes A0, B0, C0 again; A0 already leads p0, so B0 (leading nothing) goes first.
    assert place(THREE_RACKS, 4, 3)[3] == [10, 0, 20]
    assert place(THREE_RACKS, 3, 2) == [[0, 10], [11, 20], [21, 1]]


def test_a_replication_factor_above_the_rack_count_reuses_racks_with_other_brokers():
    brokers = [(0, "A", False), (1, "A", False), (10, "B", False)]
    assert place(brokers, 2, 3) == [[0, 10, 1], [10, 0, 1]]


def test_leaderships_rotate_when_racks_serve_leaders_and_followers_alike():
    # three racks of two brokers, RF 2: each rack gives one leader and one follower per three
    # partitions, so plain striping would always make the same broker of a rack the leader.
    brokers = [(b, "rack-%d" % (b % 3), False) for b in range(6)]
    placements = place(brokers, 6, 2)
    assert placements == [[0, 1], [4, 2], [5, 3], [1, 0], [2, 4], [3, 5]]
    assert sorted(p[0] for p in placements) == [0, 1, 2, 3, 4, 5]


def test_brokers_without_a_rack_form_one_group_sorted_first():
    brokers = [(5, "r", False), (1, None, False), (2, None, False)]
    assert place(brokers, 2, 2) == [[1, 5], [5, 2]]


def test_the_leader_is_never_fenced():
    # rack A holds only a fenced broker: the leader comes from the next rack, and A's fenced
    # broker serves only as a follower.
    brokers = [(0, "A", True), (10, "B", False), (20, "C", False)]
    assert place(brokers, 3, 3) == [[10, 20, 0], [20, 10, 0], [20, 0, 10]]


def test_fenced_brokers_are_used_only_when_a_rack_has_no_unfenced_one_left():
    brokers = [(0, "A", False), (1, "A", True), (2, "A", False)]
    assert place(brokers, 2, 2) == [[0, 2], [2, 0]]
    assert place(brokers, 1, 3) == [[0, 2, 1]]


@pytest.mark.parametrize("rf, words", [
    (0, "at least 1"), (-1, "at least 1"), (10, "only 9 are registered"),
])
def test_impossible_replication_factors(rf, words):
    with pytest.raises(ControllerError, match=words) as excinfo:
        place(THREE_RACKS, 1, rf)
    assert excinfo.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_no_unfenced_broker():
    with pytest.raises(ControllerError, match="no unfenced brokers") as excinfo:
        place([(1, None, True), (2, None, True)], 1, 1)
    assert excinfo.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_no_broker_at_all():
    with pytest.raises(ControllerError) as excinfo:
        place([], 1, 1)
    assert excinfo.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_partition_counts():
    assert place(THREE_RACKS, 0, 3) == []
    with pytest.raises(ControllerError) as excinfo:
        place(THREE_RACKS, -1, 3)
    assert excinfo.value.code == ErrorCode.INVALID_PARTITIONS


def test_a_broker_listed_twice_is_refused():
    with pytest.raises(ValueError, match="twice"):
        place([(1, "A", False), (1, "B", False)], 1, 1)


def test_the_same_seed_gives_the_same_placement():
    a = place(THREE_RACKS, 20, 3, random.Random(7))
    assert a == place(THREE_RACKS, 20, 3, random.Random(7))
    assert a != place(THREE_RACKS, 20, 3, random.Random(8))


@pytest.mark.parametrize("rf", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_even_spread_over_six_brokers_in_three_racks(rf, seed):
    brokers = [(b, "rack-%d" % (b % 3), False) for b in range(6)]
    placements = place(brokers, 600, rf, random.Random(seed))
    replicas = Counter(b for replica_list in placements for b in replica_list)
    leaders = Counter(replica_list[0] for replica_list in placements)
    assert max(replicas.values()) - min(replicas.values()) <= 1, replicas
    assert len(leaders) == 6 and max(leaders.values()) - min(leaders.values()) <= 1, leaders
    for replica_list in placements:
        assert len({b % 3 for b in replica_list}) == min(rf, 3)


@settings(max_examples=200, deadline=None)
@given(brokers=st.dictionaries(st.integers(0, 30),
                               st.tuples(st.sampled_from([None, "a", "b", "c", "d"]),
                                         st.booleans()),
                               min_size=1, max_size=12),
       partitions=st.integers(0, 40), rf=st.integers(1, 12), seed=st.integers(0, 2 ** 32))
def test_placement_constraints(brokers, partitions, rf, seed):
    listed = [(b, rack, fenced) for b, (rack, fenced) in brokers.items()]
    unfenced = {b for b, (_, fenced) in brokers.items() if not fenced}
    if rf > len(brokers) or not unfenced:
        with pytest.raises(ControllerError) as excinfo:
            place(listed, partitions, rf, random.Random(seed))
        assert excinfo.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
        return
    racks = {rack for rack, _ in brokers.values()}
    for replica_list in place(listed, partitions, rf, random.Random(seed)):
        assert len(replica_list) == rf
        assert len(set(replica_list)) == rf
        assert set(replica_list) <= brokers.keys()
        assert replica_list[0] in unfenced
        spanned = {brokers[b][0] for b in replica_list}
        assert len(spanned) == min(rf, len(racks))
