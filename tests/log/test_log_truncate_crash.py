"""A truncation that deletes several segments and stops halfway (a crash, a failed unlink)
leaves a log that reopens without a gap: the segments are deleted highest first, so what
remains is the log up to the segments not yet deleted, and nothing below the cut is lost."""

import pytest

from kraftcore import codec
from kraftcore.errors import StorageError
from kraftcore.log import Log
from kraftcore.log import segment as segment_module


def build(path):
    log = Log.open(path, segment_bytes=300)
    for i in range(40):
        log.append(codec.encode_batch([b"v%03d" % i, b"w"]), leader_epoch=1)
    log.flush()
    return log


def offsets(log):
    out = []
    at = log.log_start_offset
    while at < log.log_end_offset:
        result = log.read(at, 1 << 20)
        for batch in result.batches():
            out.extend(r.offset for r in batch.records)
        at = result.next_offset
    return out


def test_a_truncation_stopped_after_one_deletion_reopens_without_a_gap(tmp_path, monkeypatch):
    log = build(tmp_path)
    bases = [s.base_offset for s in log._segments]
    assert len(bases) >= 6
    cut = bases[2] + 1
    real_delete = segment_module.Segment.delete
    deleted = []

    def delete_once(segment):
        if deleted:
            raise OSError(5, "Input/output error")  # the crash, after one deletion
        deleted.append(segment.base_offset)
        real_delete(segment)
    monkeypatch.setattr(segment_module.Segment, "delete", delete_once)
    with pytest.raises(StorageError):
        log.truncate_to(cut)
    monkeypatch.undo()
    assert deleted == [bases[-1]]  # the highest went first
    log.close()

    reopened = Log.open(tmp_path, segment_bytes=300)
    try:
        assert reopened.recovery.gap is None
        kept = offsets(reopened)
        assert kept == list(range(kept[-1] + 1))  # contiguous from 0
        assert kept[-1] + 1 == bases[-1]  # everything below the deleted segment is there
        reopened.truncate_to(cut)  # the truncation, done again, completes
        assert offsets(reopened) == list(range(cut - cut % 2))
    finally:
        reopened.close()
