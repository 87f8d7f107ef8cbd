"""`LogFollower`: Fetch answers become the lines of `kraftcore metadata watch`. Only batches
wholly below the answer's high watermark are taken; changes are told from the image the
earlier records left; a metadata transaction shows when it commits; a snapshot replaces the
image (one summary line when it stands for offsets that were to be shown)."""

import pytest

from kraftcore.errors import MetadataError
from kraftcore.metadata import records as R
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.image import EMPTY_IMAGE, METADATA_VERSION
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.metadata.watch import SNAPSHOT, LogFollower, SnapshotChunks
from kraftcore.raft import control as C
from kraftcore.raft.types import SnapshotId
from kraftcore.types import Uuid

TS = 1_700_000_000_000
T1 = Uuid.from_ints(1, 1)


class Log:
    """Back-to-back batches as a leader's Fetch answer carries them."""

    def __init__(self, offset=0, epoch=1):
        self.offset = offset
        self.epoch = epoch
        self.ends = []  # the offset after each batch

    def batch(self, *records, epoch=None):
        epoch = self.epoch if epoch is None else epoch
        data = R.encode_batch(list(records), base_offset=self.offset, leader_epoch=epoch,
                              timestamp=TS + self.offset)
        self.offset += len(records)
        self.ends.append(self.offset)
        return data

    def leader_change(self, leader_id, epoch, voters=(1, 2, 3), granting=(1, 2)):
        msg = C.LeaderChangeMessage(
            version=0, leader_id=leader_id,
            voters=[C.LeaderChangeMessage.Voter(voter_id=v) for v in voters],
            granting_voters=[C.LeaderChangeMessage.Voter(voter_id=v) for v in granting])
        data = C.encode_control_batch([msg], base_offset=self.offset, leader_epoch=epoch,
                                      timestamp=TS + self.offset)
        self.offset += 1
        self.ends.append(self.offset)
        return data


def mv():
    return R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=21)


def broker(broker_id, epoch=10):
    return R.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=Uuid.from_ints(9, broker_id), broker_epoch=epoch,
        end_points=[R.RegisterBrokerRecord.BrokerEndpoint(
            name="PLAINTEXT", host="127.0.0.1", port=9000 + broker_id, security_protocol=0)],
        features=[], rack=None, fenced=True)


def topic_records():
    return [R.TopicRecord(name="orders", topic_id=T1),
            R.PartitionRecord(partition_id=2, topic_id=T1, replicas=[4, 5, 6], isr=[4, 5, 6],
                              leader=4, leader_epoch=0, partition_epoch=0)]


def texts(changes):
    return [c.text() for c in changes]


def test_only_batches_below_the_high_watermark_are_taken_and_told_in_order():
    log = Log()
    data = (log.leader_change(1, 1) + log.batch(mv(), broker(4), broker(5), broker(6))
            + log.batch(*topic_records())
            + log.batch(R.PartitionChangeRecord(partition_id=2, topic_id=T1, leader=5,
                                                isr=[5, 6]))
            + log.batch(R.BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=10,
                                                         fenced=1)))
    follower = LogFollower(print_from=0)
    # The high watermark inside the last batches: only what lies wholly below it.
    changes, taken = follower.on_records(data, log.ends[2])
    assert taken == 3 and follower.next_offset == log.ends[2] and follower.last_epoch == 1
    assert texts(changes) == [
        "offset 0, epoch 1: node 1 leads the quorum (voters [1, 2, 3], elected by [1, 2])",
        "offset 1, epoch 1: feature metadata.version at level 21",
        "offset 2, epoch 1: broker 4 registered: epoch 10, fenced, PLAINTEXT://127.0.0.1:9004",
        "offset 3, epoch 1: broker 5 registered: epoch 10, fenced, PLAINTEXT://127.0.0.1:9005",
        "offset 4, epoch 1: broker 6 registered: epoch 10, fenced, PLAINTEXT://127.0.0.1:9006",
        f"offset 5, epoch 1: topic orders created ({T1})",
        "offset 6, epoch 1: orders-2 created: replicas [4, 5, 6], leader 4, ISR [4, 5, 6]",
    ]
    # The next answer starts again at the batch holding next_offset; the high watermark
    # has passed everything now. Batches already taken are not told twice.
    changes, taken = follower.on_records(data, log.offset)
    assert taken == 2 and follower.next_offset == log.offset
    assert texts(changes) == [
        "offset 7, epoch 1: orders-2 leader 4 -> 5, ISR [4, 5, 6] -> [5, 6]",
        "offset 8, epoch 1: broker 4 fenced",
    ]
    assert follower.image.partition(T1, 2).leader == 5
    # Nothing new: nothing taken.
    assert follower.on_records(b"", log.offset) == ([], 0)


def test_by_default_changes_are_shown_from_the_first_high_watermark_on():
    log = Log()
    first = log.batch(mv(), broker(4)) + log.batch(*topic_records())
    follower = LogFollower()
    assert not follower.live
    changes, taken = follower.on_records(first, log.offset)
    # The image was built silently up to the high watermark of the first answer.
    assert changes == [] and taken == 2 and follower.live
    assert follower.print_from == log.offset and follower.image.topic("orders") is not None
    later = log.batch(R.PartitionChangeRecord(partition_id=2, topic_id=T1, isr=[4, 5]))
    changes, _ = follower.on_records(later, log.offset)
    assert texts(changes) == ["offset 4, epoch 1: orders-2 ISR [4, 5, 6] -> [4, 5]"]


def test_a_leader_without_a_high_watermark_yet_sets_nothing():
    log = Log()
    follower = LogFollower()
    data = log.batch(mv())
    assert follower.on_records(data, -1) == ([], 0)
    assert follower.print_from is None and follower.next_offset == 0


def test_noops_are_not_shown_and_records_without_a_sentence_show_their_fields():
    log = Log()
    data = (log.batch(mv(), broker(4)) + log.batch(R.NoOpRecord(), R.NoOpRecord())
            + log.batch(R.ProducerIdsRecord(broker_id=4, broker_epoch=10,
                                            next_producer_id=2000)))
    changes, _ = LogFollower(print_from=0).on_records(data, log.offset)
    assert [c.offset for c in changes] == [0, 1, 4]
    assert changes[-1].text() == ('offset 4, epoch 1: PRODUCER_IDS_RECORD {"brokerId": 4, '
                                  '"brokerEpoch": 10, "nextProducerId": 2000}')


def test_the_json_object_holds_offset_epoch_timestamp_type_sentence_and_fields():
    log = Log()
    data = log.batch(mv(), broker(4)) + log.batch(
        R.BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=10, fenced=1))
    changes, _ = LogFollower(print_from=0).on_records(data, log.offset)
    doc = changes[-1].doc()
    assert doc == {"offset": 2, "epoch": 1, "timestamp": TS + 2,
                   "type": "BROKER_REGISTRATION_CHANGE_RECORD", "version": doc["version"],
                   "change": "broker 4 fenced", "data": doc["data"]}
    assert doc["data"]["brokerId"] == 4 and doc["data"]["fenced"] == 1
    assert isinstance(doc["version"], int)


def test_a_metadata_transaction_shows_when_it_commits_and_an_aborted_one_never():
    log = Log()
    begin, end = R.BeginTransactionRecord(name=None), R.EndTransactionRecord()
    head = log.batch(mv(), broker(4), broker(5), broker(6))
    follower = LogFollower(print_from=0)
    follower.on_records(head, log.offset)
    part1 = log.batch(begin, topic_records()[0])
    part2 = log.batch(topic_records()[1], end,
                      R.BrokerRegistrationChangeRecord(broker_id=5, broker_epoch=10, fenced=1))
    # Until the End commits, nothing of the transaction shows.
    changes, taken = follower.on_records(part1 + part2, log.ends[1])
    assert changes == [] and taken == 1 and follower.image.topic("orders") is None
    changes, _ = follower.on_records(part2, log.offset)
    assert texts(changes) == [
        f"offset 5, epoch 1: topic orders created ({T1})",
        "offset 6, epoch 1: orders-2 created: replicas [4, 5, 6], leader 4, ISR [4, 5, 6]",
        "offset 8, epoch 1: broker 5 fenced",
    ]
    aborted = log.batch(begin, R.RemoveTopicRecord(topic_id=T1), R.AbortTransactionRecord())
    assert follower.on_records(aborted, log.offset)[0] == []
    assert follower.image.topic("orders") is not None


def test_a_batch_that_does_not_follow_is_refused():
    log = Log()
    follower = LogFollower(print_from=0)
    follower.on_records(log.batch(mv()), log.offset)
    log.offset += 5
    with pytest.raises(MetadataError, match="Fetch at offset 1 with a batch at 6"):
        follower.on_records(log.batch(broker(4)), log.offset)


def test_a_batch_with_an_impossible_length_is_refused():
    log = Log()
    data = bytearray(log.batch(mv()))
    data[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(MetadataError, match="length is 10 bytes"):
        LogFollower(print_from=0).on_records(bytes(data), log.offset)


def test_a_batch_cut_short_waits_for_the_next_answer():
    log = Log()
    data = log.batch(mv()) + log.batch(broker(4))
    follower = LogFollower(print_from=0)
    changes, taken = follower.on_records(data[:-3], log.offset)
    assert taken == 1 and follower.next_offset == 1
    changes, taken = follower.on_records(data, log.offset)
    assert taken == 1 and texts(changes)[0].startswith("offset 1, epoch 1: broker 4")


def image_with(*records, end_offset, epoch):
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay_all(list(records))
    return delta.apply(end_offset, epoch, TS)


def snapshot_of(end_offset=20, epoch=3):
    image = image_with(mv(), broker(4), broker(5), *topic_records(),
                       R.BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=10, fenced=-1),
                       end_offset=end_offset, epoch=epoch)
    return SnapshotId(end_offset, epoch), encode_snapshot(image)


def test_a_snapshot_asked_for_from_the_beginning_is_one_summary_line():
    snapshot_id, data = snapshot_of()
    follower = LogFollower(print_from=0)
    (change,) = follower.on_snapshot(snapshot_id, data)
    assert change.type == SNAPSHOT and (change.offset, change.epoch) == (19, 3)
    assert change.text() == ("offset 19, epoch 3: snapshot of offsets 0-19: 2 brokers "
                             "(1 fenced), 0 controllers, 1 topics, 1 partitions, 0 configs, "
                             "metadata.version 21")
    assert change.doc()["data"]["topics"] == ["orders"]
    assert change.doc()["data"]["fencedBrokers"] == [5]
    assert (follower.next_offset, follower.last_epoch) == (20, 3)
    # The log continues after it.
    log = Log(offset=20, epoch=3)
    changes, _ = follower.on_records(
        log.batch(R.PartitionChangeRecord(partition_id=2, topic_id=T1, leader=6)), log.offset)
    assert texts(changes) == ["offset 20, epoch 3: orders-2 leader 4 -> 6"]


def test_a_snapshot_past_the_offsets_reached_says_which_it_stands_for():
    log = Log()
    follower = LogFollower(print_from=0)
    follower.on_records(log.batch(mv()), log.offset)
    snapshot_id, data = snapshot_of()
    (change,) = follower.on_snapshot(snapshot_id, data)
    assert "in place of offsets 1-19, which the leader's log no longer holds" in change.sentence


def test_a_snapshot_when_only_changes_from_now_on_are_shown_is_silent():
    snapshot_id, data = snapshot_of()
    follower = LogFollower()
    follower.on_high_watermark(25)
    assert follower.on_snapshot(snapshot_id, data) == []
    assert follower.image.topic("orders") is not None and not follower.live
    # A snapshot behind the offset already reached: the offsets passed stay silent.
    follower = LogFollower(print_from=0)
    log = Log()
    follower.on_records(b"".join(log.batch(mv()) for _ in range(22)), log.offset)
    assert follower.on_snapshot(snapshot_id, data) == []
    assert follower.next_offset == 20 and follower.print_from == 22


def test_snapshot_chunks_are_assembled_in_order_and_bounded():
    snapshot_id = SnapshotId(20, 3)
    chunks = SnapshotChunks(snapshot_id, 100)
    assert chunks.add(10, 0, b"01234") is None and chunks.position == 5
    assert chunks.add(10, 5, b"56789") == b"0123456789"
    chunks = SnapshotChunks(snapshot_id, 100)
    chunks.add(10, 0, b"0123")
    with pytest.raises(MetadataError, match="bytes 2-6"):
        chunks.add(10, 2, b"2345")
    with pytest.raises(MetadataError, match="more than the 100 a watch loads"):
        SnapshotChunks(snapshot_id, 100).add(101, 0, b"x")
