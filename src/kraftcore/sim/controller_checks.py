"""The metadata checks of the simulator's controller workload (`kraftcore.sim.controller`),
besides every Raft invariant of `kraftcore.sim.invariants`:

* after every new image on any node (`MetadataChecker.check_image`): every node's image at
  an offset describes the same cluster as every other node's there (controllers' loaders,
  the active controller's adopted images, brokers' images, images loaded from snapshots —
  which makes image -> snapshot -> image round trips part of every run); and the image
  keeps the metadata invariants (`image_problems`): ISR within replicas, replicas and
  leaders registered brokers, no fenced broker in an ISR or leading, a leader outside its
  ISR only after a recorded unclean election (RECOVERING), topic names and ids unique;
* every stored snapshot loads into the image the nodes had at its end offset
  (`check_snapshot_state`);
* at the end, `final_states`: the state of every key of the history's model in the final
  image, which the history is checked against.
"""

from kraftcore.errors import CorruptRecordError, MetadataError
from kraftcore.limits import SIM_PROBLEMS_SHOWN_MAX
from kraftcore.metadata.image import _MAPS, CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.metadata.partition import check_partition
from kraftcore.metadata.snapshot import load_snapshot
from kraftcore.sim.invariants import Checker, SimViolation

__all__ = ["MetadataChecker", "image_problems", "final_states"]



def image_problems(image, topics=None):
    """The metadata invariants `image` breaks, as readable strings; only the partitions of
    `topics` (TopicImages) when given, the whole image otherwise."""
    problems = []
    brokers = image.brokers
    checked = topics
    topics = image.topics
    for name, topic_id in image.topic_ids.items():
        topic = topics.get(topic_id)
        if topic is None or topic.name != name:
            problems.append(f"topic name {name!r} maps to id {topic_id}, which is "
                            f"{'missing' if topic is None else repr(topic.name)}")
    if len(image.topic_ids) != len(topics):
        problems.append(f"{len(topics)} topics but {len(image.topic_ids)} topic names")
    for topic in (topics.values() if checked is None else checked):
        for partition in topic.partitions.values():
            problems += check_partition(partition, brokers, empty_isr_allowed=True)
            where = f"{topic.name}-{partition.partition_id}"
            fenced = [b for b in partition.isr if b in brokers and brokers[b].fenced]
            if fenced:
                problems.append(f"{where}: fenced brokers {fenced} in the ISR {partition.isr}")
            leader = partition.leader
            if leader >= 0 and leader in brokers and brokers[leader].fenced:
                problems.append(f"{where}: leader {leader} is fenced")
    return problems


def final_states(image):
    """The state of every key of the history model (`kraftcore.sim.history`) in `image`."""
    states = {}
    for name in image.topic_ids:
        configs = image.configs.get((CONFIG_TOPIC, name), {})
        states[("topic", name)] = (True, frozenset(configs.items()))
    for name, value in image.configs.get((CONFIG_BROKER, ""), {}).items():
        states[("cluster-config", name)] = value
    for broker_id, registration in image.brokers.items():
        states[("broker", broker_id)] = (registration.incarnation_id,
                                         registration.broker_epoch)
    return states


def _hashable(value):
    return tuple(value) if type(value) is list else value


class MetadataChecker(Checker):
    """The Raft checker plus the metadata checks: one image per offset across all nodes,
    the image invariants, and snapshots that load into that image."""

    def __init__(self, nodes):
        super().__init__(nodes, None)
        # image end offset -> (image, node id that first had it)
        self.images = {}
        # node id -> the last image the node presented (checked, or equal to a checked one)
        self._last = {}
        # id(TopicImage) -> (the TopicImage, a hash of its content); images are immutable
        # and share untouched topics, so each topic is hashed once.
        self._topic_hashes = {}

    def check_image(self, node, image):
        """`image` is `node`'s current committed image."""
        key = image.end_offset
        known = self.images.get(key)
        previous = self._last.get(node.node_id)
        self._last[node.node_id] = image
        if known is None:
            # Only what changed since this node's previous image needs checking: that one
            # passed. A change of the brokers (fencing) can break any partition.
            changed = None
            if previous is not None and previous.brokers is image.brokers:
                old = previous.topics
                changed = [t for i, t in image.topics.items() if old.get(i) is not t]
            problems = image_problems(image, changed)
            if problems:
                shown = "; ".join(problems[:SIM_PROBLEMS_SHOWN_MAX])
                raise SimViolation(f"metadata invariant: node {node.node_id} at "
                                   f"{node.now_ms()} ms, image at offset {key}: {shown}")
            self.images[key] = (image, node.node_id)
        elif known[0] is not image and not self._same_state(image, known[0]):
            differ = [name for name in _MAPS
                      if getattr(image, name) != getattr(known[0], name)]
            raise SimViolation(f"images differ: node {node.node_id} at {node.now_ms()} ms has "
                               f"an image at offset {key} unlike node {known[1]}'s (in "
                               f"{', '.join(differ) or 'producer ids / migration state'})")

    def _topic_hash(self, topic):
        entry = self._topic_hashes.get(id(topic))
        if entry is None or entry[0] is not topic:
            partitions = tuple(
                tuple(_hashable(getattr(p, f.attr)) for f in p._fields)
                for _, p in sorted(topic.partitions.items()))
            entry = (topic, hash((topic.name, topic.topic_id, partitions)))
            self._topic_hashes[id(topic)] = entry
        return entry[1]

    def _same_state(self, a, b):
        """`MetadataImage.same_state`, with topics compared by their cached content hashes
        (every other part in full)."""
        if any(getattr(a, name) != getattr(b, name) for name in _MAPS if name != "topics") \
                or a.producer_ids != b.producer_ids \
                or a.zk_migration_state != b.zk_migration_state:
            return False
        ta, tb = a.topics, b.topics
        if ta is tb:
            return True
        if ta.keys() != tb.keys():
            return False
        topic_hash = self._topic_hash
        return all(x is y or topic_hash(x) == topic_hash(y)
                   for x, y in ((ta[k], tb[k]) for k in ta))

    def check_snapshot_state(self, node, snapshot_id, data):
        try:
            image = load_snapshot(data, snapshot_id)
        except (CorruptRecordError, MetadataError) as exc:
            raise SimViolation(f"node {node.node_id}: snapshot {snapshot_id} does not load: "
                               f"{exc}") from None
        known = self.images.get(snapshot_id.end_offset)
        if known is not None and not self._same_state(image, known[0]):
            raise SimViolation(f"node {node.node_id}: snapshot {snapshot_id} loads into an "
                               f"image unlike node {known[1]}'s at that offset")
