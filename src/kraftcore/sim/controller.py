"""The controller workload of the simulator: quorum controllers, brokers and clients over the
simulated network (`python -m kraftcore.sim --workload controller`).

The voters run a `QuorumController` over their `RaftCore` (`ControllerNode`); the observers
are brokers (`BrokerNode`): a `BrokerLifecycle` that registers and heartbeats, a
`BrokerMetadata` that follows the log, and a partition leader that asks for ISR changes
(AlterPartition). A client (`ControllerClient`, node id 0, never crashes) sends create
topic, delete topic and config changes, at most a few at a time. Every request and answer
travels through the simulated network as a message (`ControllerCall`, `ControllerAnswer`),
so drops, delays, partitions and crashes hit them as they hit Raft's messages; a request
without an answer within its timeout has an unknown outcome.

Driving a controller: what a Ready brings (a snapshot to load, commits, a leader change)
is handed to the controller as queued events; the controller's queue then runs as a
separate simulation event (never inside the core's own drive loop, since a controller
event proposes to the core), and again at the deadline it returns (session expiry, NoOps).

Checked, besides every Raft invariant of `kraftcore.sim.invariants`:

* after every new image on any node: every node's image at an offset describes the same
  cluster as every other node's there (controllers' loaders, the active controller's
  adopted images, brokers' images, images loaded from snapshots — which makes image ->
  snapshot -> image round trips part of every run); and the image keeps the metadata
  invariants: ISR within replicas, replicas and leaders registered brokers, no fenced
  broker in an ISR or leading, a leader outside its ISR only after a recorded unclean
  election (RECOVERING), topic names and ids unique;
* every stored snapshot loads into the image the nodes had at its end offset;
* at the end: the history of operations (create / delete topic, topic and cluster configs,
  broker registrations) is linearizable against a sequential model and the final image
  (`kraftcore.sim.history`) — so a future never completed for records that were lost;
* liveness: once faults stop, a fresh create topic succeeds, every node's image holds it,
  and every broker is unfenced.
"""

import random
from typing import NamedTuple

from kraftcore.broker.lifecycle import BrokerLifecycle, RegisterRequest, submit_request
from kraftcore.broker.metadata import BrokerMetadata
from kraftcore.controller.config import ControllerConfig
from kraftcore.controller.controller import QuorumController
from kraftcore.controller.replication import (MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION,
                                              NewTopic)
from kraftcore.errors import ControllerError, CorruptRecordError, MetadataError, NotControllerError
from kraftcore.metadata.image import _MAPS, CONFIG_BROKER, CONFIG_TOPIC
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.metadata.partition import check_partition
from kraftcore.metadata.snapshot import load_snapshot
from kraftcore.types import Uuid
from kraftcore.raft.side import RaftSide
from kraftcore.raft.types import RaftMessage
from kraftcore.sim.history import History, LinearizabilityError
from kraftcore.sim.invariants import Checker, SimViolation
from kraftcore.sim.node import SimNode
from kraftcore.sim.simulation import LIVENESS_PROBE_MS, LIVENESS_REPROPOSE_MS, Simulation

CLIENT_ID = 0
CLUSTER_ID = "kraftcore-sim"
# The configs the client changes, and the values it sets.
CONFIG_VALUES = {MIN_INSYNC_REPLICAS: ("1", "2"), UNCLEAN_LEADER_ELECTION: ("true", "false")}
# How often the client sends to a controller picked at random rather than the one that
# answered last: a client with an outdated view, which may reach a deposed controller that
# has not yet heard of its successor.
STALE_TARGET_PROBABILITY = 0.2
# Problems listed in one violation message.
PROBLEMS_SHOWN_MAX = 5


class ControllerCall(NamedTuple):
    """A request to a controller: its method and arguments."""

    method: str
    args: tuple
    kwargs: dict


class ControllerAnswer(NamedTuple):
    """The controller's answer: the operation's result, or the exception it failed with."""

    result: object
    error: object


def answer_of(kind, body):
    """The history's answer for an operation of `kind` from a `ControllerAnswer`: ("ok",
    value), ("error", code), or None when the outcome is unknown (NOT_CONTROLLER: records
    may still commit)."""
    error = body.error
    if isinstance(error, NotControllerError):
        return None
    if isinstance(error, ControllerError):
        return ("error", error.code)
    if error is not None:
        raise SimViolation(f"a controller failed a {kind} with {type(error).__name__}: {error}")
    result = body.result
    if kind == "register":
        return ("ok", result.broker_epoch)
    code = result[0].error_code if kind in ("create", "delete") else result[0][0]
    return ("ok", None) if code == 0 else ("error", code)


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
                shown = "; ".join(problems[:PROBLEMS_SHOWN_MAX])
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
        loader = MetadataLoader(snapshot_max_bytes=sim.params.controller.snapshot_bytes,
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
            snapshot_max_bytes=params.snapshot_bytes, snapshot_interval_ms=0, now_ms=now))
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


class ControllerClient:
    """The client: operations on topics and configs, recorded in the history."""

    def __init__(self, sim, rng, params):
        self.sim = sim
        self.rng = rng
        self.params = params
        self.proposed = None  # no raw values: the checker's value checks are off
        self.active = False
        self.target = None
        self.outstanding = {}  # correlation id -> (operation, kind)
        self._next_call = 0
        self.proposals = 0  # operations sent
        self.answered = 0

    def start(self):
        self.active = True
        self.sim.network.node_up(CLIENT_ID, 1)
        self._schedule()

    def stop(self):
        self.active = False

    def _schedule(self):
        self.sim.scheduler.after(self.rng.randint(1, self.params.op_interval_ms_max),
                                 self._tick)

    def _tick(self):
        if not self.active:
            return
        if len(self.outstanding) < self.params.ops_inflight_max:
            self._random_operation()
        self._schedule()

    def _random_operation(self):
        rng = self.rng
        name = f"t{rng.randrange(self.params.topics)}"
        draw = rng.random()
        if draw < 0.35:
            brokers = self.sim.params.observers
            self.create_topic(name, rng.randint(1, 3), rng.randint(1, max(1, min(3, brokers))))
        elif draw < 0.6:
            op = self.sim.history.invoke(("topic", name), "delete", None, self._now(),
                                         CLIENT_ID)
            self.send("delete_topics", ([name],), op)
        elif draw < 0.85:
            config = rng.choice(sorted(CONFIG_VALUES))
            value = rng.choice(CONFIG_VALUES[config])
            op = self.sim.history.invoke(("topic", name), "topic-config", (config, value),
                                         self._now(), CLIENT_ID)
            self.send("incremental_alter_configs",
                      ([(CONFIG_TOPIC, name, [(config, "set", value)])],), op)
        else:
            config = rng.choice(sorted(CONFIG_VALUES))
            value = rng.choice(CONFIG_VALUES[config])
            op = self.sim.history.invoke(("cluster-config", config), "cluster-config", value,
                                         self._now(), CLIENT_ID)
            self.send("incremental_alter_configs",
                      ([(CONFIG_BROKER, "", [(config, "set", value)])],), op)

    def _now(self):
        return self.sim.scheduler.now_ms

    def create_topic(self, name, partitions, replication_factor):
        op = self.sim.history.invoke(("topic", name), "create", None, self._now(), CLIENT_ID)
        self.send("create_topics", ([NewTopic(name, partitions, replication_factor)],), op)
        return op

    def send(self, method, args, op):
        sim = self.sim
        voters = sim.voter_ids
        target = self.target
        if target not in voters or self.rng.random() < STALE_TARGET_PROBABILITY:
            target = voters[self.rng.randrange(len(voters))]
        self._next_call += 1
        call_id = self._next_call
        self.outstanding[call_id] = op
        self.proposals += 1
        sim.network.send(RaftMessage(CLIENT_ID, target, call_id,
                                     ControllerCall(method, args, {})), duplicable=False)
        sim.scheduler.after(self.params.request_timeout_ms, self._timeout, call_id)

    def _timeout(self, call_id):
        if self.outstanding.pop(call_id, None) is not None:
            self.target = None  # ask someone else next time

    def on_answer(self, message):
        op = self.outstanding.pop(message.correlation_id, None)
        if op is None:
            return  # answered after its timeout: the client gave up on it
        body = message.body
        if isinstance(body.error, NotControllerError):
            self.target = body.error.controller_id
        else:
            self.target = message.source
        self.sim.history.answer(op, answer_of(op.kind, body), self._now())
        self.answered += 1


class ControllerSimulation(Simulation):
    """The Raft simulation with controllers, brokers and a client (see the module
    docstring); the same phases, seeds and replay command."""

    def __init__(self, params, trace_output=None):
        cp = params.controller
        self.history = History()
        self.voter_ids = tuple(range(1, params.voters + 1))
        self.controller_config = ControllerConfig(
            cluster_id=CLUSTER_ID, session_timeout_ms=cp.session_timeout_ms,
            heartbeat_interval_ms=cp.heartbeat_interval_ms,
            max_idle_interval_ms=cp.max_idle_interval_ms)
        self.live_op = None
        self.live_count = 0
        self.brokers_fenced = 0  # by controllers that crashed since
        super().__init__(params, trace_output)

    def _make_node(self, node_id, voter_ids, rng):
        cls = ControllerNode if node_id in voter_ids else BrokerNode
        return cls(node_id, voter_ids, self.params.raft, rng, self)

    def _make_workload(self, rng):
        return ControllerClient(self, rng, self.params.controller)

    def _make_checker(self):
        return MetadataChecker(self.nodes)

    def _deliver(self, message):
        if message.destination != CLIENT_ID:
            super()._deliver(message)
            return
        self.trace(f"{self.scheduler.now_ms} deliver {message.source}->{CLIENT_ID} "
                   f"ControllerAnswer {message.correlation_id}")
        self.workload.on_answer(message)

    def brokers(self):
        return [node for node in self.nodes.values() if type(node) is BrokerNode]

    # ------------------------------------------------------------------ liveness

    def _probe(self):
        if self.live_done:
            return
        if self._converged():
            self.live_done = True
            self.trace(f"{self.scheduler.now_ms} live {self.live_op.key[1]}")
            return
        op = self.live_op
        now = self.scheduler.now_ms
        stale = op is not None and (
            (op.answer is not None and op.answer[0] != "ok")
            or (op.answer is None and now - op.invoked_ms >= LIVENESS_REPROPOSE_MS))
        if op is None or stale:
            self.live_count += 1
            self.live_op = self.workload.create_topic(f"live-{self.live_count}", 1, 1)
        self.scheduler.after(LIVENESS_PROBE_MS, self._probe)

    def _converged(self):
        op = self.live_op
        if op is None or op.answer != ("ok", None):
            return False
        name = op.key[1]
        for node in self.nodes.values():
            if not node.up or name not in node.image.topic_ids:
                return False
        return all(node.lifecycle.is_online for node in self.brokers())

    def _liveness_failure(self):
        op = self.live_op
        brokers = ", ".join(f"{node.node_id}: {node.lifecycle.state if node.up else 'down'}"
                            for node in self.brokers())
        return (f"the last liveness operation was {op.describe() if op else None}; brokers "
                f"{brokers}")

    # ------------------------------------------------------------------ the end

    def _final_check(self):
        client = self.workload
        scheduler = self.scheduler
        # Every client operation gets its answer or times out.
        scheduler.run_until(scheduler.now_ms + self.params.controller.request_timeout_ms + 1,
                            stop=lambda: not client.outstanding,
                            after_event=self._after_event)
        self.checker.final_check()
        image = max((node.image for node in self.nodes.values() if node.up),
                    key=lambda image: image.end_offset)
        try:
            self.history.check(final_states(image))
        except LinearizabilityError as exc:
            raise SimViolation(str(exc)) from None

    def stats(self):
        stats = super().stats()
        stats.committed_records = self.checker.committed.end_offset
        stats.operations = sum(op.answer is not None for op in self.history.operations)
        stats.brokers_fenced = self.brokers_fenced + sum(
            node.controller.cluster.fenced_by_timeout for node in self.nodes.values()
            if type(node) is ControllerNode and node.up)
        return stats


def export_node(storage, log_dir):
    """Write a simulated node's metadata log and snapshots (its `MemoryStorage`) into
    `log_dir` in Kafka's layout (`FileRaftStorage`): what a real node's
    `__cluster_metadata-0` would hold. Snapshots older than the log start are left out (a
    real node deletes them). Returns the snapshot ids written."""
    from kraftcore.runtime.raft_storage import FileRaftStorage

    start = storage.log_start_offset
    ids = storage.snapshot_ids()
    files = FileRaftStorage.open(log_dir)
    written = []
    try:
        if start > 0:
            at_start = next(s for s in ids if s.end_offset == start)
            files.truncate_fully_and_start_at(at_start)
        data = b"".join(batch[4] for batch in storage.batches() if batch[0] >= start)
        if data:
            files.append_as_follower(data)
        files.flush()
        for snapshot_id in ids:
            if start <= snapshot_id.end_offset <= files.log_end_offset:
                files.write_snapshot(snapshot_id, storage.snapshot_bytes(snapshot_id))
                written.append(snapshot_id)
    finally:
        files.close()
    return written
