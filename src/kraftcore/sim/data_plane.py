"""The data-plane simulator: three brokers replicating partitions under faults, one seed at a
time (`python -m kraftcore.sim.data_plane --seed N` / `--seeds A..B`).

What runs, all of it the real code (DESIGN.md, "The data plane"):

* a controller: `LocalQuorum` (a one-voter quorum running the real `QuorumController`),
  answering BrokerRegistration, BrokerHeartbeat, CreateTopics, AlterPartition and
  ElectLeaders through `kraftcore.apis.controller` (each request and answer encoded to
  bytes and decoded again, as on the wire); it fences a broker whose session expires;
* three brokers, each a `ReplicaManager` over real `kraftcore.log.Log` directories in a
  temporary directory (fsync "never"), whose clock is the simulator's. A broker pulls the
  controller's committed image (a simulated message each way), applies it only once the
  image holds its current registration (Kafka's broker waits to catch up with its
  registration before it publishes metadata), registers, heartbeats, sends the ISR
  changes its partitions decide (`isr_changes` -> `alter_partition_request` ->
  AlterPartition; an answer or a timeout ends the change);
* followers fetch with `ReplicaFetchers`' own request builder and response applier
  (`kraftcore.runtime.replica_fetcher`), leaders answer with the broker's request handler
  (`kraftcore.apis.broker`: Fetch and Produce). The handlers' waits (acks=all waiting for
  the high watermark, long-poll fetches) run in simulated time: `_wait_for` is swapped,
  while a handler runs, for one that parks the handler until a watched partition changes
  (the same `ReplicaManager.watch` callbacks) or its timeout passes;
* producers (acks=all or acks=1, idempotent or not: producer id, epoch and sequences in the
  batches) that retry on errors and timeouts, and consumers that read up to the high
  watermark.

Faults, drawn from the seed: message drops and delays, network partitions (symmetric or
one-way), broker crashes that lose unflushed writes (the `Log` is dropped without close,
each active segment is cut back to the durable point or to a random point after it, and
the next `Log.open` recovers), clean restarts, SIGSTOP-like pauses. Every restart is a new
incarnation (a new registration, a new broker epoch).

Invariants are `kraftcore.sim.data_checks`', checked after every event. After the safety
phase the faults stop and a liveness phase requires every partition that still has an ISR
to take an acks=all write and get its whole replica set back in the ISR.
"""

import argparse
import asyncio
import collections
import dataclasses
import hashlib
import os
import shutil
import tempfile
import time
import traceback
import types

from kraftcore import codec
from kraftcore.apis import broker as broker_apis
from kraftcore.apis.broker import handle_broker_request
from kraftcore.apis.controller import handle_controller_request
from kraftcore.broker.partition import FOLLOWER, LEADER
from kraftcore.broker.replicas import ReplicaConfig, ReplicaManager
from kraftcore.broker.requests import (ALTER_PARTITION_VERSION, alter_partition_request,
                                       alter_partition_result)
from kraftcore.controller.config import ControllerConfig
from kraftcore.controller.local import LocalQuorum
from kraftcore.metadata.image import EMPTY_IMAGE, METADATA_VERSION
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.protocol import framing, messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.runtime.replica_fetcher import FETCH_VERSION, ReplicaFetchers
from kraftcore.sim.data_checks import DataChecker, SimViolation
from kraftcore.sim.network import Network, NetworkParams
from kraftcore.sim.scheduler import Rngs, Scheduler
from kraftcore.types import Uuid

__all__ = ["DataParams", "DataPlaneSim", "DataResult", "params_for_seed", "run_seed",
           "run_seeds", "main"]

_E = ErrorCode
SETUP_MS_MAX = 10_000  # simulated time for the brokers to register and be unfenced
CONTROLLER_ID = 100
PRODUCER_BASE_ID = 200
CONSUMER_BASE_ID = 300
CLUSTER_ID = "kraftcore-cluster"
TOPIC = "t"
PRODUCE_VERSION = 9
EVENTS_MAX = 2_000_000
TRANSCRIPT_TAIL = 80


# ============================================================================ parameters

@dataclasses.dataclass(frozen=True)
class DataParams:
    seed: int = 0
    brokers: int = 3
    partitions: int = 2
    min_isr: int = 2
    unclean: bool = False
    duration_ms: int = 2000
    liveness_ms: int = 4000
    # controller / broker timing (Kafka's defaults scaled down: the ratios are kept)
    session_timeout_ms: int = 600
    heartbeat_interval_ms: int = 100
    metadata_interval_ms: int = 40
    replica_lag_time_max_ms: int = 300
    request_timeout_ms: int = 150
    fetch_wait_ms: int = 50
    fetch_backoff_ms: int = 20
    segment_bytes: int = 1 << 20
    # clients: ((acks, idempotent), ...) one producer each
    producers: tuple = ((-1, True), (-1, False), (1, False))
    produce_interval_ms: int = 20
    produce_timeout_ms: int = 250
    producer_backoff_ms: int = 20
    consumers: bool = True
    # faults
    network: NetworkParams = NetworkParams(delay_ms_min=1, delay_ms_max=8)
    crash_interval_ms: int = 0
    lose_unflushed_probability: float = 0.8
    clean_restart_probability: float = 0.2
    downtime_ms_max: int = 800
    down_max: int = 1  # brokers crashed or paused at one time
    pause_interval_ms: int = 0
    pause_ms_max: int = 800
    partition_interval_ms: int = 0
    partition_ms_max: int = 600

    def describe(self):
        fields = []
        for f in dataclasses.fields(self):
            fields.append(f"{f.name}={getattr(self, f.name)!r}")
        return ", ".join(fields)

    def replay_command(self):
        return (f"python -m kraftcore.sim.data_plane --seed {self.seed} --trace "
                f"--duration-ms {self.duration_ms}")


def params_for_seed(seed, duration_ms=None, **overrides):
    """The parameters of seed `seed`: drawn from the first stream of `Rngs(seed)`."""
    rng = Rngs(seed).child()
    network = NetworkParams(
        delay_ms_min=1, delay_ms_max=rng.choice((3, 8, 15)),
        drop_probability=rng.choice((0.0, 0.01, 0.05)),
        spike_probability=rng.choice((0.0, 0.02)), spike_ms_max=rng.choice((50, 200)))
    producers = rng.choice((
        ((-1, True), (-1, False), (1, False)),
        ((-1, True), (1, True)),
        ((-1, False), (1, False)),
        ((-1, True),),
    ))
    params = DataParams(
        seed=seed,
        partitions=rng.choice((1, 2, 2, 3)),
        duration_ms=duration_ms if duration_ms is not None else rng.choice((1500, 2000, 3000)),
        segment_bytes=rng.choice((2048, 1 << 20)),
        producers=producers,
        produce_interval_ms=rng.choice((10, 20, 40)),
        network=network,
        crash_interval_ms=rng.choice((0, 400, 800, 1500)),
        lose_unflushed_probability=rng.choice((0.5, 0.9)),
        clean_restart_probability=rng.choice((0.0, 0.3)),
        downtime_ms_max=rng.choice((300, 900)),
        down_max=rng.choice((1, 1, 2)),
        pause_interval_ms=rng.choice((0, 600, 1200)),
        pause_ms_max=rng.choice((400, 900)),
        partition_interval_ms=rng.choice((0, 700, 1500)),
        partition_ms_max=rng.choice((200, 700)),
    )
    return dataclasses.replace(params, **overrides) if overrides else params


# ============================================================================ messages

class Msg:
    __slots__ = ("source", "destination", "kind", "api", "cid", "payload", "version")

    def __init__(self, source, destination, kind, api, cid, payload, version=0):
        self.source = source
        self.destination = destination
        self.kind = kind  # "request" | "response" | "meta-fetch" | "meta"
        self.api = api
        self.cid = cid
        self.payload = payload
        self.version = version

    def __repr__(self):
        return f"Msg({self.source}->{self.destination} {self.kind} {self.api} #{self.cid})"


class _SimWait:
    """What `_sim_wait_for` awaits: the driver resumes the handler when a watched partition
    changed and `ready()` holds (`woken`), or at `deadline_ms`."""

    __slots__ = ("deadline_ms", "woken")

    def __init__(self, deadline_ms):
        self.deadline_ms = deadline_ms
        self.woken = False

    def __await__(self):
        yield self


def _make_sim_wait_for(sim):
    async def _sim_wait_for(facade, partitions, ready, timeout_ms):
        """`kraftcore.apis.broker._wait_for` in simulated time (same watch callbacks)."""
        if ready() or timeout_ms <= 0:
            return ready()
        wait = _SimWait(sim.scheduler.now_ms + timeout_ms)
        watched = set(map(id, partitions))

        def on_change(partition):
            if id(partition) in watched and not wait.woken and ready():
                wait.woken = True
                sim.waits_due = True

        replicas = facade.replicas
        replicas.watch(on_change)
        try:
            await wait
        finally:
            replicas.unwatch(on_change)
        return ready()

    return _sim_wait_for


# ============================================================================ nodes

class Node:
    """Something that sends and receives simulated messages: its requests in flight (with
    timeouts), and timers that die with its incarnation and wait while it is paused."""

    def __init__(self, sim, node_id):
        self.sim = sim
        self.node_id = node_id
        self.up = True
        self.paused = False
        self.incarnation = 0
        self._pending = {}  # cid -> (callback, api, version)
        self._held = []  # what arrived or fell due while paused

    def timer(self, delay_ms, callback, *args):
        self.sim.scheduler.after(delay_ms, self._fire, self.incarnation, callback, args)

    def _fire(self, incarnation, callback, args):
        if not self.up or incarnation != self.incarnation:
            return
        if self.paused:
            self._held.append((callback, args))
            return
        callback(*args)

    def request(self, destination, body, version, callback, timeout_ms=None):
        """Send `body` (encoded at `version`); `callback(response or None)` once: the
        decoded answer, or None on a timeout."""
        sim = self.sim
        cid = sim.next_cid()
        frame = framing.encode_request(body, version, cid, client_id=f"n{self.node_id}")
        self._pending[cid] = (callback, body.api_key, version)
        sim.network.send(Msg(self.node_id, destination, "request", body.api_key, cid,
                             frame, version), duplicable=False)
        self.timer(timeout_ms or sim.params.request_timeout_ms, self._timeout, cid)

    def _timeout(self, cid):
        entry = self._pending.pop(cid, None)
        if entry is not None:
            entry[0](None)

    def receive(self, msg):
        if self.paused:
            self._held.append((self._receive, (msg,)))
            return
        self._receive(msg)

    def _receive(self, msg):
        if msg.kind == "response":
            entry = self._pending.pop(msg.cid, None)
            if entry is None:
                return  # timed out already
            callback, api, version = entry
            _, body = framing.decode_response(msg.payload[4:], api, version)
            callback(body)
        else:
            self.on_message(msg)

    def respond(self, msg, body):
        frame = framing.encode_response(body, msg.version, msg.cid)
        if body is not None and getattr(body, "error_code", 0) == _E.UNKNOWN_SERVER_ERROR:
            self.sim.fail(f"node {self.node_id} answered {type(body).__name__} with "
                          f"UNKNOWN_SERVER_ERROR (a handler raised): {body}")
        self.sim.network.send(Msg(self.node_id, msg.source, "response", msg.api, msg.cid,
                                  frame, msg.version), duplicable=False)

    def pause(self):
        self.paused = True

    def resume(self):
        self.paused = False
        self.sim.waits_due = True
        held, self._held = self._held, []
        for callback, args in held:
            if not self.up or self.paused:
                self._held.append((callback, args))
                continue
            callback(*args)

    def on_message(self, msg):
        raise NotImplementedError


class SimController(Node):
    """The active controller: a `LocalQuorum` whose time is the simulator's."""

    def __init__(self, sim):
        super().__init__(sim, CONTROLLER_ID)
        p = sim.params
        config = ControllerConfig(cluster_id=CLUSTER_ID, session_timeout_ms=p.session_timeout_ms,
                                  heartbeat_interval_ms=p.heartbeat_interval_ms,
                                  idle_interval_ms_max=0)
        self.quorum = LocalQuorum(CONTROLLER_ID, config=config, seed=p.seed, now_ms=0)
        sim.network.node_up(CONTROLLER_ID, 0)
        self._tick_at = None
        self.tick()

    @property
    def image(self):
        return self.quorum.controller.image

    # the facade `kraftcore.apis.controller` takes
    @property
    def cluster_id(self):
        return CLUSTER_ID

    def submit(self, method, *args, **kwargs):
        future = getattr(self.quorum.controller, method)(*args, **kwargs)
        self.quorum.run(self.sim.scheduler.now_ms)
        return future

    def controller_id(self):
        return CONTROLLER_ID

    def controllers(self):
        return {CONTROLLER_ID: ("127.0.0.1", 9093)}

    def tick(self):
        now = self.sim.scheduler.now_ms
        deadline = self.quorum.run(now)
        self._schedule_tick(deadline)

    def _schedule_tick(self, deadline):
        now = self.sim.scheduler.now_ms
        at = now + 50 if deadline is None else max(now + 1, min(deadline, now + 50))
        if self._tick_at is None or at < self._tick_at or self._tick_at <= now:
            self._tick_at = at
            self.sim.scheduler.at(at, self._on_tick, at)

    def _on_tick(self, at):
        if at != self._tick_at:
            return
        self._tick_at = None
        self.tick()

    def handle(self, body, version):
        """Answer a request object directly (the scenarios' admin calls)."""
        cid = self.sim.next_cid()
        frame = framing.encode_request(body, version, cid, client_id="admin")
        request = framing.decode_request(frame[4:])
        response = self.sim.loop.run_until_complete(handle_controller_request(self, request))
        self.tick()
        return response

    def on_message(self, msg):
        sim = self.sim
        if msg.kind == "meta-fetch":
            image = self.image
            if image.end_offset > msg.payload:
                sim.network.send(Msg(CONTROLLER_ID, msg.source, "meta", None, msg.cid, image),
                                 duplicable=False)
            return
        request = framing.decode_request(msg.payload[4:])
        response = sim.loop.run_until_complete(handle_controller_request(self, request))
        self.tick()
        self.respond(msg, response)


class SimBroker(Node):
    """A broker: its `ReplicaManager` (None while down), registration, heartbeats,
    metadata pulls, replica fetchers, ISR changes, and the handlers it answers with."""

    def __init__(self, sim, node_id, rng):
        super().__init__(sim, node_id)
        self.rng = rng
        self.up = False
        self.dir = os.path.join(sim.root, f"broker-{node_id}")
        self.replicas = None
        self.epoch = None  # broker epoch of the current incarnation, once registered
        self.fenced = True
        self.applied = None  # the applied image
        self.latest = None  # the newest image received
        self.meta_offset = -1
        self.fetching = set()  # leader ids with a fetch in flight or scheduled
        self.fetchers = None
        self.parked = []  # [(coroutine, wait, msg)] handlers waiting in simulated time
        self.isr_in_flight = False
        self.crashes = 0
        self.lost_offsets = 0

    # the facade `kraftcore.apis.broker` takes
    @property
    def cluster_id(self):
        return CLUSTER_ID

    @property
    def image(self):
        return self.applied if self.applied is not None else EMPTY_IMAGE

    def controller_id(self):
        return self.node_id

    def controllers(self):
        return {CONTROLLER_ID: ("127.0.0.1", 9093)}

    def now_ms(self):
        return self.sim.scheduler.now_ms

    # ------------------------------------------------------------------ life

    def start(self):
        sim = self.sim
        p = sim.params
        self.incarnation += 1
        self.up, self.paused = True, False
        self._held = []
        self._pending = {}
        self.epoch, self.fenced, self.applied, self.latest, self.meta_offset = \
            None, True, None, None, -1
        self.fetching = set()
        self.parked = []
        self.isr_in_flight = False
        config = ReplicaConfig(
            replica_lag_time_max_ms=p.replica_lag_time_max_ms, min_insync_replicas=1,
            log_settings=(("fsync", "never"), ("segment_bytes", p.segment_bytes),
                          ("checkpoint_interval_ms", 200)))
        self.replicas = ReplicaManager(self.node_id, [self.dir], config,
                                       clock=lambda: sim.scheduler.now_ms)
        fetch_config = types.SimpleNamespace(
            replica_fetch_wait_ms_max=p.fetch_wait_ms, replica_fetch_bytes_max=1 << 20,
            replica_fetch_response_bytes_max=10 << 20,
            replica_fetch_backoff_ms=p.fetch_backoff_ms)
        self.fetchers = ReplicaFetchers(self.node_id, self.replicas, None, fetch_config,
                                        lambda: self.epoch if self.epoch is not None else -1)
        sim.network.node_up(self.node_id, self.incarnation)
        sim.note(f"broker {self.node_id} starts (incarnation {self.incarnation})")
        self._register()
        self.timer(0, self._meta_loop)
        self.timer(p.replica_lag_time_max_ms // 2, self._isr_loop)

    def crash(self, lose_unflushed):
        """Stop at once: no close, no flush. With `lose_unflushed`, every partition's
        active segment loses what was not fsynced (all of it, or a random tail of it)."""
        sim = self.sim
        cut_report = []
        for partition in list(self.replicas.partitions.values()):
            log = partition.log
            if log.closed:
                continue
            durable, leo = log.recovery_point, log.log_end_offset
            active = log._segments[-1]
            path = active.path(".log")
            size = active.size
            position = None
            if lose_unflushed and durable < leo:
                position = active.position_of(max(durable, active.base_offset))
                if position is not None and self.rng.random() < 0.5:
                    position = self.rng.randint(position, size)
            log._closed = True
            log._release()
            if position is not None and position < size:
                os.truncate(path, position)
                cut_report.append(f"{partition.name} cut at byte {position} of {size} "
                                  f"(durable offset {durable}, log end {leo})")
        for coro, _, _ in self.parked:
            coro.close()
        self.parked = []
        self.replicas = None
        self.fetchers = None
        self.up = False
        self.crashes += 1
        sim.network.node_down(self.node_id)
        what = "; ".join(cut_report) if cut_report else "nothing lost"
        sim.note(f"broker {self.node_id} CRASHES ({'losing unflushed writes' if lose_unflushed else 'writes kept'}): {what}")

    def stop_cleanly(self):
        for coro, _, _ in self.parked:
            coro.close()
        self.parked = []
        self.replicas.close()
        self.replicas = None
        self.fetchers = None
        self.up = False
        self.sim.network.node_down(self.node_id)
        self.sim.note(f"broker {self.node_id} stops cleanly")

    # ------------------------------------------------------------------ controller

    def _register(self):
        cls = m.BrokerRegistrationRequest
        body = cls(broker_id=self.node_id, cluster_id=CLUSTER_ID,
                   incarnation_id=Uuid.random(self.rng),
                   listeners=[cls.Listener(name="PLAINTEXT", host="127.0.0.1",
                                           port=9090 + self.node_id, security_protocol=0)],
                   features=[cls.Feature(name=METADATA_VERSION, min_supported_version=1,
                                         max_supported_version=max(
                                             METADATA_VERSION_LEVELS.values()))],
                   rack=None, log_dirs=[], previous_broker_epoch=-1)
        self.request(CONTROLLER_ID, body, 4, self._on_registered)

    def _on_registered(self, response):
        if response is None or response.error_code:
            self.timer(50, self._register)
            return
        self.epoch = response.broker_epoch
        self.sim.note(f"broker {self.node_id} registered with broker epoch {self.epoch}")
        self._heartbeat()
        self._maybe_apply()

    def _heartbeat(self):
        body = m.BrokerHeartbeatRequest(broker_id=self.node_id, broker_epoch=self.epoch,
                                        current_metadata_offset=max(self.meta_offset, 0),
                                        want_fence=False, want_shut_down=False)
        self.request(CONTROLLER_ID, body, 1, self._on_heartbeat)

    def _on_heartbeat(self, response):
        p = self.sim.params
        if response is not None and response.error_code in (_E.STALE_BROKER_EPOCH,
                                                            _E.BROKER_ID_NOT_REGISTERED):
            self.sim.note(f"broker {self.node_id}: heartbeat refused "
                          f"({_E(response.error_code).name}); registering again")
            self.epoch = None
            self._register()
            return
        if response is not None and not response.error_code:
            if self.fenced != response.is_fenced:
                self.sim.note(f"broker {self.node_id} is "
                              f"{'fenced' if response.is_fenced else 'unfenced'}")
            self.fenced = response.is_fenced
        self.timer(p.heartbeat_interval_ms, self._heartbeat)

    def _meta_loop(self):
        sim = self.sim
        offset = self.latest.end_offset if self.latest is not None else -1
        sim.network.send(Msg(self.node_id, CONTROLLER_ID, "meta-fetch", None, 0, offset),
                         duplicable=False)
        self.timer(sim.params.metadata_interval_ms, self._meta_loop)

    def on_message(self, msg):
        if msg.kind == "meta":
            image = msg.payload
            if self.latest is None or image.end_offset > self.latest.end_offset:
                self.latest = image
                self.meta_offset = image.end_offset - 1
                self._maybe_apply()
            return
        request = framing.decode_request(msg.payload[4:])
        self.sim.run_handler(self, handle_broker_request(self, request), msg)

    def _maybe_apply(self):
        """Apply the newest image once it holds this incarnation's registration."""
        image = self.latest
        if image is None or self.epoch is None or image is self.applied:
            return
        registration = image.brokers.get(self.node_id)
        if registration is None or registration.broker_epoch != self.epoch:
            return
        sim = self.sim
        before = {key: (p.role, p.leader_epoch, tuple(p.isr))
                  for key, p in self.replicas.partitions.items()}
        changes = self.replicas.apply_image(image, sim.scheduler.now_ms)
        self.applied = image
        for key, p in self.replicas.partitions.items():
            state = (p.role, p.leader_epoch, tuple(p.isr))
            if before.get(key) != state:
                sim.note(f"broker {self.node_id}: {p.name} {p.role} in epoch {p.leader_epoch}"
                         f" (leader {p.leader_id}, isr {list(p.isr)}, log end "
                         f"{p.log_end_offset}, hw {p.high_watermark})")
        if changes.followers or changes.leaders:
            self._start_fetchers()
        sim.check_waits(self)

    # ------------------------------------------------------------------ replication

    def _start_fetchers(self):
        for leader_id in self.replicas.fetch_targets():
            if leader_id not in self.fetching:
                self.fetching.add(leader_id)
                self.timer(0, self._fetch, leader_id)

    def _fetch(self, leader_id):
        partitions = self.replicas.fetch_targets().get(leader_id)
        if not partitions or self.epoch is None:
            self.fetching.discard(leader_id)
            return
        sent = [(p, p.leader_epoch, *p.fetch_position()) for p in partitions]
        body = self.fetchers._request(sent)
        p = self.sim.params

        def on_response(response):
            if self.replicas is None:
                return
            if response is None or response.error_code:
                self.timer(p.fetch_backoff_ms, self._fetch, leader_id)
                return
            before = {id(s[0]): s[0].log_end_offset for s in sent}
            backoff = self.fetchers._apply(sent, response)
            for s in sent:
                if s[0].log_end_offset < before[id(s[0])]:
                    self.sim.note(f"broker {self.node_id}: {s[0].name} truncated from "
                                  f"{before[id(s[0])]} to {s[0].log_end_offset} (leader "
                                  f"{leader_id})")
            self.timer(p.fetch_backoff_ms if backoff else 0, self._fetch, leader_id)

        self.request(leader_id, body, FETCH_VERSION, on_response,
                     timeout_ms=p.fetch_wait_ms + p.request_timeout_ms)

    def _isr_loop(self):
        sim = self.sim
        p = sim.params
        self.timer(max(1, p.replica_lag_time_max_ms // 2), self._isr_loop)
        image = self.applied
        if image is None or self.fenced or self.epoch is None or self.isr_in_flight:
            return

        def eligible(broker_id, broker_epoch):
            broker = image.brokers.get(broker_id)
            return image.broker_is_active(broker_id) and broker_epoch in (
                -1, broker.broker_epoch)

        changes = self.replicas.isr_changes(sim.scheduler.now_ms, eligible)
        body = alter_partition_request(image, self.node_id, self.epoch, changes)
        if body is None:
            return
        for partition, isr in changes:
            sim.note(f"broker {self.node_id}: asks to change the ISR of {partition.name} "
                     f"from {list(partition.isr)} to {list(isr)}")
        self.isr_in_flight = True

        def on_response(response):
            self.isr_in_flight = False
            for partition, outcome in alter_partition_result(changes, response):
                sim.note(f"broker {self.node_id}: AlterPartition {partition.name}: {outcome}")
            sim.check_waits(self)

        self.request(CONTROLLER_ID, body, ALTER_PARTITION_VERSION, on_response)


# ============================================================================ clients

def _values(values):
    shown = [v.decode() for v in values]
    return "[" + ", ".join(shown) + "]"


class Producer(Node):
    """Sends batches to each partition's leader, one at a time per partition, and retries
    the same batch (same producer id, epoch and sequence when idempotent) until it is
    acknowledged."""

    def __init__(self, sim, node_id, acks, idempotent, rng):
        super().__init__(sim, node_id)
        self.acks = acks
        self.idempotent = idempotent
        self.rng = rng
        self.producer_id = node_id * 1000 if idempotent else -1
        self.producer_epoch = 0 if idempotent else -1
        self.counter = 0
        self.state = {}  # index -> dict(batch values, seq, data, leader, busy)
        self.acked = 0
        self.attempts = 0
        self.errors = collections.Counter()
        self.stopped = False
        self.last_ack_ms = {}
        sim.network.node_up(node_id, 0)

    def start(self):
        for index in range(self.sim.params.partitions):
            self.state[index] = {"values": None, "seq": 0, "next_seq": 0, "data": None,
                                 "busy": False, "epoch": self.producer_epoch}
            self.timer(self.rng.randint(0, 20), self._tick, index)

    def _tick(self, index):
        p = self.sim.params
        s = self.state[index]
        if not s["busy"]:
            if s["values"] is None and not self.stopped:
                n = self.rng.randint(1, 3)
                s["values"] = [b"%d-%d-%d" % (self.node_id, index, self.counter + i)
                               for i in range(n)]
                self.counter += n
                s["seq"] = s["next_seq"]
                s["data"] = None
            if s["values"] is not None:
                self._send(index)
        self.timer(p.produce_interval_ms, self._tick, index)

    def _encode(self, s):
        if s["data"] is None:
            if self.idempotent:
                s["data"] = codec.encode_batch(s["values"], producer_id=self.producer_id,
                                               producer_epoch=s["epoch"],
                                               base_sequence=s["seq"])
            else:
                s["data"] = codec.encode_batch(s["values"])
        return s["data"]

    def _send(self, index):
        sim = self.sim
        leader = sim.leader_for(index, self)
        if leader is None:
            self.errors["no leader"] += 1
            return
        s = self.state[index]
        cls = m.ProduceRequest
        body = cls(transactional_id=None, acks=self.acks,
                   timeout_ms=sim.params.produce_timeout_ms,
                   topic_data=[cls.TopicProduceData(name=TOPIC, partition_data=[
                       cls.PartitionProduceData(index=index, records=self._encode(s))])])
        s["busy"] = True
        self.attempts += 1
        values = list(s["values"])
        self.request(leader, body, PRODUCE_VERSION,
                     lambda r: self._on_response(index, leader, values, r),
                     timeout_ms=sim.params.produce_timeout_ms + 100)

    def _on_response(self, index, leader, values, response):
        sim = self.sim
        s = self.state[index]
        s["busy"] = False
        if s["values"] != values:
            return
        if response is None:
            self.errors["timeout"] += 1
            sim.leader_cache.pop((self.node_id, index), None)
            return
        part = response.responses[0].partition_responses[0]
        if part.error_code == 0:
            key = sim.partition_key(index)
            if sim.verbose_clients:
                sim.note(f"producer {self.node_id} (acks={'all' if self.acks == -1 else 1}"
                         f"{', idempotent' if self.idempotent else ''}): "
                         f"{_values(values)} acknowledged by broker {leader} at offset "
                         f"{part.base_offset}")
            sim.on_ack(self, key, part.base_offset, values)
            self.acked += len(values)
            self.last_ack_ms[index] = sim.scheduler.now_ms
            s["values"] = None
            s["next_seq"] = s["seq"] + len(values)
            return
        name = _E(part.error_code).name
        self.errors[name] += 1
        if sim.verbose_clients:
            sim.note(f"producer {self.node_id}: {_values(values)} refused by broker {leader}: "
                     f"{name}; will retry")
        if part.error_code == _E.OUT_OF_ORDER_SEQUENCE_NUMBER and self.idempotent:
            # the leader lost this producer's earlier batches (an acks=1 write that did
            # not survive): start a new epoch at sequence 0, as KIP-360 lets a producer do
            s["epoch"] += 1
            s["seq"] = s["next_seq"] = 0
            s["data"] = None
            sim.note(f"producer {self.node_id}: OUT_OF_ORDER_SEQUENCE_NUMBER on partition "
                     f"{index}: bumps its epoch to {s['epoch']}")
        sim.leader_cache.pop((self.node_id, index), None)


class Consumer(Node):
    """Reads one partition from its leader, from offset 0 up to the high watermark."""

    def __init__(self, sim, node_id, index, rng):
        super().__init__(sim, node_id)
        self.index = index
        self.rng = rng
        self.position = 0
        self.read = 0
        self.resets = 0
        sim.network.node_up(node_id, 0)

    def start(self):
        self.timer(self.rng.randint(0, 20), self._poll)

    def _poll(self):
        sim = self.sim
        leader = sim.leader_for(self.index, self)
        image = sim.controller.image
        topic = image.topic(TOPIC)
        if leader is None or topic is None:
            self.timer(30, self._poll)
            return
        cls = m.FetchRequest
        body = cls(replica_state=cls.ReplicaState(replica_id=-1, replica_epoch=-1),
                   max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                   session_id=0, session_epoch=-1,
                   topics=[cls.FetchTopic(topic_id=topic.topic_id, partitions=[
                       cls.FetchPartition(partition=self.index, current_leader_epoch=-1,
                                          fetch_offset=self.position, last_fetched_epoch=-1,
                                          log_start_offset=-1,
                                          partition_max_bytes=1 << 20)])])
        self.request(leader, body, FETCH_VERSION,
                     lambda r: self._on_response(leader, r))

    def _on_response(self, leader, response):
        sim = self.sim
        delay = 40
        if response is not None and not response.error_code and response.responses:
            part = response.responses[0].partitions[0]
            key = sim.partition_key(self.index)
            if part.error_code == _E.OFFSET_OUT_OF_RANGE:
                # the log ends below the position: records this consumer read are gone
                # (only after an unclean election)
                self.resets += 1
                sim.note(f"consumer {self.node_id}: offset {self.position} of partition "
                         f"{self.index} out of range at broker {leader}")
                self.position = max(0, part.high_watermark)
            elif part.error_code == 0 and part.records:
                records = [(r.offset, b.partition_leader_epoch, bytes(r.value))
                           for b in codec.decode_batches(part.records) for r in b.records
                           if r.offset >= self.position]
                broker = sim.brokers.get(leader)
                partition = None
                if broker is not None and broker.replicas is not None:
                    partition = broker.replicas.by_name.get((TOPIC, self.index))
                leader_hw = partition.high_watermark if partition is not None else 1 << 62
                sim.checker.on_consume(key, records, part.high_watermark, leader_hw)
                if records:
                    if sim.verbose_clients:
                        sim.note(f"consumer {self.node_id}: read offsets {records[0][0]}-"
                                 f"{records[-1][0]} of {TOPIC}-{self.index} from broker "
                                 f"{leader} (high watermark {part.high_watermark})")
                    self.position = records[-1][0] + 1
                    self.read += len(records)
                    delay = 1
            elif part.error_code:
                sim.leader_cache.pop((self.node_id, self.index), None)
        else:
            sim.leader_cache.pop((self.node_id, self.index), None)
        self.timer(delay, self._poll)


# ============================================================================ faults

class DataFaults:
    def __init__(self, sim, rng):
        self.sim = sim
        self.rng = rng
        self.active = False
        self.crashes = self.lossy_crashes = self.clean_restarts = 0
        self.pauses = self.partitions = 0
        self._generation = 0

    def _after(self, mean_ms, callback):
        self.sim.scheduler.after(max(1, int(self.rng.expovariate(1.0 / mean_ms))), callback)

    def start(self):
        self.active = True
        p = self.sim.params
        if p.crash_interval_ms:
            self._after(p.crash_interval_ms, self._crash)
        if p.pause_interval_ms:
            self._after(p.pause_interval_ms, self._pause)
        if p.partition_interval_ms:
            self._after(p.partition_interval_ms, self._partition)

    def _down(self):
        return [b for b in self.sim.brokers.values() if not b.up or b.paused]

    def _victim(self):
        sim = self.sim
        if len(self._down()) >= sim.params.down_max:
            return None
        candidates = [b for b in sim.brokers.values() if b.up and not b.paused]
        leaders = [b for b in candidates if b.replicas is not None and any(
            p.role == LEADER for p in b.replicas.partitions.values())]
        pool = leaders if leaders and self.rng.random() < 0.6 else candidates
        return self.rng.choice(pool) if pool else None

    def _crash(self):
        if not self.active:
            return
        sim = self.sim
        p = sim.params
        victim = self._victim()
        if victim is not None:
            self.crashes += 1
            if self.rng.random() < p.clean_restart_probability:
                self.clean_restarts += 1
                victim.stop_cleanly()
            else:
                lose = self.rng.random() < p.lose_unflushed_probability
                self.lossy_crashes += lose
                victim.crash(lose)
            sim.scheduler.after(self.rng.randint(1, p.downtime_ms_max), self._restart, victim)
        self._after(p.crash_interval_ms, self._crash)

    def _restart(self, broker):
        if not broker.up:
            broker.start()

    def _pause(self):
        if not self.active:
            return
        sim = self.sim
        p = sim.params
        victim = self._victim()
        if victim is not None:
            self.pauses += 1
            victim.pause()
            sim.note(f"broker {victim.node_id} PAUSED")
            sim.scheduler.after(self.rng.randint(1, p.pause_ms_max), self._resume, victim,
                                victim.incarnation)
        self._after(p.pause_interval_ms, self._pause)

    def _resume(self, broker, incarnation):
        if broker.up and broker.paused and broker.incarnation == incarnation:
            self.sim.note(f"broker {broker.node_id} resumes")
            broker.resume()

    def _partition(self):
        if not self.active:
            return
        sim = self.sim
        p = sim.params
        network = sim.network
        ids = sorted(sim.brokers) + [CONTROLLER_ID]
        draw = self.rng.random()
        if draw < 0.3:
            b = self.rng.choice(sorted(sim.brokers))
            network.partition([[b], [i for i in ids if i != b]])
            kind = f"isolate broker {b}"
        elif draw < 0.5:
            network.heal()
            a, b = self.rng.sample(ids, 2)
            network.block(a, b)
            kind = f"one-way {a} -x-> {b}"
        else:
            shuffled = ids[:]
            self.rng.shuffle(shuffled)
            cut = self.rng.randint(1, len(ids) - 1)
            groups = [sorted(shuffled[:cut]), sorted(shuffled[cut:])]
            network.partition(groups)
            kind = f"split {groups}"
        self.partitions += 1
        self._generation += 1
        sim.note(f"network partition: {kind}")
        sim.scheduler.after(self.rng.randint(1, p.partition_ms_max), self._heal, self._generation)
        self._after(p.partition_interval_ms, self._partition)

    def _heal(self, generation):
        if generation == self._generation:
            self.sim.network.heal()
            self.sim.note("network heals")

    def stop(self):
        sim = self.sim
        self.active = False
        self._generation += 1
        sim.network.heal()
        sim.network.params = sim.network.params.calm()
        sim.note("faults stop")
        for broker in sim.brokers.values():
            if not broker.up:
                broker.start()
            elif broker.paused:
                broker.resume()


# ============================================================================ the simulation

def _scratch_dir():
    """Where the brokers' log directories go: a tmpfs when there is one (the simulated
    crashes decide what survives, not the disk; fsync there costs nothing), else the
    default temporary directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return shm
    return None


@dataclasses.dataclass
class DataResult:
    seed: int
    params: DataParams
    passed: bool
    violation: str
    stats: dict
    transcript: list
    wall_s: float = 0.0
    trace_hash: str = ""

    def report(self):
        lines = [f"seed {self.seed} FAILED: {self.violation}",
                 f"  parameters: {self.params.describe()}",
                 f"  replay: {self.params.replay_command()}",
                 "  last events:"]
        lines += [f"    t={t} {text}" for t, text in self.transcript[-TRANSCRIPT_TAIL:]]
        return "\n".join(lines)


class DataPlaneSim:
    def __init__(self, params, root=None, trace_output=None, keep_transcript=False):
        self.params = params
        rngs = Rngs(params.seed)
        rngs.child()  # the parameters' stream
        network_rng, faults_rng, client_rng = rngs.child(), rngs.child(), rngs.child()
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="kraftcore-data-sim-", dir=_scratch_dir())
        self.scheduler = Scheduler()
        self.trace_output = trace_output
        self.keep_transcript = keep_transcript
        self.transcript = [] if keep_transcript else collections.deque(maxlen=TRANSCRIPT_TAIL)
        self.trace_hash = hashlib.blake2b(digest_size=16)
        self.network = Network(self.scheduler, network_rng, params.network, self._deliver)
        self.loop = asyncio.new_event_loop()
        self._cid = 0
        self._sim_wait_for = _make_sim_wait_for(self)
        self.waits_due = False  # a parked handler was woken, or a deadline was reached
        self.controller = SimController(self)
        self.brokers = {i: SimBroker(self, i, rngs.child()) for i in range(1, params.brokers + 1)}
        self.nodes = {CONTROLLER_ID: self.controller, **self.brokers}
        self.producers = [Producer(self, PRODUCER_BASE_ID + i, acks, idem, rngs.child())
                          for i, (acks, idem) in enumerate(params.producers)]
        self.consumers = [Consumer(self, CONSUMER_BASE_ID + i, i, rngs.child())
                          for i in range(params.partitions)] if params.consumers else []
        for client in (*self.producers, *self.consumers):
            self.nodes[client.node_id] = client
        self.client_rng = client_rng
        self.checker = DataChecker(self)
        self.faults = DataFaults(self, faults_rng)
        self.acked_values = {}  # value -> (key, offset, acks)
        self.acks_by_mode = collections.Counter()
        self.acked_1 = {}  # value -> (key, offset): acks=1 acknowledgements
        self.leader_cache = {}
        self._noted_image = None
        self.verbose_clients = keep_transcript
        self.topic_id = None
        self.violation = None
        self.live_done_ms = None
        self.offline = set()

    # ------------------------------------------------------------------ plumbing

    def next_cid(self):
        self._cid += 1
        return self._cid

    def note(self, text):
        line = (self.scheduler.now_ms, text)
        self.trace_hash.update(f"{line[0]} {text}\n".encode())
        self.transcript.append(line)
        if self.trace_output is not None:
            self.trace_output(f"t={line[0]} {text}")

    def fail(self, message):
        raise SimViolation(f"t={self.scheduler.now_ms}: {message}")

    def _deliver(self, msg):
        node = self.nodes.get(msg.destination)
        if node is not None and node.up:
            node.receive(msg)

    def partition_key(self, index):
        return (self.topic_id, index)

    def partition_name(self, key):
        return f"{TOPIC}-{key[1]}"

    def leader_for(self, index, client):
        """The leader a client sends to: its cached one, else the one named by the image
        of a random broker that is up (a Metadata request, answered at once)."""
        cached = self.leader_cache.get((client.node_id, index))
        if cached is not None:
            return cached
        up = [b for b in self.brokers.values() if b.up and b.applied is not None]
        if not up:
            return None
        broker = client.rng.choice(up)
        topic = broker.applied.topic(TOPIC)
        if topic is None or index not in topic.partitions:
            return None
        leader = topic.partitions[index].leader
        if leader < 0:
            return None
        self.leader_cache[(client.node_id, index)] = leader
        return leader

    def run_handler(self, broker, coro, msg):
        """Run a broker handler; one that waits is parked until its wait ends."""
        self._step(broker, coro, None, msg)

    def _step(self, broker, coro, value, msg):
        saved = broker_apis._wait_for
        broker_apis._wait_for = self._sim_wait_for
        try:
            try:
                yielded = coro.send(value)
            except StopIteration as stop:
                response = stop.value
                if response is not None and broker.up:
                    broker.respond(msg, response)
                return
        finally:
            broker_apis._wait_for = saved
        if not isinstance(yielded, _SimWait):
            raise RuntimeError(f"a broker handler awaited {yielded!r} in the simulator")
        broker.parked.append((coro, yielded, msg))
        self.scheduler.at(max(self.scheduler.now_ms, yielded.deadline_ms), self._deadline)

    def _deadline(self):
        self.waits_due = True

    def check_waits(self, broker=None):
        if broker is None:
            if not self.waits_due:
                return
            self.waits_due = False
        brokers = [broker] if broker is not None else self.brokers.values()
        now = self.scheduler.now_ms
        for b in brokers:
            if not b.parked or not b.up or b.paused:
                continue
            parked = b.parked
            due = [entry for entry in parked if entry[1].woken or now >= entry[1].deadline_ms]
            if not due:
                continue
            b.parked = [entry for entry in parked if entry not in due]
            for coro, wait, msg in due:
                self._step(b, coro, None, msg)

    def on_ack(self, producer, key, offset, values):
        acks = producer.acks
        self.acks_by_mode[acks] += len(values)
        for i, value in enumerate(values):
            if acks == -1:
                self.acked_values[value] = (key, offset + i)
            else:
                self.acked_1[value] = (key, offset + i)
        self.checker.on_ack(key, offset, values, acks)

    # ------------------------------------------------------------------ phases

    def _after_event(self):
        self.check_waits()
        image = self.controller.image
        if image is not self._noted_image:
            self._note_image(image)
        self.checker.check()

    def _note_image(self, image):
        """Transcript lines for what the controller committed about the partitions and
        the brokers (leaders, epochs, ISRs, fencing)."""
        before = self._noted_image
        self._noted_image = image
        for broker_id, registration in image.brokers.items():
            old = before.brokers.get(broker_id) if before is not None else None
            if old is None or (old.broker_epoch, old.fenced) != (registration.broker_epoch,
                                                                registration.fenced):
                self.note(f"controller: broker {broker_id} epoch {registration.broker_epoch}"
                          f" {'fenced' if registration.fenced else 'active'}")
        topic = image.topic(TOPIC)
        if topic is None:
            return
        old_topic = before.topic(TOPIC) if before is not None else None
        for index, record in sorted(topic.partitions.items()):
            old = old_topic.partitions.get(index) if old_topic is not None else None
            if old is None or (old.leader, old.leader_epoch, old.isr,
                               old.leader_recovery_state) != (
                    record.leader, record.leader_epoch, record.isr,
                    record.leader_recovery_state):
                recovering = " RECOVERING (unclean leader)" if record.leader_recovery_state \
                    else ""
                leader = record.leader if record.leader >= 0 else "none (offline)"
                self.note(f"controller: {TOPIC}-{index} leader {leader} epoch "
                          f"{record.leader_epoch} isr {list(record.isr)}{recovering}")

    def run_for(self, duration_ms, stop=None):
        end = self.scheduler.now_ms + duration_ms
        self.scheduler.run_until(end, stop=stop, after_event=self._after_event)

    def setup(self):
        """Start the brokers, wait for them to be unfenced, create the topic."""
        for broker in self.brokers.values():
            broker.start()
        # bounded, but generously: with 150 ms request timeouts and delay spikes of up to
        # 200 ms, a registration can need several attempts and their backoffs
        self.run_for(SETUP_MS_MAX, stop=lambda: all(not b.fenced for b in self.brokers.values()))
        if not all(not b.fenced for b in self.brokers.values()):
            self.fail(f"the brokers were not unfenced within {SETUP_MS_MAX} ms")
        self.create_topic()
        self.run_for(2000, stop=self._all_ready)
        if not self._all_ready():
            self.fail("the topic's partitions did not get leaders and full ISRs within 2 s")

    def create_topic(self):
        p = self.params
        cls = m.CreateTopicsRequest
        configs = {"min.insync.replicas": str(p.min_isr),
                   "unclean.leader.election.enable": "true" if p.unclean else "false"}
        body = cls(topics=[cls.CreatableTopic(
            name=TOPIC, num_partitions=p.partitions, replication_factor=p.brokers,
            assignments=[], configs=[cls.CreatableTopicConfig(name=k, value=v)
                                     for k, v in configs.items()])],
            timeout_ms=1000, validate_only=False)
        response = self.controller.handle(body, 7)
        code = response.topics[0].error_code
        if code:
            self.fail(f"CreateTopics answered {_E(code).name}")
        self.topic_id = self.controller.image.topic(TOPIC).topic_id
        self.note(f"topic {TOPIC} created: {p.partitions} partitions, replication factor "
                  f"{p.brokers}, min.insync.replicas {p.min_isr}, unclean election "
                  f"{'on' if p.unclean else 'off'}")

    def _all_ready(self):
        image = self.controller.image
        topic = image.topic(TOPIC)
        if topic is None:
            return False
        for index, record in topic.partitions.items():
            if record.leader < 0 or len(record.isr) != len(record.replicas):
                return False
            broker = self.brokers[record.leader]
            if broker.replicas is None:
                return False
            partition = broker.replicas.by_name.get((TOPIC, index))
            if partition is None or partition.role != LEADER \
                    or partition.leader_epoch != record.leader_epoch:
                return False
        return True

    def start_clients(self):
        for client in (*self.producers, *self.consumers):
            client.start()

    def run(self):
        p = self.params
        self.setup()
        self.start_clients()
        self.faults.start()
        self.run_for(p.duration_ms)
        self.faults.stop()
        self.liveness()
        self.final_check()

    def liveness(self):
        """Faults have stopped: every partition whose ISR is not empty must take a new
        acks=all write and get every replica back in its ISR."""
        p = self.params
        start = self.scheduler.now_ms
        marks = {prod.node_id: dict(prod.last_ack_ms) for prod in self.producers}
        all_producer = next((prod for prod in self.producers if prod.acks == -1), None)

        def done():
            image = self.controller.image
            topic = image.topic(TOPIC)
            for index, record in topic.partitions.items():
                if not record.isr and record.leader < 0:
                    continue  # offline: the empty-ISR policy, counted below
                if len(record.isr) != len(record.replicas):
                    return False
                if all_producer is not None and \
                        all_producer.last_ack_ms.get(index, -1) <= start:
                    return False
            return True

        self.run_for(p.liveness_ms, stop=done)
        image = self.controller.image
        topic = image.topic(TOPIC)
        self.offline = {i for i, r in topic.partitions.items() if not r.isr and r.leader < 0}
        if not done():
            states = {i: (r.leader, list(r.isr), r.leader_epoch)
                      for i, r in topic.partitions.items()}
            self.fail(f"liveness: {p.liveness_ms} ms after the faults stopped, partitions "
                      f"(leader, isr, epoch) are {states}; acks=all producer last acks "
                      f"{all_producer.last_ack_ms if all_producer else None} (phase start "
                      f"{start}); brokers fenced: "
                      f"{[b.node_id for b in self.brokers.values() if b.fenced]}")
        self.live_done_ms = self.scheduler.now_ms - start
        if self.offline:
            self.note(f"partitions {sorted(self.offline)} stay offline: their ISR is empty "
                      "(every member was fenced; unclean election is off)")
        del marks

    def final_check(self):
        for producer in self.producers:
            producer.stopped = True
        self.checker.final_check()

    def stats(self):
        checker = self.checker
        f = self.faults
        dups = {}
        if self.topic_id is not None:
            for index in range(self.params.partitions):
                dups[index] = checker.duplicates((self.topic_id, index))
        idem_dups = self.idempotent_duplicates()
        lost_1 = sum(1 for value, (key, offset) in self.acked_1.items()
                     if not self._committed_at(key, offset, value))
        return {
            "events": self.scheduler.events_run, "simulated_ms": self.scheduler.now_ms,
            "acked_all": self.acks_by_mode[-1], "acked_1": self.acks_by_mode[1],
            "consumed": checker.consumed, "crashes": f.crashes, "lossy_crashes": f.lossy_crashes,
            "clean_restarts": f.clean_restarts, "pauses": f.pauses, "partitions": f.partitions,
            "duplicates": sum(dups.values()), "idempotent_duplicates": idem_dups,
            "lost_acks_1": lost_1, "lost_records": checker.lost_records,
            "lost_acked_all": checker.lost_acked, "offline_partitions": len(self.offline),
            "liveness_ms": self.live_done_ms, "messages": self.network.sent,
            "dropped": self.network.dropped,
            "producer_errors": sum((p.errors for p in self.producers), collections.Counter()),
        }

    def _committed_at(self, key, offset, value):
        committed = self.checker.committed.get(key, ())
        return offset < len(committed) and committed[offset][1] == value

    def idempotent_duplicates(self):
        idempotent = {p.node_id for p in self.producers if p.idempotent}
        count = 0
        for key, entries in self.checker.committed.items():
            seen = set()
            for _, value in entries:
                if int(value.split(b"-", 1)[0]) in idempotent:
                    if value in seen:
                        count += 1
                    seen.add(value)
        return count

    def close(self):
        for broker in self.brokers.values():
            if broker.replicas is not None:
                for partition in broker.replicas.partitions.values():
                    log = partition.log
                    if not log.closed:
                        log._closed = True
                        log._release()
                broker.replicas = None
        self.loop.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


def run_seed(seed, duration_ms=None, trace_output=None, keep_transcript=False, **overrides):
    """Run one seed; returns a `DataResult` (never raises for a failure of the run)."""
    params = params_for_seed(seed, duration_ms, **overrides)
    return run_params(params, trace_output=trace_output, keep_transcript=keep_transcript)


def run_params(params, trace_output=None, keep_transcript=False):
    started = time.perf_counter()
    sim = DataPlaneSim(params, trace_output=trace_output, keep_transcript=keep_transcript)
    violation = None
    try:
        sim.run()
    except SimViolation as exc:
        violation = str(exc)
    except Exception as exc:  # noqa: BLE001 - a crash of the code under test fails the seed
        violation = (f"unexpected {type(exc).__name__}: {exc}\n"
                     + "".join(traceback.format_exception(exc)).rstrip())
    finally:
        stats = sim.stats() if sim.topic_id is not None else {}
        sim.close()
    if violation is None and stats.get("idempotent_duplicates"):
        violation = (f"{stats['idempotent_duplicates']} duplicates of idempotent producers' "
                     "records in the committed log")
    return DataResult(seed=params.seed, params=params, passed=violation is None,
                      violation=violation, stats=stats, transcript=list(sim.transcript),
                      wall_s=time.perf_counter() - started,
                      trace_hash=sim.trace_hash.hexdigest())


def _run_job(job):
    seed, duration_ms, overrides = job
    result = run_seed(seed, duration_ms, **overrides)
    if result.passed:
        result.transcript = []  # only a failure's tail travels back from a worker
    return result


def run_seeds(seeds, duration_ms=None, jobs=1, **overrides):
    """Yield the `DataResult` of each seed, in seed order (`jobs` processes)."""
    work = [(seed, duration_ms, overrides) for seed in seeds]
    if jobs <= 1:
        for job in work:
            yield _run_job(job)
        return
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        yield from pool.imap(_run_job, work, chunksize=8)


def _parse_seeds(text):
    if ".." in text:
        low, high = text.split("..", 1)
        return range(int(low), int(high) + 1)
    return range(int(text), int(text) + 1)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m kraftcore.sim.data_plane",
        description="Run the data-plane simulator over seeds; exit 1 on a violation.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int)
    which.add_argument("--seeds", type=_parse_seeds)
    parser.add_argument("--duration-ms", type=int, default=None)
    parser.add_argument("--trace", action="store_true", help="print every transcript line")
    parser.add_argument("--fail-fast", action="store_true")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = parser.parse_args(argv)
    seeds = range(args.seed, args.seed + 1) if args.seed is not None else args.seeds
    failures = []
    totals = collections.Counter()
    started = time.perf_counter()
    if args.trace:
        results = (run_seed(seed, args.duration_ms, trace_output=print) for seed in seeds)
    else:
        results = run_seeds(seeds, args.duration_ms, jobs=args.jobs)
    for result in results:
        seed = result.seed
        for k, v in result.stats.items():
            if isinstance(v, int):
                totals[k] += v
        if not result.passed:
            failures.append(seed)
            print(result.report(), flush=True)
            if args.fail_fast:
                break
    summary = (f"{len(seeds)} seeds in {time.perf_counter() - started:.1f} s: "
               + ", ".join(f"{k} {v}" for k, v in sorted(totals.items())))
    if failures:
        print(f"FAILED {len(failures)}: {' '.join(map(str, failures))}; {summary}")
        return 1
    print(f"passed {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
