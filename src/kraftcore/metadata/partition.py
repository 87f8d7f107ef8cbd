"""One partition's state and how a change record moves it (kafka-facts §5.2, §5.3).

This module owns three things:

* `apply_change(partition, change)`, the replay merge of a `PartitionChangeRecord` into a
  `PartitionRecord` (Kafka's `PartitionRegistration.merge`). Every null / sentinel field of
  the change leaves the partition's value as it was; `Leader != -2` sets the leader and adds
  one to the leader epoch (even when the value equals the current leader: that is how a
  reassignment forces a bump); the partition epoch grows by exactly one per change. The
  result is a new object; the input is never mutated.
* `change_record(...)`, a cheap constructor of `PartitionChangeRecord` used by the election
  builder, and `check_partition(...)`, the invariants a partition must keep, used by tests
  and by the simulator.
* The directory-id sentinel `DIRECTORY_UNASSIGNED` (Kafka's `DirectoryId.UNASSIGNED`, the
  all-zero uuid).

Records and partitions are immutable by convention, so the merge shares list objects between
the change and the new partition instead of copying them; nobody may mutate either after the
fact.

Why the hand-built objects: the controller generates and replays one record per partition
when a broker leading 100 000 partitions is fenced, and the keyword constructor of a schema
class costs about 3 µs (5 µs through `replace`). Here a record is built with
`object.__new__` and plain attribute stores, which is only correct while the class holds
exactly its schema fields plus the two private slots of `Struct` / `Message`
(`_unknown_tags`, `_version`). That layout is checked once at import; when it no longer
matches, the keyword constructor is used instead, and `FAST_CONSTRUCTION` says which path is
active (a test pins it, so a schema change that disables the fast path is noticed).
"""

from kraftcore.errors import MetadataError
from kraftcore.metadata.records import PartitionChangeRecord, PartitionRecord
from kraftcore.types import ZERO_UUID

__all__ = [
    "apply_change", "change_record", "check_partition", "realign_directories",
    "DIRECTORY_UNASSIGNED",
    "NO_LEADER", "NO_LEADER_CHANGE", "RECOVERED", "RECOVERING", "NO_RECOVERY_STATE_CHANGE",
    "FAST_CONSTRUCTION",
]

NO_LEADER = -1
"""`Leader` of a partition that has none (Kafka's `LeaderConstants.NO_LEADER`)."""
NO_LEADER_CHANGE = -2
"""`Leader` of a change record that leaves the leader as it is."""
RECOVERED, RECOVERING = 0, 1
"""`LeaderRecoveryState` values: RECOVERING marks a leader chosen by an unclean election
until it reports that its log is recovered."""
NO_RECOVERY_STATE_CHANGE = -1
"""`LeaderRecoveryState` of a change record that leaves the state as it is."""
DIRECTORY_UNASSIGNED = ZERO_UUID
"""The directory of a replica whose log directory is not known yet."""

_PRIVATE_SLOTS = ("_unknown_tags", "_version")


def _plain_layout(cls):
    """True when `cls` holds exactly its schema fields plus `_PRIVATE_SLOTS`, and a fresh
    instance has None in both private slots: then `object.__new__` plus attribute stores
    builds the same object as the keyword constructor."""
    slots = set()
    for klass in cls.__mro__:
        declared = klass.__dict__.get("__slots__", ())
        slots.update((declared,) if isinstance(declared, str) else declared)
    fields = {f.attr for f in cls._fields}
    if slots != fields | set(_PRIVATE_SLOTS) or "__dict__" in slots:
        return False
    probe = cls()
    return all(getattr(probe, name, 0) is None for name in _PRIVATE_SLOTS)


FAST_CONSTRUCTION = _plain_layout(PartitionRecord) and _plain_layout(PartitionChangeRecord)
"""Whether records are built by attribute stores (see the module doc)."""

_new = object.__new__


# ------------------------------------------------------------------------------- building

if FAST_CONSTRUCTION:
    def change_record(partition_id, topic_id, isr=None, leader=NO_LEADER_CHANGE,
                      replicas=None, removing_replicas=None, adding_replicas=None,
                      leader_recovery_state=NO_RECOVERY_STATE_CHANGE, directories=None):
        """A `PartitionChangeRecord` (no ELR fields: they stay null), equal to the one the
        keyword constructor builds, at a third of its cost."""
        record = _new(PartitionChangeRecord)
        record.partition_id = partition_id
        record.topic_id = topic_id
        record.isr = isr
        record.leader = leader
        record.replicas = replicas
        record.removing_replicas = removing_replicas
        record.adding_replicas = adding_replicas
        record.leader_recovery_state = leader_recovery_state
        record.directories = directories
        record.eligible_leader_replicas = None
        record.last_known_elr = None
        record._unknown_tags = None
        record._version = None
        return record

    def _partition(partition_id, topic_id, replicas, isr, removing_replicas, adding_replicas,
                   leader, leader_recovery_state, leader_epoch, partition_epoch, directories,
                   eligible_leader_replicas, last_known_elr, unknown_tags):
        p = _new(PartitionRecord)
        p.partition_id = partition_id
        p.topic_id = topic_id
        p.replicas = replicas
        p.isr = isr
        p.removing_replicas = removing_replicas
        p.adding_replicas = adding_replicas
        p.leader = leader
        p.leader_recovery_state = leader_recovery_state
        p.leader_epoch = leader_epoch
        p.partition_epoch = partition_epoch
        p.directories = directories
        p.eligible_leader_replicas = eligible_leader_replicas
        p.last_known_elr = last_known_elr
        p._unknown_tags = unknown_tags
        p._version = None
        return p
else:  # pragma: no cover - only when the schema classes change shape
    def change_record(partition_id, topic_id, isr=None, leader=NO_LEADER_CHANGE,
                      replicas=None, removing_replicas=None, adding_replicas=None,
                      leader_recovery_state=NO_RECOVERY_STATE_CHANGE, directories=None):
        """A `PartitionChangeRecord` (no ELR fields: they stay null)."""
        return PartitionChangeRecord(
            partition_id=partition_id, topic_id=topic_id, isr=isr, leader=leader,
            replicas=replicas, removing_replicas=removing_replicas,
            adding_replicas=adding_replicas, leader_recovery_state=leader_recovery_state,
            directories=directories)

    def _partition(partition_id, topic_id, replicas, isr, removing_replicas, adding_replicas,
                   leader, leader_recovery_state, leader_epoch, partition_epoch, directories,
                   eligible_leader_replicas, last_known_elr, unknown_tags):
        p = PartitionRecord(
            partition_id=partition_id, topic_id=topic_id, replicas=replicas, isr=isr,
            removing_replicas=removing_replicas, adding_replicas=adding_replicas,
            leader=leader, leader_recovery_state=leader_recovery_state,
            leader_epoch=leader_epoch, partition_epoch=partition_epoch,
            directories=directories, eligible_leader_replicas=eligible_leader_replicas,
            last_known_elr=last_known_elr)
        p._unknown_tags = unknown_tags
        return p


def realign_directories(old_replicas, old_directories, new_replicas):
    """The directories of `new_replicas`: a replica that stays keeps its directory, a new one
    gets `DIRECTORY_UNASSIGNED` (the broker reports its directory later). An empty
    `old_directories` (a record from before directory assignment) stays empty. Lists of
    different lengths raise `MetadataError`: the partition in the image is inconsistent."""
    if not old_directories:
        return old_directories
    if len(old_directories) != len(old_replicas):
        raise MetadataError(f"{len(old_directories)} directories for {len(old_replicas)} "
                         "replicas; the partition record is inconsistent")
    where = dict(zip(old_replicas, old_directories))
    return [where.get(r, DIRECTORY_UNASSIGNED) for r in new_replicas]


# ---------------------------------------------------------------------------------- replay

def apply_change(partition, change):
    """The partition after `change` (Kafka's `PartitionRegistration.merge`; kafka-facts
    §5.3), as a new `PartitionRecord`.

    * a null list field / a sentinel (`Leader` -2, `LeaderRecoveryState` -1) keeps the
      partition's value; any other value replaces it;
    * `Leader != -2` sets the leader and adds 1 to the leader epoch;
    * the partition epoch grows by 1, whatever the change holds;
    * a change of `Replicas` without `Directories` keeps each staying replica's directory
      and gives new replicas `DIRECTORY_UNASSIGNED` (so the two lists stay parallel).

    Raises `MetadataError` when the change names another partition (topic id or partition
    id), or changes the replicas of a partition whose directories are not parallel to its
    replicas: applying it would corrupt the image.
    """
    if change.partition_id != partition.partition_id or change.topic_id != partition.topic_id:
        raise MetadataError(
            f"change for partition {change.topic_id}-{change.partition_id} applied to "
            f"partition {partition.topic_id}-{partition.partition_id}; replay routes records "
            "by topic id and partition id")
    replicas = change.replicas
    directories = change.directories
    if replicas is None:
        replicas = partition.replicas
        if directories is None:
            directories = partition.directories
    elif directories is None:
        directories = realign_directories(partition.replicas, partition.directories, replicas)
    isr = change.isr
    removing = change.removing_replicas
    adding = change.adding_replicas
    elr = change.eligible_leader_replicas
    last_known_elr = change.last_known_elr
    leader = change.leader
    if leader == NO_LEADER_CHANGE:
        leader = partition.leader
        leader_epoch = partition.leader_epoch
    else:
        leader_epoch = partition.leader_epoch + 1
    recovery = change.leader_recovery_state
    if recovery == NO_RECOVERY_STATE_CHANGE:
        recovery = partition.leader_recovery_state
    return _partition(
        partition.partition_id, partition.topic_id, replicas,
        partition.isr if isr is None else isr,
        partition.removing_replicas if removing is None else removing,
        partition.adding_replicas if adding is None else adding,
        leader, recovery, leader_epoch, partition.partition_epoch + 1, directories,
        partition.eligible_leader_replicas if elr is None else elr,
        partition.last_known_elr if last_known_elr is None else last_known_elr,
        partition._unknown_tags)


# ------------------------------------------------------------------------------ invariants

def check_partition(partition, registered_broker_ids=None, *, empty_isr_allowed=False):
    """The invariants `partition` breaks, as readable strings (an empty list when it keeps
    them all). Checked:

    * at least one replica, no replica twice, no negative replica id;
    * the ISR is not empty (as in Kafka without ELR; `empty_isr_allowed=True` accepts an
      empty ISR on a leaderless partition), has no duplicates, and is a subset of the
      replicas;
    * the leader is -1 or a replica, and it is in the ISR unless the leader recovery state is
      RECOVERING (an unclean leader; it is then normally the whole ISR);
    * the leader recovery state is RECOVERED or RECOVERING; epochs are not negative;
    * removing and adding replicas are replicas, and no replica is in both;
    * the directories are empty or parallel to the replicas;
    * with `registered_broker_ids` (a container), every replica is a registered broker.
    """
    problems = []
    name = f"partition {partition.topic_id}-{partition.partition_id}"
    replicas = partition.replicas
    replica_set = set(replicas)
    isr = partition.isr
    leader = partition.leader
    if not replicas:
        problems.append(f"{name} has no replicas")
    if len(replica_set) != len(replicas):
        problems.append(f"{name} lists a replica twice: {replicas}")
    if any(r < 0 for r in replicas):
        problems.append(f"{name} has a negative replica id: {replicas}")
    if not isr and not (empty_isr_allowed and leader == NO_LEADER):
        problems.append(f"{name} has an empty ISR")
    if len(set(isr)) != len(isr):
        problems.append(f"{name} lists an ISR member twice: {isr}")
    outside = [r for r in isr if r not in replica_set]
    if outside:
        problems.append(f"{name}: ISR members {outside} are not replicas {replicas}")
    if leader != NO_LEADER:
        if leader not in replica_set:
            problems.append(f"{name}: leader {leader} is not a replica {replicas}")
        if leader not in isr and partition.leader_recovery_state != RECOVERING:
            problems.append(f"{name}: leader {leader} is not in the ISR {isr} and the "
                            "partition is not RECOVERING from an unclean election")
    if partition.leader_recovery_state not in (RECOVERED, RECOVERING):
        problems.append(f"{name}: leader recovery state {partition.leader_recovery_state} "
                        "is neither RECOVERED (0) nor RECOVERING (1)")
    if partition.leader_epoch < 0 or partition.partition_epoch < 0:
        problems.append(f"{name}: negative epoch (leader epoch {partition.leader_epoch}, "
                        f"partition epoch {partition.partition_epoch})")
    for label, members in (("removing", partition.removing_replicas),
                           ("adding", partition.adding_replicas)):
        stray = [r for r in members if r not in replica_set]
        if stray:
            problems.append(f"{name}: {label} replicas {stray} are not replicas {replicas}")
    both = set(partition.removing_replicas) & set(partition.adding_replicas)
    if both:
        problems.append(f"{name}: replicas {sorted(both)} are both removing and adding")
    if partition.directories and len(partition.directories) != len(replicas):
        problems.append(f"{name}: {len(partition.directories)} directories for "
                        f"{len(replicas)} replicas")
    if registered_broker_ids is not None:
        unknown = [r for r in replicas if r not in registered_broker_ids]
        if unknown:
            problems.append(f"{name}: replicas {unknown} are not registered brokers")
    return problems
