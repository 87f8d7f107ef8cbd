"""Metadata record benchmarks: bulk decode and bulk encode of framed KRaft metadata record
values (kafka-facts §5.1) through the codec kernel, native against pure Python, in the
same run.

The data: a 50/50 mix of PartitionRecord and PartitionChangeRecord, as a busy metadata log
holds them. Topic ids are random uuids (1000 topics); every partition has 3 replicas, all
in the ISR. PartitionRecord carries leader, leader epoch and partition epoch (and, at v2,
one directory id per replica); PartitionChangeRecord carries a new ISR of 3 and, for every
other one, a new leader. Each mix is measured at v0 and at the current version (v2); a v0
value is 64 / 45 bytes, a v2 value 113 / 45 bytes.

Groups:

* `metadata-decode-1M` / `metadata-encode-1M`: kraftcore-c on 1,000,000 records per call
  (`codec`'s `decode_metadata_values(values, TABLE)` / `encode_metadata_values(records,
  versions, TABLE)`, which `kraftcore.metadata.records.decode_values` / `encode_values`
  call directly).
* `metadata-decode-20k` / `metadata-encode-20k`: kraftcore-c and kraftcore-py on the first
  20,000 of the same records, so that the suite's speedup column compares equal work and
  the pure kernel's run stays short.

At the end of the run the goal (>= 1 M records/s decoded and encoded by the native kernel,
on the 1M groups) is printed as MET / NOT MET, with the records/s of both kernels and their
per-record ratio. Nothing asserts on a timing.
"""

import random

import pytest

from kraftcore.metadata import records as R
from kraftcore.types import Uuid

SEED = 0x6D65_7461
COUNT = 1_000_000
SMALL = 20_000
TOPICS = 1000
PARTITIONS = 50
BROKERS = 6
VERSIONS = {"v0": 0, "v2": 2}
GOAL_RECORDS_PER_S = 1_000_000
ROUNDS_1M = 5
ROUNDS_SMALL = {"kraftcore-c": 30, "kraftcore-py": 5}

_STATE = {}  # (group, peer) -> (median seconds, records)


def _kernel(name):
    return pytest.importorskip(f"kraftcore._{name}.protocol")


PEERS = {"kraftcore-c": "c", "kraftcore-py": "py"}


def make_records(count, version, seed=SEED):
    rng = random.Random(seed)
    topics = [Uuid.random(rng) for _ in range(TOPICS)]
    dirs = [Uuid.random(rng) for _ in range(BROKERS)]
    out = []
    for i in range(count):
        topic = topics[i % TOPICS]
        partition = (i // TOPICS) % PARTITIONS
        replicas = rng.sample(range(1, BROKERS + 1), 3)
        if i % 2 == 0:
            out.append(R.PartitionRecord(
                partition_id=partition, topic_id=topic, replicas=replicas, isr=list(replicas),
                leader=replicas[0], leader_epoch=rng.randrange(100),
                partition_epoch=rng.randrange(1000),
                directories=[dirs[b - 1] for b in replicas] if version >= 1 else []))
        else:
            out.append(R.PartitionChangeRecord(
                partition_id=partition, topic_id=topic, isr=replicas,
                leader=replicas[0] if i % 4 == 1 else -2))
    return out


@pytest.fixture(scope="module", params=list(VERSIONS))
def data(request):
    """(label, version, records, versions, values): COUNT records at one version, and their
    values (encoded once by the pure-Python kernel, the format's specification)."""
    version = VERSIONS[request.param]
    records = make_records(COUNT, version)
    versions = [version] * COUNT
    values = _kernel("c").encode_metadata_values(records, versions, R.TABLE)
    reference = _kernel("py").encode_metadata_values(records[:2000], versions[:2000], R.TABLE)
    assert values[:2000] == reference
    return request.param, version, records, versions, values


def _describe(benchmark, peer, records, values, version):
    benchmark.extra_info.update(peer=peer, records=len(records),
                                bytes=sum(len(v) for v in values), version=version)


def _remember(benchmark, group, peer, count):
    stats = benchmark.stats
    if stats is not None and stats.stats.data:
        _STATE[(group, peer)] = (stats.stats.median, count)


@pytest.mark.benchmark(group="metadata-decode-1M")
def test_decode_1m(benchmark, data):
    label, version, records, _, values = data
    decode = _kernel("c").decode_metadata_values
    table = R.TABLE
    group = f"metadata-decode-1M-{label}"
    benchmark.group = group
    out = benchmark.pedantic(decode, args=(values, table), rounds=ROUNDS_1M, warmup_rounds=1)
    assert len(out) == COUNT and out[-1] == (records[-1], version) and out[0][0] == records[0]
    _describe(benchmark, "kraftcore-c", records, values, version)
    _remember(benchmark, group, "kraftcore-c", COUNT)


@pytest.mark.benchmark(group="metadata-encode-1M")
def test_encode_1m(benchmark, data):
    label, version, records, versions, values = data
    encode = _kernel("c").encode_metadata_values
    table = R.TABLE
    group = f"metadata-encode-1M-{label}"
    benchmark.group = group
    out = benchmark.pedantic(encode, args=(records, versions, table), rounds=ROUNDS_1M,
                             warmup_rounds=1)
    assert out[0] == values[0] and out[-1] == values[-1] and len(out) == COUNT
    _describe(benchmark, "kraftcore-c", records, values, version)
    _remember(benchmark, group, "kraftcore-c", COUNT)


@pytest.mark.benchmark(group="metadata-decode-20k")
@pytest.mark.parametrize("peer", list(PEERS))
def test_decode_20k(benchmark, data, peer):
    label, version, records, _, values = data
    decode = _kernel(PEERS[peer]).decode_metadata_values
    values, records = values[:SMALL], records[:SMALL]
    group = f"metadata-decode-20k-{label}"
    benchmark.group = group
    out = benchmark.pedantic(decode, args=(values, R.TABLE), rounds=ROUNDS_SMALL[peer],
                             warmup_rounds=1)
    assert [r for r, _ in out] == records
    _describe(benchmark, peer, records, values, version)
    _remember(benchmark, group, peer, SMALL)


@pytest.mark.benchmark(group="metadata-encode-20k")
@pytest.mark.parametrize("peer", list(PEERS))
def test_encode_20k(benchmark, data, peer):
    label, version, records, versions, values = data
    encode = _kernel(PEERS[peer]).encode_metadata_values
    records, versions, values = records[:SMALL], versions[:SMALL], values[:SMALL]
    group = f"metadata-encode-20k-{label}"
    benchmark.group = group
    out = benchmark.pedantic(encode, args=(records, versions, R.TABLE),
                             rounds=ROUNDS_SMALL[peer], warmup_rounds=1)
    assert out == values
    _describe(benchmark, peer, records, values, version)
    _remember(benchmark, group, peer, SMALL)


# ------------------------------------------------------------------------------ goals


def _rate(key):
    found = _STATE.get(key)
    return None if found is None else found[1] / found[0]


def terminal_summary(tr):
    """Prints records/s of both kernels, their per-record ratio, and the native goal, after
    the suite's summary table."""
    if not _STATE:
        return
    tr.write_line("")
    for label in VERSIONS:
        for op in ("decode", "encode"):
            native = _rate((f"metadata-{op}-1M-{label}", "kraftcore-c"))
            small_c = _rate((f"metadata-{op}-20k-{label}", "kraftcore-c"))
            pure = _rate((f"metadata-{op}-20k-{label}", "kraftcore-py"))
            parts = []
            if native is not None:
                parts.append(f"native {native / 1e6:.2f} M records/s (1M per call)")
            if small_c is not None:
                parts.append(f"native {small_c / 1e6:.2f} M/s (20k per call)")
            if pure is not None:
                parts.append(f"pure {pure / 1e3:.1f} k records/s (20k per call)")
            if small_c is not None and pure is not None:
                parts.append(f"native/pure {small_c / pure:.1f}x per record")
            tr.write_line(f"metadata {op} {label}: " + ", ".join(parts))
    for op in ("decode", "encode"):
        goal = (f"native metadata {op} >= {GOAL_RECORDS_PER_S / 1e6:g} M records/s "
                f"(PartitionRecord / PartitionChangeRecord mix, 1M records per call)")
        rates = {label: _rate((f"metadata-{op}-1M-{label}", "kraftcore-c"))
                 for label in VERSIONS}
        if any(r is None for r in rates.values()):
            tr.write_line(f"metadata goal NOT MEASURED: {goal}")
            continue
        status = "MET" if min(rates.values()) >= GOAL_RECORDS_PER_S else "NOT MET"
        detail = ", ".join(f"{label}: {r / 1e6:.2f} M/s" for label, r in rates.items())
        tr.write_line(f"metadata goal {status}: {goal} -- {detail}")
