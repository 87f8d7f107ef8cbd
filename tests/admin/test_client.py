"""`AdminClient` (`kraftcore.admin.client`) used directly, as tests, benchmarks and the demo
use it, against controllers served in-process (`tests.admin.servers`): what its operations
return, where its requests go (a write bootstrapped at a standby is redirected to the
active controller), and the `AdminError`s a refusal becomes. No test asserts on a
duration; every call has a hang guard."""

import asyncio
import socket

import pytest

from kraftcore.admin.client import AdminClient, quorum_leader
from kraftcore.errors import AdminError, ConnectError
from kraftcore.metadata.image import CONFIG_BROKER, CONFIG_TOPIC

from tests.admin.servers import HANG_GUARD_S, Cluster, brokers, cluster  # noqa: F401 (fixtures)

MIN_ISR = "min.insync.replicas"


def admin_run(bootstrap, operation):
    """`operation(admin)` with an `AdminClient` bootstrapped at `bootstrap`, closed after."""
    async def run():
        async with AdminClient(bootstrap, timeout_ms=10_000) as admin:
            return await asyncio.wait_for(operation(admin), HANG_GUARD_S)
    return asyncio.run(run())


def test_a_write_at_a_standby_reaches_the_active_controller(brokers):
    cluster, _ = brokers

    async def create_and_describe(admin):
        await admin.create_topic("orders", 3, 2, {MIN_ISR: "2"})
        return await admin.describe_topics(["orders"]), await admin.list_topics()

    (doc,), names = admin_run(cluster.standby_endpoint, create_and_describe)
    assert names == ["orders"]
    assert (doc["name"], doc["partition_count"], doc["replication_factor"]) == ("orders", 3, 2)
    topic = cluster.image.topic("orders")
    assert doc["topic_id"] == str(topic.topic_id)
    assert [(p["partition"], p["leader"], p["replicas"]) for p in doc["partitions"]] == [
        (i, topic.partitions[i].leader, topic.partitions[i].replicas) for i in range(3)]
    assert cluster.image.configs[(CONFIG_TOPIC, "orders")] == {MIN_ISR: "2"}


def test_refusals_are_admin_errors_that_name_the_error(brokers):
    cluster, _ = brokers
    admin_run(cluster.active_endpoint, lambda admin: admin.create_topic("t", 1, 1))
    with pytest.raises(AdminError, match=r"cannot create topic 't': TOPIC_ALREADY_EXISTS"):
        admin_run(cluster.active_endpoint, lambda admin: admin.create_topic("t", 1, 1))
    with pytest.raises(AdminError, match="topic 'nope' does not exist"):
        admin_run(cluster.active_endpoint, lambda admin: admin.describe_topics(["nope"]))
    with pytest.raises(AdminError, match="topic 'nope' does not exist"):
        admin_run(cluster.standby_endpoint, lambda admin: admin.delete_topic("nope"))
    admin_run(cluster.standby_endpoint, lambda admin: admin.delete_topic("t"))
    assert cluster.image.topic("t") is None


def test_configs_of_a_topic_and_of_the_cluster(brokers):
    cluster, _ = brokers

    async def configure(admin):
        await admin.create_topic("t", 1, 1)
        await admin.alter_configs((CONFIG_TOPIC, "t"), {MIN_ISR: "2"})
        await admin.alter_configs((CONFIG_BROKER, ""), {MIN_ISR: "3"})
        own = await admin.describe_configs((CONFIG_TOPIC, "t"))
        every = await admin.describe_configs((CONFIG_TOPIC, "t"), inherited=True)
        await admin.alter_configs((CONFIG_BROKER, ""), delete=[MIN_ISR])
        cluster_wide = await admin.describe_configs((CONFIG_BROKER, ""))
        return own, every, cluster_wide

    own, every, cluster_wide = admin_run(cluster.standby_endpoint, configure)
    assert [(d["name"], d["value"], d["source"]) for d in own] == [
        (MIN_ISR, "2", "DYNAMIC_TOPIC_CONFIG")]
    assert [s["source"] for s in own[0]["synonyms"]] == [
        "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "DEFAULT_CONFIG"]
    assert {d["name"]: d["source"] for d in every} == {
        MIN_ISR: "DYNAMIC_TOPIC_CONFIG", "unclean.leader.election.enable": "DEFAULT_CONFIG"}
    assert cluster_wide == []


def test_brokers_and_their_states(brokers):
    cluster, epochs = brokers
    cluster.heartbeat(3, epochs[3], want_fence=True)
    listed = admin_run(cluster.standby_endpoint, lambda admin: admin.list_brokers())
    assert [(b["id"], b["state"], b["epoch"]) for b in listed] == [
        (1, "unfenced", epochs[1]), (2, "unfenced", epochs[2]), (3, "fenced", epochs[3])]


def test_the_quorum_as_its_leader_describes_it(cluster):
    summary = admin_run(cluster.standby_endpoint, lambda admin: admin.describe_quorum())
    assert (summary["cluster_id"], summary["leader_id"]) == ("kraftcore-cluster", 1)
    assert [r["node_id"] for r in summary["replicas"]] == [1]
    assert summary["current_voters"][0]["endpoints"] == [cluster.address]


def test_quorum_leader_asks_one_controller():
    cluster = Cluster(standby_knows_leader=True)
    try:
        assert asyncio.run(quorum_leader(cluster.active_endpoint)) == 1
        # A node that is not the leader answers NOT_LEADER_OR_FOLLOWER: no leader from it.
        assert asyncio.run(quorum_leader(cluster.standby_endpoint)) is None
    finally:
        cluster.close()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = s.getsockname()
    assert asyncio.run(quorum_leader(nobody, timeout_s=1.0)) is None


def test_nothing_listening_is_a_connect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = s.getsockname()
    with pytest.raises(ConnectError):
        admin_run(nobody, lambda admin: admin.list_topics())
