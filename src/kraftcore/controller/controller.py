"""`QuorumController`: the active controller and its standbys (kafka-facts §8.1).

Every controller node runs one. All of its work happens in events of its `EventQueue`, one
at a time; the driver (the runtime's controller thread, or the simulator) feeds it inputs
and calls `run(now_ms)`:

* client operations (`register_broker`, `broker_heartbeat`, `create_topics`, ...) each
  return a `concurrent.futures.Future` and queue a write event;
* the Raft core's output: `on_commits(commits)`, `on_load_snapshot(snapshot_id, data)`,
  `on_leader_change()` — queued as events too, never run inside the call that delivers
  them (the Raft core may commit inside `propose`).

A write event, on the active controller: generate records and a result from the *working*
image (the committed image plus this controller's own uncommitted records), give the
records their offsets, replay them into the working image at once, and park the future
under the records' last offset. The future completes with the result only when the loader
has applied a committed batch at or past that offset.

The records of every write of one `run` go to Raft together, as one batch
(`raft.propose(values) -> last offset`) at the end of the run — or earlier when the next
write would take the batch past `batch_bytes_max` or `batch_records_max` — so a busy
controller pays for one batch (encoding, append, replication) per run rather than per
operation, as Kafka's batch accumulator does. A write's offsets are known before the
propose (`next_offset()`: the log end plus what is waiting), and the propose must end where
they said; if it fails or does not, the controller renounces, which fails every parked
future. An operation larger than one batch (a metadata transaction) goes out at once,
after what was waiting.

An operation that writes nothing (a refusal such as TOPIC_ALREADY_EXISTS, a registration
that changes nothing) read the working image, which a deposed controller that has not yet
heard of its successor still holds: answering at once could report a state the cluster
has left (a stale read). Such answers wait behind a *read barrier*: a NoOpRecord this
controller proposes after the read, in a barrier event queued behind it (one barrier
serves every read queued before it). If the barrier commits in this controller's epoch, no
later epoch had committed anything when the read happened — the voters that committed
the barrier fetched it from this leader after the read, and a majority of them would have
had to move to a new epoch first — so the answer is linearizable (the read-index idea of
the Raft thesis §6.4, with a log entry for the round trip). It also waits for every
earlier write of this controller (read your writes). Heartbeats, whose answers are
leases measured in time anyway, skip the barrier (`linearizable=False`): they complete at
once or with the last pending write, as in Kafka. Before metadata.version 3.3-IV1 (no
NoOpRecord) every operation behaves like a heartbeat.

Committed batches go through a `MetadataLoader` on every controller, active or standby, so
the committed image is always current and failover needs no reload. On the active
controller, a commit that ends where one of its writes ended, and holds only batches it
proposed, is *adopted*: the working image built then is the committed image, and the
batches are not replayed again.

The active controller is the only writer of metadata records in its epoch. A batch of its
epoch that it did not propose (another writer on its node, e.g. `RaftDriver.append`) is
replayed into the committed image, never adopted; if it holds anything but NoOpRecords,
the working image no longer tells the truth, and the controller renounces (the next active
controller starts from the committed image). `foreign_batches` counts such batches.

An operation that raises anything but `ControllerError` (a defect: operations only read
the working image) fails its own request with UNKNOWN_SERVER_ERROR, the exception as its
cause (`operation_failures` counts them); the next events run as usual.

Becoming active (`claim`): Raft says this node leads epoch E, and the committed image has
passed the epoch's start offset (so every record of earlier epochs is applied). The working
image is the committed one; an activation event goes ahead of everything queued: it writes
the bootstrap records when the log holds no metadata.version, aborts a metadata transaction
left open by the previous controller, starts every broker's session afresh and schedules
the periodic tasks (session expiry, NoOp writes).

Losing it (`renounce`): Raft moved to another leader or epoch, or a propose failed. Every
parked future fails with `NotControllerError` (its records may or may not commit later; it
was never promised), the working image falls back to the committed image, the soft state
(heartbeats) is dropped and the periodic tasks are cancelled.

The Raft side is any object with: `node_id`, `propose(values, *, timestamp_ms) -> last
offset` (raises `NotLeaderError`; the batch carries `timestamp_ms`, the time the controller
stamped its working image with, so that the image it adopts at commit and the image
every other node replays from the batch agree), `resign()`, `leader_and_epoch() -> LeaderAndEpoch`, `epoch_start_offset()`
(None unless leader), `next_offset()` (where the next proposal starts).
"""

import collections
import concurrent.futures
import random

from kraftcore.controller.cluster import ClusterControl
from kraftcore.controller.config import ControllerConfig
from kraftcore.controller.queue import EventQueue
from kraftcore.controller.replication import ReplicationControl
from kraftcore.controller.security import SecurityControl
from kraftcore.errors import (ControllerError, InvalidAppendError, MetadataError,
                              NotControllerError, NotLeaderError)
from kraftcore.metadata import records as R
from kraftcore.metadata.delta import MetadataDelta
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.snapshot import record_versions
from kraftcore.protocol.error_codes import ErrorCode

__all__ = ["QuorumController"]

_TRANSACTIONS_LEVEL = R.METADATA_VERSION_LEVELS["3.6-IV1"]
_NOOP_LEVEL = R.METADATA_VERSION_LEVELS["3.3-IV1"]
_MARKERS = frozenset((R.BeginTransactionRecord, R.EndTransactionRecord,
                      R.AbortTransactionRecord))


class QuorumController:
    def __init__(self, raft, *, config=None, rng=None, loader=None, now_ms=0):
        self.raft = raft
        self.node_id = raft.node_id
        self.config = config or ControllerConfig()
        self.rng = rng if rng is not None else random.Random(0)
        self.loader = loader or MetadataLoader(now_ms=now_ms)
        self.queue = EventQueue()
        self.cluster = ClusterControl(self)
        self.replication = ReplicationControl(self)
        self.security = SecurityControl(self)
        # The image write events read: the committed image plus our uncommitted records.
        self.working = self.loader.image
        self.active_epoch = None  # the epoch this node is active controller in, or None
        self._parked = []  # [(last offset, future, result)] in offset order
        self._last_written = -1  # the last offset this controller proposed in its epoch
        # (last offset, working image after it) of this epoch's writes not yet committed.
        self._written = collections.deque()
        self._now = now_ms
        self._barrier_waiting = []  # [(future, result)] of reads behind the next barrier
        self._batch = []  # values of this run's writes, proposed together (see `run`)
        self._batch_bytes = 0
        # (base offset, last offset) of the Raft batches this controller proposed in its
        # epoch and has not seen committed yet: what tells its own batches from others'.
        self._own = collections.deque()
        self.foreign_batches = 0
        self.writes = 0
        self.records_written = 0
        self.barriers = 0
        self.renounces = 0
        self.write_errors = 0
        self.operation_failures = 0

    def __repr__(self):
        role = f"active in epoch {self.active_epoch}" if self.active else "standby"
        return (f"QuorumController(node={self.node_id}, {role}, "
                f"committed={self.loader.next_offset}, parked={len(self._parked)})")

    @property
    def active(self):
        return self.active_epoch is not None

    @property
    def image(self):
        """The committed image."""
        return self.loader.image

    # ------------------------------------------------------------------ driver inputs

    def run(self, now_ms):
        """Run every due event, then propose what they wrote; returns the next deferred
        deadline (or None)."""
        self._now = now_ms
        with R.cyclic_gc_paused():
            deadline = self.queue.run(now_ms)
            self._propose_batch(now_ms)
        return deadline

    def next_offset(self):
        """The offset the next record written gets (the log end plus this run's batch)."""
        return self.raft.next_offset() + len(self._batch)

    def on_commits(self, commits):
        if commits:
            self.queue.append("commit", lambda now: self._handle_commits(commits, now),
                              bounded=False)

    def on_load_snapshot(self, snapshot_id, data):
        self.queue.append("load-snapshot",
                          lambda now: self._handle_load_snapshot(snapshot_id, data, now),
                          bounded=False)

    def on_leader_change(self):
        self.queue.append("leader-change", self._check_leadership, bounded=False)

    def _handle_commits(self, commits, now_ms):
        foreign = self._foreign(commits) if self.active else ()
        if foreign:
            # Batches another writer proposed on this node in this epoch (`RaftDriver.append`):
            # replayed, never adopted. Anything in them but NoOps would change the image
            # under the working image's feet: the controller steps down, and whoever is
            # active next starts from the committed image.
            self.foreign_batches += len(foreign)
            self._written.clear()
            self.loader.apply(commits)
            foreign_offsets = {batch.base_offset for batch in foreign}
            changed = next((t for batch, types in zip(commits, self.loader.applied_types)
                            if batch.base_offset in foreign_offsets
                            for t in types if t is not R.NoOpRecord), None)
            if changed is not None:
                self._renounce(now_ms, f"a {changed.__name__} it did not write was committed "
                               f"in its epoch {self.active_epoch}")
        elif not self._adopt_own_commits(commits):
            self.loader.apply(commits)
        committed = self.loader.next_offset - 1
        parked = self._parked
        done = 0
        while done < len(parked) and parked[done][0] <= committed:
            _, future, result = parked[done]
            if not future.done():
                future.set_result(result)
            done += 1
        if done:
            del parked[:done]
        if self.active and committed >= self._last_written and not self.loader.in_transaction:
            # Everything we wrote is committed: the committed image is the working image.
            self.working = self.loader.image
        self._check_leadership(now_ms)

    def _adopt_own_commits(self, commits):
        """On the active controller, committed batches of its own epoch are exactly the
        records it proposed and already replayed into the working image: when the commits
        end where one of its writes ended, the image it built then *is* the committed image,
        and replaying the batches again is skipped. Returns whether it adopted."""
        written = self._written
        if not self.active or not written or self.loader.in_transaction:
            return False
        last = commits[-1].last_offset
        if (commits[0].base_offset != self.loader.next_offset
                or any(batch.epoch != self.active_epoch for batch in commits)
                or written[0][0] > last):
            return False
        image = None
        adopted = []
        while written and written[0][0] <= last:
            offset, image, records = written.popleft()
            adopted += records
        if offset != last:
            written.clear()  # the commit ended inside a write: replay from here on
            return False
        self.loader.adopt(image, sum(len(batch.data) for batch in commits), adopted)
        return True

    def _foreign(self, commits):
        """The committed batches of this controller's epoch that it did not propose."""
        own = self._own
        foreign = []
        for batch in commits:
            while own and own[0][1] < batch.base_offset:
                own.popleft()
            if own and own[0] == (batch.base_offset, batch.last_offset):
                own.popleft()
            elif batch.epoch == self.active_epoch:
                foreign.append(batch)
        return foreign

    def _handle_load_snapshot(self, snapshot_id, data, now_ms):
        if self.active:
            raise MetadataError(f"the active controller (node {self.node_id}) was asked to "
                                f"load snapshot {snapshot_id}")
        self.loader.load_snapshot(snapshot_id, data, now_ms)
        self.working = self.loader.image

    # ------------------------------------------------------------------ leadership

    def _check_leadership(self, now_ms):
        leader = self.raft.leader_and_epoch()
        if self.active:
            if leader.leader_id != self.node_id or leader.epoch != self.active_epoch:
                self._renounce(now_ms, "leadership moved to "
                               f"{leader.leader_id} in epoch {leader.epoch}", resign=False)
            return
        if leader.leader_id != self.node_id:
            return
        start = self.raft.epoch_start_offset()
        if start is None or self.loader.next_offset <= start:
            return  # not caught up with the epoch's start yet: wait for more commits
        self._claim(leader.epoch, now_ms)

    def _claim(self, epoch, now_ms):
        self.active_epoch = epoch
        self.working = self.loader.image
        self._own.clear()
        self._last_written = self.loader.next_offset - 1
        self.replication.on_activate()
        self.queue.prepend("complete-activation", self._complete_activation, bounded=False)

    def _complete_activation(self, now_ms):
        if not self.active:
            return
        records = []
        if self.loader.in_transaction:
            records.append(R.AbortTransactionRecord(
                reason="the previous active controller left a transaction open"))
        if self.working.metadata_version() is None:
            # An empty log: the bootstrap records (format's bootstrap.checkpoint), or else
            # just the configured metadata.version.
            records += self.config.bootstrap_records or [R.FeatureLevelRecord(
                name=METADATA_VERSION, feature_level=self.config.bootstrap_metadata_version)]
        if records:
            self._write(records, None, None, now_ms)
        if not self.active:
            return
        self.cluster.on_activate(now_ms)
        self._schedule_noop(now_ms)

    def _renounce(self, now_ms, reason, resign=True):
        epoch = self.active_epoch
        self.active_epoch = None
        self.renounces += 1
        leader = self.raft.leader_and_epoch()
        controller_id = leader.leader_id if leader.leader_id != self.node_id else None
        error = NotControllerError(self.node_id, controller_id, reason)
        parked, self._parked = self._parked, []
        for _, future, _ in parked:
            if not future.done():
                future.set_exception(error)
        self.working = self.loader.image
        self._written.clear()
        self._own.clear()
        self._batch, self._batch_bytes = [], 0
        self.cluster.on_deactivate()
        self.replication.on_deactivate()
        self.queue.cancel_deferred("noop")
        if resign:
            try:
                self.raft.resign()
            except NotLeaderError:
                pass
        return epoch

    # ------------------------------------------------------------------ the write path

    def submit(self, name, generate, *, linearizable=True):
        """Queue a write event; `generate(image, now_ms) -> (records, result)` runs on the
        active controller's working image. Returns a Future of the result. A result with no
        records waits for a read barrier unless `linearizable` is False (see the module
        docstring)."""
        future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        try:
            self.queue.append(name, lambda now: self._run_write(generate, future, now,
                                                                linearizable))
        except ControllerError as exc:
            future.set_exception(exc)
        return future

    def _not_controller(self, reason="this node is a standby controller"):
        leader = self.raft.leader_and_epoch()
        controller_id = leader.leader_id if leader.leader_id != self.node_id else None
        return NotControllerError(self.node_id, controller_id, reason)

    def _run_write(self, generate, future, now_ms, linearizable=True):
        if not self.active:
            future.set_exception(self._not_controller())
            return
        try:
            records, result = generate(self.working, now_ms)
        except ControllerError as exc:
            future.set_exception(exc)
            return
        except Exception as exc:
            # A defect in an operation (they only read the working image): that request
            # fails, with the exception as its cause; the controller goes on.
            self.operation_failures += 1
            error = ControllerError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                    f"the operation failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            future.set_exception(error)
            return
        if len(records) > self.config.operation_records_max:
            future.set_exception(ControllerError(
                42, f"the operation would write {len(records)} records; the limit is "
                f"{self.config.operation_records_max}"))
            return
        if not records:
            level = self.working.metadata_version()
            if linearizable and level is not None and level >= _NOOP_LEVEL:
                if not self._barrier_waiting:
                    self.queue.append("read-barrier", self._write_barrier, bounded=False)
                self._barrier_waiting.append((future, result))
                return
            # Read your writes: wait for every write of this controller, parked or not
            # (session fencing, activation and NoOps write without a future).
            if self._last_written >= self.loader.next_offset:
                self._parked.append((self._last_written, future, result))
            else:
                future.set_result(result)
            return
        self._write(records, future, result, now_ms)

    def _write_barrier(self, now_ms):
        waiting, self._barrier_waiting = self._barrier_waiting, []
        if self.active:
            self.barriers += 1
            self._write([R.NoOpRecord()], None, None, now_ms)
        if self.active:
            self._parked += [(self._last_written, future, result)
                             for future, result in waiting]
            return
        # Deposed before the barrier, or its propose failed (and _write renounced).
        error = self._not_controller("leadership was lost before the read barrier committed")
        for future, _ in waiting:
            if not future.done():
                future.set_exception(error)

    def _write(self, records, future, result, now_ms):
        """Give `records` their offsets (in this run's batch, or proposed at once when they
        need a transaction), replay them into the working image, park `future`."""
        level = self.working.metadata_version()
        values = R.encode_values(records, record_versions(records, level))
        try:
            chunks = self._chunks(values, level)
        except ControllerError as exc:
            self.write_errors += 1
            if future is not None:
                future.set_exception(exc)
            return
        size = sum(map(len, values))
        if len(chunks) > 1 or (self._batch and (
                self._batch_bytes + size > self.config.batch_bytes_max
                or len(self._batch) + len(values) > self.config.batch_records_max)):
            self._propose_batch(now_ms)
            if not self.active:
                if future is not None:
                    future.set_exception(self._not_controller("a write failed"))
                return
        if len(chunks) == 1:
            first = self.next_offset()
            last = first + len(values) - 1
            self._batch += values
            self._batch_bytes += size
        else:
            first = None
            try:
                for chunk in chunks:
                    last = self.raft.propose(chunk, timestamp_ms=now_ms)
                    self._own.append((last - len(chunk) + 1, last))
                    if first is None:
                        # The offset of records[0]: the transaction's Begin record is first.
                        first = last - len(chunk) + 2
            except (NotLeaderError, InvalidAppendError) as exc:
                self._renounce(now_ms, f"a write failed: {exc}")
                if future is not None:
                    future.set_exception(self._not_controller(f"a write failed: {exc}"))
                return
        base = self.working
        delta = MetadataDelta(base)
        # Transaction markers are the loader's business; the working image takes the rest.
        delta.replay_all([r for r in records if type(r) not in _MARKERS]
                         if _MARKERS.intersection(map(type, records)) else records)
        self.working = delta.apply(last + 1, self.active_epoch, now_ms)
        self.replication.on_replayed(base, records)
        self.cluster.on_replayed(records, first)
        self._last_written = last
        if len(chunks) == 1:
            self._written.append((last, self.working, records))
        else:
            # A transaction: the committed image is the loader's to build.
            self._written.clear()
        self.writes += 1
        self.records_written += len(records)
        if future is not None:
            self._parked.append((last, future, result))

    def _propose_batch(self, now_ms):
        """Propose this run's batch; renounce if Raft refuses it or puts it anywhere but
        at the offsets its writes were given."""
        batch = self._batch
        if not batch:
            return
        expected = self.next_offset() - 1
        self._batch, self._batch_bytes = [], 0
        try:
            last = self.raft.propose(batch, timestamp_ms=now_ms)
        except (NotLeaderError, InvalidAppendError) as exc:
            self._renounce(now_ms, f"a write failed: {exc}")
            return
        if last != expected:
            self._renounce(now_ms, f"the batch of this run's writes was appended up to offset "
                           f"{last}, not {expected} as its writes were told")
            return
        self._own.append((last - len(batch) + 1, last))

    def _chunks(self, values, level):
        """One chunk when the values fit in a batch; else a metadata transaction."""
        limit = self.config.batch_bytes_max
        total = sum(map(len, values))
        if total <= limit:
            return [values]
        if level is None or level < _TRANSACTIONS_LEVEL:
            raise ControllerError(42, f"the operation's records take {total} bytes, above "
                                  f"the batch limit of {limit}, and metadata.version {level} "
                                  "has no metadata transactions")
        begin, end = R.encode_values([R.BeginTransactionRecord(name=None),
                                      R.EndTransactionRecord()])
        chunks = [[begin]]
        size = len(begin)
        for value in values:
            if size + len(value) > limit:
                chunks.append([])
                size = 0
            chunks[-1].append(value)
            size += len(value)
        chunks[-1].append(end)
        return chunks

    def _schedule_noop(self, now_ms):
        interval = self.config.idle_interval_ms_max
        if not interval:
            return
        self.queue.schedule_deferred("noop", now_ms + interval, self._noop)

    def _noop(self, now_ms):
        if not self.active:
            return
        level = self.working.metadata_version()
        if level is not None and level >= _NOOP_LEVEL and not self._parked:
            self._write([R.NoOpRecord()], None, None, now_ms)
        if self.active:
            self._schedule_noop(now_ms)

    # ------------------------------------------------------------------ operations

    def register_broker(self, broker_id, incarnation_id, *, cluster_id=None, rack=None,
                        listeners=(), features=None, log_dirs=()):
        return self.submit("register-broker", lambda image, now: self.cluster.register(
            image, now, broker_id, incarnation_id, cluster_id, rack, listeners, features,
            log_dirs))

    def register_controller(self, controller_id, incarnation_id, *, listeners=(),
                            features=None, zk_migration_ready=False):
        return self.submit("register-controller", lambda image, now:
                           self.cluster.register_controller(
                               image, controller_id, incarnation_id, zk_migration_ready,
                               listeners, features))

    def broker_heartbeat(self, broker_id, broker_epoch, *, metadata_offset,
                         want_fence=False, want_shutdown=False):
        return self.submit("broker-heartbeat", lambda image, now: self.cluster.heartbeat(
            image, now, broker_id, broker_epoch, metadata_offset, want_fence, want_shutdown),
            linearizable=False)

    def unregister_broker(self, broker_id):
        return self.submit("unregister-broker", lambda image, now: self.cluster.unregister(
            image, now, broker_id))

    def allocate_producer_ids(self, broker_id, broker_epoch):
        return self.submit("allocate-producer-ids", lambda image, now:
                           self.cluster.allocate_producer_ids(image, broker_id, broker_epoch))

    def create_topics(self, topics):
        return self.submit("create-topics", lambda image, now:
                           self.replication.create_topics(image, topics))

    def delete_topics(self, names):
        return self.submit("delete-topics", lambda image, now:
                           self.replication.delete_topics(image, names))

    def create_partitions(self, topic, count, assignments=None):
        return self.submit("create-partitions", lambda image, now:
                           self.replication.create_partitions(image, topic, count,
                                                              assignments))

    def alter_partition(self, broker_id, broker_epoch, topic_id, partition_id, *,
                        leader_epoch, partition_epoch, new_isr):
        return self.submit("alter-partition", lambda image, now:
                           self.replication.alter_partition(
                               image, broker_id, broker_epoch, topic_id, partition_id,
                               leader_epoch, partition_epoch, new_isr))

    def incremental_alter_configs(self, resources):
        return self.submit("incremental-alter-configs", lambda image, now:
                           self.replication.alter_configs(image, resources))

    def elect_leaders(self, election, partitions=None):
        return self.submit("elect-leaders", lambda image, now:
                           self.replication.elect_leaders(image, election, partitions))

    def create_acls(self, bindings):
        """[(code, message)] per `AclBinding` (`controller.security`)."""
        return self.submit("create-acls", lambda image, now:
                           self.security.create_acls(image, bindings))

    def delete_acls(self, filters):
        """[(code, message, [deleted AclBinding])] per `AclBindingFilter`."""
        return self.submit("delete-acls", lambda image, now:
                           self.security.delete_acls(image, filters))

    def alter_user_scram_credentials(self, deletions, upsertions):
        """[(user, code, message)]: deletions [(user, mechanism)], upsertions [(user,
        mechanism, iterations, salt, salted password)]."""
        return self.submit("alter-user-scram-credentials", lambda image, now:
                           self.security.alter_scram(image, deletions, upsertions))

    # ------------------------------------------------------------------ snapshots

    def snapshot_due(self, now_ms):
        return self.loader.snapshot_due(now_ms)
