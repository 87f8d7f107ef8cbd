"""The simulated client: proposals of distinct values to the node it believes leads.

`Workload` owns the set of every value it ever proposed (the checker verifies that each
committed value is one of them and sits at one offset only). Values are
`b"<node>-<sequence>"`, unique over the run. A proposal refused with `NotLeaderError` moves
the client to the leader the error names (or to a random node when none is known); the
refused values are not retried, so a value is proposed once. The client waits while the
leader's uncommitted tail is longer than `SIM_UNCOMMITTED_OFFSETS_MAX` offsets.
"""

from kraftcore.errors import NotLeaderError
from kraftcore.limits import SIM_UNCOMMITTED_OFFSETS_MAX



class Workload:
    def __init__(self, sim, rng, interval_ms_max, values_per_proposal_max):
        self.sim = sim
        self.rng = rng
        self.interval_ms_max = interval_ms_max
        self.values_per_proposal_max = values_per_proposal_max
        self.proposed = set()
        self.active = False
        self.sequence = 0
        self.target = None
        self.proposals = 0
        self.proposals_refused = 0
        self.values_accepted = 0

    def start(self):
        self.active = True
        self._schedule()

    def stop(self):
        self.active = False

    def _schedule(self):
        self.sim.scheduler.after(self.rng.randint(1, self.interval_ms_max), self._tick)

    def _tick(self):
        if not self.active:
            return
        count = self.rng.randint(1, self.values_per_proposal_max)
        node = self._choose()
        if node is not None and not self._backlogged(node):
            self.propose(count, node=node)
        self._schedule()

    def _backlogged(self, node):
        """Flow control: hold back while the node's uncommitted tail exceeds the window, as a
        client with bounded in-flight requests would (else a slow quorum builds a backlog
        that no bounded liveness phase could drain)."""
        core = node.core
        if core.role != "leader" or core.high_watermark is None:
            return False
        return core.log_end_offset - core.high_watermark > SIM_UNCOMMITTED_OFFSETS_MAX

    def _choose(self):
        nodes = self.sim.nodes
        if self.target is not None and nodes[self.target].up:
            return nodes[self.target]
        up = [node for node in nodes.values() if node.up]
        if not up:
            return None
        return up[self.rng.randrange(len(up))]

    def propose(self, count, prefix=None, node=None):
        """Propose `count` fresh values to `node` (default: the believed leader). Returns
        `(node_id, values, last_offset)`, or None when the proposal was refused."""
        if node is None:
            node = self._choose()
        if node is None:
            return None
        head = b"%d-" % node.node_id if prefix is None else prefix
        first = self.sequence
        self.sequence += count
        values = [head + b"%d" % i for i in range(first, first + count)]
        # Known before the call: a single-voter quorum commits inside propose().
        self.proposed.update(values)
        self.proposals += 1
        try:
            offset = node.propose(values)
        except NotLeaderError as exc:
            self.proposals_refused += 1
            self.target = exc.leader_id if exc.leader_id in self.sim.nodes else None
            self.sim.trace(f"{self.sim.scheduler.now_ms} refused {node.node_id} "
                           f"leader={exc.leader_id}")
            return None
        self.target = node.node_id
        self.values_accepted += count
        self.sim.trace(f"{self.sim.scheduler.now_ms} proposed {node.node_id} {count} "
                       f"last={offset}")
        return node.node_id, values, offset
