"""`kraftcore.log.metadata_dir`: the files of a metadata log directory read for the tools
(the newest snapshot's bytes, where the log starts, the segments' batches and damages),
read-only, every failure a one-line `MetadataLoadError`."""

import os

import pytest

from kraftcore import codec
from kraftcore.errors import MetadataLoadError
from kraftcore.layout import LOG_START_OFFSET_CHECKPOINT, METADATA_PARTITION_DIR
from kraftcore.log import checkpoint, reader
from kraftcore.log.metadata_dir import read_metadata_dir, read_snapshot_file

TS = 1_700_000_000_000


def _batches(base, count):
    return b"".join(codec.encode_batch([b"v%d" % o], base_offset=o, leader_epoch=1,
                                       timestamp=TS) for o in range(base, base + count))


@pytest.fixture
def metadata_dir(tmp_path):
    d = tmp_path / METADATA_PARTITION_DIR
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(_batches(0, 3))
    (d / "00000000000000000003.log").write_bytes(_batches(3, 2))
    (d / "00000000000000000002-0000000001.checkpoint").write_bytes(b"older")
    (d / "00000000000000000004-0000000001.checkpoint").write_bytes(b"newest")
    (d / "00000000000000000004-0000000001-abcd.checkpoint.part").write_bytes(b"part")
    (d / "notes.checkpoint").write_bytes(b"not a snapshot")
    (d / "bootstrap.checkpoint").write_bytes(b"bootstrap")
    return d


def test_the_newest_snapshot_is_read_whole_and_the_segments_listed(metadata_dir, tmp_path):
    for path in (tmp_path, metadata_dir):  # the log dir or __cluster_metadata-0 itself
        found = read_metadata_dir(str(path))
        assert found.source == os.path.abspath(path)
        assert found.directory == str(metadata_dir)
        assert found.snapshot.snapshot_id == (4, 1) and found.snapshot.data == b"newest"
        assert found.snapshot.path == str(metadata_dir / "00000000000000000004-0000000001"
                                          ".checkpoint")
        assert found.segments == [0, 3] and found.log_start == 0
        assert found.skipped == [f"{metadata_dir / 'notes.checkpoint'} is not named like a "
                                 "snapshot (<end offset>-<epoch>.checkpoint): skipped"]
    items = list(found.log_items(start_offset=4))
    assert [i.base_offset for i in items] == [0, 1, 2, 3, 4]
    assert all(isinstance(i, reader.LogBatch) for i in items)


def test_the_log_start_is_the_checkpoints_when_it_is_higher(metadata_dir):
    checkpoint.write_offset(str(metadata_dir), LOG_START_OFFSET_CHECKPOINT, 2)
    assert read_metadata_dir(str(metadata_dir)).log_start == 2
    (metadata_dir / LOG_START_OFFSET_CHECKPOINT).write_text("garbage")
    assert read_metadata_dir(str(metadata_dir)).log_start == 0  # unreadable: ignored


def test_a_first_segment_above_the_start_is_a_gap(metadata_dir):
    os.unlink(metadata_dir / "00000000000000000000.log")
    found = read_metadata_dir(str(metadata_dir))
    [gap] = list(found.log_items(start_offset=2))
    assert gap.kind == reader.GAP and (gap.next_offset, gap.base_offset) == (2, 3)


def test_a_snapshot_file_and_its_id(metadata_dir):
    snap = read_snapshot_file(str(metadata_dir / "00000000000000000002-0000000001.checkpoint"))
    assert (snap.snapshot_id, snap.data) == ((2, 1), b"older")
    assert read_snapshot_file(str(metadata_dir / "bootstrap.checkpoint")).snapshot_id == (0, 0)


@pytest.mark.parametrize("what, message", [
    ("missing", "cannot read {p}: No such file or directory"),
    ("file", "{p} is not a directory; use --snapshot FILE"),
    ("empty", "holds no metadata log: expected a __cluster_metadata-0 directory"),
    ("empty-partition", "holds no metadata log: no .log segment and no"),
])
def test_what_is_not_a_metadata_log_says_so(tmp_path, what, message):
    p = tmp_path / what
    if what == "file":
        p.write_bytes(b"x")
    elif what == "empty":
        p.mkdir()
    elif what == "empty-partition":
        (p / METADATA_PARTITION_DIR).mkdir(parents=True)
    with pytest.raises(MetadataLoadError) as raised:
        read_metadata_dir(str(p))
    assert message.format(p=p) in str(raised.value)
    if what in ("missing", "empty"):
        with pytest.raises(MetadataLoadError, match="cannot read|is a directory"):
            read_snapshot_file(str(p))


def test_a_segment_that_goes_away_while_read_is_a_load_error(metadata_dir, monkeypatch):
    """A running node's retention may delete a segment between the listing and its read."""
    found = read_metadata_dir(str(metadata_dir))
    os.unlink(metadata_dir / "00000000000000000003.log")
    read_file = reader.read_file

    def listed_then_gone(path, **kwargs):
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", path)
        return read_file(path, **kwargs)

    monkeypatch.setattr(reader, "segment_files", lambda d: [
        (0, str(metadata_dir / "00000000000000000000.log")),
        (3, str(metadata_dir / "00000000000000000003.log"))])
    monkeypatch.setattr(reader, "read_file", listed_then_gone)
    with pytest.raises(MetadataLoadError, match="cannot read .*00000000000000000003.log: "
                                                "No such file or directory"):
        list(found.log_items())
