"""Real controllers on 127.0.0.1, started by the CLI, against packets from outside the
quorum: Vote and BeginQuorumEpoch at epoch 2^31-1 from node 99 (not a voter) and naming
real voters, sent over raw connections. Every controller refuses them, keeps its epoch and
its quorum-state, the quorum keeps its leader and commits, another client's request is
answered within its timeout, and a later election still works. Then fail-stop as an
operator sees it: a controller whose quorum-state says it led the last epoch kraftcore uses
exits with status 1 and one error line at its election timer, instead of running on.

Every wait is bounded; none is a timing goal."""

import asyncio
import os
import subprocess
import sys

from kraftcore.runtime.local_cluster import free_ports, node_properties
from kraftcore.cli.format import random_uuid
from kraftcore.limits import RAFT_EPOCH_ACCEPTED_MAX, RAFT_EPOCH_MAX
from kraftcore.log import quorum_state
from kraftcore.types import ElectionState
from kraftcore.net import Connection
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.raft import rpc

from tests.runtime.test_processes import FAST, WAIT_S, Cluster, kraftcore, wait_for

OVERFLOW = 2**31 - 1
HOSTILE = 99
# The request timeout of the client that is not attacking: generous, but finite.
SECOND_CLIENT_TIMEOUT_MS = 10_000


def attack_bodies(voters, target):
    """The packets sent to `target`: (what, body, version, expected partition error)."""
    spoofed = next(v for v in voters if v != target)
    bodies = []
    for pre_vote in (False, True):
        bodies.append((f"vote(pre={pre_vote}) from {HOSTILE}", rpc.vote_request(
            None, -1, OVERFLOW, HOSTILE, 0, 2**40, pre_vote), E.INCONSISTENT_VOTER_SET))
        bodies.append((f"vote(pre={pre_vote}) as {spoofed}", rpc.vote_request(
            None, -1, OVERFLOW, spoofed, 0, 2**40, pre_vote), E.INVALID_REQUEST))
    bodies.append((f"begin from {HOSTILE}", rpc.begin_quorum_epoch_request(
        None, -1, HOSTILE, OVERFLOW), E.INCONSISTENT_VOTER_SET))
    bodies.append((f"begin as {spoofed}", rpc.begin_quorum_epoch_request(
        None, -1, spoofed, OVERFLOW), E.INVALID_REQUEST))
    bodies.append((f"end as {spoofed}", rpc.end_quorum_epoch_request(
        None, spoofed, RAFT_EPOCH_MAX, [target]), E.INVALID_REQUEST))
    return bodies


VERSION = {"VoteRequest": rpc.VERSIONS["Vote"],
           "BeginQuorumEpochRequest": rpc.VERSIONS["BeginQuorumEpoch"],
           "EndQuorumEpochRequest": rpc.VERSIONS["EndQuorumEpoch"]}


async def attack(controllers):
    """Send every packet to every controller (one raw connection each); the partitions of
    the answers, by (controller id, what)."""
    answers = {}
    voters = sorted(controllers)
    for node_id, port in sorted(controllers.items()):
        conn = await Connection.open("127.0.0.1", port, request_timeout_ms=WAIT_S * 1000)
        try:
            for what, body, expected in attack_bodies(voters, node_id):
                response = await conn.send(body, VERSION[type(body).__name__])
                answers[node_id, what] = (response.topics[0].partitions[0], expected)
        finally:
            await conn.close()
    return answers


async def describe_quorum(port):
    """What another client (an admin tool) asks meanwhile: answered within its timeout,
    or RequestTimeoutError fails the test."""
    conn = await Connection.open("127.0.0.1", port)
    try:
        response = await conn.send(rpc.describe_quorum_request(),
                                   rpc.VERSIONS["DescribeQuorum"],
                                   timeout_ms=SECOND_CLIENT_TIMEOUT_MS)
        return response.topics[0].partitions[0]
    finally:
        await conn.close()


async def attack_while_another_client_asks(controllers, leader):
    return await asyncio.gather(attack(controllers), describe_quorum(controllers[leader]))


def leader_status(cluster, exclude=(), other_than=()):
    """DescribeQuorum's status when the quorum has a leader (not in `other_than`), else
    None."""
    status = cluster.quorum(exclude)
    return status if status["leader_id"] not in (-1, *other_than) else None


def metadata_partition_dir(node):
    return os.path.join(node["dirs"][-1], "__cluster_metadata-0")


def test_overflow_votes_from_outside_do_not_stop_the_quorum(tmp_path):
    cluster = Cluster(tmp_path / "cluster", brokers=1)
    try:
        status = wait_for("a leader", lambda: leader_status(cluster))
        wait_for("broker 4 unfenced", lambda: cluster.brokers() == {4: "unfenced"})
        leader = status["leader_id"]
        controllers = {n["id"]: n["port"] for n in cluster.controllers()}

        answers, described = asyncio.run(asyncio.wait_for(
            attack_while_another_client_asks(controllers, leader), WAIT_S))

        for (node_id, what), (part, expected) in answers.items():
            assert part.error_code == expected, (node_id, what, part)
            assert part.leader_epoch < RAFT_EPOCH_ACCEPTED_MAX, (node_id, what, part)
            assert not getattr(part, "vote_granted", False), (node_id, what, part)
        assert described.error_code in (E.NONE, E.NOT_LEADER_OR_FOLLOWER)
        assert described.leader_epoch < RAFT_EPOCH_ACCEPTED_MAX

        # Every controller still runs, and what it persisted is an ordinary epoch.
        assert cluster.supervisor.poll() is None
        for node in cluster.controllers():
            state = quorum_state.read(metadata_partition_dir(node))
            assert state.epoch < RAFT_EPOCH_ACCEPTED_MAX and state.voted_id != HOSTILE
        after = cluster.quorum()
        assert after["leader_id"] > 0
        assert status["leader_epoch"] <= after["leader_epoch"] < RAFT_EPOCH_ACCEPTED_MAX
        # It commits: a topic created now is acknowledged (committed) and listed.
        kraftcore("topics", "create", "--bootstrap-controller", cluster.bootstrap(),
                  "--topic", "after-the-packets", "--partitions", "1",
                  "--replication-factor", "1")

        # And it can still elect: without its leader the other two take over.
        old = cluster.quorum()
        cluster.kill(old["leader_id"])
        gone = (old["leader_id"],)
        new = wait_for("a new leader", lambda: leader_status(cluster, gone, gone))
        assert old["leader_epoch"] < new["leader_epoch"] < RAFT_EPOCH_ACCEPTED_MAX
        kraftcore("topics", "create", "--bootstrap-controller",
                  cluster.bootstrap((old["leader_id"],)), "--topic", "after-the-election",
                  "--partitions", "1", "--replication-factor", "1")
    finally:
        cluster.down()


def test_a_controller_that_exhausts_the_epochs_exits_1_with_one_error_line(tmp_path):
    """The deterministic trigger an operator could meet: quorum-state says this node led
    epoch RAFT_EPOCH_MAX. It starts (as Kafka, resigned), and at its election timer it
    would need epoch 2^31-1: it stops with status 1 and one error line that says so."""
    ports = free_ports(3)
    voters = dict(zip((1, 2, 3), ports))  # only node 1 runs
    directory = str(tmp_path / "node-1")
    os.makedirs(directory)
    config = os.path.join(directory, "server.properties")
    overrides = [tuple(setting.split("=", 1)) for setting in FAST]
    with open(config, "w") as f:
        f.write(node_properties(1, ("controller",), voters, {"controller": ports[0]},
                                directory, overrides))
    kraftcore("format", "--config", config, "--cluster-id", random_uuid())
    partition = os.path.join(directory, "metadata", "__cluster_metadata-0")
    os.makedirs(partition, exist_ok=True)
    quorum_state.write(partition, ElectionState(RAFT_EPOCH_MAX, leader_id=1, voted_id=1), 1)

    result = subprocess.run([sys.executable, "-m", "kraftcore.cli.main", "start", config],
                            check=False, capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    assert ("node 1 stops: the Raft core failed: RaftEpochExhaustedError: node 1 would "
            f"become unattached at epoch {RAFT_EPOCH_MAX + 1}") in errors[0]
    assert "exhausted" in errors[0] and "Traceback" not in result.stderr
    assert quorum_state.read(partition).epoch == RAFT_EPOCH_MAX  # nothing past it stored
