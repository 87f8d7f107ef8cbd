"""Kafka's byte layouts and file names, in one place: the record batch v2 header, its
attribute bits, the index entries, and the names of the files in a log directory
(kafka-facts §2, §3, §4). Every module that reads or writes these bytes or names takes them
from here, the native kernels included (they copy the numbers into C constants when they
load).

Invariants:

* Each header field's offset is defined from the one before it plus that field's size, so
  the layout is stated once and its total (`BATCH_HEADER_BYTES` = 61) follows from it.
* Every struct format here has the size its offsets say (checked when the module loads).
* File names: a segment's files are its base offset as 20 zero-padded digits plus a suffix;
  a snapshot's name is its end offset (20 digits), "-", its epoch (10 digits),
  ".checkpoint". The parse helpers accept exactly those names and nothing else.

This module imports nothing of kraftcore: every layer may use it.
"""

import struct

# ------------------------------------------------------------------ Kafka's integer fields
# The ranges of Kafka's INT32 and INT64 fields (node ids, epochs, offsets, lengths; Java's
# int and long, which its config files' INT and LONG settings share).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# ------------------------------------------------------------------ record batch v2 header
# (kafka-facts §2.1; big-endian)
BASE_OFFSET_OFFSET = 0  # int64
BATCH_LENGTH_OFFSET = BASE_OFFSET_OFFSET + 8  # int32: the bytes after this field
PARTITION_LEADER_EPOCH_OFFSET = BATCH_LENGTH_OFFSET + 4  # int32, outside the CRC
MAGIC_OFFSET = PARTITION_LEADER_EPOCH_OFFSET + 4  # int8
CRC_OFFSET = MAGIC_OFFSET + 1  # uint32 CRC-32C
ATTRIBUTES_OFFSET = CRC_OFFSET + 4  # int16; the CRC covers from here to the batch's end
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2  # int32
BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4  # int64
MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + 8  # int64
PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + 8  # int64
PRODUCER_EPOCH_OFFSET = PRODUCER_ID_OFFSET + 8  # int16
BASE_SEQUENCE_OFFSET = PRODUCER_EPOCH_OFFSET + 2  # int32
RECORDS_COUNT_OFFSET = BASE_SEQUENCE_OFFSET + 4  # int32
BATCH_HEADER_BYTES = RECORDS_COUNT_OFFSET + 4  # 61: the records follow

# The framing every message format shares: base offset and batch length. A batch is
# LOG_OVERHEAD_BYTES + batch length bytes.
LOG_OVERHEAD_BYTES = BATCH_LENGTH_OFFSET + 4  # 12
# The CRC covers [CRC_START_OFFSET, end of the batch).
CRC_START_OFFSET = ATTRIBUTES_OFFSET
# The smallest batch length a v2 batch can declare: a header without records.
BATCH_LENGTH_MIN = BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES  # 49
# Bytes Kafka's file scan needs to read a batch's size and magic (`FileLogInputStream`).
HEADER_BYTES_UP_TO_MAGIC = MAGIC_OFFSET + 1  # 17
# The smallest size field a file scan accepts before it looks at the magic
# (LegacyRecord.RECORD_OVERHEAD_V0, kafka-facts §2.6).
SIZE_FIELD_MIN = 14
# The head of a batch an append stamps: base offset, batch length, partition leader epoch.
STAMPED_HEADER_BYTES = MAGIC_OFFSET  # 16
MAGIC = 2

# Struct formats of the header, as code unpacks it.
BATCH_HEADER_FORMAT = ">qiibIhiqqqhii"  # every field, BATCH_HEADER_BYTES
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta
BATCH_HEAD_FORMAT = ">qiibIhi"
BATCH_HEAD_BYTES = BASE_TIMESTAMP_OFFSET  # 27
OFFSET_AND_LENGTH_FORMAT = ">qi"  # LOG_OVERHEAD_BYTES
BATCH_LENGTH_FORMAT = ">i"  # at BATCH_LENGTH_OFFSET, up to LOG_OVERHEAD_BYTES
STAMPED_HEADER_FORMAT = ">qii"  # STAMPED_HEADER_BYTES
BATCH_HEADER = struct.Struct(BATCH_HEADER_FORMAT)
BATCH_HEAD = struct.Struct(BATCH_HEAD_FORMAT)
OFFSET_AND_LENGTH = struct.Struct(OFFSET_AND_LENGTH_FORMAT)
BATCH_LENGTH = struct.Struct(BATCH_LENGTH_FORMAT)
STAMPED_HEADER = struct.Struct(STAMPED_HEADER_FORMAT)

# ------------------------------------------------------------------ records (§2.5)
# What a record of a batch without keys or headers whose records share the batch's
# timestamp adds to its value at most: length, offsetDelta and valueLength varints (5 bytes
# each at most), attributes, timestampDelta (0), keyLength (-1) and headersCount (0), one
# byte each: 19, kept at 21 for the Raft driver to size its batches with room to spare.
RECORD_OVERHEAD_BYTES_MAX = 21

# ------------------------------------------------------------------ attributes (§2.3)
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # set: baseTimestamp holds the delete horizon

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy",
               CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

# ------------------------------------------------------------------ metadata records (§5.1)
# The frame of a metadata record value: its version, and the record type and version
# numbers it carries, which must fit an int16.
METADATA_FRAME_VERSION = 1
METADATA_FRAME_FIELD_MAX = 0x7FFF

# ------------------------------------------------------------------ index entries (§3.2, §3.3)
OFFSET_INDEX_ENTRY_FORMAT = ">ii"  # relative offset, position
TIME_INDEX_ENTRY_FORMAT = ">qi"  # timestamp, relative offset
OFFSET_INDEX_ENTRY = struct.Struct(OFFSET_INDEX_ENTRY_FORMAT)
TIME_INDEX_ENTRY = struct.Struct(TIME_INDEX_ENTRY_FORMAT)
OFFSET_INDEX_ENTRY_BYTES = 4 + 4  # 8
TIME_INDEX_ENTRY_BYTES = 8 + 4  # 12
# Every offset of a segment fits an int32 relative to its base offset (§3.1).
RELATIVE_OFFSET_MAX = 0x7FFFFFFF

# ------------------------------------------------------------------ file names (§3.1, §4)
OFFSET_DIGITS = 20
EPOCH_DIGITS = 10
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
SNAPSHOT_SUFFIX = ".checkpoint"
PART_SUFFIX = ".part"  # a snapshot being written: `<stem>-<random>.checkpoint.part`
SNAPSHOT_PART_SUFFIX = SNAPSHOT_SUFFIX + PART_SUFFIX
# Appended to a file scheduled for deletion, a compaction's temporary file and its swap
# (`kraftcore.log.cleaner`: `.cleaned` while written, `.swap` once whole and synced; the
# replaced segments' files take `.deleted` until the swap's files take their final names).
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SNAPSHOT_DELETED_SUFFIX = SNAPSHOT_SUFFIX + DELETED_SUFFIX
# A file written beside its target and renamed over it.
TMP_SUFFIX = ".tmp"
# Appended to the segment files a log sets aside instead of deleting them (not part of the
# log, or past a gap it was opened up to); Kafka sets a stray partition directory aside in
# the same spirit (`-stray`, KIP-858).
STRAY_SUFFIX = ".stray"
# A deleted partition's directory, renamed before its files go (Kafka's `-delete`).
DELETED_DIR_SUFFIX = "-delete"

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
# The log cleaner's first dirty offset of each compacted log (Kafka's `LogCleanerManager`).
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
QUORUM_STATE_FILE = "quorum-state"
META_PROPERTIES_FILE = "meta.properties"
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = METADATA_TOPIC + "-0"
BOOTSTRAP_CHECKPOINT_FILE = "bootstrap" + SNAPSHOT_SUFFIX


def file_prefix(base_offset):
    """The 20-digit zero-padded offset that starts a segment's (or a snapshot's) file name."""
    return f"{base_offset:0{OFFSET_DIGITS}d}"


def parse_prefix(name):
    """The base offset a segment file name starts with (the part before its first "."),
    or None if the name does not start with 20 digits and a "."."""
    stem, dot, _ = name.partition(".")
    if dot and len(stem) == OFFSET_DIGITS and stem.isdigit() and stem.isascii():
        return int(stem)
    return None


def segment_file_name(base_offset, suffix=LOG_SUFFIX):
    """`<base offset, 20 digits><suffix>`, e.g. `00000000000000001234.log`."""
    return file_prefix(base_offset) + suffix


def parse_segment_name(name, suffixes=SEGMENT_SUFFIXES):
    """(base offset, suffix) of a segment file name ending in one of `suffixes` exactly
    (`00000000000000001234.index` -> (1234, ".index")), or None."""
    base = parse_prefix(name)
    if base is None:
        return None
    suffix = name[OFFSET_DIGITS:]
    return (base, suffix) if suffix in suffixes else None


def snapshot_stem(end_offset, epoch):
    """`<end offset, 20 digits>-<epoch, 10 digits>`, the part every file of a snapshot
    shares."""
    return f"{end_offset:0{OFFSET_DIGITS}d}-{epoch:0{EPOCH_DIGITS}d}"


def snapshot_file_name(end_offset, epoch):
    """A complete snapshot's file name, e.g. `00000000000000001000-0000000005.checkpoint`."""
    return snapshot_stem(end_offset, epoch) + SNAPSHOT_SUFFIX


def parse_snapshot_stem(name):
    """(end offset, epoch) a name starts with (`<20 digits>-<10 digits>`), or None. The
    offset is read from characters [0, 20) and the epoch from [21, 31), as Kafka reads
    them."""
    stem = name[:OFFSET_DIGITS + 1 + EPOCH_DIGITS]
    offset, dash, epoch = stem[:OFFSET_DIGITS], stem[OFFSET_DIGITS:OFFSET_DIGITS + 1], \
        stem[OFFSET_DIGITS + 1:]
    if dash != "-" or len(epoch) != EPOCH_DIGITS or not (offset + epoch).isdigit() \
            or not (offset + epoch).isascii():
        return None
    return int(offset), int(epoch)


def parse_snapshot_name(name):
    """(end offset, epoch) of a complete snapshot's file name, or None for any other name
    (`bootstrap.checkpoint`, a `.part` or `.deleted` file, wrong digit counts)."""
    if len(name) != OFFSET_DIGITS + 1 + EPOCH_DIGITS + len(SNAPSHOT_SUFFIX) \
            or not name.endswith(SNAPSHOT_SUFFIX):
        return None
    return parse_snapshot_stem(name)


def _check_sizes():
    for layout, size in ((BATCH_HEADER, BATCH_HEADER_BYTES), (BATCH_HEAD, BATCH_HEAD_BYTES),
                         (OFFSET_AND_LENGTH, LOG_OVERHEAD_BYTES),
                         (BATCH_LENGTH, LOG_OVERHEAD_BYTES - BATCH_LENGTH_OFFSET),
                         (STAMPED_HEADER, STAMPED_HEADER_BYTES),
                         (OFFSET_INDEX_ENTRY, OFFSET_INDEX_ENTRY_BYTES),
                         (TIME_INDEX_ENTRY, TIME_INDEX_ENTRY_BYTES)):
        if layout.size != size:
            raise ImportError(f"kraftcore.layout: format {layout.format!r} is {layout.size} "
                              f"bytes, the offsets say {size}")


_check_sizes()
