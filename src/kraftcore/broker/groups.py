"""`GroupCoordinator`: a broker's side of consumer groups' committed offsets — the groups
whose offsets partition (`__consumer_offsets`, `group_records.partition_for`) this broker
leads, their offsets, and the records that make them durable.

This slice serves groups without members: consumers that commit with a group id but assign
their partitions themselves (Kafka's "simple" groups: OffsetCommit with generation -1).
Membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) is not served, so every group is
empty, and a commit that names a generation or a member is refused as Kafka refuses one
for an empty group.

One `_Shard` per offsets partition this broker leads, created when the metadata image makes
it leader (`on_role_changes`) and dropped when it stops leading. A shard is LOADING until
`load_step` has read its log from the log start to the log end offset, then ACTIVE. The
offsets it answers with are the *committed* ones: a record counts once the partition's high
watermark has passed it (records above the high watermark wait in `pending`, in log order,
and move into `committed` when it passes them; the last record of a key wins, a tombstone
deletes the key). So an OffsetFetch never sees a commit that a new leader could lose, and a
commit is answered only when its records are committed (acks=all, the caller waits for the
high watermark; `commit` returns the offset to wait for).

Errors are Kafka's (`GroupError.code`): NOT_COORDINATOR when this broker does not lead the
group's offsets partition (or led it in an older epoch), COORDINATOR_LOAD_IN_PROGRESS while
it loads, INVALID_GROUP_ID for the empty group id, ILLEGAL_GENERATION / GROUP_ID_NOT_FOUND
(v9+) for a generation given for a group that does not exist, UNKNOWN_MEMBER_ID for a
generation or member given for an existing group (it has no members), and the append's
refusals mapped as Kafka's coordinator maps them (NOT_ENOUGH_REPLICAS, a timeout ->
COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER, a storage error -> NOT_COORDINATOR;
MESSAGE_TOO_LARGE -> UNKNOWN_SERVER_ERROR). Metadata longer than `metadata_chars_max` UTF-16
code units (`offset.metadata.max.bytes`, which Kafka counts in Java chars) is
OFFSET_METADATA_TOO_LARGE for that partition alone.

No clock, socket or thread here: time is the `now_ms` the caller passes; the logs are the
partitions' (`kraftcore.broker.partition.Partition`).
"""

import collections
import dataclasses

from kraftcore import codec
from kraftcore.broker.group_records import (OFFSETS_TOPIC, decode_key, decode_offset_value,
                                            offset_commit_record, partition_for)
from kraftcore.broker.partition import PartitionError
from kraftcore.errors import ConfigError, KraftcoreError
from kraftcore.layout import BATCH_HEADER_BYTES
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["GroupCoordinator", "GroupConfig", "GroupError", "LOADING", "ACTIVE",
           "OFFSETS_TOPIC", "offsets_topic_configs", "offsets_topic_request"]

_E = ErrorCode
LOADING, ACTIVE = "loading", "active"
# The most a record adds to a batch besides its key and value (length, attributes,
# timestamp and offset deltas, key and value lengths, header count, as varints).
_RECORD_OVERHEAD_BYTES_MAX = 5 + 1 + 10 + 5 + 5 + 5 + 5
_LOAD_FAILURES_KEPT_MAX = 100

# How an append's refusal reaches the committer (Kafka's coordinator normalises them).
_APPEND_ERRORS = {
    _E.NOT_ENOUGH_REPLICAS: _E.COORDINATOR_NOT_AVAILABLE,
    _E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: _E.COORDINATOR_NOT_AVAILABLE,
    _E.REQUEST_TIMED_OUT: _E.COORDINATOR_NOT_AVAILABLE,
    _E.UNKNOWN_TOPIC_OR_PARTITION: _E.COORDINATOR_NOT_AVAILABLE,
    _E.NOT_LEADER_OR_FOLLOWER: _E.NOT_COORDINATOR,
    _E.KAFKA_STORAGE_ERROR: _E.NOT_COORDINATOR,
    _E.MESSAGE_TOO_LARGE: _E.UNKNOWN_SERVER_ERROR,
    _E.CORRUPT_MESSAGE: _E.UNKNOWN_SERVER_ERROR,
    _E.INVALID_RECORD: _E.UNKNOWN_SERVER_ERROR,
}


def offsets_topic_configs(segment_bytes=100 * 1024 * 1024):
    """The configs Kafka gives the offsets topic when it creates it: compacted, the
    producer's compression kept, segments of `offsets.topic.segment.bytes` (100 MiB)."""
    return {"cleanup.policy": "compact", "compression.type": "producer",
            "segment.bytes": str(segment_bytes)}


def offsets_topic_request(image, config, timeout_ms=30_000):
    """The CreateTopics request a broker forwards to the active controller to create the
    offsets topic (`config` a `GroupConfig`; the replication factor is capped by the active
    brokers of `image`), or None when `image` has it already."""
    if image.topic(OFFSETS_TOPIC) is not None:
        return None
    live = sum(1 for b in image.brokers if image.broker_is_active(b))
    cls = m.CreateTopicsRequest
    return cls(topics=[cls.CreatableTopic(
        name=OFFSETS_TOPIC, num_partitions=config.offsets_partitions,
        replication_factor=config.replication_factor(live), assignments=[],
        configs=[cls.CreatableTopicConfig(name=k, value=v)
                 for k, v in offsets_topic_configs().items()])], timeout_ms=timeout_ms)


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    """The coordinator's settings, Kafka's names in the comments."""

    offsets_partitions: int = 50  # offsets.topic.num.partitions
    offsets_replication_factor: int = 3  # offsets.topic.replication.factor
    metadata_chars_max: int = 4096  # offset.metadata.max.bytes
    commit_timeout_ms: int = 5000  # offsets.commit.timeout.ms

    def __post_init__(self):
        if self.offsets_partitions < 1:
            raise ConfigError("offsets.topic.num.partitions must be >= 1, got "
                              f"{self.offsets_partitions}")
        if self.offsets_replication_factor < 1:
            raise ConfigError("offsets.topic.replication.factor must be >= 1, got "
                              f"{self.offsets_replication_factor}")
        if self.commit_timeout_ms < 1:
            raise ConfigError("offsets.commit.timeout.ms must be >= 1, got "
                              f"{self.commit_timeout_ms}")

    def replication_factor(self, live_brokers):
        """The offsets topic's replication factor when it is created with `live_brokers`
        unfenced: the setting, or fewer when fewer brokers are up (at least 1)."""
        return max(1, min(self.offsets_replication_factor, live_brokers))


class GroupError(KraftcoreError):
    """A group request refused as a whole; `code` is the Kafka error code of its answer."""

    def __init__(self, code, message):
        self.code = int(code)
        super().__init__(message)


def _utf16_units(text):
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class _Shard:
    """The groups of one offsets partition this broker leads."""

    __slots__ = ("partition", "epoch", "state", "load_offset", "load_end", "committed",
                 "pending", "records_loaded")

    def __init__(self, partition):
        self.partition = partition
        self.epoch = partition.leader_epoch
        self.state = LOADING
        self.load_offset = partition.log.log_start_offset
        self.load_end = partition.log.log_end_offset
        self.committed = {}  # group -> {(topic, partition): OffsetAndMetadata}
        self.pending = collections.deque()  # (offset, group, (topic, p), value or None)
        self.records_loaded = 0

    @property
    def index(self):
        return self.partition.index

    def leads(self):
        p = self.partition
        return p.is_leader and p.leader_epoch == self.epoch

    def take(self, offset, key, value):
        """A record of this partition's log at `offset` (decoded key, value bytes or None)."""
        if key[0] != "offset":
            return  # group metadata and KIP-848 records: no members are served
        _, group, topic, index = key
        entry = None if value is None else decode_offset_value(value)
        self.pending.append((offset, group, (topic, index), entry))

    def catch_up(self):
        """Move the pending records the high watermark has passed into `committed`."""
        hw = self.partition.high_watermark
        pending, committed = self.pending, self.committed
        while pending and pending[0][0] < hw:
            _, group, tp, entry = pending.popleft()
            if entry is None:
                offsets = committed.get(group)
                if offsets is not None:
                    offsets.pop(tp, None)
                    if not offsets:
                        del committed[group]
            else:
                committed.setdefault(group, {})[tp] = entry

    def has_group(self, group):
        return group in self.committed or any(g == group for _, g, _, _ in self.pending)


class GroupCoordinator:
    """The groups this broker coordinates (module docstring). `config` is a `GroupConfig`."""

    def __init__(self, broker_id, config=GroupConfig()):
        self.broker_id = broker_id
        self.config = config
        self.shards = {}  # offsets partition index -> _Shard
        # (partition index, reason) of the latest loads that failed, and how many ever did
        self.load_failures = collections.deque(maxlen=_LOAD_FAILURES_KEPT_MAX)
        self.load_failures_total = 0

    # ------------------------------------------------------------------ roles

    def on_role_changes(self, changes):
        """Take a `ReplicaManager.apply_image` result: a shard (loading) for each offsets
        partition this broker now leads or leads in a new epoch; none for those it stopped
        leading. Returns the indexes of the shards that start loading."""
        started = []
        for p in changes.leaders:
            if p.topic == OFFSETS_TOPIC:
                self.shards[p.index] = _Shard(p)
                started.append(p.index)
        for group in (changes.followers, changes.offline, changes.removed):
            for p in group:
                if p.topic == OFFSETS_TOPIC:
                    self.shards.pop(p.index, None)
        return started

    @property
    def loading(self):
        return any(s.state == LOADING for s in self.shards.values())

    def load_step(self, bytes_max):
        """Read up to `bytes_max` more of each loading shard's log. Returns whether any shard
        is still loading. A shard whose log does not read or decode is dropped (its groups
        get NOT_COORDINATOR) and its reason kept in `load_failures` (the latest ones;
        `load_failures_total` counts them all)."""
        for index, shard in list(self.shards.items()):
            if shard.state != LOADING:
                continue
            if not shard.leads():
                del self.shards[index]
                continue
            try:
                self._load_some(shard, bytes_max)
            except (KraftcoreError, ValueError) as exc:
                del self.shards[index]
                self.load_failures.append((index, f"{type(exc).__name__}: {exc}"))
                self.load_failures_total += 1
        return self.loading

    def _load_some(self, shard, bytes_max):
        log = shard.partition.log
        if shard.load_offset < log.log_start_offset:
            shard.load_offset = log.log_start_offset
        if shard.load_offset >= shard.load_end:
            shard.state = ACTIVE
            shard.catch_up()
            return
        read = log.read(shard.load_offset, bytes_max, committed=False)
        if not len(read.records) or read.next_offset <= shard.load_offset:
            shard.state = ACTIVE  # nothing more to read (the log ends before load_end)
            shard.catch_up()
            return
        for batch in read.batches():
            if batch.is_control:
                continue
            for record in batch.records:
                if record.offset < shard.load_offset:
                    continue
                shard.take(record.offset, decode_key(record.key), record.value)
                shard.records_loaded += 1
        shard.load_offset = read.next_offset
        shard.catch_up()
        if shard.load_offset >= shard.load_end:
            shard.state = ACTIVE

    # ------------------------------------------------------------------ lookups

    def partition_for(self, group):
        return partition_for(group, self.config.offsets_partitions)

    def shard_for(self, group):
        """The active shard that coordinates `group`, caught up with its high watermark;
        raises `GroupError` (INVALID_GROUP_ID, NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS)."""
        if not group:
            raise GroupError(_E.INVALID_GROUP_ID, "the group id is empty")
        index = self.partition_for(group)
        shard = self.shards.get(index)
        if shard is None or not shard.leads():
            raise GroupError(_E.NOT_COORDINATOR, (
                f"broker {self.broker_id} is not the coordinator of group {group!r} (it does "
                f"not lead {OFFSETS_TOPIC}-{index})"))
        if shard.state == LOADING:
            raise GroupError(_E.COORDINATOR_LOAD_IN_PROGRESS, (
                f"broker {self.broker_id} is loading {OFFSETS_TOPIC}-{index}"))
        shard.catch_up()
        return shard

    def committed(self, group):
        """{(topic, partition): OffsetAndMetadata} of `group` (raises like `shard_for`)."""
        return dict(self.shard_for(group).committed.get(group, {}))

    # ------------------------------------------------------------------ commits

    def validate_commit(self, group, generation, member_id, instance_id, version):
        """Raise `GroupError` unless an OffsetCommit (API `version`) with this generation,
        member id and group instance id may commit for `group` (Kafka's rules for a classic
        group with no members; this coordinator serves no members)."""
        shard = self.shard_for(group)
        if not shard.has_group(group):
            if generation < 0:
                return  # a simple group: created by its first commit
            if version >= 9:
                raise GroupError(_E.GROUP_ID_NOT_FOUND, (
                    f"group {group!r} does not exist, and generation {generation} is given"))
            raise GroupError(_E.ILLEGAL_GENERATION, (
                f"group {group!r} has no generation {generation}: it has no members"))
        if generation < 0:
            return  # an empty group takes commits from consumers that manage themselves
        raise GroupError(_E.UNKNOWN_MEMBER_ID, (
            f"group {group!r} has no members: member {member_id!r} (instance "
            f"{instance_id!r}, generation {generation}) is unknown; commit with generation "
            "-1 to commit without membership"))

    def metadata_error(self, metadata):
        """The error code for an OffsetCommit partition's metadata (None: acceptable)."""
        if metadata is not None and _utf16_units(metadata) > self.config.metadata_chars_max:
            return _E.OFFSET_METADATA_TOO_LARGE
        return None

    def commit(self, group, offsets, now_ms):
        """Append one batch committing `offsets` ([(topic, partition,
        OffsetAndMetadata)]) for `group` to its offsets partition (after `validate_commit`).
        Returns (partition, end offset): the commit is durable once the partition's high
        watermark reaches the end offset while it still leads in the same epoch
        (`is_committed`); it never will once `commit_failed`. Raises `GroupError` with the append's refusal as Kafka's
        coordinator maps it."""
        shard = self.shard_for(group)
        partition = shard.partition
        limit = partition.log.config.batch_bytes_max
        keys, values, size = [], [], BATCH_HEADER_BYTES
        for topic, index, value in offsets:
            key, encoded = offset_commit_record(group, topic, index, value)
            keys.append(key)
            values.append(encoded)
            size += len(key) + len(encoded) + _RECORD_OVERHEAD_BYTES_MAX
            if size > limit:  # refused before the batch is built
                raise GroupError(_E.UNKNOWN_SERVER_ERROR, (
                    f"the offsets of group {group!r} do not fit in one batch of "
                    f"{OFFSETS_TOPIC} (message.max.bytes {limit})"))
        data = codec.encode_batch(values, keys=keys, timestamp=now_ms)
        try:
            base, _ = partition.append_as_leader(data, -1, now_ms)
        except PartitionError as exc:
            code = _APPEND_ERRORS.get(exc.code, _E.UNKNOWN_SERVER_ERROR)
            raise GroupError(code, f"the offsets of group {group!r} were not written: "
                             f"{exc}") from None
        for i, (topic, index, value) in enumerate(offsets):
            shard.pending.append((base + i, group, (topic, index), value))
        shard.catch_up()
        return partition, base + len(offsets)

    def is_committed(self, partition, end_offset):
        """Whether a commit `commit` returned (partition, end offset) for is durable: the
        partition still leads in the shard's epoch and its high watermark reached it."""
        shard = self.shards.get(partition.index)
        return (shard is not None and shard.partition is partition and shard.leads()
                and partition.high_watermark >= end_offset)

    def commit_failed(self, partition):
        """Whether such a commit can no longer become durable here (leadership moved)."""
        shard = self.shards.get(partition.index)
        return shard is None or shard.partition is not partition or not shard.leads()

