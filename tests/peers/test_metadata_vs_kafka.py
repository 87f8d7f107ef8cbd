"""A kraftcore broker's Metadata answer against Apache Kafka 4.4's, for the same topics.

One real Kafka node (combined mode, node id 1, `tests.peers.kafka_node.kafka_combined`) and
one kraftcore node (`kraftcore cluster up --controllers 1 --brokers 1 --combined`: node 1 is
the controller and the only broker) get the same topics through the same CreateTopics
request, sent to their broker listeners with kraftcore's own `Connection`: several topics of
several partitions, replication factor 1, one with a config, and one with the name of one
of Kafka's internal topics. Both run with auto.create.topics.enable=false.

Then the same MetadataRequests go to both at every version both serve (v0-13: the
clients' versions are among them — KafkaJS 6, kafka-python 2.x 8, librdkafka and
kafka-python 3.x up to 13): the topics by name with an unknown and two invalid names (and
allow_auto_topic_creation set, the clients' default), all topics, no topics, by topic id
(v12+), with and without authorized operations (v8+), and topic ids before v12 (which both
refuse). Both answers are decoded with kraftcore's message classes and compared in every
field a client reads: throttle, brokers (node id, host, port, rack), cluster id, controller
id, the cluster's authorized operations, the top-level error (v13), and per topic its
error, name, id, IsInternal, authorized operations and partitions (error, index, leader,
leader epoch, replicas, ISR, offline replicas).

What must differ between two clusters is normalised, and only that:

* ports: each node listens on a free port of its own. A broker's advertised port must be
  the port the client connected to (checked), and is then compared as "bootstrap port";
* cluster ids: random per cluster. Each answer's must be the id the node was formatted
  with (kraftcore's cluster.json, Kafka's meta.properties; checked), compared as
  "cluster id";
* topic ids: random per topic. Each must be the id that node's CreateTopics returned for
  that topic (so non-zero and the same in every answer; checked), compared as
  "id of <topic>";
* the order of topics: Kafka lists them in the order of a hash set, and clients key them by
  name, so topics are compared sorted by name (partitions in the order given).

Hosts (127.0.0.1 on both), broker and controller ids (1 on both) and leader epochs are not
normalised: a new partition's leader epoch is 0 on both nodes.

Then two real clients' views, against both: librdkafka's `list_topics()` (confluent-kafka)
and kafka-python 3's `describe_topics()` (which asks for authorized operations), compared
the same way; Kafka's request log shows the Metadata versions they sent (v13 today), which
must be among those the sweep compares.

Without Java, or without Maven and cached jars, the tests skip on a developer's machine and
fail under CI (`.ci/run` sets CI)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from kraftcore.net import Connection
from kraftcore.protocol import messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from kraftcore.types import ZERO_UUID, Uuid
from tests.peers import clients
from tests.peers.kafka_node import kafka_combined, kafka_jars_for_tests, request_versions
from tests.runtime.processes import WAIT_S, LocalCluster, wait_for

CLIENT_ID = "kraftcore-metadata-oracle"
REQUEST_TIMEOUT_MS = 30_000
CREATE_TOPICS_VERSION = 7
R = m.MetadataRequest
T = R.MetadataRequestTopic
C = m.CreateTopicsRequest

# (name, partitions, configs): replication factor 1 on a one-broker cluster. The last one
# bears an internal topic's name: Kafka lets CreateTopics make it, and marks it internal.
TOPICS = [("orders", 3, {}), ("payments", 2, {"retention.ms": "3600000"}),
          ("audit.log-v1", 1, {}), ("__transaction_state", 1, {})]
CREATED = [name for name, _, _ in TOPICS]
UNKNOWN = "no-such-topic"
# Names a client may ask for that name no topic: unknown, an internal topic's (IsInternal
# even though it does not exist), and two names no topic can have.
ASKED = CREATED + [UNKNOWN, "__consumer_offsets", "bad name", ".."]
UNKNOWN_ID = Uuid(bytes(range(1, 17)))
# What a topic id may read as once normalised: none, a created topic's, or the unknown one.
KNOWN_IDS = {"zero", str(UNKNOWN_ID)} | {f"id of {name}" for name in CREATED}


class Side:
    """One cluster under test: its bootstrap address, the cluster id it was formatted with
    and the topic ids its CreateTopics returned; `view` reads an answer through them."""

    def __init__(self, name, bootstrap, cluster_id):
        self.name = name
        self.bootstrap = bootstrap
        self.host, port = bootstrap.rsplit(":", 1)
        self.port = int(port)
        self.cluster_id = cluster_id
        self.topic_ids = {}  # name -> Uuid, from CreateTopics
        self.request_log = None  # Kafka's: the versions clients sent

    def __repr__(self):
        return self.name

    def id_of(self, name):
        return self.topic_ids[name]

    def topic_id(self, topic_id):
        if topic_id == ZERO_UUID:
            return "zero"
        for name, known in self.topic_ids.items():
            if known == topic_id:
                return f"id of {name}"
        return str(topic_id)  # UNKNOWN_ID (asked of both), or an id this side never gave

    def port_of(self, port):
        return "bootstrap port" if port == self.port else port

    def cluster(self, cluster_id):
        return "cluster id" if cluster_id == self.cluster_id else cluster_id

    def view(self, response):
        """The fields of a MetadataResponse a client reads, normalised (module docstring)."""
        topics = [{
            "name": t.name, "error_code": t.error_code, "topic_id": self.topic_id(t.topic_id),
            "is_internal": t.is_internal,
            "topic_authorized_operations": t.topic_authorized_operations,
            "partitions": [(p.error_code, p.partition_index, p.leader_id, p.leader_epoch,
                            list(p.replica_nodes), list(p.isr_nodes),
                            list(p.offline_replicas)) for p in t.partitions],
        } for t in response.topics]
        return {
            "throttle_time_ms": response.throttle_time_ms,
            "brokers": sorted((b.node_id, b.host, self.port_of(b.port), b.rack)
                              for b in response.brokers),
            "cluster_id": self.cluster(response.cluster_id),
            "controller_id": response.controller_id,
            "cluster_authorized_operations": response.cluster_authorized_operations,
            "error_code": response.error_code,
            "topics": sorted(topics, key=lambda t: (t["name"] or "", t["topic_id"])),
        }


async def _send_all(side, requests):
    """[(label, body, version)] sent in order on one connection; the responses."""
    conn = await Connection.open(side.host, side.port, client_id=CLIENT_ID,
                                 request_timeout_ms=REQUEST_TIMEOUT_MS)
    try:
        return [await conn.send(body, version) for _, body, version in requests]
    finally:
        await conn.close()


def send_all(side, requests):
    return asyncio.run(_send_all(side, requests))


def send(side, body, version):
    return send_all(side, [("", body, version)])[0]


async def _api_versions(side):
    conn = await Connection.open(side.host, side.port, client_id=CLIENT_ID,
                                 request_timeout_ms=REQUEST_TIMEOUT_MS, negotiate_versions=True)
    try:
        return conn.api_versions
    finally:
        await conn.close()


def metadata(version, names=None, ids=None, everything=False, operations=False,
             auto_create=True):
    """A MetadataRequest as a client builds it at `version`."""
    if everything:
        topics = [] if version == 0 else None
    else:
        topics = [T(name=n) for n in names or ()] + [T(name=None, topic_id=i) for i in ids or ()]
    body = R(topics=topics)
    if version >= 4:
        body.allow_auto_topic_creation = auto_create
    if version >= 8:
        body.include_topic_authorized_operations = operations
    if 8 <= version <= 10:
        body.include_cluster_authorized_operations = operations
    return body


def requests_for(side, version):
    """The same requests for each side at `version`; by-id requests name that side's ids."""
    out = [("named", metadata(version, ASKED), version),
           ("all topics", metadata(version, everything=True), version)]
    if version >= 1:
        out.append(("no topics", metadata(version, []), version))
    if version >= 8:
        out += [("named, authorized operations", metadata(version, ASKED, operations=True),
                 version),
                ("all topics, authorized operations",
                 metadata(version, everything=True, operations=True), version)]
    if version in (10, 11):  # topic ids before v12: refused as a whole, on both
        out.append(("a topic id before v12",
                    metadata(version, ids=[side.id_of("orders")]), version))
    if version >= 12:
        out += [("by id", metadata(version, ids=[side.id_of("orders"), UNKNOWN_ID,
                                                 side.id_of("payments")], operations=True),
                 version),
                ("by id and by name", metadata(version, ["payments"],
                                               ids=[side.id_of("orders")]), version)]
    return out


def _create_topics(side):
    body = C(topics=[C.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1,
        configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])
        for name, partitions, configs in TOPICS], timeout_ms=REQUEST_TIMEOUT_MS)
    response = send(side, body, CREATE_TOPICS_VERSION)
    results = {t.name: t for t in response.topics}
    assert {n: (t.error_code, t.error_message) for n, t in results.items()} == {
        n: (0, None) for n in CREATED}, side
    for name, partitions, _ in TOPICS:
        assert (results[name].num_partitions, results[name].replication_factor) == (
            partitions, 1), (side, name)
        assert results[name].topic_id != ZERO_UUID, (side, name)
        side.topic_ids[name] = results[name].topic_id


def _ready(side):
    """Until broker 1 is listed, then (once the topics exist) until every partition has a
    leader in the broker's answer."""
    def broker_listed():
        return [b.node_id for b in send(side, metadata(12, everything=True), 12).brokers] == [1]

    wait_for(f"{side}'s broker in its own Metadata", broker_listed)
    _create_topics(side)

    def led():
        answer = send(side, metadata(12, CREATED), 12)
        return all(t.error_code == 0 and t.partitions and
                   all(p.leader_id == 1 for p in t.partitions) for t in answer.topics)

    wait_for(f"{side}'s partitions led", led)


def _kafka_cluster_id(data_dir):
    for line in (data_dir / "meta.properties").read_text().splitlines():
        if line.startswith("cluster.id="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"no cluster.id in {data_dir / 'meta.properties'}")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    kafka_jars_for_tests()
    tmp = tmp_path_factory.mktemp("kafka-oracle")
    with kafka_combined(tmp, request_log=True) as bootstrap:
        side = Side("Kafka", bootstrap, _kafka_cluster_id(tmp / "data"))
        side.request_log = tmp / "requests.log"
        _ready(side)
        yield side


@pytest.fixture(scope="module")
def kraftcore(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("kraftcore-oracle"), [], brokers=1,
                           combined=True, controllers=1)
    try:
        (node,) = cluster.nodes.values()
        assert (node["id"], sorted(node["roles"])) == (1, ["broker", "controller"])
        side = Side("kraftcore", f"127.0.0.1:{node['ports']['broker']}",
                    cluster.description["cluster_id"])
        _ready(side)
        yield side
    finally:
        cluster.down()


def _versions():
    return list(range(m.MetadataRequest.valid_versions[0],
                      m.MetadataRequest.valid_versions[1] + 1))


def test_both_serve_the_clients_metadata_versions(kafka, kraftcore):
    ranges = {side.name: asyncio.run(_api_versions(side))[3] for side in (kafka, kraftcore)}
    low, high = max(r[0] for r in ranges.values()), min(r[1] for r in ranges.values())
    assert (low, high) == (0, 13), ranges
    # The sweep below covers them all, the clients' versions among them.
    assert _versions() == list(range(low, high + 1))


def _differences(kafka_view, ours_view, where):
    if kafka_view == ours_view:
        return []
    out = []
    for key in kafka_view:
        if kafka_view[key] != ours_view[key]:
            out.append(f"{where}: {key}:\n  Kafka     {kafka_view[key]!r}\n"
                       f"  kraftcore {ours_view[key]!r}")
    return out


@pytest.mark.parametrize("version", _versions())
def test_metadata_answers_are_kafkas(kafka, kraftcore, version):
    kafka_requests = requests_for(kafka, version)
    ours_requests = requests_for(kraftcore, version)
    kafka_answers = send_all(kafka, kafka_requests)
    ours_answers = send_all(kraftcore, ours_requests)
    problems = []
    for (label, _, _), k, o in zip(kafka_requests, kafka_answers, ours_answers):
        kafka_view, ours_view = kafka.view(k), kraftcore.view(o)
        problems += _differences(kafka_view, ours_view, f"v{version} {label}")
        # What the normalisation stands for: the same cluster and topic ids every time.
        for view in (kafka_view, ours_view):
            assert view["cluster_id"] in ("cluster id", None), (label, view["cluster_id"])
            assert {t["topic_id"] for t in view["topics"]} <= KNOWN_IDS, (label, view["topics"])
    assert not problems, "\n".join(problems)
    # The answers hold what the comparison is about (a sweep of empty answers would agree).
    named = kraftcore.view(ours_answers[0])
    assert {t["name"] for t in named["topics"]} == set(ASKED)
    assert named["brokers"] == [(1, "127.0.0.1", "bootstrap port", None)]
    assert named["cluster_id"] == ("cluster id" if version >= 2 else None)
    assert named["controller_id"] == (1 if version >= 1 else -1)
    orders = next(t for t in named["topics"] if t["name"] == "orders")
    assert orders["topic_id"] == ("id of orders" if version >= 10 else "zero")
    assert [p[3] for p in orders["partitions"]] == [0 if version >= 7 else -1] * 3
    codes = {t["name"]: t["error_code"] for t in named["topics"]}
    assert (codes[UNKNOWN], codes["bad name"]) == (E.UNKNOWN_TOPIC_OR_PARTITION,
                                                   E.INVALID_TOPIC_EXCEPTION)


def test_asking_for_an_unknown_topic_creates_it_on_neither(kafka, kraftcore):
    name = f"asked-{uuid.uuid4().hex[:8]}"
    for side in (kafka, kraftcore):
        for version in (4, 13):
            answer = send(side, metadata(version, [name], auto_create=True), version)
            assert [(t.name, t.error_code) for t in answer.topics] == [
                (name, E.UNKNOWN_TOPIC_OR_PARTITION)], side
    time.sleep(1)  # (Kafka creates an auto-created topic after answering)
    for side in (kafka, kraftcore):
        listed = send(side, metadata(13, everything=True), 13)
        assert sorted(t.name for t in listed.topics) == sorted(CREATED), side


# ------------------------------------------------------------------------------ clients

LIBRDKAFKA_ID = "kraftcore-oracle-librdkafka"
KAFKA_PYTHON_ID = "kraftcore-oracle-kafka-python"


def _sent_versions_were_compared(kafka, *client_ids):
    """The Metadata versions these clients sent (Kafka's request log) are among those the
    version sweep compares, and they sent some."""
    seen = request_versions(kafka.request_log)
    sent = {v for c in client_ids for v in seen.get(c, {}).get("METADATA", [])}
    assert sent and sent <= set(_versions()), (client_ids, seen)
    return sent

def _librdkafka_view(side, metadata_dict):
    view = dict(metadata_dict)
    # Which connection librdkafka read the answer on (-1: the bootstrap connection, before
    # it learnt that broker's id) is the client's own timing, no field of the answer.
    del view["orig_broker_id"]
    view["cluster_id"] = side.cluster(view["cluster_id"])
    view["brokers"] = {i: address.replace(f":{side.port}", ":bootstrap port")
                       for i, address in view["brokers"].items()}
    return view


def test_librdkafkas_view_is_the_same(kafka, kraftcore):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    views = {}
    for side in (kafka, kraftcore):
        view = _librdkafka_view(side, clients.librdkafka_all_topics_metadata(side.bootstrap))
        admin = AdminClient({"bootstrap.servers": side.bootstrap, "client.id": LIBRDKAFKA_ID})
        try:
            unknown = admin.list_topics(topic=UNKNOWN, timeout=WAIT_S)
        except KafkaException as exc:  # pragma: no cover - reported as the difference
            unknown = exc
        view["unknown"] = {n: str(t.error) for n, t in unknown.topics.items()}
        views[side.name] = view
    assert views["kraftcore"] == views["Kafka"]
    ours = views["kraftcore"]
    assert ours["cluster_id"] == "cluster id" and ours["controller_id"] == 1
    assert ours["brokers"] == {1: "127.0.0.1:bootstrap port"}
    assert sorted(ours["topics"]) == sorted(CREATED)
    assert "UNKNOWN_TOPIC_OR_PART" in ours["unknown"][UNKNOWN]
    _sent_versions_were_compared(kafka, "kraftcore-peer-confluent", LIBRDKAFKA_ID)


def _kafka_python_view(side, topics):
    def topic_id(value):
        if value is None:
            return None
        return side.topic_id(Uuid(uuid.UUID(str(value)).bytes))

    out = []
    for t in topics:
        t = dict(t)
        t["topic_id"] = topic_id(t.get("topic_id"))
        out.append(t)
    return sorted(out, key=lambda t: (t["name"] or "", t["topic_id"] or ""))


def test_kafka_pythons_view_is_the_same(kafka, kraftcore):
    from kafka import KafkaAdminClient

    views = {}
    for side in (kafka, kraftcore):
        admin = KafkaAdminClient(bootstrap_servers=side.bootstrap, client_id=KAFKA_PYTHON_ID,
                                 request_timeout_ms=REQUEST_TIMEOUT_MS)
        try:
            views[side.name] = {"named": _kafka_python_view(side, admin.describe_topics(ASKED)),
                                "all": _kafka_python_view(side, admin.describe_topics())}
        finally:
            admin.close()
    assert views["kraftcore"] == views["Kafka"]
    named = {t["name"]: t for t in views["kraftcore"]["named"]}
    assert set(named) == set(ASKED)
    # kafka-python asks for authorized operations: every topic operation, without an
    # authorizer, on both.
    assert sorted(named["orders"]["authorized_operations"]) == sorted(
        ["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
         "ALTER_CONFIGS"])
    assert named["__transaction_state"]["is_internal"] is True
    assert named["orders"]["topic_id"] == "id of orders"
    _sent_versions_were_compared(kafka, KAFKA_PYTHON_ID)
