"""Controllers served in-process for the admin client's tests: a `kraftcore.net.Listener`
on 127.0.0.1 (a background thread's event loop) answers with `kraftcore.apis.controller`
over a `LocalQuorum`, and DescribeQuorum with the quorum's own `RaftCore`. A second
listener plays a standby controller that answers NOT_CONTROLLER / NOT_LEADER_OR_FOLLOWER,
so redirects are exercised too. Joins and futures have hang guards only. The fixtures
`cluster` and `brokers` serve the modules that import them."""

import asyncio
import threading

import pytest

from kraftcore.apis.controller import handle_controller_request
from kraftcore.controller.local import LocalQuorum
from kraftcore.net import Listener
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.raft import rpc
from kraftcore.raft.types import RaftMessage
from kraftcore.types import Uuid

from tests.apis.helpers import LocalFacade, StandbyFacade

HANG_GUARD_S = 60


class LoopThread:
    """An event loop in a daemon thread; `call(coro)` runs a coroutine there."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(HANG_GUARD_S)

    def stop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(HANG_GUARD_S)
        self.loop.close()


# What the RaftCore answers: Fetch, DescribeQuorum, FetchSnapshot (from readers that are
# not replicas, which it answers at once).
RAFT_KEYS = frozenset((1, 55, 59))


class ActiveController:
    """Node 1: a LocalQuorum whose controller is active and whose RaftCore leads. Every
    controller RPC goes to kraftcore.apis.controller; DescribeQuorum, and Fetch and
    FetchSnapshot from a reader with replica id -1, to the RaftCore (its answer is caught
    from the Readys the quorum drives)."""

    def __init__(self, controllers):
        self.quorum = LocalQuorum()
        self.facade = LocalFacade(self.quorum, controllers)
        self.outbox = []
        self._correlation = 0
        take_ready = self.quorum.core.take_ready

        def capture():
            ready = take_ready()
            if ready is not None:
                self.outbox.extend(ready.messages)
            return ready
        self.quorum.core.take_ready = capture

    async def handle(self, request, peer):
        if request.api_key in RAFT_KEYS:
            self._correlation += 1
            cid = self._correlation
            self.quorum.core.handle(RaftMessage(-1, self.quorum.node_id, cid, request.body),
                                    self.quorum.now_ms)
            self.quorum.run()
            (answer,) = [msg.body for msg in self.outbox
                         if msg.destination == -1 and msg.correlation_id == cid]
            self.outbox.clear()
            return answer
        return await handle_controller_request(self.facade, request)


class Standby:
    """Node 2: a standby controller. Operations fail with NOT_CONTROLLER naming node 1,
    DescribeQuorum answers NOT_LEADER_OR_FOLLOWER naming node 1, reads use node 1's
    committed image."""

    def __init__(self, active, leader_known=True):
        self.facade = StandbyFacade(None, node_id=2, active=1 if leader_known else None)
        self.active = active
        self.leader_known = leader_known
        self.facade.controllers = lambda: self.active.facade.controllers()

    async def handle(self, request, peer):
        self.facade.image = self.active.facade.image
        if request.api_key == 55:
            return rpc.describe_quorum_response(E.NOT_LEADER_OR_FOLLOWER,
                                                1 if self.leader_known else -1, 1)
        return await handle_controller_request(self.facade, request)


class Cluster:
    """Node 1 active and node 2 standby, each behind a listener of its own; `address` and
    `standby_address` are their HOST:PORT, `active_endpoint` and `standby_endpoint` the
    (host, port) pairs."""

    def __init__(self, standby_knows_leader=True):
        self.thread = LoopThread()
        self.controllers = {}
        self.active = self.thread.call(self._make_active())
        self.standby_node = Standby(self.active, standby_knows_leader)
        self.standby = self.thread.call(Listener.start("127.0.0.1", 0,
                                                       self.standby_node.handle))
        self.controllers[2] = ("127.0.0.1", self.standby.port)

    async def _make_active(self):
        active = ActiveController(self.controllers)
        self.listener = await Listener.start("127.0.0.1", 0, active.handle)
        self.controllers[1] = ("127.0.0.1", self.listener.port)
        active.facade._controllers = self.controllers  # live: filled in as nodes start
        return active

    @property
    def address(self):
        return f"127.0.0.1:{self.listener.port}"

    @property
    def standby_address(self):
        return f"127.0.0.1:{self.standby.port}"

    @property
    def active_endpoint(self):
        return ("127.0.0.1", self.listener.port)

    @property
    def standby_endpoint(self):
        return ("127.0.0.1", self.standby.port)

    def on_loop(self, fn, *args, **kwargs):
        async def run():
            return fn(*args, **kwargs)
        return self.thread.call(run())

    def add_broker(self, broker_id, *, unfence=True):
        def register():
            quorum = self.active.quorum
            result = quorum.call("register_broker", broker_id,
                                 Uuid.from_ints(broker_id, broker_id),
                                 cluster_id=quorum.controller.config.cluster_id,
                                 listeners=[("PLAINTEXT", "127.0.0.1", 9090 + broker_id, 0)])
            if unfence:
                quorum.call("broker_heartbeat", broker_id, result.broker_epoch,
                            metadata_offset=10**9)
            return result.broker_epoch
        return self.on_loop(register)

    def heartbeat(self, broker_id, epoch, **flags):
        return self.on_loop(self.active.quorum.call, "broker_heartbeat", broker_id, epoch,
                            metadata_offset=10**9, **flags)

    @property
    def image(self):
        return self.on_loop(lambda: self.active.facade.image)

    def add_brokers(self, *broker_ids):
        """Register and unfence `broker_ids`; {broker id: broker epoch}."""
        return {b: self.add_broker(b) for b in broker_ids}

    def close(self):
        self.thread.call(self.listener.close())
        self.thread.call(self.standby.close())
        self.thread.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


@pytest.fixture
def cluster():
    """A `Cluster`, closed after the test (import it into a test module to use it)."""
    with Cluster() as c:
        yield c


@pytest.fixture
def brokers(cluster):
    """(cluster, {broker id: epoch}) with brokers 1, 2, 3 registered and unfenced."""
    return cluster, cluster.add_brokers(1, 2, 3)
