"""A one-voter quorum driven in-process, with no network and no simulated time: the quickest
way to run a `QuorumController` over a real `RaftCore` (benchmarks, examples, tests of the
controller's Raft contract).

`LocalQuorum` owns a `RaftCore` whose only voter is itself, over a `MemoryStorage`. Every
proposal is appended, "fsynced" (the storage is flushed) and committed before `propose`
returns to its caller's event; the committed batches reach the controller through
`on_commits`, as queued events, exactly as a driver delivers them. It is the Raft side the
controller expects (`node_id`, `propose`, `resign`, `leader_and_epoch`,
`epoch_start_offset`, `next_offset`).
"""

import random

from kraftcore.controller.config import ControllerConfig
from kraftcore.controller.controller import QuorumController
from kraftcore.raft.config import RaftConfig
from kraftcore.raft.core import RaftCore
from kraftcore.raft.side import RaftSide
from kraftcore.raft.memory import MemoryStorage

__all__ = ["LocalQuorum"]


class LocalQuorum(RaftSide):
    def __init__(self, node_id=1, *, config=None, seed=0, now_ms=0):
        self.node_id = node_id
        self.now_ms = now_ms
        self.storage = MemoryStorage()
        self.core = RaftCore(node_id, [node_id], self.storage, None, RaftConfig(),
                             random.Random(seed), now_ms)
        self.controller = QuorumController(self, config=config or ControllerConfig(),
                                           rng=random.Random(seed + 1), now_ms=now_ms)
        self._drive()
        self.run()

    # ------------------------------------------------------------------ the Raft side

    def propose(self, values, *, timestamp_ms=None):
        last = self.core.propose(values, self.now_ms, timestamp_ms=timestamp_ms)
        self._drive()
        return last

    def resign(self):
        self.core.resign(self.now_ms)
        self._drive()

    def _drive(self):
        core = self.core
        controller = getattr(self, "controller", None)
        while True:
            core.poll(self.now_ms)
            ready = core.take_ready()
            if ready is None:
                return
            if ready.flush_offset is not None:
                self.storage.flush()
            if controller is not None:
                if ready.load_snapshot is not None:
                    snapshot_id = ready.load_snapshot
                    size = self.storage.snapshot_size(snapshot_id)
                    controller.on_load_snapshot(
                        snapshot_id, self.storage.read_snapshot(snapshot_id, 0, size))
                controller.on_commits(list(ready.commits))
                if ready.leader_change is not None:
                    controller.on_leader_change()
            core.on_persisted(ready.number)

    # ------------------------------------------------------------------ driving

    def run(self, now_ms=None):
        """Advance time to `now_ms` (if given) and run the controller until it is idle."""
        if now_ms is not None:
            self.now_ms = now_ms
        self._drive()
        deadline = self.controller.run(self.now_ms)
        self._drive()
        # Commits delivered by the last events are events too.
        while len(self.controller.queue):
            deadline = self.controller.run(self.now_ms)
            self._drive()
        return deadline

    def call(self, method, *args, **kwargs):
        """Run one controller operation to completion; returns its result (or raises)."""
        future = getattr(self.controller, method)(*args, **kwargs)
        self.run()
        return future.result(timeout=0)
