"""A quorum of three real `RaftDriver`s (kraftcore.runtime.raft_driver) on 127.0.0.1
sockets and files, for the tests of the driver itself (tests/runtime/test_raft_driver.py,
test_fail_stop.py). It stays apart from the hand-driven `Cluster` of tests/harness/quorum.py
because here the driver under test does the polling, the Ready draining, the fsyncs and the
sending, on a real event loop; it shares the harness's election helper
(`running_leaders`)."""

import asyncio
import os
import random

from kraftcore.net import Listener, PeerPool
from kraftcore.raft.config import RaftConfig
from kraftcore.runtime.raft_driver import RaftDriver
from kraftcore.runtime.raft_storage import FileElectionStore, FileRaftStorage

from tests.harness.quorum import PARTITION, running_leaders

# Hang guards only (the quorum needs well under a second on an idle machine).
WAIT_S = 30
CONFIG = RaftConfig(election_timeout_ms=150, fetch_timeout_ms=400, fetch_wait_ms_max=50,
                    request_timeout_ms=400)


class Quorum:
    def __init__(self, base):
        self.base = base
        self.ids = (1, 2, 3)
        self.listeners = {}
        self.drivers = {}
        self.pools = {}
        self.applied = {i: [] for i in self.ids}
        self.fatal = {}

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def start(self):
        for i in self.ids:
            self.listeners[i] = await Listener.start("127.0.0.1", 0, self._handler(i))
        for i in self.ids:
            self.start_driver(i)

    def _handler(self, i):
        def handle(request, peer):  # the answer's future itself, as a node's listener gets
            return self.drivers[i].handle_request(request.body, request.api_version)
        return handle

    def start_driver(self, i):
        pool = PeerPool(rng=random.Random(i), request_timeout_ms=1000)
        for j in self.ids:
            if j != i:
                pool.update(j, "127.0.0.1", self.listeners[j].port)
        self.pools[i] = pool
        directory = os.path.join(self.base, str(i), PARTITION)
        os.makedirs(directory, exist_ok=True)
        storage = FileRaftStorage.open(directory)
        self.applied[i] = []

        def on_ready(ready, i=i):
            for batch in ready.commits:
                self.applied[i].append((batch.base_offset, batch.last_offset))

        driver = RaftDriver(i, self.ids, storage, FileElectionStore(directory), CONFIG, pool,
                            rng=random.Random(i), on_ready=on_ready,
                            on_fatal=lambda exc, i=i: self.fatal.setdefault(i, exc))
        self.drivers[i] = driver
        driver.kick()
        return driver

    async def leader(self):
        """The driver whose core leads (the newest epoch's, should a deposed leader not
        know it yet), once there is one."""
        async def wait():
            while True:
                leaders = running_leaders(d.core for d in self.drivers.values())
                if leaders:
                    return self.drivers[leaders[0].node_id]
                await asyncio.sleep(0.01)
        return await asyncio.wait_for(wait(), WAIT_S)

    async def until(self, predicate):
        async def wait():
            while not predicate():
                await asyncio.sleep(0.01)
        await asyncio.wait_for(wait(), WAIT_S)

    async def stop_driver(self, i):
        driver = self.drivers.pop(i)
        driver.close()
        await self.pools[i].close()
        driver.storage.close()

    async def close(self):
        for i in list(self.drivers):
            await self.stop_driver(i)
        for listener in self.listeners.values():
            await listener.close()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, WAIT_S * 4))
