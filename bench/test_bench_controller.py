"""Controller benchmarks: the active controller over a real Raft core (`kraftcore.controller.local`,
one voter, in-process storage, no network).

* `controller-fence-100k`: a broker that leads 100,000 partitions (1000 topics x 100
  partitions, replicas [0, 1, 2], 3 brokers) asks to be fenced. Measured: the heartbeat's
  write event on the active controller — generating the 100,000 PartitionChangeRecords and
  the fence record, encoding them, appending and committing them through the Raft core,
  replaying them into the working image — plus a standby controller's replay of the
  committed batch into its own image. Peer in the same run, `codec-floor`: encoding and
  decoding the same records once each, the bytes' share of the work. Goal: <= 1 s.
* `controller-ops`: controller operations per second: 1000 create-topic operations (one
  partition, replication factor 3) each run to commit, one at a time, with a heartbeat of
  every broker between them.
* `controller-ops-simulated`: the same kind of work in the simulator's controller workload
  (`kraftcore.sim.controller`): 3 controllers and 3 brokers over the simulated network,
  no faults, a client keeping up to 16 operations in flight (create / delete topic,
  configs), brokers registering, heartbeating and asking for ISR changes, every invariant
  checked after every event and the history checked for linearizability at the end.
  Measured: answered operations (client and broker registrations) per wall-clock second
  for a whole run of 3 simulated seconds plus its liveness phase and final checks; the
  one-voter `controller-ops` figure of the same run is the reference.

The setup (building the cluster) is outside the timed part. Goals are printed as MET / NOT
MET; nothing asserts on a timing.
"""

import random

import pytest

import dataclasses

from kraftcore.controller.replication import NewTopic
from kraftcore.metadata import records as R
from kraftcore.metadata.loader import MetadataLoader
from kraftcore.types import Uuid
from kraftcore.sim.controller import ControllerSimulation
from kraftcore.sim.faults import FaultParams
from kraftcore.controller.local import LocalQuorum
from kraftcore.sim.params import params_for_seed

TOPICS = 1000
PARTITIONS_PER_TOPIC = 100
BROKERS = 3
FENCE_GOAL_S = 1.0
OPS = 1000
ROUNDS = 3
_STATE = {}


def _cluster():
    quorum = LocalQuorum(seed=7)
    rng = random.Random(7)
    epochs = {b: quorum.call("register_broker", b, Uuid.random(rng)).broker_epoch
              for b in range(BROKERS)}
    for b in range(BROKERS):
        quorum.call("broker_heartbeat", b, epochs[b], metadata_offset=quorum.next_offset())
    return quorum, epochs


def _fence_setup():
    quorum, epochs = _cluster()
    assignment = {p: [0, 1, 2] for p in range(PARTITIONS_PER_TOPIC)}
    for t in range(TOPICS):
        result = quorum.call("create_topics", [NewTopic(f"topic-{t}", assignments=assignment)])
        assert result[0].error_code == 0, result
    standby = MetadataLoader(image=quorum.controller.image)
    return (quorum, epochs, standby), {}


@pytest.mark.benchmark(group="controller-fence-100k")
def test_fence_broker_leading_100k(benchmark):
    def fence(quorum, epochs, standby):
        start = quorum.next_offset()
        result = quorum.call("broker_heartbeat", 0, epochs[0], metadata_offset=start,
                             want_fence=True)
        standby.apply(quorum.storage.read_batches(start, quorum.next_offset()))
        return result, quorum, standby

    result, quorum, standby = benchmark.pedantic(fence, setup=_fence_setup, rounds=ROUNDS)
    image = quorum.controller.image
    moved = sum(p.leader != 0 for t in image.topics.values() for p in t.partitions.values())
    assert result.is_fenced and moved == TOPICS * PARTITIONS_PER_TOPIC
    assert standby.image.same_state(image)
    benchmark.extra_info.update(peer="kraftcore-controller",
                                records=TOPICS * PARTITIONS_PER_TOPIC + 1)
    _STATE["fence"] = benchmark.stats.stats.median


@pytest.mark.benchmark(group="controller-fence-100k")
def test_fence_codec_floor(benchmark):
    tid = [Uuid.random(random.Random(t)) for t in range(TOPICS)]
    records = [R.PartitionChangeRecord(partition_id=p, topic_id=tid[t], isr=[1, 2], leader=1)
               for t in range(TOPICS) for p in range(PARTITIONS_PER_TOPIC)]

    def run():
        return R.decode_values(R.encode_values(records, 1))

    benchmark.pedantic(run, rounds=ROUNDS, warmup_rounds=1)
    benchmark.extra_info.update(peer="codec-floor", records=len(records))
    _STATE["floor"] = benchmark.stats.stats.median


@pytest.mark.benchmark(group="controller-ops")
def test_controller_operations(benchmark):
    def setup():
        return _cluster(), {}

    def run(quorum, epochs):
        for i in range(OPS):
            result = quorum.call("create_topics", [NewTopic(f"t-{i}", 1, 3)])
            if result[0].error_code:
                raise AssertionError(result)
            for b in range(BROKERS):
                quorum.call("broker_heartbeat", b, epochs[b],
                            metadata_offset=quorum.next_offset())
        return quorum

    quorum = benchmark.pedantic(run, setup=setup, rounds=ROUNDS)
    assert len(quorum.controller.image.topics) == OPS
    benchmark.extra_info.update(peer="kraftcore-controller", operations=OPS * (1 + BROKERS))
    _STATE["ops"] = benchmark.stats.stats.median


SIM_MS = 3000


def _simulation():
    params = params_for_seed(1, observers=3, duration_ms=SIM_MS, workload="controller")
    params = dataclasses.replace(
        params, faults=FaultParams(), network=params.network.calm(), fsync_ms_max=1,
        controller=dataclasses.replace(params.controller, op_interval_ms_max=1,
                                       ops_inflight_max=16, topics=64))
    return (ControllerSimulation(params),), {}


@pytest.mark.benchmark(group="controller-ops-simulated")
def test_controller_operations_simulated(benchmark):
    def run(sim):
        sim.run()
        return sim

    sim = benchmark.pedantic(run, setup=_simulation, rounds=ROUNDS)
    stats = sim.stats()
    assert stats.operations > 1000 and stats.elections >= 1
    benchmark.extra_info.update(peer="kraftcore-sim-3-controllers", operations=stats.operations,
                                simulated_ms=stats.simulated_ms)
    _STATE["sim"] = (benchmark.stats.stats.median, stats.operations, stats.simulated_ms)


def terminal_summary(tr):
    """What this file prints after the suite's summary table (conftest.py)."""
    if "fence" in _STATE:
        fence = _STATE["fence"]
        status = "MET" if fence <= FENCE_GOAL_S else "NOT MET"
        line = (f"controller goal {status}: fence a broker leading "
                f"{TOPICS * PARTITIONS_PER_TOPIC:,} partitions (generate, commit, "
                f"replay on the active and one standby) <= {FENCE_GOAL_S:g} s -- "
                f"{fence:.3f} s")
        if "floor" in _STATE:
            line += (f"; codec floor {_STATE['floor']:.3f} s, controller/floor "
                     f"{fence / _STATE['floor']:.1f}x")
        tr.write_line(line)
    if "ops" in _STATE:
        rate = OPS * (1 + BROKERS) / _STATE["ops"]
        tr.write_line(f"controller operations: {rate:,.0f} ops/s to commit, one at a "
                      f"time ({OPS} create-topics + {OPS * BROKERS} heartbeats)")
    if "sim" in _STATE:
        seconds, operations, simulated_ms = _STATE["sim"]
        line = (f"controller operations in the simulator (3 controllers, 3 brokers, all "
                f"checks on): {operations / seconds:,.0f} answered ops/s of wall time, "
                f"{operations / simulated_ms * 1000:,.0f} per simulated second")
        if "ops" in _STATE:
            line += (f"; one-voter in-process / simulated "
                     f"{OPS * (1 + BROKERS) / _STATE['ops'] / (operations / seconds):.1f}x")
        tr.write_line(line)
