"""`ChangeDescriber`: committed records as sentences, each change told from the state the
earlier records left."""

from kraftcore.metadata import records as R
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.describe import ChangeDescriber
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC, EMPTY_IMAGE, METADATA_VERSION
from kraftcore.types import Uuid

T1 = Uuid.from_ints(1, 1)


def broker(broker_id, epoch=10):
    return R.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=Uuid.from_ints(9, broker_id), broker_epoch=epoch,
        end_points=[R.RegisterBrokerRecord.BrokerEndpoint(
            name="PLAINTEXT", host="127.0.0.1", port=9092 + broker_id, security_protocol=0)],
        features=[], rack=None, fenced=True)


def image_with(*records):
    delta = MetadataDelta(EMPTY_IMAGE)
    delta.replay_all(list(records))
    return delta.apply(len(records), 1, 0)


def test_each_change_reads_as_a_sentence_built_on_the_earlier_records():
    base = image_with(R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
                      broker(4), broker(5), broker(6))
    d = ChangeDescriber(base)
    lines = [d.describe(r) for r in [
        R.TopicRecord(name="orders", topic_id=T1),
        R.PartitionRecord(partition_id=2, topic_id=T1, replicas=[4, 5, 6], isr=[4, 5, 6],
                          leader=4, leader_epoch=0, partition_epoch=0),
        R.PartitionChangeRecord(partition_id=2, topic_id=T1, leader=5, isr=[5, 6]),
        R.PartitionChangeRecord(partition_id=2, topic_id=T1, isr=[5, 6, 4]),
        R.PartitionChangeRecord(partition_id=2, topic_id=T1),
        R.BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=10, fenced=1),
        R.BrokerRegistrationChangeRecord(broker_id=4, broker_epoch=10, fenced=-1),
        R.BrokerRegistrationChangeRecord(broker_id=5, broker_epoch=10,
                                         in_controlled_shutdown=1),
        R.BrokerRegistrationChangeRecord(broker_id=5, broker_epoch=10),
        R.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name="orders",
                       name="retention.ms", value="1000"),
        R.ConfigRecord(resource_type=CONFIG_BROKER, resource_name="",
                       name="min.insync.replicas", value=None),
        R.RemoveTopicRecord(topic_id=T1),
        R.UnregisterBrokerRecord(broker_id=6, broker_epoch=10),
        R.NoOpRecord(),
    ]]
    assert lines == [
        f"topic orders created ({T1})",
        "orders-2 created: replicas [4, 5, 6], leader 4, ISR [4, 5, 6]",
        "orders-2 leader 4 -> 5, ISR [4, 5, 6] -> [5, 6]",
        "orders-2 ISR [5, 6] -> [5, 6, 4]",
        "orders-2 leader epoch 1",
        "broker 4 fenced",
        "broker 4 unfenced",
        "broker 5 in controlled shutdown",
        None,
        "config retention.ms=1000 on topic 'orders'",
        "config min.insync.replicas removed from cluster default (broker)",
        "topic orders deleted",
        "broker 6 unregistered",
        None,
    ]
    assert d.describe(broker(7)) == \
        "broker 7 registered: epoch 10, fenced, PLAINTEXT://127.0.0.1:9099"


def test_a_partition_of_the_image_is_told_from_its_state_there():
    base = image_with(R.TopicRecord(name="orders", topic_id=T1),
                      R.PartitionRecord(partition_id=0, topic_id=T1, replicas=[1, 2], isr=[1],
                                        leader=1, leader_epoch=3, partition_epoch=3))
    d = ChangeDescriber(base)
    assert d.describe(R.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1, 2])) == \
        "orders-0 ISR [1] -> [1, 2]"
    # one the replay would refuse gets no sentence rather than an error
    assert d.describe(R.PartitionChangeRecord(partition_id=9, topic_id=T1, leader=2)) is None
