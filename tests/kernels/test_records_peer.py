"""kafka-python as an independent peer: its record-batch reader decodes what kraftcore
writes, and kraftcore decodes what its builder writes, with and without lz4."""

import pytest
from kafka.record import default_records as kafka_records

TS = 1_700_000_000_000
CODECS = {None: 0, "lz4": 3}


def _data(n=50):
    values = [b"value-%03d" % i * (1 + i % 4) for i in range(n)]
    keys = [None if i % 5 == 0 else b"key-%d" % i for i in range(n)]
    headers = [[("trace", b"%d" % i), ("empty", b"")] if i % 3 == 0 else [] for i in range(n)]
    timestamps = [TS + 3 * i for i in range(n)]
    return values, keys, headers, timestamps


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_kafka_python_reads_kraftcore_batches(impl, compression):
    values, keys, headers, timestamps = _data()
    raw = impl.records.encode_batch(
        values, keys=keys, headers=headers, timestamps=timestamps, base_offset=500,
        leader_epoch=4, compression=compression,
    )
    batch = kafka_records.DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc()
    assert (batch.base_offset, batch.leader_epoch, batch.compression_type) == (500, 4, CODECS[compression])
    records = list(batch)
    assert [r.offset for r in records] == list(range(500, 550))
    assert [r.timestamp for r in records] == timestamps
    assert [r.key for r in records] == keys
    assert [r.value for r in records] == values
    assert [list(r.headers) for r in records] == [list(h) for h in headers]


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_kraftcore_reads_kafka_python_batches(impl, compression):
    values, keys, headers, timestamps = _data()
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=CODECS[compression], is_transactional=0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=2**30,
    )
    for i in range(len(values)):
        builder.append(i, timestamp=timestamps[i], key=keys[i], value=values[i], headers=headers[i])
    raw = bytes(builder.build())
    [batch] = impl.records.decode_batches(raw)
    assert impl.records.validate_batches(raw) == 1
    assert batch.compression == CODECS[compression]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records] == list(
        zip(range(50), timestamps, keys, values)
    )
    assert [r.headers for r in batch.records] == [tuple(h) for h in headers]


def test_uncompressed_bytes_equal_kafka_pythons(impl):
    values, keys, headers, timestamps = _data()
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=2**30,
    )
    for i in range(len(values)):
        builder.append(i, timestamp=timestamps[i], key=keys[i], value=values[i], headers=headers[i])
    theirs = bytes(builder.build())
    ours = impl.records.encode_batch(values, keys=keys, headers=headers, timestamps=timestamps)
    # kafka-python leaves the partition leader epoch at 0 where kraftcore writes -1 (none);
    # that field is outside the CRC. Everything else is identical.
    assert ours[:12] == theirs[:12] and ours[16:] == theirs[16:]
