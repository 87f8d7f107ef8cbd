"""`kraftcore.log.snapshots`: Kafka's snapshot file names, atomic writes (part file, fsync,
read-only, rename), deletion through `.deleted`, recovery of what a crash leaves, reads and
the retention timestamp."""

import os
import stat

import pytest

from kraftcore import codec
from kraftcore.errors import StorageError
from kraftcore.log import fileio
from kraftcore.log.snapshots import (SnapshotDirectory, SnapshotWriter, file_name,
                                     parse_file_name)
from kraftcore.raft.control import (SnapshotFooterRecord, SnapshotHeaderRecord,
                                        encode_control_batch)
from kraftcore.types import SnapshotId

pytestmark = pytest.mark.smoke


def counter_suffix():
    count = iter(range(1_000_000))
    return lambda: f"{next(count):016x}"


@pytest.fixture
def snapshots(tmp_path):
    return SnapshotDirectory(tmp_path / "__cluster_metadata-0", random_suffix=counter_suffix())


def listing(directory):
    return sorted(os.listdir(directory.path))


def kafka_snapshot(timestamp, epoch=1, payload=b"x"):
    """Snapshot bytes in Kafka's layout: header, one data batch, footer."""
    return (encode_control_batch([SnapshotHeaderRecord(
                version=0, last_contained_log_timestamp=timestamp)],
                base_offset=0, leader_epoch=epoch, timestamp=timestamp)
            + codec.encode_batch([payload], base_offset=1, leader_epoch=epoch,
                                 timestamp=timestamp)
            + encode_control_batch([SnapshotFooterRecord(version=0)], base_offset=2,
                                   leader_epoch=epoch, timestamp=timestamp))


# ---------------------------------------------------------------------- names

def test_file_name_golden():
    assert file_name(SnapshotId(1000, 5)) == "00000000000000001000-0000000005.checkpoint"
    assert file_name((0, 0)) == "00000000000000000000-0000000000.checkpoint"  # bootstrap
    assert file_name(SnapshotId((1 << 63) - 1, (1 << 31) - 1)) == (
        "09223372036854775807-2147483647.checkpoint")
    assert parse_file_name("00000000000000001000-0000000005.checkpoint") == SnapshotId(1000, 5)
    assert parse_file_name("/some/dir/00000000000000000007-0000000002.checkpoint") == (
        SnapshotId(7, 2))
    for sid in (SnapshotId(0, 0), SnapshotId(123456789, 42), SnapshotId(1 << 40, 7)):
        assert parse_file_name(file_name(sid)) == sid


@pytest.mark.parametrize("name", [
    "",
    "00000000000000001000-0000000005",
    "00000000000000001000-0000000005.checkpoint.part",
    "00000000000000001000-0000000005.checkpoint.deleted",
    "00000000000000001000-0000000005-00ff.checkpoint.part",
    "0000000000000001000-0000000005.checkpoint",  # 19 digits
    "00000000000000001000-000000005.checkpoint",  # 9 digits
    "00000000000000001000_0000000005.checkpoint",
    "0000000000000000100a-0000000005.checkpoint",
    "00000000000000001000-0000000005.CHECKPOINT",
    "00000000000000001000-0000000005.checkpointx",
    "x00000000000000001000-0000000005.checkpoint",
    "99999999999999999999-0000000005.checkpoint",  # offset beyond int64
    "00000000000000001000-9999999999.checkpoint",  # epoch beyond int32
    "00000000000000000000.log",
    "leader-epoch-checkpoint",
])
def test_bad_names_are_a_clear_value_error(name):
    with pytest.raises(ValueError, match="snapshot file name|out of range"):
        parse_file_name(name)


@pytest.mark.parametrize("bad", [SnapshotId(-1, 0), SnapshotId(0, -1), SnapshotId(0, 1 << 31),
                                 SnapshotId(1 << 63, 0), SnapshotId(1.0, 0)])
def test_file_name_of_an_impossible_id_is_a_value_error(bad):
    with pytest.raises(ValueError):
        file_name(bad)


# ---------------------------------------------------------------------- writing

def test_write_is_atomic_read_only_and_listed(snapshots):
    assert snapshots.ids() == [] and snapshots.latest() is None
    assert snapshots.write(SnapshotId(1000, 5), b"hello snapshot")
    assert listing(snapshots) == ["00000000000000001000-0000000005.checkpoint"]
    path = snapshots.path_of(SnapshotId(1000, 5))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o444
    assert snapshots.size((1000, 5)) == 14
    assert snapshots.read_all(SnapshotId(1000, 5)) == b"hello snapshot"
    assert not snapshots.write(SnapshotId(1000, 5), b"other")  # immutable
    assert snapshots.read_all(SnapshotId(1000, 5)) == b"hello snapshot"
    assert snapshots.write(SnapshotId(10, 1), bytearray(b"ten"))
    assert snapshots.write(SnapshotId(1000, 4), memoryview(b"four"))
    assert snapshots.ids() == [SnapshotId(10, 1), SnapshotId(1000, 4), SnapshotId(1000, 5)]
    assert snapshots.earliest() == SnapshotId(10, 1)
    assert snapshots.latest() == SnapshotId(1000, 5)
    assert snapshots.total_bytes() == 14 + 3 + 4
    assert len(snapshots) == 3 and (10, 1) in snapshots and (10, 2) not in snapshots


def test_a_writer_is_invisible_until_frozen(snapshots):
    writer = snapshots.begin(SnapshotId(20, 3))
    assert isinstance(writer, SnapshotWriter)  # the storage contract checks it as a download
    writer.append(b"abc")
    writer.append(bytearray(b"de"))
    assert writer.size == 5 and writer.snapshot_id == SnapshotId(20, 3)
    assert listing(snapshots) == [
        "00000000000000000020-0000000003-0000000000000000.checkpoint.part"]
    assert snapshots.ids() == [] and snapshots.size(SnapshotId(20, 3)) is None
    assert snapshots.open_writers() == [writer]
    assert writer.freeze() is True
    assert listing(snapshots) == ["00000000000000000020-0000000003.checkpoint"]
    assert snapshots.read_all(SnapshotId(20, 3)) == b"abcde"
    assert snapshots.open_writers() == [] and not writer.is_open
    with pytest.raises(ValueError):
        writer.append(b"f")
    with pytest.raises(ValueError):
        writer.freeze()
    writer.abort()  # a no-op once closed
    assert snapshots.ids() == [SnapshotId(20, 3)]


def test_abort_deletes_the_part_file(snapshots):
    writer = snapshots.begin(SnapshotId(5, 1))
    writer.append(b"partial")
    writer.abort()
    writer.abort()
    assert listing(snapshots) == [] and snapshots.ids() == []
    with pytest.raises(ValueError):
        writer.freeze()


def test_freezing_an_id_stored_meanwhile_keeps_the_stored_one(snapshots):
    writer = snapshots.begin(SnapshotId(5, 1))
    writer.append(b"download")
    assert snapshots.write(SnapshotId(5, 1), b"local")
    assert writer.freeze() is False
    assert snapshots.read_all(SnapshotId(5, 1)) == b"local"
    assert listing(snapshots) == ["00000000000000000005-0000000001.checkpoint"]


def test_close_aborts_open_writers(snapshots):
    snapshots.begin(SnapshotId(5, 1)).append(b"x")
    snapshots.begin(SnapshotId(6, 1))
    snapshots.close()
    assert listing(snapshots) == [] and snapshots.open_writers() == []


def test_a_failed_sync_leaves_no_snapshot(snapshots, monkeypatch):
    def broken(fd):
        raise OSError(5, "Input/output error")

    writer = snapshots.begin(SnapshotId(5, 1))
    writer.append(b"data")
    monkeypatch.setattr(fileio, "sync", broken)
    with pytest.raises(StorageError) as info:
        writer.freeze()
    assert info.value.errno == 5
    assert listing(snapshots) == [] and snapshots.ids() == []
    assert not writer.is_open


# ---------------------------------------------------------------------- reading

def test_reads_by_position(snapshots):
    sid = SnapshotId(9, 2)
    snapshots.write(sid, b"0123456789")
    assert snapshots.read(sid, 0, 4) == b"0123"
    assert snapshots.read(sid, 8, 100) == b"89"
    assert snapshots.read(sid, 10, 100) == b""
    assert snapshots.read(sid, 3, 0) == b""
    assert snapshots.read(SnapshotId(9, 3), 0, 10) is None
    assert snapshots.read_all(SnapshotId(9, 3)) is None
    for position in (-1, 11):
        with pytest.raises(ValueError):
            snapshots.read(sid, position, 1)


def test_first_batch_is_the_batch_the_framing_declares_else_none(snapshots):
    sid = SnapshotId(3, 1)
    batch = codec.encode_batch([b"v"], timestamp=5)
    snapshots.write(sid, batch + codec.encode_batch([b"w"], base_offset=1))
    assert snapshots.first_batch(sid) == batch
    plain = SnapshotId(4, 1)
    snapshots.write(plain, b"not a record batch at all, but long enough to hold a header..")
    assert snapshots.first_batch(plain) is None
    short = SnapshotId(5, 1)
    snapshots.write(short, batch[:30])
    assert snapshots.first_batch(short) is None
    assert snapshots.first_batch(SnapshotId(6, 1)) is None
    os.utime(snapshots.path_of(plain), ns=(1_600_000_000_000_000_000,) * 2)
    assert snapshots.mtime_ms(plain) == 1_600_000_000_000
    assert snapshots.mtime_ms(SnapshotId(6, 1)) is None


# ---------------------------------------------------------------------- deleting

def test_delete_and_delete_before(snapshots):
    for sid in (SnapshotId(1, 1), SnapshotId(2, 1), SnapshotId(3, 2), SnapshotId(3, 3)):
        snapshots.write(sid, b"s")
    assert snapshots.delete(SnapshotId(2, 1)) is True
    assert snapshots.delete(SnapshotId(2, 1)) is False
    assert snapshots.delete_before(SnapshotId(3, 3)) == [SnapshotId(1, 1), SnapshotId(3, 2)]
    assert snapshots.ids() == [SnapshotId(3, 3)]
    assert listing(snapshots) == ["00000000000000000003-0000000003.checkpoint"]


def test_delete_renames_to_deleted_before_unlinking(snapshots, monkeypatch):
    snapshots.write(SnapshotId(7, 1), b"s")
    seen = []

    def unlink(path):
        seen.append(sorted(os.listdir(snapshots.path)))
        raise OSError(5, "Input/output error")  # a crash at this point

    monkeypatch.setattr(fileio, "unlink", unlink)
    with pytest.raises(StorageError):
        snapshots.delete(SnapshotId(7, 1))
    assert seen == [["00000000000000000007-0000000001.checkpoint.deleted"]]
    monkeypatch.undo()
    reopened = SnapshotDirectory(snapshots.path)
    assert reopened.ids() == []
    assert reopened.deleted_files == ["00000000000000000007-0000000001.checkpoint.deleted"]
    assert os.listdir(snapshots.path) == []


# ---------------------------------------------------------------------- recovery

def test_reopen_lists_snapshots_and_deletes_leftovers(snapshots):
    snapshots.write(SnapshotId(30, 2), b"thirty")
    snapshots.write(SnapshotId(10, 1), b"ten")
    writer = snapshots.begin(SnapshotId(40, 2))  # a crash while downloading
    writer.append(b"part")
    directory = snapshots.path
    for name in ("00000000000000000050-0000000002.checkpoint.deleted",
                 "not-a-snapshot.checkpoint",
                 "00000000000000000060-2.checkpoint",
                 "00000000000000000000.log", "leader-epoch-checkpoint", "quorum-state"):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(b"?")

    reopened = SnapshotDirectory(directory)
    assert reopened.ids() == [SnapshotId(10, 1), SnapshotId(30, 2)]
    assert reopened.read_all(SnapshotId(30, 2)) == b"thirty"
    assert reopened.size(SnapshotId(10, 1)) == 3
    assert reopened.deleted_files == [
        "00000000000000000040-0000000002-0000000000000002.checkpoint.part",
        "00000000000000000050-0000000002.checkpoint.deleted"]
    assert reopened.skipped_files == ["00000000000000000060-2.checkpoint",
                                      "not-a-snapshot.checkpoint"]
    assert sorted(os.listdir(directory)) == [
        "00000000000000000000.log", "00000000000000000010-0000000001.checkpoint",
        "00000000000000000030-0000000002.checkpoint", "00000000000000000060-2.checkpoint",
        "leader-epoch-checkpoint", "not-a-snapshot.checkpoint", "quorum-state"]
    # the writer of the old instance found its part file gone: aborting is still safe
    writer.abort()


def test_the_default_part_suffix_is_random_hex(tmp_path):
    snapshots = SnapshotDirectory(tmp_path)
    first = snapshots.begin(SnapshotId(1, 0))
    second = snapshots.begin(SnapshotId(1, 0))
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 2 and first.part_path != second.part_path
    for name in names:
        stem, _, rest = name.partition(".")
        assert rest == "checkpoint.part"
        assert stem.startswith("00000000000000000001-0000000000-")
        int(stem.rsplit("-", 1)[1], 16)
    first.abort()
    second.abort()
