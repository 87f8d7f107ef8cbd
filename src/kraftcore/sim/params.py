"""The parameters of a simulation run, every one drawn from its seed.

`params_for_seed(seed, ...)` derives every parameter of a run (Raft timeouts, network fault
rates, crash / partition / resignation rates, workload shape, snapshot cadence) from the
seed alone; only the cluster shape (`voters`, `observers`) and the length of the safety
phase (`duration_ms`) are given. The controller workload draws its own parameters
(`ControllerSimParams`) after the shared ones.
"""

import dataclasses

from kraftcore.raft.config import RaftConfig
from kraftcore.sim.faults import FaultParams
from kraftcore.sim.network import NetworkParams
from kraftcore.sim.scheduler import Rngs

# Simulated time the liveness phase may take (after faults stop) before it is a failure.
LIVENESS_MS_DEFAULT = 20_000
# Brokers (observers) the controller workload runs when none are asked for.
CONTROLLER_BROKERS_DEFAULT = 3


@dataclasses.dataclass(frozen=True)
class SimParams:
    seed: int
    voters: int
    observers: int
    duration_ms: int
    liveness_ms: int
    raft: RaftConfig
    network: NetworkParams
    faults: FaultParams
    # Simulated fsync latency of a Ready that persists something: [0, fsync_ms_max].
    fsync_ms_max: int
    # The client proposes every [1, propose_interval_ms_max] ms, [1, values_max] values.
    propose_interval_ms_max: int
    values_per_proposal_max: int
    # A node snapshots its state machine after this many applied records.
    snapshot_records: int
    snapshot_padding_bytes: int
    # "raft": the client proposes raw values; "controller": controllers, brokers and client
    # operations (kraftcore.sim.controller), with its parameters in `controller`.
    workload: str = "raft"
    controller: object = None

    def describe(self):
        """Every parameter, one `name=value` list."""
        parts = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if dataclasses.is_dataclass(value):
                inner = ", ".join(f"{f.name}={getattr(value, f.name)!r}"
                                  for f in dataclasses.fields(value))
                parts.append(f"{field.name}=({inner})")
            else:
                parts.append(f"{field.name}={value!r}")
        return " ".join(parts)

    def replay_command(self):
        command = (f"python -m kraftcore.sim --seed {self.seed} --voters {self.voters} "
                   f"--observers {self.observers} --duration-ms {self.duration_ms}")
        if self.workload != "raft":
            command += f" --workload {self.workload}"
        if self.liveness_ms != LIVENESS_MS_DEFAULT:
            command += f" --liveness-ms {self.liveness_ms}"
        return command


WORKLOADS = ("raft", "controller")


def params_for_seed(seed, voters=3, observers=0, duration_ms=None,
                    liveness_ms=LIVENESS_MS_DEFAULT, workload="raft"):
    """Every parameter of a run, drawn from the seed (the first stream of `Rngs(seed)`).
    The controller workload draws its own parameters after the shared ones, so a seed's
    Raft, network and fault parameters are the same under both workloads."""
    if voters < 1 or observers < 0:
        raise ValueError(f"need voters >= 1 and observers >= 0, got {voters}, {observers}")
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    if workload == "controller" and observers < 1:
        raise ValueError("the controller workload needs at least one broker (observer)")
    rng = Rngs(seed).child()
    election_timeout_ms = rng.choice((100, 150, 200, 300))
    raft = RaftConfig(
        election_timeout_ms=election_timeout_ms,
        fetch_timeout_ms=election_timeout_ms * rng.choice((2, 3)),
        election_backoff_ms_max=election_timeout_ms,
        election_backoff_base_ms=rng.choice((10, 20, 50)),
        request_timeout_ms=election_timeout_ms * rng.choice((1, 2)),
        retry_backoff_ms=rng.choice((5, 10, 20)),
        # Below the request timeout with room for the network delay (RaftConfig's rule).
        fetch_wait_ms_max=min(rng.choice((10, 25, 50, 100)), election_timeout_ms // 2),
        fetch_bytes_max=rng.choice((512, 4096, 65536, 1 << 20)),
        pre_vote=rng.random() < 0.85,
    )
    network = NetworkParams(
        delay_ms_min=1,
        delay_ms_max=rng.choice((2, 5, 10)),
        drop_probability=rng.choice((0.0, 0.01, 0.05, 0.1)),
        duplicate_probability=rng.choice((0.0, 0.01, 0.05)),
        spike_probability=rng.choice((0.0, 0.01, 0.05)),
        spike_ms_max=rng.choice((50, 200, 500)),
    )
    faults = FaultParams(
        crash_interval_ms=rng.choice((0, 300, 1000, 3000)),
        downtime_ms_max=rng.choice((50, 500, 2000)),
        crash_leader_probability=round(rng.random() * 0.6, 3),
        crash_many_probability=rng.choice((0.0, 0.0, 0.1, 0.3)),
        partition_interval_ms=rng.choice((0, 500, 1500, 4000)),
        partition_ms_max=rng.choice((100, 500, 2000)),
        one_way_probability=0.3,
        isolate_leader_probability=0.3,
        resign_interval_ms=rng.choice((0, 0, 2000, 5000)),
    )
    drawn_duration_ms = rng.choice((3000, 4000, 5000, 6000))
    fsync_ms_max = rng.choice((0, 1, 3, 10, 25))
    propose_interval_ms_max = rng.choice((5, 20, 100))
    values_per_proposal_max = rng.choice((1, 5, 20, 100))
    snapshot_records = rng.choice((20, 100, 500, 1 << 40))
    snapshot_padding_bytes = rng.choice((0, 100, 3000))
    controller = None
    if workload == "controller":
        controller = controller_params(rng, raft)
    return SimParams(
        seed=seed, voters=voters, observers=observers,
        duration_ms=drawn_duration_ms if duration_ms is None else duration_ms,
        liveness_ms=liveness_ms, raft=raft, network=network, faults=faults,
        fsync_ms_max=fsync_ms_max, propose_interval_ms_max=propose_interval_ms_max,
        values_per_proposal_max=values_per_proposal_max, snapshot_records=snapshot_records,
        snapshot_padding_bytes=snapshot_padding_bytes, workload=workload,
        controller=controller,
    )


@dataclasses.dataclass(frozen=True)
class ControllerSimParams:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    idle_interval_ms_max: int
    # How long a client or broker waits for an answer before it counts the request lost.
    request_timeout_ms: int
    # The client sends an operation every [1, op_interval_ms_max] ms, at most
    # ops_inflight_max unanswered at once, over `topics` topic names.
    op_interval_ms_max: int
    ops_inflight_max: int
    topics: int
    # Every node snapshots its image after this many bytes of committed batches.
    snapshot_bytes: int
    # Chance that an online broker asks for an ISR change at each heartbeat interval.
    alter_partition_probability: float


def controller_params(rng, raft):
    """The controller workload's parameters, drawn from the seed's parameter stream."""
    heartbeat_interval_ms = rng.choice((50, 100, 200))
    return ControllerSimParams(
        session_timeout_ms=heartbeat_interval_ms * rng.choice((3, 5, 10)),
        heartbeat_interval_ms=heartbeat_interval_ms,
        idle_interval_ms_max=rng.choice((100, 250, 500)),
        request_timeout_ms=max(raft.request_timeout_ms, rng.choice((200, 500, 1000))),
        op_interval_ms_max=rng.choice((5, 20, 50)),
        ops_inflight_max=rng.choice((1, 2, 4)),
        topics=rng.choice((2, 4, 8)),
        snapshot_bytes=rng.choice((1024, 8192, 65536, 1 << 40)),
        alter_partition_probability=rng.choice((0.0, 0.2, 0.5)),
    )


def default_observers(workload):
    return CONTROLLER_BROKERS_DEFAULT if workload == "controller" else 0
