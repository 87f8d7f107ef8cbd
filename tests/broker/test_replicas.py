"""Replication between brokers' `ReplicaManager`s, driven by hand over the real controller's
image (`LocalQuorum`): a follower takes the leader's batches and high watermark, the leader's
ISR shrinks after replica.lag.time.max.ms and grows back once the follower catches up
(through AlterPartition to the controller), a follower truncates where a new leader's log
diverges, an idempotent producer's retry is recognised by a new leader, and a restarted
broker finds its partitions and producers again."""

import pytest

from kraftcore import codec
from kraftcore.broker.partition import PartitionError
from kraftcore.broker.replicas import ReplicaConfig, ReplicaManager
from kraftcore.broker.requests import (ALTER_PARTITION_VERSION, alter_partition_request,
                                       alter_partition_result)
from kraftcore.controller.local import LocalQuorum
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E

from tests.apis.helpers import LocalFacade, add_broker, call, create_topics, heartbeat

LAG_MS = 1000


class Cluster:
    def __init__(self, tmp_path):
        self.facade = LocalFacade(LocalQuorum())
        self.epochs = {b: add_broker(self.facade, b) for b in (1, 2, 3)}
        self.now = 10_000
        self.tmp_path = tmp_path
        self.brokers = {b: self.open(b) for b in (1, 2, 3)}

    def open(self, b):
        return ReplicaManager(b, [str(self.tmp_path / f"b{b}")], ReplicaConfig(
            replica_lag_time_max_ms=LAG_MS, log_settings=(("fsync", "never"),)),
            clock=lambda: self.now)

    def sync(self):
        return {b: r.apply_image(self.facade.image, self.now) for b, r in self.brokers.items()}

    def replicate(self, follower, topic="t", index=0):
        """One fetch round of `follower` from the leader of topic-index; returns whether
        anything was appended."""
        mine = self.brokers[follower].get(topic, index)
        leader = self.brokers[mine.leader_id].get(topic, index)
        offset, last_epoch = mine.fetch_position()
        diverging = self.brokers[mine.leader_id].follower_fetch(
            follower, self.epochs[follower], [(leader, offset, last_epoch)], self.now)
        if leader in diverging:
            self.brokers[follower].follower_truncate(mine, *diverging[leader])
            return False
        read = leader.read(offset, 1 << 20, committed=False)
        self.brokers[follower].follower_append(mine, read.records, leader.high_watermark)
        return len(read.records) > 0

    def alter_isrs(self, b):
        image = self.facade.image
        changes = self.brokers[b].isr_changes(
            self.now, lambda r, e: image.broker_is_active(r))
        body = alter_partition_request(image, b, self.epochs[b], changes)
        if body is None:
            return []
        alter_partition_result(changes, call(self.facade, body, ALTER_PARTITION_VERSION))
        self.sync()
        return [list(isr) for _, isr in changes]

    def close(self):
        for r in self.brokers.values():
            r.close()


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    call(c.facade, create_topics(("t", -1, -1, {0: [1, 2, 3]})), 7)
    c.sync()
    yield c
    c.close()


def produce(cluster, values, acks=-1, **producer):
    leader = next(r for r in cluster.brokers.values()
                  if r.get("t", 0).is_leader)
    data = bytes(codec.encode_batch(values, timestamp=1000, **producer))
    return leader.produce("t", 0, data, acks), leader.get("t", 0)


def test_followers_take_the_batches_and_the_high_watermark(cluster):
    base, leader = produce(cluster, [b"a", b"b"])
    assert (base, leader.high_watermark) == (0, 0)
    for follower in (2, 3):
        assert cluster.replicate(follower)
    assert leader.high_watermark == 0  # the followers' next fetch tells their end offset
    for follower in (2, 3):
        assert not cluster.replicate(follower)
    assert leader.high_watermark == 2
    assert cluster.brokers[2].get("t", 0).high_watermark == 0  # learnt on its next fetch
    for follower in (2, 3):
        cluster.replicate(follower)
        mine = cluster.brokers[follower].get("t", 0)
        assert (mine.log_end_offset, mine.high_watermark) == (2, 2)


def test_the_isr_shrinks_after_the_lag_time_and_grows_back(cluster):
    produce(cluster, [b"a"])
    cluster.replicate(2)
    cluster.now += LAG_MS + 1
    cluster.replicate(2)  # 2 is caught up; 3 has not fetched for longer than the lag time
    assert cluster.alter_isrs(1) == [[1, 2]]
    assert cluster.facade.image.topic("t").partitions[0].isr == [1, 2]
    produce(cluster, [b"b"])
    cluster.replicate(2)
    cluster.replicate(2)
    leader = cluster.brokers[1].get("t", 0)
    assert leader.high_watermark == 2  # without 3
    assert cluster.alter_isrs(1) == []  # 3 is behind the high watermark: not yet
    cluster.replicate(3)
    cluster.replicate(3)
    assert cluster.alter_isrs(1) == [[1, 2, 3]]
    assert cluster.facade.image.topic("t").partitions[0].isr == [1, 2, 3]


def test_a_dropped_follower_comes_back_only_by_fetching(cluster):
    """min.insync.replicas 3 freezes the high watermark once 3 is dropped: 3's last known
    offset still equals it, but 3 has stopped fetching (SIGSTOPped, say). It is not taken
    back on that stale offset — the ISR would flap, and acks=all would wait on a stopped
    replica instead of failing with NOT_ENOUGH_REPLICAS — only after it fetches again."""
    call(cluster.facade, create_topics(("m", -1, -1, {0: [1, 2, 3]},
                                        {"min.insync.replicas": "3"})), 7)
    cluster.sync()
    for follower in (2, 3):
        cluster.replicate(follower)  # t-0, at its (empty) log end: never dropped
    leader = cluster.brokers[1]
    data = bytes(codec.encode_batch([b"a"], timestamp=1000))
    leader.produce("m", 0, data, -1)
    for follower in (2, 3):
        cluster.replicate(follower, "m")
        cluster.replicate(follower, "m")
    assert leader.get("m", 0).high_watermark == 1
    leader.produce("m", 0, data, 1)  # acks=1: offset 1 on the leader only
    cluster.replicate(2, "m")
    cluster.now += LAG_MS + 1
    cluster.replicate(2, "m")  # 2 keeps fetching; 3 stopped at offset 1
    assert cluster.alter_isrs(1) == [[1, 2]]
    assert leader.get("m", 0).high_watermark == 1  # frozen: the ISR is below min ISR
    for _ in range(3):
        cluster.now += 100
        cluster.replicate(2, "m")
        assert cluster.alter_isrs(1) == []  # not 3: its offset 1 is stale
    cluster.replicate(3, "m")  # 3 is back and fetches
    assert cluster.alter_isrs(1) == [[1, 2, 3]]


def test_a_follower_truncates_where_the_new_leaders_log_diverges(cluster):
    produce(cluster, [b"a"])
    for follower in (2, 3):
        cluster.replicate(follower)
        cluster.replicate(follower)
    old = cluster.brokers[1].get("t", 0)
    produce(cluster, [b"lost"], acks=1)  # only on the leader
    assert (old.log_end_offset, old.high_watermark) == (2, 1)
    # broker 1 is fenced: 2 leads a new epoch and writes there
    call(cluster.facade, heartbeat(1, cluster.epochs[1], want_fence=True), 1)
    cluster.sync()
    assert cluster.brokers[2].get("t", 0).is_leader and old.role == "follower"
    produce(cluster, [b"new1", b"new2"], acks=1)
    cluster.replicate(1)  # diverges at offset 1: the unreplicated record goes
    assert old.log_end_offset == 1
    cluster.replicate(1)
    values = [r.value for b in old.log.read(0).batches() for r in b.records]
    assert values == [b"a", b"new1", b"new2"]


def test_a_new_leader_recognises_a_retry_of_its_predecessors_producer(cluster):
    producer = dict(producer_id=42, producer_epoch=0, base_sequence=0)
    produce(cluster, [b"x", b"y"], **producer)
    for follower in (2, 3):
        cluster.replicate(follower)
        cluster.replicate(follower)
    call(cluster.facade, heartbeat(1, cluster.epochs[1], want_fence=True), 1)
    cluster.sync()
    base, leader = produce(cluster, [b"x", b"y"], **producer)  # the retry, at the new leader
    assert base == 0 and leader.log_end_offset == 2
    with pytest.raises(PartitionError) as refused:
        produce(cluster, [b"z"], producer_id=42, producer_epoch=0, base_sequence=5)
    assert refused.value.code == E.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_restarted_broker_finds_its_partitions_and_producers(cluster):
    producer = dict(producer_id=42, producer_epoch=0, base_sequence=0)
    produce(cluster, [b"x"], acks=1, **producer)
    cluster.brokers[1].close()
    cluster.brokers[1] = cluster.open(1)
    cluster.sync()
    base, leader = produce(cluster, [b"x"], acks=1, **producer)
    assert (base, leader.log_end_offset) == (0, 1)


def test_a_leader_that_lost_its_followers_refuses_acks_all_below_min_isr(tmp_path):
    c = Cluster(tmp_path)
    call(c.facade, create_topics(("t", -1, -1, {0: [1, 2, 3]}, {"min.insync.replicas": "2"})), 7)
    c.sync()
    c.now += LAG_MS + 1
    assert c.alter_isrs(1) == [[1]]
    with pytest.raises(PartitionError) as refused:
        produce(c, [b"a"])
    assert refused.value.code == E.NOT_ENOUGH_REPLICAS
    c.close()


def test_the_log_dirs_root_holds_every_partitions_checkpoints(tmp_path):
    c = Cluster(tmp_path)
    call(c.facade, create_topics(("t", -1, -1, {0: [1, 2, 3], 1: [1, 2, 3]})), 7)
    c.sync()
    produce(c, [b"a", b"b"], acks=1)
    root = tmp_path / "b1"
    c.brokers[1].close()
    lines = (root / "recovery-point-offset-checkpoint").read_text().split("\n")
    assert lines[:2] == ["0", "2"] and sorted(lines[2:4]) == ["t 0 2", "t 1 0"]
    assert (root / "replication-offset-checkpoint").exists()
    assert (root / "log-start-offset-checkpoint").exists()
    assert (root / ".kafka_cleanshutdown").exists()
    assert not (root / "t-0" / "recovery-point-offset-checkpoint").exists()
    c.brokers[1] = c.open(1)
    assert not (root / ".kafka_cleanshutdown").exists()  # taken up: a crash now is seen
    c.sync()
    reopened = c.brokers[1].get("t", 0).log
    assert reopened.recovery.clean_shutdown and reopened.log_end_offset == 2
    c.close()


def test_a_broker_that_crashed_recovers_its_partitions_by_a_scan(tmp_path):
    c = Cluster(tmp_path)
    call(c.facade, create_topics(("t", -1, -1, {0: [1, 2, 3]})), 7)
    c.sync()
    produce(c, [b"a", b"b"], acks=1)
    c.brokers[1].checkpoint()
    crashed = c.brokers[1]
    for partition in crashed.partitions.values():  # no close: what a SIGKILL leaves
        partition.log._release()
    c.brokers[1] = c.open(1)
    c.sync()
    log = c.brokers[1].get("t", 0).log
    assert not log.recovery.clean_shutdown and log.recovery.scanned_segments == 1
    assert log.log_end_offset == 2
    c.close()


def test_a_leader_alone_in_its_isr_commits_its_whole_log_at_once(cluster):
    """A follower that holds records past the high watermark becomes the leader with an ISR
    of itself (as after an unclean election): its high watermark is its log end at once,
    not after the next produce."""
    produce(cluster, [b"a"])
    for follower in (2, 3):
        cluster.replicate(follower)
        cluster.replicate(follower)
    produce(cluster, [b"b", b"c"], acks=1)
    cluster.replicate(2)  # 2 takes them; the high watermark stays at 1
    mine = cluster.brokers[2].get("t", 0)
    assert (mine.log_end_offset, mine.high_watermark) == (3, 1)
    cluster.now += LAG_MS + 1
    cluster.replicate(2)
    assert cluster.alter_isrs(1) == [[1, 2]]
    for b in (1, 3):
        call(cluster.facade, heartbeat(b, cluster.epochs[b], want_fence=True), 1)
    cluster.sync()
    assert mine.is_leader and list(mine.isr) == [2]
    assert mine.high_watermark == 3


def test_an_image_older_than_the_leaders_isr_change_does_not_undo_it(cluster):
    before = cluster.facade.image
    cluster.now += LAG_MS + 1
    assert cluster.alter_isrs(1) == [[1]]
    leader = cluster.brokers[1].get("t", 0)
    assert list(leader.isr) == [1]
    cluster.brokers[1].apply_image(before, cluster.now)  # a late image from before it
    assert list(leader.isr) == [1] and leader.maximal_isr == (1,)


def test_a_big_topic_is_taken_up_over_several_calls(tmp_path):
    c = Cluster(tmp_path)
    call(c.facade, create_topics(("big", 5, 3)), 7)
    manager = c.brokers[1]
    sizes = []
    while True:
        changes = manager.apply_image(c.facade.image, c.now, opens_max=2)
        sizes.append(len(manager.partitions))
        if not changes.pending:
            break
    assert sizes == [2, 4, 5]
    # an image that changed nothing of the topic visits none of its partitions again
    calls = []
    for p in manager.partitions.values():
        p.apply = lambda *a, _apply=p.apply, **k: calls.append(1) or _apply(*a, **k)
    call(c.facade, create_topics(("other", -1, -1, {0: [2]})), 7)
    manager.apply_image(c.facade.image, c.now)
    assert calls == []
    c.close()


def test_an_isr_change_refused_outright_is_forgotten_one_unanswered_is_not(cluster):
    """INELIGIBLE_REPLICA: the controller did not make the change, the maximal ISR is the
    committed one again. No answer: it may have been made, so a pending addition stays in
    the maximal ISR (the high watermark waits for it)."""
    produce(cluster, [b"a"])
    cluster.now += LAG_MS + 1
    cluster.replicate(2)
    cluster.replicate(2)
    assert cluster.alter_isrs(1) == [[1, 2]]  # 3 lagged
    cluster.replicate(3)
    cluster.replicate(3)  # caught up: 1 asks to add it back
    leader = cluster.brokers[1].get("t", 0)
    image = cluster.facade.image
    eligible = lambda r, e: image.broker_is_active(r)  # noqa: E731
    (change,) = cluster.brokers[1].isr_changes(cluster.now, eligible)
    assert change[1] == [1, 2, 3] and leader.maximal_isr == (1, 2, 3)
    [(_, outcome)] = alter_partition_result([change], None)  # timed out
    assert outcome == "timed out" and leader.maximal_isr == (1, 2, 3)
    (change,) = cluster.brokers[1].isr_changes(cluster.now, eligible)  # asked again
    refusal = m.AlterPartitionResponse(error_code=0, topics=[m.AlterPartitionResponse.TopicData(
        topic_id=leader.topic_id, partitions=[m.AlterPartitionResponse.PartitionData(
            partition_index=0, error_code=E.INELIGIBLE_REPLICA)])])
    [(_, outcome)] = alter_partition_result([change], refusal)
    assert outcome == "INELIGIBLE_REPLICA" and leader.maximal_isr == (1, 2)
