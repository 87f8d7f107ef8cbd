"""Protocol codec benchmark: decode one FetchResponse body at its latest version (v17)
carrying 1 MiB of record batches, on kraftcore's native and pure-Python kernels and with
kafka-python 3's generated FetchResponse, all in the same run on the same bytes.

The response is what a KRaft leader or a broker sends a fetcher: 8 partitions of one topic,
each with 128 KiB of uncompressed v2 batches (100-record batches of the suite's data set,
conftest.py), plus the KRaft tagged fields (CurrentLeader, a NodeEndpoint). The Records
field decodes as a zero-copy view of the input, so decoding does not copy the 1 MiB: the
plain tests at the bottom check that, and that every peer reads the same values.
"""

import pytest

from kraftcore import codec
from kraftcore.protocol.messages import FetchResponse
from kraftcore.types import Uuid

VERSION = 17
PARTITIONS = 8
PARTITION_BYTES = 128 * 1024
RECORDS_PER_BATCH = 100
TOPIC_ID = Uuid(bytes(range(1, 17)))


def _partition_records(dataset, first_offset):
    """Whole batches of the data set from offset `first_offset`, at least PARTITION_BYTES."""
    out, offset, n = bytearray(), first_offset, len(dataset.values)
    while len(out) < PARTITION_BYTES:
        start = offset % n
        keys = dataset.keys[start:start + RECORDS_PER_BATCH]
        values = dataset.values[start:start + RECORDS_PER_BATCH]
        out += codec.encode_batch(values, keys=keys, timestamp=dataset.timestamp,
                                  base_offset=offset, leader_epoch=5)
        offset += len(values)
    return bytes(out), offset - first_offset


@pytest.fixture(scope="session")
def fetch_response(dataset):
    """(body bytes, the FetchResponse it encodes, whole records it carries)."""
    fr = FetchResponse
    partitions, total = [], 0
    for i in range(PARTITIONS):
        records, count = _partition_records(dataset, i * 10_000)
        total += count
        partitions.append(fr.PartitionData(
            partition_index=i, high_watermark=10_000 * (i + 1), last_stable_offset=10_000 * (i + 1),
            log_start_offset=0, current_leader=fr.LeaderIdAndEpoch(leader_id=1, leader_epoch=5),
            aborted_transactions=None, preferred_read_replica=-1, records=records))
    obj = fr(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        fr.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=partitions)],
        node_endpoints=[fr.NodeEndpoint(node_id=1, host="broker-1", port=9092, rack=None)])
    body = obj.encode(VERSION)
    assert 1 << 20 <= len(body) < (1 << 20) * 1.1
    return body, obj, total


# ------------------------------------------------------------------------------ decoders
# Each returns run() -> the decoded response.


def _kernels(name):
    """kraftcore's kernels `name` ("c" or "py"); skips when they are not built."""
    kernels = codec.implementations().get(name)
    if kernels is None:
        pytest.skip(f"kraftcore's {name} kernels are not built")
    return kernels


def decode_kraftcore(name):
    def factory(body):
        protocol = _kernels(name).protocol
        prog = FetchResponse.program(VERSION)
        decode = protocol.decode_message

        def run():
            return decode(prog, body)

        return run

    return factory


def decode_kafka_python(body):
    fetch = pytest.importorskip("kafka.protocol.consumer.fetch")
    Peer = fetch.FetchResponse
    if Peer.max_version < VERSION:
        pytest.skip(f"kafka-python's FetchResponse stops at v{Peer.max_version}")

    def run():
        return Peer.decode(body, version=VERSION)

    return run


DECODERS = {
    "kraftcore-c": decode_kraftcore("c"),
    "kraftcore-py": decode_kraftcore("py"),
    "kafka-python": decode_kafka_python,
}


@pytest.mark.benchmark(group="decode-fetch-response-1MiB")
@pytest.mark.parametrize("peer", list(DECODERS))
def test_decode_fetch_response_1mib(benchmark, fetch_response, peer):
    body, _, records = fetch_response
    run = DECODERS[peer](body)
    benchmark(run)
    benchmark.extra_info.update(peer=peer, records=records, bytes=len(body),
                                version=VERSION, partitions=PARTITIONS)


# ------------------------------------------------------------------------------ agreement
# Plain tests (no timing): every peer decodes the same values, without copying the records.


def _records_of(response):
    return [p.records for t in response.responses for p in t.partitions]


@pytest.mark.parametrize("peer", ["kraftcore-c", "kraftcore-py"])
def test_kraftcore_decodes_the_response_without_copying_records(fetch_response, peer):
    body, obj, records = fetch_response
    back = DECODERS[peer](body)()
    assert back == obj
    for view in _records_of(back):
        assert isinstance(view, memoryview) and len(view) >= PARTITION_BYTES
        assert view.obj is body  # a window on the input, not a copy
    batches = codec.decode_batches(_records_of(back)[1], verify=True)
    assert batches[0].base_offset == 10_000
    assert sum(len(b.records) for b in batches) == records // PARTITIONS


def test_kafka_python_decodes_the_same_values(fetch_response):
    body, obj, _ = fetch_response
    peer = DECODERS["kafka-python"](body)()
    assert peer.throttle_time_ms == 0 and peer.session_id == 0
    (topic,) = peer.responses
    assert topic.topic_id.bytes == bytes(TOPIC_ID)
    ours = obj.responses[0].partitions
    assert [p.partition_index for p in topic.partitions] == [p.partition_index for p in ours]
    assert [p.high_watermark for p in topic.partitions] == [p.high_watermark for p in ours]
    assert [(p.current_leader.leader_id, p.current_leader.leader_epoch)
            for p in topic.partitions] == [(1, 5)] * PARTITIONS
    assert [bytes(p.records) for p in topic.partitions] == [bytes(p.records) for p in ours]
    assert [(n.node_id, n.host, n.port) for n in peer.node_endpoints] == [(1, "broker-1", 9092)]
