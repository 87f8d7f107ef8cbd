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
from tests.peers.kafka_node import kafka_jars_for_tests

DUMP_LOG = "org.apache.kafka.tools.DumpLogSegments"
TOOL_TIMEOUT_S = 180
TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def jars():
    return kafka_jars_for_tests()


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
    (relative,) = struct.unpack_from(">i", raw, 0)
    struct.pack_into(">i", raw, 0, relative + 1)
    index.write_bytes(raw)
    out = dump_log(jars, "--verify-index-only", "--files", str(index))
    assert f"Index offset: {relative + 1}, log offset: {relative}" in out, out


# ------------------------------------------------------------------------------ metadata


def _metadata_log(directory):
    """A `__cluster_metadata` segment of kraftcore's: a LeaderChange control batch, every
    metadata record type kraftcore knows (one batch each, at its highest version), and
    realistic topics and partitions. Returns the segment's path."""
    from kraftcore.metadata import records as R
    from kraftcore.raft import control as C

    log = Log.open(directory / "__cluster_metadata-0", fsync="never", index_interval_bytes=1)
    try:
        voter = C.LeaderChangeMessage.Voter
        log.append(C.encode_control_batch([C.LeaderChangeMessage(
            version=0, leader_id=1, voters=[voter(voter_id=1), voter(voter_id=2)],
            granting_voters=[voter(voter_id=1)])], base_offset=0, leader_epoch=1,
            timestamp=TS), leader_epoch=1)
        kinds = sorted(n for n in dir(R) if n.endswith("Record") and isinstance(getattr(R, n), type))
        assert len(kinds) >= 25
        for name in kinds:
            log.append(R.encode_batch([getattr(R, name)()], base_offset=0, leader_epoch=1,
                                      timestamp=TS), leader_epoch=1)
        from kraftcore.types import Uuid
        from tests.metadata.test_loader import config, mv, partition, topic

        topic_id = Uuid(bytes(range(1, 17)))
        log.append(R.encode_batch([mv(), topic("orders", topic_id), partition(topic_id, 0),
                                   partition(topic_id, 1), config("retention.ms", "1000")],
                                  base_offset=0, leader_epoch=2, timestamp=TS + 1),
                   leader_epoch=2)
    finally:
        log.close()
    return directory / "__cluster_metadata-0" / "00000000000000000000.log"


def _snapshot(directory):
    """A snapshot file of kraftcore's snapshot writer (an image of a topic, partition and
    config), named as Kafka names it."""
    from kraftcore.metadata.snapshot import encode_snapshot
    from tests.metadata.test_loader import _snapshot_image

    image = _snapshot_image()
    path = directory / f"{image.end_offset:020d}-{image.epoch:010d}.checkpoint"
    path.write_bytes(encode_snapshot(image, timestamp_ms=TS))
    return path


_CONTROL_NAMES = {"LeaderChange": "LEADER_CHANGE", "SnapshotHeader": "SNAPSHOT_HEADER",
                  "SnapshotFooter": "SNAPSHOT_FOOTER", "KRaftVersion": "KRAFT_VERSION",
                  "KRaftVoters": "KRAFT_VOTERS"}


def _kafka_metadata_records(text):
    """[(offset, kind, JSON)] from Kafka's --cluster-metadata-decoder dump: kind is the
    record type for a metadata record, the control type for a control record."""
    import json

    out = []
    for line in text.splitlines():
        if not line.startswith("| offset:"):
            continue
        offset = int(line.split()[2])
        match = re.search(r" payload: (\{.*\})$", line)
        if match:
            payload = json.loads(match.group(1))
            out.append((offset, payload["type"], payload))
            continue
        match = re.search(r" (\w+):? (\{.*\})$", line)  # (SnapshotHeader has no colon)
        assert match and match.group(1) in _CONTROL_NAMES, line
        out.append((offset, _CONTROL_NAMES[match.group(1)], json.loads(match.group(2))))
    return out


def _ours_metadata_records(path):
    import io
    import json

    from kraftcore.cli import dump_log as ours

    out, err = io.StringIO(), io.StringIO()
    assert ours.run([str(path)], True, True, out, err) == 0, err.getvalue()
    rows = []
    for line in out.getvalue().splitlines():
        doc = json.loads(line)
        if "payload" in doc:
            rows.append((doc["offset"], doc["payload"]["type"], doc["payload"]))
        elif "controlType" in doc:
            rows.append((doc["offset"], doc["controlType"], doc["data"]))
    return rows


def _agrees(kafka, ours, where):
    """Every field Kafka prints is kraftcore's, with the same value; a field only kraftcore
    prints is a tagged field at its default, which Kafka's JSON leaves out."""
    if isinstance(kafka, dict):
        assert isinstance(ours, dict), where
        for key, value in kafka.items():
            assert key in ours, f"{where}: kraftcore has no {key}"
            _agrees(value, ours[key], f"{where}.{key}")
        for key in ours.keys() - kafka.keys():
            # (-2: PartitionChangeRecord's "no leader change")
            assert ours[key] in (None, [], 0, -1, -2), f"{where}: only kraftcore prints {key}"
    elif isinstance(kafka, list):
        assert isinstance(ours, list) and len(ours) == len(kafka), where
        for i, (k, o) in enumerate(zip(kafka, ours)):
            _agrees(k, o, f"{where}[{i}]")
    else:
        assert kafka == ours, f"{where}: Kafka {kafka!r}, kraftcore {ours!r}"


def _ours_batches(path):
    import io
    import json

    from kraftcore.cli import dump_log as ours

    out, err = io.StringIO(), io.StringIO()
    assert ours.run([str(path)], True, True, out, err) == 0, err.getvalue()
    return [json.loads(line)["batch"] for line in out.getvalue().splitlines()
            if line.startswith('{"batch"')]


# Kafka's batch line field -> kraftcore's dump-log --json batch field
_BATCH_FIELDS = {"baseOffset": "baseOffset", "lastOffset": "lastOffset", "count": "count",
                 "baseSequence": "baseSequence", "lastSequence": "lastSequence",
                 "producerId": "producerId", "producerEpoch": "producerEpoch",
                 "partitionLeaderEpoch": "partitionLeaderEpoch",
                 "isTransactional": "isTransactional", "isControl": "isControl",
                 "position": "position", "CreateTime": "maxTimestamp", "size": "size",
                 "magic": "magic", "compresscodec": "compressCodec", "crc": "crc"}


@pytest.mark.parametrize("kind", ["segment", "snapshot"])
def test_kafka_decodes_every_metadata_record_kraftcore_writes(jars, tmp_path, kind):
    path = _metadata_log(tmp_path) if kind == "segment" else _snapshot(tmp_path)
    text = dump_log(jars, "--cluster-metadata-decoder", "--files", str(path))
    kafka_batches = [fields for fields, _ in _kafka_batches(text)]
    our_batches = _ours_batches(path)
    assert len(kafka_batches) == len(our_batches) > 0
    for k, o in zip(kafka_batches, our_batches):
        assert k["isvalid"] == "true"
        for kafka_name, our_name in _BATCH_FIELDS.items():
            value = o[our_name]
            text_value = str(value).lower() if isinstance(value, bool) else str(value)
            assert k[kafka_name] == text_value, (kafka_name, k, o)
    kafka = _kafka_metadata_records(text)
    ours = _ours_metadata_records(path)
    assert [(o, k) for o, k, _ in kafka] == [(o, k) for o, k, _ in ours]
    for (offset, kind_, k), (_, _, o) in zip(kafka, ours):
        _agrees(k, o, f"offset {offset} {kind_}")
    kinds = {k for _, k, _ in kafka}
    if kind == "segment":
        assert len(kinds) >= 26 and "LEADER_CHANGE" in kinds
    else:
        assert {"SNAPSHOT_HEADER", "SNAPSHOT_FOOTER", "TOPIC_RECORD"} <= kinds
