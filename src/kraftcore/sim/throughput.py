"""The commit-throughput workload of the Raft core alone: a fault-free simulated quorum
with no I/O (in-memory storage, persistence completing at once, a 1 ms network) whose
leader is handed `proposals_per_ms` proposals of `values_per_proposal` records every
simulated millisecond. It measures what the core itself can commit: the ceiling a
networked runtime is compared with (`bench/test_bench_raft.py` times it).

Deterministic like the rest of `kraftcore.sim`: no clock, one seeded random generator.
"""

import dataclasses

from kraftcore.raft import RaftConfig, RaftCore
from kraftcore.sim.network import Network, NetworkParams
from kraftcore.sim.scheduler import Rngs, Scheduler
from kraftcore.raft.memory import MemoryStorage


@dataclasses.dataclass
class ThroughputResult:
    committed_records: int  # data records below the leader's high watermark, measured part
    events: int  # simulated events run in the measured part
    simulated_ms: int


class _Node:
    __slots__ = ("core", "storage", "network", "scheduler", "committed", "poll_at")

    def __init__(self, node_id, voters, config, rng, network, scheduler):
        self.storage = MemoryStorage()
        self.core = RaftCore(node_id, voters, self.storage, None, config, rng, scheduler.now_ms)
        self.network = network
        self.scheduler = scheduler
        self.committed = 0
        self.poll_at = None

    def drive(self):
        core = self.core
        now = self.scheduler.now_ms
        deadline = core.poll(now)
        ready = core.take_ready()
        while ready is not None:
            # No I/O: the election state and the log are "persisted" at once.
            if ready.flush_offset is not None:
                self.storage.flush()
            send = self.network.send
            for message in ready.messages:
                send(message)
            core.on_persisted(ready.number)
            for batch in ready.commits:
                if not batch.control:
                    self.committed += batch.last_offset - batch.base_offset + 1
            deadline = core.poll(now)
            ready = core.take_ready()
        if deadline != self.poll_at:
            self.poll_at = deadline = max(deadline, now + 1)
            self.scheduler.at(deadline, self.on_poll, deadline)

    def on_poll(self, token):
        if token == self.poll_at:
            self.poll_at = None
            self.drive()

    def deliver(self, message):
        self.core.handle(message, self.scheduler.now_ms)
        self.drive()


def run_throughput(voters=3, proposals_per_ms=4, values_per_proposal=100, duration_ms=1000,
                   seed=0, value_bytes=16):
    """Elect a leader, then propose for `duration_ms` simulated ms; returns the records
    the leader committed during that time and the events it took."""
    rngs = Rngs(seed)
    scheduler = Scheduler()
    nodes = {}
    network = Network(scheduler, rngs.child(), NetworkParams(delay_ms_min=1, delay_ms_max=1),
                      lambda message: nodes[message.destination].deliver(message))
    config = RaftConfig()
    ids = list(range(1, voters + 1))
    for node_id in ids:
        network.node_up(node_id, 0)
        nodes[node_id] = _Node(node_id, ids, config, rngs.child(), network, scheduler)
    for node in nodes.values():
        node.drive()

    def leader():
        return next((n for n in nodes.values() if n.core.role == "leader"), None)

    scheduler.run_until(scheduler.now_ms + 10_000, stop=lambda: leader() is not None
                        and leader().core.high_watermark is not None)
    chief = leader()
    if chief is None:
        raise RuntimeError("no leader was elected in 10 s of simulated time")
    values = [bytes([i % 256]) * value_bytes for i in range(values_per_proposal)]

    def propose():
        for _ in range(proposals_per_ms):
            chief.core.propose(values, scheduler.now_ms)
        chief.drive()
        scheduler.after(1, propose)

    start_committed, start_events, start_ms = chief.committed, scheduler.events_run, \
        scheduler.now_ms
    scheduler.after(1, propose)
    scheduler.run_until(start_ms + duration_ms)
    if chief.core.role != "leader":
        raise RuntimeError("the leader lost its leadership in a fault-free run")
    return ThroughputResult(chief.committed - start_committed,
                            scheduler.events_run - start_events, duration_ms)
