"""Compression of a record batch's records, shared by both record kernels: which codec a
`compression=` argument names, and the stream formats Kafka writes and reads for each codec
(kafka-facts §2.4): gzip (1), snappy (2), lz4 (3) and zstd (4). kraftcore reads and writes
all four.

Formats:

- gzip: a standard gzip member (RFC 1952; several concatenated members are read too, as
  the JDK's GZIPInputStream does). Written at zlib level 6 (the JDK's default).
- snappy: the xerial snappy-java stream Kafka writes: the 16-byte header `82 'SNAPPY' 00`,
  int32 version, int32 min-compatible version (both ignored when read, as kafka-python
  does: some producers write them little-endian), then blocks of [int32 BE length][raw
  snappy block]; a second header between blocks (concatenated streams) is skipped, as
  snappy-java does. Also read, as kafka-facts asks: plain raw snappy (what snappy-java
  falls back to without the header) and the snappy framing format (`ff 06 00 00 'sNaPpY'`).
  Neither magic can begin a valid raw snappy block, so the three are never confused.
  Written as xerial with 32 KiB blocks (snappy-java's default), version 1, compat 1.
- lz4: an LZ4 frame with 64 KiB independent blocks, no checksums and no content size
  (Kafka's settings).
- zstd: one or more standard zstd frames (skippable frames allowed), with or without a
  content size. Written by `cramjam.zstd.compress` at level 3 (Kafka's default).

Invariants: decompressing one batch never produces more than
`limits.DECOMPRESSED_BATCH_BYTES_MAX` bytes (read when called) and never allocates more
than a small multiple of that, whatever the input claims (the output, plus for gzip and lz4
the pieces joined, for zstd the decoder's window, which libzstd caps at 128 MiB); any bad,
truncated or trailing byte is a `CorruptRecordError` at the batch's position. How each
codec is bounded:

- gzip and lz4 are decompressed incrementally, in growing pieces, stopping past the limit.
- snappy declares every raw block's decompressed length up front (a varint); the lengths are
  summed and checked before anything is allocated, then each block is decompressed into its
  exact place (`decompress_raw_into`).
- zstd's frame and block headers are walked first: a frame with a content size declares its
  output exactly, and otherwise raw and RLE blocks declare theirs and a compressed block
  yields at most its frame's block maximum (128 KiB or the window, if smaller). The
  output buffer is that bound (capped at the limit + 1) and the frames are decompressed into
  it (`cramjam.zstd.decompress_into`), which fails rather than writing past its end.
"""

import zlib

import cramjam
import lz4.frame

from kraftcore import limits
from kraftcore.errors import CorruptRecordError, UnsupportedCompressionError
from kraftcore.layout import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
)

_CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}

GZIP_LEVEL = 6  # the JDK Deflater's default (-1), which Kafka uses unless told otherwise
ZSTD_LEVEL = 3  # Kafka's default zstd level
SNAPPY_BLOCK_BYTES = 32 * 1024  # snappy-java's default block size, which Kafka uses

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
XERIAL_HEADER_BYTES = len(XERIAL_HEADER)  # 16
SNAPPY_FRAMED_MAGIC = b"\xff\x06\x00\x00sNaPpY"
SNAPPY_FRAMED_CHUNK_MAX = 65536  # uncompressed bytes in one chunk of the framing format

_GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip wrapper, nothing else
_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50  # low four bits are free
_ZSTD_BLOCK_MAX = 128 * 1024


def compression_codec(compression):
    """Map a `compression=` argument (None, a name or a codec id) to the codec id to write.

    Raises ValueError for something that is not a codec at all. (Every Kafka codec is
    written, so UnsupportedCompressionError is no longer raised here.)"""
    if compression is None:
        return CODEC_NONE
    if isinstance(compression, str):
        codec = _CODEC_IDS.get(compression.lower())
        if codec is None:
            raise ValueError(
                f"unknown compression {compression!r}; use None, 'gzip', 'snappy', 'lz4' "
                "or 'zstd'")
    elif isinstance(compression, int) and not isinstance(compression, bool):
        if compression not in CODEC_NAMES:
            raise ValueError(f"unknown compression codec id {compression}; use 0 to 4")
        codec = compression
    else:
        raise TypeError(f"compression must be None, a codec name or id, not {compression!r}")
    return codec


def compress(codec, data):
    """The records `data` compressed as Kafka writes codec `codec` (not CODEC_NONE)."""
    if codec == CODEC_LZ4:
        return lz4_compress(data)
    if codec == CODEC_GZIP:
        return zlib.compress(data, GZIP_LEVEL, _GZIP_WBITS)
    if codec == CODEC_SNAPPY:
        return snappy_compress(data)
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise UnsupportedCompressionError(CODEC_NAMES.get(codec, codec))


def decompress(codec, data, position):
    """Decompress one batch's records (`data`, a bytes-like object) compressed with `codec`,
    refusing more than `limits.DECOMPRESSED_BATCH_BYTES_MAX` bytes. Returns bytes; raises
    CorruptRecordError at `position` (the batch's) for any bad byte."""
    if codec == CODEC_LZ4:
        return lz4_decompress(data, position)
    if codec == CODEC_GZIP:
        return gzip_decompress(data, position)
    if codec == CODEC_SNAPPY:
        return snappy_decompress(data, position)
    if codec == CODEC_ZSTD:
        return zstd_decompress(data, position)
    raise UnsupportedCompressionError(CODEC_NAMES.get(codec, codec), position)


def _too_big(name, position):
    limit = limits.DECOMPRESSED_BATCH_BYTES_MAX
    return CorruptRecordError(f"{name} batch decompresses to more than {limit} bytes", position)


def _first_request(data):
    """The first output piece to ask an incremental decompressor for."""
    return max(64 * 1024, 8 * len(data))


# ------------------------------------------------------------------------------ lz4

def lz4_compress(data):
    """An LZ4 frame as Kafka writes it: 64 KiB independent blocks, no checksums, no size."""
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )


def lz4_decompress(data, position):
    """Decompress one LZ4 frame holding a batch's records, refusing more than the limit.

    Output is requested in growing pieces (from 8x the input) rather than with one
    limit-sized request, which would make the library allocate the whole limit each time."""
    decompressor = lz4.frame.LZ4FrameDecompressor()
    limit = limits.DECOMPRESSED_BATCH_BYTES_MAX
    request = _first_request(data)
    pieces = []
    produced = 0
    try:
        piece = decompressor.decompress(data, max_length=min(request, limit + 1))
        while True:
            pieces.append(piece)
            produced += len(piece)
            if produced > limit:
                raise _too_big("lz4", position)
            if decompressor.eof or decompressor.needs_input:
                break
            request *= 2
            piece = decompressor.decompress(b"", max_length=min(request, limit + 1 - produced))
    except RuntimeError as exc:
        raise CorruptRecordError(f"bad lz4 frame in batch: {exc}", position) from None
    if not decompressor.eof or decompressor.unused_data:
        raise CorruptRecordError("lz4 frame in batch is truncated or followed by junk", position)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


# ------------------------------------------------------------------------------ gzip

def gzip_decompress(data, position):
    """Decompress the gzip member(s) holding a batch's records, refusing more than the
    limit. Output is produced in growing pieces, as for lz4."""
    limit = limits.DECOMPRESSED_BATCH_BYTES_MAX
    request = _first_request(data)
    pieces = []
    produced = 0
    pending = data
    if not len(data):
        raise CorruptRecordError("empty gzip stream in batch", position)
    try:
        while True:  # one gzip member per round
            decompressor = zlib.decompressobj(_GZIP_WBITS)
            while not decompressor.eof:
                piece = decompressor.decompress(pending, min(request, limit + 1 - produced))
                pending = decompressor.unconsumed_tail
                pieces.append(piece)
                produced += len(piece)
                if produced > limit:
                    raise _too_big("gzip", position)
                if not piece and not pending and not decompressor.eof:
                    raise CorruptRecordError("gzip stream in batch is truncated", position)
                request *= 2
            pending = decompressor.unused_data
            if not pending:
                break
            if pending[:2] != _GZIP_MAGIC:
                raise CorruptRecordError(
                    f"{len(pending)} bytes of junk follow the gzip stream in batch", position)
    except zlib.error as exc:
        raise CorruptRecordError(f"bad gzip stream in batch: {exc}", position) from None
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


# ------------------------------------------------------------------------------ snappy

def snappy_compress(data):
    """The xerial snappy-java stream Kafka writes: header, then 32 KiB blocks."""
    view = memoryview(data)
    out = [XERIAL_HEADER]
    for start in range(0, len(view), SNAPPY_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + SNAPPY_BLOCK_BYTES]))
        out.append(len(block).to_bytes(4, "big"))
        out.append(block)
    return b"".join(out)


def _raw_snappy_length(block, position):
    """The decompressed length a raw snappy block declares (its leading varint)."""
    try:
        return cramjam.snappy.decompress_raw_len(block)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"bad snappy block in batch: {exc}", position) from None


def _snappy_blocks_into(blocks, total, position):
    """Decompress raw snappy `blocks` ((block, declared length) pairs, summing to `total`,
    already checked against the limit) back to back into one bytes object."""
    out = bytearray(total)
    view = memoryview(out)
    at = 0
    try:
        for block, length in blocks:
            if not len(block):
                raise CorruptRecordError("empty snappy block in batch", position)
            written = cramjam.snappy.decompress_raw_into(block, view[at : at + length])
            if written != length:
                raise CorruptRecordError(
                    f"snappy block in batch gave {written} bytes, it declares {length}",
                    position)
            at += length
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"bad snappy block in batch: {exc}", position) from None
    del view
    return bytes(out)


def snappy_decompress(data, position):
    """Decompress a batch's snappy records: xerial-framed (what Kafka writes), the snappy
    framing format, or one raw snappy block; refusing more than the limit before
    allocating."""
    data = memoryview(data).cast("B")
    if data[:8] == XERIAL_MAGIC:
        return _xerial_decompress(data, position)
    if data[: len(SNAPPY_FRAMED_MAGIC)] == SNAPPY_FRAMED_MAGIC:
        return _snappy_framed_decompress(data, position)
    if not len(data):
        raise CorruptRecordError("empty snappy stream in batch", position)
    length = _raw_snappy_length(data, position)
    if length > limits.DECOMPRESSED_BATCH_BYTES_MAX:
        raise _too_big("snappy", position)
    return _snappy_blocks_into([(data, length)], length, position)


def _xerial_decompress(data, position):
    limit = limits.DECOMPRESSED_BATCH_BYTES_MAX
    end = len(data)
    blocks = []
    total = 0
    p = 0
    while p < end:
        if data[p : p + 8] == XERIAL_MAGIC:  # a (first or concatenated) stream's header
            if end - p < XERIAL_HEADER_BYTES:
                raise CorruptRecordError("xerial snappy header in batch is truncated", position)
            p += XERIAL_HEADER_BYTES
            continue
        if end - p < 4:
            raise CorruptRecordError("xerial snappy block length in batch is truncated",
                                     position)
        size = int.from_bytes(data[p : p + 4], "big", signed=True)
        p += 4
        if size <= 0 or size > end - p:
            raise CorruptRecordError(
                f"xerial snappy block of {size} bytes in batch: {end - p} are left", position)
        block = data[p : p + size]
        p += size
        length = _raw_snappy_length(block, position)
        total += length
        if total > limit:
            raise _too_big("snappy", position)
        blocks.append((block, length))
    return _snappy_blocks_into(blocks, total, position)


def _snappy_framed_decompress(data, position):
    """The snappy framing format: chunks parsed here to bound the output, then decompressed
    (and their CRCs checked) by cramjam into a buffer of exactly that size."""
    limit = limits.DECOMPRESSED_BATCH_BYTES_MAX
    end = len(data)
    total = 0
    p = 0
    while p < end:
        if end - p < 4:
            raise CorruptRecordError("snappy frame chunk header in batch is truncated",
                                     position)
        kind = data[p]
        size = int.from_bytes(data[p + 1 : p + 4], "little")
        p += 4
        if size > end - p:
            raise CorruptRecordError(
                f"snappy frame chunk of {size} bytes in batch: {end - p} are left", position)
        chunk = data[p : p + size]
        p += size
        if kind == 0xFF:
            if chunk != SNAPPY_FRAMED_MAGIC[4:]:
                raise CorruptRecordError("bad snappy stream identifier in batch", position)
            continue
        if kind == 0x00:  # compressed: masked CRC-32C, then a raw snappy block
            if size <= 4:
                raise CorruptRecordError("snappy frame chunk in batch is too short", position)
            length = _raw_snappy_length(chunk[4:], position)
        elif kind == 0x01:  # uncompressed: masked CRC-32C, then the bytes
            if size < 4:
                raise CorruptRecordError("snappy frame chunk in batch is too short", position)
            length = size - 4
        elif kind >= 0x80:  # padding or skippable
            continue
        else:
            raise CorruptRecordError(f"reserved snappy frame chunk type {kind} in batch",
                                     position)
        if length > SNAPPY_FRAMED_CHUNK_MAX:
            raise CorruptRecordError(
                f"snappy frame chunk in batch holds {length} bytes, above 65536", position)
        total += length
        if total > limit:
            raise _too_big("snappy", position)
    out = bytearray(total)
    try:
        written = cramjam.snappy.decompress_into(data, out)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"bad snappy frame in batch: {exc}", position) from None
    if written != total:
        raise CorruptRecordError(
            f"snappy frame in batch gave {written} bytes, its chunks declare {total}", position)
    return bytes(out)


# ------------------------------------------------------------------------------ zstd

def _zstd_output_bound(data, position):
    """An upper bound of what the zstd frames in `data` decompress to, from their headers;
    at most the limit + 1 (the walk stops there). Structural damage the walk sees (bad
    magic, reserved bits, truncation, trailing junk) is a CorruptRecordError; the rest is
    left to the decoder."""
    limit = limits.DECOMPRESSED_BATCH_BYTES_MAX
    end = len(data)
    if not end:
        raise CorruptRecordError("empty zstd stream in batch", position)
    truncated = CorruptRecordError("zstd frame in batch is truncated", position)
    bound = 0
    p = 0
    while p < end:
        if end - p < 4:
            raise CorruptRecordError(f"{end - p} bytes of junk follow the zstd frames in batch",
                                     position)
        magic = int.from_bytes(data[p : p + 4], "little")
        if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE_MAGIC:
            if end - p < 8:
                raise truncated
            p += 8 + int.from_bytes(data[p + 4 : p + 8], "little")
            if p > end:
                raise truncated
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"not a zstd frame in batch (magic {magic:#010x})",
                                     position)
        p += 4
        if p >= end:
            raise truncated
        descriptor = data[p]
        p += 1
        if descriptor & 0x08:
            raise CorruptRecordError("reserved bit set in a zstd frame header in batch",
                                     position)
        single_segment = descriptor & 0x20
        window = None
        if not single_segment:
            if p >= end:
                raise truncated
            exponent, mantissa = data[p] >> 3, data[p] & 7
            p += 1
            window = (1 << (10 + exponent)) + (1 << (7 + exponent)) * mantissa
        p += (0, 1, 2, 4)[descriptor & 3]  # dictionary id
        size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
        if p + size_bytes > end:
            raise truncated
        content_size = None
        if size_bytes:
            content_size = int.from_bytes(data[p : p + size_bytes], "little")
            if size_bytes == 2:
                content_size += 256
            p += size_bytes
            if content_size > limit:
                raise _too_big("zstd", position)
        if single_segment:
            window = content_size
        block_max = min(window, _ZSTD_BLOCK_MAX)
        frame_bound = 0
        while True:
            if end - p < 3:
                raise truncated
            header = int.from_bytes(data[p : p + 3], "little")
            p += 3
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 3:
                raise CorruptRecordError("reserved zstd block type in batch", position)
            if size > block_max:
                raise CorruptRecordError(
                    f"zstd block of {size} bytes in batch, above its frame's {block_max}",
                    position)
            if kind == 0:  # raw
                p += size
                frame_bound += size
            elif kind == 1:  # RLE: one byte repeated `size` times
                p += 1
                frame_bound += size
            else:  # compressed: at most the block maximum
                p += size
                frame_bound += block_max
            if p > end:
                raise truncated
            if header & 1:  # last block
                break
            if bound + frame_bound > limit and content_size is None:
                return limit + 1  # no need to walk further: the buffer is capped
        if descriptor & 0x04:  # content checksum
            p += 4
            if p > end:
                raise truncated
        if content_size is not None:
            if content_size > frame_bound:
                raise CorruptRecordError(
                    f"zstd frame in batch declares {content_size} bytes, its blocks hold at "
                    f"most {frame_bound}", position)
            frame_bound = content_size
        bound += frame_bound
        if bound > limit:
            return limit + 1
    return bound


def zstd_decompress(data, position):
    """Decompress the zstd frames holding a batch's records into a buffer sized by
    `_zstd_output_bound`, refusing more than the limit."""
    limit = limits.DECOMPRESSED_BATCH_BYTES_MAX
    data = memoryview(data).cast("B")
    bound = _zstd_output_bound(data, position)
    out = bytearray(bound)
    try:
        written = cramjam.zstd.decompress_into(data, out)
    except cramjam.DecompressionError as exc:
        if bound > limit:
            raise CorruptRecordError(
                f"zstd frame in batch is bad or decompresses to more than {limit} bytes: {exc}",
                position) from None
        raise CorruptRecordError(f"bad zstd frame in batch: {exc}", position) from None
    if written > limit:
        raise _too_big("zstd", position)
    del out[written:]
    return bytes(out)
