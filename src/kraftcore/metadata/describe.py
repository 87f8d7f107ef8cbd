"""Committed metadata records as short sentences a person can follow: "broker 4 fenced",
"orders-2 leader 4 -> 5, ISR [4, 5, 6] -> [5, 6]". The node logs use them for what the
active controller commits, and `kraftcore metadata watch` prints them as they commit.

`ChangeDescriber(image)` describes the records that follow `image` (the image before the
first of them), in order: a record that changes a partition or a broker is told as a change
from the state the earlier records left. Record types that change nothing a person follows
(NoOpRecord, ProducerIdsRecord, ...) get no sentence.
"""

from kraftcore.metadata import records as R
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.metadata.partition import apply_change

__all__ = ["ChangeDescriber"]

_RESOURCE = {CONFIG_TOPIC: "topic", CONFIG_BROKER: "broker"}


class ChangeDescriber:
    def __init__(self, image):
        self.image = image
        self._partitions = {}  # (topic id, partition id) -> PartitionRecord, as changed here
        self._topics = {}  # topic id -> name, for topics created here

    def describe(self, record):
        """One sentence for `record`, or None when it changes nothing a person follows."""
        method = _DESCRIBE.get(type(record))
        return None if method is None else method(self, record)

    # ------------------------------------------------------------------ helpers

    def _topic_name(self, topic_id):
        name = self._topics.get(topic_id)
        if name is None:
            topic = self.image.topics.get(topic_id)
            name = topic.name if topic is not None else str(topic_id)
        return name

    def _partition(self, topic_id, partition_id):
        key = (topic_id, partition_id)
        if key in self._partitions:
            return self._partitions[key]
        return self.image.partition(topic_id, partition_id)

    # ------------------------------------------------------------------ records

    def _register_broker(self, r):
        endpoints = ", ".join(f"{e.name}://{e.host}:{e.port}" for e in r.end_points)
        return (f"broker {r.broker_id} registered: epoch {r.broker_epoch}, "
                f"{'fenced' if r.fenced else 'unfenced'}, {endpoints or 'no endpoints'}")

    def _unregister_broker(self, r):
        return f"broker {r.broker_id} unregistered"

    def _registration_change(self, r):
        words = []
        if r.fenced == 1:
            words.append("fenced")
        elif r.fenced == -1:
            words.append("unfenced")
        if r.in_controlled_shutdown == 1:
            words.append("in controlled shutdown")
        if not words:
            return None
        return f"broker {r.broker_id} {' and '.join(words)}"

    def _fence(self, r):
        return f"broker {r.id} fenced"

    def _unfence(self, r):
        return f"broker {r.id} unfenced"

    def _register_controller(self, r):
        endpoints = ", ".join(f"{e.name}://{e.host}:{e.port}" for e in r.end_points)
        return f"controller {r.controller_id} registered: {endpoints or 'no endpoints'}"

    def _topic(self, r):
        self._topics[r.topic_id] = r.name
        return f"topic {r.name} created ({r.topic_id})"

    def _remove_topic(self, r):
        return f"topic {self._topic_name(r.topic_id)} deleted"

    def _new_partition(self, r):
        self._partitions[(r.topic_id, r.partition_id)] = r
        return (f"{self._topic_name(r.topic_id)}-{r.partition_id} created: replicas "
                f"{list(r.replicas)}, leader {r.leader}, ISR {list(r.isr)}")

    def _partition_change(self, r):
        before = self._partition(r.topic_id, r.partition_id)
        if before is None:
            return None  # the replay refuses it; nothing to tell
        after = apply_change(before, r)
        self._partitions[(r.topic_id, r.partition_id)] = after
        changes = []
        if after.leader != before.leader:
            changes.append(f"leader {before.leader} -> {after.leader}")
        if list(after.isr) != list(before.isr):
            changes.append(f"ISR {list(before.isr)} -> {list(after.isr)}")
        if list(after.replicas) != list(before.replicas):
            changes.append(f"replicas {list(before.replicas)} -> {list(after.replicas)}")
        if not changes:
            changes.append(f"leader epoch {after.leader_epoch}")
        return f"{self._topic_name(r.topic_id)}-{r.partition_id} " + ", ".join(changes)

    def _config(self, r):
        kind = _RESOURCE.get(r.resource_type, f"resource type {r.resource_type}")
        target = f"{kind} {r.resource_name!r}" if r.resource_name else f"cluster default ({kind})"
        if r.value is None:
            return f"config {r.name} removed from {target}"
        return f"config {r.name}={r.value} on {target}"

    def _feature(self, r):
        return f"feature {r.name} at level {r.feature_level}"

    def _unregister_controller(self, r):
        return f"controller {r.controller_id} unregistered"

    def _clear_elr(self, r):
        return (f"eligible leader replicas of topic {r.topic_name} cleared" if r.topic_name
                else "eligible leader replicas of every topic cleared")


_DESCRIBE = {
    R.RegisterBrokerRecord: ChangeDescriber._register_broker,
    R.UnregisterBrokerRecord: ChangeDescriber._unregister_broker,
    R.BrokerRegistrationChangeRecord: ChangeDescriber._registration_change,
    R.FenceBrokerRecord: ChangeDescriber._fence,
    R.UnfenceBrokerRecord: ChangeDescriber._unfence,
    R.RegisterControllerRecord: ChangeDescriber._register_controller,
    R.TopicRecord: ChangeDescriber._topic,
    R.RemoveTopicRecord: ChangeDescriber._remove_topic,
    R.PartitionRecord: ChangeDescriber._new_partition,
    R.PartitionChangeRecord: ChangeDescriber._partition_change,
    R.ConfigRecord: ChangeDescriber._config,
    R.FeatureLevelRecord: ChangeDescriber._feature,
    R.UnregisterControllerRecord: ChangeDescriber._unregister_controller,
    R.ClearElrRecord: ChangeDescriber._clear_elr,
}
