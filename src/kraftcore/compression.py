"""Compression of a record batch's records, shared by both record kernels: which codec a
`compression=` argument names, and LZ4 frames as Kafka writes and reads them (kafka-facts
§2.4). kraftcore writes and reads uncompressed and lz4 batches only.

Invariants: a frame is written with 64 KiB independent blocks, no checksums and no content
size (Kafka's settings); decompressing one batch never produces more than
`limits.DECOMPRESSED_BATCH_BYTES_MAX` bytes, and any bad, truncated or trailing byte is a
`CorruptRecordError` at the batch's position.
"""

import lz4.frame

from kraftcore import limits
from kraftcore.errors import CorruptRecordError, UnsupportedCompressionError
from kraftcore.layout import CODEC_LZ4, CODEC_NAMES, CODEC_NONE

_CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}


def compression_codec(compression):
    """Map a `compression=` argument (None, a name or a codec id) to the codec id to write.

    Raises UnsupportedCompressionError for a known codec kraftcore does not write, and
    ValueError for something that is not a codec at all."""
    if compression is None:
        return CODEC_NONE
    if isinstance(compression, str):
        codec = _CODEC_IDS.get(compression.lower())
        if codec is None:
            raise ValueError(f"unknown compression {compression!r}; use None or 'lz4'")
    elif isinstance(compression, int) and not isinstance(compression, bool):
        if compression not in CODEC_NAMES:
            raise ValueError(f"unknown compression codec id {compression}; use 0 or 3")
        codec = compression
    else:
        raise TypeError(f"compression must be None, a codec name or id, not {compression!r}")
    if codec not in (CODEC_NONE, CODEC_LZ4):
        raise UnsupportedCompressionError(CODEC_NAMES[codec])
    return codec


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
    request = max(64 * 1024, 8 * len(data))
    pieces = []
    produced = 0
    try:
        piece = decompressor.decompress(data, max_length=min(request, limit + 1))
        while True:
            pieces.append(piece)
            produced += len(piece)
            if produced > limit:
                raise CorruptRecordError(
                    f"lz4 batch decompresses to more than {limit} bytes", position
                )
            if decompressor.eof or decompressor.needs_input:
                break
            request *= 2
            piece = decompressor.decompress(b"", max_length=min(request, limit + 1 - produced))
    except RuntimeError as exc:
        raise CorruptRecordError(f"bad lz4 frame in batch: {exc}", position) from None
    if not decompressor.eof or decompressor.unused_data:
        raise CorruptRecordError("lz4 frame in batch is truncated or followed by junk", position)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)
