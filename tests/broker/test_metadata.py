"""BrokerMetadata: committed batches and snapshots become published images, the reported
metadata offset never runs ahead of the image, snapshots go through the Raft core, and a
broker restarted from its snapshot plus log tail reaches the image of one that replayed the
whole log (a real observer `RaftCore` over `MemoryStorage`, fed by a one-voter leader)."""

import pytest

from kraftcore.broker.metadata import BrokerMetadata, MetadataUpdate, visible_brokers
from kraftcore.errors import InvalidOffsetError, MetadataError
from kraftcore.metadata import records as R
from kraftcore.raft import control as C
from kraftcore.metadata.image import CONFIG_TOPIC, EMPTY_IMAGE, METADATA_VERSION
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import encode_snapshot
from kraftcore.types import Uuid
from kraftcore.raft.types import CommittedBatch, Ready
from kraftcore.types import SnapshotId
from kraftcore.raft.memory import MemoryStorage

from tests.harness.quorum import Cluster, StateMachine

TS = 1_700_000_000_000
T1 = Uuid.from_ints(1, 1)


def mv(level=21):
    return R.FeatureLevelRecord(name=METADATA_VERSION, feature_level=level)


def broker(broker_id, fenced=False, shutting=False, epoch=None):
    return R.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=Uuid.from_ints(0xB0, broker_id),
        broker_epoch=broker_id if epoch is None else epoch,
        end_points=[R.RegisterBrokerRecord.BrokerEndpoint(
            name="PLAINTEXT", host="localhost", port=9090 + broker_id, security_protocol=0)],
        features=[], rack=None, fenced=fenced, in_controlled_shutdown=shutting,
        log_dirs=[Uuid.from_ints(0xD1, broker_id)])


def config(name, value):
    return R.ConfigRecord(resource_type=CONFIG_TOPIC, resource_name="t", name=name,
                          value=value)


class Log:
    """Contiguous CommittedBatch objects, as a Raft core delivers them."""

    def __init__(self, epoch=1):
        self.offset = 0
        self.epoch = epoch

    def data(self, *records):
        data = R.encode_batch(list(records), base_offset=self.offset, leader_epoch=self.epoch,
                              timestamp=TS + self.offset)
        batch = CommittedBatch(self.offset, self.offset + len(records) - 1, self.epoch, False,
                               data)
        self.offset += len(records)
        return batch

    def control(self):
        data = C.encode_control_batch([C.LeaderChangeMessage(version=0, leader_id=1)],
                                      base_offset=self.offset, leader_epoch=self.epoch,
                                      timestamp=TS)
        batch = CommittedBatch(self.offset, self.offset, self.epoch, True, data)
        self.offset += 1
        return batch


class Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, image, update):
        self.calls.append((image, update))


# ============================================================================ by hand


def test_commits_publish_images_and_move_the_metadata_offset():
    meta = BrokerMetadata()
    seen = Recorder()
    meta.add_publisher(seen)
    assert seen.calls == [] and meta.metadata_offset == -1  # nothing to catch up with
    log = Log()
    b1, b2 = log.data(mv(), broker(1)), log.data(config("a", "1"))
    image = meta.on_commits([b1, b2])
    assert image is meta.image and meta.metadata_offset == 2
    assert seen.calls == [(image, MetadataUpdate(EMPTY_IMAGE, None, 0, 2))]
    after = meta.on_commits([log.control()])
    assert meta.metadata_offset == 3
    assert seen.calls[-1] == (after, MetadataUpdate(image, None, 3, 3))
    assert meta.on_commits([]) is after and len(seen.calls) == 2


def test_publishers_run_in_order_and_a_late_one_catches_up():
    meta = BrokerMetadata()
    order = []
    first = lambda image, update: order.append(("first", image.end_offset))  # noqa: E731
    meta.add_publisher(first)
    log = Log()
    meta.on_commits([log.data(mv(), broker(1))])
    late = Recorder()
    meta.add_publisher(late)
    assert late.calls == [(meta.image, MetadataUpdate(EMPTY_IMAGE, None, 0, 1))]
    quiet = Recorder()
    meta.add_publisher(quiet, catch_up=False)
    second = lambda image, update: order.append(("second", image.end_offset))  # noqa: E731
    meta.add_publisher(second)
    meta.on_commits([log.data(config("a", "1"))])
    assert order == [("first", 2), ("second", 2), ("first", 3), ("second", 3)]
    assert len(quiet.calls) == 1 and quiet.calls[0][1].base_offset == 2
    with pytest.raises(ValueError):
        meta.add_publisher(first)
    meta.remove_publisher(first)
    meta.on_commits([log.data(config("a", "2"))])
    assert order[-1] == ("second", 4) and ("first", 4) not in order


def test_the_offset_stays_before_an_open_metadata_transaction():
    meta = BrokerMetadata()
    seen = Recorder()
    meta.add_publisher(seen)
    log = Log()
    meta.on_commits([log.data(mv(), broker(1))])
    assert meta.metadata_offset == 1
    meta.on_commits([log.data(R.BeginTransactionRecord(name="tx"), config("a", "1"))])
    # Consumed through offset 3, but the image (and what the broker may report) ends at 1.
    assert meta.loader.next_offset == 4 and meta.metadata_offset == 1
    assert len(seen.calls) == 1
    meta.on_commits([log.data(config("b", "2"), R.EndTransactionRecord())])
    assert meta.metadata_offset == 5
    assert meta.image.configs[(CONFIG_TOPIC, "t")] == {"a": "1", "b": "2"}
    assert seen.calls[-1][1] == MetadataUpdate(seen.calls[0][0], None, 2, 5)


def test_gaps_are_refused():
    meta = BrokerMetadata()
    log = Log()
    meta.on_commits([log.data(mv())])
    log.offset += 1
    with pytest.raises(MetadataError):
        meta.on_commits([log.data(config("a", "1"))])
    assert meta.metadata_offset == 0


def test_loading_a_snapshot_replaces_the_image():
    log = Log()
    source = MetadataLoader()
    source.apply([log.data(mv(), broker(1), broker(2, fenced=True)), log.control()])
    data = encode_snapshot(source.image)
    meta = BrokerMetadata()
    meta.on_commits([Log().data(mv(), config("x", "y"))])
    seen = Recorder()
    meta.add_publisher(seen, catch_up=False)
    before = meta.image
    image = meta.on_load_snapshot(SnapshotId(4, 1), data, now_ms=7)
    assert image.same_state(source.image) and meta.metadata_offset == 3
    assert seen.calls == [(image, MetadataUpdate(before, SnapshotId(4, 1), 0, 3))]
    assert meta.snapshots_loaded == 1
    meta.on_commits([log.data(config("a", "1"))])  # the log tail follows at offset 4
    assert meta.metadata_offset == 4


def test_on_ready_reads_the_snapshot_from_storage_first_then_the_commits():
    log = Log()
    storage = MemoryStorage()
    first = log.data(mv(), broker(1))
    storage.append_as_follower(first.data)
    snap = MetadataLoader()
    snap.apply([first])
    storage.write_snapshot(SnapshotId(2, 1), encode_snapshot(snap.image))
    tail = log.data(broker(2))
    meta = BrokerMetadata()
    ready = Ready(1, commits=[tail], load_snapshot=SnapshotId(2, 1),
                  leader_change=("leader", 1))
    image = meta.on_ready(ready, storage)
    assert sorted(image.brokers) == [1, 2] and meta.metadata_offset == 2
    assert meta.leader == ("leader", 1)
    missing = Ready(2, load_snapshot=SnapshotId(9, 1))
    with pytest.raises(MetadataError):
        meta.on_ready(missing, storage)


def test_visible_brokers_leave_out_fenced_and_shutting_down_brokers():
    loader = MetadataLoader()
    image = loader.apply([Log().data(mv(), broker(3), broker(1), broker(2, fenced=True),
                                     broker(4, shutting=True))])
    assert [b.broker_id for b in visible_brokers(image)] == [1, 3]
    assert visible_brokers(EMPTY_IMAGE) == []


class FakeCore:
    def __init__(self):
        self.fail = True
        self.created = []

    def create_snapshot(self, end_offset, data):
        if self.fail:
            raise InvalidOffsetError(f"offset {end_offset} is not committed yet")
        self.created.append((end_offset, data))
        return SnapshotId(end_offset, 1)


def test_maybe_snapshot_waits_until_due_and_retries_when_the_core_is_not_ready():
    meta = BrokerMetadata(snapshot_interval_bytes=1, snapshot_interval_ms=0)
    core = FakeCore()
    assert meta.maybe_snapshot(0, core) is None  # nothing applied: not due
    log = Log()
    meta.on_commits([log.data(mv(), broker(1))])
    assert meta.maybe_snapshot(10, core) is None
    assert meta.snapshots_deferred == 1 and meta.loader.snapshot_due(10)  # still due
    core.fail = False
    assert meta.maybe_snapshot(20, core) == SnapshotId(2, 1)
    assert core.created == [(2, encode_snapshot(meta.image))]
    assert meta.snapshots_written == 1 and not meta.loader.snapshot_due(20)
    assert meta.loader.last_snapshot_ms == 20
    assert meta.maybe_snapshot(30, core) is None and len(core.created) == 1


# ============================================================================ with RaftCore


class BrokerApp:
    """The broker's state machine in the cluster: each Ready goes to its BrokerMetadata,
    and is kept for the test to look at."""

    def __init__(self, now_ms, publishers=()):
        self.meta = BrokerMetadata(snapshot_interval_bytes=1, snapshot_interval_ms=0,
                                   now_ms=now_ms)
        for publisher in publishers:
            self.meta.add_publisher(publisher)
        self.readys = []

    def on_ready(self, ready, storage, now_ms):
        self.readys.append(ready)
        self.meta.on_ready(ready, storage, now_ms)


class Quorum:
    """Node 1, the only voter, leads; node 2, the broker, observes it with a real RaftCore
    over MemoryStorage: a `Cluster` of the test harness (tests/harness/quorum.py), whose
    every Ready is handled as kraftcore.raft.types says, the broker's going to its
    BrokerMetadata first."""

    def __init__(self, observers_flush):
        self.publishers = ()  # what the broker's next BrokerMetadata publishes to
        self.cluster = Cluster(voters=(1,), observers=(2,), state_machine=self._state_machine,
                               node_config={2: dict(observers_flush=observers_flush)})
        self.cluster.run_until_leader()

    def _state_machine(self, node_id, now_ms):
        return BrokerApp(now_ms, self.publishers) if node_id == 2 else StateMachine()

    @property
    def now(self):
        return self.cluster.now

    @property
    def broker(self):
        return self.cluster.core(2)

    @property
    def broker_storage(self):
        return self.cluster.nodes[2].storage

    @property
    def meta(self):
        return self.cluster.nodes[2].sm.meta

    @property
    def readys(self):
        """The broker's Readys since it last started."""
        return self.cluster.nodes[2].sm.readys

    def run_until(self, predicate, limit_ms=20_000):
        self.cluster.run_until(lambda cluster: predicate(), limit_ms)

    def propose(self, *records):
        versions = [r.valid_versions[1] for r in records]
        last = self.cluster.propose(1, R.encode_values(list(records), versions))
        self.run_until(lambda: self.meta.metadata_offset >= last)
        return last

    def crash_broker(self):
        self.cluster.crash(2)

    def start_broker(self, publishers=()):
        """Restart the broker: a new core and BrokerMetadata (publishing to `publishers`
        from its first image on) over the storage the crash left."""
        self.publishers = publishers
        self.cluster.restart(2)

    def replayed_everything(self):
        """The image of a broker that applied the leader's whole log."""
        loader = MetadataLoader()
        loader.apply(self.cluster.nodes[1].storage.batches())
        return loader.image


def fill(q):
    q.propose(mv())
    q.propose(broker(1), broker(2))
    q.propose(R.TopicRecord(name="t", topic_id=T1))
    q.propose(R.PartitionRecord(partition_id=0, topic_id=T1, replicas=[1, 2], isr=[1, 2],
                                leader=1, leader_epoch=0, partition_epoch=0))


@pytest.mark.parametrize("observers_flush", [True, False],
                         ids=["tail-flushed", "tail-lost"])
def test_restart_from_snapshot_and_log_tail_reaches_the_same_image(observers_flush):
    q = Quorum(observers_flush)
    fill(q)
    snapshot_id = q.meta.maybe_snapshot(q.now, q.broker)
    assert snapshot_id is not None
    assert snapshot_id.end_offset == q.meta.image.end_offset
    assert q.broker_storage.latest_snapshot_id() == snapshot_id
    assert q.meta.snapshots_written == 1
    # The log tail after the snapshot.
    q.propose(R.BrokerRegistrationChangeRecord(broker_id=2, broker_epoch=2, fenced=1))
    last = q.propose(config("retention.ms", "1000"), config("cleanup.policy", "compact"))
    full = q.replayed_everything()
    assert q.meta.image.same_state(full) and q.meta.metadata_offset == last
    if observers_flush:
        assert q.broker_storage.durable_end_offset > snapshot_id.end_offset

    q.crash_broker()
    tail_kept = q.broker_storage.log_end_offset
    assert (tail_kept > snapshot_id.end_offset) == observers_flush
    seen = Recorder()
    q.start_broker(publishers=[seen])
    q.run_until(lambda: q.meta.metadata_offset >= last)
    # The new core delivered the local snapshot first, then the tail.
    loads = [r.load_snapshot for r in q.readys if r.load_snapshot is not None]
    assert loads == [snapshot_id]
    first_commit = next(r.commits[0] for r in q.readys if r.commits)
    assert first_commit.base_offset == snapshot_id.end_offset
    assert seen.calls[0][1].snapshot_id == snapshot_id
    assert all(update.snapshot_id is None for _, update in seen.calls[1:])
    image = q.meta.image
    assert image.same_state(full)
    assert (image.end_offset, image.epoch) == (full.end_offset, full.epoch)
    assert [b.broker_id for b in visible_brokers(image)] == [1]


def test_snapshots_are_taken_through_the_core_and_the_log_start_follows():
    q = Quorum(observers_flush=True)
    fill(q)
    first = q.meta.maybe_snapshot(q.now, q.broker)
    q.propose(config("a", "1"))
    second = q.meta.maybe_snapshot(q.now, q.broker)
    assert first.end_offset < second.end_offset
    # The core keeps one snapshot interval of log: the start moved up to the first one.
    assert q.broker_storage.log_start_offset == first.end_offset
    assert q.broker_storage.snapshot_ids() == [first, second]
    assert q.meta.maybe_snapshot(q.now, q.broker) is None  # nothing new: not due
