"""QuorumController: the write path and leadership (kafka-facts §8.1), as scenarios over a
hand-driven Raft (`FakeRaft`): the test decides when records commit, when leadership moves
and when a propose fails. A randomized run at the end checks the invariants of every
committed image after every step."""

import random

import pytest

from kraftcore import codec
from kraftcore.controller.queue import ControllerQueueFullError
from kraftcore.controller.replication import (NewTopic, UNCLEAN_LEADER_ELECTION,
                                              TopicResult)
from kraftcore.errors import ControllerError, NotControllerError
from kraftcore.metadata import records as R
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC, METADATA_VERSION
from kraftcore.protocol.error_codes import ErrorCode

from tests.controller.harness import Harness
from tests.controller.util import (Cluster, error_code, invariant_violations,
                                   isr_index_problems, names, records_since, replayed_image)


def feature_levels(raft):
    return [r for r in records_since(raft) if type(r) is R.FeatureLevelRecord]


def lose_leadership(cluster, new_leader=2):
    cluster.raft.lose_leadership(new_leader)
    cluster.controller.on_leader_change()
    cluster.h.run()


def regain_leadership(cluster):
    cluster.raft.win_leadership()
    cluster.controller.on_leader_change()
    cluster.h.commit()  # commits the LeaderChange batch: the controller claims


# ------------------------------------------------------------------ futures and commits

def test_a_future_completes_only_after_its_records_commit():
    c = Cluster()
    mark = c.mark()
    future = c.create(("t", 2, 3), commit=False)

    assert not future.done()
    topic = c.working.topic("t")
    assert c.batches_since(mark) == [[R.TopicRecord(name="t", topic_id=topic.topic_id),
                                      topic.partitions[0], topic.partitions[1]]]
    assert c.image.topic("t") is None  # committed image: not yet
    assert c.working.topic("t") is not None  # working image: replayed at once

    c.h.commit()
    assert future.done()
    [result] = future.result(timeout=0)
    assert result == TopicResult("t", c.image.topic("t").topic_id, 0, None, 2, 3)


def test_futures_complete_in_offset_order_as_their_batches_commit():
    c = Cluster()
    first = c.create(("a", 1, 1), commit=False)
    second = c.create(("b", 1, 1), commit=False)
    c.h.commit(1)
    assert first.done() and not second.done()
    assert c.image.topic("a") is not None and c.image.topic("b") is None
    c.h.commit(1)
    assert second.done()


def test_an_operation_that_writes_nothing_waits_for_a_read_barrier():
    # The refusal was read from this controller's image; it is answered only once a NoOp
    # proposed after the read commits in this controller's epoch (no stale read).
    c = Cluster()
    mark = c.mark()
    future = c.create(NewTopic("no spaces allowed"), commit=False)
    assert not future.done()
    assert [type(r).__name__ for r in c.records_since(mark)] == ["NoOpRecord"]
    c.h.commit()
    [result] = future.result(timeout=0)
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.controller.barriers == 1


def test_one_read_barrier_serves_every_read_queued_before_it():
    c = Cluster()
    mark = c.mark()
    futures = [c.controller.create_topics([NewTopic(f"bad name {i}")]) for i in range(3)]
    futures.append(c.controller.delete_topics(["missing"]))
    c.h.run()
    assert [type(r).__name__ for r in c.records_since(mark)] == ["NoOpRecord"]
    assert not any(f.done() for f in futures)
    c.h.commit()
    assert [f.result(timeout=0)[0].error_code for f in futures] == [
        ErrorCode.INVALID_TOPIC_EXCEPTION] * 3 + [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_a_deposed_controller_never_answers_a_read_from_its_stale_image():
    # The controller lost its leadership without hearing of it yet: its barrier does not
    # commit, so the refusal it read ("topic does not exist") is never reported as fact.
    c = Cluster()
    future = c.controller.delete_topics(["t"])
    c.h.run()
    lose_leadership(c)
    error = future.exception(timeout=0)
    assert isinstance(error, NotControllerError) and error.controller_id == 2


def test_a_read_queued_on_a_standby_fails_with_not_controller():
    c = Cluster()
    lose_leadership(c)
    future = c.controller.delete_topics(["t"])
    c.h.run()
    assert isinstance(future.exception(timeout=0), NotControllerError)


def test_a_heartbeat_that_writes_nothing_skips_the_read_barrier():
    c = Cluster()
    c.h.advance(100)
    mark = c.mark()
    future = c.heartbeat(0, commit=False)
    assert future.done() and c.mark() == mark


def test_an_operation_that_writes_nothing_waits_for_pending_writes():
    # read your writes: the second create sees the first (uncommitted) topic and writes
    # nothing, but its answer must not reach the client before that topic is committed.
    c = Cluster()
    first = c.create(("t", 1, 1), commit=False)
    again = c.create(("t", 1, 1), commit=False)
    assert not first.done() and not again.done()
    c.h.commit()
    assert first.result(timeout=0)[0].error_code == 0
    assert again.result(timeout=0)[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_an_operation_that_writes_nothing_waits_for_the_controllers_own_writes():
    # Session expiry fences broker 0 (the controller's own write, not yet committed). A
    # heartbeat from broker 0 asking to shut down writes nothing and answers "fenced, shut
    # down" from the working image: that answer describes an uncommitted write, so it must
    # wait for it — and fail if the write is lost with the leadership.
    c = Cluster()
    c.h.advance(5000)
    c.keep_alive(1, 2)
    c.h.advance(4000)
    assert c.working.brokers[0].fenced and not c.image.brokers[0].fenced

    future = c.heartbeat(0, want_shutdown=True, commit=False)
    assert not future.done(), ("the answer came before the fencing it reports committed: "
                               f"{future.result(timeout=0)}")
    lose_leadership(c)
    assert isinstance(future.exception(timeout=0), NotControllerError)
    assert not c.image.brokers[0].fenced


def test_the_committed_image_equals_the_working_image_after_commit():
    c = Cluster()
    c.create(("t", 3, 3), ("u", 2, 2), commit=False)
    c.heartbeat(1, want_fence=True, commit=False)
    c.h.call("allocate_producer_ids", 0, c.epochs[0], commit=False)
    assert not c.image.same_state(c.working)
    c.h.commit()
    assert c.image.same_state(c.working)
    assert c.controller.working.end_offset == c.image.end_offset == c.raft.next_offset()


def test_the_writes_of_one_run_share_one_batch_stamped_with_the_runs_time():
    c = Cluster()
    mark = c.mark()
    c.h.now += 7
    futures = [c.controller.create_topics([NewTopic(f"t{i}", 1, 1)]) for i in range(3)]
    c.h.run()
    [batch] = c.raft.batches[-1:]
    assert [r.name for r in records_since(c.raft, mark) if type(r) is R.TopicRecord] == [
        "t0", "t1", "t2"]
    assert len(c.batches_since(mark)) == 1
    assert codec.decode_batches(batch.data)[0].max_timestamp == c.h.now
    c.h.commit()
    assert all(f.done() for f in futures)
    # The image the active controller adopted at commit is the one a standby replays from
    # the batch, provenance included (snapshots of both carry its timestamp).
    standby = Harness(node_id=2, leader_id=1)
    standby.controller.on_commits(c.raft.batches[:c.raft.committed])
    standby.run()
    assert standby.image.same_state(c.image)
    assert (standby.image.end_offset, standby.image.epoch, standby.image.timestamp_ms) == (
        c.image.end_offset, c.image.epoch, c.image.timestamp_ms) == (
        batch.last_offset + 1, batch.epoch, c.h.now)


def test_a_run_splits_its_batch_at_the_record_limit():
    c = Cluster(batch_records_max=4)
    mark = c.mark()
    for i in range(3):  # 3 records each, in one run
        c.controller.create_topics([NewTopic(f"t{i}", 2, 1)])
    c.h.run()
    assert [len(b) for b in c.batches_since(mark)] == [3, 3, 3]
    c.h.commit()
    assert all(c.image.topic(f"t{i}") is not None for i in range(3))


# ------------------------------------------------------------------ standby controllers

def test_a_standby_controller_rejects_every_operation_naming_the_leader():
    h = Harness(node_id=2, leader_id=1)
    futures = [h.controller.create_topics([NewTopic("t")]),
               h.controller.register_broker(0, None),
               h.controller.broker_heartbeat(0, 1, metadata_offset=0),
               h.controller.elect_leaders("preferred")]
    h.run()
    for future in futures:
        exc = future.exception(timeout=0)
        assert isinstance(exc, NotControllerError)
        assert exc.code == ErrorCode.NOT_CONTROLLER == 41
        assert exc.controller_id == 1
        assert "node 1 is the active controller" in str(exc)
    assert h.raft.batches == []


def test_a_standby_controller_replays_the_committed_log():
    c = Cluster()
    c.create(("t", 3, 3))
    c.fence(2)
    standby = Harness(node_id=2, leader_id=1)
    standby.controller.on_commits(c.raft.batches[:c.raft.committed])
    standby.run()
    assert not standby.controller.active
    assert standby.image.same_state(c.image)
    assert standby.image.end_offset == c.image.end_offset


# ------------------------------------------------------------------ losing leadership

def test_losing_leadership_fails_every_parked_future():
    c = Cluster()
    c.create(("base", 1, 1))
    created = c.create(("t", 1, 3), commit=False)
    fenced = c.heartbeat(2, want_fence=True, commit=False)
    waiting = c.create(("t", 1, 3), commit=False)  # writes nothing, waits (read your writes)
    futures = [created, fenced, waiting]
    assert not any(f.done() for f in futures)

    lose_leadership(c, new_leader=3)
    for future in futures:
        exc = future.exception(timeout=0)
        assert isinstance(exc, NotControllerError) and exc.controller_id == 3
    assert not c.controller.active
    assert c.controller.working is c.image  # back to the committed image
    assert c.image.topic("t") is None and not c.image.brokers[2].fenced


def test_no_future_completes_for_records_that_were_never_committed():
    c = Cluster()
    lost = c.create(("t", 1, 3), commit=False)
    lose_leadership(c)
    regain_leadership(c)
    c.h.commit()
    c.h.advance(1000)
    c.h.commit()
    assert isinstance(lost.exception(timeout=0), NotControllerError)
    assert c.image.topic("t") is None
    assert "TopicRecord" not in names(records_since(c.raft))


def test_a_standby_that_loses_nothing_ignores_leader_changes():
    h = Harness(node_id=2, leader_id=1)
    h.raft.lose_leadership(3)
    h.controller.on_leader_change()
    h.run()
    assert not h.controller.active and h.controller.renounces == 0


def test_a_failed_propose_renounces_and_resigns():
    c = Cluster()
    parked = c.create(("t", 1, 3), commit=False)
    c.raft.fail_propose = True
    failed = c.create(("u", 1, 3), commit=False)

    assert isinstance(failed.exception(timeout=0), NotControllerError)
    assert isinstance(parked.exception(timeout=0), NotControllerError)
    assert c.raft.resigned == 1
    assert not c.controller.active and c.controller.renounces == 1
    assert c.controller.working is c.image
    # the controller answers as a standby from now on
    later = c.create(("v", 1, 1), commit=False)
    assert isinstance(later.exception(timeout=0), NotControllerError)


def test_after_regaining_leadership_the_controller_works_from_the_committed_image():
    c = Cluster()
    c.create(("kept", 1, 3))
    c.create(("lost", 2, 3), commit=False)
    lose_leadership(c)
    regain_leadership(c)
    assert c.controller.active and c.controller.active_epoch == c.raft.leader.epoch == 3
    assert c.controller.working.topic("lost") is None
    assert c.controller.working.same_state(c.image)
    assert isr_index_problems(c.controller) == []

    [result] = c.create(("lost", 1, 1))
    assert result.error_code == 0
    assert c.image.topic("lost").topic_id == result.topic_id
    assert len(c.image.topic("lost").partitions) == 1


def test_after_a_failover_every_broker_session_starts_afresh():
    c = Cluster()  # every broker heartbeated at 0
    c.h.advance(8000)
    lose_leadership(c)
    regain_leadership(c)  # at 8000: fresh sessions
    mark = c.mark()
    c.h.advance(8999)  # 16999: within the fresh sessions
    assert not any(type(r) is R.BrokerRegistrationChangeRecord
                   for r in c.records_since(mark))
    c.h.advance(1)
    c.h.commit()
    assert all(b.fenced for b in c.image.brokers.values())


# ------------------------------------------------------------------ activation

def test_activation_writes_the_metadata_version_on_an_empty_log():
    h = Harness()
    [record] = feature_levels(h.raft)
    assert record == R.FeatureLevelRecord(name=METADATA_VERSION,
                                          feature_level=h.config.bootstrap_metadata_version)
    assert h.image.metadata_version() is None  # not committed yet
    h.commit()
    assert h.image.metadata_version() == 21  # 3.9-IV0, the default


def test_activation_writes_the_metadata_version_only_once():
    c = Cluster()
    for _ in range(2):
        lose_leadership(c)
        regain_leadership(c)
    c.h.commit()
    assert len(feature_levels(c.raft)) == 1


def test_activation_writes_the_metadata_version_again_when_the_first_never_committed():
    h = Harness(bootstrap_metadata_version=14)
    h.raft.lose_leadership(2)  # drops the uncommitted FeatureLevelRecord
    h.controller.on_leader_change()
    h.run()
    assert feature_levels(h.raft) == []
    h.raft.win_leadership()
    h.controller.on_leader_change()
    h.commit()
    h.commit()
    assert [r.feature_level for r in feature_levels(h.raft)] == [14]
    assert h.image.metadata_version() == 14


# ------------------------------------------------------------------ transactions

def _value_bytes(batch):
    return sum(len(r.value) for b in codec.decode_batches(batch.data) for r in b.records)


def test_an_operation_above_batch_bytes_max_is_one_transaction_over_several_batches():
    c = Cluster(batch_bytes_max=300)
    mark = c.mark()
    future = c.create(("big", 12, 3), commit=False)
    batches = c.batches_since(mark)
    assert len(batches) > 2
    assert type(batches[0][0]) is R.BeginTransactionRecord
    assert type(batches[-1][-1]) is R.EndTransactionRecord
    flat = [r for b in batches for r in b]
    assert names(flat).count("BeginTransactionRecord") == 1
    assert names(flat).count("EndTransactionRecord") == 1
    assert names(flat[1:-1]) == ["TopicRecord"] + ["PartitionRecord"] * 12
    for batch in c.raft.batches[mark:]:
        assert _value_bytes(batch) <= 300

    # the image applies the transaction as a unit: nothing until its End commits
    for _ in range(len(batches) - 1):
        c.h.commit(1)
        assert c.image.topic("big") is None and not future.done()
    c.h.commit(1)
    assert len(c.image.topic("big").partitions) == 12
    assert future.result(timeout=0)[0].error_code == 0
    assert c.image.same_state(c.working)


def test_a_transaction_committed_in_parts_followed_by_another_write():
    # The transaction's first batch commits alone (the loader opens the transaction); the
    # rest commits together with a later, ordinary write.
    c = Cluster(batch_bytes_max=300)
    big = c.create(("big", 12, 3), commit=False)
    small = c.create(("small", 1, 1), commit=False)
    c.h.commit(1)
    assert c.controller.loader.in_transaction
    c.h.commit()
    assert big.result(timeout=0)[0].error_code == 0
    assert small.result(timeout=0)[0].error_code == 0
    assert not c.controller.loader.in_transaction
    assert c.image.same_state(c.working)
    assert len(c.image.topic("big").partitions) == 12


def test_an_open_transaction_left_by_a_failed_controller_is_aborted():
    c = Cluster(batch_bytes_max=300)
    mark = c.mark()
    future = c.create(("big", 12, 3), commit=False)
    c.h.commit(2)  # Begin and part of the records commit; the rest is lost
    assert c.controller.loader.in_transaction
    lose_leadership(c)
    assert isinstance(future.exception(timeout=0), NotControllerError)

    regain_leadership(c)  # the next active controller finds the transaction open
    c.h.commit()
    assert names(c.records_since(mark))[-1] == "AbortTransactionRecord"
    assert not c.controller.loader.in_transaction
    assert c.image.topic("big") is None
    [result] = c.create(("big", 2, 3))
    assert result.error_code == 0 and len(c.image.topic("big").partitions) == 2


def test_an_oversized_operation_without_metadata_transactions_fails_its_future():
    # metadata.version 3.6-IV0 (12) has no metadata transactions: an operation above the
    # batch limit cannot be written; its future fails, the controller carries on.
    c = Cluster(batch_bytes_max=300, bootstrap_metadata_version=12)
    mark = c.mark()
    future = c.controller.create_topics([NewTopic("big", 12, 3)])
    c.h.run()  # must not raise out of the controller's event loop
    assert future.done() and isinstance(future.exception(timeout=0), ControllerError)
    assert c.mark() == mark and c.controller.active
    assert c.create(("small", 1, 1))[0].error_code == 0


def test_an_operation_above_the_record_limit_is_refused():
    c = Cluster(operation_records_max=4)
    mark = c.mark()
    [result] = c.create(("ok", 3, 1))  # 1 TopicRecord + 3 PartitionRecords
    assert result.error_code == 0
    future = c.create(("too_many", 4, 1), commit=False)
    assert error_code(future) == ErrorCode.INVALID_REQUEST
    assert names(c.records_since(mark)) == ["TopicRecord"] + ["PartitionRecord"] * 3


# ------------------------------------------------------------------ periodic NoOps

def test_noop_records_are_written_every_max_idle_interval_while_idle():
    c = Cluster(brokers=0)
    mark = c.mark()
    c.h.advance(499)
    assert c.batches_since(mark) == []
    c.h.advance(1)
    assert c.batches_since(mark) == [[R.NoOpRecord()]]
    c.h.advance(500)
    assert c.batches_since(mark) == [[R.NoOpRecord()], [R.NoOpRecord()]]
    c.h.commit()
    assert c.image.end_offset == c.raft.next_offset()


def test_no_noop_records_when_the_interval_is_zero_or_the_metadata_version_is_too_old():
    for config in ({"idle_interval_ms_max": 0}, {"bootstrap_metadata_version": 4}):
        c = Cluster(brokers=0, **config)
        mark = c.mark()
        c.h.advance(5000)
        assert c.batches_since(mark) == [], config


def test_a_standby_writes_no_noop_records():
    c = Cluster(brokers=0)
    lose_leadership(c)
    mark = c.mark()
    c.h.advance(5000)
    assert c.mark() == mark


# ------------------------------------------------------------------ the event queue

def test_a_full_queue_refuses_client_operations():
    c = Cluster()
    c.controller.queue.events_max = 2
    futures = [c.controller.create_topics([NewTopic(name, 1, 1)]) for name in "abc"]
    assert not futures[0].done() and not futures[1].done()
    exc = futures[2].exception(timeout=0)
    assert isinstance(exc, ControllerQueueFullError)
    assert exc.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    c.h.commit()
    assert [f.result(timeout=0)[0].error_code for f in futures[:2]] == [0, 0]
    assert c.image.topic("c") is None


def test_a_full_queue_still_takes_commits_and_leader_changes():
    # Commits and leadership news come from Raft: refusing them would leave a gap in the
    # loader (the next commit fails) or an active controller that does not know it lost.
    c = Cluster()
    c.create(("t", 1, 1), commit=False)
    c.controller.queue.events_max = 2
    c.controller.create_topics([NewTopic("a", 1, 1)])
    c.controller.create_topics([NewTopic("b", 1, 1)])
    c.controller.on_commits(c.raft.take_commits())
    c.raft.lose_leadership(2)
    c.controller.on_leader_change()
    c.h.run()
    assert c.image.topic("t") is not None
    assert not c.controller.active


# ------------------------------------------------------------------ randomized invariants

TOPIC_NAMES = ("alpha", "beta", "gamma", "delta")


class RandomRun:
    """Random operations on a cluster of up to 5 brokers, committed at random points.

    Brokers behave as processes do: a broker knows the epoch its registration returned; one
    that asked to shut down keeps asking until told to stop; a stopped broker only comes
    back as a new incarnation."""

    BROKERS = 5

    def __init__(self, seed, steps, **config):
        self.rng = random.Random(seed)
        self.c = Cluster(brokers=4, seed=seed, **config)
        self.steps = steps
        self.epochs = dict(self.c.epochs)  # what each broker was told
        self.shutting = set()
        self.stopped = set()
        self.pending = []  # (kind, broker id, future)
        self.leader_epochs = {}
        self.log = []

    def settle(self):
        """Let the brokers see the answers that arrived."""
        waiting = []
        for kind, b, future in self.pending:
            if not future.done():
                waiting.append((kind, b, future))
            elif future.exception(timeout=0) is None:
                result = future.result(timeout=0)
                if kind == "register":
                    self.epochs[b] = result.broker_epoch
                elif result.should_shut_down and b in self.shutting:
                    self.shutting.discard(b)
                    self.stopped.add(b)
        self.pending = waiting

    def running(self):
        return sorted(b for b in self.epochs if b not in self.stopped)

    def heartbeat(self, b, **kwargs):
        if b in self.shutting:
            kwargs["want_shutdown"] = True
        future = self.c.heartbeat(b, offset=self.c.committed_offset(), epoch=self.epochs[b],
                                  commit=False, **kwargs)
        self.pending.append(("heartbeat", b, future))

    def register(self):
        b = self.rng.randrange(self.BROKERS)
        restart = b not in self.epochs or b in self.stopped or self.rng.random() < 0.3
        if restart:  # a new process: a new incarnation
            self.c.incarnations[b] = None
            self.shutting.discard(b)
            self.stopped.discard(b)
            self.epochs.pop(b, None)
        future = self.c.register(b, commit=False)
        self.pending.append(("register", b, future))

    def alter_partition(self):
        w = self.c.working
        candidates = [(t, pid, p) for t in w.topics.values()
                      for pid, p in sorted(t.partitions.items()) if p.leader != -1]
        if not candidates:
            return
        topic, pid, p = self.rng.choice(candidates)
        if self.rng.random() < 0.5 and len(p.isr) > 1:
            isr = [b for b in p.isr if b == p.leader or self.rng.random() < 0.5]
        else:
            isr = list(p.isr) + [b for b in p.replicas if b not in p.isr
                                 and w.broker_is_active(b)][:1]
        epoch = self.epochs.get(p.leader, -1)
        self.c.h.call("alter_partition", p.leader, epoch, topic.topic_id, pid,
                      leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                      new_isr=isr, commit=False)

    def step(self):
        rng, c, h = self.rng, self.c, self.c.h
        op = rng.choices(
            ["heartbeat", "fence", "shutdown", "advance", "create", "delete", "partitions",
             "alter", "elect", "config", "register", "commit", "commit_some", "failover"],
            [25, 2, 3, 8, 6, 2, 2, 8, 3, 3, 3, 12, 6, 1])[0]
        self.log.append(op)
        running = self.running()
        if op in ("heartbeat", "fence", "shutdown"):
            if running:
                b = rng.choice(running)
                if op == "shutdown":
                    self.shutting.add(b)
                self.heartbeat(b, want_fence=op == "fence")
        elif op == "advance":
            h.advance(rng.randrange(0, 4000))
        elif op == "create":
            c.create(NewTopic(rng.choice(TOPIC_NAMES), rng.randint(1, 4), rng.randint(1, 3)),
                     commit=False)
        elif op == "delete":
            h.call("delete_topics", [rng.choice(TOPIC_NAMES)], commit=False)
        elif op == "partitions":
            name = rng.choice(TOPIC_NAMES)
            topic = c.working.topic(name)
            count = (len(topic.partitions) if topic else 1) + rng.randint(0, 2)
            h.call("create_partitions", name, count, commit=False)
        elif op == "alter":
            self.alter_partition()
        elif op == "elect":
            h.call("elect_leaders", rng.choice(["preferred", "unclean"]), commit=False)
        elif op == "config":
            value = rng.choice(["true", "false"])
            if rng.random() < 0.5:
                resource = (CONFIG_BROKER, "")
            else:
                resource = (CONFIG_TOPIC, rng.choice(TOPIC_NAMES))
            h.call("incremental_alter_configs",
                   [(*resource, [(UNCLEAN_LEADER_ELECTION, "set", value)])], commit=False)
        elif op == "register":
            self.register()
        elif op == "commit":
            h.commit()
        elif op == "commit_some":
            pending = len(c.raft.batches) - c.raft.committed
            h.commit(rng.randint(0, pending))
        elif op == "failover":
            lose_leadership(c)
            regain_leadership(c)
        self.settle()

    def check(self, step):
        problems = invariant_violations(self.c.image, self.leader_epochs)
        problems += isr_index_problems(self.c.controller)
        assert problems == [], f"step {step} ({self.log[-8:]}): {problems}"
        if step % 20 == 0:
            # the committed image (adopted from the controller's own writes) is the one
            # replaying the committed log gives
            replayed = replayed_image(self.c.raft)
            assert replayed.same_state(self.c.image), f"step {step} ({self.log[-8:]})"
            assert replayed.end_offset == self.c.image.end_offset

    def run(self):
        for step in range(self.steps):
            self.step()
            self.check(step)
        self.c.h.commit()
        self.check(0)
        assert self.c.image.same_state(self.c.working)
        return self


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_keep_the_invariants_of_every_committed_image(seed):
    RandomRun(seed, steps=300).run()


@pytest.mark.parametrize("seed", [0, 1, 10, 33])
def test_random_operations_with_metadata_transactions_keep_the_invariants(seed):
    # a small batch limit: creating a topic of a few partitions is a metadata transaction,
    # committed in parts and interrupted by failovers (seed 10 commits a transaction's
    # first batch alone, then the rest together with a later write; seed 33 fails over
    # with a transaction half committed)
    RandomRun(seed, steps=300, batch_bytes_max=250).run()


def _values(records, level):
    from kraftcore.metadata.snapshot import record_versions
    return R.encode_values(records, record_versions(records, level))


def test_batches_another_writer_commits_in_the_epoch_are_replayed_not_adopted():
    """`RaftDriver.append` on the active controller's node: NoOps are replayed beside the
    controller's own writes; anything else makes it step down, so that the next active
    controller starts from a committed image that holds those records."""
    from kraftcore.controller.local import LocalQuorum

    q = LocalQuorum()
    level = q.controller.image.metadata_version()
    alter = [(CONFIG_BROKER, "", [("min.insync.replicas", "set", "2")])]

    q.core.propose(_values([R.NoOpRecord()], level), q.now_ms)  # commits with the write
    assert q.call("incremental_alter_configs", alter) == [(0, None)]
    assert q.controller.active and q.controller.foreign_batches == 1
    assert q.controller.image.configs[(CONFIG_BROKER, "")] == {"min.insync.replicas": "2"}

    foreign = R.ConfigRecord(resource_type=CONFIG_BROKER, resource_name="",
                             name="foreign.key", value="x")
    # A write is queued, then the other writer's batch commits: the controller learns of
    # the foreign record in the same run, steps down, and its write is never proposed.
    future = q.controller.incremental_alter_configs(
        [(CONFIG_BROKER, "", [("min.insync.replicas", "set", "3")])])
    q.core.propose(_values([foreign], level), q.now_ms)
    q.run()
    with pytest.raises(NotControllerError):
        future.result(timeout=0)
    assert not q.controller.active and q.controller.renounces == 1
    expected = {"min.insync.replicas": "2", "foreign.key": "x"}
    assert q.controller.image.configs[(CONFIG_BROKER, "")] == expected
    # The quorum of one elects itself again (its resignation, then an election, each
    # after a timeout); the new term's working image has the record.
    for _ in range(5):
        if q.controller.active:
            break
        q.run(q.now_ms + 10_000)
    assert q.controller.active and q.controller.active_epoch > 1
    assert q.controller.working.configs[(CONFIG_BROKER, "")] == expected
    assert q.call("incremental_alter_configs", alter) == [(0, None)]


def test_an_operation_that_raises_fails_its_request_and_the_controller_goes_on():
    from kraftcore.controller.local import LocalQuorum

    q = LocalQuorum()

    def broken(image, now_ms):
        return {}["missing"]

    failed = q.controller.submit("broken", broken)
    after = q.controller.incremental_alter_configs(
        [(CONFIG_BROKER, "", [("min.insync.replicas", "set", "2")])])
    q.run()
    with pytest.raises(ControllerError) as info:
        failed.result(timeout=0)
    assert info.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert "KeyError" in str(info.value) and isinstance(info.value.__cause__, KeyError)
    assert q.controller.operation_failures == 1 and q.controller.active
    assert after.result(timeout=0) == [(0, None)]
