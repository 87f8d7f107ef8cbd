"""MetadataLoader: committed batches in offset order become images (kafka-facts §5.2
"Metadata transactions"), control batches only move offsets, metadata transactions apply as
a unit or not at all, the snapshot policy of §4.6 (bytes, interval, never inside a
transaction), and loading a snapshot resets the loader."""

import pytest

from kraftcore.errors import CorruptRecordError, MetadataError
from kraftcore.metadata import records as R
from kraftcore.raft import control as C
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.image import CONFIG_TOPIC, EMPTY_IMAGE, METADATA_VERSION
from kraftcore.metadata.loader import (SNAPSHOT_INTERVAL_BYTES_DEFAULT, SNAPSHOT_INTERVAL_MS_DEFAULT,
                                      MetadataLoader)
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.types import Uuid
from kraftcore.raft.types import CommittedBatch

TS = 1_700_000_000_000
T1, T2 = Uuid.from_ints(1, 1), Uuid.from_ints(2, 2)


class Log:
    """Makes contiguous CommittedBatch objects, as the Raft core delivers them."""

    def __init__(self, offset=0, epoch=1):
        self.offset = offset
        self.epoch = epoch
        self.timestamp = TS

    def data(self, *records, epoch=None, timestamp=None):
        epoch = self.epoch if epoch is None else epoch
        self.timestamp = self.timestamp + 1 if timestamp is None else timestamp
        data = R.encode_batch(list(records), base_offset=self.offset, leader_epoch=epoch,
                              timestamp=self.timestamp)
        batch = CommittedBatch(self.offset, self.offset + len(records) - 1, epoch, False, data)
        self.offset += len(records)
        return batch

    def control(self, epoch=None):
        epoch = self.epoch if epoch is None else epoch
        data = C.encode_control_batch([C.LeaderChangeMessage(version=0, leader_id=1)],
                                      base_offset=self.offset, leader_epoch=epoch,
                                      timestamp=self.timestamp + 1)
        batch = CommittedBatch(self.offset, self.offset, epoch, True, data)
        self.offset += 1
        return batch


def mv(level=21):
    return R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=level)


def topic(name, topic_id):
    return R.TopicRecord(name=name, topic_id=topic_id)


def partition(topic_id, partition_id=0):
    return R.PartitionRecord(partition_id=partition_id, topic_id=topic_id, replicas=[1],
                             isr=[1], leader=1, leader_epoch=0, partition_epoch=0)


def config(name, value):
    return R.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name="foo", name=name,
                          value=value)


BEGIN = R.BeginTransactionRecord(name="tx")
END = R.EndTransactionRecord()
ABORT = R.AbortTransactionRecord(reason="test")


# ------------------------------------------------------------------------------ offsets


def test_batches_build_images():
    log = Log()
    loader = MetadataLoader()
    assert loader.apply([]) is EMPTY_IMAGE
    b1 = log.data(mv(), topic("foo", T1))
    b2 = log.data(partition(T1), epoch=2)
    image = loader.apply([b1, b2])
    assert image is loader.image
    assert image.topic("foo").partitions == {0: partition(T1)}
    assert (image.end_offset, image.epoch, image.timestamp_ms) == (3, 2, log.timestamp)
    assert loader.next_offset == 3 and loader.records_applied == 3
    assert loader.bytes_since_snapshot == len(b1.data) + len(b2.data)
    assert loader.apply([]) is image


def test_batch_offsets_must_be_contiguous():
    log = Log()
    loader = MetadataLoader()
    b1 = log.data(mv(), config("a", "1"))
    loader.apply([b1])
    log.offset += 1
    gap = log.data(config("a", "2"))
    with pytest.raises(MetadataError):
        loader.apply([gap])
    with pytest.raises(MetadataError):  # again: overlaps what was applied
        loader.apply([b1])
    assert loader.image.end_offset == 2 and loader.next_offset == 2
    assert loader.image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"}


def test_first_batch_must_start_at_the_image_end():
    log = Log()
    with pytest.raises(MetadataError):
        MetadataLoader().apply([Log(offset=1).data(mv())])
    image = MetadataLoader().apply([log.data(mv()), log.data(config("a", "1"))])
    loader = MetadataLoader(image=image)
    assert loader.next_offset == 2
    with pytest.raises(MetadataError):
        loader.apply([Log(offset=1).data(config("a", "2"))])
    after = loader.apply([log.data(config("a", "3"))])
    assert after.configs[(CONFIG_TOPIC, "foo")] == {"a": "3"} and after.end_offset == 3


def test_a_gap_inside_one_call():
    log = Log()
    b1 = log.data(mv())
    log.offset += 5
    with pytest.raises(MetadataError):
        MetadataLoader().apply([b1, log.data(config("a", "1"))])


def test_control_batches_advance_offsets_only():
    log = Log()
    loader = MetadataLoader()
    before = loader.apply([log.data(mv(), topic("foo", T1))])
    after = loader.apply([log.control(epoch=2)])
    assert after.same_state(before)
    assert (after.end_offset, after.epoch) == (3, 2) and loader.next_offset == 3
    assert loader.records_applied == 2
    assert after.topics is before.topics and after.features is before.features
    more = loader.apply([log.control(epoch=2), log.data(config("a", "1"), epoch=2),
                         log.control(epoch=3)])
    assert more.end_offset == 6 and more.epoch == 3
    assert more.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"}


def test_no_op_batches_count_as_replayed_and_change_nothing():
    log = Log()
    loader = MetadataLoader()
    before = loader.apply([log.data(mv(), topic("foo", T1))])
    after = loader.apply([log.data(R.NoOpRecord(), R.NoOpRecord(), R.NoOpRecord())])
    assert after.same_state(before) and after.end_offset == 5
    assert loader.records_applied == 5
    assert after.topics is before.topics


def test_no_op_only_batches_inside_a_transaction_apply_with_it():
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv())])
    loader.apply([log.data(BEGIN, config("a", "1")), log.data(R.NoOpRecord(), R.NoOpRecord())])
    assert loader.in_transaction and loader.image.end_offset == 1
    image = loader.apply([log.data(END)])
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"} and image.end_offset == 6
    assert loader.records_applied == 4  # mv, the config and the two NoOps


def test_applied_types_name_each_batchs_record_types_in_order():
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv(), R.NoOpRecord(), topic("foo", T1), R.NoOpRecord()),
                  log.control(), log.data(R.NoOpRecord()),
                  log.data(BEGIN, config("a", "1"), END)])
    assert [list(types) for types in loader.applied_types] == [
        [R.FeatureLevelRecord, R.NoOpRecord, R.TopicRecord], [], [R.NoOpRecord],
        [R.BeginTransactionRecord, R.ConfigRecord, R.EndTransactionRecord]]
    loader.apply([log.data(R.NoOpRecord())])
    assert [list(types) for types in loader.applied_types] == [[R.NoOpRecord]]


def test_inconsistent_records_raise():
    log = Log()
    with pytest.raises(MetadataError):
        MetadataLoader().apply([log.data(mv(), partition(T2))])


def test_corrupt_batch_is_refused():
    batch = Log().data(mv(), config("a", "1"))
    damaged = bytearray(batch.data)
    damaged[-1] ^= 0x01
    with pytest.raises((CorruptRecordError, MetadataError)):
        MetadataLoader().apply([batch._replace(data=bytes(damaged))])
    with pytest.raises((CorruptRecordError, MetadataError)):
        MetadataLoader().apply([batch._replace(data=batch.data[:-3])])


# ------------------------------------------------------------------------------ transactions


@pytest.mark.smoke
def test_transaction_applies_as_a_unit():
    log = Log()
    loader = MetadataLoader()
    base = loader.apply([log.data(mv())])
    # Begin, then records over two batches, then End.
    image = loader.apply([log.data(BEGIN, topic("foo", T1))])
    assert loader.in_transaction
    assert image.same_state(base) and image.end_offset == 1
    image = loader.apply([log.data(partition(T1), partition(T1, 1))])
    assert loader.in_transaction and image.same_state(base) and image.end_offset == 1
    assert loader.next_offset == 5
    image = loader.apply([log.data(END, config("a", "1"))])
    assert not loader.in_transaction
    assert sorted(image.topic("foo").partitions) == [0, 1]
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"}  # after End, same batch
    assert image.end_offset == 7 == loader.next_offset


def test_transaction_in_one_call():
    log = Log()
    loader = MetadataLoader()
    image = loader.apply([log.data(mv(), BEGIN), log.data(topic("foo", T1)),
                          log.data(partition(T1), END)])
    assert not loader.in_transaction and image.end_offset == 5
    assert image.topic("foo").partitions == {0: partition(T1)}


@pytest.mark.smoke
def test_abort_discards_the_transaction():
    log = Log()
    loader = MetadataLoader()
    base = loader.apply([log.data(mv(), config("a", "1"))])
    loader.apply([log.data(BEGIN, topic("foo", T1), config("a", "2"))])
    image = loader.apply([log.data(partition(T1), ABORT, config("b", "3"))])
    assert not loader.in_transaction
    assert image.topic("foo") is None
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1", "b": "3"}
    assert image.end_offset == 8 == loader.next_offset
    assert base.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"}


def test_aborted_records_are_never_replayed():
    # An aborted transaction may hold records that could not apply; they are dropped.
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv())])
    image = loader.apply([log.data(BEGIN, partition(T2)), log.data(ABORT)])
    assert image.topics == {} and image.end_offset == 4


def test_inconsistent_record_in_a_committed_transaction():
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv(), BEGIN, partition(T2))])
    with pytest.raises(MetadataError):
        loader.apply([log.data(END)])


def test_records_before_begin_apply_and_the_image_stops_at_begin():
    # Records before a BeginTransactionRecord in the same batch are outside the transaction:
    # they apply now; while the transaction is open the image ends at the Begin offset
    # (its records up to there are in it, nothing after).
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv())])                                  # offset 0
    image = loader.apply([log.data(config("a", "1"), config("b", "2"), BEGIN,
                                   topic("foo", T1))])              # offsets 1-4, Begin at 3
    assert loader.in_transaction and loader.next_offset == 5
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1", "b": "2"}
    assert image.topic("foo") is None
    assert image.end_offset == 3


def test_one_transaction_ends_and_another_begins_in_one_batch():
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv(), BEGIN, topic("foo", T1))])          # offsets 0-2
    image = loader.apply([log.data(partition(T1), END, config("a", "1"), BEGIN,
                                   config("a", "2"))])              # offsets 3-7, Begin at 6
    assert loader.in_transaction and loader.next_offset == 8
    assert image.topic("foo").partitions == {0: partition(T1)}
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"}
    assert image.end_offset == 6
    image = loader.apply([log.data(ABORT)])
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"} and image.end_offset == 9


def test_open_transaction_image_keeps_the_provenance_of_its_end():
    # While a transaction is open the image's (end offset, epoch, timestamp) describe the
    # last record it contains, not the buffered records after it.
    log = Log()
    loader = MetadataLoader()
    first = loader.apply([log.data(mv(), timestamp=TS + 10)])
    assert first.timestamp_ms == TS + 10
    image = loader.apply([log.data(BEGIN, topic("foo", T1), epoch=2, timestamp=TS + 20)])
    assert loader.in_transaction
    assert (image.end_offset, image.epoch) == (1, 1)
    assert image.timestamp_ms == TS + 10
    # In one call: a batch outside the transaction, then one that opens it.
    loader.apply([log.data(END, timestamp=TS + 30)])
    image = loader.apply([log.data(config("a", "1"), epoch=3, timestamp=TS + 40),
                          log.data(BEGIN, config("a", "2"), epoch=4, timestamp=TS + 50)])
    assert loader.in_transaction and image.configs[(CONFIG_TOPIC, "foo")] == {"a": "1"}
    assert (image.end_offset, image.epoch) == (5, 3)
    assert image.timestamp_ms == TS + 40


def test_nested_begin():
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv(), BEGIN)])
    with pytest.raises(MetadataError):
        loader.apply([log.data(BEGIN)])
    with pytest.raises(MetadataError):
        MetadataLoader().apply([Log().data(mv(), BEGIN, config("a", "1"), BEGIN)])


@pytest.mark.parametrize("marker", [END, ABORT], ids=["end", "abort"])
def test_end_or_abort_without_begin(marker):
    log = Log()
    with pytest.raises(MetadataError):
        MetadataLoader().apply([log.data(mv(), marker)])
    loader = MetadataLoader()
    loader.apply([Log().data(mv(), BEGIN, END)])
    with pytest.raises(MetadataError):
        loader.apply([Log(offset=3).data(marker)])


def test_control_batches_inside_a_transaction():
    log = Log()
    loader = MetadataLoader()
    loader.apply([log.data(mv()), log.data(BEGIN, topic("foo", T1))])
    image = loader.apply([log.control(epoch=2)])
    assert loader.in_transaction and image.end_offset == 1 and image.topic("foo") is None
    image = loader.apply([log.data(END, epoch=2)])
    assert image.topic("foo") is not None and (image.end_offset, image.epoch) == (5, 2)


# ------------------------------------------------------------------------------ snapshot policy


def test_default_policy_is_20_mib_and_one_hour():
    assert SNAPSHOT_INTERVAL_BYTES_DEFAULT == 20 * 1024 * 1024
    assert SNAPSHOT_INTERVAL_MS_DEFAULT == 3_600_000
    loader = MetadataLoader()
    assert loader.snapshot_interval_bytes == SNAPSHOT_INTERVAL_BYTES_DEFAULT
    assert loader.snapshot_interval_ms == SNAPSHOT_INTERVAL_MS_DEFAULT


def test_snapshot_due_after_max_bytes():
    log = Log()
    loader = MetadataLoader(snapshot_interval_bytes=500, snapshot_interval_ms=0)
    assert not loader.snapshot_due(0)
    total = 0
    while True:
        batch = log.data(config("a", "x" * 20))
        loader.apply([batch])
        total += len(batch.data)
        assert loader.bytes_since_snapshot == total
        if total >= 500:
            break
        assert not loader.snapshot_due(10**12)
    assert loader.snapshot_due(0)
    loader.on_snapshot(5)
    assert loader.bytes_since_snapshot == 0 and loader.last_snapshot_ms == 5
    assert not loader.snapshot_due(10**12)


def test_control_batch_bytes_count():
    log = Log()
    loader = MetadataLoader(snapshot_interval_bytes=1, snapshot_interval_ms=0)
    loader.apply([log.data(mv())])
    loader.on_snapshot(0)
    loader.apply([log.control()])
    assert loader.snapshot_due(0)


def test_snapshot_due_after_the_interval():
    log = Log()
    loader = MetadataLoader(snapshot_interval_bytes=10**9, snapshot_interval_ms=1000, now_ms=100)
    assert not loader.snapshot_due(10**6)  # nothing committed yet
    loader.apply([log.data(mv())])
    assert not loader.snapshot_due(100)
    assert not loader.snapshot_due(1099)
    assert loader.snapshot_due(1100)
    loader.on_snapshot(1100)
    assert not loader.snapshot_due(10**6)  # nothing new since that snapshot
    loader.apply([log.data(config("a", "1"))])
    assert not loader.snapshot_due(2099) and loader.snapshot_due(2100)


def test_interval_0_turns_the_timer_off():
    log = Log()
    loader = MetadataLoader(snapshot_interval_bytes=10**9, snapshot_interval_ms=0)
    loader.apply([log.data(mv())])
    assert not loader.snapshot_due(10**15)


def test_never_due_while_a_transaction_is_open():
    log = Log()
    loader = MetadataLoader(snapshot_interval_bytes=1, snapshot_interval_ms=1)
    loader.apply([log.data(mv())])
    assert loader.snapshot_due(10)
    loader.apply([log.data(BEGIN, config("a", "1"))])
    assert loader.in_transaction and loader.bytes_since_snapshot > 1
    assert not loader.snapshot_due(10) and not loader.snapshot_due(10**9)
    loader.apply([log.data(END)])
    assert loader.snapshot_due(10)


def test_bad_policy_values():
    with pytest.raises(ValueError):
        MetadataLoader(snapshot_interval_bytes=0)
    with pytest.raises(ValueError):
        MetadataLoader(snapshot_interval_ms=-1)


# ------------------------------------------------------------------------------ load snapshot


def _snapshot_image():
    log = Log(epoch=4)
    loader = MetadataLoader()
    return loader.apply([log.data(mv(), topic("bar", T2), partition(T2), config("a", "9"))])


def test_load_snapshot_resets_the_loader():
    snap = _snapshot_image()
    data = encode_snapshot(snap)
    log = Log()
    loader = MetadataLoader(snapshot_interval_bytes=10**9, now_ms=0)
    loader.apply([log.data(mv(), topic("foo", T1)), log.data(BEGIN, config("a", "1"))])
    assert loader.in_transaction and loader.bytes_since_snapshot > 0
    image = loader.load_snapshot((snap.end_offset, snap.epoch), data, now_ms=77)
    assert image == snap and loader.image is image
    assert image.topic("foo") is None and image.topic("bar") is not None
    assert not loader.in_transaction
    assert loader.next_offset == snap.end_offset == 4
    assert loader.bytes_since_snapshot == 0 and loader.last_snapshot_ms == 77
    # The log continues at the snapshot's end offset; an End now has no transaction.
    with pytest.raises(MetadataError):
        loader.apply([Log(offset=4).data(END)])


def test_apply_continues_after_a_loaded_snapshot():
    snap = _snapshot_image()
    loader = MetadataLoader()
    loader.load_snapshot((snap.end_offset, snap.epoch), encode_snapshot(snap))
    with pytest.raises(MetadataError):
        loader.apply([Log(offset=0).data(config("b", "1"))])
    log = Log(offset=4, epoch=5)
    image = loader.apply([log.data(config("b", "1"))])
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"a": "9", "b": "1"}
    assert (image.end_offset, image.epoch) == (5, 5)


def test_load_snapshot_keeps_the_timer_without_now():
    snap = _snapshot_image()
    loader = MetadataLoader(now_ms=33)
    loader.load_snapshot((snap.end_offset, snap.epoch), encode_snapshot(snap))
    assert loader.last_snapshot_ms == 33


def test_load_bad_snapshot_keeps_the_loader():
    snap = _snapshot_image()
    data = encode_snapshot(snap)
    log = Log()
    loader = MetadataLoader()
    image = loader.apply([log.data(mv(), topic("foo", T1))])
    with pytest.raises((CorruptRecordError, MetadataError)):
        loader.load_snapshot((snap.end_offset, snap.epoch), data[:-1])
    assert loader.image is image and loader.next_offset == 2


# ------------------------------------------------------------------------------ listener


def test_the_record_listener_hears_what_became_state_with_the_image_before():
    log = Log()
    loader = MetadataLoader()
    heard = []
    loader.record_listener = lambda image, records: heard.append((image, records))
    loader.apply([log.data(mv(), topic("foo", T1)), log.data(R.NoOpRecord())])
    (before, records), = heard
    assert before is EMPTY_IMAGE and records == [mv(), topic("foo", T1)]
    heard.clear()
    first = loader.image
    loader.apply([log.data(R.NoOpRecord(), R.NoOpRecord())])
    assert heard == []  # NoOps change nothing anyone follows
    # A transaction is heard once, when its End makes it state; an aborted one never.
    loader.apply([log.data(BEGIN, partition(T1))])
    assert heard == []
    loader.apply([log.data(partition(T1, 1), END, config("a", "1"))])
    (before, records), = heard
    assert before.same_state(first) and before.end_offset == 5  # just before the Begin
    assert records == [partition(T1), partition(T1, 1), config("a", "1")]
    heard.clear()
    loader.apply([log.data(BEGIN, config("a", "2")), log.data(ABORT)])
    assert heard == []


def test_the_record_listener_hears_adopted_images_too():
    loader = MetadataLoader()
    heard = []
    loader.record_listener = lambda image, records: heard.append((image, records))
    image = loader.apply([Log().data(mv())])
    heard.clear()
    later = MetadataDelta(image)
    later.replay_all([topic("foo", T1)])
    loader.adopt(later.apply(image.end_offset + 2, 1, TS), 100,
                 [topic("foo", T1), R.NoOpRecord()])
    assert heard == [(image, [topic("foo", T1)])]
