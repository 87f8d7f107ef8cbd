"""Topics, partitions, ISRs, leaders and configs on the active controller (kafka-facts §8.4–8.6;
Kafka's `ReplicationControlManager` and `ConfigurationControlManager`).

Every operation reads the controller's working image and returns `(records, result)`; it
changes nothing itself. Per-item errors (one bad topic of several) go into the result;
the other items still produce records.

Rules kraftcore keeps (the issue's invariants, checked by the simulator after every event):

* an ISR never holds a fenced broker: fencing, controlled shutdown and unregistering take
  the broker out of every ISR, even the last member — the ISR may then be empty and the
  partition has no leader (-1). Kafka without ELR keeps that last member in the ISR instead;
  here such a partition gets a leader again only through an unclean election (the topic's or
  the cluster's `unclean.leader.election.enable`, or ElectLeaders UNCLEAN), which is recorded
  (LeaderRecoveryState RECOVERING, ISR = [leader]);
* a leader is an active broker in the ISR, unless it was elected uncleanly;
* the new leaders of every partition a fenced broker held go out as one batch of records, in
  one event.

The ISR index (broker -> the partitions whose ISR holds it, and the leaderless partitions)
is derived state of the active controller: built from the working image on activation,
kept current from the records the controller writes, dropped on renounce. It uses dicts
(insertion order) rather than sets so that every run visits partitions in the same order.
"""

import re
from typing import NamedTuple

from kraftcore.controller import election as E
from kraftcore.controller.placement import StripedReplicaPlacer
from kraftcore.errors import ControllerError
from kraftcore.limits import TOPIC_NAME_BYTES_MAX
from kraftcore.metadata import records as R, topic_configs
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.metadata.partition import DIRECTORY_UNASSIGNED, NO_LEADER, RECOVERED
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.types import Uuid

__all__ = ["ReplicationControl", "NewTopic", "TopicResult", "PartitionState",
           "MIN_INSYNC_REPLICAS", "UNCLEAN_LEADER_ELECTION", "topic_name_error"]

MIN_INSYNC_REPLICAS = topic_configs.MIN_INSYNC_REPLICAS
UNCLEAN_LEADER_ELECTION = topic_configs.UNCLEAN_LEADER_ELECTION
_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+\Z")
_DIRECTORIES_LEVEL = R.METADATA_VERSION_LEVELS["3.7-IV2"]
_RECOVERY_LEVEL = R.METADATA_VERSION_LEVELS["3.2-IV0"]


class NewTopic(NamedTuple):
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    # partition id -> replica list (replaces placement; ids 0..n-1)
    assignments: dict = None
    configs: dict = None


class TopicResult(NamedTuple):
    name: str
    topic_id: Uuid = None
    error_code: int = 0
    error_message: str = None
    num_partitions: int = -1
    replication_factor: int = -1


class PartitionState(NamedTuple):
    leader: int
    leader_epoch: int
    isr: list
    partition_epoch: int


def _validate_config(name, value):
    """The error message for a config value kraftcore refuses, or None."""
    return topic_configs.check(name, value)


def _unified(name):
    """A topic name with '.' as '_': two names equal this way collide in metric names,
    so Kafka keeps only one of them."""
    return name.replace(".", "_")


def _add_collision(collisions, name):
    if "." in name or "_" in name:
        collisions.setdefault(_unified(name), set()).add(name)


def topic_name_error(name):
    """Why `name` cannot name a topic (Kafka's rules: not empty, "." or "..", at most
    TOPIC_NAME_BYTES_MAX characters, only ASCII letters, digits, '.', '_' and '-'), or None."""
    if not name or name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if len(name) > TOPIC_NAME_BYTES_MAX:
        return f"topic name is {len(name)} characters; the limit is {TOPIC_NAME_BYTES_MAX}"
    if not _LEGAL_NAME.match(name):
        return (f"topic name {name!r} may only hold ASCII letters, digits, '.', '_' and "
                "'-'")
    return None


class ReplicationControl:
    def __init__(self, controller):
        self.controller = controller
        self.config = controller.config
        self.placer = StripedReplicaPlacer()
        self.isr_index = None  # broker id -> {(topic id, partition id): None}
        self.leaderless = None  # {(topic id, partition id): None}
        # the names of the topics with a '.' or '_', by their name with '.' as '_'
        # (Kafka refuses a new topic whose name differs from one of these only there)
        self.collisions = None

    # ------------------------------------------------------------------ the ISR index

    def on_activate(self):
        index = {}
        leaderless = {}
        for topic in self.controller.working.topics.values():
            tid = topic.topic_id
            for pid, p in topic.partitions.items():
                key = (tid, pid)
                for b in p.isr:
                    members = index.get(b)
                    if members is None:
                        members = index[b] = {}
                    members[key] = None
                if p.leader == NO_LEADER:
                    leaderless[key] = None
        self.isr_index = index
        self.leaderless = leaderless
        self.collisions = {}
        for name in self.controller.working.topic_ids:
            _add_collision(self.collisions, name)

    def on_deactivate(self):
        self.isr_index = None
        self.leaderless = None
        self.collisions = None

    def on_replayed(self, base, records):
        """Keep the index current after our `records` were replayed on `base`."""
        index = self.isr_index
        leaderless = self.leaderless
        current = {}  # key -> (isr, leader) after the records so far
        for record in records:
            cls = type(record)
            if cls is R.PartitionChangeRecord:
                key = (record.topic_id, record.partition_id)
                state = current.get(key)
                if state is None:
                    p = base.partition(*key)
                    state = (p.isr, p.leader) if p is not None else ((), NO_LEADER)
                isr, leader = state
                if record.isr is not None:
                    new_isr = record.isr
                    for b in isr:
                        if b not in new_isr:
                            members = index.get(b)
                            if members is not None:
                                members.pop(key, None)
                    for b in new_isr:
                        if b not in isr:
                            index.setdefault(b, {})[key] = None
                    isr = new_isr
                if record.leader != -2:
                    leader = record.leader
                    if leader == NO_LEADER:
                        leaderless[key] = None
                    else:
                        leaderless.pop(key, None)
                current[key] = (isr, leader)
            elif cls is R.PartitionRecord:
                key = (record.topic_id, record.partition_id)
                for b in record.isr:
                    index.setdefault(b, {})[key] = None
                if record.leader == NO_LEADER:
                    leaderless[key] = None
                current[key] = (record.isr, record.leader)
            elif cls is R.TopicRecord:
                _add_collision(self.collisions, record.name)
            elif cls is R.RemoveTopicRecord:
                topic = base.topics.get(record.topic_id)
                if topic is None:
                    continue
                names = self.collisions.get(_unified(topic.name))
                if names is not None:
                    names.discard(topic.name)
                for pid, p in topic.partitions.items():
                    key = (record.topic_id, pid)
                    isr = current[key][0] if key in current else p.isr
                    for b in isr:
                        members = index.get(b)
                        if members is not None:
                            members.pop(key, None)
                    leaderless.pop(key, None)

    def leads_any(self, broker_id):
        image = self.controller.working
        for tid, pid in self.isr_index.get(broker_id, ()):
            if image.topics[tid].partitions[pid].leader == broker_id:
                return True
        return False

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _acceptable(image):
        return frozenset(b for b, r in image.brokers.items()
                         if not r.fenced and not r.in_controlled_shutdown).__contains__

    @staticmethod
    def _unclean_allowed(image, topic_name):
        return image.topic_config(topic_name, UNCLEAN_LEADER_ELECTION) == "true"

    @staticmethod
    def _recovery(image):
        return (image.metadata_version() or 1) >= _RECOVERY_LEVEL

    def remove_broker(self, image, broker_id):
        """Records taking `broker_id` out of every ISR and leadership (fencing, controlled
        shutdown, unregistering, a new incarnation): one record per partition whose ISR
        holds it."""
        keys = self.isr_index.get(broker_id)
        if not keys:
            return []
        acceptable = self._acceptable(image)
        recovery = self._recovery(image)
        topics = image.topics
        unclean_cache = {}
        records = []
        append = records.append
        remove = E.remove_from_isr
        for tid, pid in keys:
            topic = topics[tid]
            unclean = unclean_cache.get(tid)
            if unclean is None:
                unclean = unclean_cache[tid] = self._unclean_allowed(image, topic.name)
            record = remove(topic.partitions[pid], broker_id, acceptable, unclean,
                            unclean_recovery=recovery, empty_isr_allowed=True)
            if record is not None:
                append(record)
        return records

    def elect_leaderless(self, image, broker_id=None, topic_names=None, unclean=None):
        """Records giving leaderless partitions a leader: when `broker_id` is being unfenced
        (it counts as active), or when unclean election was just enabled for `topic_names`
        (all topics when None) — `unclean` True forces unclean elections."""
        if not self.leaderless:
            return []
        acceptable = self._acceptable(image)
        if broker_id is None:
            broker_id = -1
        recovery = self._recovery(image)
        topics = image.topics
        records = []
        cache = {}
        for tid, pid in self.leaderless:
            topic = topics[tid]
            if topic_names is not None and topic.name not in topic_names:
                continue
            allowed = cache.get(tid)
            if allowed is None:
                allowed = cache[tid] = (unclean if unclean is not None
                                        else self._unclean_allowed(image, topic.name))
            record = E.elect_for_leaderless(topic.partitions[pid], broker_id, acceptable,
                                            allowed, unclean_recovery=recovery)
            if record is not None:
                records.append(record)
        return records

    def _topic_by_name(self, image, name):
        topic = image.topic(name)
        if topic is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"topic {name!r} does not exist")
        return topic

    def _brokers_for_placement(self, image):
        return [(b, r.rack or None, r.fenced or r.in_controlled_shutdown)
                for b, r in sorted(image.brokers.items())]

    def _partition_records(self, image, topic_id, first_pid, assignments):
        acceptable = self._acceptable(image)
        directories = (image.metadata_version() or 1) >= _DIRECTORIES_LEVEL
        records = []
        for i, replicas in enumerate(assignments):
            isr = [b for b in replicas if acceptable(b)]
            if not isr:
                raise ControllerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                      f"partition {first_pid + i} would have no active "
                                      f"replica among {replicas}; unfence a broker first")
            records.append(R.PartitionRecord(
                partition_id=first_pid + i, topic_id=topic_id, replicas=list(replicas),
                isr=isr, removing_replicas=[], adding_replicas=[], leader=isr[0],
                leader_recovery_state=RECOVERED, leader_epoch=0, partition_epoch=0,
                directories=[DIRECTORY_UNASSIGNED] * len(replicas) if directories else []))
        return records

    def _check_assignments(self, image, assignments, count=None):
        """Replica lists given by hand: ids 0..n-1 in order, equal non-zero lengths, no
        duplicates, registered brokers."""
        lists = [assignments[k] for k in sorted(assignments)]
        if sorted(assignments) != list(range(len(lists))):
            raise ControllerError(ErrorCode.INVALID_REQUEST,
                                  "manual assignments must name partitions 0..n-1")
        for replicas in lists:
            if not replicas or len(set(replicas)) != len(replicas):
                raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"replica list {replicas} is empty or repeats a broker")
            if len(replicas) != len(lists[0]):
                raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      "every partition needs the same number of replicas")
            unknown = [b for b in replicas if b not in image.brokers]
            if unknown:
                raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"brokers {unknown} are not registered")
        return lists

    # ------------------------------------------------------------------ topics

    def create_topics(self, image, topics):
        records = []
        results = []
        rng = self.controller.rng
        names = [t.name for t in topics]
        for topic in topics:
            name = topic.name
            try:
                error = topic_name_error(name)
                if error is not None:
                    raise ControllerError(ErrorCode.INVALID_TOPIC_EXCEPTION, error)
                if names.count(name) > 1:
                    raise ControllerError(ErrorCode.INVALID_REQUEST,
                                          f"topic {name!r} appears more than once in the "
                                          "request")
                if name in image.topic_ids:
                    raise ControllerError(ErrorCode.TOPIC_ALREADY_EXISTS,
                                          f"topic {name!r} already exists")
                other = next(iter(self.collisions.get(_unified(name), ())), None)
                if other is not None:
                    raise ControllerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                          f"Topic '{name}' collides with existing topic: "
                                          f"{other}")
                for key, value in (topic.configs or {}).items():
                    error = _validate_config(key, value)
                    if error is not None:
                        raise ControllerError(ErrorCode.INVALID_CONFIG, error)
                if topic.assignments:
                    if topic.num_partitions != -1 or topic.replication_factor != -1:
                        raise ControllerError(ErrorCode.INVALID_REQUEST,
                                              "give either assignments or a partition count "
                                              "and replication factor, not both")
                    assignments = self._check_assignments(image, topic.assignments)
                else:
                    count = (self.config.default_partitions if topic.num_partitions == -1
                             else topic.num_partitions)
                    rf = (self.config.default_replication_factor
                          if topic.replication_factor == -1 else topic.replication_factor)
                    if count < 1:
                        raise ControllerError(ErrorCode.INVALID_PARTITIONS,
                                              f"partition count {count} must be >= 1")
                    assignments = self.placer.place(self._brokers_for_placement(image), count,
                                                    rf, rng)
                topic_id = Uuid.random(rng)
                while topic_id in image.topics:
                    topic_id = Uuid.random(rng)
                partitions = self._partition_records(image, topic_id, 0, assignments)
            except ControllerError as exc:
                results.append(TopicResult(name, None, exc.code, str(exc)))
                continue
            records.append(R.TopicRecord(name=name, topic_id=topic_id))
            records += [R.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name=name,
                                       name=k, value=v)
                        for k, v in sorted((topic.configs or {}).items())]
            records += partitions
            results.append(TopicResult(name, topic_id, 0, None, len(assignments),
                                       len(assignments[0])))
        return records, results

    def delete_topics(self, image, names):
        records = []
        results = []
        seen = set()
        for name in names:
            topic = image.topic(name)
            if topic is None or name in seen:
                results.append(TopicResult(name, None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                           f"topic {name!r} does not exist"))
                continue
            seen.add(name)
            records.append(R.RemoveTopicRecord(topic_id=topic.topic_id))
            results.append(TopicResult(name, topic.topic_id))
        return records, results

    def create_partitions(self, image, name, count, assignments):
        topic = self._topic_by_name(image, name)
        current = len(topic.partitions)
        if count <= current:
            raise ControllerError(ErrorCode.INVALID_PARTITIONS,
                                  f"topic {name!r} has {current} partitions; the new count "
                                  f"{count} must be larger")
        rf = len(topic.partitions[0].replicas)
        if assignments:
            lists = self._check_assignments(image, assignments)
            if len(lists) != count - current or len(lists[0]) != rf:
                raise ControllerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"give {count - current} replica lists of {rf} brokers")
        else:
            lists = self.placer.place(self._brokers_for_placement(image), count - current, rf,
                                      self.controller.rng)
        records = self._partition_records(image, topic.topic_id, current, lists)
        return records, TopicResult(name, topic.topic_id, 0, None, count, rf)

    # ------------------------------------------------------------------ ISR changes

    def alter_partition(self, image, broker_id, broker_epoch, topic_id, partition_id,
                        leader_epoch, partition_epoch, new_isr):
        self.controller.cluster._broker(image, broker_id, broker_epoch)
        p = image.partition(topic_id, partition_id)
        if p is None:
            raise ControllerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"partition {topic_id}-{partition_id} does not exist")
        where = f"partition {image.topics[topic_id].name}-{partition_id}"
        if p.leader != broker_id:
            raise ControllerError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  f"broker {broker_id} does not lead {where} (leader "
                                  f"{p.leader})")
        if leader_epoch != p.leader_epoch:
            raise ControllerError(ErrorCode.FENCED_LEADER_EPOCH,
                                  f"{where} is at leader epoch {p.leader_epoch}, the request "
                                  f"names {leader_epoch}")
        if partition_epoch != p.partition_epoch:
            raise ControllerError(ErrorCode.INVALID_UPDATE_VERSION,
                                  f"{where} is at partition epoch {p.partition_epoch}, the "
                                  f"request names {partition_epoch}")
        new_isr = list(new_isr)
        if (broker_id not in new_isr or len(set(new_isr)) != len(new_isr)
                or not set(new_isr) <= set(p.replicas)):
            raise ControllerError(ErrorCode.INVALID_REQUEST,
                                  f"new ISR {new_isr} of {where} must hold its leader, no "
                                  f"duplicates and only replicas of {p.replicas}")
        acceptable = self._acceptable(image)
        ineligible = [b for b in new_isr if b not in p.isr and not acceptable(b)]
        if ineligible:
            raise ControllerError(ErrorCode.INELIGIBLE_REPLICA,
                                  f"brokers {ineligible} cannot join the ISR of {where}: they "
                                  "are fenced, shutting down or not registered")
        record, _ = E.build_change(p, is_acceptable=acceptable, target_isr=new_isr)
        if record is None:
            return [], PartitionState(p.leader, p.leader_epoch, p.isr, p.partition_epoch)
        leader = p.leader if record.leader == -2 else record.leader
        epoch = p.leader_epoch + (record.leader != -2)
        isr = p.isr if record.isr is None else record.isr
        return [record], PartitionState(leader, epoch, isr, p.partition_epoch + 1)

    def elect_leaders(self, image, election, partitions):
        """`partitions`: [(topic name, partition id)], or None for every partition (then
        partitions that need no election are left out of the result)."""
        if election not in (E.PREFERRED, E.UNCLEAN):
            raise ControllerError(ErrorCode.INVALID_REQUEST,
                                  f"election must be {E.PREFERRED!r} or {E.UNCLEAN!r}, not "
                                  f"{election!r}")
        everything = partitions is None
        if everything:
            partitions = [(name, pid) for name, tid in sorted(image.topic_ids.items())
                          for pid in sorted(image.topics[tid].partitions)]
        acceptable = self._acceptable(image)
        recovery = self._recovery(image)
        records = []
        results = {}
        for name, pid in partitions:
            topic = image.topic(name)
            p = None if topic is None else topic.partitions.get(pid)
            if p is None:
                results[(name, pid)] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                        f"partition {name}-{pid} does not exist")
                continue
            try:
                record = E.elect_leader(p, election, acceptable, unclean_recovery=recovery)
            except ControllerError as exc:
                if not (everything and exc.code == ErrorCode.ELECTION_NOT_NEEDED):
                    results[(name, pid)] = (exc.code, str(exc))
                continue
            records.append(record)
            results[(name, pid)] = (0, None)
        return records, results

    # ------------------------------------------------------------------ configs

    def alter_configs(self, image, resources):
        """`resources`: [(resource type, resource name, [(config name, "set" | "delete",
        value)])]; resource type CONFIG_TOPIC (2) with a topic name, or CONFIG_BROKER (4)
        with "" (the cluster default) or a broker id. Returns per-resource
        `(error code, message)` in request order."""
        records = []
        results = []
        unclean_topics = set()
        unclean_cluster = False
        for resource_type, resource_name, ops in resources:
            try:
                if resource_type == CONFIG_TOPIC:
                    self._topic_by_name(image, resource_name)
                elif resource_type == CONFIG_BROKER:
                    if resource_name != "" and not (resource_name.isdigit() and
                                                    int(resource_name) in image.brokers):
                        raise ControllerError(ErrorCode.INVALID_REQUEST,
                                              f"broker resource {resource_name!r} is neither "
                                              "'' (cluster default) nor a registered broker")
                else:
                    raise ControllerError(ErrorCode.INVALID_REQUEST,
                                          f"resource type {resource_type} is not supported; "
                                          f"use topic ({CONFIG_TOPIC}) or broker "
                                          f"({CONFIG_BROKER})")
                mine = []
                for name, op, value in ops:
                    if op == "set":
                        error = _validate_config(name, value)
                    elif op == "delete":
                        error = _validate_config(name, None)
                        value = None
                    else:
                        error = f"config operation {op!r} is not 'set' or 'delete'"
                    if error is not None:
                        raise ControllerError(ErrorCode.INVALID_CONFIG, error)
                    mine.append(R.ConfigRecord(resource_type=resource_type,
                                               resource_name=resource_name, name=name,
                                               value=value))
                    if name == UNCLEAN_LEADER_ELECTION and value == "true":
                        if resource_type == CONFIG_TOPIC:
                            unclean_topics.add(resource_name)
                        elif resource_name == "":
                            unclean_cluster = True
            except ControllerError as exc:
                results.append((exc.code, str(exc)))
                continue
            records += mine
            results.append((0, None))
        if unclean_cluster or unclean_topics:
            # Enabling unclean election gives leaderless partitions a leader at once, in the
            # topics where it is now on (a topic's own "false" beats the cluster's "true").
            overrides = {name: entries.get(UNCLEAN_LEADER_ELECTION)
                         for (kind, name), entries in image.configs.items()
                         if kind == CONFIG_TOPIC}
            for record in records:
                if (record.resource_type == CONFIG_TOPIC
                        and record.name == UNCLEAN_LEADER_ELECTION):
                    overrides[record.resource_name] = record.value
            if unclean_cluster:
                names = {name for name in image.topic_ids if overrides.get(name) != "false"}
            else:
                names = {name for name in unclean_topics if overrides.get(name) == "true"}
            records += self.elect_leaderless(image, topic_names=names, unclean=True)
        return records, results
