"""The peer harness against a REAL Kafka 4.x node (combined mode, one node).

This checks the harness itself: each client must produce 10 000 records to a real broker
and read exactly them back. The data-plane tests then point the same functions at kraftcore.
Slow (Maven fetch on first use, a JVM start): run with ``pytest -m slow tests/peers``.
"""

from __future__ import annotations

import shutil
import uuid

import pytest

from tests.peers import clients
from tests.peers.kafka_node import kafka_combined, request_versions, unavailable

pytestmark = pytest.mark.slow

RECORDS = 10000
PARTITIONS = 3


def _need(*tools: str) -> None:
    """`unavailable` without `tools`."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        unavailable(f"needs {', '.join(missing)}")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    _need("java")
    tmp = tmp_path_factory.mktemp("kafka")
    with kafka_combined(tmp, request_log=True) as bootstrap:
        yield bootstrap, tmp / "requests.log"


@pytest.mark.parametrize("client", sorted(clients.RUNNERS))
def test_client_round_trip(kafka, client):
    if client == "kafkajs":
        _need("node", "npm")
    bootstrap, _ = kafka
    topic = f"peer-{client}-{uuid.uuid4().hex[:8]}"
    result = clients.RUNNERS[client](bootstrap, topic, records=RECORDS, partitions=PARTITIONS,
                                     replication_factor=1, acks="all", timeout_s=180)
    assert clients.problems(result, RECORDS, PARTITIONS) == [], result


def test_librdkafka_all_topics_metadata(kafka):
    bootstrap, _ = kafka
    topic = f"peer-meta-{uuid.uuid4().hex[:8]}"
    res = clients.run_confluent(bootstrap, topic, records=10, partitions=2, replication_factor=1)
    assert clients.problems(res, 10, 2) == []
    md = clients.librdkafka_all_topics_metadata(bootstrap)
    assert len(md["brokers"]) == 1
    assert set(md["topics"][topic]["partitions"]) == {0, 1}


def test_kafka_python_idempotent_default(kafka):
    bootstrap, log = kafka
    topic = f"peer-idem-{uuid.uuid4().hex[:8]}"
    res = clients.kafka_python_idempotent(bootstrap, topic, records=1000)
    assert clients.problems(res, 1000, 1) == [], res
    if res["idempotent_by_default"]:
        assert res["enable_idempotence"] is True
        assert res["producer_id"] is not None and res["producer_id"] >= 0
        # the broker saw InitProducerId from the default client id of kafka-python 3
        seen = request_versions(log)
        assert any("INIT_PRODUCER_ID" in apis for apis in seen.values()), seen
