"""`ReplicaManager`: the partitions a broker hosts, made leader or follower by its metadata
image (Kafka's `ReplicaManager` with its KRaft `applyDelta`), and the storage under
`log.dirs` they live in.

Storage (Kafka's layout): one `kraftcore.log.Log` directory `<topic>-<partition>` per hosted
partition in one of `log.dirs` (a new partition goes to the directory holding the fewest),
each with its segments, indexes and leader-epoch checkpoint; at each root the
recovery-point, replication-offset (high watermark) and log-start-offset checkpoints of all
its partitions, the clean-shutdown marker (`kraftcore.log.log_dir`; written every
`checkpoint_interval_ms` and when the manager closes) and `meta.properties` (written by
`kraftcore format`). A partition the image no longer gives this broker is closed; one whose
topic is gone is deleted.

What the manager answers (each call takes `now_ms`; no clock, socket or thread here):

* `apply_image(image, now_ms)`: roles from the image; returns a `RoleChanges`;
* `produce(topic, partition, data, acks)`: the leader's append (`Partition.append_as_leader`);
* `follower_fetch(replica_id, broker_epoch, [(partition, fetch offset, last fetched
  epoch)], now_ms)`: the leader's side of replication — follower states, then the high
  watermarks of every fetched partition in one `HighWatermarks` call;
* `isr_changes(now_ms, eligible)`: the AlterPartition work of every led partition (shrink
  after `replica.lag.time.max.ms`, expand when caught up), marked in flight;
* `fetch_targets()`: the follower partitions by leader broker, for the replica fetchers;
* `compacted_partitions()`: the partitions the log cleaner cleans, with their topic's
  cleaner settings and their producers' last offsets.

`on_change` callbacks (`watch`) hear every partition whose log end offset or high
watermark moved: delayed produces and long-poll fetches wait on them.
"""

import dataclasses
import os
from typing import NamedTuple

from kraftcore.broker.high_watermarks import HighWatermarks
from kraftcore.broker.partition import FOLLOWER, LEADER, OFFLINE, Partition, PartitionError
from kraftcore.errors import ConfigError, KraftcoreError
from kraftcore.log import Log, log_dir
from kraftcore.metadata import topic_configs
from kraftcore.metadata.image import CONFIG_TOPIC
from kraftcore.metadata.topic_configs import (LOG_APPEND_TIME, MESSAGE_TIMESTAMP_TYPE,
                                              MIN_INSYNC_REPLICAS)
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["ReplicaManager", "ReplicaConfig", "RoleChanges"]

_E = ErrorCode


@dataclasses.dataclass(frozen=True)
class ReplicaConfig:
    """The broker's replication settings, Kafka's names in the comments."""

    replica_lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    checkpoint_interval_ms: int = 5_000  # replica.high.watermark.checkpoint.interval.ms
    min_insync_replicas: int = 1  # min.insync.replicas (the cluster default)
    log_settings: tuple = ()  # (name, value) pairs of `kraftcore.log.LogConfig`
    # (name, value) pairs of `kraftcore.log.cleaner.CleanerConfig`: the broker's defaults
    cleaner_settings: tuple = ()

    def __post_init__(self):
        if self.replica_lag_time_max_ms <= 0:
            raise ConfigError("replica.lag.time.max.ms must be positive, got "
                              f"{self.replica_lag_time_max_ms}")
        if self.min_insync_replicas < 1:
            raise ConfigError(f"min.insync.replicas must be >= 1, got {self.min_insync_replicas}")


class RoleChanges(NamedTuple):
    """What an image changed: partitions this broker now leads, follows (with a new leader
    or epoch), no longer serves, and removed (closed or deleted); `pending`: partitions are
    left to open (see `apply_image`)."""

    leaders: list
    followers: list
    offline: list
    removed: list
    pending: bool = False


def _int_config(value, default):
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


class ReplicaManager:
    def __init__(self, broker_id, log_dirs, config=ReplicaConfig(), *, clock=None):
        if not log_dirs:
            raise ConfigError("a broker needs at least one log directory (log.dirs)")
        self.broker_id = broker_id
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        self.config = config
        self._clock = clock
        self.tracker = HighWatermarks()
        self.partitions = {}  # (topic id, partition) -> Partition
        self.by_name = {}  # (topic name, partition) -> Partition
        self._watchers = []
        self.image = None
        self._roots = {}
        self._checkpoint_ms = 0
        self._applied = None  # the image the last apply_image took
        self._pending_topics = set()  # topics with partitions still to open
        self._found = self._scan_dirs()
        # Totals since start, for the node's metrics: bytes of records answered to
        # consumers and to follower brokers; ISR shrinks and expands this broker asked for.
        self.bytes_out = 0
        self.replication_bytes_out = 0
        self.isr_shrinks = 0
        self.isr_expands = 0

    def count_bytes_out(self, nbytes, follower):
        if follower:
            self.replication_bytes_out += nbytes
        else:
            self.bytes_out += nbytes

    def under_replicated(self):
        """How many partitions this broker leads with an ISR smaller than the replicas."""
        return sum(1 for p in self.partitions.values()
                   if p.is_leader and len(p.isr) < len(p.replicas))

    # ------------------------------------------------------------------ storage

    def _scan_dirs(self):
        """{(topic, partition): path} of the partition directories found under log.dirs,
        and each root's checkpoints (read, then the clean-shutdown marker cleared: a crash
        from now on must not pass for a clean stop)."""
        found = {}
        for root in self.log_dirs:
            os.makedirs(root, exist_ok=True)
            for key, path in log_dir.partition_dirs(root).items():
                found.setdefault(key, path)
            state = log_dir.read_root(root)
            self._roots[root] = state
            log_dir.clear_clean_shutdown(root)
        return found

    def _path_for(self, topic, index):
        path = self._found.pop((topic, index), None)
        if path is not None:
            return path
        counts = {root: 0 for root in self.log_dirs}
        for p in self.partitions.values():
            root = os.path.dirname(p.log.path)
            if root in counts:
                counts[root] += 1
        root = min(self.log_dirs, key=lambda d: (counts[d], self.log_dirs.index(d)))
        return os.path.join(root, f"{topic}-{index}")

    def _open_log(self, topic, index):
        settings = dict(self.config.log_settings)
        if self._clock is not None:
            settings["clock"] = self._clock
        settings = topic_configs.log_settings(self._topic_values(topic), settings)
        path = self._path_for(topic, index)
        root = self._roots.get(os.path.dirname(path))
        offsets = None if root is None else root.offsets.get((topic, index))
        return Log.open(path, own_checkpoints=False, offsets=offsets, **settings)

    def checkpoint(self):
        """Write each log directory's offset checkpoints for all its partitions."""
        by_root = {root: {} for root in self.log_dirs}
        for p in self.partitions.values():
            root = os.path.dirname(p.log.path)
            if root in by_root and not p.log.closed:
                by_root[root][(p.topic, p.index)] = p.log
        for root, logs in by_root.items():
            log_dir.write_root(root, logs)

    def maybe_checkpoint(self, now_ms):
        """`checkpoint()` once `checkpoint_interval_ms` has passed since the last."""
        if now_ms - self._checkpoint_ms >= self.config.checkpoint_interval_ms:
            self._checkpoint_ms = now_ms
            self.checkpoint()

    # ------------------------------------------------------------------ image

    def _min_isr(self, image, topic):
        default = self.config.min_insync_replicas
        return _int_config(image.topic_config(topic, MIN_INSYNC_REPLICAS), default)

    def _topic_values(self, topic):
        image = self.image
        return {} if image is None else image.configs.get((CONFIG_TOPIC, topic), {})

    def apply_image(self, image, now_ms, opens_max=None):
        """Make this broker leader or follower of every partition the image gives it;
        close the ones it no longer hosts and delete those whose topic is gone.

        Only topics the image changed since the last call are visited (an image shares
        the `TopicImage` of every topic it did not change), all of them when the configs
        changed. At most `opens_max` new partition logs are opened per call (None: no
        limit): when more are due, `RoleChanges.pending` is true and the caller calls
        again with the same or a newer image — a topic of thousands of partitions is
        taken up over several turns instead of blocking the broker in one."""
        changes = RoleChanges([], [], [], [], False)
        me = self.broker_id
        previous = self._applied
        configs_changed = previous is None or image.configs is not previous.configs
        self.image = image  # new logs take their topic's configs from it
        opened = 0
        pending = set()
        for topic_id, topic in image.topics.items():
            if not configs_changed and topic_id not in self._pending_topics \
                    and previous.topics.get(topic_id) is topic:
                continue
            min_isr = self._min_isr(image, topic.name)
            values = image.configs.get((CONFIG_TOPIC, topic.name), {})
            append_time = values.get(MESSAGE_TIMESTAMP_TYPE) == LOG_APPEND_TIME
            compacted = topic_configs.compacted(values)
            for index, record in topic.partitions.items():
                key = (topic_id, index)
                partition = self.partitions.get(key)
                if me not in record.replicas:
                    if partition is not None:
                        self._remove(key, image, changes)
                    continue
                if partition is None:
                    if opens_max is not None and opened >= opens_max:
                        pending.add(topic_id)
                        continue
                    opened += 1
                    log = self._open_log(topic.name, index)
                    partition = Partition(topic.name, topic_id, index, log, me, self.tracker)
                    self.partitions[key] = partition
                    self.by_name[(topic.name, index)] = partition
                partition.log_append_time = append_time
                partition.compacted = compacted
                if compacted and not partition.log.compacted:
                    partition.log.mark_compacted()  # became compacted while open
                role = partition.apply(record, min_isr, now_ms)
                if role == LEADER:
                    changes.leaders.append(partition)
                elif role == FOLLOWER:
                    changes.followers.append(partition)
                elif role == OFFLINE:
                    changes.offline.append(partition)
        for key in [k for k in self.partitions
                    if k[0] not in image.topics or k[1] not in image.topics[k[0]].partitions]:
            self._remove(key, image, changes)
        self._applied = image
        self._pending_topics = pending
        for partition in changes.leaders:
            self._notify(partition)
        return changes._replace(pending=bool(pending))

    def _remove(self, key, image, changes):
        partition = self.partitions.pop(key)
        del self.by_name[(partition.topic, partition.index)]
        if key[0] in image.topics:
            partition.close_log()  # moved away: the data stays until it is reassigned
        else:
            partition.close()
            partition.log.delete()
        changes.removed.append(partition)

    def close(self):
        errors = []
        by_root = {root: {} for root in self.log_dirs}
        for partition in self.partitions.values():
            root = os.path.dirname(partition.log.path)
            by_root.setdefault(root, {})[(partition.topic, partition.index)] = partition.log
            try:
                partition.close_log()
            except KraftcoreError as exc:
                errors.append(exc)
        self.partitions.clear()
        if not errors:
            # every log is closed and durable: their checkpoints, then the marker that lets
            # the next start skip their recovery scans
            for root, logs in by_root.items():
                log_dir.write_root(root, logs)
                log_dir.mark_clean_shutdown(root)
        self.by_name.clear()
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------ lookups

    def get(self, topic, index):
        """The hosted partition named (topic name or id, index), or raise PartitionError:
        UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition,
        NOT_LEADER_OR_FOLLOWER when it is hosted elsewhere."""
        if isinstance(topic, str):
            partition = self.by_name.get((topic, index))
        else:
            partition = self.partitions.get((topic, index))
        if partition is not None:
            return partition
        image = self.image
        t = None if image is None else image.topic(topic)
        if t is None:
            code = _E.UNKNOWN_TOPIC_OR_PARTITION if isinstance(topic, str) else _E.UNKNOWN_TOPIC_ID
            raise PartitionError(code, f"topic {topic} does not exist")
        if index not in t.partitions:
            raise PartitionError(_E.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"topic {t.name} has no partition {index}")
        raise PartitionError(_E.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.broker_id} does not host {t.name}-{index}")

    # ------------------------------------------------------------------ watchers

    def watch(self, callback):
        """Call `callback(partition)` whenever a partition's log end offset or high
        watermark moves (until `unwatch`)."""
        self._watchers.append(callback)

    def unwatch(self, callback):
        try:
            self._watchers.remove(callback)
        except ValueError:
            pass

    def changed(self, partition):
        """Tell the watchers `partition` changed: for an append made outside `produce` (the
        group coordinator's), so a follower's waiting fetch is answered at once."""
        self._notify(partition)

    def _notify(self, partition):
        for callback in list(self._watchers):
            callback(partition)

    # ------------------------------------------------------------------ leader

    def produce(self, topic, index, data, acks, now_ms=None):
        """Append a producer's batches to the partition this broker leads. Returns the base
        offset (raises PartitionError)."""
        partition = self.get(topic, index)
        base, _ = partition.append_as_leader(data, acks, now_ms)
        self._notify(partition)
        return base

    def follower_fetch(self, replica_id, broker_epoch, fetches, now_ms):
        """A follower's fetch round: `fetches` is [(partition, fetch offset, last fetched
        epoch)] of partitions this broker leads. Returns {partition: diverging (epoch, end
        offset)} for the ones whose follower log diverges; the others' follower states and
        high watermarks are updated (their watchers told)."""
        diverging = {}
        slots, offsets, moved_parts = [], [], []
        for partition, fetch_offset, last_epoch in fetches:
            d = partition.divergence(last_epoch, fetch_offset)
            if d is not None:
                diverging[partition] = d
                continue
            partition.on_follower_fetch(replica_id, fetch_offset, broker_epoch, now_ms)
            slots.append(partition.slot)
            offsets.append(min(fetch_offset, partition.log.log_end_offset))
            moved_parts.append(partition)
        if slots:
            moved, hws = self.tracker.on_follower_fetch(replica_id, slots, offsets)
            if len(moved):
                by_slot = {p.slot: p for p in moved_parts}
                for slot, hw in zip(moved.tolist(), hws.tolist()):
                    partition = by_slot[slot]
                    if partition._take_hw(hw):
                        self._notify(partition)
        return diverging

    def isr_changes(self, now_ms, eligible):
        """[(partition, new ISR)] for every led partition whose ISR should change: shrunk
        first (followers lagging past replica.lag.time.max.ms), else expanded (caught-up
        followers that `eligible(broker_id, broker_epoch)` accepts). Each is marked in
        flight (`Partition.begin_isr_change`) until `end_isr_change`."""
        lag = self.config.replica_lag_time_max_ms
        out = []
        for partition in self.partitions.values():
            if partition.role != LEADER:
                continue
            isr = partition.isr_to_shrink(now_ms, lag)
            if isr is None:
                isr = partition.isr_to_expand(eligible)
            if isr is not None:
                partition.begin_isr_change(isr)
                out.append((partition, isr))
        return out

    # ------------------------------------------------------------------ follower

    def fetch_targets(self):
        """{leader broker id: [partition]} of the partitions this broker follows."""
        out = {}
        for partition in self.partitions.values():
            if partition.role == FOLLOWER and partition.leader_id >= 0:
                out.setdefault(partition.leader_id, []).append(partition)
        return out

    def compacted_partitions(self):
        """[(partition, CleanerConfig settings, producers' last offsets)] of the hosted
        partitions the log cleaner cleans: those whose topic is compacted now
        (cleanup.policy), log open."""
        out = []
        base = dict(self.config.cleaner_settings)
        for partition in self.partitions.values():
            log = partition.log
            if partition.compacted and log.compacted and not log.closed:
                out.append((partition,
                            topic_configs.cleaner_settings(self._topic_values(partition.topic),
                                                           base),
                            partition.producers.last_offsets()))
        return out

    def follower_append(self, partition, data, leader_high_watermark):
        """Take a leader's fetched batches into a follower partition."""
        before = partition.log.log_end_offset
        moved = partition.append_as_follower(data, leader_high_watermark)
        if moved or partition.log.log_end_offset != before:
            self._notify(partition)

    def follower_truncate(self, partition, epoch, end_offset):
        """Truncate a follower where its leader's log diverges (`DivergingEpoch`);
        returns (offset, records removed)."""
        offset, removed = partition.truncate_for_divergence(epoch, end_offset)
        if removed:
            self._notify(partition)
        return offset, removed
