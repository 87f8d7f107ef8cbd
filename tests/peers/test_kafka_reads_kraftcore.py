"""Apache Kafka's own tool reads the files kraftcore writes: `kafka-dump-log`
(`org.apache.kafka.tools.DumpLogSegments`, Kafka 4.4.0's jars from tests/peers/kafka/fetch.sh)
on data segments written by `kraftcore.log.Log`, uncompressed and lz4 batches, keys, null
keys, headers and several segments; `--verify-index-only` on their `.index` and
`.timeindex`, which must find nothing, and which does find a planted mismatch (so the check
can fail).

Without Java, or without Maven and cached jars, the tests skip on a developer's machine and
fail under CI (`.ci/run` sets CI)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess

import pytest

from kraftcore import codec
from kraftcore.log import Log
from tests.peers.kafka_node import KafkaNodeError, fetch_kafka_jars

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
TOOL_TIMEOUT_S = 180
TS = 1_700_000_000_000


def _unavailable(message):
    if os.environ.get("CI"):
        pytest.fail(message + " (CI must have it)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def jars():
    if shutil.which("java") is None:
        _unavailable("needs java")
    try:
        return fetch_kafka_jars()
    except KafkaNodeError as exc:
        _unavailable(f"Kafka's jars are not available: {exc}")


def dump_log(jars, *args):
    proc = subprocess.run(
        ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*", DUMP_LOG, *args],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout + proc.stderr  # (the index checks report on stderr)


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    """A partition log with two segments: uncompressed and lz4 batches, keys and null keys,
    headers, a null value, index entries every 100 bytes. Returns its directory."""
    path = tmp_path_factory.mktemp("kraftcore-data") / "orders-0"
    log = Log.open(path, segment_bytes=1000, index_interval_bytes=100)
    try:
        for i in range(12):
            n = 3 + i % 4
            log.append(codec.encode_batch(
                [b"value-%d-%d" % (i, j) if (i, j) != (5, 1) else None for j in range(n)],
                keys=None if i % 3 == 2 else [b"key-%d-%d" % (i, j) for j in range(n)],
                headers=[[("trace", b"t%d" % j), ("origin", None)] if i % 2 else []
                         for j in range(n)],
                timestamps=[TS + 10 * i + j for j in range(n)],
                compression="lz4" if i % 2 else None), leader_epoch=i // 5)
        segments = log.segment_base_offsets
    finally:
        log.close()
    assert len(segments) >= 2
    return path


def _kafka_batches(text):
    """Kafka's dump as a list of (batch fields, [record fields]) with string values."""
    batches = []
    for line in text.splitlines():
        if line.startswith("baseOffset:"):
            batches.append((_fields(line), []))
        elif line.startswith("| offset:"):
            batches[-1][1].append(_fields(line[2:]))
    return batches


_FIELD = re.compile(r"(\w+): (\[[^\]]*\]|\S+)")


def _fields(line):
    fields = dict(_FIELD.findall(line))
    # key and payload run to the end of their text (they are the record's last fields)
    for name in ("payload", "key"):
        match = re.search(rf" {name}: (.*?)(?: payload: .*)?$", " " + line)
        if match:
            fields[name] = match.group(1)
    return fields


def _ours(path, base):
    with open(os.path.join(path, f"{base:020d}.log"), "rb") as f:
        data = f.read()
    return codec.decode_batches(data, verify=True)


def test_kafka_dump_log_reads_kraftcores_segments_record_for_record(jars, partition):
    files = sorted(f for f in os.listdir(partition) if f.endswith(".log"))
    out = dump_log(jars, "--deep-iteration", "--print-data-log", "--files",
                   ",".join(os.path.join(partition, f) for f in files))
    dumped = _kafka_batches(out)
    ours = [b for f in files for b in _ours(partition, int(f[:-4]))]
    assert len(dumped) == len(ours) == 12
    codecs = {0: "none", 3: "lz4"}
    for (fields, records), batch in zip(dumped, ours):
        assert fields["isvalid"] == "true"
        assert int(fields["baseOffset"]) == batch.base_offset
        assert int(fields["lastOffset"]) == batch.base_offset + batch.last_offset_delta
        assert int(fields["count"]) == batch.records_count
        assert int(fields["partitionLeaderEpoch"]) == batch.partition_leader_epoch
        assert int(fields["position"]) == batch.position
        assert int(fields["size"]) == batch.size_bytes
        assert int(fields["crc"]) == batch.crc
        assert fields["compresscodec"] == codecs[batch.compression]
        assert int(fields["CreateTime"]) == batch.max_timestamp
        assert len(records) == batch.records_count
        for r, ours_r in zip(records, batch.records):
            assert int(r["offset"]) == ours_r.offset
            assert int(r["CreateTime"]) == ours_r.timestamp
            assert int(r["keySize"]) == (-1 if ours_r.key is None else len(ours_r.key))
            assert int(r["valueSize"]) == (-1 if ours_r.value is None else len(ours_r.value))
            assert r["headerKeys"] == "[" + ",".join(k for k, _ in ours_r.headers) + "]"
            if ours_r.key is not None:
                assert r["key"] == ours_r.key.decode()
            # a null value prints no payload at all
            assert r.get("payload") == (None if ours_r.value is None else ours_r.value.decode())


def test_kafka_verifies_kraftcores_indexes_and_finds_a_planted_mismatch(jars, partition,
                                                                       tmp_path):
    indexes = sorted(os.path.join(partition, f) for f in os.listdir(partition)
                     if f.endswith((".index", ".timeindex")))
    assert sum(1 for f in indexes if os.path.getsize(f)) >= 4  # entries to check
    out = dump_log(jars, "--verify-index-only", "--files", ",".join(indexes))
    assert "ismatch" not in out and "out of order" not in out.lower(), out
    # the same check on a copy whose first offset-index entry names the next offset: Kafka
    # reports it
    bad = tmp_path / "orders-0"
    shutil.copytree(partition, bad)
    index = bad / "00000000000000000000.index"
    raw = bytearray(index.read_bytes())
    relative, position = struct.unpack_from(">ii", raw, 0)
    struct.pack_into(">i", raw, 0, relative + 1)
    index.write_bytes(raw)
    out = dump_log(jars, "--verify-index-only", "--files", str(index))
    assert f"Index offset: {relative + 1}, log offset: {relative}" in out, out
