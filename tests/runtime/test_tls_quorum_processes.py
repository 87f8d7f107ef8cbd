"""Real processes on 127.0.0.1 with the controller listener on TLS with client certificates
(`ssl.client.auth=required`) and StandardAuthorizer: the quorum elects, a broker registers
over TLS, the active controller is SIGKILLed and another takes over, and the cluster serves
clients as before. A client without a certificate cannot reach the controllers at all.
Every wait is bounded; none is a timing goal."""

import json

import pytest
import trustme

from .processes import LocalCluster, kraftcore, wait_for
from .test_processes import FAST

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    paths = {"ca": str(base / "ca.pem"), "node": str(base / "node.pem")}
    ca.cert_pem.write_to_path(paths["ca"])
    ca.issue_cert("127.0.0.1", "localhost", common_name="node") \
        .private_key_and_cert_chain_pem.write_to_path(paths["node"])
    paths["client"] = str(base / "client.properties")
    with open(paths["client"], "w") as f:
        f.write(f"security.protocol=SSL\nssl.truststore.location={paths['ca']}\n"
                f"ssl.keystore.location={paths['node']}\n")
    return paths


def test_a_tls_quorum_elects_fails_over_and_serves(tmp_path, pki):
    from kafka import KafkaConsumer, KafkaProducer

    settings = FAST + [
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
        f"ssl.keystore.location={pki['node']}", f"ssl.truststore.location={pki['ca']}",
        "listener.name.controller.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*).*$/$1/,DEFAULT",
        f"authorizer.class.name={STANDARD_AUTHORIZER}", "super.users=User:node",
        # the clients of this test reach the PLAINTEXT broker listener as ANONYMOUS
        "allow.everyone.if.no.acl.found=true",
    ]
    cluster = LocalCluster(tmp_path / "cluster", settings, brokers=1)
    try:
        def command(*args, exclude=()):
            return kraftcore(*args, "--bootstrap-controller", cluster.bootstrap(exclude),
                             "--command-config", pki["client"])

        def admin(*args, exclude=()):
            return json.loads(command(*args, "--json", exclude=exclude).stdout)

        def quorum(exclude=()):
            return admin("quorum", "describe", "--status", exclude=exclude)

        status = wait_for("a leader", lambda: quorum()["leader_id"] >= 0 and quorum())
        assert len(status["current_voters"]) == 3
        wait_for("an unfenced broker", lambda: {
            b["id"]: b["state"] for b in admin("brokers", "list")["brokers"]} == {
            4: "unfenced"})
        # without a client certificate the controllers cannot be reached
        refused = kraftcore("quorum", "describe", "--bootstrap-controller",
                            cluster.bootstrap(), "--timeout-ms", "3000", check=False)
        assert refused.returncode != 0

        bootstrap = f"127.0.0.1:{cluster.nodes[4]['port']}"
        command("topics", "create", "--topic", "before", "--partitions", "1",
                "--replication-factor", "1")
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        producer.send("before", b"one").get(timeout=30)

        leader = status["leader_id"]
        cluster.kill(leader)
        wait_for("a new leader", lambda: quorum(exclude=(leader,))["leader_id"]
                 not in (-1, leader))
        # the new active controller creates a topic, the broker follows it over TLS and
        # stays unfenced
        command("topics", "create", "--topic", "after", "--partitions", "1",
                "--replication-factor", "1", exclude=(leader,))
        producer.send("after", b"two").get(timeout=60)
        producer.close()
        assert {b["id"]: b["state"] for b in admin("brokers", "list", exclude=(leader,))[
            "brokers"]}[4] == "unfenced"
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=20_000)
        consumer.subscribe(["before", "after"])
        seen = set()
        for record in consumer:
            seen.add((record.topic, record.value))
            if len(seen) == 2:
                break
        consumer.close()
        assert seen == {("before", b"one"), ("after", b"two")}
    finally:
        cluster.down()
