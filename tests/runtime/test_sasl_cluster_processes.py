"""Real processes on 127.0.0.1 where every listener speaks SASL_PLAINTEXT with PLAIN and
StandardAuthorizer checks every request: two brokers fetch the metadata log from the
controller, register and replicate over SASL, an admin grants a user her topic, and that user
produces with acks=all to a topic replicated on both brokers and consumes it back. A
user without ACLs is refused. Every wait is bounded; none is a timing goal."""

import json

import pytest

from .processes import LocalCluster, kraftcore, wait_for
from .test_processes import FAST

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="node" password="node-secret" user_node="node-secret" '
        'user_alice="alice-secret" user_mallory="mallory-secret";')
SETTINGS = FAST + [
    "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms=PLAIN", "sasl.mechanism.controller.protocol=PLAIN",
    "sasl.mechanism.inter.broker.protocol=PLAIN", f"sasl.jaas.config={JAAS}",
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users=User:node",
]


def client_options(user, password):
    return dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                sasl_plain_username=user, sasl_plain_password=password)


def test_nodes_and_clients_authenticate_with_sasl(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    node_config = tmp_path / "node.properties"
    node_config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                           "sasl.jaas.config=org.apache.kafka.common.security.plain."
                           'PlainLoginModule required username="node" '
                           'password="node-secret";\n')
    cluster = LocalCluster(tmp_path / "cluster", SETTINGS, brokers=2, controllers=1)
    try:
        def command(*args):
            return kraftcore(*args, "--command-config", str(node_config))

        controller = ("--bootstrap-controller", cluster.bootstrap())
        ids = sorted(i for i, n in cluster.nodes.items() if "broker" in n["roles"])
        wait_for("a leader", lambda: json.loads(command(
            "quorum", "describe", *controller, "--status", "--json").stdout)["leader_id"] >= 0)
        wait_for("two unfenced brokers", lambda: {
            b["id"]: b["state"] for b in json.loads(command(
                "brokers", "list", *controller, "--json").stdout)["brokers"]} == {
            i: "unfenced" for i in ids})
        command("topics", "create", *controller, "--topic", "orders", "--partitions", "1",
                "--replication-factor", "2")
        brokers = [f"127.0.0.1:{cluster.nodes[i]['port']}" for i in ids]
        where = ("--bootstrap-server", ",".join(brokers))
        command("acls", "add", *where, "--allow-principal", "User:alice",
                "--operation", "WRITE", "--operation", "READ", "--topic", "orders")
        command("acls", "add", *where, "--allow-principal", "User:alice",
                "--operation", "READ", "--group", "billing")
        for broker in brokers:  # each broker checks against its own copy of the ACLs
            wait_for(f"the ACLs on {broker}", lambda: len(json.loads(command(
                "acls", "list", "--bootstrap-server", broker, "--json").stdout)["acls"]) == 3)

        # acks=all: the write is committed only once the follower fetched it over SASL
        producer = KafkaProducer(bootstrap_servers=brokers, acks="all",
                                 **client_options("alice", "alice-secret"))
        for i in range(5):
            producer.send("orders", f"order-{i}".encode()).get(timeout=60)
        producer.close()
        consumer = KafkaConsumer("orders", bootstrap_servers=brokers, group_id="billing",
                                 auto_offset_reset="earliest", consumer_timeout_ms=20_000,
                                 **client_options("alice", "alice-secret"))
        values = []
        for record in consumer:  # (ends after 20 s without a record: a failure)
            values.append(record.value)
            if len(values) == 5:
                break
        consumer.close()
        assert values == [f"order-{i}".encode() for i in range(5)]
        described = json.loads(command("topics", "describe", *controller, "--topic", "orders",
                                       "--json").stdout)
        (partition,) = described["topics"][0]["partitions"] if "topics" in described else \
            described["partitions"]
        assert sorted(partition["isr"]) == ids

        # a user without ACLs authenticates, and is refused
        intruder = KafkaProducer(bootstrap_servers=brokers, acks="all",
                                 **client_options("mallory", "mallory-secret"))
        with pytest.raises(TopicAuthorizationFailedError):
            intruder.send("orders", b"forged").get(timeout=30)
        intruder.close()
    finally:
        cluster.down()
