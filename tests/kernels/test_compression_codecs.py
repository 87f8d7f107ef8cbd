"""Every Kafka codec (gzip 1, snappy 2, lz4 3, zstd 4) is read by both record kernels, as
real clients write it: batches built by kafka-python's own encoder decode to the same
records natively and in pure Python; the snappy variants (xerial as Kafka writes it, raw,
the framing format) and zstd with and without a content size all read; damage is a
CorruptRecordError at the batch's position in both kernels, never a crash; decompression
bombs are refused at `limits.DECOMPRESSED_BATCH_BYTES_MAX`."""

import gzip
import io
import random
import struct
import zlib

import cramjam
import pytest
from kafka import codec as kafka_codec
from kafka.record import default_records as kafka_records

from kraftcore import compression, limits
from kraftcore.errors import CorruptRecordError
from tests.conftest import IMPLEMENTATIONS
from tests.kernels.records_util import reseal, snapshot, with_records

TS = 1_700_000_000_000
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PY = IMPLEMENTATIONS["py"]


# kafka-python compresses snappy with python-snappy and zstd with zstandard; where those are
# not installed, equivalent stand-ins built on cramjam are plugged into kafka.codec, so
# kafka-python's own framing code (the xerial blocks) still writes the stream.
class _SnappyStandIn:
    @staticmethod
    def compress(data):
        return bytes(cramjam.snappy.compress_raw(data))

    @staticmethod
    def decompress(data):
        return bytes(cramjam.snappy.decompress_raw(data))


class _ZstdStandIn:
    class ZstdCompressor:
        def compress(self, data):
            return bytes(cramjam.zstd.compress(data))

    class ZstdDecompressor:
        def stream_reader(self, source, read_across_frames=True):
            class _Reader(io.BytesIO):
                pass
            return _Reader(bytes(cramjam.zstd.decompress(source.getvalue())))


@pytest.fixture(autouse=True)
def _kafka_python_codecs(monkeypatch):
    if not kafka_codec.has_snappy():
        monkeypatch.setattr(kafka_codec, "snappy", _SnappyStandIn)
    if not kafka_codec.has_zstd():
        monkeypatch.setattr(kafka_codec, "zstd", _ZstdStandIn)


def _data(n=200):
    values = [b"value-%04d-" % i * (1 + i % 7) for i in range(n)]
    keys = [None if i % 5 == 0 else b"key-%d" % i for i in range(n)]
    headers = [[("trace", b"%d" % i), ("empty", b"")] if i % 3 == 0 else [] for i in range(n)]
    timestamps = [TS + 3 * i for i in range(n)]
    return values, keys, headers, timestamps


def _kafka_python_batch(codec_id, n=200):
    values, keys, headers, timestamps = _data(n)
    builder = kafka_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=codec_id, is_transactional=0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=2**30,
    )
    for i in range(n):
        builder.append(i, timestamp=timestamps[i], key=keys[i], value=values[i],
                       headers=headers[i])
    return bytes(builder.build())


def _plain_records(n=200):
    """The uncompressed record section of the sample batch."""
    return _kafka_python_batch(0, n)[61:]


def _outcome(records, raw):
    try:
        result = snapshot(records.decode_batches(raw))
    except CorruptRecordError as exc:
        verdict = ("corrupt", exc.position)
        try:
            records.validate_batches(raw)
        except CorruptRecordError as again:
            assert again.position == exc.position
        else:
            raise AssertionError("validate accepted what decode refused")
        return verdict
    assert records.validate_batches(raw) == len(result)
    return result


def _alike(raw):
    """Decode `raw` with every kernel; they must agree. Returns the common outcome."""
    outcomes = {name: _outcome(k.records, raw) for name, k in IMPLEMENTATIONS.items()}
    first = next(iter(outcomes.values()))
    assert all(o == first for o in outcomes.values()), outcomes
    return first


# ------------------------------------------------------------------------------ peers

@pytest.mark.parametrize("name", sorted(CODECS))
def test_kafka_python_batches_of_every_codec_decode_alike(impl, name):
    raw = _kafka_python_batch(CODECS[name])
    values, keys, headers, timestamps = _data()
    [batch] = impl.records.decode_batches(raw)
    assert impl.records.validate_batches(raw) == 1
    assert batch.compression == CODECS[name]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records] == list(
        zip(range(200), timestamps, keys, values))
    assert [r.headers for r in batch.records] == [tuple(h) for h in headers]
    # the same records as the uncompressed batch, in every kernel
    plain = snapshot(impl.records.decode_batches(_kafka_python_batch(0)))
    assert [records for _, records in _alike(raw)] == [records for _, records in plain]


def test_kafka_python_writes_xerial_snappy():
    raw = _kafka_python_batch(CODECS["snappy"])
    assert raw[61:69] == compression.XERIAL_MAGIC
    assert struct.unpack(">ii", raw[69:77]) == (1, 1)


@pytest.mark.parametrize("name", ["gzip", "snappy", "zstd"])
def test_kafka_python_reads_what_kraftcore_writes(impl, name):
    values, keys, headers, timestamps = _data()
    raw = impl.records.encode_batch(values, keys=keys, headers=headers, timestamps=timestamps,
                                    base_offset=7, compression=name)
    batch = kafka_records.DefaultRecordBatch(bytearray(raw))
    assert batch.validate_crc() and batch.compression_type == CODECS[name]
    assert [(r.offset, r.key, r.value) for r in batch] == list(zip(range(7, 207), keys, values))


@pytest.mark.parametrize("name", sorted(CODECS))
def test_both_kernels_write_the_same_bytes(name):
    values, keys, headers, timestamps = _data()
    written = {
        kernel: k.records.encode_batch(values, keys=keys, headers=headers,
                                       timestamps=timestamps, compression=name)
        for kernel, k in IMPLEMENTATIONS.items()
    }
    assert len(set(written.values())) == 1
    raw = next(iter(written.values()))
    assert raw[21:23] == bytes([0, CODECS[name]])
    assert snapshot(PY.records.decode_batches(raw))[0][1] == snapshot(
        PY.records.decode_batches(_kafka_python_batch(0)))[0][1]


@pytest.mark.parametrize("compression_arg", [1, 2, 4, "GZIP", "Snappy", "zstd"])
def test_every_codec_can_be_written_by_name_or_id(impl, compression_arg):
    raw = impl.records.encode_batch([b"a", b"b"], compression=compression_arg)
    [batch] = impl.records.decode_batches(raw)
    assert [r.value for r in batch.records] == [b"a", b"b"]


# ------------------------------------------------------------------------------ variants

def _xerial(plain, block=32 * 1024, header=compression.XERIAL_HEADER):
    out = bytearray(header)
    for i in range(0, len(plain), block):
        chunk = bytes(cramjam.snappy.compress_raw(plain[i:i + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


def _zstd_streamed(plain):
    """zstd as Java's ZstdOutputStream writes it: no content size in the frame header."""
    compressor = cramjam.zstd.Compressor()
    compressor.compress(plain)
    frame = bytes(compressor.finish())
    assert frame[4] >> 6 == 0 and not frame[4] & 0x20  # no content size
    return frame


def _variants():
    plain = _plain_records(400)
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    half = len(plain) // 2
    return plain, {
        "gzip": (1, gzip.compress(plain)),
        "gzip, two members": (1, gzip.compress(plain[:half]) + gzip.compress(plain[half:])),
        "gzip, zlib's own header": (1, zlib.compress(plain, 9, 31)),
        "snappy, xerial 32 KiB blocks": (2, _xerial(plain)),
        "snappy, xerial 1 KiB blocks": (2, _xerial(plain, 1024)),
        "snappy, xerial little-endian version (redpanda)": (
            2, _xerial(plain, header=compression.XERIAL_MAGIC + struct.pack("<ii", 1, 1))),
        "snappy, two xerial streams": (2, _xerial(plain[:half]) + _xerial(plain[half:])),
        "snappy, raw": (2, bytes(cramjam.snappy.compress_raw(plain))),
        "snappy, framing format": (2, bytes(cramjam.snappy.compress(plain))),
        "lz4": (3, compression.lz4_compress(plain)),
        "zstd, content size": (4, bytes(cramjam.zstd.compress(plain))),
        "zstd, no content size": (4, _zstd_streamed(plain)),
        "zstd, two frames and a skippable one": (
            4, bytes(cramjam.zstd.compress(plain[:half])) + skippable
            + _zstd_streamed(plain[half:])),
    }


def _batch_with(codec_id, stream, n=400):
    template = bytearray(_kafka_python_batch(0, n)[:61])
    template[22] = codec_id
    return with_records(bytes(template), stream)


@pytest.mark.parametrize("variant", sorted(_variants()[1]))
def test_every_stream_variant_decodes_alike(variant):
    plain, variants = _variants()
    codec_id, stream = variants[variant]
    raw = _batch_with(codec_id, stream)
    assert compression.decompress(codec_id, stream, 0) == plain
    expected = snapshot(PY.records.decode_batches(_kafka_python_batch(0, 400)))[0][1]
    assert _alike(raw)[0][1] == expected


def test_raw_snappy_cannot_start_with_either_snappy_magic():
    """Why reading three snappy formats is safe: raw snappy beginning with the xerial or
    the framing format's magic is invalid (its first tag copies from before the start)."""
    for magic in (compression.XERIAL_MAGIC, compression.SNAPPY_FRAMED_MAGIC):
        with pytest.raises(cramjam.DecompressionError):
            cramjam.snappy.decompress_raw(magic + b"\x00" * 64)


# ------------------------------------------------------------------------------ damage

@pytest.mark.parametrize("name", sorted(CODECS))
def test_every_truncation_of_a_compressed_stream_is_corrupt(name):
    raw = _kafka_python_batch(CODECS[name], 30)
    stream = raw[61:]
    for cut in range(len(stream)):
        assert _alike(with_records(raw[:61], stream[:cut])) == ("corrupt", 0), cut


@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("junk", [b"\x00", b"junk!", b"\x1f\x8b\x08\x00", b"\x00\x00\x00\x01x",
                                  b"\x28\xb5\x2f\xfd"])
def test_bytes_after_a_compressed_stream_are_corrupt(name, junk):
    raw = _kafka_python_batch(CODECS[name], 30)
    assert _alike(with_records(raw[:61], raw[61:] + junk)) == ("corrupt", 0)


@pytest.mark.parametrize("name", sorted(CODECS))
def test_every_bit_flip_in_a_compressed_stream_is_judged_alike(name):
    """A flipped bit under a resealed CRC: both kernels reach the same outcome, which is a
    CorruptRecordError or (damage in a literal, or in a header field no checksum covers,
    such as gzip's mtime) a successful decode, never any other exception."""
    raw = bytearray(_kafka_python_batch(CODECS[name], 30))
    corrupt = 0
    for pos in range(61, len(raw)):
        for bit in (0, 3, 7):
            raw[pos] ^= 1 << bit
            outcome = _alike(reseal(raw))
            corrupt += outcome[0] == "corrupt"
            raw[pos] ^= 1 << bit
    assert corrupt > (len(raw) - 61)  # most damage is caught


@pytest.mark.parametrize("name", sorted(CODECS))
def test_random_bytes_after_a_codec_header_never_crash(name):
    """Random streams (seeded), some starting with each format's magic, in both kernels."""
    rng = random.Random(CODECS[name])
    prefixes = {1: [b"", b"\x1f\x8b\x08\x00"], 2: [b"", compression.XERIAL_HEADER,
                                                    compression.SNAPPY_FRAMED_MAGIC],
                3: [b"", b"\x04\x22\x4d\x18\x60\x40\x82"], 4: [b"", b"\x28\xb5\x2f\xfd"]}
    template = bytearray(_kafka_python_batch(0, 1)[:61])
    template[22] = CODECS[name]
    for _ in range(300):
        stream = rng.choice(prefixes[CODECS[name]]) + rng.randbytes(rng.randrange(0, 60))
        _alike(with_records(bytes(template), stream))


def test_segment_scans_and_appends_check_compressed_records(impl):
    """The append path (check_batch with verify_records) decompresses and walks records."""
    good = {name: _kafka_python_batch(codec_id, 30) for name, codec_id in CODECS.items()}
    # rebase the batches one after another so they can share a segment
    buffer = bytearray()
    base = 0
    for raw in good.values():
        raw = bytearray(raw)
        struct.pack_into(">q", raw, 0, base)
        buffer += raw
        base += 30
    assert impl.segment.scan_batches(bytes(buffer), 0).next_offset == 120
    for name, raw in good.items():
        # a sound stream holding damaged records: the last record cut short
        plain = compression.decompress(CODECS[name], raw[61:], 0)
        lying = with_records(raw[:61], compression.compress(CODECS[name], plain[:-3]))
        with pytest.raises(CorruptRecordError) as info:
            impl.segment.scan_batches(lying, 0)
        assert info.value.position == 0
        assert impl.segment.scan_batches(lying, 0, verify_records=False).next_offset == 30
        state = impl.segment.SegmentState(0)
        with pytest.raises(CorruptRecordError):
            state.stamp_append(lying, 0, 1, 4096)
        assert state.stamp_append(raw, 0, 1, 4096) is not None


def test_a_log_takes_every_codec(tmp_path):
    from kraftcore.log.log import Log

    log = Log.open(tmp_path / "topic-0")
    try:
        offset = 0
        for codec_id in CODECS.values():
            raw = bytearray(_kafka_python_batch(codec_id, 30))
            struct.pack_into(">q", raw, 0, offset)
            log.append_as_follower(bytes(raw))
            offset += 30
        raw = bytearray(_kafka_python_batch(CODECS["zstd"], 30))
        struct.pack_into(">q", raw, 0, offset)
        raw[-2] ^= 0xFF
        with pytest.raises(CorruptRecordError):
            log.append_as_follower(reseal(raw))
        batches = PY.records.decode_batches(bytes(log.read(0, 1 << 20).records))
        assert [b.compression for b in batches] == [1, 2, 3, 4]
        assert [r.offset for b in batches for r in b.records] == list(range(120))
    finally:
        log.close()


# ------------------------------------------------------------------------------ bombs

def _zstd_rle_bomb(blocks, content_size=None):
    """A zstd frame of `blocks` RLE blocks of 128 KiB each: 4 bytes apiece."""
    if content_size is None:
        header = bytes([0x00, 0x88])  # no content size, window 2^27
    else:
        header = bytes([0xC0, 0x88]) + struct.pack("<Q", content_size)
    out = bytearray(struct.pack("<I", 0xFD2FB528) + header)
    for i in range(blocks):
        last = 1 if i == blocks - 1 else 0
        out += (last | (1 << 1) | ((128 * 1024) << 3)).to_bytes(3, "little") + b"\x00"
    return bytes(out)


def _gzip_zeros(size):
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    out = [compressor.compress(chunk) for _ in range(size >> 20)]
    out.append(compressor.compress(bytes(size & ((1 << 20) - 1))))
    out.append(compressor.flush())
    return b"".join(out)


def _snappy_lying_xerial(blocks, declared):
    """xerial blocks each declaring `declared` bytes (a varint) but holding one literal."""
    varint = bytearray()
    while declared >= 0x80:
        varint.append(declared & 0x7F | 0x80)
        declared >>= 7
    block = bytes(varint) + bytes([declared, 0, 0])
    return compression.XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * blocks


@pytest.mark.parametrize("name,stream", [
    ("gzip, zeros", lambda: _gzip_zeros(limits.DECOMPRESSED_BATCH_BYTES_MAX + (1 << 20))),
    ("snappy raw, lying length", lambda: b"\xff\xff\xff\xff\x0f" + b"\x00" * 20),
    ("snappy xerial, lying lengths", lambda: _snappy_lying_xerial(3, 50 * 1024 * 1024)),
    ("zstd, no content size", lambda: _zstd_rle_bomb(1025)),
    ("zstd, declared content size", lambda: _zstd_rle_bomb(1025, 1025 * 128 * 1024)),
    ("lz4, zeros", lambda: compression.lz4_compress(bytes(limits.DECOMPRESSED_BATCH_BYTES_MAX + 1))),
])
def test_a_bomb_is_refused_at_the_real_limit(name, stream):
    stream = stream()
    assert len(stream) < 8 * 1024 * 1024
    template = bytearray(_kafka_python_batch(0, 1)[:61])
    template[22] = CODECS[name.split()[0].rstrip(",")]
    raw = with_records(bytes(template), stream)
    for kernels in IMPLEMENTATIONS.values():
        with pytest.raises(CorruptRecordError, match="more than") as info:
            kernels.records.decode_batches(raw)
        assert info.value.position == 0


def test_a_zstd_bomb_declaring_its_size_is_refused_before_decompressing():
    with pytest.raises(CorruptRecordError, match="more than"):
        compression._zstd_output_bound(_zstd_rle_bomb(1, 1 << 40), 0)


@pytest.mark.parametrize("variant", sorted(_variants()[1]))
def test_output_exactly_at_the_limit_passes_and_one_byte_more_is_refused(monkeypatch, variant):
    plain, variants = _variants()
    codec_id, stream = variants[variant]
    raw = _batch_with(codec_id, stream)
    monkeypatch.setattr(limits, "DECOMPRESSED_BATCH_BYTES_MAX", len(plain))
    assert _alike(raw) != ("corrupt", 0)
    monkeypatch.setattr(limits, "DECOMPRESSED_BATCH_BYTES_MAX", len(plain) - 1)
    for kernels in IMPLEMENTATIONS.values():
        with pytest.raises(CorruptRecordError, match="more than"):
            kernels.records.decode_batches(raw)
