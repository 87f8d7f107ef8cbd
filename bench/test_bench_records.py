"""Record batch v2 benchmarks: kraftcore (native and pure Python) against kafka-python and
aiokafka, all measured in the same run on the same 1000-record data set (conftest.py).

The users' paths (a timestamp per record, headers, every key and value read) are timed
with kraftcore-c's and aiokafka's rounds interleaved (interleave.py): this machine's speed
drifts by up to 2x within a run, and two peers timed one after the other gave ratios
that moved by 1.7x from run to run.

Each peer is a factory returning the zero-argument callable that is timed, so the plain
tests at the bottom check exactly the calls that the benchmarks time: every encoder
produces a complete batch of the same records, every decoder returns the same records, and
every validator rejects a corrupted batch.
"""

import importlib
import time

import pytest
from interleave import REPLAY, interleaved

from kraftcore import codec

NO_LIMIT = 2**31 - 1  # batch_size for the peers' builders: never refuse a record
CODEC_NONE = 0
CODEC_LZ4 = 3
ATTRIBUTES_OFFSET = 21  # the CRC covers bytes 21..end
CRC_OFFSET = 17
LEADER_EPOCH = slice(12, 16)


def _kernels(name):
    """kraftcore's kernels `name` ("c" or "py"); skips when they are not built."""
    kernels = codec.implementations().get(name)
    if kernels is None:
        pytest.skip(f"kraftcore's {name} kernels are not built")
    return kernels


def _need_lz4(codec_module, peer, hint):
    if not codec_module.has_lz4():
        pytest.skip(f"{peer} lz4: {hint}")


# ------------------------------------------------------------------------------ encoders
# Each returns run() -> the encoded batch (bytes or bytearray).


def encode_kraftcore(name):
    def factory(data, lz4):
        records = _kernels(name).records
        encode = records.encode_batch
        keys, values, timestamp = data
        compression = "lz4" if lz4 else None

        def run():
            return encode(values, keys=keys, timestamp=timestamp, compression=compression)

        return run

    return factory


# name -> (name, record-batch module, codec module, what lz4 needs)
PEERS = {
    "kafka-python": ("kafka-python", "kafka.record.default_records", "kafka.codec", "needs the lz4 package"),
    "aiokafka": ("aiokafka", "aiokafka.record._crecords", "aiokafka.codec", "needs cramjam (the bench extra installs it)"),
}


def _peer_module(name, batch_module, codec_module, lz4_hint, lz4):
    records = pytest.importorskip(batch_module)
    if lz4:
        _need_lz4(importlib.import_module(codec_module), name, lz4_hint)
    return records


def encode_peer(name, batch_module, codec_module, lz4_hint):
    """A peer's `DefaultRecordBatchBuilder`, one `append` per record, then `build()`. Both
    peers take the same positional arguments (kafka-python's also accept keywords)."""

    def factory(data, lz4):
        Builder = _peer_module(name, batch_module, codec_module, lz4_hint, lz4).DefaultRecordBatchBuilder
        keys, values, timestamp = data
        codec_id = CODEC_LZ4 if lz4 else CODEC_NONE

        def run():
            builder = Builder(2, codec_id, 0, -1, -1, -1, NO_LIMIT)
            for i, (k, v) in enumerate(zip(keys, values)):
                builder.append(i, timestamp, k, v, [])
            return builder.build()

        return run

    return factory


def encode_kraftcore_full(name, headers):
    """kraftcore's encoder given what a producer has: a timestamp per record (and headers)."""

    def factory(data):
        encode = _kernels(name).records.encode_batch
        hs = data.headers if headers else None

        def run():
            return encode(data.values, keys=data.keys, timestamps=data.timestamps, headers=hs)

        return run

    return factory


def encode_peer_full(name, batch_module, codec_module, lz4_hint, headers):
    def factory(data):
        Builder = _peer_module(name, batch_module, codec_module, lz4_hint, False).DefaultRecordBatchBuilder
        rows = list(zip(data.timestamps, data.keys, data.values,
                        data.headers if headers else [[] for _ in data.values]))

        def run():
            builder = Builder(2, CODEC_NONE, 0, -1, -1, -1, NO_LIMIT)
            for i, (ts, k, v, h) in enumerate(rows):
                builder.append(i, ts, k, v, h)
            return builder.build()

        return run

    return factory


def full_encoders(headers):
    return {
        "kraftcore-c": encode_kraftcore_full("c", headers),
        "kraftcore-py": encode_kraftcore_full("py", headers),
        "kafka-python": encode_peer_full(*PEERS["kafka-python"], headers),
        "aiokafka": encode_peer_full(*PEERS["aiokafka"], headers),
    }


ENCODERS_TIMESTAMPS = full_encoders(headers=False)
ENCODERS_HEADERS = full_encoders(headers=True)

ENCODERS = {
    "kraftcore-c": encode_kraftcore("c"),
    "kraftcore-py": encode_kraftcore("py"),
    "kafka-python": encode_peer(*PEERS["kafka-python"]),
    "aiokafka": encode_peer(*PEERS["aiokafka"]),
}


# ------------------------------------------------------------------------------ decoders
# Each returns run() -> list of record objects, after checking the batch's CRC. Keys and
# values are not touched here; with_read() adds reading them.


def decode_kraftcore(name):
    def factory(buf, lz4):
        records = _kernels(name).records
        decode = records.decode_batches

        def run():
            return decode(buf, verify=True)[0].records

        return run

    return factory


def decode_peer(name, batch_module, codec_module, lz4_hint):
    """A peer's `DefaultRecordBatch(buf)`, CRC check and full iteration (both peers share
    this API)."""

    def factory(buf, lz4):
        Batch = _peer_module(name, batch_module, codec_module, lz4_hint, lz4).DefaultRecordBatch

        def run():
            b = Batch(buf)
            if not b.validate_crc():
                raise AssertionError(f"{name}: CRC mismatch")
            return list(b)

        return run

    return factory


DECODERS = {
    "kraftcore-c": decode_kraftcore("c"),
    "kraftcore-py": decode_kraftcore("py"),
    "kafka-python": decode_peer(*PEERS["kafka-python"]),
    "aiokafka": decode_peer(*PEERS["aiokafka"]),
}


def with_read(decode):
    def run():
        records = decode()
        return [(r.key, r.value) for r in records]

    return run


def with_read_headers(decode):
    def run():
        records = decode()
        return [(r.key, r.value, r.headers) for r in records]

    return run


# ------------------------------------------------------------------------------ validators
# Each returns run(), which raises if the batch is not valid.


def validate_kraftcore_c(buf):
    validate = _kernels("c").records.validate_batches

    def run():
        return validate(buf)

    return run


def validate_aiokafka(buf):
    crecords = pytest.importorskip("aiokafka.record._crecords")
    Batch = crecords.DefaultRecordBatch

    def run():
        if not Batch(buf).validate_crc():
            raise AssertionError("aiokafka: CRC mismatch")
        return 1

    return run


VALIDATORS = {
    "kraftcore-c": validate_kraftcore_c,
    "aiokafka": validate_aiokafka,
}


# ------------------------------------------------------------------------------ benchmarks


# The pure-Python peers take ~20 ms a call: a fixed, smaller number of rounds keeps the run
# short without changing what is measured (their ratios to kraftcore-c are in the hundreds).
SLOW_PEERS = {"kraftcore-py", "kafka-python"}
SLOW_ROUNDS = 25


def measure(benchmark, peer, run):
    if peer in SLOW_PEERS:
        return benchmark.pedantic(run, rounds=SLOW_ROUNDS, warmup_rounds=2)
    return benchmark(run)


def _describe(benchmark, peer, records, nbytes, **extra):
    benchmark.extra_info.update(peer=peer, records=records, bytes=nbytes, **extra)


@pytest.mark.benchmark(group="encode-1000")
@pytest.mark.parametrize("peer", list(ENCODERS))
def test_encode_1000(benchmark, dataset, peer):
    run = ENCODERS[peer](dataset, lz4=False)
    batch = measure(benchmark, peer, run)
    _describe(benchmark, peer, len(dataset.values), len(batch))


# The users' paths: kraftcore-c and aiokafka interleaved, the slow peers timed alone.
PAIRED = ("kraftcore-c", "aiokafka")
PAIRED_ROUNDS = 30
PAIRED_CALLS = 20  # calls per timed round (a round takes 1-15 ms)
_PAIRED_TIMES = {}  # group -> {peer: [seconds per call, one per round]}


def _paired_times(group, runs):
    """Per-call times of `runs` ({peer: run}), their rounds interleaved; made once a group."""
    if group not in _PAIRED_TIMES:
        def timed(run):
            def one():
                start = time.perf_counter()
                for _ in range(PAIRED_CALLS):
                    run()
                return (time.perf_counter() - start) / PAIRED_CALLS
            return one

        for run in runs.values():  # warm-up
            run()
        _PAIRED_TIMES[group] = interleaved({p: timed(r) for p, r in runs.items()},
                                           PAIRED_ROUNDS)
    return _PAIRED_TIMES[group]


def measure_users_path(benchmark, group, peer, runs):
    """`runs[peer]` measured: interleaved with the other paired peer, or alone (slow)."""
    if peer not in PAIRED:
        return measure(benchmark, peer, runs[peer])
    REPLAY.replay(benchmark, _paired_times(group, {p: runs[p] for p in PAIRED})[peer])
    return runs[peer]()


SLOW = ("kraftcore-py", "kafka-python")  # timed alone: ~20 ms a call


def _encode_users_path(benchmark, group, encoders, data, peer):
    runs = {p: encoders[p](data) for p in (PAIRED if peer in PAIRED else (peer,))}
    batch = measure_users_path(benchmark, group, peer, runs)
    _describe(benchmark, peer, len(data.values), len(batch))


def _decode_users_path(benchmark, group, read, buf, peer):
    runs = {p: read(DECODERS[p](buf, lz4=False)) for p in (PAIRED if peer in PAIRED else (peer,))}
    rows = measure_users_path(benchmark, group, peer, runs)
    _describe(benchmark, peer, len(rows), len(buf))


@pytest.mark.benchmark(group="encode-1000-timestamps", timer=REPLAY)
@pytest.mark.parametrize("peer", PAIRED)
def test_encode_1000_timestamps_paired(benchmark, full_dataset, peer):
    _encode_users_path(benchmark, "encode-1000-timestamps", ENCODERS_TIMESTAMPS, full_dataset,
                       peer)


@pytest.mark.benchmark(group="encode-1000-timestamps")
@pytest.mark.parametrize("peer", SLOW)
def test_encode_1000_timestamps(benchmark, full_dataset, peer):
    _encode_users_path(benchmark, "encode-1000-timestamps", ENCODERS_TIMESTAMPS, full_dataset,
                       peer)


@pytest.mark.benchmark(group="encode-1000-headers", timer=REPLAY)
@pytest.mark.parametrize("peer", PAIRED)
def test_encode_1000_headers_paired(benchmark, full_dataset, peer):
    _encode_users_path(benchmark, "encode-1000-headers", ENCODERS_HEADERS, full_dataset, peer)


@pytest.mark.benchmark(group="encode-1000-headers")
@pytest.mark.parametrize("peer", SLOW)
def test_encode_1000_headers(benchmark, full_dataset, peer):
    _encode_users_path(benchmark, "encode-1000-headers", ENCODERS_HEADERS, full_dataset, peer)


@pytest.mark.benchmark(group="encode-1000-lz4")
@pytest.mark.parametrize("peer", list(ENCODERS))
def test_encode_1000_lz4(benchmark, dataset, peer):
    run = ENCODERS[peer](dataset, lz4=True)
    batch = measure(benchmark, peer, run)
    _describe(benchmark, peer, len(dataset.values), len(batch), compression="lz4")


@pytest.mark.benchmark(group="decode-validate-1000")
@pytest.mark.parametrize("peer", list(DECODERS))
def test_decode_validate_1000(benchmark, batch_1000, peer):
    run = DECODERS[peer](batch_1000, lz4=False)
    records = measure(benchmark, peer, run)
    _describe(benchmark, peer, len(records), len(batch_1000))


@pytest.mark.benchmark(group="decode-validate-read-1000", timer=REPLAY)
@pytest.mark.parametrize("peer", PAIRED)
def test_decode_validate_read_1000_paired(benchmark, batch_1000, peer):
    _decode_users_path(benchmark, "decode-validate-read-1000", with_read, batch_1000, peer)


@pytest.mark.benchmark(group="decode-validate-read-1000")
@pytest.mark.parametrize("peer", SLOW)
def test_decode_validate_read_1000(benchmark, batch_1000, peer):
    _decode_users_path(benchmark, "decode-validate-read-1000", with_read, batch_1000, peer)


@pytest.mark.benchmark(group="decode-validate-read-1000-headers", timer=REPLAY)
@pytest.mark.parametrize("peer", PAIRED)
def test_decode_validate_read_1000_headers_paired(benchmark, batch_1000_headers, peer):
    _decode_users_path(benchmark, "decode-validate-read-1000-headers", with_read_headers,
                       batch_1000_headers, peer)


@pytest.mark.benchmark(group="decode-validate-read-1000-headers")
@pytest.mark.parametrize("peer", SLOW)
def test_decode_validate_read_1000_headers(benchmark, batch_1000_headers, peer):
    _decode_users_path(benchmark, "decode-validate-read-1000-headers", with_read_headers,
                       batch_1000_headers, peer)


@pytest.mark.benchmark(group="decode-validate-1000-lz4")
@pytest.mark.parametrize("peer", list(DECODERS))
def test_decode_validate_1000_lz4(benchmark, batch_1000_lz4, peer):
    run = DECODERS[peer](batch_1000_lz4, lz4=True)
    records = measure(benchmark, peer, run)
    _describe(benchmark, peer, len(records), len(batch_1000_lz4), compression="lz4")


@pytest.mark.benchmark(group="validate-1000")
@pytest.mark.parametrize("peer", list(VALIDATORS))
def test_validate_1000(benchmark, dataset, batch_1000, peer):
    run = VALIDATORS[peer](batch_1000)
    measure(benchmark, peer, run)
    _describe(benchmark, peer, len(dataset.values), len(batch_1000))


# ------------------------------------------------------------------------------ agreement
# Plain tests (no timing): what the benchmarks time is the same work for every peer.


def _expected_pairs(data):
    return list(zip(data.keys, data.values))


@pytest.mark.parametrize("peer", list(ENCODERS))
def test_encoders_write_the_same_crc_covered_bytes(dataset, batch_1000, peer):
    """Every encoder writes the reference batch byte for byte from byte 21 on (attributes to
    the end, the CRC-covered region); before it only partitionLeaderEpoch may differ
    (kafka-python writes 0 there, kraftcore and aiokafka -1). The CRC at bytes 17..20
    therefore matches too."""
    out = bytes(ENCODERS[peer](dataset, lz4=False)())
    assert len(out) == len(batch_1000)
    assert out[ATTRIBUTES_OFFSET:] == batch_1000[ATTRIBUTES_OFFSET:]
    assert out[CRC_OFFSET:ATTRIBUTES_OFFSET] == batch_1000[CRC_OFFSET:ATTRIBUTES_OFFSET]
    assert out[:12] == batch_1000[:12]
    assert out[16:CRC_OFFSET] == batch_1000[16:CRC_OFFSET]
    epoch = int.from_bytes(out[LEADER_EPOCH], "big", signed=True)
    assert epoch in (-1, 0)
    if peer in ("kraftcore-c", "kraftcore-py", "aiokafka"):
        assert out == batch_1000


@pytest.mark.parametrize("peer", list(ENCODERS))
def test_lz4_encoders_write_compressed_batches_of_the_same_records(
    dataset, batch_1000_lz4, peer
):
    """Each lz4 encoder really compresses (the peers fall back to an uncompressed batch when
    lz4 does not shrink the records) and its batch holds the data set. The LZ4 frames differ
    between libraries, so only kraftcore's two encoders are compared byte for byte."""
    decode_batches = _kernels("py").records.decode_batches
    out = bytes(ENCODERS[peer](dataset, lz4=True)())
    (batch,) = decode_batches(out, verify=True)
    assert batch.compression == CODEC_LZ4
    assert [(r.key, r.value) for r in batch.records] == _expected_pairs(dataset)
    assert [r.offset for r in batch.records] == list(range(len(dataset.values)))
    assert {r.timestamp for r in batch.records} == {dataset.timestamp}
    if peer.startswith("kraftcore"):
        assert out == batch_1000_lz4


@pytest.mark.parametrize("headers", [False, True], ids=["timestamps", "headers"])
@pytest.mark.parametrize("peer", list(ENCODERS_TIMESTAMPS))
def test_encoders_of_the_users_path_write_the_reference_batch(full_dataset, batch_1000_headers,
                                                              peer, headers):
    """With a timestamp per record (and headers), every encoder writes the same records:
    decoded by the reference decoder, they are the data set's."""
    decode_batches = _kernels("py").records.decode_batches
    encoders = ENCODERS_HEADERS if headers else ENCODERS_TIMESTAMPS
    out = bytes(encoders[peer](full_dataset)())
    (batch,) = decode_batches(out, verify=True)
    got = [(r.timestamp, r.key, r.value, [list(h) for h in r.headers]) for r in batch.records]
    d = full_dataset
    want = [(t, k, v, [list(x) for x in h] if headers else [])
            for t, k, v, h in zip(d.timestamps, d.keys, d.values, d.headers)]
    assert got == want
    if headers and peer != "kafka-python":
        assert out == batch_1000_headers


@pytest.mark.parametrize("peer", list(DECODERS))
def test_decoders_read_headers_alike(full_dataset, batch_1000_headers, peer):
    rows = with_read_headers(DECODERS[peer](batch_1000_headers, lz4=False))()
    assert [(k, v, [(hk, bytes(hv)) for hk, hv in h]) for k, v, h in rows] == \
        [(k, v, [tuple(x) for x in h]) for k, v, h in
         zip(full_dataset.keys, full_dataset.values, full_dataset.headers)]


@pytest.mark.parametrize("lz4", [False, True], ids=["none", "lz4"])
@pytest.mark.parametrize("peer", list(DECODERS))
def test_decoders_return_the_same_records(dataset, batch_1000, batch_1000_lz4, peer, lz4):
    buf = batch_1000_lz4 if lz4 else batch_1000
    decode = DECODERS[peer](buf, lz4=lz4)
    records = decode()
    assert len(records) == len(dataset.values)
    assert [r.offset for r in records] == list(range(len(dataset.values)))
    assert {r.timestamp for r in records} == {dataset.timestamp}
    assert with_read(decode)() == _expected_pairs(dataset)


@pytest.mark.parametrize("lz4", [False, True], ids=["none", "lz4"])
@pytest.mark.parametrize("peer", list(DECODERS))
def test_decoders_reject_a_bad_crc(batch_1000, batch_1000_lz4, peer, lz4):
    buf = bytearray(batch_1000_lz4 if lz4 else batch_1000)
    buf[-1] ^= 0x01
    with pytest.raises(Exception) as info:
        DECODERS[peer](bytes(buf), lz4=lz4)()
    assert "crc" in str(info.value).lower()


@pytest.mark.parametrize("peer", list(VALIDATORS))
def test_validators_accept_the_batch_and_reject_a_bad_crc(batch_1000, peer):
    assert VALIDATORS[peer](batch_1000)() == 1
    buf = bytearray(batch_1000)
    buf[len(buf) // 2] ^= 0x01
    with pytest.raises(Exception) as info:
        VALIDATORS[peer](bytes(buf))()
    assert "crc" in str(info.value).lower()
