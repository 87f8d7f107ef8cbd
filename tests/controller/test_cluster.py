"""Brokers as the active controller sees them (kafka-facts §8.2, §8.3, §8.6): registration
and broker epochs, heartbeats, unfencing, session expiry, fencing, controlled shutdown,
unregistering and producer id blocks — scenarios asserting on the records written, the
results and the committed image."""

from kraftcore.controller.cluster import ProducerIdsResult
from kraftcore.metadata import records as R
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import HeartbeatResult, Uuid

from tests.controller.util import Cluster, NewTopic, error_code, names


def brcr(broker, epoch, **changes):
    return R.BrokerRegistrationChangeRecord(broker_id=broker, broker_epoch=epoch, **changes)


def isr_members(image):
    return {b for t in image.topics.values() for p in t.partitions.values() for b in p.isr}


def led_by(image, broker):
    return sorted((t.name, pid) for t in image.topics.values()
                  for pid, p in t.partitions.items() if p.leader == broker)


def offsets_of(raft, mark=0):
    """(offset, record) of every metadata record proposed since `mark`."""
    out = []
    for batch in raft.batches[mark:]:
        if not batch.control:
            out += [(o, r) for o, r, _ in R.decode_batch(batch.data)]
    return out


# ------------------------------------------------------------------ registration

def test_a_broker_epoch_is_the_offset_of_its_registration_record():
    c = Cluster(brokers=0)
    for b in range(3):
        expected = c.raft.next_offset()
        mark = c.mark()
        result = c.register(b)
        assert result.broker_epoch == expected
        [(offset, record)] = offsets_of(c.raft, mark)
        assert offset == expected and type(record) is R.RegisterBrokerRecord
        assert record.broker_epoch == expected and record.fenced
        assert c.image.brokers[b].broker_epoch == expected and c.image.brokers[b].fenced


def test_registrations_in_flight_get_the_offsets_they_are_written_at():
    c = Cluster(brokers=0)
    start = c.raft.next_offset()
    first = c.register(0, commit=False)
    second = c.register(1, commit=False)
    c.h.commit()
    assert first.result(timeout=0).broker_epoch == start
    assert second.result(timeout=0).broker_epoch == start + 1


def test_the_same_incarnation_keeps_its_epoch_and_flags():
    c = Cluster(brokers=2)
    epoch = c.epochs[0]
    mark = c.mark()
    assert c.register(0).broker_epoch == epoch  # a retry with the same incarnation
    [[record]] = c.batches_since(mark)
    assert record.broker_epoch == epoch and not record.fenced
    assert not c.image.brokers[0].fenced


def test_the_same_incarnation_keeps_the_controlled_shutdown_flag():
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1]}))
    c.heartbeat(0, want_shutdown=True)
    assert c.image.brokers[0].in_controlled_shutdown
    mark = c.mark()
    c.register(0)
    [[record]] = c.batches_since(mark)
    assert record.in_controlled_shutdown and not record.fenced
    assert c.image.brokers[0].in_controlled_shutdown


def test_a_new_incarnation_while_the_old_session_is_live_is_refused():
    c = Cluster(brokers=2)
    mark = c.mark()
    c.h.advance(8999)
    future = c.new_incarnation(0, commit=False)
    assert error_code(future) == ErrorCode.DUPLICATE_BROKER_REGISTRATION == 101
    assert [b for b in c.batches_since(mark) if b != [R.NoOpRecord()]] == []


def test_a_new_incarnation_after_the_session_expired_is_fenced_and_in_no_isr():
    c = Cluster(brokers=3)
    c.create(("t", 3, 3))
    old = c.image.brokers[0]
    c.h.advance(5000)
    c.keep_alive(1, 2)
    c.h.advance(4000)  # broker 0's session expires: it is fenced
    c.h.commit()
    expected = c.raft.next_offset()
    result = c.new_incarnation(0)
    assert result.broker_epoch == expected != old.broker_epoch
    broker = c.image.brokers[0]
    assert broker.fenced and broker.incarnation_id != old.incarnation_id
    assert 0 not in isr_members(c.image)
    assert led_by(c.image, 0) == []


def test_a_new_incarnation_takes_the_broker_out_of_every_isr_in_the_same_batch():
    # broker 0's session has expired but the expiry event has not run yet when its new
    # incarnation registers (queued events run before due deferred ones): the registration
    # itself takes the old incarnation out of every ISR, in its own batch.
    c = Cluster(brokers=3)
    c.create(("t", 3, 3))
    c.h.advance(5000)
    c.keep_alive(1, 2)
    c.h.now += 4000  # time passes; the controller has not run since
    mark = c.mark()
    c.new_incarnation(0)
    [batch] = [b for b in c.batches_since(mark) if b != [R.NoOpRecord()]]
    assert type(batch[0]) is R.RegisterBrokerRecord and batch[0].fenced
    assert names(batch[1:]) == ["PartitionChangeRecord"] * 3
    assert c.image.brokers[0].fenced
    assert 0 not in isr_members(c.image) and led_by(c.image, 0) == []


def test_a_registration_for_another_cluster_is_refused():
    c = Cluster(brokers=0)
    future = c.h.call("register_broker", 0, Uuid.random(c.rng), cluster_id="someone-else",
                      commit=False)
    assert error_code(future) == ErrorCode.INCONSISTENT_CLUSTER_ID == 104
    ok = c.h.call("register_broker", 0, Uuid.random(c.rng),
                  cluster_id=c.controller.config.cluster_id)
    assert ok.broker_epoch >= 0


def test_a_broker_must_support_the_metadata_version():
    c = Cluster(brokers=0)
    future = c.h.call("register_broker", 0, Uuid.random(c.rng),
                      features={"metadata.version": (1, 7)}, commit=False)
    assert error_code(future) == ErrorCode.UNSUPPORTED_VERSION


# ------------------------------------------------------------------ heartbeats

def test_a_heartbeat_with_a_stale_epoch_is_refused():
    c = Cluster(brokers=1)
    future = c.heartbeat(0, epoch=c.epochs[0] - 1, commit=False)
    assert error_code(future) == ErrorCode.STALE_BROKER_EPOCH == 77


def test_a_heartbeat_from_an_unknown_broker_is_refused():
    c = Cluster(brokers=1)
    future = c.heartbeat(7, epoch=5, commit=False)
    assert error_code(future) == ErrorCode.BROKER_ID_NOT_REGISTERED == 102


def test_a_broker_is_unfenced_only_once_caught_up_with_its_registration():
    c = Cluster(brokers=1, unfence=False)
    registered_at = c.epochs[0]
    mark = c.mark()
    behind = c.heartbeat(0, offset=registered_at - 1)
    assert behind == HeartbeatResult(is_caught_up=False, is_fenced=True,
                                     should_shut_down=False)
    assert c.batches_since(mark) == [] and c.image.brokers[0].fenced

    caught_up = c.heartbeat(0, offset=registered_at)
    assert caught_up == HeartbeatResult(is_caught_up=True, is_fenced=False,
                                        should_shut_down=False)
    assert c.batches_since(mark) == [[brcr(0, registered_at, fenced=-1)]]
    assert not c.image.brokers[0].fenced


def test_a_fenced_broker_that_wants_to_shut_down_is_told_to_at_once():
    c = Cluster(brokers=1, unfence=False)
    mark = c.mark()
    result = c.heartbeat(0, offset=-1, want_shutdown=True)
    assert result.should_shut_down and result.is_fenced
    assert c.batches_since(mark) == []


def test_unfencing_the_last_leader_does_not_refill_an_emptied_isr():
    # every replica of t-0 was fenced, so its ISR is empty (no fenced broker in any ISR):
    # the former leader coming back is not a clean leader; the partition stays leaderless
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1]}))
    c.fence(1)
    c.fence(0)
    p = c.partition("t")
    assert p.leader == -1 and p.isr == []
    mark = c.mark()
    c.heartbeat(0)
    assert names([r for b in c.batches_since(mark) for r in b]) == [
        "BrokerRegistrationChangeRecord"]
    assert c.partition("t").leader == -1


def test_a_broker_asking_to_be_fenced_leaves_every_isr():
    c = Cluster(brokers=3)
    c.create(("t", 3, 3))
    result = c.fence(1)
    assert result == HeartbeatResult(True, True, False)
    assert c.image.brokers[1].fenced and 1 not in isr_members(c.image)


# ------------------------------------------------------------------ session expiry

def test_a_session_expires_after_9000_ms_without_a_heartbeat():
    c = Cluster(brokers=3)
    assert c.controller.config.session_timeout_ms == 9000
    c.h.advance(5000)
    c.keep_alive(1, 2)
    mark = c.mark()
    c.h.advance(3999)  # 8999 ms since broker 0's last heartbeat
    assert not any(type(r) is R.BrokerRegistrationChangeRecord
                   for r in c.records_since(mark))
    c.h.advance(1)
    fences = [r for r in c.records_since(mark) if type(r) is R.BrokerRegistrationChangeRecord]
    assert fences == [brcr(0, c.epochs[0], fenced=1)]
    c.h.commit()
    assert [b for b, r in sorted(c.image.brokers.items()) if r.fenced] == [0]


def test_stale_brokers_are_fenced_one_per_event_until_none_is_left():
    c = Cluster(brokers=3)
    c.create(("t", 3, 3))
    c.h.advance(5000)
    c.keep_alive(2)
    mark = c.mark()
    c.h.advance(4000)  # brokers 0 and 1 are both stale
    # One expiry event per broker, in order (the writes of one run share a batch).
    assert [r.broker_id for r in c.records_since(mark)
            if type(r) is R.BrokerRegistrationChangeRecord] == [0, 1]
    c.h.commit()
    assert [b for b, r in sorted(c.image.brokers.items()) if r.fenced] == [0, 1]
    assert isr_members(c.image) == {2}
    assert set(c.leaders("t").values()) == {2}


def test_a_heartbeat_keeps_the_session_alive():
    c = Cluster(brokers=1)
    for _ in range(5):
        c.h.advance(8000)
        c.keep_alive(0)
    c.h.commit()
    assert not c.image.brokers[0].fenced
    c.h.advance(9000)
    c.h.commit()
    assert c.image.brokers[0].fenced


def test_fenced_brokers_have_no_session_to_expire():
    c = Cluster(brokers=2, unfence=False)
    mark = c.mark()
    c.h.advance(30_000)
    assert [b for b in c.batches_since(mark) if b != [R.NoOpRecord()]] == []


# ------------------------------------------------------------------ fencing moves leaders

def test_fencing_moves_every_leadership_of_the_broker_in_one_batch():
    c = Cluster(brokers=3)
    c.create(("t", 6, 3), ("u", 3, 2))
    led = led_by(c.image, 0)
    held = sorted((t.name, pid) for t in c.image.topics.values()
                  for pid, p in t.partitions.items() if 0 in p.isr)
    assert led and len(held) > len(led)
    c.h.advance(5000)
    c.keep_alive(1, 2)
    mark = c.mark()
    c.h.advance(4000)
    # NoOps written in the same run may share the batch.
    [batch] = [[r for r in b if r != R.NoOpRecord()] for b in c.batches_since(mark)
               if b.count(R.NoOpRecord()) < len(b)]
    assert names(batch) == ["PartitionChangeRecord"] * len(held) + [
        "BrokerRegistrationChangeRecord"]
    assert batch[-1] == brcr(0, c.epochs[0], fenced=1)
    moved = {(c.image.topic(r.topic_id).name, r.partition_id) for r in batch[:-1]
             if r.leader != -2}
    assert moved == set(led)
    c.h.commit()
    assert led_by(c.image, 0) == [] and 0 not in isr_members(c.image)
    for name, pid in led:
        p = c.partition(name, pid)
        assert p.leader in p.isr and p.leader != 0


# ------------------------------------------------------------------ controlled shutdown

def test_controlled_shutdown_moves_leaderships_then_waits_for_the_other_brokers():
    c = Cluster(brokers=3)
    c.create(("t", 3, 3))
    led = led_by(c.image, 0)
    assert led
    mark = c.mark()
    first = c.heartbeat(0, want_shutdown=True)
    assert first == HeartbeatResult(is_caught_up=True, is_fenced=False,
                                    should_shut_down=False)
    [batch] = c.batches_since(mark)
    assert sorted(names(batch)) == sorted(["PartitionChangeRecord"] * 3 +
                                          ["BrokerRegistrationChangeRecord"])
    assert brcr(0, c.epochs[0], in_controlled_shutdown=1) in batch
    shutdown_offset = c.raft.batches[mark].last_offset
    broker = c.image.brokers[0]
    assert broker.in_controlled_shutdown and not broker.fenced
    assert led_by(c.image, 0) == [] and 0 not in isr_members(c.image)

    # the other brokers have not replayed the shutdown's records yet
    c.heartbeat(1, offset=shutdown_offset - 1)
    c.heartbeat(2, offset=shutdown_offset)
    again = c.heartbeat(0, want_shutdown=True)
    assert not again.should_shut_down and not again.is_fenced
    # now every active broker has
    c.heartbeat(1, offset=shutdown_offset)
    mark = c.mark()
    done = c.heartbeat(0, want_shutdown=True)
    assert done.should_shut_down and done.is_fenced
    assert c.batches_since(mark) == [[brcr(0, c.epochs[0], fenced=1)]]
    assert c.image.brokers[0].fenced


def test_a_broker_that_leads_nothing_shuts_down_at_once():
    c = Cluster(brokers=3)
    c.create(NewTopic("t", assignments={0: [1, 0], 1: [2, 0]}))
    assert led_by(c.image, 0) == []
    mark = c.mark()
    result = c.heartbeat(0, want_shutdown=True)
    assert result == HeartbeatResult(True, True, True)
    [batch] = c.batches_since(mark)
    assert names(batch) == ["PartitionChangeRecord"] * 2 + ["BrokerRegistrationChangeRecord"]
    assert batch[-1] == brcr(0, c.epochs[0], fenced=1)
    assert c.image.brokers[0].fenced and 0 not in isr_members(c.image)


def test_fence_and_shutdown_together_shut_down_at_once():
    c = Cluster(brokers=2)
    c.create(NewTopic("t", assignments={0: [0, 1]}))
    result = c.heartbeat(0, want_fence=True, want_shutdown=True)
    assert result.should_shut_down and result.is_fenced
    assert c.partition("t").leader == 1


# ------------------------------------------------------------------ unregistering

def test_unregistering_removes_the_broker_from_every_isr_then_the_registration():
    c = Cluster(brokers=3)
    c.create(("t", 3, 3))
    epoch = c.epochs[1]
    mark = c.mark()
    assert c.h.call("unregister_broker", 1) is None
    [batch] = c.batches_since(mark)
    assert names(batch) == ["PartitionChangeRecord"] * 3 + ["UnregisterBrokerRecord"]
    assert batch[-1] == R.UnregisterBrokerRecord(broker_id=1, broker_epoch=epoch)
    assert 1 not in c.image.brokers and 1 not in isr_members(c.image)
    assert led_by(c.image, 1) == []


def test_unregistering_an_unknown_broker_is_refused():
    c = Cluster(brokers=1)
    future = c.h.call("unregister_broker", 4, commit=False)
    assert error_code(future) == ErrorCode.BROKER_ID_NOT_REGISTERED


# ------------------------------------------------------------------ producer ids

def test_producer_id_blocks_of_1000_strictly_increase():
    c = Cluster(brokers=2)
    mark = c.mark()
    first = c.h.call("allocate_producer_ids", 0, c.epochs[0], commit=False)
    second = c.h.call("allocate_producer_ids", 1, c.epochs[1], commit=False)
    c.h.commit()
    third = c.h.call("allocate_producer_ids", 0, c.epochs[0])
    assert [first.result(timeout=0), second.result(timeout=0), third] == [
        ProducerIdsResult(0, 1000), ProducerIdsResult(1000, 1000),
        ProducerIdsResult(2000, 1000)]
    assert [r.next_producer_id for r in c.records_since(mark)] == [1000, 2000, 3000]
    assert c.image.producer_ids.next_producer_id == 3000


def test_producer_ids_need_the_current_broker_epoch():
    c = Cluster(brokers=1)
    future = c.h.call("allocate_producer_ids", 0, c.epochs[0] + 1, commit=False)
    assert error_code(future) == ErrorCode.STALE_BROKER_EPOCH


def test_producer_ids_survive_a_failover():
    c = Cluster(brokers=1)
    c.h.call("allocate_producer_ids", 0, c.epochs[0])
    c.raft.lose_leadership(2)
    c.controller.on_leader_change()
    c.h.run()
    c.raft.win_leadership()
    c.controller.on_leader_change()
    c.h.commit()
    assert c.h.call("allocate_producer_ids", 0, c.epochs[0]) == ProducerIdsResult(1000, 1000)
