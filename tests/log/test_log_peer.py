"""Kafka compatibility of the files a `Log` leaves on disk, checked against independent
readers: kafka-python's record-batch reader for the `.log` files, and Kafka's indexing rule
re-implemented here with `struct` for the `.index` / `.timeindex` files (kraftcore's kernels
are never used to compute an expectation). Also file names and checkpoint text files."""

import os
import random
import struct

import pytest
from kafka.record import memory_records

from kraftcore import codec, layout
from kraftcore.log import Log

TS = 1_700_000_000_000
EPOCH_SWITCH = 1500  # the leader epoch goes from 0 to 3 at this offset
OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position (Kafka's OffsetIndex)
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset (Kafka's TimeIndex)


def value_of(offset):
    return b"value-%d-" % offset + bytes([65 + offset % 26]) * (offset * 7 % 90)


def key_of(offset):
    return None if offset % 5 == 0 else b"key-%d" % offset


def timestamp_of(offset):
    # not monotonic: a batch's max timestamp is not always its last record's
    return TS + offset * 10 - (offset % 7) * 35


def segment_names(path, suffix):
    return sorted(name for name in os.listdir(path) if name.endswith(suffix))


def read_file(path, name):
    with open(os.path.join(path, name), "rb") as f:
        return f.read()


def write_reference_log(path):
    """A log with two leader epochs (0, then 3 from EPOCH_SWITCH), keys, values and
    timestamps derived from offsets, appended as values and as encoded batches, rolled
    several times. Returns [(base offset, last offset, leader epoch)] of every batch."""
    log = Log.open(path, segment_bytes=32 * 1024)
    batches = []
    count_rng = random.Random(5)
    while log.log_end_offset < 2600:
        base = log.log_end_offset
        epoch = 0 if base < EPOCH_SWITCH else 3
        count = count_rng.randint(1, 40)
        if base < EPOCH_SWITCH:
            count = min(count, EPOCH_SWITCH - base)  # an epoch starts exactly at 1500
        offsets = range(base, base + count)
        values = [value_of(o) for o in offsets]
        keys = [key_of(o) for o in offsets]
        timestamps = [timestamp_of(o) for o in offsets]
        if base % 3 == 0:
            # an encoded batch: the log assigns its offsets and stamps the epoch
            encoded = codec.encode_batch(values, keys=keys, timestamps=timestamps,
                                         base_offset=0, leader_epoch=-1)
            got = log.append(encoded, leader_epoch=epoch)
        else:
            got = log.append(values, keys=keys, timestamps=timestamps, leader_epoch=epoch)
        assert got == base
        batches.append((base, base + count - 1, epoch))
    log.update_high_watermark(2000)
    assert len(log.segment_base_offsets) >= 3, "the reference log should have rolled"
    log.close()
    return batches


@pytest.fixture
def reference_log(tmp_path):
    path = tmp_path / "peer-topic-7"
    return str(path), write_reference_log(str(path))


def test_kafka_python_reads_every_segment(reference_log):
    path, appended = reference_log
    seen_batches, seen_records = [], []
    names = segment_names(path, ".log")
    for number, name in enumerate(names):
        data = read_file(path, name)
        records = memory_records.MemoryRecords(data)
        first = True
        while records.has_next():
            batch = records.next_batch()
            assert batch.magic == 2 and batch.compression_type == 0
            assert batch.validate_crc(), f"{name}: bad CRC at batch {batch.base_offset}"
            if first:
                assert batch.base_offset == int(name[:20]), f"{name} does not start at its base"
                first = False
            seen_batches.append((batch.base_offset, batch.last_offset, batch.leader_epoch))
            for record in batch:
                seen_records.append((record.offset, record.key, record.value, record.timestamp))
        assert records.valid_bytes() == len(data), f"{name}: bytes after the last batch"
        if number + 1 < len(names):  # the next segment starts where this one ends
            assert seen_batches[-1][1] + 1 == int(names[number + 1][:20])
    assert seen_batches == appended
    end = appended[-1][1] + 1
    assert seen_records == [(o, key_of(o), value_of(o), timestamp_of(o)) for o in range(end)]


def test_segment_file_names_are_kafkas(reference_log):
    path, appended = reference_log
    # the reference vector, and kraftcore's naming function agreeing with it
    assert f"{1234:020d}.log" == "00000000000000001234.log"
    assert layout.file_prefix(1234) + ".log" == "00000000000000001234.log"
    assert layout.parse_prefix("00000000000000001234.log") == 1234
    log_names = segment_names(path, ".log")
    bases = [int(name[:-4]) for name in log_names]
    assert bases[0] == 0 and len(bases) >= 3
    assert set(bases) <= {base for base, _, _ in appended}
    segment_files = {name for name in os.listdir(path) if name[:1].isdigit()}
    assert segment_files == {f"{base:020d}{suffix}" for base in bases
                             for suffix in (".log", ".index", ".timeindex")}
    for base in bases:
        assert f"{base:020d}" == layout.file_prefix(base)
    assert set(os.listdir(path)) - segment_files == {
        ".kafka_cleanshutdown", ".lock", "leader-epoch-checkpoint",
        "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
        "log-start-offset-checkpoint"}


def test_segment_at_a_large_base_offset_is_named_by_it(tmp_path):
    path = tmp_path / "named-0"
    log = Log.open(path)
    log.truncate_fully_and_start_at(1234)
    assert log.append([b"a", b"b"]) == 1234
    log.close()
    assert segment_names(path, ".log") == ["00000000000000001234.log"]
    assert sorted(name for name in os.listdir(path) if name[:1].isdigit()) == [
        "00000000000000001234.index", "00000000000000001234.log",
        "00000000000000001234.timeindex"]
    [batch] = list(memory_records.MemoryRecords(read_file(path, "00000000000000001234.log")))
    assert [r.offset for r in batch] == [1234, 1235]


def test_checkpoint_files_are_kafkas_text_format(reference_log):
    path, appended = reference_log
    end = appended[-1][1] + 1
    with open(os.path.join(path, "leader-epoch-checkpoint"), "rb") as f:
        assert f.read() == b"0\n2\n0 0\n3 1500\n"
    with open(os.path.join(path, "recovery-point-offset-checkpoint"), "rb") as f:
        assert f.read() == b"0\n1\npeer-topic 7 %d\n" % end
    with open(os.path.join(path, "replication-offset-checkpoint"), "rb") as f:
        assert f.read() == b"0\n1\npeer-topic 7 2000\n"
    with open(os.path.join(path, "log-start-offset-checkpoint"), "rb") as f:
        assert f.read() == b"0\n1\npeer-topic 7 0\n"


# ---------------------------------------------------------------- indexes


def kafka_indexes(data, base, interval):
    """The .index and .timeindex Kafka builds for a segment holding `data` (recovery:
    batch by batch), including the final time entry a roll or close appends."""
    offset_index, time_index = bytearray(), bytearray()
    position = since_entry = 0
    max_ts, max_ts_offset = -1, -1
    last_time_entry = -1
    while position < len(data):
        batch_base, = struct.unpack_from(">q", data, position)
        length, = struct.unpack_from(">i", data, position + 8)
        last_delta, = struct.unpack_from(">i", data, position + 23)
        batch_max_ts, = struct.unpack_from(">q", data, position + 35)
        last_offset = batch_base + last_delta
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last_offset
        if since_entry > interval:
            offset_index += OFFSET_ENTRY.pack(last_offset - base, position)
            if max_ts > last_time_entry:
                time_index += TIME_ENTRY.pack(max_ts, max_ts_offset - base)
                last_time_entry = max_ts
            since_entry = 0
        size = 12 + length
        since_entry += size
        position += size
    assert position == len(data), "a batch runs past the end of the segment"
    if max_ts > last_time_entry:
        time_index += TIME_ENTRY.pack(max_ts, max_ts_offset - base)
    return bytes(offset_index), bytes(time_index)


def index_files(path):
    """{base: (.index bytes, .timeindex bytes)} of every segment."""
    out = {}
    for name in segment_names(path, ".log"):
        prefix = name[:-4]
        out[int(prefix)] = (read_file(path, prefix + ".index"),
                            read_file(path, prefix + ".timeindex"))
    return out


def expected_index_files(path, interval):
    return {int(name[:-4]): kafka_indexes(read_file(path, name), int(name[:-4]), interval)
            for name in segment_names(path, ".log")}


def rebuild_indexes(path, **settings):
    """Delete every index and the clean-shutdown marker, reopen (Kafka-style recovery
    rebuilds the indexes batch by batch) and close."""
    for name in os.listdir(path):
        if name.endswith((".index", ".timeindex")) or name == ".kafka_cleanshutdown":
            os.unlink(os.path.join(path, name))
    log = Log.open(path, **settings)
    assert not log.recovery.clean_shutdown
    log.close()


def write_indexed_log(path, seed):
    """Single-batch appends of varied sizes (some larger than the index interval) and
    timestamps that go up and down, over several segments and leader epochs."""
    rng = random.Random(seed)
    log = Log.open(path, segment_bytes=48 * 1024, index_interval_bytes=4096)
    ts = TS
    while log.size_bytes < 200 * 1024:
        count = rng.randint(1, 30)
        size = rng.choice([20, 100, 400, 3000, 6000]) // count + 1
        ts += rng.randint(-5000, 8000)
        timestamps = [ts + rng.randint(-100, 100) for _ in range(count)]
        epoch = log.size_bytes // (70 * 1024)
        log.append([rng.randbytes(size) for _ in range(count)], timestamps=timestamps,
                   leader_epoch=epoch)
    assert len(log.segment_base_offsets) >= 4 and len(log.epoch_entries()) == 3
    log.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rebuilt_indexes_are_kafkas(tmp_path, seed):
    path = tmp_path / "idx-0"
    write_indexed_log(path, seed)
    expected = expected_index_files(path, 4096)
    assert sum(len(offsets) for offsets, _ in expected.values()) > 20, "too few index entries"
    log_files_before = {name: read_file(path, name) for name in segment_names(path, ".log")}
    rebuild_indexes(path, segment_bytes=48 * 1024, index_interval_bytes=4096)
    assert index_files(path) == expected
    # the rebuild changed no data (a later leader epoch must not make it cut a segment)
    assert {name: read_file(path, name) for name in segment_names(path, ".log")} == \
        log_files_before


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_indexes_written_by_single_batch_appends_are_kafkas(tmp_path, seed):
    # with one batch per append, Kafka's append path indexes exactly as its recovery does
    path = tmp_path / "idx-0"
    write_indexed_log(path, seed)
    assert index_files(path) == expected_index_files(path, 4096)


def test_index_entry_reference_vectors(tmp_path):
    assert OFFSET_ENTRY.pack(5, 4096) == bytes.fromhex("0000000500001000")
    assert TIME_ENTRY.pack(1_700_000_000_000, 5) == bytes.fromhex("0000018bcfe5680000000005")
    # kraftcore packs entries the same way
    assert layout.OFFSET_INDEX_ENTRY.pack(5, 4096) == bytes.fromhex("0000000500001000")
    assert layout.TIME_INDEX_ENTRY.pack(1_700_000_000_000, 5) == bytes.fromhex(
        "0000018bcfe5680000000005")

    # End to end: offsets 0-4 in a batch of exactly 4096 bytes, then offset 5 at position
    # 4096 with an index interval of 4095 bytes: one entry of each kind, those vectors.
    pad = 4096 - len(codec.encode_batch([b""] * 5, timestamp=1))
    for extra in range(0, 64):  # varint lengths grow with the values: search the fit
        sizes = [(pad - extra) // 5 + (i < (pad - extra) % 5) for i in range(5)]
        first = [b"x" * size for size in sizes]
        if len(codec.encode_batch(first, timestamp=1)) == 4096:
            break
    else:
        pytest.fail("no padding gives a 4096-byte batch")
    path = tmp_path / "vec-0"
    settings = dict(index_interval_bytes=4095)
    log = Log.open(path, **settings)
    log.append(first, timestamp=1_699_999_999_000)
    log.append([b"y"], timestamp=1_700_000_000_000)
    log.close()
    assert len(read_file(path, "00000000000000000000.log")) > 4096
    expected = (bytes.fromhex("0000000500001000"), bytes.fromhex("0000018bcfe5680000000005"))
    assert index_files(path) == {0: expected}
    rebuild_indexes(path, **settings)
    assert index_files(path) == {0: expected}
