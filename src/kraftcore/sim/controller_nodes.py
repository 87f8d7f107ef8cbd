"""The nodes of the simulator's controller workload (`kraftcore.sim.controller`).

The voters run a `QuorumController` over their `RaftCore` (`ControllerNode`); the observers
are brokers (`BrokerNode`): a `BrokerLifecycle` that registers and heartbeats, a
`BrokerMetadata` that follows the log, and a partition leader that asks for ISR changes
(AlterPartition). Both take the workload's messages (`kraftcore.sim.controller_messages`)
beside Raft's, record their commits with the checker, and hand every new image to it.

Driving a controller: what a Ready brings (a snapshot to load, commits, a leader change)
is handed to the controller as queued events; the controller's queue then runs as a
separate simulation event (never inside the core's own drive loop, since a controller
event proposes to the core), and again at the deadline it returns (session expiry, NoOps).
"""

import random

from kraftcore.broker.lifecycle import BrokerLifecycle, RegisterRequest, submit_request
from kraftcore.broker.metadata import BrokerMetadata
from kraftcore.controller.controller import QuorumController
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.raft.side import RaftSide
from kraftcore.raft.types import RaftMessage
from kraftcore.sim.controller_messages import (CLUSTER_ID, ControllerAnswer, ControllerCall,
                                               answer_of)
from kraftcore.sim.invariants import SimViolation
from kraftcore.sim.node import SimNode
from kraftcore.types import Uuid

__all__ = ["ControllerNode", "BrokerNode"]


class _AppNode(SimNode):
    """What controller and broker nodes share: controller messages next to Raft's, commits
    checked for log matching, and a timer per incarnation."""

    def __init__(self, *args):
        super().__init__(*args)
        self._timer_at = None
        self._timer_token = 0

    def deliver(self, message):
        if self.core is None:
            return
        if type(message.body) in (ControllerCall, ControllerAnswer):
            self.on_app_message(message)
        else:
            super().deliver(message)

    def _drop_incarnation(self):
        self.sm = None
        self._timer_at = None
        self._timer_token += 1

    def _record_commits(self, ready):
        for batch in ready.commits:
            self.sim.checker.record_commit(self, batch)

    def _read_snapshot(self, snapshot_id):
        size = self.storage.snapshot_size(snapshot_id)
        if size is None:
            raise SimViolation(f"node {self.node_id} was told to load snapshot {snapshot_id}, "
                               "which its storage does not hold")
        self.snapshots_loaded += 1
        return self.storage.read_snapshot(snapshot_id, 0, size)

    def _wake_at(self, time_ms):
        """Run `on_timer` at `time_ms` (the earliest of the times asked for)."""
        if self._timer_at is not None and self._timer_at <= time_ms:
            return
        self._timer_at = time_ms
        self._timer_token += 1
        self.sim.scheduler.at(time_ms, self._on_timer_event, self._timer_token)

    def _on_timer_event(self, token):
        if token != self._timer_token or self.core is None:
            return
        self._timer_at = None
        self.on_timer()

    def _maybe_snapshot_image(self, loader):
        now = self.now_ms()
        if loader.maybe_snapshot(now, self.core.create_snapshot) is not None:
            self.snapshots_created += 1
            self.sim.trace(f"{now} snapshot {self.node_id} {loader.image.end_offset}")

    def send_app(self, destination, correlation_id, body):
        self.sim.network.send(RaftMessage(self.node_id, destination, correlation_id, body),
                              duplicable=False)


class ControllerNode(RaftSide, _AppNode):
    """A voter running a `QuorumController`; it is the controller's Raft side."""

    def _new_incarnation(self):
        sim = self.sim
        now = self.now_ms()
        self.sm = None
        loader = MetadataLoader(snapshot_interval_bytes=sim.params.controller.snapshot_bytes,
                                snapshot_interval_ms=0, now_ms=now)
        self.controller = QuorumController(self, config=sim.controller_config,
                                           rng=random.Random(self.rng.getrandbits(64)),
                                           loader=loader, now_ms=now)

    def _drop_incarnation(self):
        super()._drop_incarnation()
        self.sim.brokers_fenced += self.controller.cluster.fenced_by_timeout
        self.controller = None

    @property
    def image(self):
        return self.controller.image

    def _apply(self, ready):
        controller = self.controller
        if ready.load_snapshot is not None:
            controller.on_load_snapshot(ready.load_snapshot,
                                        self._read_snapshot(ready.load_snapshot))
        self._record_commits(ready)
        controller.on_commits(list(ready.commits))
        if ready.leader_change is not None:
            self.leader_change = ready.leader_change
            controller.on_leader_change()
        self._wake_at(self.now_ms())

    def on_timer(self):
        now = self.now_ms()
        controller = self.controller
        deadline = controller.run(now)
        if self.core is None:
            return  # impossible today; a crash inside run would end here
        self.sim.checker.check_image(self, controller.image)
        self._maybe_snapshot_image(controller.loader)
        if len(controller.queue):
            deadline = now
        if deadline is not None:
            self._wake_at(max(deadline, now))

    def on_app_message(self, message):
        call = message.body
        if type(call) is not ControllerCall:
            return
        controller = self.controller
        if call.method == "lifecycle":
            future = submit_request(controller, *call.args)
        else:
            future = getattr(controller, call.method)(*call.args, **call.kwargs)
        incarnation = self.incarnation
        future.add_done_callback(lambda f: self._answer(message, f, incarnation))
        self._wake_at(self.now_ms())

    def _answer(self, message, future, incarnation):
        if incarnation != self.incarnation or self.core is None:
            return
        error = future.exception()
        body = ControllerAnswer(None if error is not None else future.result(), error)
        self.send_app(message.source, message.correlation_id, body)


class BrokerNode(_AppNode):
    """An observer that is a broker: lifecycle, metadata follower, partition leader."""

    def _new_incarnation(self):
        sim = self.sim
        params = sim.params.controller
        now = self.now_ms()
        self.sm = None
        self.metadata = BrokerMetadata(loader=MetadataLoader(
            snapshot_interval_bytes=params.snapshot_bytes, snapshot_interval_ms=0, now_ms=now))
        self.lifecycle = BrokerLifecycle(
            self.node_id, Uuid.random(self.rng), cluster_id=CLUSTER_ID,
            heartbeat_interval_ms=params.heartbeat_interval_ms,
            session_timeout_ms=params.session_timeout_ms,
            request_timeout_ms=params.request_timeout_ms,
            retry_backoff_ms=max(1, params.heartbeat_interval_ms // 4))
        self.lifecycle.start(now)
        self._calls = {}  # correlation id -> (request, history operation or None)
        self._next_call = 0
        self._next_alter_ms = now + params.heartbeat_interval_ms
        self._wake_at(now)

    def _drop_incarnation(self):
        super()._drop_incarnation()
        self.lifecycle = None
        self.metadata = None

    @property
    def image(self):
        return self.metadata.image

    def _apply(self, ready):
        self._record_commits(ready)
        if ready.load_snapshot is not None:
            self.metadata.on_load_snapshot(ready.load_snapshot,
                                           self._read_snapshot(ready.load_snapshot),
                                           self.now_ms())
        if ready.leader_change is not None:
            self.leader_change = ready.leader_change
            self.metadata.leader = ready.leader_change
        image = self.metadata.on_commits(ready.commits)
        self.sim.checker.check_image(self, image)
        self.lifecycle.set_metadata_offset(self.metadata.metadata_offset)
        self._maybe_snapshot_image(self.metadata.loader)

    def _target(self):
        """The active controller as far as this broker knows: its observer core's leader,
        else the last redirect, else any controller."""
        leader = self.core.leader_id
        if leader is not None:
            return leader
        hinted = self.lifecycle.controller_id
        if hinted in self.voters:
            return hinted
        return self.voters[self.rng.randrange(len(self.voters))]

    def _send_call(self, method, args, kwargs=None, request=None, op=None):
        self._next_call += 1
        self._calls[self._next_call] = (request, op)
        self.send_app(self._target(), self._next_call,
                      ControllerCall(method, args, kwargs or {}))

    def on_timer(self):
        now = self.now_ms()
        lifecycle = self.lifecycle
        requests, deadline = lifecycle.poll(now)
        for request in requests:
            op = None
            if type(request) is RegisterRequest:
                op = self.sim.history.invoke(("broker", self.node_id), "register",
                                             request.incarnation_id, now, self.node_id)
            self._send_call("lifecycle", (request,), request=request, op=op)
        if now >= self._next_alter_ms:
            self._next_alter_ms = now + self.sim.params.controller.heartbeat_interval_ms
            self._maybe_alter_partition()
        wake = self._next_alter_ms if deadline is None else min(deadline, self._next_alter_ms)
        self._wake_at(max(wake, now))

    def on_app_message(self, message):
        answer = message.body
        if type(answer) is not ControllerAnswer:
            return
        entry = self._calls.pop(message.correlation_id, None)
        if entry is None:
            return
        request, op = entry
        now = self.now_ms()
        if op is not None:
            self.sim.history.answer(op, answer_of("register", answer), now)
        if request is not None:
            self.lifecycle.on_response(
                request, answer.error if answer.error is not None else answer.result, now)
            self._wake_at(now)

    def _maybe_alter_partition(self):
        """As a partition leader: drop a follower from the ISR, or add back a replica that
        is an unfenced broker (the sim does not replicate data, so any replica counts as
        caught up)."""
        rng = self.rng
        probability = self.sim.params.controller.alter_partition_probability
        if not self.lifecycle.is_online or not probability or rng.random() >= probability:
            return
        image = self.metadata.image
        led = [(topic.topic_id, p) for topic in image.topics.values()
               for p in topic.partitions.values() if p.leader == self.node_id]
        if not led:
            return
        topic_id, partition = led[rng.randrange(len(led))]
        isr = list(partition.isr)
        outside = [r for r in partition.replicas if r not in isr
                   and image.broker_is_active(r)]
        followers = [r for r in isr if r != self.node_id]
        if outside and (not followers or rng.random() < 0.5):
            isr.append(outside[rng.randrange(len(outside))])
        elif followers:
            isr.remove(followers[rng.randrange(len(followers))])
        else:
            return
        self._send_call("alter_partition",
                   (self.node_id, self.lifecycle.broker_epoch, topic_id,
                    partition.partition_id),
                   {"leader_epoch": partition.leader_epoch,
                    "partition_epoch": partition.partition_epoch, "new_isr": isr})
