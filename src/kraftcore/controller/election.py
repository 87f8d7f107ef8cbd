"""Partition leader election and ISR changes: the `PartitionChangeRecord` a controller
writes when a partition's ISR, replicas or leader must change (kafka-facts §8.4, Kafka's
`PartitionChangeBuilder`; fencing and unfencing flows of §8.3).

This module owns the choice of a partition's leader. It reads a `PartitionRecord`, never
changes it, and returns the change record to append (or None when nothing would change);
`kraftcore.metadata.partition.apply_change` replays it. It reads no clock and no global state.

Who may lead. `is_acceptable(broker_id) -> bool` says whether a broker is active: registered,
unfenced and not in controlled shutdown (`active_ids.__contains__` is a fine, fast choice).
A broker is a *valid* leader when it is acceptable and in the target ISR.

The election, in order (Kafka's `electAnyLeader` / `electPreferredLeader`):

* ONLINE (the default) and UNCLEAN: keep the current leader if it is valid; otherwise the
  first valid replica in replica order; otherwise, for UNCLEAN (or `unclean_allowed=True`,
  the topic's `unclean.leader.election.enable`), the first acceptable replica in replica
  order even though it is not in the ISR; otherwise no leader (-1).
* PREFERRED: replicas[0] if it is valid; otherwise keep the current leader if valid;
  otherwise the first valid replica; otherwise -1. A preferred election never falls back to
  an unclean leader, as in Kafka.

What the record holds:

* any leader change writes `Leader` (so the leader epoch grows on replay);
* an unclean leader makes the ISR [leader] and, with `unclean_recovery` (Kafka from
  MV 3.2-IV0), `LeaderRecoveryState` RECOVERING until that leader reports it recovered;
* otherwise the ISR is written when the target ISR differs from the current one **and is
  not empty**. Without ELR Kafka never writes an empty ISR: when the last ISR member is
  fenced, shut down or unregistered (and no unclean election happens), the record only sets
  Leader = -1 and the ISR stays [that broker]. That stale member is what lets the partition
  come back cleanly: when the broker is unfenced, `elect_for_leaderless` finds it in the ISR
  and makes it the leader again. So "no ISR contains a fenced broker" does NOT hold for
  leaderless partitions; what holds is "a leader is always acceptable and in the ISR (or
  RECOVERING after an unclean election)". `empty_isr_allowed=True` (taken by
  `build_change` and `remove_from_isr`) switches to the other policy: the empty target ISR
  is written, so no ISR ever holds a removed broker, and such a partition gets a leader
  back only through an unclean election (Kafka allows an empty ISR only with ELR enabled);
* a reassignment (removing / adding replicas) completes when the target ISR holds every
  adding replica (and some member is left once the removing ones are dropped): the replicas
  and the ISR lose the removing replicas, and both lists are cleared. `Replicas`,
  `RemovingReplicas`, `AddingReplicas` are written when they differ from the current ones;
  when `Replicas` changes the `Directories` are written too (staying replicas keep theirs,
  new ones are unassigned), unless the partition carries none;
* when the replicas lose a member and the leader does not change, `Leader` is set to the
  current leader, to bump the leader epoch (Kafka's reassignment bump);
* a record that would change nothing is not built: the result is None.

ELR (KIP-966, `eligible.leader.replicas.enable`) is off by default in Kafka and not
implemented here: `EligibleLeaderReplicas` and `LastKnownElr` are carried through untouched
and never written, and the "last known leader" step of the election does not exist.

Deliberate differences from Kafka:

* the ISR-shrink leader-epoch bump of metadata versions below 3.6-IV0 is not modelled
  (records are written for the current metadata version);
* the leader acceptor ignores directory (JBOD) failures: `is_acceptable` is the whole test;
* a replica added by a reassignment gets the unassigned directory; Kafka asks for the
  broker's default directory (its only one, when it has exactly one);
* if an unclean election picks the current leader (only possible when a caller's target ISR
  drops an acceptable leader), the ISR still becomes [leader] and the state RECOVERING, so a
  leader is never outside its ISR unless RECOVERING; Kafka would write the target ISR;
* when an unclean election and a requested `target_leader_recovery_state` meet in one
  record, the unclean election's RECOVERING wins (a leader that may have lost data must not
  be marked RECOVERED by the same change).

Cost: the controller calls these once per partition when a broker fails, so they allocate
only the result (built by `change_record`, not the keyword constructor) and test
acceptability inline; about 1 µs per call.
"""

from kraftcore.errors import ControllerError
from kraftcore.metadata.partition import (
    NO_LEADER, NO_LEADER_CHANGE, NO_RECOVERY_STATE_CHANGE, RECOVERED, RECOVERING,
    change_record, realign_directories,
)
from kraftcore.protocol.error_codes import ErrorCode

__all__ = [
    "ONLINE", "PREFERRED", "UNCLEAN", "build_change", "remove_from_isr",
    "elect_for_leaderless", "elect_leader",
]

ONLINE = "online"
PREFERRED = "preferred"
UNCLEAN = "unclean"
_NOBODY = -1  # a broker id no replica has: "no broker removed / added"


def build_change(partition, *, is_acceptable, target_isr=None, target_replicas=None,
                 target_removing=None, target_adding=None, target_leader_recovery_state=None,
                 election=ONLINE, unclean_allowed=False, unclean_recovery=True,
                 empty_isr_allowed=False):
    """The change that moves `partition` to the targets and elects its leader, as
    `(record, unclean)`: `record` is a `PartitionChangeRecord` or None when nothing would
    change; `unclean` is True when the chosen leader was not in the ISR (data may be lost).

    Targets default to the partition's current values. `election` is ONLINE, PREFERRED or
    UNCLEAN; `unclean_allowed=True` makes an ONLINE election behave as UNCLEAN (the topic's
    `unclean.leader.election.enable`). `unclean_recovery=False` leaves the leader recovery
    state alone on an unclean election (metadata versions before 3.2-IV0).
    `target_leader_recovery_state` (RECOVERED / RECOVERING) is what an AlterPartition from
    the leader asks for. `empty_isr_allowed=True` writes an empty target ISR instead of
    keeping the current one. See the module doc for the rules.

    Explicit targets are checked: replicas non-empty without duplicates, the ISR a subset of
    the replicas without duplicates, removing and adding replicas among the replicas and
    disjoint. A violation raises ValueError (the caller validates requests first, with the
    error code its response needs).
    """
    if election == ONLINE:
        preferred = False
        unclean_ok = unclean_allowed
    elif election == UNCLEAN:
        preferred = False
        unclean_ok = True
    elif election == PREFERRED:
        preferred = True
        unclean_ok = False
    else:
        raise ValueError(f"unknown election {election!r}; use {ONLINE!r}, {PREFERRED!r} "
                         f"or {UNCLEAN!r}")
    if (target_isr is None and target_replicas is None and target_removing is None
            and target_adding is None):
        isr = partition.isr
        replicas = partition.replicas
        removing = partition.removing_replicas
        adding = partition.adding_replicas
    else:
        isr = partition.isr if target_isr is None else list(target_isr)
        replicas = partition.replicas if target_replicas is None else list(target_replicas)
        removing = (partition.removing_replicas if target_removing is None
                    else list(target_removing))
        adding = partition.adding_replicas if target_adding is None else list(target_adding)
        _check_targets(partition, isr, replicas, removing, adding)
    if target_leader_recovery_state not in (None, RECOVERED, RECOVERING):
        raise ValueError(f"target leader recovery state {target_leader_recovery_state!r} is "
                         f"neither RECOVERED ({RECOVERED}) nor RECOVERING ({RECOVERING})")
    return _build(partition, is_acceptable, _NOBODY, _NOBODY, isr, replicas, removing, adding,
                  target_leader_recovery_state, preferred, unclean_ok, unclean_recovery,
                  empty_isr_allowed)


def remove_from_isr(partition, broker_id, is_acceptable, unclean_allowed=False, *,
                    unclean_recovery=True, empty_isr_allowed=False):
    """The change that takes `broker_id` out of the partition's ISR and away from its
    leadership (the broker is fenced, enters controlled shutdown, or is unregistered;
    Kafka's `generateLeaderAndIsrUpdates` with a broker to remove), or None.

    `broker_id` is never acceptable here, whatever `is_acceptable` says. When it is the last
    ISR member the ISR is left as it is and the leader becomes -1 (Kafka without ELR), unless
    `unclean_allowed` lets another acceptable replica lead uncleanly; with
    `empty_isr_allowed` the ISR becomes empty instead (module doc)."""
    isr = partition.isr
    target_isr = [r for r in isr if r != broker_id]
    return _build(partition, is_acceptable, broker_id, _NOBODY, target_isr, partition.replicas,
                  partition.removing_replicas, partition.adding_replicas, None, False,
                  unclean_allowed, unclean_recovery, empty_isr_allowed)[0]


def elect_for_leaderless(partition, broker_id, is_acceptable, unclean_allowed=False, *,
                         unclean_recovery=True):
    """The change that gives a leaderless partition a leader now that `broker_id` is being
    unfenced (Kafka's `handleBrokerUnfenced`), or None when the partition has a leader or
    still nobody can lead it.

    `broker_id` counts as acceptable even if `is_acceptable` does not know it yet (it is
    unfenced by the same batch of records). The ISR is not changed (except by an unclean
    election), so the broker leads only if it is in the ISR; another active ISR member is
    just as good, and with `unclean_allowed` any acceptable replica may lead. Kafka runs this
    over every leaderless partition, not only those the broker replicates."""
    if partition.leader != NO_LEADER:
        return None
    return _build(partition, is_acceptable, _NOBODY, broker_id, partition.isr,
                  partition.replicas, partition.removing_replicas, partition.adding_replicas,
                  None, False, unclean_allowed, unclean_recovery, False)[0]


def elect_leader(partition, election, is_acceptable, *, unclean_recovery=True):
    """The change an explicit ElectLeaders request for one partition makes (Kafka's
    `ReplicationControlManager.electLeader`); `election` is PREFERRED or UNCLEAN.

    Raises `ControllerError` with:

    * ELECTION_NOT_NEEDED (84): PREFERRED and the leader already is replicas[0], or UNCLEAN
      and the partition has a leader;
    * PREFERRED_LEADER_NOT_AVAILABLE (80): a PREFERRED election changes nothing (the
      preferred replica is not an acceptable ISR member and the leader stays);
    * ELIGIBLE_LEADERS_NOT_AVAILABLE (83): an UNCLEAN election finds no acceptable replica.
    """
    preferred_replica = partition.replicas[0] if partition.replicas else NO_LEADER
    if election == PREFERRED:
        if partition.leader == preferred_replica:
            raise ControllerError(
                ErrorCode.ELECTION_NOT_NEEDED,
                f"partition {partition.topic_id}-{partition.partition_id} is already led by "
                f"its preferred replica {preferred_replica}")
    elif election == UNCLEAN:
        if partition.leader != NO_LEADER:
            raise ControllerError(
                ErrorCode.ELECTION_NOT_NEEDED,
                f"partition {partition.topic_id}-{partition.partition_id} has a leader "
                f"({partition.leader}); an unclean election only helps leaderless partitions")
    else:
        raise ValueError(f"ElectLeaders takes {PREFERRED!r} or {UNCLEAN!r}, not {election!r}")
    record, _ = build_change(partition, is_acceptable=is_acceptable, election=election,
                             unclean_recovery=unclean_recovery)
    if record is None:
        if election == PREFERRED:
            raise ControllerError(
                ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                f"preferred replica {preferred_replica} of partition "
                f"{partition.topic_id}-{partition.partition_id} cannot lead: it is not an "
                f"active member of the ISR {partition.isr}; retry once it has caught up")
        raise ControllerError(
            ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"no replica of partition {partition.topic_id}-{partition.partition_id} "
            f"({partition.replicas}) is active; start or unfence one of them and retry")
    return record


# -------------------------------------------------------------------------------- the core

def _check_targets(partition, isr, replicas, removing, adding):
    name = f"partition {partition.topic_id}-{partition.partition_id}"
    if not replicas:
        raise ValueError(f"{name}: the target replica list is empty")
    replica_set = set(replicas)
    if len(replica_set) != len(replicas):
        raise ValueError(f"{name}: target replicas {replicas} list a broker twice")
    if len(set(isr)) != len(isr):
        raise ValueError(f"{name}: target ISR {isr} lists a broker twice")
    for label, members in (("ISR", isr), ("removing replicas", removing),
                           ("adding replicas", adding)):
        stray = [r for r in members if r not in replica_set]
        if stray:
            raise ValueError(f"{name}: target {label} {members} name non-replicas {stray} "
                             f"(replicas {replicas})")
    both = set(removing) & set(adding)
    if both:
        raise ValueError(f"{name}: brokers {sorted(both)} are both removing and adding")


def _complete_reassignment(isr, replicas, removing, adding):
    """(isr, replicas) once the reassignment is complete, else None: every adding replica
    is in the ISR that is left after dropping the removing replicas, and that ISR and the
    replica list are not empty."""
    if removing:
        isr = [r for r in isr if r not in removing]
        replicas = [r for r in replicas if r not in removing]
        if not isr or not replicas:
            return None
    for r in adding:
        if r not in isr:
            return None
    return isr, replicas


def _build(partition, accept, removed, added, isr, replicas, removing, adding,
           recovery_target, preferred, unclean_ok, unclean_recovery, empty_ok):
    """`(record or None, unclean)`. A broker may lead when it is not `removed` and is
    `added` or accepted; it is valid when it may lead and is in `isr`. The three election
    loops spell that test out inline: this runs once per partition on a broker failure."""
    if removing or adding:
        completed = _complete_reassignment(isr, replicas, removing, adding)
        if completed is not None:
            isr, replicas = completed
            removing = []
            adding = []

    leader = partition.leader
    new_leader = NO_LEADER
    unclean = False
    first = replicas[0] if replicas else NO_LEADER
    if (preferred and first in isr and first != removed
            and (first == added or accept(first))):
        new_leader = first
    elif leader in isr and leader != removed and (leader == added or accept(leader)):
        new_leader = leader
    else:
        for r in replicas:
            if r in isr and r != removed and (r == added or accept(r)):
                new_leader = r
                break
        else:
            if unclean_ok:
                for r in replicas:
                    if r != removed and (r == added or accept(r)):
                        new_leader = r
                        unclean = True
                        break

    record_leader = NO_LEADER_CHANGE if new_leader == leader else new_leader
    record_recovery = NO_RECOVERY_STATE_CHANGE
    if unclean:
        record_isr = [new_leader]
        if unclean_recovery and partition.leader_recovery_state != RECOVERING:
            record_recovery = RECOVERING
    elif (isr or empty_ok) and isr != partition.isr:
        record_isr = isr
    else:
        record_isr = None

    old_replicas = partition.replicas
    record_replicas = record_directories = None
    if replicas is not old_replicas and replicas != old_replicas:
        record_replicas = replicas
        if partition.directories:
            record_directories = realign_directories(old_replicas, partition.directories,
                                                     replicas)
        if record_leader == NO_LEADER_CHANGE:
            for r in old_replicas:
                if r not in replicas:
                    record_leader = leader  # a replica left: bump the leader epoch
                    break
    old = partition.removing_replicas
    record_removing = None if removing is old or removing == old else removing
    old = partition.adding_replicas
    record_adding = None if adding is old or adding == old else adding
    if (record_recovery == NO_RECOVERY_STATE_CHANGE and recovery_target is not None
            and recovery_target != partition.leader_recovery_state):
        record_recovery = recovery_target

    if (record_leader == NO_LEADER_CHANGE and record_isr is None and record_replicas is None
            and record_removing is None and record_adding is None
            and record_recovery == NO_RECOVERY_STATE_CHANGE):
        return None, False
    return change_record(partition.partition_id, partition.topic_id, record_isr,
                         record_leader, record_replicas, record_removing, record_adding,
                         record_recovery, record_directories), unclean
