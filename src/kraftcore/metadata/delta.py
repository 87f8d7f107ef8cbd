"""Replaying metadata records: `MetadataDelta` collects the changes records make to a base
`MetadataImage` and `apply()` builds the next image (kafka-facts §5.3).

Every record type of §5.2 has one replay rule here, and only here: the active controller,
the standby controllers and the brokers all build their state through this module, so they
agree on what a committed prefix of the log means.

Rules worth stating (Kafka's replay semantics):

* `PartitionChangeRecord` merges into the partition (`kraftcore.metadata.partition`):
  unchanged fields stay, a new leader bumps the leader epoch, every change bumps the
  partition epoch.
* `RemoveTopicRecord` removes the topic, its partitions and its topic configs.
* `ConfigRecord` with a null value deletes the config; `FeatureLevelRecord` level 0 removes
  the feature; `ClientQuotaRecord` with `remove` deletes the key.
* `BrokerRegistrationChangeRecord`: Fenced and InControlledShutdown 0 change nothing,
  nor do empty LogDirs; CordonedLogDirs replace the broker's when present, even empty.
* `ProducerIdsRecord` must move the next producer id up; the image keeps only that id
  (broker id and epoch -1, as Kafka's snapshots write it).
* `UnregisterBrokerRecord`, `BrokerRegistrationChangeRecord` and the legacy
  Fence/UnfenceBrokerRecord must name the registered broker epoch.
* A record that cannot apply (a partition of an unknown topic, a second topic of one name, a
  change of an unknown broker) raises `MetadataError`: the log is inconsistent and replay
  must stop rather than guess.

Metadata transactions (BeginTransaction / EndTransaction / AbortTransaction) are handled a
level up, by `kraftcore.metadata.loader`, which hands a delta only whole transactions.

The delta never changes its base image: it copies a map (or one topic's partition map) the
first time a record touches it, and `apply()` keeps every untouched part of the base.
"""

from kraftcore.errors import MetadataError
from kraftcore.metadata import records as R
from kraftcore.metadata.image import CONFIG_TOPIC, MetadataImage, TopicImage
from kraftcore.metadata.partition import apply_change

__all__ = ["MetadataDelta", "replay_all"]

_COPIED_MAPS = ("features", "brokers", "controllers", "topic_ids", "configs", "quotas",
                "acls", "scram", "tokens")


class MetadataDelta:
    """Changes on top of `image`; `replay(record)` adds one, `apply()` makes the image."""

    __slots__ = ("image", "_maps", "topics", "producer_ids", "zk_migration_state",
                 "_copied_configs", "_copied_quotas", "records", "_applied")

    def __init__(self, image):
        self.image = image
        # map name -> a copy of the base's map, made on first write.
        self._maps = {}
        # topic id -> the new TopicImage (its partitions dict is this delta's own copy), or
        # None when the topic was removed.
        self.topics = {}
        self.producer_ids = image.producer_ids
        self.zk_migration_state = image.zk_migration_state
        self._copied_configs = set()
        self._copied_quotas = set()
        self.records = 0
        self._applied = False

    # ------------------------------------------------------------------ views

    def _map(self, name):
        """The delta's own copy of one of the image's maps, for writing."""
        m = self._maps.get(name)
        if m is None:
            m = self._maps[name] = dict(getattr(self.image, name))
        return m

    def _view(self, name):
        """The current state of a map, for reading."""
        m = self._maps.get(name)
        return getattr(self.image, name) if m is None else m

    def topic(self, topic_id):
        """The current `TopicImage` of `topic_id` (None when absent or removed)."""
        if topic_id in self.topics:
            return self.topics[topic_id]
        return self.image.topics.get(topic_id)

    def topic_id_of(self, name):
        return self._view("topic_ids").get(name)

    def broker(self, broker_id):
        return self._view("brokers").get(broker_id)

    def partition(self, topic_id, partition_id):
        topic = self.topic(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def _writable_topic(self, topic_id, record):
        topic = self.topics.get(topic_id)
        if topic is None:
            if topic_id in self.topics:
                raise MetadataError(f"{R.type_name(record)} for topic {topic_id}, which was "
                                    "removed")
            base = self.image.topics.get(topic_id)
            if base is None:
                raise MetadataError(f"{R.type_name(record)} for unknown topic {topic_id}")
            topic = self.topics[topic_id] = TopicImage(base.name, topic_id,
                                                       dict(base.partitions))
        return topic

    # ------------------------------------------------------------------ replay

    def replay(self, record):
        """Apply one metadata record to the delta."""
        if self._applied:
            raise RuntimeError("this delta was applied; start a new one on its image")
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise MetadataError(f"cannot replay {type(record).__name__}: not a metadata "
                                "record type the image holds")
        handler(self, record)
        self.records += 1

    def replay_all(self, records):
        if self._applied:
            raise RuntimeError("this delta was applied; start a new one on its image")
        handlers = _HANDLERS
        for record in records:
            handler = handlers.get(type(record))
            if handler is None:
                raise MetadataError(f"cannot replay {type(record).__name__}: not a metadata "
                                    "record type the image holds")
            handler(self, record)
        self.records += len(records)

    def replay_no_ops(self, count):
        """Replay `count` NoOpRecords: they change nothing, and count as replayed."""
        if self._applied:
            raise RuntimeError("this delta was applied; start a new one on its image")
        self.records += count

    def _topic_record(self, record):
        topic_ids = self._view("topic_ids")
        if record.name in topic_ids:
            raise MetadataError(f"TopicRecord for {record.name!r} ({record.topic_id}): a "
                                f"topic of that name exists ({topic_ids[record.name]})")
        if self.topic(record.topic_id) is not None:
            raise MetadataError(f"TopicRecord for {record.name!r} reuses topic id "
                                f"{record.topic_id}")
        self._map("topic_ids")[record.name] = record.topic_id
        self.topics[record.topic_id] = TopicImage(record.name, record.topic_id, {})

    def _partition_record(self, record):
        self._writable_topic(record.topic_id, record).partitions[record.partition_id] = record

    def _partition_change_record(self, record):
        topic = self._writable_topic(record.topic_id, record)
        current = topic.partitions.get(record.partition_id)
        if current is None:
            raise MetadataError(f"PartitionChangeRecord for unknown partition "
                                f"{topic.name}-{record.partition_id}")
        topic.partitions[record.partition_id] = apply_change(current, record)

    def _remove_topic_record(self, record):
        topic = self.topic(record.topic_id)
        if topic is None:
            raise MetadataError(f"RemoveTopicRecord for unknown topic {record.topic_id}")
        self.topics[record.topic_id] = None
        del self._map("topic_ids")[topic.name]
        key = (CONFIG_TOPIC, topic.name)
        if key in self._view("configs"):
            del self._map("configs")[key]
            self._copied_configs.discard(key)

    def _config_record(self, record):
        key = (record.resource_type, record.resource_name)
        configs = self._map("configs")
        if key not in self._copied_configs:
            configs[key] = dict(configs.get(key, ()))
            self._copied_configs.add(key)
        entries = configs[key]
        if record.value is None:
            entries.pop(record.name, None)
            if not entries:
                del configs[key]
                self._copied_configs.discard(key)
        else:
            entries[record.name] = record.value

    def _feature_level_record(self, record):
        features = self._map("features")
        if record.feature_level == 0:
            features.pop(record.name, None)
        else:
            features[record.name] = record.feature_level

    def _register_broker_record(self, record):
        self._map("brokers")[record.broker_id] = record

    def _registered(self, broker_id, epoch, record):
        broker = self.broker(broker_id)
        if broker is None:
            raise MetadataError(f"{R.type_name(record)} for broker {broker_id}, which is not "
                                "registered")
        if broker.broker_epoch != epoch:
            raise MetadataError(f"{R.type_name(record)} for broker {broker_id} names epoch "
                                f"{epoch}; the registration has epoch {broker.broker_epoch}")
        return broker

    def _unregister_broker_record(self, record):
        self._registered(record.broker_id, record.broker_epoch, record)
        del self._map("brokers")[record.broker_id]

    def _broker_registration_change_record(self, record):
        broker = self._registered(record.broker_id, record.broker_epoch, record)
        changes = {}
        if record.fenced == 1:
            changes["fenced"] = True
        elif record.fenced == -1:
            changes["fenced"] = False
        elif record.fenced != 0:
            raise MetadataError(f"BrokerRegistrationChangeRecord for broker {record.broker_id}"
                                f" has Fenced {record.fenced} (expected -1, 0 or 1)")
        if record.in_controlled_shutdown == 1:
            changes["in_controlled_shutdown"] = True
        elif record.in_controlled_shutdown != 0:
            raise MetadataError(f"BrokerRegistrationChangeRecord for broker {record.broker_id}"
                                f" has InControlledShutdown {record.in_controlled_shutdown}")
        if record.log_dirs:
            changes["log_dirs"] = record.log_dirs
        # Kafka's rule (ClusterDelta): empty LogDirs change nothing, but CordonedLogDirs
        # replace the broker's whenever present, an empty list too (none left cordoned);
        # only null (the field absent) leaves them as they are.
        if record.cordoned_log_dirs is not None:
            changes["cordoned_log_dirs"] = record.cordoned_log_dirs
        if changes:
            self._map("brokers")[record.broker_id] = broker.replace(**changes)

    def _fence_broker_record(self, record, fenced=True):
        broker = self._registered(record.id, record.epoch, record)
        self._map("brokers")[record.id] = broker.replace(fenced=fenced)

    def _unfence_broker_record(self, record):
        self._fence_broker_record(record, fenced=False)

    def _register_controller_record(self, record):
        self._map("controllers")[record.controller_id] = record

    def _unregister_controller_record(self, record):
        if record.controller_id in self._view("controllers"):
            del self._map("controllers")[record.controller_id]

    def _clear_elr_record(self, record):
        """Every partition of the topic named (of every topic for an empty name) with an
        ELR or a last known ELR gets both emptied, as a PartitionChangeRecord would (its
        partition epoch moves); the others are left as they are (Kafka's rule)."""
        if record.topic_name:
            topic_id = self.topic_id_of(record.topic_name)
            if topic_id is None:
                raise MetadataError(f"ClearElrRecord for unknown topic {record.topic_name!r}")
            topic_ids = [topic_id]
        else:
            topic_ids = [t for t in self._view("topic_ids").values()]
        for topic_id in topic_ids:
            current = self.topic(topic_id)
            if current is None:
                continue
            for partition_id, partition in list(current.partitions.items()):
                if partition.eligible_leader_replicas or partition.last_known_elr:
                    self._writable_topic(topic_id, record).partitions[partition_id] = \
                        apply_change(partition, R.PartitionChangeRecord(
                            topic_id=topic_id, partition_id=partition_id,
                            eligible_leader_replicas=[], last_known_elr=[]))

    def _producer_ids_record(self, record):
        current = self.producer_ids
        if current is not None and record.next_producer_id <= current.next_producer_id:
            raise MetadataError(f"ProducerIdsRecord moves the next producer id from "
                                f"{current.next_producer_id} to {record.next_producer_id}; "
                                "it must increase")
        # Only the next producer id is state (Kafka's ProducerIdsImage): which broker asked
        # for the block is not, and a snapshot says -1 for it, as Kafka's snapshots do.
        if record.broker_id != -1 or record.broker_epoch != -1:
            record = record.replace(broker_id=-1, broker_epoch=-1)
        self.producer_ids = record

    def _client_quota_record(self, record):
        key = tuple((e.entity_type, e.entity_name) for e in record.entity)
        quotas = self._map("quotas")
        if key not in self._copied_quotas:
            quotas[key] = dict(quotas.get(key, ()))
            self._copied_quotas.add(key)
        entries = quotas[key]
        if record.remove:
            entries.pop(record.key, None)
            if not entries:
                del quotas[key]
                self._copied_quotas.discard(key)
        else:
            entries[record.key] = record.value

    def _access_control_entry_record(self, record):
        self._map("acls")[record.id] = record

    def _remove_access_control_entry_record(self, record):
        if self._map("acls").pop(record.id, None) is None:
            raise MetadataError(f"RemoveAccessControlEntryRecord for unknown ACL {record.id}")

    def _user_scram_credential_record(self, record):
        self._map("scram")[(record.name, record.mechanism)] = record

    def _remove_user_scram_credential_record(self, record):
        if self._map("scram").pop((record.name, record.mechanism), None) is None:
            raise MetadataError(f"RemoveUserScramCredentialRecord for unknown credential "
                                f"{record.name!r} mechanism {record.mechanism}")

    def _delegation_token_record(self, record):
        self._map("tokens")[record.token_id] = record

    def _remove_delegation_token_record(self, record):
        if self._map("tokens").pop(record.token_id, None) is None:
            raise MetadataError(f"RemoveDelegationTokenRecord for unknown token "
                                f"{record.token_id!r}")

    def _zk_migration_state_record(self, record):
        self.zk_migration_state = record.zk_migration_state

    def _no_op_record(self, record):
        pass

    def _transaction_record(self, record):
        raise MetadataError(f"{R.type_name(record)} reached the image: metadata transactions "
                            "are resolved by the loader before replay")

    # ------------------------------------------------------------------ apply

    def apply(self, end_offset=None, epoch=None, timestamp_ms=None):
        """The image after every replayed record, with the given provenance (the base's when
        an argument is None)."""
        # The new image shares this delta's maps: no replay may change them afterwards.
        self._applied = True
        base = self.image
        maps = {name: self._maps.get(name, getattr(base, name)) for name in _COPIED_MAPS}
        if self.topics:
            topics = dict(base.topics)
            for topic_id, topic in self.topics.items():
                if topic is None:
                    topics.pop(topic_id, None)
                else:
                    topics[topic_id] = topic
        else:
            topics = base.topics
        image = MetadataImage(
            end_offset=base.end_offset if end_offset is None else end_offset,
            epoch=base.epoch if epoch is None else epoch,
            timestamp_ms=base.timestamp_ms if timestamp_ms is None else timestamp_ms,
            topics=topics, producer_ids=self.producer_ids,
            zk_migration_state=self.zk_migration_state, **maps)
        return image


def replay_all(image, records, end_offset=None, epoch=None, timestamp_ms=None):
    """The image after replaying `records` (no transaction markers) on `image`."""
    delta = MetadataDelta(image)
    delta.replay_all(records)
    return delta.apply(end_offset, epoch, timestamp_ms)


_HANDLERS = {
    R.RegisterBrokerRecord: MetadataDelta._register_broker_record,
    R.UnregisterBrokerRecord: MetadataDelta._unregister_broker_record,
    R.TopicRecord: MetadataDelta._topic_record,
    R.PartitionRecord: MetadataDelta._partition_record,
    R.ConfigRecord: MetadataDelta._config_record,
    R.PartitionChangeRecord: MetadataDelta._partition_change_record,
    R.FenceBrokerRecord: MetadataDelta._fence_broker_record,
    R.UnfenceBrokerRecord: MetadataDelta._unfence_broker_record,
    R.RemoveTopicRecord: MetadataDelta._remove_topic_record,
    R.DelegationTokenRecord: MetadataDelta._delegation_token_record,
    R.UserScramCredentialRecord: MetadataDelta._user_scram_credential_record,
    R.FeatureLevelRecord: MetadataDelta._feature_level_record,
    R.ClientQuotaRecord: MetadataDelta._client_quota_record,
    R.ProducerIdsRecord: MetadataDelta._producer_ids_record,
    R.BrokerRegistrationChangeRecord: MetadataDelta._broker_registration_change_record,
    R.AccessControlEntryRecord: MetadataDelta._access_control_entry_record,
    R.RemoveAccessControlEntryRecord: MetadataDelta._remove_access_control_entry_record,
    R.NoOpRecord: MetadataDelta._no_op_record,
    R.ZkMigrationStateRecord: MetadataDelta._zk_migration_state_record,
    R.RemoveUserScramCredentialRecord: MetadataDelta._remove_user_scram_credential_record,
    R.BeginTransactionRecord: MetadataDelta._transaction_record,
    R.EndTransactionRecord: MetadataDelta._transaction_record,
    R.AbortTransactionRecord: MetadataDelta._transaction_record,
    R.RemoveDelegationTokenRecord: MetadataDelta._remove_delegation_token_record,
    R.RegisterControllerRecord: MetadataDelta._register_controller_record,
    R.ClearElrRecord: MetadataDelta._clear_elr_record,
    R.UnregisterControllerRecord: MetadataDelta._unregister_controller_record,
}
