"""Helpers for record-batch tests: re-sealing a batch's CRC after a deliberate edit, and
comparing decoded batches across implementations."""

import struct

from kraftcore import codec

# the reference implementation's CRC-32C, for resealing damaged batches
crc32c = codec.implementations()["py"].crc32c.crc32c

HEADER_FIELDS = (
    "position", "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
    "attributes", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id",
    "producer_epoch", "base_sequence", "records_count", "size_bytes", "last_offset",
    "next_offset", "compression", "timestamp_type", "is_transactional", "is_control",
    "has_delete_horizon",
)


def reseal(batch):
    """Return `batch` (one batch) with its CRC recomputed, so only structure checks can fail."""
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def with_records(batch, records_bytes, *, count=None, last_offset_delta=None):
    """Replace a batch's record section (and optionally its count), fixing length and CRC."""
    out = bytearray(batch[:61]) + records_bytes
    struct.pack_into(">i", out, 8, len(out) - 12)
    if count is not None:
        struct.pack_into(">i", out, 57, count)
    if last_offset_delta is not None:
        struct.pack_into(">i", out, 23, last_offset_delta)
    return reseal(out)


def snapshot(batches):
    """Everything observable about decoded batches, as plain data."""
    return [
        (
            tuple(getattr(b, name) for name in HEADER_FIELDS),
            [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in b.records],
        )
        for b in batches
    ]
