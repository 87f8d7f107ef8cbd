"""`BrokerGroups`: a broker's group coordinator (`kraftcore.broker.groups`) on the event loop.

* Each new metadata image's role changes reach the coordinator: an offsets partition the
  broker now leads starts loading, one it stopped leading is dropped. Loading reads
  `limits.BROKER_GROUP_LOAD_BYTES_PER_TURN_MAX` of each loading partition per event-loop
  turn, so requests and heartbeats go on in between; each load's end and failure is
  logged.
* `ensure_offsets_topic()` (the first FindCoordinator): the CreateTopics request of
  `offsets_topic_request` goes to the active controller through `Node.forward`, one at a
  time, in the background; its outcome is logged. The FindCoordinator that asked is
  answered COORDINATOR_NOT_AVAILABLE at once, as Kafka answers it.
"""

import asyncio
import logging

from kraftcore.broker.groups import (ACTIVE, OFFSETS_TOPIC, GroupConfig, GroupCoordinator,
                                     offsets_topic_request)
from kraftcore.errors import KraftcoreError
from kraftcore.limits import BROKER_GROUP_LOAD_BYTES_PER_TURN_MAX
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
        self.coordinator = GroupCoordinator(self.node_id,
                                            GroupConfig(**role.node.config.group_settings()))
        self._load_scheduled = False
        self._creating = None
        self._failures_logged = 0

    def on_role_changes(self, changes):
        for index in self.coordinator.on_role_changes(changes):
            log.debug("broker %s: coordinator of %s-%s: loading its groups' offsets",
                      self.node_id, OFFSETS_TOPIC, index)
        self._maybe_schedule_load()

    def _maybe_schedule_load(self):
        if self.coordinator.loading and not self._load_scheduled:
            self._load_scheduled = True
            asyncio.get_running_loop().call_soon(self.role.guarded, self._load)

    def _load(self):
        self._load_scheduled = False
        coordinator = self.coordinator
        loading = {i: s for i, s in coordinator.shards.items() if s.state != ACTIVE}
        coordinator.load_step(BROKER_GROUP_LOAD_BYTES_PER_TURN_MAX)
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
        if self._creating is not None and not self._creating.done():
            self._creating.cancel()
