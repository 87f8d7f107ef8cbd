"""The fault schedule of one run: crashes and restarts, partitions that heal, resignations.

`Faults` owns the timers that break things during the safety phase, all drawn from one
seeded `random.Random`:

* **crash** a random node (the leader with probability `crash_leader_probability`; a random
  majority or all of them with probability `crash_many_probability`), losing their
  unflushed writes, and restart each after a random downtime;
* **partition**: a symmetric split into two random groups, the current leader isolated from
  everyone, or a set of one-way blocked links; each heals after a random duration (a newer
  partition replaces an older one);
* **resign**: the current leader resigns gracefully (EndQuorumEpoch).

Message drops, duplicates and delays are the `Network`'s. `stop()` ends the safety phase:
no new faults, the network healed and calm, every node restarted.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class FaultParams:
    # Mean time between crashes (0: no crashes); downtime drawn from [1, downtime_ms_max].
    crash_interval_ms: int = 0
    downtime_ms_max: int = 1000
    crash_leader_probability: float = 0.3
    # Chance that a crash takes down a random majority of the nodes (or all) at once.
    crash_many_probability: float = 0.0
    # Mean time between partitions (0: none); each lasts [1, partition_ms_max].
    partition_interval_ms: int = 0
    partition_ms_max: int = 1000
    one_way_probability: float = 0.3
    isolate_leader_probability: float = 0.3
    # Mean time between graceful resignations of the leader (0: none).
    resign_interval_ms: int = 0


class Faults:
    def __init__(self, sim, rng, params):
        self.sim = sim
        self.rng = rng
        self.params = params
        self.active = False
        self._partition_generation = 0
        self.crashes = 0
        self.partitions = 0
        self.resignations = 0

    def _after(self, mean_ms, callback, *args):
        delay_ms = max(1, int(self.rng.expovariate(1.0 / mean_ms)))
        self.sim.scheduler.after(delay_ms, callback, *args)

    def start(self):
        self.active = True
        params = self.params
        if params.crash_interval_ms:
            self._after(params.crash_interval_ms, self._crash)
        if params.partition_interval_ms:
            self._after(params.partition_interval_ms, self._partition)
        if params.resign_interval_ms:
            self._after(params.resign_interval_ms, self._resign)

    def stop(self):
        """End the safety phase: heal, calm the network, restart every node that is down."""
        sim = self.sim
        self.active = False
        self._partition_generation += 1
        sim.network.heal()
        sim.network.params = sim.network.params.calm()
        sim.trace(f"{sim.scheduler.now_ms} faults stop")
        for node in sim.nodes.values():
            if not node.up:
                node.start()

    def _leader(self):
        return self.sim.current_leader()

    def _crash(self):
        if not self.active:
            return
        sim = self.sim
        rng = self.rng
        params = self.params
        leader = self._leader()
        ids = sorted(sim.nodes)
        if params.crash_many_probability and rng.random() < params.crash_many_probability:
            victims = rng.sample(ids, rng.randint(len(ids) // 2 + 1, len(ids)))
        elif leader is not None and rng.random() < params.crash_leader_probability:
            victims = [leader.node_id]
        else:
            victims = [ids[rng.randrange(len(ids))]]
        for node_id in sorted(victims):
            node = sim.nodes[node_id]
            if node.up:
                self.crashes += 1
                node.crash()
                sim.scheduler.after(rng.randint(1, params.downtime_ms_max), self._restart, node)
        self._after(params.crash_interval_ms, self._crash)

    def _restart(self, node):
        if not node.up:
            node.start()

    def _partition(self):
        if not self.active:
            return
        sim = self.sim
        rng = self.rng
        params = self.params
        network = sim.network
        ids = sorted(sim.nodes)
        if len(ids) < 2:
            return
        leader = self._leader()
        draw = rng.random()
        if draw < params.isolate_leader_probability and leader is not None:
            others = [i for i in ids if i != leader.node_id]
            network.partition([[leader.node_id], others])
            kind = f"isolate {leader.node_id}"
        elif draw < params.isolate_leader_probability + params.one_way_probability:
            network.heal()
            links = rng.randint(1, len(ids))
            for _ in range(links):
                source, destination = rng.sample(ids, 2)
                network.block(source, destination)
            kind = f"one-way {sorted(network.blocked)}"
        else:
            shuffled = ids[:]
            rng.shuffle(shuffled)
            cut = rng.randint(1, len(ids) - 1)
            groups = [sorted(shuffled[:cut]), sorted(shuffled[cut:])]
            network.partition(groups)
            kind = f"split {groups}"
        self.partitions += 1
        self._partition_generation += 1
        sim.trace(f"{sim.scheduler.now_ms} partition {kind}")
        sim.scheduler.after(rng.randint(1, params.partition_ms_max), self._heal,
                            self._partition_generation)
        self._after(params.partition_interval_ms, self._partition)

    def _heal(self, generation):
        if generation != self._partition_generation:
            return
        self.sim.network.heal()
        self.sim.trace(f"{self.sim.scheduler.now_ms} heal")

    def _resign(self):
        if not self.active:
            return
        leader = self._leader()
        if leader is not None:
            self.resignations += 1
            self.sim.trace(f"{self.sim.scheduler.now_ms} resign {leader.node_id}")
            leader.resign()
        self._after(self.params.resign_interval_ms, self._resign)
