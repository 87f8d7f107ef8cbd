"""`GroupCoordinator`: a broker's side of consumer groups — the groups whose offsets
partition (`__consumer_offsets`, `group_records.partition_for`) this broker leads, their
members (`kraftcore.broker.classic_group.ClassicGroup`, Kafka's classic protocol), their
committed offsets, and the records that make both durable.

One `_Shard` per offsets partition this broker leads, created when the metadata image makes
it leader (`on_role_changes`) and dropped when it stops leading (every request waiting in
one of its groups is then answered NOT_COORDINATOR). A shard is LOADING until `load_step`
has read its log from the log start to the log end offset, then ACTIVE: the last group
metadata record of each group gives its generation, protocol, leader and members (a group
with members is Stable again, its members' session timeouts counted from the load), the
offset records its offsets. The offsets it answers with are the *committed* ones: a record
counts once the partition's high watermark has passed it (records above the high watermark
wait in `pending`, in log order, and move into `committed` when it passes them; the last
record of a key wins, a tombstone deletes the key). So an OffsetFetch never sees a commit
that a new leader could lose, and a commit is answered only when its records are committed
(acks=all, the caller waits for the high watermark; `commit` returns the offset to wait
for). A group's assignment is stored the same way: the SyncGroup answers wait until the
group's record is committed (`on_partition_change` sees the high watermark pass it).

Groups without members (Kafka's "simple" groups: consumers that assign their partitions
themselves and commit with generation -1) exist by their offsets alone; a group with
members takes commits only from its members, in its generation.

Errors are Kafka's (`GroupError.code`): NOT_COORDINATOR when this broker does not lead the
group's offsets partition (or led it in an older epoch), COORDINATOR_LOAD_IN_PROGRESS while
it loads, INVALID_GROUP_ID for the empty group id, INVALID_SESSION_TIMEOUT outside
`group.min.session.timeout.ms` .. `group.max.session.timeout.ms`, ILLEGAL_GENERATION /
GROUP_ID_NOT_FOUND (v9+) for a generation given for a group that does not exist,
UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID / ILLEGAL_GENERATION / REBALANCE_IN_PROGRESS for a
commit that is not from a current member, NON_EMPTY_GROUP for deleting a group with
members, GROUP_SUBSCRIBED_TO_TOPIC for deleting the offsets of a topic its members consume,
and the append's refusals mapped as Kafka's coordinator maps them (NOT_ENOUGH_REPLICAS, a
timeout -> COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER, a storage error ->
NOT_COORDINATOR; MESSAGE_TOO_LARGE -> UNKNOWN_SERVER_ERROR). Metadata longer than
`metadata_chars_max` UTF-16 code units (`offset.metadata.max.bytes`, which Kafka counts in
Java chars) is OFFSET_METADATA_TOO_LARGE for that partition alone.

No clock, socket or thread here: time is the `now_ms` the caller passes (`tick` acts on the
deadlines that passed), randomness (member ids) the `rng` it is given; the logs are the
partitions' (`kraftcore.broker.partition.Partition`).
"""

import collections
import dataclasses
import heapq
import random
from typing import NamedTuple

from kraftcore import codec
from kraftcore.broker.classic_group import (DEAD, EMPTY, ClassicGroup, GroupRuleError,
                                            JoinResult, Member, STABLE, SyncResult)
from kraftcore.broker.group_records import (OFFSETS_TOPIC, decode_group_value, decode_key,
                                            decode_offset_value, group_metadata_record,
                                            group_tombstone, offset_commit_record,
                                            offset_tombstone, partition_for)
from kraftcore.broker.partition import PartitionError
from kraftcore.errors import ConfigError, KraftcoreError
from kraftcore.layout import BATCH_HEADER_BYTES
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["GroupCoordinator", "GroupConfig", "GroupError", "JoinRequest", "LOADING",
           "ACTIVE", "OFFSETS_TOPIC", "offsets_topic_configs", "offsets_topic_request",
           "GroupDescription"]

_E = ErrorCode
LOADING, ACTIVE = "loading", "active"
# The most a record adds to a batch besides its key and value (length, attributes,
# timestamp and offset deltas, key and value lengths, header count, as varints).
_RECORD_OVERHEAD_BYTES_MAX = 5 + 1 + 10 + 5 + 5 + 5 + 5
_LOAD_FAILURES_KEPT_MAX = 100
_TRANSITIONS_KEPT_MAX = 1000
# Group ids whose offsets partition is remembered (ids up to _PARTITION_CACHED_CHARS_MAX
# chars): Java's String.hashCode is a Python loop per char, and every group request needs it.
_PARTITIONS_CACHED_MAX = 4096
_PARTITION_CACHED_CHARS_MAX = 255

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
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    session_timeout_min_ms: int = 6000  # group.min.session.timeout.ms
    session_timeout_max_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_size_max: int = 2**31 - 1  # group.max.size

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
        if not 0 <= self.session_timeout_min_ms <= self.session_timeout_max_ms:
            raise ConfigError(
                "group.min.session.timeout.ms must be >= 0 and <= "
                f"group.max.session.timeout.ms, got {self.session_timeout_min_ms} and "
                f"{self.session_timeout_max_ms}")
        if self.initial_rebalance_delay_ms < 0:
            raise ConfigError("group.initial.rebalance.delay.ms must be >= 0, got "
                              f"{self.initial_rebalance_delay_ms}")
        if self.group_size_max < 1:
            raise ConfigError(f"group.max.size must be >= 1, got {self.group_size_max}")
        if self.offsets_retention_ms < 1:
            raise ConfigError("offsets.retention.minutes must be >= 1, got "
                              f"{self.offsets_retention_ms / 60_000:g}")

    def replication_factor(self, live_brokers):
        """The offsets topic's replication factor when it is created with `live_brokers`
        unfenced: the setting, or fewer when fewer brokers are up (at least 1)."""
        return max(1, min(self.offsets_replication_factor, live_brokers))


class GroupError(KraftcoreError):
    """A group request refused as a whole; `code` is the Kafka error code of its answer."""

    def __init__(self, code, message):
        self.code = int(code)
        super().__init__(message)


class JoinRequest(NamedTuple):
    """A JoinGroup as the coordinator takes it (`protocols` [(name, metadata bytes)];
    `require_known_member_id`: v4+, a new member is answered MEMBER_ID_REQUIRED first)."""

    group_id: str
    member_id: str
    instance_id: object
    client_id: str
    client_host: str
    session_ms: int
    rebalance_ms: int
    protocol_type: str
    protocols: tuple
    require_known_member_id: bool = True


class GroupDescription(NamedTuple):
    """A DescribeGroups answer for one group: `members` [(member id, instance id, client
    id, client host, metadata, assignment)] (metadata and assignment only when Stable)."""

    error: int
    state: str
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple = ()
    message: object = None


def _utf16_units(text):
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


class _Shard:
    """The groups of one offsets partition this broker leads."""

    __slots__ = ("partition", "epoch", "state", "load_offset", "load_end", "committed",
                 "pending", "records_loaded", "groups", "writes", "staged")

    def __init__(self, partition):
        self.partition = partition
        self.epoch = partition.leader_epoch
        self.state = LOADING
        self.load_offset = partition.log.log_start_offset
        self.load_end = partition.log.log_end_offset
        self.committed = {}  # group -> {(topic, partition): OffsetAndMetadata}
        self.pending = collections.deque()  # (offset, group, (topic, p), value or None)
        self.records_loaded = 0
        self.groups = {}  # group id -> ClassicGroup (groups that ever had members)
        # (end offset, deadline, done, group or None): appends waiting for the high watermark
        self.writes = collections.deque()
        self.staged = []  # (group id, offsets, keys, values, done): commits for the next batch

    @property
    def index(self):
        return self.partition.index

    def leads(self):
        p = self.partition
        return p.is_leader and p.leader_epoch == self.epoch

    def take_offset(self, offset, key, value):
        """An offset record of this partition's log at `offset`."""
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

    def has_offsets(self, group):
        return group in self.committed or any(g == group for _, g, _, _ in self.pending)

    def offset_keys(self, group):
        """The (topic, partition) keys `group` has an offset for, pending ones included."""
        keys = set(self.committed.get(group, ()))
        for _, g, tp, entry in self.pending:
            if g == group:
                if entry is None:
                    keys.discard(tp)
                else:
                    keys.add(tp)
        return keys


class GroupCoordinator:
    """The groups this broker coordinates (module docstring). `config` is a `GroupConfig`;
    `rng` (a `random.Random`) makes member ids."""

    def __init__(self, broker_id, config=GroupConfig(), rng=None, kick=None, appended=None):
        self.broker_id = broker_id
        self.config = config
        self.rng = rng if rng is not None else random.Random(broker_id)
        self.kick = kick
        self.appended = appended
        self._staged_shards = []
        self.shards = {}  # offsets partition index -> _Shard
        # (partition index, reason) of the latest loads that failed, and how many ever did
        self.load_failures = collections.deque(maxlen=_LOAD_FAILURES_KEPT_MAX)
        self.load_failures_total = 0
        self._timers = []  # heap of (deadline, shard index, group id)
        self._timed = {}  # (shard index, group id) -> the earliest deadline in the heap
        # (now_ms, group id, state before, state after, generation) of the latest group
        # transitions, and how many there ever were
        self.transitions = collections.deque(maxlen=_TRANSITIONS_KEPT_MAX)
        self.transitions_total = 0
        self._partition_of = {}  # group id -> offsets partition index (a bounded cache)

    # ------------------------------------------------------------------ roles

    def on_role_changes(self, changes):
        """Take a `ReplicaManager.apply_image` result: a shard (loading) for each offsets
        partition this broker now leads or leads in a new epoch; none for those it stopped
        leading. Returns the indexes of the shards that start loading."""
        started = []
        for p in changes.leaders:
            if p.topic == OFFSETS_TOPIC:
                self._drop(p.index)
                self.shards[p.index] = _Shard(p)
                started.append(p.index)
        for group in (changes.followers, changes.offline, changes.removed):
            for p in group:
                if p.topic == OFFSETS_TOPIC:
                    self._drop(p.index)
        return started

    def _drop(self, index):
        shard = self.shards.pop(index, None)
        if shard is None:
            return
        for group in shard.groups.values():
            group.close(_E.NOT_COORDINATOR)
        while shard.writes:
            _, _, done, _ = shard.writes.popleft()
            done(_E.NOT_COORDINATOR, 0)
        staged, shard.staged = shard.staged, []
        for *_, done, _ in staged:
            done(_E.NOT_COORDINATOR, 0)

    @property
    def loading(self):
        return any(s.state == LOADING for s in self.shards.values())

    def load_step(self, bytes_max, now_ms=0):
        """Read up to `bytes_max` more of each loading shard's log. Returns whether any shard
        is still loading. A shard whose log does not read or decode is dropped (its groups
        get NOT_COORDINATOR) and its reason kept in `load_failures` (the latest ones;
        `load_failures_total` counts them all)."""
        for index, shard in list(self.shards.items()):
            if shard.state != LOADING:
                continue
            if not shard.leads():
                self._drop(index)
                continue
            try:
                self._load_some(shard, bytes_max, now_ms)
            except (KraftcoreError, ValueError) as exc:
                self._drop(index)
                self.load_failures.append((index, f"{type(exc).__name__}: {exc}"))
                self.load_failures_total += 1
        return self.loading

    def _load_some(self, shard, bytes_max, now_ms):
        log = shard.partition.log
        if shard.load_offset < log.log_start_offset:
            shard.load_offset = log.log_start_offset
        if shard.load_offset >= shard.load_end:
            return self._loaded(shard, now_ms)
        read = log.read(shard.load_offset, bytes_max, committed=False)
        if not len(read.records) or read.next_offset <= shard.load_offset:
            return self._loaded(shard, now_ms)  # nothing more (the log ends before load_end)
        for batch in read.batches():
            if batch.is_control:
                continue
            for record in batch.records:
                if record.offset < shard.load_offset:
                    continue
                key = decode_key(record.key)
                if key[0] == "offset":
                    shard.take_offset(record.offset, key, record.value)
                elif key[0] == "group":
                    self._load_group(shard, key[1], record.value, now_ms)
                shard.records_loaded += 1
        shard.load_offset = read.next_offset
        shard.catch_up()
        if shard.load_offset >= shard.load_end:
            self._loaded(shard, now_ms)

    def _loaded(self, shard, now_ms):
        shard.state = ACTIVE
        shard.catch_up()
        for group in shard.groups.values():
            for member in group.members.values():
                member.deadline_ms = now_ms + member.session_ms
            self._schedule(shard, group)

    def _load_group(self, shard, group_id, data, now_ms):
        if data is None:
            shard.groups.pop(group_id, None)
            return
        value = decode_group_value(data)
        since = value.current_state_timestamp
        group = ClassicGroup(group_id, self.config, self._store, self.rng,
                             since if since >= 0 else now_ms, self._observe)
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        for mv in value.members:
            member = Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host,
                            mv.session_timeout,
                            mv.rebalance_timeout if mv.rebalance_timeout >= 0
                            else mv.session_timeout,
                            group.protocol_type, [(value.protocol or "", bytes(mv.subscription))])
            member.assignment = bytes(mv.assignment)
            member.synced_generation = value.generation
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static[member.instance_id] = member.member_id
        if group.members:
            group.state = STABLE
        shard.groups[group_id] = group

    # ------------------------------------------------------------------ lookups

    def partition_for(self, group):
        index = self._partition_of.get(group)
        if index is None:
            index = partition_for(group, self.config.offsets_partitions)
            if len(group) <= _PARTITION_CACHED_CHARS_MAX:
                if len(self._partition_of) >= _PARTITIONS_CACHED_MAX:
                    self._partition_of.clear()
                self._partition_of[group] = index
        return index

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

    def pending_offsets(self, group):
        """(partition, end offset, {(topic, partition)}) of `group`'s offset records that
        are written but not yet committed (above the high watermark), or None when it has
        none (raises like `shard_for`)."""
        shard = self.shard_for(group)
        end, keys = None, set()
        for offset, g, tp, _ in shard.pending:
            if g == group:
                end = offset + 1
                keys.add(tp)
        return None if end is None else (shard.partition, end, keys)

    def committed(self, group):
        """{(topic, partition): OffsetAndMetadata} of `group` (raises like `shard_for`)."""
        return dict(self.shard_for(group).committed.get(group, {}))

    def _group(self, shard, group_id):
        group = shard.groups.get(group_id)
        return group if group is not None and group.state != DEAD else None

    # ------------------------------------------------------------------ membership

    def join(self, req, now_ms, respond):
        """A JoinGroup (`req` a `JoinRequest`): `respond(JoinResult)` is called once, now
        or when the group's rebalance completes."""
        self._run_due(now_ms)
        try:
            shard = self.shard_for(req.group_id)
        except GroupError as exc:
            return respond(JoinResult(exc.code, member_id=req.member_id))
        if not (self.config.session_timeout_min_ms <= req.session_ms
                <= self.config.session_timeout_max_ms):
            return respond(JoinResult(_E.INVALID_SESSION_TIMEOUT, member_id=req.member_id))
        group = self._group(shard, req.group_id)
        if group is None:
            if req.member_id:
                return respond(JoinResult(_E.UNKNOWN_MEMBER_ID, member_id=req.member_id))
            group = ClassicGroup(req.group_id, self.config, self._store, self.rng, now_ms,
                                 self._observe)
            shard.groups[req.group_id] = group
        group.join(req, now_ms, respond)
        self._settle(shard, group)

    def sync(self, group_id, generation, member_id, instance_id, protocol_type,
             protocol_name, assignments, now_ms, respond):
        """A SyncGroup: `respond(SyncResult)` is called once, now or when the leader's
        assignment is stored."""
        self._run_due(now_ms)
        try:
            shard = self.shard_for(group_id)
        except GroupError as exc:
            return respond(SyncResult(exc.code))
        group = self._group(shard, group_id)
        if group is None:
            return respond(SyncResult(_E.UNKNOWN_MEMBER_ID))
        group.sync(generation, member_id, instance_id, protocol_type, protocol_name,
                   assignments, now_ms, respond)
        self._schedule(shard, group)

    def heartbeat(self, group_id, generation, member_id, instance_id, now_ms):
        """A Heartbeat's error code."""
        self._run_due(now_ms)
        try:
            shard = self.shard_for(group_id)
        except GroupError as exc:
            return exc.code
        group = self._group(shard, group_id)
        if group is None:
            return _E.UNKNOWN_MEMBER_ID
        try:
            return group.heartbeat(generation, member_id, instance_id, now_ms)
        except GroupRuleError as exc:
            return exc.code
        finally:
            self._schedule(shard, group)

    def leave(self, group_id, members, now_ms):
        """A LeaveGroup of `members` [(member id, instance id)]: (group error code,
        [member error codes])."""
        self._run_due(now_ms)
        try:
            shard = self.shard_for(group_id)
        except GroupError as exc:
            return exc.code, []
        group = self._group(shard, group_id)
        if group is None:
            return _E.UNKNOWN_MEMBER_ID, [_E.UNKNOWN_MEMBER_ID] * len(members)
        codes = [group.leave(member_id, instance_id, now_ms)
                 for member_id, instance_id in members]
        self._settle(shard, group)
        return 0, codes

    def _observe(self, group, before, now_ms):
        self.transitions.append((now_ms, group.group_id, before, group.state,
                                 group.generation))
        self.transitions_total += 1

    # ------------------------------------------------------------------ timers

    def _schedule(self, shard, group):
        deadline = group.next_deadline_ms()
        if deadline is None:
            return
        key = (shard.index, group.group_id)
        known = self._timed.get(key)
        if known is None or deadline < known:
            self._timed[key] = deadline
            heapq.heappush(self._timers, (deadline, shard.index, group.group_id))

    def _run_due(self, now_ms):
        """Act on the deadlines that passed before a membership request is handled, as
        exact timers would have (`tick` runs every few tens of ms): a member whose heartbeat
        comes just after another member's session ended learns of the rebalance now, not
        one heartbeat interval later."""
        if self._timers and self._timers[0][0] <= now_ms:
            self.tick(now_ms)

    def tick(self, now_ms):
        """Act on the deadlines that passed by `now_ms`: session timeouts, rebalance and
        sync timeouts, stores not committed within `offsets.commit.timeout.ms`."""
        timers = self._timers
        while timers and timers[0][0] <= now_ms:
            deadline, index, group_id = heapq.heappop(timers)
            key = (index, group_id)
            if self._timed.get(key) == deadline:
                del self._timed[key]
            shard = self.shards.get(index)
            group = shard.groups.get(group_id) if shard is not None else None
            if group is None or group.state == DEAD or shard.state != ACTIVE:
                continue
            group.tick(now_ms)
            self._settle(shard, group)
        for shard in list(self.shards.values()):
            writes = shard.writes
            while writes and writes[0][1] <= now_ms:
                _, _, done, group = writes.popleft()
                done(_E.COORDINATOR_NOT_AVAILABLE, now_ms)
                if group is not None:
                    self._settle(shard, group)

    def _settle(self, shard, group):
        """After a change of `group`: its next deadline is timed; a group that never had a
        member (every join refused, or its new members never came back) is forgotten."""
        if (group.state == EMPTY and group.generation == 0 and not group.members
                and not group.pending):
            if shard.groups.get(group.group_id) is group:
                del shard.groups[group.group_id]
            return
        self._schedule(shard, group)

    def on_partition_change(self, partition, now_ms):
        """A partition's high watermark may have moved: answer the stores it committed."""
        if partition.topic != OFFSETS_TOPIC:
            return
        shard = self.shards.get(partition.index)
        if shard is None or shard.partition is not partition:
            return
        hw = partition.high_watermark
        writes = shard.writes
        shard.catch_up()
        while writes and writes[0][0] <= hw:
            _, _, done, group = writes.popleft()
            done(0, now_ms)
            if group is not None:
                self._schedule(shard, group)

    def _store(self, group, done, now_ms):
        """Append `group`'s record to its offsets partition; `done(code, now_ms)` once it is
        committed (0) or refused."""
        shard = self.shards.get(self.partition_for(group.group_id))
        if shard is None or not shard.leads():
            return done(_E.NOT_COORDINATOR, now_ms)
        key, value = group_metadata_record(group, now_ms)
        try:
            end = self._append(shard, [key], [value], now_ms)
        except GroupError as exc:
            return done(exc.code, now_ms)
        shard.writes.append((end, now_ms + self.config.commit_timeout_ms, done, group))
        self._appended(shard, now_ms)

    def _append(self, shard, keys, values, now_ms):
        """Append one batch of records to `shard`'s partition: the end offset, or raise
        `GroupError` with the append's refusal as Kafka's coordinator maps it."""
        partition = shard.partition
        limit = partition.log.config.batch_bytes_max
        size = BATCH_HEADER_BYTES + sum(
            len(k) + (len(v) if v is not None else 0) + _RECORD_OVERHEAD_BYTES_MAX
            for k, v in zip(keys, values))
        if size > limit:  # refused before the batch is built
            raise GroupError(_E.UNKNOWN_SERVER_ERROR, (
                f"{len(keys)} records of {size} bytes do not fit in one batch of "
                f"{OFFSETS_TOPIC} (message.max.bytes {limit})"))
        data = codec.encode_batch(values, keys=keys, timestamp=now_ms)
        try:
            base, _ = partition.append_as_leader(data, -1, now_ms)
        except PartitionError as exc:
            code = _APPEND_ERRORS.get(exc.code, _E.UNKNOWN_SERVER_ERROR)
            raise GroupError(code, f"{OFFSETS_TOPIC}-{partition.index} refused the "
                             f"records: {exc}") from None
        return base + len(keys)

    # ------------------------------------------------------------------ views

    def describe(self, group_id):
        """A `GroupDescription` of `group_id`; a group that does not exist is Dead."""
        try:
            shard = self.shard_for(group_id)
        except GroupError as exc:
            return GroupDescription(exc.code, DEAD, message=str(exc))
        group = self._group(shard, group_id)
        if group is None:
            if shard.has_offsets(group_id):
                return GroupDescription(0, EMPTY)
            return GroupDescription(_E.GROUP_ID_NOT_FOUND, DEAD,
                                    message=f"group {group_id!r} does not exist")
        stable = group.state == STABLE
        members = tuple(
            (m.member_id, m.instance_id, m.client_id, m.client_host,
             m.metadata(group.protocol_name) if stable else b"",
             m.assignment if stable else b"") for m in group.members.values())
        return GroupDescription(0, group.state, group.protocol_type or "",
                                (group.protocol_name or "") if stable else "", members)

    def list_groups(self):
        """(error code, [(group id, protocol type, state)]) of every group this broker
        coordinates; COORDINATOR_LOAD_IN_PROGRESS while a shard loads (with the groups of
        the others)."""
        out = []
        for shard in self.shards.values():
            if shard.state != ACTIVE or not shard.leads():
                continue
            shard.catch_up()
            names = set()
            for group_id, group in shard.groups.items():
                if group.state != DEAD:
                    out.append((group_id, group.protocol_type or "", group.state))
                    names.add(group_id)
            for group_id in shard.committed:
                if group_id not in names:
                    out.append((group_id, "", EMPTY))
        out.sort()
        return (_E.COORDINATOR_LOAD_IN_PROGRESS if self.loading else 0), out

    # ------------------------------------------------------------------ commits

    def validate_commit(self, group_id, generation, member_id, instance_id, version,
                        now_ms=0):
        """Raise `GroupError` unless an OffsetCommit (API `version`) with this generation,
        member id and group instance id may commit for `group_id` (Kafka's rules for a
        classic group). A member's commit counts as its heartbeat."""
        shard = self.shard_for(group_id)
        group = self._group(shard, group_id)
        if group is None and not shard.has_offsets(group_id):
            if generation < 0:
                return  # a simple group: created by its first commit
            if version >= 9:
                raise GroupError(_E.GROUP_ID_NOT_FOUND, (
                    f"group {group_id!r} does not exist, and generation {generation} is given"))
            raise GroupError(_E.ILLEGAL_GENERATION, (
                f"group {group_id!r} has no generation {generation}: it has no members"))
        if generation < 0 and (group is None or group.state == EMPTY):
            return  # the admin client, or a consumer without membership: an empty group
        members = group.members if group is not None else {}
        if generation >= 0 or member_id or instance_id is not None:
            if group is None or not members:
                raise GroupError(_E.UNKNOWN_MEMBER_ID, (
                    f"group {group_id!r} has no members: member {member_id!r} (instance "
                    f"{instance_id!r}, generation {generation}) is unknown; commit with "
                    "generation -1 to commit without membership"))
            try:
                group._check_member(member_id, instance_id)
            except GroupRuleError as exc:
                raise GroupError(exc.code, str(exc)) from None
            if generation != group.generation:
                raise GroupError(_E.ILLEGAL_GENERATION, (
                    f"group {group_id!r} is in generation {group.generation}, not "
                    f"{generation}"))
        elif members:
            raise GroupError(_E.UNKNOWN_MEMBER_ID, (
                f"group {group_id!r} has members: a commit without a member id and "
                "generation is refused"))
        if group is not None and group.state == "CompletingRebalance":
            raise GroupError(_E.REBALANCE_IN_PROGRESS, (
                f"group {group_id!r} is completing a rebalance"))
        if group is not None and member_id:
            group.touch(member_id, now_ms)

    def metadata_error(self, metadata):
        """The error code for an OffsetCommit partition's metadata (None: acceptable)."""
        limit = self.config.metadata_chars_max
        # a code point is 1 or 2 UTF-16 units: text of up to limit / 2 code points fits
        # without counting (most commits' metadata is empty)
        if metadata is not None and 2 * len(metadata) > limit and \
                _utf16_units(metadata) > limit:
            return _E.OFFSET_METADATA_TOO_LARGE
        return None

    def commit(self, group, offsets, now_ms, done):
        """Commit `offsets` ([(topic, partition, OffsetAndMetadata)]) for `group` (after
        `validate_commit`): `done(code, now_ms)` is called once, with 0 when the records are
        durable (the offsets partition's high watermark passed them while it led in the
        same epoch), else with the error as Kafka's coordinator maps it (NOT_COORDINATOR
        when leadership moved, COORDINATOR_NOT_AVAILABLE when the ISR did not take them
        within `offsets.commit.timeout.ms`, the append's refusal). The commits of one
        offsets partition are gathered and appended as one batch by `flush`, which `kick()`
        asks the caller to run soon (without a `kick`, at once). Raises `GroupError` like
        `shard_for`, or when the records could never fit in a batch."""
        shard = self.shard_for(group)
        keys, values = [], []
        size = BATCH_HEADER_BYTES
        for topic, index, value in offsets:
            key, encoded = offset_commit_record(group, topic, index, value)
            keys.append(key)
            values.append(encoded)
            size += len(key) + len(encoded) + _RECORD_OVERHEAD_BYTES_MAX
        limit = shard.partition.log.config.batch_bytes_max
        if size > limit:
            raise GroupError(_E.UNKNOWN_SERVER_ERROR, (
                f"the offsets of group {group!r} do not fit in one batch of "
                f"{OFFSETS_TOPIC} ({size} bytes, message.max.bytes {limit})"))
        if not shard.staged:
            self._staged_shards.append(shard)
        shard.staged.append((group, offsets, keys, values, done, size))
        if self.kick is None:
            self.flush(now_ms)
        elif len(self._staged_shards) == 1 and len(shard.staged) == 1:
            self.kick()

    def flush(self, now_ms):
        """Append the gathered commits: one batch per offsets partition (more when they
        exceed a batch), each commit answered when its batch is durable or refused."""
        shards, self._staged_shards = self._staged_shards, []
        for shard in shards:
            staged, shard.staged = shard.staged, []
            if self.shards.get(shard.index) is not shard or not shard.leads():
                for *_, done, _ in staged:
                    done(_E.NOT_COORDINATOR, now_ms)
                continue
            limit = shard.partition.log.config.batch_bytes_max
            chunk, size = [], BATCH_HEADER_BYTES
            for entry in staged:
                if chunk and size + entry[5] - BATCH_HEADER_BYTES > limit:
                    self._append_commits(shard, chunk, now_ms)
                    chunk, size = [], BATCH_HEADER_BYTES
                chunk.append(entry)
                size += entry[5] - BATCH_HEADER_BYTES
            self._append_commits(shard, chunk, now_ms)
            self._appended(shard, now_ms)

    def _append_commits(self, shard, chunk, now_ms):
        keys = [k for entry in chunk for k in entry[2]]
        values = [v for entry in chunk for v in entry[3]]
        try:
            end = self._append(shard, keys, values, now_ms)
        except GroupError as exc:
            for *_, done, _ in chunk:
                done(exc.code, now_ms)
            return
        offset = end - len(keys)
        pending = shard.pending
        for group, offsets, *_ in chunk:
            for topic, index, value in offsets:
                pending.append((offset, group, (topic, index), value))
                offset += 1
        dones = [entry[4] for entry in chunk]

        def done_all(code, at_ms):
            for done in dones:
                done(code, at_ms)

        shard.writes.append((end, now_ms + self.config.commit_timeout_ms, done_all, None))

    def _appended(self, shard, now_ms):
        """After appends to `shard`'s partition: the caller's `appended(partition)` (the
        broker wakes the followers' fetches), and the writes its high watermark passed
        already (a partition without followers)."""
        if self.appended is not None:
            self.appended(shard.partition)
        if shard.writes and shard.partition.high_watermark >= shard.writes[0][0]:
            self.on_partition_change(shard.partition, now_ms)

    def _write_offsets(self, shard, group, offsets, keys, values, now_ms):
        try:
            end = self._append(shard, keys, values, now_ms)
        except GroupError as exc:
            raise GroupError(exc.code, f"the offsets of group {group!r} were not written: "
                             f"{exc}") from None
        base = end - len(keys)  # the offsets' records first, then any others
        for i, (topic, index, value) in enumerate(offsets):
            shard.pending.append((base + i, group, (topic, index), value))
        shard.catch_up()
        if self.appended is not None:
            self.appended(shard.partition)
        return end

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

    # ------------------------------------------------------------------ deletes

    def delete_group(self, group_id, now_ms):
        """Delete an empty group and its offsets (tombstones): (partition, end offset) to
        wait for, as `commit`. Raises `GroupError`: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP,
        or like `shard_for`."""
        shard = self.shard_for(group_id)
        group = self._group(shard, group_id)
        if group is None and not shard.has_offsets(group_id):
            raise GroupError(_E.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        if group is not None and group.members:
            raise GroupError(_E.NON_EMPTY_GROUP, (
                f"group {group_id!r} has {len(group.members)} members"))
        offsets = [(t, p, None) for t, p in sorted(shard.offset_keys(group_id))]
        keys = [offset_tombstone(group_id, t, p) for t, p, _ in offsets]
        keys.append(group_tombstone(group_id))
        end = self._write_offsets(shard, group_id, offsets, keys, [None] * len(keys), now_ms)
        if group is not None:
            group.close(_E.COORDINATOR_NOT_AVAILABLE)
        shard.groups.pop(group_id, None)
        return shard.partition, end

    def expire_offsets(self, now_ms):
        """Delete the offsets that expired by `now_ms` (Kafka's offsets retention, KIP-211):
        those of a group without members once `offsets.retention.minutes` passed since the
        group became empty (for a group that never had members: since the offset's commit),
        and any offset whose own expiry time (OffsetCommit v2-4's retention) passed. A group
        left empty without offsets is deleted. Tombstones are written like a deletion's;
        returns the (group, topic, partition) keys expired."""
        retention = self.config.offsets_retention_ms
        expired_keys = []
        for shard in list(self.shards.values()):
            if shard.state != ACTIVE or not shard.leads():
                continue
            shard.catch_up()
            waiting = {(g, tp) for _, g, tp, _ in shard.pending}
            for group_id, offsets in list(shard.committed.items()):
                group = self._group(shard, group_id)
                if group is not None and group.members:
                    continue
                empty_since = (group.state_since_ms
                               if group is not None and group.state == EMPTY else None)
                expired = sorted(
                    tp for tp, v in offsets.items() if (group_id, tp) not in waiting and (
                        now_ms >= v.expire_timestamp_ms if v.expire_timestamp_ms != -1
                        else now_ms - (empty_since if empty_since is not None
                                       else v.commit_timestamp_ms) >= retention))
                if not expired:
                    continue
                keys = [offset_tombstone(group_id, t, p) for t, p in expired]
                remove_group = (group is not None and len(expired) == len(offsets)
                                and not any(g == group_id for g, _ in waiting))
                if remove_group:
                    keys.append(group_tombstone(group_id))
                try:
                    self._write_offsets(shard, group_id, [(t, p, None) for t, p in expired],
                                        keys, [None] * len(keys), now_ms)
                except GroupError:
                    continue  # the next check tries again
                if remove_group:
                    group.close(_E.COORDINATOR_NOT_AVAILABLE)
                    shard.groups.pop(group_id, None)
                expired_keys.extend((group_id, t, p) for t, p in expired)
        return expired_keys

    def delete_offsets(self, group_id, partitions, now_ms):
        """OffsetDelete: {(topic, partition): error code} for `partitions`, and (partition,
        end offset) to wait for or None. Raises `GroupError` (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP for a group of another protocol type with members, or like
        `shard_for`). The offsets of topics the members subscribe to are refused
        (GROUP_SUBSCRIBED_TO_TOPIC)."""
        shard = self.shard_for(group_id)
        group = self._group(shard, group_id)
        if group is None and not shard.has_offsets(group_id):
            raise GroupError(_E.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        subscribed = set()
        if group is not None and group.members:
            if group.protocol_type != "consumer":
                raise GroupError(_E.NON_EMPTY_GROUP, (
                    f"group {group_id!r} has members of protocol type "
                    f"{group.protocol_type!r}"))
            subscribed = group.subscribed_topics()
        have = shard.offset_keys(group_id)
        codes, deletes = {}, []
        for tp in partitions:
            if subscribed is None or tp[0] in subscribed:
                codes[tp] = _E.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            codes[tp] = 0
            if tp in have:
                deletes.append(tp)
        if not deletes:
            return codes, None
        offsets = [(t, p, None) for t, p in deletes]
        keys = [offset_tombstone(group_id, t, p) for t, p in deletes]
        end = self._write_offsets(shard, group_id, offsets, keys, [None] * len(keys), now_ms)
        return codes, (shard.partition, end)
