"""The leader's high-watermark rule (`LeaderState` of kraftcore.raft.leader) on its own, as
tables: the offset a majority of voters holds (the voters' end offsets sorted in
descending order, the one at index `voters // 2`), with unknown offsets (-1, a voter that
never fetched) sorting last; it moves only forward and only past the epoch start offset;
observers never count. Then the same rule through a one-voter `RaftCore`: the leader's own
log counts only once flushed. And the order of preferred successors."""

import pytest

from kraftcore.raft.leader import LeaderState

from tests.harness.quorum import Cluster

LEADER = 1
LEADER_END = 1000  # the leader's log end offset when a Fetch arrives (no effect on the HW)

# (voters, epoch start offset, steps): a step is (replica, offset, high watermark after it,
# whether the call reported a move). The leader's own step is its flushed end offset.
CASES = {
    "one voter: its own flushed end": ((1,), 0, [
        (1, 0, None, False),  # not past the epoch start
        (1, 1, 1, True),
        (1, 1, 1, False),
        (1, 4, 4, True),
    ]),
    "three voters: the second highest end": ((1, 2, 3), 0, [
        (1, 5, None, False),  # [5, -1, -1]: the unknown ends sort last
        (2, 3, 3, True),  # [5, 3, -1]
        (3, 4, 4, True),  # [5, 4, 3]
        (2, 9, 5, True),  # [9, 5, 4]
    ]),
    "only past the epoch start offset": ((1, 2, 3), 10, [
        (1, 10, None, False),
        (2, 10, None, False),  # a majority holds 10: the epoch's start is not yet passed
        (3, 8, None, False),
        (2, 11, None, False),  # [11, 10, 8] -> 10
        (1, 12, 11, True),  # [12, 11, 8] -> 11
    ]),
    "never backwards": ((1, 2, 3), 0, [
        (1, 8, None, False),
        (2, 8, 8, True),
        (2, 3, 8, False),  # [8, 3, -1] -> 3: kept at 8
        (1, 2, 8, False),  # [3, 2, -1]
        (3, 9, 8, False),  # [9, 3, 2] -> 3
        (2, 10, 9, True),  # [10, 9, 2] -> 9
    ]),
    "the followers commit what the leader has not flushed": ((1, 2, 3), 0, [
        (1, 3, None, False),  # flushed up to 3
        (2, 7, 3, True),  # [7, 3, -1]: the leader's flushed end is the majority's
        (3, 7, 7, True),  # [7, 7, 3]: the two followers are a majority without it
        (1, 5, 7, False),
    ]),
    "observers never count": ((1, 2, 3), 0, [
        (1, 6, None, False),
        (4, 6, None, False),
        (5, 6, None, False),  # two observers at 6 would be a majority if they counted
        (2, 6, 6, True),
        (4, 10, 6, False),
        (5, 10, 6, False),
        (3, 7, 6, False),  # [7, 6, 6]: the observers' 10s are not among the voters' ends
    ]),
    "five voters: the third highest, ties": ((1, 2, 3, 4, 5), 0, [
        (1, 7, None, False),
        (2, 7, None, False),  # [7, 7, -1, -1, -1]
        (3, 7, 7, True),  # a tie at the majority's place
        (4, 9, 7, False),
        (5, 9, 7, False),  # [9, 9, 7, 7, 7]
        (3, 9, 9, True),  # [9, 9, 9, 7, 7]
    ]),
    "four voters: three make a majority": ((1, 2, 3, 4), 0, [
        (1, 10, None, False),
        (2, 10, None, False),  # [10, 10, -1, -1]
        (3, 5, 5, True),  # [10, 10, 5, -1]
        (4, 10, 10, True),
    ]),
}


def run_steps(voters, epoch_start_offset, steps):
    """Play the steps on a fresh LeaderState; returns [(high watermark, moved)]."""
    leader = LeaderState(4, LEADER, voters, epoch_start_offset, [LEADER], 0, 3000)
    seen = []
    for now, (replica_id, offset, _, _) in enumerate(steps, start=1):
        if replica_id == LEADER:
            moved = leader.update_local_end(offset, now)
        else:
            replica = leader.replica(replica_id, now)
            moved = leader.update_replica(replica, offset, LEADER_END, now)
        seen.append((leader.high_watermark, moved))
    return leader, seen


@pytest.mark.parametrize("voters, epoch_start_offset, steps",
                         [pytest.param(*case, id=name) for name, case in CASES.items()])
def test_the_high_watermark_is_the_offset_a_majority_of_voters_holds(voters,
                                                                     epoch_start_offset,
                                                                     steps):
    leader, seen = run_steps(voters, epoch_start_offset, steps)
    assert seen == [(hw, moved) for _, _, hw, moved in steps]
    assert leader.majority == len(voters) // 2 + 1
    observers = {replica for replica, _, _, _ in steps if replica not in voters}
    assert set(leader.observers) == observers  # tracked, for DescribeQuorum only


def _elected_alone():
    """A one-voter core (a harness Cluster) that has elected itself and committed the
    epoch's first batch."""
    cluster = Cluster(voters=(LEADER,))
    cluster.run_until(lambda c: c.core(LEADER).high_watermark is not None)
    return cluster.core(LEADER), cluster.nodes[LEADER].storage, cluster.now


def test_a_leader_counts_its_own_log_only_up_to_what_it_flushed():
    core, storage, now = _elected_alone()
    committed = core.high_watermark
    assert committed == storage.log_end_offset  # the epoch's LeaderChange batch
    last = core.propose([b"a", b"b"], now)
    ready = core.take_ready()
    assert ready.flush_offset == last + 1 == storage.log_end_offset
    assert core.high_watermark == committed  # appended, not yet flushed
    core.poll(now + 1)
    assert core.high_watermark == committed
    storage.flush()
    core.on_persisted(ready.number)
    assert core.high_watermark == last + 1


def test_preferred_successors_most_up_to_date_first_ties_by_id_unknown_last():
    leader = LeaderState(4, LEADER, (1, 2, 3, 4, 5, 6), 0, [LEADER], 0, 3000)
    for replica_id, offset in ((2, 5), (4, 5), (5, 7), (6, 0)):
        leader.update_replica(leader.replica(replica_id, 1), offset, LEADER_END, 1)
    leader.update_replica(leader.replica(9, 1), 50, LEADER_END, 1)  # an observer
    assert leader.preferred_successors() == [5, 2, 4, 6, 3]
