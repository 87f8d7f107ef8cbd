"""A secured kraftcore node (broker and controller in one process) on 127.0.0.1, configured
with Kafka's server.properties keys: a SASL_SSL broker listener (SCRAM-SHA-512), an SSL
controller listener that requires client certificates, and the StandardAuthorizer with
`broker` (SCRAM) and `node` (its own certificate) as super users. The SCRAM users come from
`kraftcore format --add-scram`.

* `broker` creates a topic and ACLs for `alice` with kafka-python's admin client; alice then
  produces and consumes with a group through kafka-python, confluent-kafka and aiokafka.
* A wrong password fails with Kafka's authentication error.
* `mallory`, authenticated but without ACLs, cannot register, heartbeat or unregister the
  node's broker (CLUSTER_AUTHORIZATION_FAILED), and the registration stays as it was; a TLS
  client whose certificate maps to a non-super user cannot Fetch the metadata log from the
  controller listener.

Every wait is bounded; none is a timing goal.
"""

import asyncio
import os
import random

import pytest
import trustme

from kraftcore.errors import ConnectionClosedError, KraftcoreError
from kraftcore.metadata.image import METADATA_VERSION
from kraftcore.metadata.records import METADATA_VERSION_LEVELS
from kraftcore.net import Connection
from kraftcore.net.tls import TlsSettings, client_context
from kraftcore.protocol import messages as m
from kraftcore.raft import rpc
from kraftcore.runtime.local_cluster import free_ports, start_node
from kraftcore.security.sasl import client_exchange
from kraftcore.types import Uuid
from tests.runtime.processes import kraftcore, stop, wait_for

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
NODE_ID = 1
TOPIC = "orders"
GROUPS = ("kp-group", "ck-group", "aio-group")
USERS = {"broker": "broker-secret", "alice": "alice-secret", "mallory": "mallory-secret"}
CLUSTER_AUTHORIZATION_FAILED = 31
TIMEOUT_MS = 20000


class Secured:
    def __init__(self, directory):
        self.directory = directory
        ca = trustme.CA()
        self.ca_path = str(directory / "ca.pem")
        ca.cert_pem.write_to_path(self.ca_path)
        self.node_pem = str(directory / "node.pem")
        ca.issue_cert("127.0.0.1", "localhost", common_name="node") \
            .private_key_and_cert_chain_pem.write_to_path(self.node_pem)
        self.mallory_pem = str(directory / "mallory.pem")
        ca.issue_cert("mallory.example", common_name="mallory") \
            .private_key_and_cert_chain_pem.write_to_path(self.mallory_pem)
        self.controller_port, self.broker_port = free_ports(2)
        self.config = str(directory / "server.properties")
        with open(self.config, "w") as f:
            f.write(self.properties())
        self.process = None

    def properties(self):
        d = self.directory
        lines = [
            f"node.id={NODE_ID}",
            "process.roles=broker,controller",
            f"controller.quorum.voters={NODE_ID}@127.0.0.1:{self.controller_port}",
            f"listeners=SASL_SSL://127.0.0.1:{self.broker_port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL",
            "inter.broker.listener.name=SASL_SSL",
            f"log.dirs={d / 'data'}",
            f"metadata.log.dir={d / 'metadata'}",
            "broker.session.timeout.ms=4000",
            "broker.heartbeat.interval.ms=500",
            "group.initial.rebalance.delay.ms=300",
            f"ssl.keystore.location={self.node_pem}",
            f"ssl.truststore.location={self.ca_path}",
            "listener.name.controller.ssl.client.auth=required",
            "ssl.principal.mapping.rules=RULE:^CN=([^,]*).*$/$1/,DEFAULT",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="broker" password="broker-secret";',
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:broker;User:node",
        ]
        return "\n".join(lines) + "\n"

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.broker_port}"

    def log_tail(self):
        path = os.path.join(os.path.dirname(self.config), "node.log")
        try:
            with open(path, errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""


def run(coroutine):
    return asyncio.run(coroutine)


async def sasl_connection(node, user, password, port=None):
    context = client_context(TlsSettings(truststore_location=node.ca_path))
    return await Connection.open(
        "127.0.0.1", port or node.broker_port, ssl_context=context, negotiate_versions=True,
        request_timeout_ms=TIMEOUT_MS,
        sasl=lambda: client_exchange("SCRAM-SHA-512", user, password,
                                     nonce=lambda: os.urandom(24)))


async def tls_connection(node, keystore):
    context = client_context(TlsSettings(truststore_location=node.ca_path,
                                         keystore_location=keystore))
    return await Connection.open("127.0.0.1", node.controller_port, ssl_context=context,
                                 negotiate_versions=True, request_timeout_ms=TIMEOUT_MS)


async def describe_brokers(node, user="broker"):
    conn = await sasl_connection(node, user, USERS[user])
    try:
        response = await conn.send(m.DescribeClusterRequest(include_fenced_brokers=True))
    finally:
        await conn.close()
    assert response.error_code == 0, response
    return {b.broker_id: b for b in response.brokers}


def unfenced(node):
    brokers = run(describe_brokers(node))
    broker = brokers.get(NODE_ID)
    return broker is not None and not broker.is_fenced and broker


def ready(node):
    if node.process.poll() is not None:
        raise RuntimeError(f"the node exited {node.process.returncode}")
    try:
        return unfenced(node)
    except (KraftcoreError, OSError) as exc:  # not listening or not registered yet
        raise AssertionError(repr(exc)) from exc


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    directory = tmp_path_factory.mktemp("secured")
    n = Secured(directory)
    args = ["format", "-c", n.config, "-t", CLUSTER]
    for user, password in USERS.items():
        args += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
    kraftcore(*args)
    n.process = start_node(n.config)
    try:
        try:
            wait_for("the broker to be unfenced", lambda: ready(n))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nnode.log ends with:\n{n.log_tail()}") from exc
        yield n
    finally:
        stop(n.process)


def kafka_python_options(node, user, password):
    return dict(bootstrap_servers=node.bootstrap, security_protocol="SASL_SSL",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user,
                sasl_plain_password=password, ssl_cafile=node.ca_path,
                request_timeout_ms=TIMEOUT_MS)


@pytest.fixture(scope="module")
def alice_may(node):
    """`broker` (a super user) creates the topic and alice's ACLs."""
    from kafka.admin import (ACL, ACLPermissionType, ACLOperation, ACLResourcePatternType,
                             KafkaAdminClient, NewTopic, ResourcePattern, ResourceType)

    admin = KafkaAdminClient(**kafka_python_options(node, "broker", USERS["broker"]))
    try:
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
        topic = ResourcePattern(ResourceType.TOPIC, TOPIC, ACLResourcePatternType.LITERAL)
        acls = [ACL(principal="User:alice", host="*", operation=op,
                    permission_type=ACLPermissionType.ALLOW, resource_pattern=topic)
                for op in (ACLOperation.WRITE, ACLOperation.READ, ACLOperation.DESCRIBE)]
        acls += [ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
                     permission_type=ACLPermissionType.ALLOW,
                     resource_pattern=ResourcePattern(ResourceType.GROUP, group,
                                                      ACLResourcePatternType.LITERAL))
                 for group in GROUPS]
        result = admin.create_acls(acls)
        assert not result["failed"], result["failed"]
        assert len(result["succeeded"]) == len(acls)
    finally:
        admin.close()
    return node


def test_alice_produces_and_consumes_with_kafka_python(alice_may):
    from kafka import KafkaConsumer, KafkaProducer

    options = kafka_python_options(alice_may, "alice", USERS["alice"])
    producer = KafkaProducer(**options)  # idempotent: WRITE on a topic is enough (KIP-679)
    try:
        values = [f"kp-{i}".encode() for i in range(5)]
        for value in values:
            producer.send(TOPIC, value).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(TOPIC, group_id="kp-group", auto_offset_reset="earliest",
                             consumer_timeout_ms=20000, **options)
    try:
        seen = []
        for record in consumer:
            seen.append(record.value)
            if set(values) <= set(seen):
                break
        assert set(values) <= set(seen), seen
        consumer.commit()
    finally:
        consumer.close()


def test_alice_produces_and_consumes_with_confluent_kafka(alice_may):
    import confluent_kafka

    config = {"bootstrap.servers": alice_may.bootstrap, "security.protocol": "SASL_SSL",
              "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
              "sasl.password": USERS["alice"], "ssl.ca.location": alice_may.ca_path}
    producer = confluent_kafka.Producer(config)
    errors = []
    values = [f"ck-{i}".encode() for i in range(5)]
    for value in values:
        producer.produce(TOPIC, value, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors
    consumer = confluent_kafka.Consumer({**config, "group.id": "ck-group",
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])
        seen = []

        def consumed():
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None or msg.error().code() == \
                    confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                if msg.error() is None:
                    seen.append(msg.value())
            return set(values) <= set(seen)

        wait_for("confluent-kafka to consume alice's records", consumed, 30)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def test_alice_produces_and_consumes_with_aiokafka(alice_may):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    options = dict(bootstrap_servers=alice_may.bootstrap, security_protocol="SASL_SSL",
                   sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
                   sasl_plain_password=USERS["alice"], request_timeout_ms=TIMEOUT_MS)
    values = [f"aio-{i}".encode() for i in range(5)]

    async def scenario():
        context = create_ssl_context(cafile=alice_may.ca_path)
        producer = AIOKafkaProducer(ssl_context=context, **options)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(TOPIC, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(TOPIC, group_id="aio-group",
                                    auto_offset_reset="earliest", ssl_context=context,
                                    **options)
        await consumer.start()
        try:
            seen = []

            async def consume():
                async for record in consumer:
                    seen.append(record.value)
                    if set(values) <= set(seen):
                        return

            await asyncio.wait_for(consume(), 30)
            await consumer.commit()
        finally:
            await consumer.stop()

    run(scenario())


def test_wrong_password_fails_authentication(node, caplog):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError, KafkaTimeoutError, SaslAuthenticationFailedError

    # api_version given: no version probe in the constructor (which waits 30 s whatever
    # the timeouts say); the first send is refused within max_block_ms
    producer = KafkaProducer(max_block_ms=3000, api_version=(3, 0),
                             **kafka_python_options(node, "alice", "not-alice-secret"))
    try:
        with pytest.raises(KafkaError) as raised:
            producer.send(TOPIC, b"refused").get(timeout=30)
    finally:
        producer.close(timeout=5)
    # The server answers SaslAuthenticate with SASL_AUTHENTICATION_FAILED (58) and closes
    # the connection a moment later, as Kafka does: the client reads the refusal. kafka-python
    # 3 logs it and keeps retrying its bootstrap until max_block_ms, then gives up.
    assert isinstance(raised.value, (SaslAuthenticationFailedError, KafkaTimeoutError)), \
        repr(raised.value)
    assert "SaslAuthenticationFailedError: Authentication failed during authentication due " \
        "to invalid credentials with SASL mechanism SCRAM-SHA-512" in caplog.text

    # kraftcore's own client gets the server's SASL refusal.
    with pytest.raises(Exception) as refused:
        run(sasl_connection(node, "alice", "not-alice-secret"))
    assert "Authentication failed during authentication due to invalid credentials with " \
        "SASL mechanism SCRAM-SHA-512" in str(refused.value), repr(refused.value)


def test_unprivileged_user_cannot_touch_the_broker_registration(node):
    before = run(describe_brokers(node))[NODE_ID]
    assert (before.host, before.port) == ("127.0.0.1", node.broker_port)

    cls = m.BrokerRegistrationRequest
    forged = cls(broker_id=NODE_ID, cluster_id=CLUSTER,
                 incarnation_id=Uuid.random(random.SystemRandom()),
                 listeners=[cls.Listener(name="SASL_SSL", host="6.6.6.6", port=6666,
                                         security_protocol=3)],
                 features=[cls.Feature(
                     name=METADATA_VERSION, min_supported_version=1,
                     max_supported_version=max(METADATA_VERSION_LEVELS.values()))],
                 rack=None, log_dirs=[])
    requests = [(forged, 4),
                (m.BrokerHeartbeatRequest(broker_id=NODE_ID, broker_epoch=before.broker_epoch,
                                          current_metadata_offset=10**9, want_fence=True,
                                          want_shut_down=True), 1),
                (m.UnregisterBrokerRequest(broker_id=NODE_ID), 0)]

    async def on_broker_listener(body, version):
        conn = await sasl_connection(node, "mallory", USERS["mallory"])
        try:
            return await conn.send(body, version=version)
        finally:
            await conn.close()

    async def on_controller_listener():
        conn = await tls_connection(node, node.mallory_pem)
        try:
            return [await conn.send(body, version=version) for body, version in requests]
        finally:
            await conn.close()

    # The broker listener does not serve these controller APIs: like Kafka it closes the
    # connection, whatever the caller may do.
    for body, version in requests:
        with pytest.raises(ConnectionClosedError):
            run(on_broker_listener(body, version))
    # On the controller listener mallory's certificate authenticates, and is refused.
    registered, beat, unregistered = run(on_controller_listener())
    assert registered.error_code == CLUSTER_AUTHORIZATION_FAILED, registered
    assert beat.error_code == CLUSTER_AUTHORIZATION_FAILED, beat
    assert unregistered.error_code == CLUSTER_AUTHORIZATION_FAILED, unregistered
    # A heartbeat interval later the registration is as it was, and unfenced.
    after = wait_for("a still unfenced broker", lambda: unfenced(node))
    assert (after.host, after.port, after.broker_epoch) == \
        ("127.0.0.1", node.broker_port, before.broker_epoch)


def test_certificate_of_a_non_super_user_cannot_fetch_the_metadata_log(node):
    async def fetch(keystore):
        conn = await tls_connection(node, keystore)
        try:
            body = rpc.fetch_request(CLUSTER, -1, 0, 0, 0, 0, 1 << 20)
            return await conn.send(body)
        finally:
            await conn.close()

    refused = run(fetch(node.mallory_pem))
    assert refused.error_code == CLUSTER_AUTHORIZATION_FAILED, refused
    assert not any(p.records for t in refused.responses for p in t.partitions), refused
    # The same request with the node's own certificate (a super user) is served.
    served = run(fetch(node.node_pem))
    assert served.error_code == 0, served
