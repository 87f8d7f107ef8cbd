"""MetadataImage / MetadataDelta: the replay rule of every metadata record type
(kafka-facts §5.2, §5.3), the errors an inconsistent log raises, and the delta's promises:
it never changes its base image, it shares what it did not touch, and it is spent once
applied."""

import pytest

from kraftcore.errors import MetadataError
from kraftcore.metadata import records as R
from kraftcore.raft import control as C
from kraftcore.metadata.delta import MetadataDelta, replay_all
from kraftcore.metadata.image import (
    CONFIG_BROKER, CONFIG_TOPIC, EMPTY_IMAGE, KRAFT_VERSION, METADATA_VERSION, MetadataImage,
    TopicImage)
from kraftcore.types import Uuid

CONFIG_BROKER_LOGGER = 8


def uid(n):
    """A fixed, non-reserved uuid per small integer."""
    return Uuid.from_ints(0x6B63_0000, n)


T1, T2, T3 = uid(1), uid(2), uid(3)


def broker(broker_id, epoch=100, **kw):
    kw.setdefault("incarnation_id", uid(1000 + broker_id))
    return R.RegisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch, **kw)


def partition(topic_id, partition_id, replicas=(1, 2, 3), leader=None, **kw):
    replicas = list(replicas)
    kw.setdefault("isr", list(replicas))
    kw.setdefault("leader_epoch", 0)
    kw.setdefault("partition_epoch", 0)
    return R.PartitionRecord(partition_id=partition_id, topic_id=topic_id, replicas=replicas,
                             leader=replicas[0] if leader is None else leader, **kw)


def config(name, value, resource_type=CONFIG_TOPIC, resource_name="foo"):
    return R.ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=name,
                          value=value)


def quota(entity, key, value=0.0, remove=False):
    return R.ClientQuotaRecord(
        entity=[R.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        key=key, value=value, remove=remove)


def acl(n, principal="User:alice"):
    return R.AccessControlEntryRecord(id=uid(5000 + n), resource_type=2, resource_name="foo",
                                      pattern_type=3, principal=principal, host="*",
                                      operation=3, permission_type=3)


def scram(name, mechanism=1, iterations=4096):
    return R.UserScramCredentialRecord(name=name, mechanism=mechanism, salt=b"salt",
                                       stored_key=b"stored", server_key=b"server",
                                       iterations=iterations)


def token(token_id, owner="User:alice"):
    return R.DelegationTokenRecord(owner=owner, requester=owner, renewers=["User:bob"],
                                   issue_timestamp=1, max_timestamp=3, expiration_timestamp=2,
                                   token_id=token_id)


def replay(image, *records):
    return replay_all(image, list(records))


def base_image():
    """Three brokers (1 and 2 unfenced), topics foo (2 partitions) and bar (1 partition),
    a topic config of each and a broker default, and one of everything else."""
    return replay(
        EMPTY_IMAGE,
        R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
        broker(1, fenced=False), broker(2, fenced=False), broker(3),
        R.TopicRecord(name="foo", topic_id=T1), partition(T1, 0), partition(T1, 1, (2, 3, 1)),
        R.TopicRecord(name="bar", topic_id=T2), partition(T2, 0, (3, 1, 2)),
        config("retention.ms", "1000", resource_name="foo"),
        config("cleanup.policy", "compact", resource_name="bar"),
        config("min.insync.replicas", "2", CONFIG_BROKER, ""),
        quota([("user", "alice")], "producer_byte_rate", 1024.0),
        acl(1), scram("alice"), token("t1"),
        R.ProducerIdsRecord(broker_id=1, broker_epoch=100, next_producer_id=1000),
    )


def deep_state(image):
    """Everything an image holds, by value, down to the lists inside its records (repr
    keeps dict order and every field), so that any in-place change shows."""
    out = {"provenance": (image.end_offset, image.epoch, image.timestamp_ms),
           "producer_ids": repr(image.producer_ids), "zk": image.zk_migration_state}
    for name in ("features", "brokers", "controllers", "topic_ids", "configs", "quotas",
                 "acls", "scram", "tokens"):
        out[name] = repr(list(getattr(image, name).items()))
    out["topics"] = [(tid, t.name, t.topic_id, repr(list(t.partitions.items())))
                     for tid, t in image.topics.items()]
    out["ids"] = {name: id(getattr(image, name)) for name in ("topics", "brokers", "configs")}
    return out


# ------------------------------------------------------------------------------ topics


def test_topics_and_partitions():
    image = base_image()
    foo = image.topic("foo")
    assert isinstance(foo, TopicImage) and foo.name == "foo" and foo.topic_id == T1
    assert image.topic(T1) is foo and image.topics[T1] is foo
    assert image.topic_ids == {"foo": T1, "bar": T2}
    assert sorted(foo.partitions) == [0, 1]
    assert image.partition(T1, 1) == partition(T1, 1, (2, 3, 1))
    assert image.partition(T1, 2) is None and image.partition(T3, 0) is None
    assert image.topic("nope") is None and image.topic(T3) is None
    assert image.partition_count() == 3


def test_partition_record_for_existing_partition_replaces_it():
    image = base_image()
    new = partition(T1, 0, (3, 2, 1), leader_epoch=7, partition_epoch=9)
    after = replay(image, new)
    assert after.partition(T1, 0) == new
    assert after.partition(T1, 1) == image.partition(T1, 1)


def test_topic_and_its_partitions_in_one_delta():
    after = replay(EMPTY_IMAGE, R.TopicRecord(name="a", topic_id=T3), partition(T3, 0),
                   partition(T3, 5))
    assert sorted(after.topic("a").partitions) == [0, 5]


@pytest.mark.smoke
def test_partition_change_merges_per_kafka_facts_5_3():
    image = base_image()
    before = image.partition(T1, 0)
    # ISR only: the leader and its epoch stay, the partition epoch moves.
    after = replay(image, R.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1, 2]))
    p = after.partition(T1, 0)
    assert p.isr == [1, 2] and p.leader == before.leader == 1
    assert p.leader_epoch == before.leader_epoch and p.partition_epoch == before.partition_epoch + 1
    assert p.replicas == before.replicas
    # A new leader: the leader epoch moves too; -1 (no leader) is a leader change.
    after2 = replay(after, R.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=2))
    p2 = after2.partition(T1, 0)
    assert p2.leader == 2 and p2.isr == [1, 2]
    assert (p2.leader_epoch, p2.partition_epoch) == (p.leader_epoch + 1, p.partition_epoch + 1)
    after3 = replay(after2, R.PartitionChangeRecord(partition_id=0, topic_id=T1, leader=-1))
    p3 = after3.partition(T1, 0)
    assert p3.leader == -1 and p3.leader_epoch == p2.leader_epoch + 1
    # An empty change still moves the partition epoch.
    after4 = replay(after3, R.PartitionChangeRecord(partition_id=0, topic_id=T1))
    p4 = after4.partition(T1, 0)
    assert p4.partition_epoch == p3.partition_epoch + 1
    assert (p4.leader, p4.leader_epoch, p4.isr) == (p3.leader, p3.leader_epoch, p3.isr)
    # Nothing changed the records of the earlier images.
    assert image.partition(T1, 0) == before and before.isr == [1, 2, 3]
    assert after.partition(T1, 0).leader == 1 and after2.partition(T1, 0).leader == 2


def test_two_changes_of_one_partition_in_one_delta():
    image = base_image()
    before = image.partition(T1, 1)
    after = replay(image, R.PartitionChangeRecord(partition_id=1, topic_id=T1, leader=3),
                   R.PartitionChangeRecord(partition_id=1, topic_id=T1, isr=[3]))
    p = after.partition(T1, 1)
    assert (p.leader, p.isr) == (3, [3])
    assert p.leader_epoch == before.leader_epoch + 1
    assert p.partition_epoch == before.partition_epoch + 2


def test_remove_topic_drops_partitions_and_topic_configs():
    image = base_image()
    after = replay(image, R.RemoveTopicRecord(topic_id=T1))
    assert T1 not in after.topics and "foo" not in after.topic_ids
    assert after.topic("foo") is None and after.partition(T1, 0) is None
    assert (CONFIG_TOPIC, "foo") not in after.configs
    # Other topics, their configs and the broker configs stay.
    assert after.topics[T2] is image.topics[T2]
    assert after.configs[(CONFIG_TOPIC, "bar")] == {"cleanup.policy": "compact"}
    assert after.configs[(CONFIG_BROKER, "")] == {"min.insync.replicas": "2"}
    assert after.partition_count() == 1
    # A new topic of the same name starts without the old configs or partitions.
    again = replay(after, R.TopicRecord(name="foo", topic_id=T3))
    assert again.topic("foo").topic_id == T3 and again.topic("foo").partitions == {}
    assert again.topic_config("foo", "retention.ms") is None


def test_remove_topic_created_in_the_same_delta():
    image = base_image()
    after = replay(image, R.TopicRecord(name="tmp", topic_id=T3), partition(T3, 0),
                   config("x", "y", resource_name="tmp"), R.RemoveTopicRecord(topic_id=T3))
    assert after.same_state(image)


def test_remove_topic_without_configs():
    image = replay(EMPTY_IMAGE, R.TopicRecord(name="a", topic_id=T3))
    after = replay(image, R.RemoveTopicRecord(topic_id=T3))
    assert after.topics == {} and after.topic_ids == {} and after.configs == {}


# ------------------------------------------------------------------------------ configs


def test_config_set_overwrite_and_delete():
    image = base_image()
    after = replay(image, config("retention.ms", "2000"), config("segment.bytes", "1024"))
    assert after.configs[(CONFIG_TOPIC, "foo")] == {"retention.ms": "2000",
                                                    "segment.bytes": "1024"}
    assert after.topic_config("foo", "retention.ms") == "2000"
    deleted = replay(after, config("retention.ms", None))
    assert deleted.configs[(CONFIG_TOPIC, "foo")] == {"segment.bytes": "1024"}
    # Deleting the last key deletes the resource; deleting an absent key changes nothing.
    empty = replay(deleted, config("segment.bytes", None), config("never.set", None))
    assert (CONFIG_TOPIC, "foo") not in empty.configs
    nothing = replay(empty, config("absent", None, CONFIG_BROKER_LOGGER, "1"))
    assert nothing.configs == empty.configs
    # The earlier images keep their values.
    assert image.configs[(CONFIG_TOPIC, "foo")] == {"retention.ms": "1000"}
    assert after.configs[(CONFIG_TOPIC, "foo")]["retention.ms"] == "2000"


def test_config_resources_are_keyed_by_type_and_name():
    after = replay(EMPTY_IMAGE, config("a", "1", CONFIG_TOPIC, "x"), config("a", "2", CONFIG_BROKER, "x"),
                   config("a", "3", CONFIG_BROKER, ""))
    assert after.configs == {(CONFIG_TOPIC, "x"): {"a": "1"}, (CONFIG_BROKER, "x"): {"a": "2"},
                             (CONFIG_BROKER, ""): {"a": "3"}}


def test_topic_config_falls_back_to_the_broker_default():
    image = base_image()
    assert image.topic_config("foo", "min.insync.replicas") == "2"
    assert image.topic_config("foo", "retention.ms") == "1000"
    after = replay(image, config("min.insync.replicas", "3"))
    assert after.topic_config("foo", "min.insync.replicas") == "3"
    assert after.topic_config("bar", "min.insync.replicas") == "2"
    assert after.topic_config("bar", "unknown") is None


# ------------------------------------------------------------------------------ features


def test_features_set_update_and_level_0_removes():
    image = replay(EMPTY_IMAGE, R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=14),
                   R.FeatureLevelRecord(name=KRAFT_VERSION, feature_level=1))
    assert image.features == {METADATA_VERSION: 14, KRAFT_VERSION: 1}
    assert image.metadata_version() == 14
    upgraded = replay(image, R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=21),
                      R.FeatureLevelRecord(name=KRAFT_VERSION, feature_level=0),
                      R.FeatureLevelRecord(name="group.version", feature_level=0))
    assert upgraded.features == {METADATA_VERSION: 21}
    assert image.features == {METADATA_VERSION: 14, KRAFT_VERSION: 1}
    assert EMPTY_IMAGE.metadata_version() is None


# ------------------------------------------------------------------------------ brokers


def test_register_broker_is_fenced_by_default():
    image = replay(EMPTY_IMAGE, broker(1), broker(2, fenced=False))
    assert image.brokers[1].fenced is True and image.brokers[2].fenced is False
    assert not image.broker_is_active(1) and image.broker_is_active(2)
    assert not image.broker_is_active(9)


def test_reregistration_replaces_the_registration():
    image = base_image()
    new = broker(2, epoch=500, incarnation_id=uid(77), rack="r1")
    after = replay(image, new)
    assert after.brokers[2] == new and after.brokers[2].fenced
    assert image.brokers[2].broker_epoch == 100


def test_broker_registration_change_fences_and_unfences():
    image = base_image()
    change = R.BrokerRegistrationChangeRecord
    fenced = replay(image, change(broker_id=1, broker_epoch=100, fenced=1))
    assert fenced.brokers[1].fenced and not fenced.broker_is_active(1)
    unfenced = replay(fenced, change(broker_id=1, broker_epoch=100, fenced=-1))
    assert not unfenced.brokers[1].fenced and unfenced.broker_is_active(1)
    same = replay(unfenced, change(broker_id=1, broker_epoch=100, fenced=0))
    assert same.brokers[1] == unfenced.brokers[1]
    unfenced3 = replay(image, change(broker_id=3, broker_epoch=100, fenced=-1))
    assert unfenced3.broker_is_active(3)
    # The rest of the registration stays.
    assert fenced.brokers[1].replace(fenced=False) == image.brokers[1]
    assert not image.brokers[1].fenced


def test_controlled_shutdown():
    image = base_image()
    change = R.BrokerRegistrationChangeRecord
    after = replay(image, change(broker_id=2, broker_epoch=100, in_controlled_shutdown=1))
    assert after.brokers[2].in_controlled_shutdown and not after.brokers[2].fenced
    assert not after.broker_is_active(2) and image.broker_is_active(2)
    # 0 means "no change": it does not leave controlled shutdown.
    still = replay(after, change(broker_id=2, broker_epoch=100, in_controlled_shutdown=0))
    assert still.brokers[2].in_controlled_shutdown
    fenced = replay(after, change(broker_id=2, broker_epoch=100, fenced=1))
    assert fenced.brokers[2].fenced and fenced.brokers[2].in_controlled_shutdown


def test_broker_registration_change_sets_log_dirs():
    image = base_image()
    dirs = [uid(900), uid(901)]
    after = replay(image, R.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=100,
                                                           log_dirs=dirs))
    assert after.brokers[1].log_dirs == dirs and not after.brokers[1].fenced
    assert image.brokers[1].log_dirs == []


def test_broker_registration_change_sets_cordoned_log_dirs_when_present_even_empty():
    image = base_image()
    assert image.brokers[1].cordoned_log_dirs is None
    change = R.BrokerRegistrationChangeRecord
    cordoned = replay(image, change(broker_id=1, broker_epoch=100,
                                    cordoned_log_dirs=[uid(900)]))
    assert cordoned.brokers[1].cordoned_log_dirs == [uid(900)]
    # absent (null): no change
    same = replay(cordoned, change(broker_id=1, broker_epoch=100, fenced=-1))
    assert same.brokers[1].cordoned_log_dirs == [uid(900)]
    # empty: none cordoned (what a Kafka 4.4 node writes after its broker registers)
    for before in (image, cordoned):
        after = replay(before, change(broker_id=1, broker_epoch=100, cordoned_log_dirs=[]))
        assert after.brokers[1].cordoned_log_dirs == []


def test_legacy_fence_and_unfence_records():
    image = base_image()
    fenced = replay(image, R.FenceBrokerRecord(id=2, epoch=100))
    assert fenced.brokers[2].fenced
    unfenced = replay(fenced, R.UnfenceBrokerRecord(id=2, epoch=100))
    assert not unfenced.brokers[2].fenced and unfenced.brokers[2] == image.brokers[2]
    with pytest.raises(MetadataError):
        replay(image, R.FenceBrokerRecord(id=2, epoch=99))
    with pytest.raises(MetadataError):
        replay(image, R.UnfenceBrokerRecord(id=3, epoch=101))
    with pytest.raises(MetadataError):
        replay(image, R.UnfenceBrokerRecord(id=8, epoch=100))


@pytest.mark.parametrize("fields", [dict(broker_epoch=99, fenced=1),
                                    dict(broker_epoch=101, fenced=-1),
                                    dict(broker_epoch=99, in_controlled_shutdown=1)])
def test_broker_registration_change_with_wrong_epoch(fields):
    with pytest.raises(MetadataError):
        replay(base_image(), R.BrokerRegistrationChangeRecord(broker_id=1, **fields))


def test_broker_registration_change_of_unknown_broker():
    with pytest.raises(MetadataError):
        replay(base_image(), R.BrokerRegistrationChangeRecord(broker_id=9, broker_epoch=100,
                                                              fenced=1))


@pytest.mark.parametrize("fields", [dict(fenced=2), dict(fenced=-2),
                                    dict(in_controlled_shutdown=-1),
                                    dict(in_controlled_shutdown=2)])
def test_broker_registration_change_with_bad_values(fields):
    with pytest.raises(MetadataError):
        replay(base_image(), R.BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=100,
                                                              **fields))


def test_unregister_broker():
    image = base_image()
    after = replay(image, R.UnregisterBrokerRecord(broker_id=3, broker_epoch=100))
    assert sorted(after.brokers) == [1, 2] and 3 in image.brokers
    with pytest.raises(MetadataError):
        replay(image, R.UnregisterBrokerRecord(broker_id=3, broker_epoch=7))
    with pytest.raises(MetadataError):
        replay(image, R.UnregisterBrokerRecord(broker_id=4, broker_epoch=100))
    with pytest.raises(MetadataError):  # twice
        replay(after, R.UnregisterBrokerRecord(broker_id=3, broker_epoch=100))


def test_unregister_then_register_again_in_one_delta():
    image = base_image()
    after = replay(image, R.UnregisterBrokerRecord(broker_id=1, broker_epoch=100),
                   broker(1, epoch=200))
    assert after.brokers[1].broker_epoch == 200 and after.brokers[1].fenced


def test_register_controller():
    record = R.RegisterControllerRecord(controller_id=3000, incarnation_id=uid(3000),
                                        zk_migration_ready=False)
    image = replay(EMPTY_IMAGE, record)
    assert image.controllers == {3000: record}
    gone = replay(image, R.UnregisterControllerRecord(controller_id=3000))
    assert gone.controllers == {} and image.controllers == {3000: record}
    # unregistering one that is not registered changes nothing
    assert replay(gone, R.UnregisterControllerRecord(controller_id=7)).controllers == {}


def test_clear_elr_empties_the_elrs_of_one_topic_or_every_topic():
    with_elr = replay(base_image(),
                      R.PartitionChangeRecord(topic_id=T1, partition_id=0,
                                              eligible_leader_replicas=[2], last_known_elr=[]),
                      R.PartitionChangeRecord(topic_id=T2, partition_id=0,
                                              eligible_leader_replicas=[], last_known_elr=[3]))
    before = {(t, p): with_elr.partition(t, p) for t, p in ((T1, 0), (T1, 1), (T2, 0))}
    foo = replay(with_elr, R.ClearElrRecord(topic_name="foo"))
    assert foo.partition(T1, 0).eligible_leader_replicas == []
    assert foo.partition(T1, 0).partition_epoch == before[(T1, 0)].partition_epoch + 1
    assert foo.partition(T1, 1) is before[(T1, 1)]  # no ELR: left as it was
    assert foo.partition(T2, 0).last_known_elr == [3]  # another topic
    every = replay(with_elr, R.ClearElrRecord(topic_name=""))
    assert every.partition(T2, 0).last_known_elr == []
    assert every.partition(T1, 0).eligible_leader_replicas == []
    with pytest.raises(MetadataError, match="ClearElrRecord for unknown topic 'nope'"):
        replay(with_elr, R.ClearElrRecord(topic_name="nope"))


# ------------------------------------------------------------------------------ the rest


def test_producer_ids_must_increase():
    image = base_image()
    after = replay(image, R.ProducerIdsRecord(broker_id=2, broker_epoch=100,
                                              next_producer_id=2000))
    # only the next id is state: the broker that asked for the block is not (Kafka's
    # snapshots write -1 for it, and so does kraftcore's)
    assert after.producer_ids == R.ProducerIdsRecord(broker_id=-1, broker_epoch=-1,
                                                     next_producer_id=2000)
    assert image.producer_ids.next_producer_id == 1000
    for next_id in (2000, 1999, 0):
        with pytest.raises(MetadataError):
            replay(after, R.ProducerIdsRecord(broker_id=1, broker_epoch=100,
                                              next_producer_id=next_id))
    assert replay(EMPTY_IMAGE, R.ProducerIdsRecord(broker_id=1, next_producer_id=0)
                  ).producer_ids.next_producer_id == 0


def test_client_quotas():
    image = base_image()
    alice = (("user", "alice"),)
    both = (("user", "alice"), ("client-id", "app"))
    default_user = (("user", None),)
    after = replay(image, quota(alice, "consumer_byte_rate", 2048.0),
                   quota(both, "request_percentage", 50.0),
                   quota(default_user, "producer_byte_rate", 1.5))
    assert after.quotas == {alice: {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0},
                            both: {"request_percentage": 50.0},
                            default_user: {"producer_byte_rate": 1.5}}
    removed = replay(after, quota(alice, "producer_byte_rate", remove=True),
                     quota(both, "request_percentage", remove=True),
                     quota(default_user, "never", remove=True))
    assert removed.quotas == {alice: {"consumer_byte_rate": 2048.0},
                              default_user: {"producer_byte_rate": 1.5}}
    assert image.quotas == {alice: {"producer_byte_rate": 1024.0}}


def test_acls():
    image = base_image()
    after = replay(image, acl(2, "User:bob"))
    assert sorted(after.acls) == [uid(5001), uid(5002)]
    assert after.acls[uid(5002)].principal == "User:bob"
    removed = replay(after, R.RemoveAccessControlEntryRecord(id=uid(5001)))
    assert list(removed.acls) == [uid(5002)]
    with pytest.raises(MetadataError):
        replay(removed, R.RemoveAccessControlEntryRecord(id=uid(5001)))
    assert list(image.acls) == [uid(5001)]


def test_scram_credentials():
    image = base_image()
    after = replay(image, scram("alice", 2), scram("alice", 1, iterations=8192))
    assert sorted(after.scram) == [("alice", 1), ("alice", 2)]
    assert after.scram[("alice", 1)].iterations == 8192
    removed = replay(after, R.RemoveUserScramCredentialRecord(name="alice", mechanism=1))
    assert list(removed.scram) == [("alice", 2)]
    with pytest.raises(MetadataError):
        replay(removed, R.RemoveUserScramCredentialRecord(name="alice", mechanism=1))
    with pytest.raises(MetadataError):
        replay(removed, R.RemoveUserScramCredentialRecord(name="bob", mechanism=2))
    assert image.scram[("alice", 1)].iterations == 4096


def test_delegation_tokens():
    image = base_image()
    after = replay(image, token("t2", "User:bob"), token("t1", "User:carol"))
    assert sorted(after.tokens) == ["t1", "t2"] and after.tokens["t1"].owner == "User:carol"
    removed = replay(after, R.RemoveDelegationTokenRecord(token_id="t1"))
    assert list(removed.tokens) == ["t2"]
    with pytest.raises(MetadataError):
        replay(removed, R.RemoveDelegationTokenRecord(token_id="t1"))
    assert image.tokens["t1"].owner == "User:alice"


def test_no_op_changes_nothing():
    image = base_image()
    delta = MetadataDelta(image)
    delta.replay(R.NoOpRecord())
    delta.replay_all([R.NoOpRecord(), R.NoOpRecord()])
    assert delta.records == 3
    after = delta.apply(end_offset=image.end_offset + 3, epoch=5, timestamp_ms=9)
    assert after.same_state(image) and after != image
    assert (after.end_offset, after.epoch, after.timestamp_ms) == (image.end_offset + 3, 5, 9)
    assert after.topics is image.topics and after.brokers is image.brokers


def test_zk_migration_state():
    image = base_image()
    assert image.zk_migration_state is None
    after = replay(image, R.ZkMigrationStateRecord(zk_migration_state=2))
    assert after.zk_migration_state == 2 and image.zk_migration_state is None
    later = replay(after, R.ZkMigrationStateRecord(zk_migration_state=3))
    assert later.zk_migration_state == 3
    assert not after.same_state(image)


# ------------------------------------------------------------------------------ errors


def test_partition_of_unknown_topic():
    with pytest.raises(MetadataError):
        replay(base_image(), partition(T3, 0))


def test_partition_of_removed_topic():
    image = base_image()
    with pytest.raises(MetadataError):
        replay(image, R.RemoveTopicRecord(topic_id=T1), partition(T1, 0))
    removed = replay(image, R.RemoveTopicRecord(topic_id=T1))
    with pytest.raises(MetadataError):
        replay(removed, partition(T1, 0))
    with pytest.raises(MetadataError):
        replay(removed, R.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1]))


def test_duplicate_topic_name():
    with pytest.raises(MetadataError):
        replay(base_image(), R.TopicRecord(name="foo", topic_id=T3))
    with pytest.raises(MetadataError):
        replay(EMPTY_IMAGE, R.TopicRecord(name="a", topic_id=T1),
               R.TopicRecord(name="a", topic_id=T2))


def test_duplicate_topic_id():
    with pytest.raises(MetadataError):
        replay(base_image(), R.TopicRecord(name="other", topic_id=T1))


def test_change_of_unknown_partition():
    image = base_image()
    with pytest.raises(MetadataError):
        replay(image, R.PartitionChangeRecord(partition_id=7, topic_id=T1, isr=[1]))
    with pytest.raises(MetadataError):
        replay(image, R.PartitionChangeRecord(partition_id=0, topic_id=T3, leader=1))


def test_remove_unknown_topic():
    with pytest.raises(MetadataError):
        replay(base_image(), R.RemoveTopicRecord(topic_id=T3))
    with pytest.raises(MetadataError):
        replay(base_image(), R.RemoveTopicRecord(topic_id=T1), R.RemoveTopicRecord(topic_id=T1))


@pytest.mark.parametrize("marker", [R.BeginTransactionRecord(name="t"),
                                    R.EndTransactionRecord(),
                                    R.AbortTransactionRecord(reason="r")],
                         ids=["begin", "end", "abort"])
def test_transaction_marker_in_a_delta(marker):
    image = base_image()
    with pytest.raises(MetadataError):
        replay(image, marker)
    delta = MetadataDelta(image)
    with pytest.raises(MetadataError):
        delta.replay(marker)


@pytest.mark.parametrize("thing", [C.SnapshotHeaderRecord(version=0),
                                   C.LeaderChangeMessage(version=0, leader_id=1), "text", None])
def test_not_a_metadata_record(thing):
    delta = MetadataDelta(base_image())
    with pytest.raises(MetadataError):
        delta.replay(thing)
    with pytest.raises(MetadataError):
        delta.replay_all([thing])


def test_an_error_leaves_the_base_image_unchanged():
    image = base_image()
    before = deep_state(image)
    with pytest.raises(MetadataError):
        replay(image, config("x", "y"), R.RemoveTopicRecord(topic_id=T1),
               R.PartitionChangeRecord(partition_id=0, topic_id=T2, leader=2),
               R.FenceBrokerRecord(id=1, epoch=100), R.UnregisterBrokerRecord(broker_id=2,
                                                                               broker_epoch=100),
               partition(T3, 0))
    assert deep_state(image) == before


# ------------------------------------------------------------------------------ sharing


def _every_kind_of_change():
    change = R.BrokerRegistrationChangeRecord
    return [
        R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=22),
        R.FeatureLevelRecord(name=KRAFT_VERSION, feature_level=1),
        broker(4), change(broker_id=1, broker_epoch=100, fenced=1, in_controlled_shutdown=1,
                          log_dirs=[uid(9)]),
        R.FenceBrokerRecord(id=2, epoch=100), R.UnfenceBrokerRecord(id=3, epoch=100),
        R.UnregisterBrokerRecord(broker_id=2, broker_epoch=100),
        R.RegisterControllerRecord(controller_id=3000, incarnation_id=uid(3000),
                                   zk_migration_ready=False),
        R.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1], leader=1,
                                replicas=[1, 2], directories=[uid(9), uid(10)]),
        partition(T1, 1, (1, 2)), partition(T1, 2),
        R.RemoveTopicRecord(topic_id=T2), R.TopicRecord(name="baz", topic_id=T3),
        partition(T3, 0),
        config("retention.ms", None), config("x", "1"), config("cleanup.policy", None,
                                                               resource_name="bar"),
        config("min.insync.replicas", "3", CONFIG_BROKER, ""),
        quota([("user", "alice")], "producer_byte_rate", remove=True),
        quota([("user", "bob")], "producer_byte_rate", 5.0),
        R.ProducerIdsRecord(broker_id=1, broker_epoch=100, next_producer_id=2000),
        acl(2), R.RemoveAccessControlEntryRecord(id=uid(5001)),
        scram("bob"), R.RemoveUserScramCredentialRecord(name="alice", mechanism=1),
        token("t2"), R.RemoveDelegationTokenRecord(token_id="t1"),
        R.ZkMigrationStateRecord(zk_migration_state=1), R.NoOpRecord(),
    ]


@pytest.mark.smoke
def test_the_base_image_is_never_modified():
    image = base_image()
    before = deep_state(image)
    records = _every_kind_of_change()
    after = replay_all(image, records, 50, 3, 7)
    assert deep_state(image) == before
    # ... and the new image has every change.
    assert after.features == {METADATA_VERSION: 22, KRAFT_VERSION: 1}
    assert sorted(after.brokers) == [1, 3, 4]
    assert after.brokers[1].fenced and after.brokers[1].in_controlled_shutdown
    assert not after.brokers[3].fenced
    assert after.partition(T1, 0).replicas == [1, 2] and after.partition(T1, 0).isr == [1]
    assert sorted(after.topic_ids) == ["baz", "foo"]
    assert after.configs == {(CONFIG_TOPIC, "foo"): {"x": "1"},
                             (CONFIG_BROKER, ""): {"min.insync.replicas": "3"}}
    assert after.quotas == {(("user", "bob"),): {"producer_byte_rate": 5.0}}
    assert list(after.acls) == [uid(5002)] and list(after.scram) == [("bob", 1)]
    assert list(after.tokens) == ["t2"] and after.zk_migration_state == 1
    assert after.producer_ids.next_producer_id == 2000
    assert (after.end_offset, after.epoch, after.timestamp_ms) == (50, 3, 7)
    # Replaying the same records again on the same base gives the same image.
    assert replay_all(image, _every_kind_of_change(), 50, 3, 7) == after
    assert deep_state(image) == before


def test_records_one_by_one_equal_replay_all():
    image = base_image()
    delta = MetadataDelta(image)
    for record in _every_kind_of_change():
        delta.replay(record)
    assert delta.records == len(_every_kind_of_change())
    assert delta.apply(50, 3, 7) == replay_all(image, _every_kind_of_change(), 50, 3, 7)


def test_untouched_topics_and_maps_are_shared():
    image = base_image()
    after = replay(image, R.PartitionChangeRecord(partition_id=0, topic_id=T1, isr=[1, 2]))
    assert after.topics[T2] is image.topics[T2]
    assert after.topics[T1] is not image.topics[T1]
    # The untouched partition of a touched topic is the same record.
    assert after.topics[T1].partitions[1] is image.topics[T1].partitions[1]
    for name in ("features", "brokers", "controllers", "topic_ids", "configs", "quotas",
                 "acls", "scram", "tokens"):
        assert getattr(after, name) is getattr(image, name), name
    assert after.producer_ids is image.producer_ids
    # A delta without topic changes shares the whole topic map.
    other = replay(image, config("a", "b"), broker(9))
    assert other.topics is image.topics and other.topic_ids is image.topic_ids
    assert other.configs is not image.configs and other.brokers is not image.brokers
    assert other.configs[(CONFIG_TOPIC, "bar")] is image.configs[(CONFIG_TOPIC, "bar")]


def test_the_base_of_a_chain_of_deltas_is_never_modified():
    image = base_image()
    states = [deep_state(image)]
    images = [image]
    for record in _every_kind_of_change():
        images.append(replay(images[-1], record))
        states.append(deep_state(images[-1]))
    assert [deep_state(i) for i in images] == states
    assert images[-1].same_state(replay_all(image, _every_kind_of_change()))


# ------------------------------------------------------------------------------ apply


def test_apply_provenance_defaults_to_the_base():
    image = replay_all(EMPTY_IMAGE, [R.NoOpRecord()], 10, 2, 123)
    assert (image.end_offset, image.epoch, image.timestamp_ms) == (10, 2, 123)
    same = MetadataDelta(image).apply()
    assert (same.end_offset, same.epoch, same.timestamp_ms) == (10, 2, 123)
    assert same == image


def test_a_delta_refuses_replay_after_apply():
    delta = MetadataDelta(base_image())
    delta.replay(config("a", "b"))
    image = delta.apply(10, 1, 1)
    with pytest.raises(RuntimeError):
        delta.replay(config("a", "c"))
    with pytest.raises(RuntimeError):
        delta.replay_all([R.NoOpRecord()])
    with pytest.raises(RuntimeError):
        delta.replay_all([])
    assert image.configs[(CONFIG_TOPIC, "foo")]["a"] == "b"


def test_empty_image():
    image = MetadataImage()
    assert image.is_empty and image == EMPTY_IMAGE and image.same_state(EMPTY_IMAGE)
    assert not base_image().is_empty
    assert replay(EMPTY_IMAGE, R.NoOpRecord()).is_empty
    assert not replay(EMPTY_IMAGE, R.ProducerIdsRecord(broker_id=1, next_producer_id=0)).is_empty


def test_change_of_a_partition_with_inconsistent_directories_is_a_metadata_error():
    # A PartitionRecord whose directories are not parallel to its replicas, then a
    # reassignment: replay must report the inconsistent log as MetadataError, like every
    # other record that cannot apply, not leak another exception type.
    image = replay(EMPTY_IMAGE, R.TopicRecord(name="a", topic_id=T3),
                   partition(T3, 0, (1, 2, 3), directories=[uid(7), uid(8)]))
    with pytest.raises(MetadataError):
        replay(image, R.PartitionChangeRecord(partition_id=0, topic_id=T3, replicas=[1, 2]))
