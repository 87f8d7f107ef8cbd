"""The controller workload of the simulator: quorum controllers, brokers and clients over the
simulated network (`python -m kraftcore.sim --workload controller`).

`ControllerSimulation` is the Raft simulation (`kraftcore.sim.simulation`) with these
parts in place of Raft's:

* nodes (`kraftcore.sim.controller_nodes`): the voters run a `QuorumController` over their
  `RaftCore`, the observers are brokers (lifecycle, metadata follower, partition leader);
* a workload (`kraftcore.sim.controller_client`): a client, node id 0, that sends create
  topic, delete topic and config changes, at most a few at a time;
* messages (`kraftcore.sim.controller_messages`): every request and answer travels through
  the simulated network, so drops, delays, partitions and crashes hit them as they hit
  Raft's messages; a request without an answer within its timeout has an unknown outcome;
* a checker (`kraftcore.sim.controller_checks`): besides every Raft invariant, one image
  per offset across all nodes, the metadata invariants, and snapshots that load into that
  image.

Checked at the end: the history of operations (create / delete topic, topic and cluster
configs, broker registrations) is linearizable against a sequential model and the final
image (`kraftcore.sim.history`) — so a future never completed for records that were lost;
and liveness: once faults stop, a fresh create topic succeeds, every node's image holds it,
and every broker is unfenced.
"""

from kraftcore.controller.config import ControllerConfig
from kraftcore.sim.controller_checks import MetadataChecker, final_states
from kraftcore.sim.controller_client import ControllerClient
from kraftcore.sim.controller_messages import CLIENT_ID, CLUSTER_ID
from kraftcore.sim.controller_nodes import BrokerNode, ControllerNode
from kraftcore.sim.history import History, LinearizabilityError
from kraftcore.sim.invariants import SimViolation
from kraftcore.sim.simulation import LIVENESS_PROBE_MS, LIVENESS_REPROPOSE_MS, Simulation

__all__ = ["ControllerSimulation"]


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
            idle_interval_ms_max=cp.idle_interval_ms_max)
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
