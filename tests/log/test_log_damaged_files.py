"""Logs whose files were damaged or edited by hand: checkpoint values the segments
contradict, a middle segment emptied or deleted, stray segment files, a prefilled zero tail.

The contract (docs/log.md, "Recovery"): the damage is reported; no record that was in the
log is lost and no file is deleted (set-aside files keep their bytes under a `.stray`
name); the log start offset and high watermark never move past what the segments hold; a
gap between segments refuses the open, changing nothing, unless `set_aside_past_gap=True`.
"""

import os
import shutil

import pytest

from kraftcore import codec
from kraftcore.errors import LogGapError, LogLockedError, StorageError
from kraftcore.log import Log
from tests.log.test_log import values

pytestmark = pytest.mark.smoke

TOPIC = "t-0"
MARKER = ".kafka_cleanshutdown"
CHECKPOINTS = ("log-start-offset-checkpoint", "replication-offset-checkpoint",
               "recovery-point-offset-checkpoint", "leader-epoch-checkpoint")


def _build(tmp_path, shutdown="clean", **settings):
    """A log of many small segments, batches in rising leader epochs (two batches per
    epoch), a high watermark below its end. Returns (path, facts) where facts has the
    records [(offset, value)], segment base offsets, high watermark, log end offset and
    epoch entries. `shutdown="crash"` drops the log without closing it (after a
    checkpoint), so the next open scans."""
    path = tmp_path / TOPIC
    log = Log.open(path, segment_bytes=2000, fsync="never", **settings)
    for n in range(60):
        log.append(values(2 + n % 3, tag=f"b{n}-", size=120), leader_epoch=n // 2)
    log.update_high_watermark(log.log_end_offset - 7)
    log.flush()
    facts = {"records": read_all(log), "bases": log.segment_base_offsets,
             "hw": log.high_watermark, "leo": log.log_end_offset,
             "epochs": log.epoch_entries()}
    assert len(facts["bases"]) >= 15
    if shutdown == "clean":
        log.close()
    else:
        log.checkpoint()
        log._release()  # the process dies; what it wrote stays
    return path, facts


def read_all(log):
    """[(offset, value)] from the log start to the log end, checking that every offset is
    there once, in order."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 16 * 1024)
        assert len(result) > 0, f"nothing read at {offset}, below {log.log_end_offset}"
        for batch in result.batches():
            for record in batch.records:
                assert record.offset == offset, f"offset {record.offset} where {offset} was due"
                out.append((record.offset, record.value))
                offset += 1
    return out


def records_in(data):
    """[(offset, value)] of the record batches in `data` (the bytes of a segment file)."""
    return [(r.offset, r.value) for batch in codec.decode_batches(data) for r in batch.records]


def listing(path):
    """{name: bytes} of every file in the directory but the lock file."""
    return {name: (path / name).read_bytes() for name in sorted(os.listdir(path))
            if name != ".lock"}


def segment_name(base, suffix=".log"):
    return f"{base:020d}{suffix}"


def assert_nothing_deleted(before, path):
    """Every file of `before` is still in `path`, or set aside there as `<name>.stray`; a
    segment's `.log` keeps its bytes (its indexes may be rebuilt, the checkpoints are
    rewritten, the clean-shutdown marker is consumed by the open)."""
    after = listing(path)
    for name, data in before.items():
        if name == MARKER:
            continue
        kept = name if name in after else f"{name}.stray"
        assert kept in after, f"{name} was deleted"
        if name.endswith(".log"):
            assert after[kept] == data, f"{name} was changed"


def write_offset_checkpoint(path, name, offset):
    (path / name).write_text(f"0\n1\nt 0 {offset}\n")


# ------------------------------------------------------------------ offset checkpoints


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
@pytest.mark.parametrize("value", [999_999_999, -1, "end+1"])
@pytest.mark.parametrize("name", CHECKPOINTS[:3])
def test_an_offset_checkpoint_the_segments_contradict_is_reported_and_ignored(
        tmp_path, name, value, shutdown):
    path, facts = _build(tmp_path, shutdown)
    leo = facts["leo"]
    value = leo + 1 if value == "end+1" else value
    write_offset_checkpoint(path, name, value)
    before = listing(path)
    with Log.open(path, segment_bytes=2000) as log:
        reports = [r for r in log.recovery.ignored_checkpoints if name in r]
        assert len(reports) == 1, log.recovery.ignored_checkpoints
        assert str(value) in reports[0] and f"[0, {leo})" in reports[0]
        assert read_all(log) == facts["records"]
        assert log.segment_base_offsets == facts["bases"]
        assert log.log_start_offset == 0 and log.log_end_offset == leo
        # an ignored high watermark falls back to the log start, never up to the end
        hw = 0 if name == "replication-offset-checkpoint" else facts["hw"]
        assert log.high_watermark == hw
        assert log.epoch_entries() == facts["epochs"]
        assert log.recovery.deleted_segments == [] and log.recovery.truncated_bytes == 0
    assert_nothing_deleted(before, path)
    with Log.open(path, segment_bytes=2000) as again:  # the rewritten checkpoints agree
        assert again.recovery.ignored_checkpoints == []
        assert read_all(again) == facts["records"]


def test_a_log_start_checkpoint_below_the_first_segment_is_reported(tmp_path):
    """Records from the checkpointed log start up to the first segment are missing: the
    log says so and starts at its first segment."""
    path, facts = _build(tmp_path)
    with Log.open(path) as log:
        log.advance_log_start_offset(facts["bases"][2])
        held = log.segment_base_offsets
    write_offset_checkpoint(path, "log-start-offset-checkpoint", facts["bases"][1])
    before = listing(path)
    with Log.open(path) as log:
        (report,) = log.recovery.ignored_checkpoints
        assert "log-start-offset-checkpoint" in report and str(facts["bases"][1]) in report
        assert log.log_start_offset == held[0] and log.segment_base_offsets == held
        assert read_all(log) == [r for r in facts["records"] if r[0] >= held[0]]
    assert_nothing_deleted(before, path)


# ------------------------------------------------------------------ leader epochs


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
@pytest.mark.parametrize("damage", ["past the end", "inside the log", "negative"])
def test_leader_epoch_entries_the_segments_contradict_are_reported_and_ignored(
        tmp_path, damage, shutdown):
    path, facts = _build(tmp_path, shutdown)
    entries = list(facts["epochs"])
    if damage == "past the end":
        entries.append((99, 999_999_999))
        wrong = "(99, 999999999)"
    elif damage == "negative":  # a file that does not parse: all of it is ignored
        entries.append((99, -5))
        wrong = "-5"
    else:
        # an epoch far above the others, said to start in the second segment: a scan of
        # the later segments would take their epochs for going backwards
        offset = facts["bases"][1]
        entries = [e for e in entries if e[1] < offset] + [(50, offset)]
        wrong = f"(50, {offset})"
    (path / "leader-epoch-checkpoint").write_text(
        f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries))
    before = listing(path)
    with Log.open(path, segment_bytes=2000) as log:
        reports = [r for r in log.recovery.ignored_checkpoints if "leader-epoch" in r]
        assert len(reports) == 1 and wrong in reports[0], log.recovery.ignored_checkpoints
        assert read_all(log) == facts["records"]
        assert log.log_end_offset == facts["leo"] and log.high_watermark == facts["hw"]
        assert log.epoch_entries() == facts["epochs"]
        assert log.recovery.truncated_bytes == 0 and log.recovery.deleted_segments == []
    assert_nothing_deleted(before, path)


# ------------------------------------------------------------------ gaps


def _gap_after_damage(tmp_path, shutdown, damage):
    path, facts = _build(tmp_path, shutdown)
    bases = facts["bases"]
    victim = len(bases) // 2  # a middle segment
    if damage == "emptied":
        (path / segment_name(bases[victim])).write_bytes(b"")
    else:
        for suffix in (".log", ".index", ".timeindex"):
            os.unlink(path / segment_name(bases[victim], suffix))
    return path, facts, victim


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
@pytest.mark.parametrize("damage", ["emptied", "deleted"])
def test_a_middle_segment_emptied_or_deleted_refuses_the_open(tmp_path, damage, shutdown):
    path, facts, victim = _gap_after_damage(tmp_path, shutdown, damage)
    bases = facts["bases"]
    before = listing(path)
    with pytest.raises(LogGapError) as refused:
        Log.open(path, segment_bytes=2000)
    message = str(refused.value)
    assert isinstance(refused.value, StorageError)
    assert f"offsets [{bases[victim]}, {bases[victim + 1]}) are missing" in message
    assert segment_name(bases[victim + 1]) in message and "set_aside_past_gap=True" in message
    assert refused.value.end_offset == bases[victim]
    assert refused.value.files == tuple(segment_name(b) for b in bases[victim + 1:])
    assert listing(path) == before  # refused: not a byte changed, the marker kept too


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
@pytest.mark.parametrize("damage", ["emptied", "deleted"])
def test_set_aside_past_gap_opens_up_to_the_gap_and_keeps_the_rest(tmp_path, damage,
                                                                     shutdown):
    path, facts, victim = _gap_after_damage(tmp_path, shutdown, damage)
    bases, records = facts["bases"], facts["records"]
    gap_start, gap_end = bases[victim], bases[victim + 1]
    before = listing(path)
    with Log.open(path, segment_bytes=2000, set_aside_past_gap=True) as log:
        assert f"offsets [{gap_start}, {gap_end}) are missing" in log.recovery.gap
        assert log.log_end_offset == gap_start and log.log_start_offset == 0
        assert log.high_watermark <= gap_start
        assert read_all(log) == [r for r in records if r[0] < gap_start]
        assert len(log.recovery.set_aside) == len(bases) - victim - 1
        assert log.recovery.deleted_segments == []
        assert_nothing_deleted(before, path)
        log.append(values(3, tag="new"))  # writable, and appends land in the log
        assert log.log_end_offset == gap_start + 3
    past = b"".join((path / f"{segment_name(b)}.stray").read_bytes() for b in bases[victim + 1:])
    assert records_in(past) == [r for r in records if r[0] >= gap_end]
    with Log.open(path, segment_bytes=2000) as again:  # the set-aside files stay out
        assert again.log_end_offset == gap_start + 3 and again.recovery.gap is None


def test_a_gap_below_the_log_start_offset_is_no_gap(tmp_path):
    """A retention or log start move that stopped halfway can leave segments below the log
    start with a hole among them; they go as they would have gone."""
    path, facts = _build(tmp_path)
    bases = facts["bases"]
    write_offset_checkpoint(path, "log-start-offset-checkpoint", bases[3])
    os.unlink(path / segment_name(bases[1]))
    with Log.open(path) as log:
        assert log.log_start_offset == bases[3] and log.segment_base_offsets == bases[3:]
        assert log.recovery.deleted_segments == [bases[0], bases[2]]
        assert read_all(log) == [r for r in facts["records"] if r[0] >= bases[3]]
        assert log.recovery.ignored_checkpoints == []


def test_a_log_start_inside_a_gap_is_ignored_and_the_gap_refuses_the_open(tmp_path):
    path, facts = _build(tmp_path)
    bases = facts["bases"]
    os.unlink(path / segment_name(bases[4]))
    write_offset_checkpoint(path, "log-start-offset-checkpoint", bases[4] + 1)
    before = listing(path)
    with pytest.raises(LogGapError, match=f"offsets \\[{bases[4]}, {bases[5]}\\) are missing"):
        Log.open(path)
    assert listing(path) == before


# ------------------------------------------------------------------ stray files


def _batch_starts(data):
    starts, position = [], 0
    while position < len(data):
        starts.append(position)
        position += 12 + int.from_bytes(data[position + 8:position + 12], "big")
    return starts


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
@pytest.mark.parametrize("stray", ["copy inside", "copy past the end", "copy before the start",
                                   "empty inside"])
def test_a_stray_segment_file_is_set_aside_and_nothing_is_lost(tmp_path, stray, shutdown):
    path, facts = _build(tmp_path, shutdown)
    bases = facts["bases"]
    source = (path / segment_name(bases[4])).read_bytes()
    name, content = {
        "copy inside": (segment_name(bases[4] + 3), source),
        "copy past the end": (segment_name(facts["leo"] + 100), source),
        "copy before the start": (segment_name(0)[:-5] + "0.log", source),
        "empty inside": (segment_name(bases[6] + 1), b""),
    }[stray]
    if stray == "copy before the start":  # the log starts above 0: a name below it
        with Log.open(path) as log:
            log.update_high_watermark(bases[2])
            log.advance_log_start_offset(bases[2])
        facts["records"] = [r for r in facts["records"] if r[0] >= bases[2]]
        bases = facts["bases"] = bases[2:]
        name = segment_name(bases[0] - 5)
    (path / name).write_bytes(content)
    before = listing(path)
    with Log.open(path, segment_bytes=2000) as log:
        (report,) = log.recovery.set_aside
        assert report.startswith(f"{name} -> {name}.stray")
        assert read_all(log) == facts["records"]
        assert log.segment_base_offsets == bases and log.log_end_offset == facts["leo"]
        assert log.recovery.deleted_segments == [] and log.recovery.truncated_bytes == 0
        assert log.recovery.gap is None and log.high_watermark <= facts["leo"]
    assert_nothing_deleted(before, path)
    assert (path / f"{name}.stray").read_bytes() == content
    assert not (path / name).exists()


def test_two_segments_claiming_the_same_offsets_refuse_the_open(tmp_path):
    """Both files start where their names say, so neither is the stray one."""
    path, facts = _build(tmp_path)
    bases = facts["bases"]
    source = (path / segment_name(bases[4])).read_bytes()
    start = _batch_starts(source)[1]
    first = int.from_bytes(source[start:start + 8], "big")
    (path / segment_name(first)).write_bytes(source[start:])
    before = listing(path)
    with pytest.raises(LogGapError, match="claim the same offsets") as refused:
        Log.open(path)
    assert segment_name(bases[4]) in str(refused.value)
    assert listing(path) == before
    with Log.open(path, set_aside_past_gap=True) as log:
        assert log.log_end_offset == bases[5]
        assert read_all(log) == [r for r in facts["records"] if r[0] < bases[5]]
    assert_nothing_deleted(before, path)


def test_a_stray_file_whose_set_aside_name_is_taken_gets_another_one(tmp_path):
    path, facts = _build(tmp_path)
    stray = segment_name(facts["bases"][3] + 1)
    (path / f"{stray}.stray").write_bytes(b"set aside by an earlier open")
    (path / stray).write_bytes(b"")
    with Log.open(path) as log:
        assert log.recovery.set_aside[0].startswith(f"{stray} -> {stray}.1.stray")
        assert read_all(log) == facts["records"]
    assert (path / f"{stray}.stray").read_bytes() == b"set aside by an earlier open"
    assert (path / f"{stray}.1.stray").read_bytes() == b""


# ------------------------------------------------------------------ zero tails


def _prefilled_and_crashed(tmp_path):
    path = tmp_path / TOPIC
    log = Log.open(path, prefill_bytes=4096, segment_bytes=3000, fsync="never")
    for n in range(40):
        log.append(values(4, tag=f"p{n}-", size=60))
    records, data_bytes = read_all(log), log._segments[-1].size
    assert len(log.segment_base_offsets) > 3
    log._release()  # a crash: the active segment keeps its zeros
    active = path / segment_name(log.segment_base_offsets[-1])
    assert len(active.read_bytes()) > data_bytes and not any(active.read_bytes()[data_bytes:])
    return path, records, active, data_bytes


def test_a_prefilled_zero_tail_is_not_reported_as_truncated(tmp_path):
    """Opened without the setting that wrote them (a tool, another configuration), the
    zeros are still recognized as space written ahead of the data."""
    path, records, active, data_bytes = _prefilled_and_crashed(tmp_path)
    zeros = len(active.read_bytes()) - data_bytes
    before = listing(path)
    with Log.open(path) as log:
        assert log.recovery.truncated_bytes == 0 and log.recovery.first_invalid is None
        assert log.recovery.zero_tail_bytes == zeros
        assert read_all(log) == records
    after = listing(path)
    assert after[active.name] == before[active.name][:data_bytes]  # only zeros trimmed
    assert_nothing_deleted({k: v for k, v in before.items() if k != active.name}, path)


def test_garbage_after_the_last_batch_of_a_prefilled_log_is_still_truncated(tmp_path):
    path, records, active, data_bytes = _prefilled_and_crashed(tmp_path)
    data = bytearray(active.read_bytes())
    data[data_bytes + 100] = 0x5A  # one non-zero byte among the zeros
    active.write_bytes(bytes(data))
    with Log.open(path) as log:
        assert log.recovery.truncated_bytes == len(data) - data_bytes
        assert log.recovery.zero_tail_bytes == 0 and log.recovery.first_invalid
        assert read_all(log) == records


# ------------------------------------------------------------------ the lock


def test_the_lock_error_names_the_directory_and_what_to_do(tmp_path):
    path = tmp_path / TOPIC
    with Log.open(path), pytest.raises(LogLockedError) as locked:
        Log.open(path)
    message = str(locked.value)
    assert isinstance(locked.value, StorageError) and locked.value.errno is not None
    assert "Errno" not in message and message.startswith(f"the log in {path} is already open")
    assert "close that Log" in message


def test_a_copied_log_directory_opens_whole(tmp_path):
    """The checks above do not get in the way of a healthy log moved to another directory
    (its checkpoints name the old one)."""
    path, facts = _build(tmp_path)
    copy = tmp_path / "other-3"
    shutil.copytree(path, copy)
    with Log.open(copy) as log:
        assert read_all(log) == facts["records"] and log.high_watermark == facts["hw"]
        assert log.recovery.ignored_checkpoints == [] and log.recovery.set_aside == []
