"""The simulator's controller workload: quorum controllers, brokers and a client under
faults (kraftcore.sim.controller), and proof that its checks (kraftcore.sim.controller_checks)
catch broken controllers."""

import contextlib
import re

import pytest

from kraftcore.controller import controller as controller_module
from kraftcore.controller import replication
from kraftcore.metadata import snapshot as snapshot_module
from kraftcore.metadata.image import EMPTY_IMAGE
from kraftcore.metadata import records as R
from kraftcore.sim.controller_checks import image_problems
from kraftcore.sim.params import params_for_seed
from kraftcore.sim.run import main, run_seed, run_seeds

SEEDS = range(1, 9)
SLOW_JOBS = 2


@pytest.fixture(scope="module")
def results():
    return [run_seed(seed, workload="controller") for seed in SEEDS]


def test_seeds_pass(results):
    failures = [r.report() for r in results if not r.passed]
    assert not failures, "\n".join(failures)


def test_the_seeds_exercise_failover_fencing_snapshots_and_restarts(results):
    total = lambda name: sum(getattr(r.stats, name) for r in results)  # noqa: E731
    assert total("operations") > 100
    assert total("elections") > len(results)  # failovers, not only the first election
    assert total("crashes") > 0 and total("partitions") > 0
    assert total("brokers_fenced") > 0  # sessions expired in simulated time
    assert total("snapshots_created") > 0 and total("snapshots_loaded") > 0
    assert all(r.stats.liveness_ms is not None for r in results)


def test_a_seed_replays_to_the_same_trace():
    first = run_seed(3, workload="controller")
    again = run_seed(3, workload="controller")
    assert first.trace_hash == again.trace_hash


def test_the_workload_keeps_the_seeds_raft_parameters():
    raft = params_for_seed(5)
    controller = params_for_seed(5, observers=3, workload="controller")
    assert (raft.raft, raft.network, raft.faults) == (controller.raft, controller.network,
                                                      controller.faults)
    assert controller.controller is not None
    assert "--workload controller" in controller.replay_command()


def test_the_controller_workload_needs_a_broker():
    with pytest.raises(ValueError, match="at least one broker"):
        params_for_seed(1, observers=0, workload="controller")
    with pytest.raises(SystemExit):
        main(["--workload", "controller", "--observers", "0", "--seed", "1"])


def test_command_line(capsys):
    assert main(["--workload", "controller", "--seeds", "1..2"]) == 0
    out = capsys.readouterr().out
    assert "passed 2 seeds (3 voters, 3 observers)" in out
    assert "answered controller operations" in out


# ---------------------------------------------------------------------- image checks


def _image_with(*records):
    from kraftcore.metadata.delta import replay_all

    return replay_all(EMPTY_IMAGE, list(records), end_offset=len(records), epoch=1)


def _broker(broker_id, fenced):
    return R.RegisterBrokerRecord(broker_id=broker_id, incarnation_id=_uuid(broker_id),
                                  broker_epoch=broker_id, fenced=fenced)


def _uuid(n):
    from kraftcore.types import Uuid

    return Uuid(bytes(15) + bytes([n + 2]))


def _partition(**fields):
    values = dict(partition_id=0, topic_id=_uuid(50), replicas=[1, 2], isr=[1, 2], leader=1,
                  leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[],
                  leader_recovery_state=0)
    values.update(fields)
    return R.PartitionRecord(**values)


def test_image_problems_name_each_broken_invariant():
    topic = R.TopicRecord(name="t", topic_id=_uuid(50))
    good = _image_with(_broker(1, False), _broker(2, False), topic, _partition())
    assert image_problems(good) == []
    fenced = _image_with(_broker(1, False), _broker(2, True), topic, _partition())
    assert any("fenced brokers [2] in the ISR" in p for p in image_problems(fenced))
    fenced_leader = _image_with(_broker(1, True), _broker(2, False), topic,
                                _partition(isr=[2, 1]))
    assert any("leader 1 is fenced" in p for p in image_problems(fenced_leader))
    outside = _image_with(_broker(1, False), _broker(2, False), topic,
                          _partition(isr=[2]))
    assert any("not in the ISR" in p for p in image_problems(outside))
    unclean = _image_with(_broker(1, False), _broker(2, False), topic,
                          _partition(isr=[1], leader=1, leader_recovery_state=1))
    assert image_problems(unclean) == []
    unregistered = _image_with(_broker(1, False), topic, _partition(isr=[1]))
    assert any("registered" in p for p in image_problems(unregistered))


# ---------------------------------------------------------------------- broken controllers


@contextlib.contextmanager
def _patched(target, name, replacement):
    original = getattr(target, name)
    setattr(target, name, replacement(original))
    try:
        yield
    finally:
        setattr(target, name, original)


def _early_completion(original):
    """Complete a write's future when it is proposed instead of when it commits."""
    def write(self, records, future, result, now_ms):
        original(self, records, future, result, now_ms)
        if future is not None and self._parked and self._parked[-1][1] is future:
            self._parked.pop()
            future.set_result(result)
    return write


def _fencing_keeps_isr(original):
    """Fence or re-register a broker without moving its leaderships or ISR seats."""
    return lambda self, image, broker_id: []


def _snapshots_drop_configs(original):
    return lambda image: [r for r in original(image) if type(r) is not R.ConfigRecord]


def _first_failure(seeds):
    for seed in seeds:
        result = run_seed(seed, workload="controller")
        if not result.passed:
            return result.violation
    return None


@pytest.mark.parametrize("target, name, mutation, seeds, expected", [
    (controller_module.QuorumController, "_write", _early_completion, range(13, 40),
     "linearizability"),
    (replication.ReplicationControl, "remove_broker", _fencing_keeps_isr, range(1, 10),
     "fenced brokers"),
    (snapshot_module, "image_records", _snapshots_drop_configs, range(1, 10),
     "snapshot .* loads into an image unlike|images differ"),
], ids=["future-before-commit", "fenced-broker-in-isr", "snapshot-loses-configs"])
def test_the_checks_catch_a_broken_controller(target, name, mutation, seeds, expected):
    with _patched(target, name, mutation):
        violation = _first_failure(seeds)
    assert violation is not None, "no seed caught the broken controller"
    assert re.search(expected, violation), violation


@pytest.mark.slow
@pytest.mark.parametrize("voters, brokers, seeds", [(3, 3, range(1, 1001)),
                                                    (5, 2, range(1, 301))],
                         ids=["3controllers-3brokers", "5controllers-2brokers"])
def test_slow_seeds(voters, brokers, seeds):
    failures = [r.report() for r in run_seeds(seeds, voters, brokers, jobs=SLOW_JOBS,
                                               workload="controller") if not r.passed]
    assert not failures, f"{len(failures)} of {len(seeds)} seeds failed:\n" + "\n".join(failures)
