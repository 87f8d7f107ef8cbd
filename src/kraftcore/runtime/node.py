"""`Node`: one kraftcore process in the roles of Kafka's `process.roles` — a controller (a
voter running the `QuorumController`), a broker (an observer following the metadata log
with its lifecycle), or both — bound to real sockets, files and the clock.

The node owns its listener(s) (`kraftcore.net.Listener`, each with the config's frame and
connection limits, all sharing one `RequestMemory` of `queued.max.request.bytes`; the
quorum's requests and clients' arrive on the same controller listener), its peer pool
(connections to the controllers by node id), the metadata log (`FileRaftStorage` in
`<metadata.log.dir>/__cluster_metadata-0`, with `quorum-state` beside it) and the one
`RaftDriver` over them; each role plugs into the driver's `on_ready`:

* `ControllerRole`: the Ready's snapshot, commits and leader change become controller
  events; the controller's queue runs in the event loop right after (never inside the
  drive), and again at the deadline it returns. Its committed image is snapshotted when the
  loader says so, and the log below the snapshots is cleaned. Client and broker RPCs reach
  it through `kraftcore.apis.controller` with the node as the facade.
* `BrokerRole`: `BrokerMetadata` applies what the observer core delivers and snapshots the
  image; `BrokerLifecycle`'s requests go to the active controller (the leader the observer
  core knows) as BrokerRegistration / BrokerHeartbeat (`kraftcore.broker.requests`).
  Each new image goes to the broker's `ReplicaManager` (partition logs under `log.dirs`,
  leader or follower per partition) and to its `ReplicaFetchers` (one fetch task per
  leader broker, over a second peer pool keyed by broker id) and to its group coordinator
  (`kraftcore.runtime.groups`: the offsets partitions it leads load their groups). Every
  min(500 ms, replica.lag.time.max.ms / 2) a leader sends the ISR changes its partitions
  decided as one AlterPartition to the active controller. The log cleaner
  (`kraftcore.runtime.log_cleaner`, unless log.cleaner.enable is false) cleans the
  compacted partitions it hosts in a worker thread. The broker listener answers
  with `kraftcore.apis.broker` (`_BrokerView`): data-plane requests from the partitions,
  admin requests forwarded to the active controller (`Node.forward`). A broker binds each
  of its broker listeners, the inter-broker one first.

Security (`kraftcore.runtime.security.NodeSecurity`): every listener gets the TLS and SASL
of its protocol, and the peer pools connect with the settings of the listener they reach.
With an authorizer every request is checked (`kraftcore.apis.authorization`) before its
handler runs, and the listings a broker answers are filtered to what the client may see.

Stopping (`stop`, what SIGTERM and SIGINT do): a broker first runs its controlled shutdown
(leaderships moved away, bounded by `shutdown_timeout_ms`); a controller that leads
resigns (EndQuorumEpoch to the voters, so a successor is elected at once instead of after
a fetch timeout); then the sockets and files are closed. Any error the driver meets in the
Raft core, its storage or the roles' `on_ready` stops the node at once with exit status 1
and one error line (`kraftcore.runtime.raft_driver`, fail-stop).
"""

import asyncio
import logging
import os
import random
import signal
import time

from kraftcore.apis.authorization import filtered, refusal
from kraftcore.apis.broker import BROKER_API_KEYS, BROKER_VERSIONS, handle_broker_request
from kraftcore.apis.controller import CONTROLLER_API_KEYS, handle_controller_request
from kraftcore.apis.errors import api_name
from kraftcore.broker.lifecycle import BrokerLifecycle, RegisterRequest
from kraftcore.broker.metadata import BrokerMetadata
from kraftcore.broker.replicas import ReplicaConfig, ReplicaManager
from kraftcore.broker.requests import (ALTER_PARTITION_VERSION, alter_partition_request,
                                       alter_partition_result, heartbeat_request,
                                       heartbeat_result,
                                       registration_request, registration_result)
from kraftcore.controller.controller import QuorumController
from kraftcore.errors import ControllerError, KraftcoreError, NotControllerError
from kraftcore.limits import (BROKER_FETCH_ZERO_COPY_BYTES_MIN, BROKER_LOG_OPENS_PER_TURN_MAX,
                              NODE_SHUTDOWN_WAIT_MS_MAX)
from kraftcore.metadata.bootstrap import read_bootstrap_records
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.net import Listener, PeerPool, RequestMemory
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.runtime.controller_registration import ControllerRegistration
from kraftcore.runtime.groups import BrokerGroups
from kraftcore.runtime.log_cleaner import LogCleaner
from kraftcore.runtime.metrics import NodeMetrics
from kraftcore.runtime.node_log import RaftEventLog, log_metadata_changes
from kraftcore.runtime.raft_driver import RaftDriver
from kraftcore.runtime.replica_fetcher import ReplicaFetchers
from kraftcore.runtime.raft_storage import FileElectionStore, FileRaftStorage
from kraftcore.runtime.security import NodeSecurity
from kraftcore.types import Uuid

log = logging.getLogger("kraftcore.runtime")
# Refused requests, one line each (Kafka logs its denials to kafka.authorizer.logger).
_authorizer_log = logging.getLogger("kraftcore.authorizer")

# Fetch, Vote, BeginQuorumEpoch, EndQuorumEpoch, DescribeQuorum, FetchSnapshot
RAFT_APIS = frozenset((1, 52, 53, 54, 55, 59))
DESCRIBE_QUORUM = 55
# How long a stopping node that resigned waits for its EndQuorumEpoch requests to go out.
RESIGN_GRACE_MS = 200
# Kafka's SecurityProtocol ids, as registrations carry them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


class _Wakeup:
    """One pending call of `self._wake()` on the event loop, at the earliest time asked."""

    _handle = None
    _at = None

    def schedule(self, delay_ms):
        loop = asyncio.get_running_loop()
        at = loop.time() + delay_ms / 1000
        if self._handle is not None:
            if self._at <= at:
                return
            self._handle.cancel()
        self._at = at
        self._handle = loop.call_at(at, self._fire)

    def _fire(self):
        self._handle = None
        node = self.node
        if node.closing or node.driver.failed is not None:
            return  # the listeners, the pool and the log are going away
        self.guarded(self._wake)

    def guarded(self, step, *args):
        """Run one step of the role; an exception in it stops the node (fail-stop, as the
        driver does): a role that raised is in no known state, and must not run on."""
        node = self.node
        try:
            step(*args)
        except Exception as exc:
            if exc is not node.driver.failed:  # the driver logs its own failures
                log.error("node %s stops: the %s role failed: %s: %s", node.node_id,
                          self.role, type(exc).__name__, exc)
                log.debug("node %s: the %s role's failure", node.node_id, self.role,
                          exc_info=exc)
            node.fail(exc, logged=True)


class ControllerRole(_Wakeup):
    role = "controller"

    def __init__(self, node):
        self.node = node
        config = node.config
        now = node.driver.clock()
        loader = MetadataLoader(
            snapshot_interval_bytes=config.snapshot_interval_bytes,
            snapshot_interval_ms=config.snapshot_interval_ms, now_ms=now)
        self.controller = QuorumController(
            node.driver, config=config.controller_config(node.cluster_id).with_bootstrap_records(
                read_bootstrap_records(config.metadata_log_dir)),
            rng=random.Random(), loader=loader, now_ms=now)
        self.registration = None  # set by `start`, once the listener is bound
        loader.record_listener = lambda image, records: log_metadata_changes(
            node.node_id, image, records, active=self.controller.active)

    def start(self, host, port):
        """Register as a controller reachable at host:port from now on."""
        config = self.node.config
        name = config.controller_listener_name
        self.registration = ControllerRegistration(
            self.node.node_id, Uuid.random(random.Random()),
            [(name, host, port, SECURITY_PROTOCOL_IDS[config.listener_protocol(name)])])

    def on_ready(self, ready):
        controller = self.controller
        if ready.load_snapshot is not None:
            storage = self.node.storage
            size = storage.snapshot_size(ready.load_snapshot)
            controller.on_load_snapshot(ready.load_snapshot,
                                        storage.read_snapshot(ready.load_snapshot, 0, size))
        controller.on_commits(list(ready.commits))
        if ready.leader_change is not None:
            controller.on_leader_change()
        self.schedule(0)

    def _wake(self):
        node = self.node
        now = node.driver.clock()
        started = time.monotonic()
        deadline = self.controller.run(now)
        if node.metrics is not None:
            node.metrics.controller_turns.observe(time.monotonic() - started)
            queue = self.controller.queue
            for wait in queue.waits_s:
                node.metrics.controller_waits.observe(wait)
            queue.waits_s.clear()
        self.controller.loader.maybe_snapshot(now, node.driver.create_snapshot)
        again = self._maybe_register(now)
        if again is not None:
            deadline = again if deadline is None else min(deadline, again)
        if deadline is not None:
            self.schedule(max(0, deadline - now))

    def _maybe_register(self, now):
        """Send this controller's registration when it is due (`ControllerRegistration`);
        the time to look again, or None."""
        registration = self.registration
        if registration is None:
            return None
        node = self.node
        target = node.driver.core.leader_id
        request, again = registration.poll(self.controller.image,
                                           target is not None and target in node.voters, now)
        if request is None:
            return again

        def on_response(response, error):
            refused = registration.on_response(response, error, node.driver.clock())
            if refused is None:
                log.info("node %s: registered as a controller with controller %s",
                         node.node_id, target)
            elif registration.attempts == 1 or registration.attempts % 10 == 0:
                log.info("node %s: controller registration not accepted yet (attempt %s): "
                         "%s", node.node_id, registration.attempts, refused)
            self.schedule(0)

        node.pool.send_nowait(target, request, 0,
                              lambda *answer: self.guarded(on_response, *answer))
        return None

    def submit(self, method, *args, **kwargs):
        """Queue a controller operation; an asyncio future of its result. The controller
        completes its futures on this event loop's thread, so the result is handed over
        directly (no thread-safe wake-up of the loop per operation)."""
        future = getattr(self.controller, method)(*args, **kwargs)
        self.schedule(0)
        result = asyncio.get_running_loop().create_future()

        def hand_over(done):
            if result.done():
                return
            error = done.exception()
            if error is not None:
                result.set_exception(error)
            else:
                result.set_result(done.result())

        future.add_done_callback(hand_over)
        return result


class BrokerRole(_Wakeup):
    role = "broker"

    def __init__(self, node):
        self.node = node
        config = node.config
        now = node.driver.clock()
        self.metadata = BrokerMetadata(loader=MetadataLoader(
            snapshot_interval_bytes=config.snapshot_interval_bytes,
            snapshot_interval_ms=config.snapshot_interval_ms, now_ms=now))
        self.lifecycle = BrokerLifecycle(
            config.node_id, Uuid.random(random.Random()), cluster_id=node.cluster_id,
            listeners=node.broker_endpoints,
            heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
            session_timeout_ms=config.broker_session_timeout_ms,
            request_timeout_ms=config.raft_config().request_timeout_ms)
        self._next_isr_check_ms = 0
        self._isr_check_interval_ms = max(1, min(500, config.replica_lag_time_ms_max // 2))
        self._transitions_logged = 0
        self.done = asyncio.get_running_loop().create_future()
        self.replicas = ReplicaManager(config.node_id, config.log_dirs, ReplicaConfig(
            replica_lag_time_max_ms=config.replica_lag_time_ms_max,
            min_insync_replicas=config.min_insync_replicas,
            log_settings=tuple(config.partition_log_settings().items()),
            cleaner_settings=tuple(config.cleaner_settings().items())))
        # The cleaner of the compacted partitions (log.cleaner.enable).
        self.cleaner = LogCleaner(config.node_id, self.replicas, node.driver.clock,
                                  backoff_ms=config.log_cleaner_backoff_ms) \
            if config.log_cleaner_enable else None
        # Broker-to-broker connections (replica fetches), by broker id.
        self.broker_pool = PeerPool(rng=random.Random(), request_timeout_ms=30_000,
                                    **node.security.client_options(
                                        config.inter_broker_listener_name,
                                        node.security.settings.inter_broker_mechanism))
        self.fetchers = ReplicaFetchers(config.node_id, self.replicas, self.broker_pool,
                                        config, lambda: self.lifecycle.broker_epoch)
        self.groups = BrokerGroups(self)
        self.metadata.add_publisher(self._on_image)
        self._reapply_scheduled = False
        self._producer_ids = None  # (next, end) of the current block
        self._producer_ids_request = None

    def _on_image(self, image, update):
        """A new metadata image: the partitions' roles follow it, and the fetchers the
        leaders."""
        node = self.node
        changes = self.replicas.apply_image(image, node.driver.clock(),
                                            opens_max=BROKER_LOG_OPENS_PER_TURN_MAX)
        if changes.pending and not self._reapply_scheduled:
            # the rest of the new partitions on the next event-loop turns: heartbeats and
            # requests go on in between
            self._reapply_scheduled = True
            asyncio.get_running_loop().call_soon(self.guarded, self._apply_again)
        for p in changes.leaders:
            log.info("broker %s: leader of %s at epoch %s (ISR %s, log end offset %s)",
                     node.node_id, p.name, p.leader_epoch, list(p.isr), p.log_end_offset)
        for p in changes.followers:
            log.info("broker %s: follower of %s at epoch %s (leader %s)", node.node_id,
                     p.name, p.leader_epoch, p.leader_id)
        for p in changes.removed:
            log.info("broker %s: no longer hosts %s", node.node_id, p.name)
        self.groups.on_role_changes(changes)
        self.fetchers.update(image)

    async def next_producer_id(self):
        """A producer id from the broker's block; a new block (AllocateProducerIds to the
        active controller, one request at a time) when it is used up."""
        while self._producer_ids is None or self._producer_ids[0] >= self._producer_ids[1]:
            if self._producer_ids_request is None:
                self._producer_ids_request = asyncio.ensure_future(self._allocate_producer_ids())
            request = self._producer_ids_request
            try:
                block = await asyncio.shield(request)
            finally:
                if self._producer_ids_request is request and request.done():
                    self._producer_ids_request = None
            if self._producer_ids is None or self._producer_ids[0] >= self._producer_ids[1]:
                self._producer_ids = block
        first, end = self._producer_ids
        self._producer_ids = (first + 1, end)
        return first

    async def _allocate_producer_ids(self):
        body = m.AllocateProducerIdsRequest(broker_id=self.node.node_id,
                                            broker_epoch=self.lifecycle.broker_epoch)
        response = await self.node.forward(67, 0, body)
        if response.error_code:
            raise ControllerError(response.error_code, "the controller refused a block of "
                                  f"producer ids: error {response.error_code}")
        return (response.producer_id_start, response.producer_id_start + response.producer_id_len)

    def _apply_again(self):
        self._reapply_scheduled = False
        if not self.fetchers.closed:
            self._on_image(self.metadata.image, None)

    async def close(self):
        if self.cleaner is not None:
            await self.cleaner.close()
        self.groups.close()
        await self.fetchers.close()
        await self.broker_pool.close()
        try:
            self.replicas.close()
        except KraftcoreError as exc:
            log.error("broker %s: closing the partition logs failed: %s", self.node.node_id,
                      exc)
            self.node.exit_code = 1

    def start(self):
        self.lifecycle.start(self.node.driver.clock())
        self.schedule(0)
        if self.cleaner is not None:
            self.cleaner.start()

    def _log_transitions(self):
        """One log line per lifecycle transition not logged yet (fenced, online, ...)."""
        lifecycle = self.lifecycle
        new = lifecycle.transitions_total - self._transitions_logged
        if new:
            self._transitions_logged = lifecycle.transitions_total
            for t in list(lifecycle.transitions)[-new:]:
                log.info("broker %s: %s -> %s: %s", self.node.node_id, t.from_state,
                         t.to_state, t.reason)

    def _log_refusal(self, request, result):
        """A warning for each registration the controller refuses. A broker whose node.id
        another live broker holds is refused with DUPLICATE_BROKER_REGISTRATION for as long
        as that broker's session lasts; the operator must hear of it."""
        if type(request) is not RegisterRequest or not isinstance(result, ControllerError) \
                or isinstance(result, NotControllerError):
            return
        if result.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
            log.warning("broker %s: the controller refused the registration: another broker "
                        "process holds node.id %s and its session is live "
                        "(DUPLICATE_BROKER_REGISTRATION). This broker stays unregistered and "
                        "retries; stop the other process or give this one another node.id",
                        self.node.node_id, self.node.node_id)
        else:
            log.warning("broker %s: registration refused, retrying: %s", self.node.node_id,
                        result)

    def on_ready(self, ready):
        node = self.node
        now = node.driver.clock()
        self.metadata.on_ready(ready, node.storage, now)
        self.lifecycle.set_metadata_offset(self.metadata.metadata_offset)
        self.metadata.maybe_snapshot(now, node.driver)

    def _wake(self):
        node = self.node
        now = node.driver.clock()
        lifecycle = self.lifecycle
        requests, deadline = lifecycle.poll(now)
        for request in requests:
            self._send(request)
        self._log_transitions()
        if lifecycle.done:
            if not self.done.done():
                self.done.set_result(lifecycle.error)
                if lifecycle.error is not None:
                    # e.g. the controller refused the registration for good: the process
                    # must not go on unregistered (and exit 0 when stopped)
                    node.fail(lifecycle.error)
            return
        if now >= self._next_isr_check_ms:
            self._next_isr_check_ms = now + self._isr_check_interval_ms
            self._maybe_change_isrs(now)
            try:
                self.replicas.maybe_checkpoint(now)
            except KraftcoreError as exc:
                log.error("broker %s: writing the log directories' checkpoints failed: %s",
                          node.node_id, exc)
        deadline = self._next_isr_check_ms if deadline is None else min(
            deadline, self._next_isr_check_ms)
        self.schedule(max(0, deadline - now))

    def _send(self, request):
        node = self.node
        target = node.driver.core.leader_id
        if target is None:
            target = self.lifecycle.controller_id
        if target is None or target not in node.voters:
            target = random.choice(sorted(node.voters))
        if type(request) is RegisterRequest:
            body = registration_request(request)
            read = registration_result
        else:
            body = heartbeat_request(request)
            read = heartbeat_result
        version = type(body).valid_versions[1]

        def on_response(response, error):
            now = node.driver.clock()
            if error is None:
                try:
                    result = read(response)
                except KraftcoreError as exc:
                    result = exc
            else:
                result = error
            if self.lifecycle.on_response(request, result, now):
                self._log_refusal(request, result)
            self._log_transitions()
            self.schedule(0)

        node.pool.send_nowait(target, body, version,
                              lambda *answer: self.guarded(on_response, *answer))

    def _maybe_change_isrs(self, now):
        """As partition leader, send the ISR changes the replica manager decided (shrink
        past replica.lag.time.max.ms, expand once caught up) to the active controller."""
        lifecycle = self.lifecycle
        target = self.node.driver.core.leader_id
        if not lifecycle.is_online or target is None or target not in self.node.voters:
            return
        image = self.metadata.image

        def eligible(broker_id, broker_epoch):
            broker = image.brokers.get(broker_id)
            return image.broker_is_active(broker_id) and broker_epoch in (
                -1, broker.broker_epoch)

        changes = self.replicas.isr_changes(now, eligible)
        body = alter_partition_request(image, self.node.node_id, lifecycle.broker_epoch,
                                       changes)
        if body is None:
            return
        for partition, isr in changes:
            log.info("broker %s: asking to change the ISR of %s from %s to %s",
                     self.node.node_id, partition.name, list(partition.isr), list(isr))
            if len(isr) < len(partition.isr):
                self.replicas.isr_shrinks += 1
            else:
                self.replicas.isr_expands += 1

        def on_response(response, error):
            for partition, outcome in alter_partition_result(
                    changes, response if error is None else None):
                if not outcome.startswith("ISR"):
                    log.info("broker %s: the ISR change of %s was not made: %s",
                             self.node.node_id, partition.name, outcome)
            self.schedule(0)

        self.node.pool.send_nowait(target, body, ALTER_PARTITION_VERSION, on_response)

    def begin_shutdown(self):
        self.lifecycle.begin_shutdown(self.node.driver.clock())
        self.schedule(0)


class _BrokerView:
    """The broker's facade for `kraftcore.apis.broker`: its own image and partitions.
    Clients are told this broker is the controller (KIP-590): their admin requests come
    here and are forwarded to the active controller."""

    def __init__(self, node, client_id=None, peer=None):
        self.node = node
        self.node_id = node.node_id
        self.cluster_id = node.cluster_id
        self.image = node.broker.metadata.image
        self.replicas = node.broker.replicas
        self.groups = node.broker.groups.coordinator
        self.client_id = client_id
        # as Kafka's members show it (Java's InetAddress text: "/127.0.0.1")
        self.client_host = f"/{peer[0]}" if peer else ""
        self.fetch_region_bytes_min = BROKER_FETCH_ZERO_COPY_BYTES_MIN
        self.authorizer_enabled = node.authorizer_enabled
        # the listener the request came in on: answers name the brokers' endpoints there
        self.listener_name = getattr(peer, "listener", None)

    def controller_id(self):
        return self.node_id

    def controllers(self):
        return self.node.controller_endpoints(self.image)

    def now_ms(self):
        return self.node.driver.clock()

    async def forward(self, api_key, version, body):
        return await self.node.forward(api_key, version, body)

    async def next_producer_id(self):
        return await self.node.broker.next_producer_id()

    def ensure_offsets_topic(self):
        self.node.broker.groups.ensure_offsets_topic()


class Node:
    """A node process (see the module docstring). `config` is a
    `kraftcore.runtime.config.NodeConfig`; `cluster_id` comes from meta.properties.
    `set_aside_past_gap`: open a metadata log whose segments have a gap up to the gap,
    renaming the segment files past it to `.stray` (`Log.open`); the node then fetches
    the rest from the leader. Without it such a log refuses to open (`LogGapError`). On a
    voter this forgets records it may have acknowledged: safe only while the other voters
    hold all of them (a majority of the quorum up without it), as for a reformatted
    voter; the node says so in its log."""

    def __init__(self, config, cluster_id, *, set_aside_past_gap=False):
        self.config = config
        self.set_aside_past_gap = set_aside_past_gap
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        self.voters = dict(config.voters)
        self.storage = None
        self.driver = None
        self.pool = None
        self.listeners = []
        self.request_memory = RequestMemory(config.request_memory_bytes)
        self.controller = None
        self.broker = None
        self.broker_endpoints = []
        self.stopped = None
        self.raft_events = None
        self.metrics = None
        self.metrics_port = None
        self.exit_code = 0
        self.closing = False  # set once the roles' work is over and the resources go

    # ------------------------------------------------------------------ facade for the
    # controller's APIs (kraftcore.apis.controller)

    @property
    def image(self):
        return self.controller.controller.image

    @property
    def authorizer_enabled(self):
        """Whether this node checks requests against ACLs (`authorizer.class.name`)."""
        return self.security.authorizer is not None

    def submit(self, method, *args, **kwargs):
        return self.controller.submit(method, *args, **kwargs)

    def controller_id(self):
        return self.driver.core.leader_id

    def controllers(self):
        return self.controller_endpoints(self.image)

    def controller_endpoints(self, image):
        """The controllers DescribeCluster lists (endpoint type controller): each
        registered controller's endpoint on the controller listener, and the configured
        address of a voter with no registration in `image` (not yet registered, or a
        metadata.version before 3.7-IV0)."""
        return {**self.voters,
                **image.controller_endpoints(self.config.controller_listener_name)}

    # ------------------------------------------------------------------ life cycle

    async def start(self):
        config = self.config
        loop = asyncio.get_running_loop()
        self.stopped = loop.create_future()
        directory = config.metadata_partition_dir
        os.makedirs(directory, exist_ok=True)
        self.storage = FileRaftStorage.open(directory, **config.metadata_log_settings(),
                                            set_aside_past_gap=self.set_aside_past_gap)
        gap = self.storage.recovery.log.gap
        if gap is not None:
            log.warning("node %s: the metadata log was opened up to a gap (%s); the files "
                        "past it are set aside as .stray%s", self.node_id, gap,
                        "; as a voter this node may have acknowledged records it no longer "
                        "holds: that is safe only if the other voters hold all of them"
                        if self.node_id in self.voters else "")
        raft_config = config.raft_config(self.cluster_id)
        self.security = NodeSecurity(config, self._current_image)
        self.pool = PeerPool(rng=random.Random(), **self.security.client_options(
                                 config.controller_listener_name,
                                 self.security.settings.controller_mechanism),
                             request_timeout_ms=raft_config.request_timeout_ms
                             + raft_config.fetch_wait_ms_max)
        for voter_id, (host, port) in self.voters.items():
            if voter_id != self.node_id:
                self.pool.update(voter_id, host, port)
        self.driver = RaftDriver(self.node_id, self.voters, self.storage,
                                 FileElectionStore(directory),
                                 raft_config, self.pool, rng=random.Random(),
                                 on_ready=self._on_ready,
                                 on_fatal=lambda exc: self.fail(exc, logged=True))
        self.raft_events = RaftEventLog(self.node_id, self.driver.core.quorum,
                                        self.driver.clock())
        if config.metrics_listener:
            self.metrics = NodeMetrics(self)
        wrap = self.metrics.wrap if self.metrics is not None else (lambda handler: handler)
        if config.is_controller:
            host, port = config.controller_listener
            name = config.controller_listener_name
            self.listeners.append(await Listener.start(
                host, port, wrap(self._handle),
                api_keys=sorted(RAFT_APIS | CONTROLLER_API_KEYS),
                memory=self.request_memory, security=self.security.listener(name),
                listener_name=name,
                **config.listener_settings(), name=f"controller-{self.node_id}"))
            self.controller = ControllerRole(self)
            if self.metrics is not None:  # the queue times its events' waits
                self.controller.controller.queue.clock = time.monotonic
            # registered as the voters know it (the bound address when not a voter)
            self.controller.start(*self.voters.get(self.node_id, self.listeners[-1].address))
            # The controller's own requests to the active controller (its registration,
            # and a combined node's broker requests) go through the same path as
            # everyone else's, itself included.
            self.pool.update(self.node_id, host, port)
        if config.is_broker:
            # One listener per broker listener (the inter-broker one first); each answers
            # ApiVersions and what kraftcore.apis.broker serves.
            bound = {}
            names = [config.inter_broker_listener_name] + [
                li.name for li in config.listeners
                if li.name != config.inter_broker_listener_name
                and li.name not in config.controller_listener_names]
            for name in names:
                host, port = config.listener_address(name)
                listener = await Listener.start(host, port, wrap(self._handle_broker),
                                                api_keys={k: BROKER_VERSIONS.get(k)
                                                          for k in sorted(BROKER_API_KEYS)},
                                                memory=self.request_memory,
                                                security=self.security.listener(name),
                                                listener_name=name,
                                                **config.listener_settings(),
                                                name=f"broker-{self.node_id}"
                                                + ("" if name == names[0] else f"-{name}"))
                self.listeners.append(listener)
                bound[name] = listener.port
            # What the broker registers: its advertised endpoints, with the bound port when
            # the configuration asked for any free one (0).
            self.broker_endpoints = [
                (e.name, e.host or "127.0.0.1", e.port or bound.get(e.name, 0),
                 SECURITY_PROTOCOL_IDS[config.listener_protocol(e.name)])
                for e in config.broker_endpoints]
            self.broker = BrokerRole(self)
            self.broker.start()
        if self.metrics is not None:
            self.metrics_port = self.metrics.start(*config.metrics_listener)
        self.driver.kick()
        log.info("node %s started (%s): %s", self.node_id,
                 ", ".join(config.process_roles),
                 ", ".join(f"{h}:{p}" for h, p in (li.address for li in self.listeners)))

    def _current_image(self):
        """The node's latest metadata image: the controller's (a controller keeps the
        freshest), else the broker's."""
        if self.controller is not None:
            return self.controller.controller.image
        if self.broker is not None:
            return self.broker.metadata.image
        return None

    def _on_ready(self, ready):
        self.raft_events.observe(self.driver.clock())
        if self.controller is not None:
            self.controller.on_ready(ready)
        if self.broker is not None:
            self.broker.on_ready(ready)

    def _handle(self, request, peer):
        """The listener's handler: an awaitable of the response (a Raft request's answer is
        the driver's future itself). Once the driver has failed (the node is stopping on
        it, logged once), a Raft request gets BROKER_NOT_AVAILABLE instead of raising in
        the listener, which would log it again for every request until the node is down;
        the driver answers the requests in flight at the failure the same way."""
        driver = self.driver
        allowed = self._allowed(peer)
        if allowed is not None:
            refused = self._refusal(request, peer, allowed, controller_listener=True)
            if refused is not None:
                return refused
        if request.api_key in RAFT_APIS:
            if driver.failed is None:
                try:
                    answer = driver.handle_request(request.body, request.api_version)
                    if request.api_key == DESCRIBE_QUORUM and request.api_version >= 2:
                        return self._with_voter_endpoints(answer)
                    return answer
                except Exception:
                    if driver.failed is None:
                        raise  # not the core: the listener reports it
            return driver.unavailable_response(request.body, request.api_version)
        return handle_controller_request(self, request)

    async def _with_voter_endpoints(self, answer):
        """A DescribeQuorum v2+ answer with the voters' controller endpoints (Nodes),
        which Kafka's tools print beside each voter."""
        response = await answer
        cls = m.DescribeQuorumResponse
        name = self.config.controller_listener_name
        endpoints = self.controller_endpoints(self.image)
        response.nodes = [
            cls.Node(node_id=node_id, listeners=[cls.Listener(name=name, host=host, port=port)])
            for node_id, (host, port) in sorted(endpoints.items()) if node_id in self.voters]
        return response

    def _allowed(self, peer):
        """`allowed(operation, resource type, name)` of `peer`'s principal, or None when
        the node authorizes nothing (no `authorizer.class.name`)."""
        authorizer = self.security.authorizer
        if authorizer is None:
            return None
        self.security.refresh()
        principal, host = peer.principal, peer[0]

        def allowed(operation, resource_type, name):
            if name is None:
                return authorizer.authorize_any(principal, host, operation, resource_type)
            return authorizer.authorize(principal, host, operation, resource_type, name)
        return allowed

    def _refusal(self, request, peer, allowed, controller_listener=False):
        """The authorization error answer of `request` from `peer` (logged), or None when
        it may go on."""
        answer = refusal(request, self._current_image(), allowed, controller_listener)
        if answer is not None:
            _authorizer_log.info("node %s: refused %s v%d from %s at %s:%s: not authorized",
                     self.node_id, api_name(request.api_key), request.api_version,
                     peer.principal, *peer)
        return answer

    async def _handle_broker(self, request, peer):
        allowed = self._allowed(peer)
        if allowed is None:
            return await handle_broker_request(_BrokerView(self, request.client_id, peer),
                                               request)
        refused = self._refusal(request, peer, allowed)
        if refused is not None:
            return refused
        answer = await handle_broker_request(_BrokerView(self, request.client_id, peer),
                                             request)
        return filtered(request, answer, allowed)

    async def forward(self, api_key, version, body):
        """Send an admin request a client gave this broker on to the active controller
        and return its answer. An answer of NOT_CONTROLLER (an election in between), or
        no controller known yet, is retried until the request's own timeout
        (`timeout_ms`, else 30 s) ends; then REQUEST_TIMED_OUT."""
        timeout_ms = getattr(body, "timeout_ms", 0) or 30_000
        deadline = time.monotonic() + timeout_ms / 1000
        last = "no active controller is known"
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                raise ControllerError(ErrorCode.REQUEST_TIMED_OUT,
                                      f"could not reach the active controller within "
                                      f"{timeout_ms} ms: {last}")
            target = self.driver.core.leader_id
            if target is not None and target in self.voters:
                try:
                    response = await self.pool.send(target, body, version,
                                                    timeout_ms=remaining_ms)
                except KraftcoreError as exc:
                    last = f"controller {target}: {exc}"
                else:
                    if not _says_not_controller(response):
                        return response
                    last = f"controller {target} is no longer the active controller"
            await asyncio.sleep(min(0.1, max(0, remaining_ms) / 1000))

    def fail(self, exc, logged=False):
        """Stop with exit status 1; `logged`: the error line is written already (the
        driver's)."""
        if not logged:
            log.error("node %s stops: %s", self.node_id, exc)
        self.exit_code = 1
        if self.stopped is not None and not self.stopped.done():
            self.stopped.set_result(None)

    def request_stop(self):
        if self.stopped is not None and not self.stopped.done():
            self.stopped.set_result(None)

    async def run(self, started=None):
        """Start, run until SIGTERM / SIGINT (or a fatal error), stop; returns the exit
        code. `started()`, if given, is called once the node has started."""
        try:
            await self.start()
        except BaseException:  # e.g. a port in use: close what was opened before it
            await self.stop(graceful=False)
            raise
        if started is not None:
            started()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(signum, self.request_stop)
            except (NotImplementedError, RuntimeError):
                pass
        await self.stopped
        await self.stop(graceful=self.exit_code == 0)
        return self.exit_code

    async def stop(self, graceful=True):
        await self._stop(graceful)
        if self.broker is not None:
            await self.broker.close()
        log.info("node %s stopped", self.node_id)

    async def _stop(self, graceful):
        if graceful and self.broker is not None:
            self.broker.begin_shutdown()
            try:
                await asyncio.wait_for(asyncio.shield(self.broker.done),
                                       NODE_SHUTDOWN_WAIT_MS_MAX / 1000)
            except asyncio.TimeoutError:
                log.warning("node %s: the controlled shutdown did not finish in %s ms",
                            self.node_id, NODE_SHUTDOWN_WAIT_MS_MAX)
                self.exit_code = 1  # stopped, but not cleanly: its leaderships did not move
        if graceful and self.driver is not None and self.driver.failed is None \
                and self.driver.core.role == "leader":
            self.driver.resign()
            await asyncio.sleep(RESIGN_GRACE_MS / 1000)
        self.closing = True
        if self.metrics is not None:
            self.metrics.close()
        for listener in self.listeners:
            await listener.close()
        if self.pool is not None:
            await self.pool.close()
        if self.driver is not None:
            self.driver.close()
        if self.storage is not None:
            try:
                self.storage.close()
            except KraftcoreError as exc:
                log.error("node %s: closing the metadata log failed: %s", self.node_id, exc)
                self.exit_code = 1


def _says_not_controller(response):
    """Whether a controller's answer refuses with NOT_CONTROLLER: its top-level error code,
    or the error code of every item it lists."""
    code = getattr(response, "error_code", None)
    if code == ErrorCode.NOT_CONTROLLER:
        return True
    codes = []
    for name in ("topics", "results", "responses", "replica_election_results",
                 "filter_results"):
        for item in getattr(response, name, None) or ():
            if hasattr(item, "error_code"):
                codes.append(item.error_code)
    return bool(codes) and all(c == ErrorCode.NOT_CONTROLLER for c in codes)
