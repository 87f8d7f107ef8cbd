"""Helpers for the controller scenario tests: a `Cluster` of brokers around the `Harness`,
reading back the records the controller wrote, and the invariants every committed image
must keep (checked after each step of the randomized test)."""

import random

from kraftcore.controller.replication import NewTopic, ReplicationControl
from kraftcore.errors import ControllerError
from kraftcore.metadata import records as R
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.partition import NO_LEADER, RECOVERING
from kraftcore.types import Uuid

from tests.controller.harness import Harness

__all__ = ["Cluster", "batch_records", "records_since", "batches_since", "names",
           "error_code", "invariant_violations", "isr_index_problems", "replayed_image",
           "NewTopic"]


# ------------------------------------------------------------------------ reading records

def batch_records(batch):
    """The metadata records of one FakeRaft batch (none for a control batch)."""
    return [record for _, record, _ in R.decode_batch(batch.data, skip_control=True)]


def batches_since(raft, mark=0):
    """The records of every batch proposed since `mark` (a `len(raft.batches)`), one list per
    batch; control batches are left out."""
    out = []
    for batch in raft.batches[mark:]:
        if not batch.control:
            out.append(batch_records(batch))
    return out


def records_since(raft, mark=0):
    """Every metadata record proposed since `mark`, flattened."""
    return [record for batch in batches_since(raft, mark) for record in batch]


def names(records):
    return [type(r).__name__ for r in records]


def error_code(future):
    """The Kafka error code a finished future failed with (None when it succeeded)."""
    exc = future.exception(timeout=0)
    if exc is None:
        return None
    if not isinstance(exc, ControllerError):
        raise AssertionError(f"the future failed with a non-controller error: {exc!r}")
    return exc.code


# ------------------------------------------------------------------------------ a cluster

class Cluster:
    """A controller (`Harness`) with brokers 0..n-1 registered and unfenced, the bootstrap
    records committed. Broker-side knowledge (incarnation, epoch) is kept here."""

    def __init__(self, brokers=3, seed=0, racks=None, unfence=True, **config):
        self.h = Harness(seed=seed, **config)
        self.h.commit()  # the activation's FeatureLevelRecord
        self.rng = random.Random(seed + 1000)
        self.incarnations = {}
        self.epochs = {}
        for b in range(brokers):
            self.register(b, rack=None if racks is None else racks[b])
        if unfence:
            for b in range(brokers):
                self.heartbeat(b)

    # shortcuts
    @property
    def controller(self):
        return self.h.controller

    @property
    def raft(self):
        return self.h.raft

    @property
    def image(self):
        return self.h.image

    @property
    def working(self):
        return self.h.controller.working

    def mark(self):
        return len(self.raft.batches)

    def batches_since(self, mark):
        return batches_since(self.raft, mark)

    def records_since(self, mark):
        return records_since(self.raft, mark)

    def committed_offset(self):
        """The last committed offset (what a caught-up broker has replayed)."""
        return self.controller.loader.next_offset - 1

    # brokers
    def register(self, broker_id, incarnation=None, commit=True, **kwargs):
        if incarnation is None:
            incarnation = self.incarnations.get(broker_id) or Uuid.random(self.rng)
        self.incarnations[broker_id] = incarnation
        future = self.h.call("register_broker", broker_id, incarnation, commit=False,
                             **kwargs)
        if commit:
            self.h.commit()
        if future.done() and future.exception(timeout=0) is None:
            self.epochs[broker_id] = future.result(timeout=0).broker_epoch
        return future.result(timeout=0) if commit else future

    def new_incarnation(self, broker_id, commit=True, **kwargs):
        return self.register(broker_id, Uuid.random(self.rng), commit=commit, **kwargs)

    def heartbeat(self, broker_id, offset=None, epoch=None, commit=True, **kwargs):
        """A heartbeat reporting `offset` (default: everything written so far)."""
        if offset is None:
            offset = self.raft.next_offset() - 1
        if epoch is None:
            epoch = self.epochs[broker_id]
        return self.h.call("broker_heartbeat", broker_id, epoch, metadata_offset=offset,
                           commit=commit, **kwargs)

    def keep_alive(self, *broker_ids):
        for b in broker_ids:
            self.heartbeat(b)

    def fence(self, broker_id):
        return self.heartbeat(broker_id, want_fence=True)

    # topics
    def create(self, *topics, commit=True):
        """Create topics given as NewTopic or (name, partitions, rf); returns the results."""
        topics = [t if isinstance(t, NewTopic) else NewTopic(*t) for t in topics]
        return self.h.call("create_topics", topics, commit=commit)

    def topic(self, name, image=None):
        return (image or self.image).topic(name)

    def partition(self, name, pid=0, image=None):
        return self.topic(name, image).partitions[pid]

    def leaders(self, name, image=None):
        topic = self.topic(name, image)
        return {pid: p.leader for pid, p in sorted(topic.partitions.items())}


# ----------------------------------------------------------------------------- invariants

def invariant_violations(image, leader_epochs=None):
    """The invariants `image` breaks (an empty list when none), as readable strings:

    * the ISR is a subset of the replicas;
    * every replica is a registered broker; a leader is an active broker (registered,
      unfenced, not in controlled shutdown);
    * no ISR holds a fenced (or unregistered) broker (replication.py's rule);
    * the leader is in the ISR unless the partition is RECOVERING (unclean election);
    * with `leader_epochs` (a dict kept across calls), no leader epoch decreases.
    """
    problems = []
    brokers = image.brokers
    for tid, topic in image.topics.items():
        for pid, p in topic.partitions.items():
            where = f"{topic.name}-{pid}"
            replicas = set(p.replicas)
            if not set(p.isr) <= replicas:
                problems.append(f"{where}: ISR {p.isr} is not within replicas {p.replicas}")
            unknown = [r for r in p.replicas if r not in brokers]
            if unknown:
                problems.append(f"{where}: replicas {unknown} are not registered brokers")
            fenced = [r for r in p.isr if r not in brokers or brokers[r].fenced]
            if fenced:
                problems.append(f"{where}: ISR {p.isr} holds fenced or unregistered brokers "
                                f"{fenced} (leader {p.leader})")
            if p.leader != NO_LEADER:
                leader = brokers.get(p.leader)
                if leader is None or leader.fenced or leader.in_controlled_shutdown:
                    problems.append(f"{where}: leader {p.leader} is not an active broker "
                                    f"(registration: {leader})")
                if p.leader not in p.isr and p.leader_recovery_state != RECOVERING:
                    problems.append(f"{where}: leader {p.leader} is outside the ISR {p.isr} "
                                    "and the partition is not RECOVERING")
            if leader_epochs is not None:
                key = (tid, pid)
                before = leader_epochs.get(key)
                if before is not None and p.leader_epoch < before:
                    problems.append(f"{where}: leader epoch went back from {before} to "
                                    f"{p.leader_epoch}")
                leader_epochs[key] = p.leader_epoch
    return problems


def _normalized(index):
    return {b: set(keys) for b, keys in index.items() if keys}


def isr_index_problems(controller):
    """How the active controller's ISR index (and leaderless set) differs from one rebuilt
    from its working image; [] when they agree or the controller is not active."""
    if not controller.active:
        return []
    fresh = ReplicationControl(controller)
    fresh.on_activate()
    problems = []
    kept, rebuilt = _normalized(controller.replication.isr_index), _normalized(fresh.isr_index)
    if kept != rebuilt:
        problems.append(f"ISR index {kept} != rebuilt {rebuilt}")
    if set(controller.replication.leaderless) != set(fresh.leaderless):
        problems.append(f"leaderless {set(controller.replication.leaderless)} != rebuilt "
                        f"{set(fresh.leaderless)}")
    return problems


def replayed_image(raft):
    """The image a fresh loader builds from the committed batches (what a standby or a
    broker sees), to compare with the active controller's committed image."""
    loader = MetadataLoader()
    loader.apply(raft.batches[:raft.committed])
    return loader.image
