"""`kraftcore.layout` against Kafka's numbers (kafka-facts §2.1, §2.3, §3.1-3.3, §4): each
value is written out here as Kafka documents it, never computed from the module."""

import struct

import pytest

from kraftcore import codec, layout


def test_header_offsets_are_kafkas():
    assert [layout.BASE_OFFSET_OFFSET, layout.BATCH_LENGTH_OFFSET,
            layout.PARTITION_LEADER_EPOCH_OFFSET, layout.MAGIC_OFFSET, layout.CRC_OFFSET,
            layout.ATTRIBUTES_OFFSET, layout.LAST_OFFSET_DELTA_OFFSET,
            layout.BASE_TIMESTAMP_OFFSET, layout.MAX_TIMESTAMP_OFFSET,
            layout.PRODUCER_ID_OFFSET, layout.PRODUCER_EPOCH_OFFSET,
            layout.BASE_SEQUENCE_OFFSET, layout.RECORDS_COUNT_OFFSET] == [
        0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57]
    assert layout.BATCH_HEADER_BYTES == 61
    assert layout.LOG_OVERHEAD_BYTES == 12
    assert layout.CRC_START_OFFSET == 21
    assert layout.BATCH_LENGTH_MIN == 49
    assert layout.HEADER_BYTES_UP_TO_MAGIC == 17
    assert layout.SIZE_FIELD_MIN == 14
    assert layout.STAMPED_HEADER_BYTES == 16
    assert layout.MAGIC == 2


def test_struct_formats_match_the_offsets():
    assert layout.BATCH_HEADER.size == 61 and layout.BATCH_HEAD.size == 27
    assert layout.OFFSET_AND_LENGTH.size == 12 and layout.STAMPED_HEADER.size == 16
    assert layout.BATCH_LENGTH.size == 4  # from BATCH_LENGTH_OFFSET (8) to 12
    assert layout.OFFSET_INDEX_ENTRY.size == layout.OFFSET_INDEX_ENTRY_BYTES == 8
    assert layout.TIME_INDEX_ENTRY.size == layout.TIME_INDEX_ENTRY_BYTES == 12
    assert layout.RELATIVE_OFFSET_MAX == 2**31 - 1


def test_a_batch_unpacks_to_the_fields_it_was_encoded_with():
    batch = codec.encode_batch([b"a", b"b", b"c"], base_offset=1234, leader_epoch=7,
                               timestamp=1_700_000_000_000, producer_id=99, producer_epoch=3,
                               base_sequence=5, transactional=True)
    fields = layout.BATCH_HEADER.unpack_from(batch)
    assert fields[0] == 1234 and fields[1] == len(batch) - 12 and fields[2] == 7
    assert fields[3] == 2 and fields[6] == 2 and fields[7] == fields[8] == 1_700_000_000_000
    assert fields[9:] == (99, 3, 5, 3)
    assert fields[4] == struct.unpack_from(">I", batch, 17)[0] == codec.crc32c(batch[21:])
    assert fields[5] == layout.TRANSACTIONAL_MASK == 0x10
    assert layout.BATCH_HEAD.unpack_from(batch) == fields[:7]
    assert layout.BATCH_LENGTH.unpack_from(batch, layout.BATCH_LENGTH_OFFSET) == (fields[1],)


def test_attribute_masks_and_codecs_are_kafkas():
    assert (layout.COMPRESSION_CODEC_MASK, layout.TIMESTAMP_TYPE_MASK,
            layout.TRANSACTIONAL_MASK, layout.CONTROL_MASK,
            layout.DELETE_HORIZON_MASK) == (0x07, 0x08, 0x10, 0x20, 0x40)
    assert layout.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
    control = codec.encode_batch([b"x"], control=True, log_append_time=True,
                                 compression="lz4")
    assert struct.unpack_from(">h", control, 21)[0] == 0x20 | 0x08 | 3


def test_file_names_are_kafkas():
    assert layout.segment_file_name(1234) == "00000000000000001234.log"
    assert layout.segment_file_name(0, layout.TIME_INDEX_SUFFIX) == \
        "00000000000000000000.timeindex"
    assert layout.SEGMENT_SUFFIXES == (".log", ".index", ".timeindex")
    assert layout.parse_segment_name("00000000000000001234.index") == (1234, ".index")
    for name in ("0000000000000001234.log", "00000000000000001234.log.stray",
                 "00000000000000001234.txt", "0000000000000000123x.log", "a.log",
                 "\u0661" * 20 + ".log"):
        assert layout.parse_segment_name(name) is None, name
    assert layout.parse_prefix("00000000000000001234.log.deleted") == 1234
    assert layout.snapshot_file_name(1000, 5) == "00000000000000001000-0000000005.checkpoint"
    assert layout.parse_snapshot_name("00000000000000001000-0000000005.checkpoint") == (1000, 5)
    for name in ("bootstrap.checkpoint", "00000000000000001000-0000000005.checkpoint.part",
                 "00000000000000001000-0000000005.checkpoint.deleted",
                 "0000000000000001000-0000000005.checkpoint",
                 "00000000000000001000-000000005.checkpoint",
                 "00000000000000001000_0000000005.checkpoint"):
        assert layout.parse_snapshot_name(name) is None, name
    assert layout.parse_snapshot_stem(
        "00000000000000001000-0000000005-00ff.checkpoint.part") == (1000, 5)
    assert (layout.SNAPSHOT_PART_SUFFIX, layout.SNAPSHOT_DELETED_SUFFIX) == (
        ".checkpoint.part", ".checkpoint.deleted")
    assert (layout.DELETED_SUFFIX, layout.CLEANED_SUFFIX, layout.SWAP_SUFFIX,
            layout.STRAY_SUFFIX) == (".deleted", ".cleaned", ".swap", ".stray")
    assert (layout.LEADER_EPOCH_CHECKPOINT, layout.RECOVERY_POINT_CHECKPOINT,
            layout.HIGH_WATERMARK_CHECKPOINT, layout.LOG_START_OFFSET_CHECKPOINT) == (
        "leader-epoch-checkpoint", "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint", "log-start-offset-checkpoint")
    assert (layout.QUORUM_STATE_FILE, layout.META_PROPERTIES_FILE,
            layout.METADATA_PARTITION_DIR, layout.BOOTSTRAP_CHECKPOINT_FILE,
            layout.CLEAN_SHUTDOWN_FILE, layout.LOCK_FILE) == (
        "quorum-state", "meta.properties", "__cluster_metadata-0", "bootstrap.checkpoint",
        ".kafka_cleanshutdown", ".lock")


@pytest.mark.parametrize("impl", sorted(codec.implementations()))
def test_both_kernels_write_the_layout(impl):
    records = codec.implementations()[impl].records
    batch = records.encode_batch([b"v"], base_offset=7, leader_epoch=2, timestamp=5)
    assert layout.BATCH_HEADER.unpack_from(batch)[:4] == (7, len(batch) - 12, 2, 2)
