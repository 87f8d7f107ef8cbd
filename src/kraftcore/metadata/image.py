"""The metadata image: the cluster state that a committed prefix of the metadata log
describes (Kafka's `MetadataImage`).

An image is immutable by convention: nothing changes it after it is built. A new image comes
from `MetadataDelta.apply()` (kraftcore.metadata.delta), which shares every part of the old
image that the delta did not touch: a topic whose partitions did not change is the same
`TopicImage` object in both images, so applying a delta costs what the delta touches, not
what the image holds.

What an image holds, each keyed as the records that build it name it (kafka-facts §5.2):

* `features`: feature name -> level (`metadata.version`, `kraft.version`, ...);
* `brokers`: broker id -> its `RegisterBrokerRecord`, with `fenced` and
  `in_controlled_shutdown` kept current by later records;
* `controllers`: controller id -> its `RegisterControllerRecord`;
* `topics`: topic id -> `TopicImage` (name, id, partition id -> `PartitionRecord` carrying
  the current replicas, ISR, leader, leader epoch and partition epoch); `topic_ids`:
  name -> topic id;
* `configs`: (resource type, resource name) -> {config name: value};
* `producer_ids`: the next producer id block, a `ProducerIdsRecord` with broker id and epoch -1
  (only the next id is state, as in Kafka), or None;
* `quotas`: client-quota entity (a tuple of (type, name) pairs) -> {key: value};
* `acls`: ACL id -> `AccessControlEntryRecord`; `scram`: (user, mechanism) ->
  `UserScramCredentialRecord`; `tokens`: token id -> `DelegationTokenRecord`;
* `zk_migration_state`: the last `ZkMigrationStateRecord` value, or None.

Provenance: `end_offset` is the offset after the last record the image contains (a
snapshot of this image has id (end_offset, epoch)), `epoch` the epoch of that record and
`timestamp_ms` its batch's append time.

Records stored in an image are shared, never changed: code that needs a different record
builds a new one (`record.replace(...)`).
"""

from kraftcore.types import Uuid

__all__ = ["MetadataImage", "TopicImage", "EMPTY_IMAGE", "CONFIG_TOPIC", "CONFIG_BROKER",
           "METADATA_VERSION", "KRAFT_VERSION"]

# ConfigResource types (kafka-facts §5.2, "Related enums").
CONFIG_TOPIC = 2
CONFIG_BROKER = 4

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"


class TopicImage:
    """One topic: its name, id and partitions (partition id -> `PartitionRecord`)."""

    __slots__ = ("name", "topic_id", "partitions")

    def __init__(self, name, topic_id, partitions):
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions

    def __eq__(self, other):
        if not isinstance(other, TopicImage):
            return NotImplemented
        return (self.name == other.name and self.topic_id == other.topic_id
                and self.partitions == other.partitions)

    __hash__ = None

    def __repr__(self):
        return (f"TopicImage({self.name!r}, {self.topic_id}, "
                f"{len(self.partitions)} partitions)")


_MAPS = ("features", "brokers", "controllers", "topics", "topic_ids", "configs", "quotas",
         "acls", "scram", "tokens")


class MetadataImage:
    """The cluster state at `end_offset` (see the module docstring)."""

    __slots__ = ("end_offset", "epoch", "timestamp_ms", "producer_ids", "zk_migration_state",
                 *_MAPS)

    def __init__(self, *, end_offset=0, epoch=-1, timestamp_ms=-1, features=None,
                 brokers=None, controllers=None, topics=None, topic_ids=None, configs=None,
                 producer_ids=None, quotas=None, acls=None, scram=None, tokens=None,
                 zk_migration_state=None):
        self.end_offset = end_offset
        self.epoch = epoch
        self.timestamp_ms = timestamp_ms
        self.features = {} if features is None else features
        self.brokers = {} if brokers is None else brokers
        self.controllers = {} if controllers is None else controllers
        self.topics = {} if topics is None else topics
        self.topic_ids = {} if topic_ids is None else topic_ids
        self.configs = {} if configs is None else configs
        self.producer_ids = producer_ids
        self.quotas = {} if quotas is None else quotas
        self.acls = {} if acls is None else acls
        self.scram = {} if scram is None else scram
        self.tokens = {} if tokens is None else tokens
        self.zk_migration_state = zk_migration_state

    # ------------------------------------------------------------------ comparisons

    def same_state(self, other):
        """Whether both images describe the same cluster (provenance aside)."""
        return (all(getattr(self, name) == getattr(other, name) for name in _MAPS)
                and self.producer_ids == other.producer_ids
                and self.zk_migration_state == other.zk_migration_state)

    def __eq__(self, other):
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return (self.end_offset == other.end_offset and self.epoch == other.epoch
                and self.same_state(other))

    __hash__ = None

    def __repr__(self):
        return (f"MetadataImage(end_offset={self.end_offset}, epoch={self.epoch}, "
                f"{len(self.brokers)} brokers, {len(self.topics)} topics, "
                f"{self.partition_count()} partitions)")

    # ------------------------------------------------------------------ queries

    @property
    def is_empty(self):
        return not any(getattr(self, name) for name in _MAPS) and self.producer_ids is None

    def metadata_version(self):
        """The `metadata.version` feature level, or None before it is set."""
        return self.features.get(METADATA_VERSION)

    def partition_count(self):
        return sum(len(topic.partitions) for topic in self.topics.values())

    def topic(self, name_or_id):
        """The `TopicImage` named by a name or a topic id, or None."""
        if isinstance(name_or_id, Uuid):
            return self.topics.get(name_or_id)
        topic_id = self.topic_ids.get(name_or_id)
        return None if topic_id is None else self.topics[topic_id]

    def partition(self, topic_id, partition_id):
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def broker_is_active(self, broker_id):
        """Registered, unfenced and not in controlled shutdown (kafka-facts §8.3): only such
        a broker may become a leader or join an ISR."""
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def controller_endpoints(self, listener_name):
        """Controller id -> (host, port) of each registered controller's listener named
        `listener_name` (its first listener when it has none of that name)."""
        out = {}
        for controller_id, registration in self.controllers.items():
            endpoints = registration.end_points
            chosen = next((e for e in endpoints if e.name == listener_name),
                          endpoints[0] if endpoints else None)
            if chosen is not None:
                out[controller_id] = (chosen.host, chosen.port)
        return out

    def topic_config(self, topic_name, name):
        """A topic's config value, falling back to the cluster-wide broker default
        (resource BROKER with name ""); None when neither sets it."""
        value = self.configs.get((CONFIG_TOPIC, topic_name), {}).get(name)
        if value is None:
            value = self.configs.get((CONFIG_BROKER, ""), {}).get(name)
        return value


EMPTY_IMAGE = MetadataImage()
