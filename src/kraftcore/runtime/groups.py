"""`BrokerGroups`: a broker's group coordinator (`kraftcore.broker.groups`) on the event loop.

* Each new metadata image's role changes reach the coordinator: an offsets partition the
  broker now leads starts loading, one it stopped leading is dropped. Loading reads
  `limits.BROKER_GROUP_LOAD_BYTES_PER_TURN_MAX` of each loading partition per event-loop
  turn, so requests and heartbeats go on in between; each load's end and failure is
  logged.
* Commits: the OffsetCommits that arrive in one event-loop turn are appended together
  (`GroupCoordinator.flush`, run at the end of the turn), one batch per offsets partition;
  every append to an offsets partition wakes its followers' waiting fetches
  (`ReplicaManager.changed`).
* Time: every `limits.BROKER_GROUP_TICK_MS` while it coordinates any group, the
  coordinator's `tick` acts on the session, rebalance and sync timeouts that passed; every
  change of an offsets partition's high watermark (`ReplicaManager.watch`) answers the
  stores it committed. Each group's state transitions are logged (INFO).
* Every `offsets.retention.check.interval.ms` the offsets that expired
  (`offsets.retention.minutes` after their group became empty) are deleted, and logged.
* Member ids take their randomness from a generator seeded from the operating system.
* `ensure_offsets_topic()` (the first FindCoordinator): the CreateTopics request of
  `offsets_topic_request` goes to the active controller through `Node.forward`, one at a
  time, in the background; its outcome is logged. The FindCoordinator that asked is
  answered COORDINATOR_NOT_AVAILABLE at once, as Kafka answers it.
"""

import asyncio
import logging
import os
import random

from kraftcore.broker.groups import (ACTIVE, OFFSETS_TOPIC, GroupConfig, GroupCoordinator,
                                     offsets_topic_request)
from kraftcore.errors import KraftcoreError
from kraftcore.limits import BROKER_GROUP_LOAD_BYTES_PER_TURN_MAX, BROKER_GROUP_TICK_MS
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode, error_name

__all__ = ["BrokerGroups"]

log = logging.getLogger("kraftcore.runtime")

_CREATE_TOPICS = m.CreateTopicsRequest.api_key
_CREATE_TOPICS_VERSION = m.CreateTopicsRequest.valid_versions[1]


class BrokerGroups:
    """The group coordinator of a `BrokerRole` (`role`: its node, image and `guarded`)."""

    def __init__(self, role):
        self.role = role
        self.node_id = role.node.node_id
        self.coordinator = GroupCoordinator(
            self.node_id, GroupConfig(**role.node.config.group_settings()),
            rng=random.Random(os.urandom(16)), kick=self._kick,
            appended=role.replicas.changed)
        self._flush_scheduled = False
        self._next_expiry_ms = 0
        self._load_scheduled = False
        self._creating = None
        self._failures_logged = 0
        self._ticker = None
        self._transitions_logged = 0
        self._watching = False

    def _now(self):
        return self.role.node.driver.clock()

    def _kick(self):
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.role.guarded, self._flush)

    def _flush(self):
        self._flush_scheduled = False
        self.coordinator.flush(self._now())

    def on_role_changes(self, changes):
        for index in self.coordinator.on_role_changes(changes):
            log.debug("broker %s: coordinator of %s-%s: loading its groups' offsets",
                      self.node_id, OFFSETS_TOPIC, index)
        if self.coordinator.shards:
            if not self._watching:
                self.role.replicas.watch(self._on_partition_change)
                self._watching = True
            if self._ticker is None:
                self._ticker = asyncio.get_running_loop().call_later(
                    BROKER_GROUP_TICK_MS / 1000, self.role.guarded, self._tick)
        self._maybe_schedule_load()

    def _on_partition_change(self, partition):
        if partition.topic == OFFSETS_TOPIC:
            self.coordinator.on_partition_change(partition, self._now())
            self.log_transitions()

    def _tick(self):
        self._ticker = None
        now = self._now()
        self.coordinator.tick(now)
        if now >= self._next_expiry_ms:
            self._next_expiry_ms = now + self.role.node.config.offsets_retention_check_interval_ms
            expired = self.coordinator.expire_offsets(now)
            if expired:
                log.info("broker %s: %s committed offsets of %s groups expired "
                         "(offsets.retention.minutes)", self.node_id, len(expired),
                         len({g for g, _, _ in expired}))
        self.log_transitions()
        if self.coordinator.shards:
            self._ticker = asyncio.get_running_loop().call_later(
                BROKER_GROUP_TICK_MS / 1000, self.role.guarded, self._tick)

    def log_transitions(self):
        """Log the group state transitions since the last call."""
        coordinator = self.coordinator
        total = coordinator.transitions_total
        new = min(total - self._transitions_logged, len(coordinator.transitions))
        latest = list(coordinator.transitions)[-new:] if new else ()
        for _, group, before, after, generation in latest:
            log.info("broker %s: group %r: %s -> %s (generation %s)", self.node_id, group,
                     before, after, generation)
        self._transitions_logged = total

    def _maybe_schedule_load(self):
        if self.coordinator.loading and not self._load_scheduled:
            self._load_scheduled = True
            asyncio.get_running_loop().call_soon(self.role.guarded, self._load)

    def _load(self):
        self._load_scheduled = False
        coordinator = self.coordinator
        loading = {i: s for i, s in coordinator.shards.items() if s.state != ACTIVE}
        coordinator.load_step(BROKER_GROUP_LOAD_BYTES_PER_TURN_MAX, self._now())
        for index, shard in loading.items():
            if coordinator.shards.get(index) is shard and shard.state == ACTIVE:
                log.info("broker %s: coordinator of %s-%s: loaded %s records, %s groups",
                         self.node_id, OFFSETS_TOPIC, index, shard.records_loaded,
                         len(shard.committed))
        new = coordinator.load_failures_total - self._failures_logged
        for index, reason in list(coordinator.load_failures)[-new:] if new else ():
            log.error("broker %s: loading %s-%s failed, its groups are not served here: %s",
                      self.node_id, OFFSETS_TOPIC, index, reason)
        self._failures_logged = coordinator.load_failures_total
        self._maybe_schedule_load()

    def ensure_offsets_topic(self):
        """Ask the active controller to create the offsets topic, unless a request is out
        already or the image has the topic."""
        if self._creating is not None and not self._creating.done():
            return
        if self.role.metadata.image.topic(OFFSETS_TOPIC) is not None:
            return
        self._creating = asyncio.ensure_future(self._create())

    async def _create(self):
        body = offsets_topic_request(self.role.metadata.image, self.coordinator.config)
        if body is None:
            return
        topic = body.topics[0]
        log.info("broker %s: creating %s (%s partitions, replication factor %s)",
                 self.node_id, OFFSETS_TOPIC, topic.num_partitions, topic.replication_factor)
        try:
            response = await self.role.node.forward(_CREATE_TOPICS, _CREATE_TOPICS_VERSION, body)
        except KraftcoreError as exc:
            log.warning("broker %s: creating %s failed: %s", self.node_id, OFFSETS_TOPIC, exc)
            return
        result = response.topics[0] if response.topics else None
        code = result.error_code if result is not None else ErrorCode.UNKNOWN_SERVER_ERROR
        if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
            log.warning("broker %s: the controller refused to create %s: %s %s",
                        self.node_id, OFFSETS_TOPIC, error_name(code),
                        getattr(result, "error_message", None) or "")

    def close(self):
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._watching:
            self.role.replicas.unwatch(self._on_partition_change)
            self._watching = False
        if self._creating is not None and not self._creating.done():
            self._creating.cancel()
