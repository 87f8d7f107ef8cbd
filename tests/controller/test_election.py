"""Leader election and ISR changes (kafka-facts §8.4, §8.3): readable cases for each rule,
then properties over random partitions and over random fence / unfence histories."""

import re

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore.controller.election import (
    ONLINE, PREFERRED, UNCLEAN, build_change, elect_for_leaderless, elect_leader,
    remove_from_isr,
)
from kraftcore.errors import ControllerError
from kraftcore.metadata.partition import (
    DIRECTORY_UNASSIGNED, RECOVERED, RECOVERING, apply_change, check_partition,
)
from kraftcore.metadata.records import PartitionChangeRecord, PartitionRecord
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import Uuid

TOPIC = Uuid(bytes(range(16)))
DIRS = {b: Uuid(bytes(15) + bytes([b])) for b in range(1, 10)}


def partition(replicas=(1, 2, 3), isr=None, leader=None, **more):
    replicas = list(replicas)
    isr = list(replicas if isr is None else isr)
    if leader is None:
        leader = isr[0]
    values = dict(partition_id=7, topic_id=TOPIC, replicas=replicas, isr=isr,
                  leader=leader, leader_epoch=4, partition_epoch=10,
                  directories=[DIRS[r] for r in replicas])
    values.update(more)
    return PartitionRecord(**values)


def active(*ids):
    return frozenset(ids).__contains__


def change(**fields):
    return PartitionChangeRecord(partition_id=7, topic_id=TOPIC, **fields)


# ---------------------------------------------------------------------------- ONLINE rules

def test_a_valid_leader_is_kept_and_nothing_is_written():
    assert build_change(partition(), is_acceptable=active(1, 2, 3)) == (None, False)


def test_a_valid_leader_is_kept_even_when_not_first_in_replica_order():
    p = partition(leader=3)
    assert build_change(p, is_acceptable=active(1, 2, 3)) == (None, False)


def test_an_unacceptable_leader_is_replaced_by_the_first_valid_replica_in_replica_order():
    # replica order is 1, 2, 3; the ISR order (3 before 2) does not matter.
    p = partition(isr=[1, 3, 2])
    record, unclean = build_change(p, is_acceptable=active(2, 3))
    assert record == change(leader=2)
    assert not unclean


def test_a_leader_outside_the_target_isr_is_replaced():
    record, _ = build_change(partition(), is_acceptable=active(1, 2, 3), target_isr=[2, 3])
    assert record == change(leader=2, isr=[2, 3])


def test_replicas_outside_the_isr_are_not_elected_cleanly():
    p = partition(isr=[1, 3])
    record, unclean = build_change(p, is_acceptable=active(2, 3), target_isr=[3])
    assert record == change(leader=3, isr=[3])
    assert not unclean


def test_no_valid_replica_means_no_leader():
    p = partition(isr=[1, 2])
    record, unclean = build_change(p, is_acceptable=active(3))
    assert record == change(leader=-1)
    assert not unclean


def test_a_leaderless_partition_stays_leaderless_without_a_record():
    p = partition(isr=[1], leader=-1)
    assert build_change(p, is_acceptable=active(2, 3)) == (None, False)


# --------------------------------------------------------------------------- UNCLEAN rules

@pytest.mark.parametrize("how", [dict(election=UNCLEAN), dict(unclean_allowed=True)])
def test_unclean_election_picks_the_first_acceptable_replica(how):
    p = partition(isr=[1], leader=-1)
    record, unclean = build_change(p, is_acceptable=active(3, 2), **how)
    assert record == change(leader=2, isr=[2], leader_recovery_state=RECOVERING)
    assert unclean


def test_unclean_election_prefers_a_clean_leader():
    p = partition(isr=[1, 3])
    record, unclean = build_change(p, is_acceptable=active(2, 3), election=UNCLEAN)
    assert record == change(leader=3)
    assert not unclean


def test_unclean_election_without_recovery_state():
    p = partition(isr=[1], leader=-1)
    record, unclean = build_change(p, is_acceptable=active(2), election=UNCLEAN,
                                   unclean_recovery=False)
    assert record == change(leader=2, isr=[2])
    assert unclean


def test_unclean_election_of_a_recovering_partition_does_not_rewrite_the_state():
    p = partition(isr=[1], leader=-1, leader_recovery_state=RECOVERING)
    record, _ = build_change(p, is_acceptable=active(3), election=UNCLEAN)
    assert record == change(leader=3, isr=[3])


def test_unclean_election_with_nobody_acceptable_leaves_no_leader():
    p = partition(isr=[1], leader=-1)
    assert build_change(p, is_acceptable=active(), election=UNCLEAN) == (None, False)


def test_unclean_election_that_keeps_an_acceptable_leader_outside_the_target_isr():
    # Only a malformed request gets here; the leader must not be left outside its ISR.
    record, unclean = build_change(partition(isr=[1, 2]), is_acceptable=active(1),
                                   target_isr=[2], election=UNCLEAN)
    assert record == change(isr=[1], leader_recovery_state=RECOVERING)
    assert unclean


# ------------------------------------------------------------------------- PREFERRED rules

def test_preferred_election_moves_leadership_to_the_first_replica():
    p = partition(leader=3)
    record, unclean = build_change(p, is_acceptable=active(1, 2, 3), election=PREFERRED)
    assert record == change(leader=1)
    assert not unclean


def test_preferred_election_keeps_a_valid_leader_when_the_first_replica_cannot_lead():
    p = partition(leader=3)
    assert build_change(p, is_acceptable=active(2, 3), election=PREFERRED) == (None, False)


def test_preferred_election_falls_back_to_the_first_valid_other_replica():
    p = partition(leader=-1, isr=[1, 2, 3])
    record, _ = build_change(p, is_acceptable=active(3, 2), election=PREFERRED)
    assert record == change(leader=2)


def test_preferred_election_is_never_unclean():
    p = partition(isr=[1], leader=-1)
    assert build_change(p, is_acceptable=active(2, 3), election=PREFERRED,
                        unclean_allowed=True) == (None, False)


def test_an_unknown_election_is_refused():
    with pytest.raises(ValueError, match="unknown election"):
        build_change(partition(), is_acceptable=active(1), election="random")


# ------------------------------------------------------------------------------ ISR writes

def test_the_isr_is_written_only_when_it_differs():
    p = partition()
    assert build_change(p, is_acceptable=active(1, 2, 3), target_isr=[1, 2, 3]) == (None, False)
    record, _ = build_change(p, is_acceptable=active(1, 2, 3), target_isr=[1, 3])
    assert record == change(isr=[1, 3])


def test_the_isr_is_written_in_the_order_given():
    record, _ = build_change(partition(), is_acceptable=active(1, 2, 3), target_isr=[3, 1, 2])
    assert record == change(isr=[3, 1, 2])


def test_an_empty_target_isr_is_never_written():
    p = partition(isr=[1])
    record, _ = build_change(p, is_acceptable=active(1, 2, 3), target_isr=[])
    assert record == change(leader=-1)


def test_the_target_isr_is_copied():
    target = [1, 2]
    record, _ = build_change(partition(), is_acceptable=active(1, 2, 3), target_isr=target)
    target.append(3)
    assert record.isr == [1, 2]


@pytest.mark.parametrize("targets, words", [
    (dict(target_isr=[1, 4]), "non-replicas [4]"),
    (dict(target_isr=[1, 1]), "twice"),
    (dict(target_replicas=[]), "empty"),
    (dict(target_replicas=[1, 2, 2], target_isr=[1]), "twice"),
    (dict(target_removing=[5]), "non-replicas [5]"),
    (dict(target_removing=[2], target_adding=[2]), "both removing and adding"),
    (dict(target_leader_recovery_state=5), "neither RECOVERED"),
])
def test_malformed_targets_are_refused(targets, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        build_change(partition(), is_acceptable=active(1, 2, 3), **targets)


# -------------------------------------------------------------------- leader recovery state

def test_a_recovered_report_clears_recovering():
    p = partition(isr=[2], leader=2, leader_recovery_state=RECOVERING)
    record, _ = build_change(p, is_acceptable=active(2), target_leader_recovery_state=RECOVERED)
    assert record == change(leader_recovery_state=RECOVERED)
    assert build_change(p, is_acceptable=active(2),
                        target_leader_recovery_state=RECOVERING) == (None, False)


# ---------------------------------------------------------------------------- reassignment

def test_a_reassignment_starts_with_the_union_of_old_and_new_replicas():
    p = partition()
    record, _ = build_change(p, is_acceptable=active(1, 2, 3, 4, 5),
                             target_replicas=[4, 5, 1, 2, 3], target_removing=[1, 2, 3],
                             target_adding=[4, 5])
    assert record == change(replicas=[4, 5, 1, 2, 3], removing_replicas=[1, 2, 3],
                            adding_replicas=[4, 5],
                            directories=[DIRECTORY_UNASSIGNED, DIRECTORY_UNASSIGNED,
                                         DIRS[1], DIRS[2], DIRS[3]])


def test_a_reassignment_completes_once_the_adding_replicas_are_in_the_isr():
    p = partition(replicas=[4, 5, 1, 2, 3], isr=[1, 2, 3, 4], leader=1,
                  removing_replicas=[1, 2, 3], adding_replicas=[4, 5])
    record, _ = build_change(p, is_acceptable=active(1, 2, 3, 4, 5), target_isr=[1, 2, 3, 4])
    assert record is None  # 5 has not caught up yet
    record, _ = build_change(p, is_acceptable=active(1, 2, 3, 4, 5),
                             target_isr=[1, 2, 3, 4, 5])
    assert record == change(leader=4, isr=[4, 5], replicas=[4, 5], removing_replicas=[],
                            adding_replicas=[], directories=[DIRS[4], DIRS[5]])
    q = apply_change(p, record)
    assert check_partition(q) == []
    assert (q.leader, q.leader_epoch) == (4, 5)


def test_a_shrinking_reassignment_bumps_the_leader_epoch_without_moving_the_leader():
    p = partition()
    record, _ = build_change(p, is_acceptable=active(1, 2, 3), target_removing=[3])
    assert record == change(leader=1, isr=[1, 2], replicas=[1, 2],
                            directories=[DIRS[1], DIRS[2]])
    q = apply_change(p, record)
    assert (q.leader, q.leader_epoch, q.removing_replicas) == (1, 5, [])


def test_a_reassignment_never_completes_into_an_empty_isr():
    p = partition(isr=[3], leader=3)
    record, _ = build_change(p, is_acceptable=active(1, 2, 3), target_removing=[3])
    assert record == change(removing_replicas=[3])


# ------------------------------------------------------------------------- remove_from_isr

def test_fencing_a_follower_shrinks_the_isr_and_keeps_the_leader():
    assert remove_from_isr(partition(), 2, active(1, 3)) == change(isr=[1, 3])


def test_fencing_the_leader_elects_the_next_isr_member_in_replica_order():
    p = partition(isr=[1, 3, 2])
    assert remove_from_isr(p, 1, active(2, 3)) == change(isr=[3, 2], leader=2)


def test_the_removed_broker_is_never_elected_even_if_called_acceptable():
    assert remove_from_isr(partition(), 1, active(1, 2, 3)) == change(isr=[2, 3], leader=2)


def test_fencing_the_last_isr_member_keeps_it_in_the_isr_and_leaves_no_leader():
    # Kafka without ELR never writes an empty ISR.
    p = partition(isr=[1])
    record = remove_from_isr(p, 1, active(2, 3))
    assert record == change(leader=-1)
    q = apply_change(p, record)
    assert (q.isr, q.leader, q.leader_epoch) == ([1], -1, 5)


def test_fencing_the_last_isr_member_with_unclean_election_allowed():
    p = partition(isr=[1])
    record = remove_from_isr(p, 1, active(3, 2), unclean_allowed=True)
    assert record == change(leader=2, isr=[2], leader_recovery_state=RECOVERING)


def test_fencing_the_last_isr_member_when_an_empty_isr_is_allowed():
    p = partition(isr=[1])
    record = remove_from_isr(p, 1, active(2, 3), empty_isr_allowed=True)
    assert record == change(leader=-1, isr=[])
    q = apply_change(p, record)
    assert check_partition(q, empty_isr_allowed=True) == []
    assert any("empty ISR" in problem for problem in check_partition(q))
    # the broker comes back: nobody is in the ISR, so only an unclean election helps
    assert elect_for_leaderless(q, 1, active(2, 3)) is None
    assert elect_for_leaderless(q, 1, active(2, 3), unclean_allowed=True) == change(
        leader=1, isr=[1], leader_recovery_state=RECOVERING)


def test_build_change_writes_an_empty_target_isr_only_when_allowed():
    p = partition(isr=[1])
    record, _ = build_change(p, is_acceptable=active(2), target_isr=[],
                             empty_isr_allowed=True)
    assert record == change(leader=-1, isr=[])


def test_removing_a_broker_outside_the_isr_changes_nothing():
    assert remove_from_isr(partition(isr=[1, 2]), 3, active(1, 2)) is None
    # the stale last member of a leaderless partition, removed again (e.g. unregistered)
    assert remove_from_isr(partition(isr=[1], leader=-1), 1, active(2, 3)) is None


# -------------------------------------------------------------------- elect_for_leaderless

def test_unfencing_the_stale_isr_member_makes_it_leader_again():
    p = partition(isr=[1])
    fenced = apply_change(p, remove_from_isr(p, 1, active(2, 3)))
    # the unfence records are generated before the broker counts as active
    record = elect_for_leaderless(fenced, 1, active(2, 3))
    assert record == change(leader=1)
    back = apply_change(fenced, record)
    assert (back.leader, back.isr, back.leader_epoch, back.partition_epoch) == (1, [1], 6, 12)


def test_unfencing_leaves_partitions_with_a_leader_alone():
    assert elect_for_leaderless(partition(leader=2), 1, active(1, 2, 3)) is None


def test_unfencing_a_broker_outside_the_isr_does_not_elect_it():
    p = partition(isr=[1], leader=-1)
    assert elect_for_leaderless(p, 2, active(3)) is None
    record = elect_for_leaderless(p, 2, active(3), unclean_allowed=True)
    assert record == change(leader=2, isr=[2], leader_recovery_state=RECOVERING)


# ---------------------------------------------------------------------------- elect_leader

def _code(excinfo):
    return excinfo.value.code


def test_explicit_preferred_election():
    record = elect_leader(partition(leader=2), PREFERRED, active(1, 2, 3))
    assert record == change(leader=1)
    with pytest.raises(ControllerError) as excinfo:
        elect_leader(partition(), PREFERRED, active(1, 2, 3))
    assert _code(excinfo) == ErrorCode.ELECTION_NOT_NEEDED
    with pytest.raises(ControllerError) as excinfo:
        elect_leader(partition(leader=2), PREFERRED, active(2, 3))
    assert _code(excinfo) == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


def test_explicit_unclean_election():
    record = elect_leader(partition(isr=[1], leader=-1), UNCLEAN, active(3))
    assert record == change(leader=3, isr=[3], leader_recovery_state=RECOVERING)
    with pytest.raises(ControllerError) as excinfo:
        elect_leader(partition(), UNCLEAN, active(1, 2, 3))
    assert _code(excinfo) == ErrorCode.ELECTION_NOT_NEEDED
    with pytest.raises(ControllerError) as excinfo:
        elect_leader(partition(isr=[1], leader=-1), UNCLEAN, active())
    assert _code(excinfo) == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_explicit_election_types():
    with pytest.raises(ValueError):
        elect_leader(partition(), ONLINE, active(1))


# -------------------------------------------------------------------------------- properties

BROKERS = range(0, 7)


@st.composite
def partitions(draw):
    """A partition that keeps every invariant of `check_partition`."""
    replicas = draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=5, unique=True))
    isr = draw(st.permutations(replicas))[:draw(st.integers(1, len(replicas)))]
    recovering = draw(st.booleans())
    leader = draw(st.sampled_from(isr + [-1]))
    if recovering and leader != -1:
        isr = [leader]
    return PartitionRecord(
        partition_id=3, topic_id=TOPIC, replicas=replicas, isr=isr, leader=leader,
        leader_recovery_state=RECOVERING if recovering else RECOVERED,
        leader_epoch=draw(st.integers(0, 50)), partition_epoch=draw(st.integers(0, 50)),
        directories=[DIRS.get(r, DIRECTORY_UNASSIGNED) for r in replicas])


def _check_result(p, record, unclean, target_isr, may_lead, unclean_recovery=True,
                  empty_isr_allowed=False):
    """The properties every election result keeps; returns the partition after replay."""
    q = p if record is None else apply_change(p, record)
    assert check_partition(q, empty_isr_allowed=empty_isr_allowed) == [], (p, record)
    assert q.leader == -1 or may_lead(q.leader)
    if q.leader != -1 and q.leader not in target_isr:
        assert unclean and q.isr == [q.leader]
        if unclean_recovery:
            assert q.leader_recovery_state == RECOVERING
    else:
        assert not unclean
    if record is None:
        return q
    assert q.partition_epoch == p.partition_epoch + 1
    assert (q.leader_epoch > p.leader_epoch) == (q.leader != p.leader)
    assert q.leader_epoch - p.leader_epoch in (0, 1)
    if not unclean:
        assert q.isr == (list(target_isr) if empty_isr_allowed else list(target_isr) or p.isr)
    return q


@settings(max_examples=300, deadline=None)
@given(p=partitions(), live=st.frozensets(st.sampled_from(BROKERS)),
       election=st.sampled_from([ONLINE, PREFERRED, UNCLEAN]), unclean_allowed=st.booleans(),
       unclean_recovery=st.booleans(), empty_isr_allowed=st.booleans(), data=st.data())
def test_build_change_properties(p, live, election, unclean_allowed, unclean_recovery,
                                 empty_isr_allowed, data):
    target_isr = data.draw(st.none() | st.permutations(p.replicas).flatmap(
        lambda order: st.integers(0, len(order)).map(lambda n: order[:n])))
    record, unclean = build_change(p, is_acceptable=live.__contains__, target_isr=target_isr,
                                   election=election, unclean_allowed=unclean_allowed,
                                   unclean_recovery=unclean_recovery,
                                   empty_isr_allowed=empty_isr_allowed)
    used_isr = p.isr if target_isr is None else target_isr
    _check_result(p, record, unclean, used_isr, live.__contains__, unclean_recovery,
                  empty_isr_allowed)
    if unclean:
        assert election != PREFERRED and (election == UNCLEAN or unclean_allowed)
    if election == PREFERRED and record is not None and record.leader != -2:
        first = p.replicas[0]
        assert record.leader == first or not (first in used_isr and first in live)


@settings(max_examples=300, deadline=None)
@given(p=partitions(), live=st.frozensets(st.sampled_from(BROKERS)),
       broker=st.sampled_from(BROKERS), unclean_allowed=st.booleans(),
       empty_isr_allowed=st.booleans())
def test_remove_from_isr_properties(p, live, broker, unclean_allowed, empty_isr_allowed):
    record = remove_from_isr(p, broker, live.__contains__, unclean_allowed,
                             empty_isr_allowed=empty_isr_allowed)
    target = [r for r in p.isr if r != broker]
    # an unclean result is visible in the record: a new leader outside the ISR, ISR [leader]
    unclean = (record is not None and record.leader >= 0 and record.leader not in target)
    if unclean:
        assert unclean_allowed
    q = _check_result(p, record, unclean, target, lambda r: r != broker and r in live,
                      empty_isr_allowed=empty_isr_allowed)
    assert q.leader != broker
    if broker in q.isr:
        assert not empty_isr_allowed
        assert p.isr == [broker] == q.isr and q.leader == -1


@settings(max_examples=300, deadline=None)
@given(p=partitions(), live=st.frozensets(st.sampled_from(BROKERS)),
       broker=st.sampled_from(BROKERS), unclean_allowed=st.booleans())
def test_elect_for_leaderless_properties(p, live, broker, unclean_allowed):
    record = elect_for_leaderless(p, broker, live.__contains__, unclean_allowed)
    if p.leader != -1:
        assert record is None
        return
    unclean = record is not None and record.leader >= 0 and record.leader not in p.isr
    if unclean:
        assert unclean_allowed
    q = _check_result(p, record, unclean, p.isr, lambda r: r == broker or r in live)
    if broker in p.isr:
        assert q.leader != -1  # the unfenced ISR member (or another active one) leads


@settings(max_examples=150, deadline=None)
@given(replicas=st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True),
       events=st.lists(st.tuples(st.sampled_from(["fence", "unfence", "expand", "shrink",
                                                  "preferred"]),
                                 st.sampled_from(BROKERS)), max_size=30),
       unclean_allowed=st.booleans(), empty_isr_allowed=st.booleans())
def test_fence_and_unfence_histories_keep_the_invariants(replicas, events, unclean_allowed,
                                                         empty_isr_allowed):
    """A partition through a random history of broker fencing, unfencing, ISR changes
    requested by its leader, and preferred elections: after every step the partition keeps
    its invariants, its leader is an active broker (or -1), and only an unclean election can
    make a broker outside the ISR the leader."""
    live = set(replicas)
    p = PartitionRecord(partition_id=0, topic_id=TOPIC, replicas=replicas, isr=list(replicas),
                        leader=replicas[0], leader_epoch=0, partition_epoch=0)
    for kind, broker in events:
        record = None
        if kind == "fence":
            live.discard(broker)
            record = remove_from_isr(p, broker, live.__contains__, unclean_allowed,
                                     empty_isr_allowed=empty_isr_allowed)
        elif kind == "unfence":
            record = elect_for_leaderless(p, broker, live.__contains__, unclean_allowed)
            live.add(broker)
        elif kind == "expand" and p.leader != -1 and broker in replicas and broker in live:
            if broker not in p.isr and p.leader_recovery_state == RECOVERED:
                record, _ = build_change(p, is_acceptable=live.__contains__,
                                         target_isr=p.isr + [broker],
                                         unclean_allowed=unclean_allowed)
        elif kind == "shrink" and p.leader != -1 and broker != p.leader and broker in p.isr:
            record, _ = build_change(p, is_acceptable=live.__contains__,
                                     target_isr=[r for r in p.isr if r != broker],
                                     unclean_allowed=unclean_allowed)
        elif kind == "preferred":
            record, _ = build_change(p, is_acceptable=live.__contains__, election=PREFERRED)
        if record is None:
            continue
        q = apply_change(p, record)
        assert check_partition(q, empty_isr_allowed=empty_isr_allowed) == [], (p, record)
        assert q.leader == -1 or q.leader in live
        if q.leader != -1 and q.leader not in p.isr:
            assert unclean_allowed and q.isr == [q.leader]
            assert q.leader_recovery_state == RECOVERING
        assert q.partition_epoch == p.partition_epoch + 1
        assert (q.leader_epoch == p.leader_epoch + 1) == (q.leader != p.leader)
        if empty_isr_allowed:
            assert not set(q.isr) - live  # no ISR ever holds a fenced broker
        p = q
