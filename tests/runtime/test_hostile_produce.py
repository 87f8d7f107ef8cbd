"""Hostile Produce requests against a broker process, over one raw connection: batches
with a bad CRC, a wrong magic, lying lengths, record counts or offset deltas (their CRC
resealed, so only the structure checks can catch them), an unknown topic and partition,
and a request larger than socket.request.max.bytes. Each batch gets Kafka's error code and
nothing is stored (the partition's latest offset does not move); the connection goes on
answering, and after the oversized frame (which closes that connection, as Kafka does) the
broker serves a new one."""

import socket
import struct

import pytest

from kraftcore import codec
from kraftcore.protocol import framing, messages as m
from kraftcore.protocol.error_codes import ErrorCode as E
from tests.kernels.records_util import reseal
from tests.runtime.processes import LocalCluster, wait_for

REQUEST_BYTES_MAX = 1 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("hostile"),
                           [f"socket.request.max.bytes={REQUEST_BYTES_MAX}",
                            f"queued.max.request.bytes={4 * REQUEST_BYTES_MAX}"], brokers=1)
    try:
        wait_for("the broker", lambda: cluster.brokers() == {4: "unfenced"})
        port = cluster.nodes[4]["port"]
        with Client(port) as client:
            response = client.call(m.CreateTopicsRequest(topics=[
                m.CreateTopicsRequest.CreatableTopic(name="h", num_partitions=1,
                                                     replication_factor=1)],
                timeout_ms=30000), 7)
            assert response.topics[0].error_code == 0
        yield port
    finally:
        cluster.down()


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.correlation = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.sock.close()

    def send_raw(self, frame):
        self.sock.sendall(frame)

    def read(self, api_key, version):
        size = struct.unpack(">i", self._exactly(4))[0]
        cid, body = framing.decode_response(self._exactly(size), api_key, version)
        assert cid == self.correlation
        return body

    def _exactly(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out

    def call(self, body, version):
        self.correlation += 1
        self.send_raw(framing.encode_request(body, version, self.correlation, "hostile"))
        return self.read(body.api_key, version)


def produce(topic, partition, data):
    cls = m.ProduceRequest
    return cls(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        cls.TopicProduceData(name=topic, partition_data=[
            cls.PartitionProduceData(index=partition, records=data)])])


def latest(client):
    cls = m.ListOffsetsRequest
    response = client.call(cls(replica_id=-1, topics=[cls.ListOffsetsTopic(name="h", partitions=[
        cls.ListOffsetsPartition(partition_index=0, timestamp=-1)])]), 5)
    return response.topics[0].partitions[0].offset


def good():
    return bytes(codec.encode_batch([b"a", b"b", b"c"], timestamp=1000))


def edit(offset, fmt, value, seal=True):
    raw = bytearray(good())
    struct.pack_into(fmt, raw, offset, value)
    return reseal(raw) if seal else bytes(raw)


CASES = {
    "bad crc": (lambda: good()[:-1] + bytes([good()[-1] ^ 0x40]), E.CORRUPT_MESSAGE),
    "wrong magic": (lambda: edit(16, ">b", 1, seal=False), E.CORRUPT_MESSAGE),
    "length longer than the bytes": (lambda: edit(8, ">i", len(good()) + 100, seal=False),
                                     E.CORRUPT_MESSAGE),
    "length shorter than the records": (lambda: edit(8, ">i", 60), E.CORRUPT_MESSAGE),
    "record count that lies": (lambda: edit(57, ">i", 7), E.CORRUPT_MESSAGE),
    "offset delta that lies": (lambda: edit(23, ">i", 0), E.CORRUPT_MESSAGE),
    "no batch at all": (lambda: b"\x00" * 20, E.CORRUPT_MESSAGE),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_batch_is_refused_and_nothing_is_stored(broker, case):
    make, code = CASES[case]
    with Client(broker) as client:
        before = latest(client)
        response = client.call(produce("h", 0, make()), 9)
        result = response.responses[0].partition_responses[0]
        assert result.error_code == code, result
        assert result.error_message
        assert latest(client) == before  # nothing stored
        ok = client.call(produce("h", 0, good()), 9)  # the same connection goes on
        assert ok.responses[0].partition_responses[0].error_code == 0
        assert latest(client) == before + 3


def test_unknown_topics_and_partitions(broker):
    with Client(broker) as client:
        for topic, partition in (("nope", 0), ("h", 5)):
            result = client.call(produce(topic, partition, good()), 9)
            assert result.responses[0].partition_responses[0].error_code == \
                E.UNKNOWN_TOPIC_OR_PARTITION


def test_an_oversized_request_closes_only_its_connection(broker):
    with Client(broker) as client:
        before = latest(client)
        big = produce("h", 0, bytes(codec.encode_batch([bytes(REQUEST_BYTES_MAX)],
                                                        timestamp=1000)))
        client.correlation += 1
        with pytest.raises((ConnectionError, OSError)):
            # the broker closes the connection on the frame's size, maybe while the rest of
            # the frame is still going out (a broken pipe) or else before any answer
            client.send_raw(framing.encode_request(big, 9, client.correlation, "hostile"))
            client.read(0, 9)
    with Client(broker) as client:
        assert latest(client) == before
        assert client.call(produce("h", 0, good()), 9).responses[0] \
            .partition_responses[0].error_code == 0
