"""The replay merge of PartitionChangeRecord (kafka-facts §5.3) and the partition invariants."""

import copy

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore.errors import MetadataError
from kraftcore.metadata import partition as part
from kraftcore.metadata.partition import (
    DIRECTORY_UNASSIGNED, FAST_CONSTRUCTION, RECOVERING, apply_change, change_record,
    check_partition,
)
from kraftcore.metadata.records import PartitionChangeRecord, PartitionRecord
from kraftcore.types import Uuid

TOPIC = Uuid(bytes(range(16)))
OTHER_TOPIC = Uuid(bytes(range(1, 17)))
D1, D2, D3, D4 = (Uuid(bytes(15) + bytes([i])) for i in (11, 12, 13, 14))


def partition(**changes):
    values = dict(partition_id=0, topic_id=TOPIC, replicas=[1, 2, 3], isr=[1, 2, 3],
                  removing_replicas=[], adding_replicas=[], leader=1, leader_recovery_state=0,
                  leader_epoch=5, partition_epoch=9, directories=[D1, D2, D3])
    values.update(changes)
    return PartitionRecord(**values)


def change(**fields):
    return PartitionChangeRecord(partition_id=0, topic_id=TOPIC, **fields)


# ------------------------------------------------------------------------------ apply_change

def test_an_empty_change_only_bumps_the_partition_epoch():
    p = partition()
    q = apply_change(p, change())
    assert q == p.replace(partition_epoch=10)
    assert q is not p


def test_a_leader_change_bumps_the_leader_epoch():
    q = apply_change(partition(), change(leader=2))
    assert (q.leader, q.leader_epoch, q.partition_epoch) == (2, 6, 10)


def test_setting_the_same_leader_still_bumps_the_leader_epoch():
    # Kafka's way to force a bump (a replica left the partition in a reassignment).
    q = apply_change(partition(), change(leader=1))
    assert (q.leader, q.leader_epoch) == (1, 6)


def test_no_leader_is_a_leader_change():
    q = apply_change(partition(), change(leader=-1, isr=[2, 3]))
    assert (q.leader, q.leader_epoch, q.isr) == (-1, 6, [2, 3])


def test_isr_only_change_keeps_the_leader_epoch():
    q = apply_change(partition(), change(isr=[1, 3]))
    assert (q.isr, q.leader, q.leader_epoch, q.partition_epoch) == ([1, 3], 1, 5, 10)


def test_every_given_field_is_replaced():
    c = change(isr=[4], leader=4, replicas=[4, 5], removing_replicas=[5],
               adding_replicas=[4], leader_recovery_state=1, directories=[D4, D1],
               eligible_leader_replicas=[5], last_known_elr=[6])
    q = apply_change(partition(), c)
    assert (q.isr, q.leader, q.replicas, q.removing_replicas, q.adding_replicas,
            q.leader_recovery_state, q.directories, q.eligible_leader_replicas,
            q.last_known_elr) == ([4], 4, [4, 5], [5], [4], 1, [D4, D1], [5], [6])


def test_sentinels_leave_fields_alone():
    p = partition(leader_recovery_state=RECOVERING, eligible_leader_replicas=[2],
                  last_known_elr=[3])
    q = apply_change(p, change(leader_recovery_state=-1))
    assert q.leader_recovery_state == RECOVERING
    assert (q.eligible_leader_replicas, q.last_known_elr) == ([2], [3])


def test_new_replicas_without_directories_keep_the_staying_directories():
    q = apply_change(partition(), change(replicas=[3, 4, 1]))
    assert q.directories == [D3, DIRECTORY_UNASSIGNED, D1]


def test_new_replicas_of_a_partition_without_directories_stay_without():
    q = apply_change(partition(directories=[]), change(replicas=[3, 4]))
    assert q.directories == []


def test_the_input_is_not_mutated():
    p = partition()
    before = copy.deepcopy(p)
    apply_change(p, change(isr=[2], leader=2, replicas=[2, 3], directories=[D2, D3]))
    assert p == before


def test_unknown_tags_are_carried_through():
    p = partition()
    p._unknown_tags = {9: b"x"}
    assert apply_change(p, change(isr=[1]))._unknown_tags == {9: b"x"}


@pytest.mark.parametrize("other", [dict(partition_id=1), dict(topic_id=OTHER_TOPIC)])
def test_a_change_for_another_partition_is_refused(other):
    c = PartitionChangeRecord(**{**dict(partition_id=0, topic_id=TOPIC), **other})
    with pytest.raises(MetadataError, match="applied to partition"):
        apply_change(partition(), c)


def test_inconsistent_directories_are_refused():
    with pytest.raises(MetadataError, match="inconsistent"):
        apply_change(partition(directories=[D1]), change(replicas=[1, 2]))


# --------------------------------------------------------------------------- fast building

def test_fast_construction_is_active():
    # When this fails, the schema classes changed shape: check `_plain_layout`.
    assert FAST_CONSTRUCTION


def test_change_record_equals_the_keyword_constructor():
    fast = change_record(0, TOPIC, [1, 2], 2, [1, 2, 3], [3], [1], 1, [D1, D2, D3])
    slow = change(isr=[1, 2], leader=2, replicas=[1, 2, 3], removing_replicas=[3],
                  adding_replicas=[1], leader_recovery_state=1, directories=[D1, D2, D3])
    assert fast == slow
    assert change_record(0, TOPIC) == change()
    for version in (1, 2):  # Directories exist from v1
        assert fast.encode(version) == slow.encode(version)
    assert change_record(0, TOPIC, leader=3).encode(0) == change(leader=3).encode(0)
    assert fast.decoded_version is None and fast._unknown_tags is None


def test_apply_change_result_encodes_like_a_constructed_record():
    q = apply_change(partition(), change(isr=[1, 2], leader=2))
    built = partition(isr=[1, 2], leader=2, leader_epoch=6, partition_epoch=10)
    for version in (1, 2):
        assert q.encode(version) == built.encode(version)
    assert PartitionRecord.decode(q.encode(2), 2) == built


# ------------------------------------------------------------------------- check_partition

def test_a_healthy_partition_has_no_problems():
    assert check_partition(partition()) == []
    assert check_partition(partition(leader=-1)) == []
    assert check_partition(partition(leader=4, isr=[4], replicas=[1, 4],
                                     leader_recovery_state=RECOVERING,
                                     directories=[])) == []


@pytest.mark.parametrize("fields, words", [
    (dict(replicas=[], isr=[], leader=-1, directories=[]), "no replicas"),
    (dict(replicas=[1, 1, 2], directories=[]), "twice"),
    (dict(isr=[]), "empty ISR"),
    (dict(isr=[1, 1]), "ISR member twice"),
    (dict(isr=[1, 4]), "not replicas"),
    (dict(leader=4), "is not a replica"),
    (dict(isr=[2, 3]), "not in the ISR"),
    (dict(leader_recovery_state=2), "neither RECOVERED"),
    (dict(leader_epoch=-1), "negative epoch"),
    (dict(removing_replicas=[7]), "removing replicas [7]"),
    (dict(adding_replicas=[7]), "adding replicas [7]"),
    (dict(removing_replicas=[2], adding_replicas=[2]), "both removing and adding"),
    (dict(directories=[D1]), "1 directories for 3 replicas"),
    (dict(replicas=[1, -2, 3]), "negative replica"),
])
def test_each_broken_invariant_is_reported(fields, words):
    problems = check_partition(partition(**fields))
    assert any(words in problem for problem in problems), problems


def test_unregistered_replicas_are_reported():
    assert check_partition(partition(), registered_broker_ids={1, 2, 3}) == []
    problems = check_partition(partition(), registered_broker_ids={1, 2})
    assert problems and "[3] are not registered" in problems[0]


# -------------------------------------------------------------------------------- property

def _reference_merge(p, c):
    """The merge written the slow, obvious way, to compare with `apply_change`."""
    changes = {"partition_epoch": p.partition_epoch + 1}
    for attr in ("isr", "replicas", "removing_replicas", "adding_replicas", "directories",
                 "eligible_leader_replicas", "last_known_elr"):
        if getattr(c, attr) is not None:
            changes[attr] = getattr(c, attr)
    if c.replicas is not None and c.directories is None:
        changes["directories"] = part.realign_directories(p.replicas, p.directories,
                                                          c.replicas)
    if c.leader != -2:
        changes["leader"] = c.leader
        changes["leader_epoch"] = p.leader_epoch + 1
    if c.leader_recovery_state != -1:
        changes["leader_recovery_state"] = c.leader_recovery_state
    return p.replace(**changes)


_ids = st.lists(st.integers(0, 9), max_size=4)
_optional_ids = st.none() | _ids


@settings(max_examples=200, deadline=None)
@given(leader=st.sampled_from([-2, -1, 0, 1, 5]), recovery=st.sampled_from([-1, 0, 1]),
       isr=_optional_ids, replicas=st.none() | st.lists(st.integers(0, 9), min_size=1,
                                                         max_size=4, unique=True),
       removing=_optional_ids, adding=_optional_ids, elr=_optional_ids, lkelr=_optional_ids,
       with_dirs=st.booleans())
def test_apply_change_matches_the_obvious_merge(leader, recovery, isr, replicas, removing,
                                                adding, elr, lkelr, with_dirs):
    p = partition(directories=[D1, D2, D3] if with_dirs else [])
    c = change(leader=leader, leader_recovery_state=recovery, isr=isr, replicas=replicas,
               removing_replicas=removing, adding_replicas=adding,
               eligible_leader_replicas=elr, last_known_elr=lkelr)
    before = copy.deepcopy(p)
    q = apply_change(p, c)
    assert q == _reference_merge(p, c)
    assert p == before
    assert q.partition_epoch == p.partition_epoch + 1
    assert q.leader_epoch == p.leader_epoch + (leader != -2)
