"""Topics, partitions, ISRs, leaders and configs on the active controller (kafka-facts
§8.4–8.6): scenarios asserting on the records written, the per-item results and the
committed image."""

import collections

from kraftcore.controller.replication import (MIN_INSYNC_REPLICAS, PartitionState,
                                              UNCLEAN_LEADER_ELECTION)
from kraftcore.metadata import records as R
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.metadata.partition import RECOVERED, RECOVERING
from kraftcore.protocol.error_codes import ErrorCode

from tests.controller.util import Cluster, NewTopic, error_code, names

# What an operation that changes nothing writes: the NoOp its answer waits behind.
READ_BARRIER = [R.NoOpRecord()]


def codes(results):
    return [r.error_code for r in results]


def leader_counts(c, name):
    return collections.Counter(c.leaders(name).values())


def alter_partition(c, name, pid=0, *, broker=None, broker_epoch=None, leader_epoch=None,
                    partition_epoch=None, new_isr, commit=True):
    """An AlterPartition from the partition's leader (unless told otherwise), naming the
    working image's epochs unless told otherwise."""
    p = c.partition(name, pid, c.working)
    broker = p.leader if broker is None else broker
    return c.h.call(
        "alter_partition", broker,
        c.epochs[broker] if broker_epoch is None else broker_epoch,
        c.topic(name, c.working).topic_id, pid,
        leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
        partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
        new_isr=new_isr, commit=commit)


def set_config(c, resource_type, name, key, value, op="set", commit=True):
    return c.h.call("incremental_alter_configs", [(resource_type, name, [(key, op, value)])],
                    commit=commit)


def leaderless_with_empty_isr(c, name="t"):
    """t-0 on brokers [0, 1]: 1 fenced (ISR [0]), then 0 fenced (ISR [], no leader), then 1
    back (active, but not in the ISR)."""
    c.create(NewTopic(name, assignments={0: [0, 1]}))
    c.fence(1)
    c.fence(0)
    c.heartbeat(1)
    return c.partition(name)


# ------------------------------------------------------------------ creating topics

def test_create_topic_writes_the_topic_then_its_partitions():
    c = Cluster()
    mark = c.mark()
    [result] = c.create(("t", 3, 2))
    topic = c.topic("t")
    assert result.error_code == 0 and result.topic_id == topic.topic_id
    assert (result.num_partitions, result.replication_factor) == (3, 2)
    [batch] = c.batches_since(mark)
    assert batch[0] == R.TopicRecord(name="t", topic_id=topic.topic_id)
    assert [r.partition_id for r in batch[1:]] == [0, 1, 2]
    for record in batch[1:]:
        assert type(record) is R.PartitionRecord
        assert record.isr == record.replicas and record.leader == record.replicas[0]
        assert (record.leader_epoch, record.partition_epoch) == (0, 0)
        assert record.leader_recovery_state == RECOVERED
        assert len(set(record.replicas)) == 2
        assert c.partition("t", record.partition_id) == record


def test_placement_stripes_leaders_over_the_unfenced_brokers():
    c = Cluster(brokers=3)
    c.create(("one", 6, 1), ("three", 6, 3))
    assert leader_counts(c, "one") == {0: 2, 1: 2, 2: 2}
    assert leader_counts(c, "three") == {0: 2, 1: 2, 2: 2}
    for p in c.topic("three").partitions.values():
        assert sorted(p.replicas) == [0, 1, 2]


def test_placement_never_makes_a_fenced_broker_leader_or_isr_member():
    c = Cluster(brokers=3, unfence=False)
    c.heartbeat(0)
    c.heartbeat(1)  # broker 2 stays fenced
    c.create(("one", 6, 1), ("three", 4, 3))
    assert set(c.leaders("one").values()) <= {0, 1}
    for p in c.topic("three").partitions.values():
        assert sorted(p.replicas) == [0, 1, 2]
        assert 2 not in p.isr and p.leader != 2 and sorted(p.isr) == [0, 1]


def test_default_partitions_and_replication_factor():
    c = Cluster(brokers=3, default_partitions=4, default_replication_factor=2)
    [result] = c.create(NewTopic("t"))
    assert (result.num_partitions, result.replication_factor) == (4, 2)


def test_bad_topic_names_fail_alone():
    c = Cluster()
    results = c.create(("", 1, 1), (".", 1, 1), ("..", 1, 1), ("a b", 1, 1),
                       ("x" * 250, 1, 1), ("ok.name_-1", 1, 1), ("x" * 249, 1, 1))
    assert codes(results) == [ErrorCode.INVALID_TOPIC_EXCEPTION] * 5 + [0, 0]
    assert sorted(c.image.topic_ids) == ["ok.name_-1", "x" * 249]


def test_a_topic_named_twice_in_one_request_fails_both_times():
    c = Cluster()
    mark = c.mark()
    results = c.create(("dup", 1, 1), ("other", 1, 1), ("dup", 2, 1))
    assert codes(results) == [ErrorCode.INVALID_REQUEST, 0, ErrorCode.INVALID_REQUEST]
    assert c.image.topic("dup") is None
    assert names(c.records_since(mark)) == ["TopicRecord", "PartitionRecord"]


def test_an_existing_topic_is_refused():
    c = Cluster()
    c.create(("t", 1, 1))
    mark = c.mark()
    [result] = c.create(("t", 2, 1))
    assert result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS == 36
    assert c.records_since(mark) == READ_BARRIER


def test_a_name_that_differs_from_a_topics_only_in_dot_and_underscore_is_refused():
    # Kafka keeps one of "a.b" and "a_b": they would share metric names
    c = Cluster()
    c.create(("orders.eu", 1, 1), ("plain", 1, 1))
    mark = c.mark()
    results = c.create(("orders_eu", 1, 1), ("orders-eu", 1, 1), ("plainer", 1, 1))
    assert codes(results) == [ErrorCode.INVALID_TOPIC_EXCEPTION, 0, 0]
    assert results[0].error_message == \
        "Topic 'orders_eu' collides with existing topic: orders.eu"
    assert "orders_eu" not in c.image.topic_ids
    assert names(c.records_since(mark)).count("TopicRecord") == 2
    # once the other is deleted, the name is free again
    c.h.call("delete_topics", ["orders.eu"])
    assert codes(c.create(("orders_eu", 1, 1))) == [0]


def test_replication_factor_and_partition_count_limits():
    c = Cluster(brokers=3)
    results = c.create(("too_many", 1, 4), ("zero_rf", 1, 0), ("zero_parts", 0, 1),
                       ("fine", 1, 3))
    assert codes(results) == [ErrorCode.INVALID_REPLICATION_FACTOR,
                              ErrorCode.INVALID_REPLICATION_FACTOR,
                              ErrorCode.INVALID_PARTITIONS, 0]


def test_no_unfenced_broker_means_no_topic():
    c = Cluster(brokers=2, unfence=False)
    [result] = c.create(("t", 1, 1))
    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_manual_assignments_are_used_as_given():
    c = Cluster(brokers=3, unfence=False)
    c.heartbeat(0)
    c.heartbeat(1)  # broker 2 stays fenced
    [result] = c.create(NewTopic("t", assignments={0: [2, 0], 1: [1, 2], 2: [0, 1]}))
    assert result.error_code == 0
    assert (result.num_partitions, result.replication_factor) == (3, 2)
    parts = c.topic("t").partitions
    assert [parts[p].replicas for p in range(3)] == [[2, 0], [1, 2], [0, 1]]
    assert [parts[p].isr for p in range(3)] == [[0], [1], [0, 1]]
    assert [parts[p].leader for p in range(3)] == [0, 1, 0]


def test_bad_manual_assignments_are_refused():
    c = Cluster(brokers=3, unfence=False)
    c.heartbeat(0)
    results = c.create(
        NewTopic("unknown_broker", assignments={0: [0, 9]}),
        NewTopic("repeats", assignments={0: [0, 0]}),
        NewTopic("uneven", assignments={0: [0, 1], 1: [0]}),
        NewTopic("gap", assignments={0: [0], 2: [0]}),
        NewTopic("all_fenced", assignments={0: [1, 2]}),
        NewTopic("both", 1, 1, assignments={0: [0]}),
    )
    assert codes(results) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              ErrorCode.INVALID_REQUEST,
                              ErrorCode.INVALID_REPLICATION_FACTOR,
                              ErrorCode.INVALID_REQUEST]
    assert c.image.topics == {}


def test_topic_configs_are_written_with_the_topic_and_checked():
    c = Cluster()
    mark = c.mark()
    results = c.create(NewTopic("t", 1, 1, configs={MIN_INSYNC_REPLICAS: "2"}),
                       NewTopic("bad", 1, 1, configs={MIN_INSYNC_REPLICAS: "zero"}),
                       NewTopic("unknown", 1, 1, configs={"no.such.config": "5"}))
    assert codes(results) == [0, ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_CONFIG]
    assert names(c.records_since(mark)) == ["TopicRecord", "ConfigRecord", "PartitionRecord"]
    assert c.image.configs[(CONFIG_TOPIC, "t")] == {MIN_INSYNC_REPLICAS: "2"}


# ------------------------------------------------------------------ deleting topics

def test_deleting_a_topic_removes_it_with_its_configs():
    c = Cluster()
    c.create(NewTopic("t", 2, 3, configs={MIN_INSYNC_REPLICAS: "2"}))
    old_id = c.topic("t").topic_id
    mark = c.mark()
    [result] = c.h.call("delete_topics", ["t"])
    assert (result.error_code, result.topic_id) == (0, old_id)
    assert c.records_since(mark) == [R.RemoveTopicRecord(topic_id=old_id)]
    assert c.image.topic("t") is None and (CONFIG_TOPIC, "t") not in c.image.configs

    [again] = c.create(("t", 1, 1))
    assert again.topic_id != old_id
    assert (CONFIG_TOPIC, "t") not in c.image.configs


def test_deleting_unknown_topics_fails_per_topic():
    c = Cluster()
    c.create(("t", 1, 1))
    results = c.h.call("delete_topics", ["nope", "t", "t"])
    assert codes(results) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0,
                              ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert c.image.topics == {}


# ------------------------------------------------------------------ creating partitions

def test_create_partitions_adds_the_missing_ones():
    c = Cluster()
    c.create(("t", 2, 2))
    mark = c.mark()
    result = c.h.call("create_partitions", "t", 4)
    assert (result.error_code, result.num_partitions, result.replication_factor) == (0, 4, 2)
    records = c.records_since(mark)
    assert names(records) == ["PartitionRecord"] * 2
    assert [r.partition_id for r in records] == [2, 3]
    assert sorted(c.topic("t").partitions) == [0, 1, 2, 3]


def test_create_partitions_with_assignments():
    c = Cluster()
    c.create(("t", 1, 2))
    c.h.call("create_partitions", "t", 3, {0: [2, 1], 1: [1, 0]})
    parts = c.topic("t").partitions
    assert parts[1].replicas == [2, 1] and parts[2].replicas == [1, 0]


def test_create_partitions_must_grow_the_topic():
    c = Cluster()
    c.create(("t", 3, 1))
    for count in (3, 2):
        future = c.h.call("create_partitions", "t", count, commit=False)
        assert error_code(future) == ErrorCode.INVALID_PARTITIONS == 37
    future = c.h.call("create_partitions", "nope", 3, commit=False)
    assert error_code(future) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------------ AlterPartition

def test_the_leader_shrinks_and_expands_the_isr():
    c = Cluster()
    c.create(("t", 1, 3))
    p = c.partition("t")
    follower = p.replicas[2]
    mark = c.mark()
    state = alter_partition(c, "t", new_isr=p.replicas[:2])
    assert state == PartitionState(p.leader, p.leader_epoch, p.replicas[:2],
                                   p.partition_epoch + 1)
    [record] = c.records_since(mark)
    assert type(record) is R.PartitionChangeRecord
    assert record.isr == p.replicas[:2] and record.leader == -2
    shrunk = c.partition("t")
    assert shrunk.isr == p.replicas[:2] and shrunk.leader_epoch == p.leader_epoch
    assert shrunk.partition_epoch == p.partition_epoch + 1

    state = alter_partition(c, "t", new_isr=p.replicas[:2] + [follower])
    assert state.isr == p.replicas[:2] + [follower]
    assert state.partition_epoch == p.partition_epoch + 2
    assert c.partition("t").isr == p.replicas[:2] + [follower]


def test_an_alter_partition_that_changes_nothing_writes_only_the_read_barrier():
    c = Cluster()
    c.create(("t", 1, 3))
    p = c.partition("t")
    mark = c.mark()
    state = alter_partition(c, "t", new_isr=p.isr)
    assert state == PartitionState(p.leader, p.leader_epoch, p.isr, p.partition_epoch)
    assert c.records_since(mark) == READ_BARRIER


def test_alter_partition_checks():
    c = Cluster()
    c.create(("t", 1, 3))
    p = c.partition("t")
    leader, follower = p.leader, [b for b in p.replicas if b != p.leader][0]
    cases = [
        (dict(broker_epoch=c.epochs[leader] + 1), ErrorCode.STALE_BROKER_EPOCH),
        (dict(broker=follower), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (dict(leader_epoch=p.leader_epoch + 1), ErrorCode.FENCED_LEADER_EPOCH),
        (dict(partition_epoch=p.partition_epoch - 1), ErrorCode.INVALID_UPDATE_VERSION),
    ]
    mark = c.mark()
    for kwargs, code in cases:
        future = alter_partition(c, "t", new_isr=[leader], commit=False, **kwargs)
        assert error_code(future) == code, kwargs
    # the leader must stay in the ISR; no duplicates; only replicas
    for isr in ([follower], [leader, leader], [leader, 9]):
        future = alter_partition(c, "t", new_isr=isr, commit=False)
        assert error_code(future) == ErrorCode.INVALID_REQUEST, isr
    assert c.records_since(mark) == []
    assert (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH,
            ErrorCode.INVALID_UPDATE_VERSION) == (6, 74, 95)


def test_fenced_or_shutting_down_brokers_cannot_join_the_isr():
    c = Cluster(brokers=4)
    c.create(NewTopic("t", assignments={0: [0, 1, 2]}))
    alter_partition(c, "t", new_isr=[0])
    c.fence(1)
    c.create(NewTopic("other", assignments={0: [2, 3]}))
    c.heartbeat(2, want_shutdown=True)  # leads other-0: controlled shutdown
    assert c.image.brokers[2].in_controlled_shutdown
    for isr in ([0, 1], [0, 2]):
        future = alter_partition(c, "t", new_isr=isr, commit=False)
        assert error_code(future) == ErrorCode.INELIGIBLE_REPLICA == 107, isr
    assert c.partition("t").isr == [0]


def test_a_second_alter_partition_with_the_same_partition_epoch_is_stale():
    # the second request names the epoch the first one replaced (in the working image)
    c = Cluster()
    c.create(("t", 1, 3))
    p = c.partition("t")
    first = alter_partition(c, "t", new_isr=p.replicas[:2], commit=False)
    second = alter_partition(c, "t", new_isr=p.replicas[:1], commit=False,
                             partition_epoch=p.partition_epoch)
    c.h.commit()
    assert first.result(timeout=0).isr == p.replicas[:2]
    assert error_code(second) == ErrorCode.INVALID_UPDATE_VERSION


def test_alter_partition_of_an_unknown_partition():
    c = Cluster()
    c.create(("t", 1, 3))
    p = c.partition("t")
    future = c.h.call("alter_partition", p.leader, c.epochs[p.leader], c.topic("t").topic_id,
                      5, leader_epoch=0, partition_epoch=0, new_isr=[p.leader],
                      commit=False)
    assert error_code(future) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------------ configs

def test_incremental_alter_configs_at_topic_and_cluster_level():
    c = Cluster()
    c.create(("t", 1, 1))
    mark = c.mark()
    results = c.h.call("incremental_alter_configs", [
        (CONFIG_TOPIC, "t", [(MIN_INSYNC_REPLICAS, "set", "2"),
                             (UNCLEAN_LEADER_ELECTION, "set", "false")]),
        (CONFIG_BROKER, "", [(MIN_INSYNC_REPLICAS, "set", "1")]),
    ])
    assert results == [(0, None), (0, None)]
    assert names(c.records_since(mark)) == ["ConfigRecord"] * 3
    assert c.image.configs[(CONFIG_TOPIC, "t")] == {MIN_INSYNC_REPLICAS: "2",
                                                    UNCLEAN_LEADER_ELECTION: "false"}
    assert c.image.configs[(CONFIG_BROKER, "")] == {MIN_INSYNC_REPLICAS: "1"}

    set_config(c, CONFIG_TOPIC, "t", MIN_INSYNC_REPLICAS, None, op="delete")
    assert c.image.configs[(CONFIG_TOPIC, "t")] == {UNCLEAN_LEADER_ELECTION: "false"}


def test_bad_config_values_and_unknown_topics_fail_per_resource():
    c = Cluster()
    c.create(("t", 1, 1))
    mark = c.mark()
    results = c.h.call("incremental_alter_configs", [
        (CONFIG_TOPIC, "t", [(MIN_INSYNC_REPLICAS, "set", "0")]),
        (CONFIG_TOPIC, "t", [(MIN_INSYNC_REPLICAS, "set", "two")]),
        (CONFIG_TOPIC, "t", [(UNCLEAN_LEADER_ELECTION, "set", "yes")]),
        (CONFIG_BROKER, "", [(UNCLEAN_LEADER_ELECTION, "set", "TRUE")]),
        (CONFIG_TOPIC, "nope", [(MIN_INSYNC_REPLICAS, "set", "2")]),
        (CONFIG_TOPIC, "t", [(MIN_INSYNC_REPLICAS, "set", "3")]),
    ])
    assert [code for code, _ in results] == [ErrorCode.INVALID_CONFIG] * 4 + [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0]
    assert c.records_since(mark) == [R.ConfigRecord(resource_type=CONFIG_TOPIC,
                                                    resource_name="t",
                                                    name=MIN_INSYNC_REPLICAS, value="3")]


def test_a_bad_operation_in_a_resource_fails_the_whole_resource():
    c = Cluster()
    c.create(("t", 1, 1))
    mark = c.mark()
    [(code, _)] = c.h.call("incremental_alter_configs", [
        (CONFIG_TOPIC, "t", [(MIN_INSYNC_REPLICAS, "set", "2"),
                             (UNCLEAN_LEADER_ELECTION, "set", "maybe")])])
    assert code == ErrorCode.INVALID_CONFIG
    assert c.records_since(mark) == READ_BARRIER


# ------------------------------------------------------------------ elections

def test_preferred_election_moves_leadership_back_to_the_first_replica():
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1], 1: [1, 0]}))
    c.fence(0)
    c.heartbeat(0)
    alter_partition(c, "t", 0, new_isr=[1, 0])  # 0 caught up again
    assert c.leaders("t") == {0: 1, 1: 1}
    before = c.partition("t", 0)
    mark = c.mark()
    results = c.h.call("elect_leaders", "preferred", [("t", 0), ("t", 1), ("nope", 0)])
    assert results == {("t", 0): (0, None),
                       ("t", 1): (ErrorCode.ELECTION_NOT_NEEDED, results[("t", 1)][1]),
                       ("nope", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                     results[("nope", 0)][1])}
    [record] = c.records_since(mark)
    assert record.leader == 0 and record.isr is None
    after = c.partition("t", 0)
    assert after.leader == 0 and after.leader_epoch == before.leader_epoch + 1


def test_preferred_election_of_everything_leaves_out_partitions_that_need_none():
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1], 1: [1, 0]}))
    assert c.h.call("elect_leaders", "preferred") == {}


def test_preferred_election_when_the_preferred_replica_is_not_in_the_isr():
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1]}))
    c.fence(0)
    c.heartbeat(0)  # unfenced, but not back in the ISR
    results = c.h.call("elect_leaders", "preferred", [("t", 0)])
    assert results[("t", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE == 80


def test_unclean_election_of_a_leaderless_partition_is_recorded():
    c = Cluster(brokers=2)
    p = leaderless_with_empty_isr(c)
    assert (p.leader, p.isr) == (-1, [])
    mark = c.mark()
    results = c.h.call("elect_leaders", "unclean", [("t", 0)])
    assert results == {("t", 0): (0, None)}
    [record] = c.records_since(mark)
    assert (record.leader, record.isr, record.leader_recovery_state) == (1, [1], RECOVERING)
    p2 = c.partition("t")
    assert (p2.leader, p2.isr, p2.leader_recovery_state) == (1, [1], RECOVERING)
    assert p2.leader_epoch == p.leader_epoch + 1


def test_unclean_election_errors():
    c = Cluster(brokers=2)
    c.create(NewTopic("led", assignments={0: [0, 1]}),
             NewTopic("alone", assignments={0: [1]}))
    c.fence(1)  # alone-0 loses its only replica
    results = c.h.call("elect_leaders", "unclean", [("led", 0), ("alone", 0)])
    assert results[("led", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED == 84
    assert results[("alone", 0)][0] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE == 83
    future = c.h.call("elect_leaders", "sideways", commit=False)
    assert error_code(future) == ErrorCode.INVALID_REQUEST


# ------------------------------------------------------------------ empty ISR rule

def test_fencing_the_last_isr_member_empties_the_isr():
    # replication.py: "an ISR never holds a fenced broker ... even the last member"
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1]}))
    c.fence(1)
    assert c.partition("t").isr == [0]
    c.fence(0)
    p = c.partition("t")
    assert (p.leader, p.isr) == (-1, [])


def test_with_an_empty_isr_a_partition_stays_leaderless_without_unclean_election():
    c = Cluster(brokers=2)
    leaderless_with_empty_isr(c)
    c.heartbeat(0)  # the former leader comes back too
    c.h.advance(1000)
    c.keep_alive(0, 1)
    p = c.partition("t")
    assert (p.leader, p.isr) == (-1, [])


def test_enabling_unclean_election_on_the_topic_elects_at_once():
    c = Cluster(brokers=2)
    leaderless_with_empty_isr(c)
    leaderless_with_empty_isr(c, "u")
    mark = c.mark()
    set_config(c, CONFIG_TOPIC, "t", UNCLEAN_LEADER_ELECTION, "true")
    [batch] = c.batches_since(mark)
    assert names(batch) == ["ConfigRecord", "PartitionChangeRecord"]
    p = c.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (1, [1], RECOVERING)
    assert c.partition("u").leader == -1  # another topic: untouched


def test_enabling_unclean_election_for_the_cluster_elects_everywhere():
    c = Cluster(brokers=2)
    leaderless_with_empty_isr(c)
    leaderless_with_empty_isr(c, "u")
    set_config(c, CONFIG_BROKER, "", UNCLEAN_LEADER_ELECTION, "true")
    for name in ("t", "u"):
        p = c.partition(name)
        assert (p.leader, p.isr, p.leader_recovery_state) == (1, [1], RECOVERING)


def test_a_topic_that_disables_unclean_election_keeps_it_off_when_the_cluster_enables_it():
    # the topic's own "false" overrides the cluster default (image.topic_config)
    c = Cluster(brokers=2)
    leaderless_with_empty_isr(c)
    set_config(c, CONFIG_TOPIC, "t", UNCLEAN_LEADER_ELECTION, "false")
    mark = c.mark()
    set_config(c, CONFIG_BROKER, "", UNCLEAN_LEADER_ELECTION, "true")
    assert c.image.topic_config("t", UNCLEAN_LEADER_ELECTION) == "false"
    assert names(c.records_since(mark)) == ["ConfigRecord"]
    assert c.partition("t").leader == -1


def test_with_unclean_election_enabled_fencing_the_leader_elects_an_out_of_sync_replica():
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1]},
                      configs={UNCLEAN_LEADER_ELECTION: "true"}))
    alter_partition(c, "t", new_isr=[0])  # 1 falls behind
    mark = c.mark()
    c.fence(0)
    [change] = [r for r in c.records_since(mark) if type(r) is R.PartitionChangeRecord]
    assert (change.leader, change.isr, change.leader_recovery_state) == (1, [1], RECOVERING)
    p = c.partition("t")
    assert (p.leader, p.isr, p.leader_recovery_state) == (1, [1], RECOVERING)


def test_unfencing_a_broker_leaves_partitions_that_have_a_leader_alone():
    # the fenced leader's follower took over; the old leader coming back writes only its
    # unfencing (it rejoins the ISR later, by the leader's AlterPartition)
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1]}))
    c.fence(0)
    assert (c.partition("t").leader, c.partition("t").isr) == (1, [1])
    mark = c.mark()
    c.heartbeat(0)
    assert names(c.records_since(mark)) == ["BrokerRegistrationChangeRecord"]
    assert c.partition("t").leader == 1
