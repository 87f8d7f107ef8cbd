"""`kraftcore demo`: a short tour of the record-batch codec and the log on generated data.

It checks kraftcore against Kafka's published test vectors, encodes and decodes batches
with and without lz4, shows that a flipped byte is caught, appends the batches durably to
a log in a temporary directory (fsync="always", group commit), reopens it and reads every
record back, and prints the throughput. Then it writes KRaft metadata records (a topic per
100 partitions) into a metadata log in bulk, decodes them back, and shows the head of
`kraftcore dump-log --metadata-decoder` on that log.
"""

import io
import random
import tempfile
import time

from kraftcore import codec
from kraftcore.errors import CorruptRecordError
from kraftcore.cli import dump_log
from kraftcore.log import Log
from kraftcore.metadata import records as metadata
from kraftcore.raft import control
from kraftcore.types import Uuid

# The 73-byte batch of kafka-facts §11.3: one record, value "hello", at 1700000000000 ms.
GOLDEN_BATCH_HEX = (
    "00000000000000000000003d0000000002e641a44b0000000000000000018bcfe568000000018bcfe56800"
    "ffffffffffffffffffffffffffff0000000116000000010a68656c6c6f00"
)
TIMESTAMP_MS = 1_700_000_000_000


def _rate(count, seconds):
    return count / seconds if seconds > 0 else float("inf")


def run(batches, records, seed):
    if batches < 1 or records < 1:
        print("kraftcore demo: --batches and --records must be at least 1")
        return 2
    print(f"kraftcore codec: implementation={codec.IMPLEMENTATION} crc32c hardware={codec.CRC32C_HARDWARE}")

    golden = bytes.fromhex(GOLDEN_BATCH_HEX)
    ours = codec.encode_batch([b"hello"], timestamp=TIMESTAMP_MS, leader_epoch=0)
    checks = [
        ("crc32c('123456789') == 0xE3069283", codec.crc32c(b"123456789") == 0xE3069283),
        ("73-byte batch of Kafka's format, byte for byte", ours == golden),
    ]
    for name, ok in checks:
        print(f"  {'ok ' if ok else 'FAIL'} {name}")
    if not all(ok for _, ok in checks):
        return 1

    rng = random.Random(seed)
    keys = [rng.randbytes(16) for _ in range(records)]
    values = [rng.randbytes(100) for _ in range(records)]
    headers = [[("source", b"demo")] if i % 10 == 0 else None for i in range(records)]
    total = batches * records
    print(f"\n{batches} batches x {records} records (16 B keys, 100 B values):")
    plain = None
    for compression in (None, "lz4"):
        start = time.perf_counter()
        encoded = [
            codec.encode_batch(
                values,
                keys=keys,
                headers=headers,
                base_offset=b * records,
                timestamp=TIMESTAMP_MS,
                leader_epoch=1,
                compression=compression,
            )
            for b in range(batches)
        ]
        encode_s = time.perf_counter() - start
        buffer = b"".join(encoded)
        start = time.perf_counter()
        decoded = codec.decode_batches(buffer)
        decode_s = time.perf_counter() - start
        start = time.perf_counter()
        validated = codec.validate_batches(buffer)
        validate_s = time.perf_counter() - start
        plain = plain or encoded
        last = decoded[-1].records[-1]
        if validated != batches or last.offset != total - 1 or last.value != values[-1]:
            print("  FAIL decoded batches do not match what was encoded")
            return 1
        print(
            f"  {compression or 'uncompressed':>12}: {len(buffer) / 2**20:6.1f} MiB  "
            f"encode {_rate(total, encode_s) / 1e6:6.1f} M rec/s  "
            f"decode {_rate(total, decode_s) / 1e6:6.1f} M rec/s  "
            f"validate {_rate(len(buffer), validate_s) / 1e9:5.2f} GB/s"
        )

    damaged = bytearray(encoded[0])
    damaged[len(damaged) // 2] ^= 0x01
    try:
        codec.decode_batches(bytes(damaged))
    except CorruptRecordError as exc:
        print(f"\na flipped bit is caught: {exc}")
    else:
        print("\nFAIL a flipped bit was not detected")
        return 1
    status = _log_tour(plain, total, values[-1])
    return status or _metadata_tour(seed)


def _log_tour(encoded, total, last_value, group=8):
    with tempfile.TemporaryDirectory(prefix="kraftcore-demo-") as tmp:
        path = f"{tmp}/demo-0"
        with Log.open(path, fsync="always", segment_bytes=64 << 20) as log:
            start = time.perf_counter()
            for i, batch in enumerate(encoded):
                log.append(batch, leader_epoch=1, sync=False)
                if (i + 1) % group == 0:
                    log.flush()
            log.flush()
            append_s = time.perf_counter() - start
            segments = len(log.segment_base_offsets)
        with Log.open(path) as log:
            start = time.perf_counter()
            offset, count, last = 0, 0, None
            while offset < log.log_end_offset:
                result = log.read(offset, 1 << 20)
                for batch in result.batches():
                    count += batch.records_count
                    last = batch.records[-1]
                offset = result.next_offset
            read_s = time.perf_counter() - start
            if count != total or last.offset != total - 1 or last.value != last_value:
                print("  FAIL the log did not give back what was appended")
                return 1
            print(
                f"\nlog: {total} records appended durably (fsync per {group} batches) "
                f"at {_rate(total, append_s) / 1e6:.2f} M rec/s into {segments} segment(s); "
                f"reopened ({'clean' if log.recovery.clean_shutdown else 'recovered'}) and "
                f"read back at {_rate(total, read_s) / 1e6:.2f} M rec/s"
            )
    return 0


def _metadata_tour(seed, topics=1000, partitions=100, per_batch=1000):
    """KRaft metadata records: a topic per 100 partitions, encoded in bulk into a metadata
    log (after a LeaderChange control batch), decoded back, and the head of its dump."""
    rng = random.Random(seed)
    voter = control.LeaderChangeMessage.Voter
    records = []
    for t in range(topics):
        topic_id = Uuid.random(rng)
        records.append(metadata.TopicRecord(name=f"topic-{t}", topic_id=topic_id))
        for p in range(partitions):
            replicas = rng.sample(range(1, 7), 3)
            records.append(metadata.PartitionRecord(
                partition_id=p, topic_id=topic_id, replicas=replicas, isr=replicas,
                leader=replicas[0], leader_epoch=0, partition_epoch=0))
    start = time.perf_counter()
    batches = [metadata.encode_batch(records[i:i + per_batch], base_offset=1 + i,
                                     leader_epoch=1, timestamp=TIMESTAMP_MS)
               for i in range(0, len(records), per_batch)]
    encode_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory(prefix="kraftcore-demo-") as tmp:
        path = f"{tmp}/__cluster_metadata-0"
        with Log.open(path, fsync="always") as log:
            log.append(control.encode_control_batch([control.LeaderChangeMessage(
                leader_id=1, voters=[voter(voter_id=1)], granting_voters=[voter(voter_id=1)])],
                leader_epoch=1, timestamp=TIMESTAMP_MS), leader_epoch=1)
            for batch in batches:
                log.append(batch, leader_epoch=1, sync=False)
            log.flush()
            chunks, offset = [], 1  # the metadata records, after the control batch at 0
            while offset < log.log_end_offset:
                result = log.read(offset, 1 << 20)
                chunks.append(result.records)
                offset = result.next_offset
            start = time.perf_counter()
            decoded = [item for chunk in chunks for item in metadata.decode_batch(chunk)]
            decode_s = time.perf_counter() - start
            del chunks
        if [r for _, r, _ in decoded] != records:
            print("  FAIL the metadata records did not decode to what was encoded")
            return 1
        print(f"\nmetadata: {len(records)} records ({topics} topics x {partitions} partitions) "
              f"encoded at {_rate(len(records), encode_s) / 1e6:.2f} M rec/s, decoded at "
              f"{_rate(len(records), decode_s) / 1e6:.2f} M rec/s; "
              f"`kraftcore dump-log --metadata-decoder` of its first segment begins:")
        out = io.StringIO()
        status = dump_log.run([f"{path}/00000000000000000000.log"], True, False, out)
        for line in out.getvalue().splitlines()[:6]:
            print("  " + (line if len(line) < 160 else line[:157] + "..."))
        return status
