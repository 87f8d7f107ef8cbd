"""The log cleaner (`kraftcore.log.cleaner`): a model of the records a clean keeps, checked on
random logs of keyed records, tombstones and records without a key over many segments;
the batches it keeps empty; its settings; a corrupt batch in the dirty range; a clean
racing a close, a truncation and a follower.

The model of one clean: below its end offset E, a record stays when it has a key and is
the last record of that key below E, unless it is a tombstone whose delete horizon (set by
the first clean that kept it: now + delete.retention.ms) has passed; at and after E every
record stays. Records keep their offsets, the active segment keeps its bytes, and the log
reopens to the same records."""

import os
import random
import types

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftcore import codec
from kraftcore.errors import (CleanAbortedError, ConfigError, CorruptRecordError,
                              InvalidAppendError)
from kraftcore.log import Log, cleaner
from kraftcore.log.cleaner import CleanerConfig
from tests.conftest import IMPLEMENTATIONS

pytestmark = pytest.mark.smoke

RETENTION_MS = 60_000
SETTINGS = dict(segment_bytes=700, index_interval_bytes=100, fsync="never", compact=True)


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def kernels(request, monkeypatch):
    """The cleaner's decode, encode and scan calls on one implementation of the kernels."""
    impl = IMPLEMENTATIONS[request.param]
    monkeypatch.setattr(cleaner, "codec", types.SimpleNamespace(
        encode_batch=impl.records.encode_batch, decode_batches=impl.records.decode_batches,
        scan_batches=impl.segment.scan_batches, crc32c=impl.crc32c.crc32c))
    return impl


def commit(log):
    """Roll (every record leaves the active segment) and commit everything."""
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def filled(path, count, key=lambda i: b"k"):
    """A compacted log of `count` one-record batches (value b"v<i>", key `key(i)`), none in
    the active segment, all committed."""
    log = Log.open(path, **SETTINGS)
    for i in range(count):
        log.append([b"v%d" % i], keys=[key(i)])
    commit(log)
    return log


def records_of(log, start=None):
    """[(offset, key, value, timestamp)] of every record from `start` (the log start) on."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        read = log.read(offset, 1 << 20)
        assert len(read), f"nothing read at {offset} below the log end {log.log_end_offset}"
        for batch in read.batches():
            out += [(r.offset, r.key, r.value, r.timestamp) for r in batch.records]
        offset = read.next_offset
    return out


def batches_of(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, 1 << 20)
        out += read.batches()
        offset = read.next_offset
    return out


def active_bytes(log):
    base = log.segment_base_offsets[-1]
    with open(os.path.join(log.path, f"{base:020d}.log"), "rb") as f:
        return base, f.read()


def append_all(log, batches, timestamp):
    """Append `batches` ([[(key, value)]]; some gzip-compressed); the records appended."""
    out = []
    for i, batch in enumerate(batches):
        base = log.append([v for _, v in batch], keys=[k for k, _ in batch],
                          timestamp=timestamp, compression="gzip" if i % 5 == 3 else None)
        out += [(base + j, k, v, timestamp) for j, (k, v) in enumerate(batch)]
    return out


def expected_after(records, end, removed_tombstones=frozenset()):
    """The model: what one clean ending at `end` keeps of `records`."""
    last = {}
    for offset, key, _, _ in records:
        if offset < end and key is not None:
            last[key] = offset
    return [r for r in records if r[0] >= end or (
        r[1] is not None and last[r[1]] == r[0] and r[0] not in removed_tombstones)]


def check_tiling(log):
    """Every segment ends where the next one starts: a cleaned segment covers the offsets
    of the segments it replaced."""
    batches = batches_of(log)
    bases = log.segment_base_offsets
    for base, following in zip(bases, bases[1:]):
        inside = [b for b in batches if base <= b.base_offset < following]
        assert inside and inside[-1].next_offset == following, (base, following)


_key = st.sampled_from([b"a", b"b", b"c", b"d", b"e", b"f", b"g"]) | st.none()
_value = st.binary(min_size=1, max_size=40) | st.none()
_batch = st.lists(st.tuples(_key, _value), min_size=1, max_size=5)
_batches = st.lists(_batch, min_size=1, max_size=45)


# `kernels` and `tmp_path_factory` are the same for every example: each makes its own log
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=_batches, second=_batches, roll=st.booleans())
def test_a_clean_keeps_the_last_record_of_each_key_with_its_offset(
        kernels, tmp_path_factory, first, second, roll):
    path = tmp_path_factory.mktemp("cleaner")
    log = Log.open(path, **SETTINGS)
    try:
        records = append_all(log, first, 1000)
        if roll:
            log.roll()
        log.update_high_watermark(log.log_end_offset)
        active = active_bytes(log)
        # a clean at 5000: tombstones kept, with a delete horizon of 5000 + RETENTION_MS
        result = cleaner.clean(log, 5000, CleanerConfig(delete_retention_ms=RETENTION_MS),
                               force=True)
        if result is None:  # nothing below the active segment
            assert len(log.segment_base_offsets) == 1 and records_of(log) == records
            return
        end1 = result.end_offset
        assert end1 == log.segment_base_offsets[-1] == log.cleaner_offset
        kept = expected_after(records, end1)
        assert records_of(log) == kept
        assert active_bytes(log) == active
        assert result.records_kept == sum(1 for r in kept if r[0] < end1)
        check_tiling(log)
        for batch in batches_of(log):
            tombstones = [r for r in batch.records if r.value is None and r.offset < end1]
            if tombstones:
                assert batch.has_delete_horizon and batch.base_timestamp == 5000 + RETENTION_MS
        # what a consumer reading it all ends up with: the last value of every key (records
        # without a key, which a compacted topic refuses, are not part of it)
        model, folded = {}, {}
        for offset, key, value, _ in records:
            if key is not None:
                model[key] = (offset, value)
        for offset, key, value, _ in kept:
            if key is not None:
                folded[key] = (offset, value)
        assert folded == model
        log.close()
        log = Log.open(path, **SETTINGS)
        assert records_of(log) == kept and log.cleaner_offset == end1

        # more records, then a clean past the delete horizon: the tombstones the first
        # clean kept below its end go (unless a later record of their key took their place)
        more = append_all(log, second, 2000)
        commit(log)
        result = cleaner.clean(log, 5000 + RETENTION_MS, CleanerConfig(
            delete_retention_ms=RETENTION_MS), force=True)
        end2 = result.end_offset
        dead = frozenset(r[0] for r in kept if r[0] < end1 and r[2] is None)
        assert records_of(log) == expected_after(kept + more, end2, dead)
        check_tiling(log)
    finally:
        log.close()


def test_keys_superseded_and_tombstones_expire_across_cleans(tmp_path):
    log = Log.open(tmp_path, **SETTINGS)
    with log:
        for i in range(40):
            log.append([b"v%d" % i], keys=[b"k%d" % (i % 4)], timestamp=i)
        log.append([None], keys=[b"k1"], timestamp=100)  # a tombstone for k1
        commit(log)
        before = log.size_bytes
        result = cleaner.clean(log, 10_000)  # dirty ratio 1 > 0.5: worth it
        assert result is not None and result.bytes_after < result.bytes_before
        assert log.size_bytes < before
        assert [(o, k, v) for o, k, v, _ in records_of(log)] == [
            (36, b"k0", b"v36"), (38, b"k2", b"v38"), (39, b"k3", b"v39"), (40, b"k1", None)]
        # nothing new to clean: not worth it, and the tombstone stays before its horizon
        assert cleaner.clean(log, 10_000) is None
        log.append([b"x"], keys=[b"k9"], timestamp=200)
        commit(log)
        # (a little dirt, but the next clean that runs removes the expired tombstone)
        result = cleaner.clean(log, 10_000 + cleaner.DELETE_RETENTION_MS_DEFAULT, force=True)
        assert result.tombstones_removed == 1
        assert [k for _, k, _, _ in records_of(log)] == [b"k0", b"k2", b"k3", b"k9"]


def test_an_idempotent_producers_last_batch_stays_empty(tmp_path):
    """Kafka's RETAIN_EMPTY: the last batch of an active producer keeps its header (its
    sequence numbers) when all its records go; other emptied batches go."""
    log = Log.open(tmp_path, **SETTINGS)
    with log:
        produced = []
        for i in range(6):
            data = codec.encode_batch([b"p%d" % i, b"q%d" % i], keys=[b"k", b"j"],
                                      producer_id=77, producer_epoch=0, base_sequence=2 * i)
            produced.append(log.append(data))
        log.append([b"late"], keys=[b"k"])
        log.append([b"later"], keys=[b"j"])
        log.append([b"filler"], keys=[b"f"])
        commit(log)
        producer_last = produced[-1] + 1
        cleaner.clean(log, 0, force=True, producer_last_offsets={producer_last})
        batches = batches_of(log)
        empties = [b for b in batches if not b.records]
        assert [(b.base_offset, b.last_offset, b.producer_id, b.base_sequence)
                for b in empties] == [(produced[-1], producer_last, 77, 10)]
        assert empties[0].base_timestamp == -1 and empties[0].size_bytes == 61
        assert [r.value for b in batches for r in b.records] == [b"late", b"later", b"filler"]


def test_the_last_batch_of_a_group_stays_so_segments_keep_their_offsets(tmp_path):
    log = Log.open(tmp_path, **SETTINGS)
    with log:
        for i in range(30):
            log.append([b"x" * 30], keys=[b"same"])
        commit(log)
        bases = log.segment_base_offsets
        cleaner.clean(log, 0, force=True)
        check_tiling(log)
        assert [(o, k, v) for o, k, v, _ in records_of(log)] == [(29, b"same", b"x" * 30)]
        # every emptied batch but the last of each cleaned segment is gone
        empties = [b for b in batches_of(log) if not b.records]
        assert len(empties) == len(log.segment_base_offsets) - 2  # the last holds the record
        assert log.segment_base_offsets[0] == bases[0]


def test_the_active_segment_and_records_past_the_high_watermark_stay(tmp_path):
    log = Log.open(tmp_path, **SETTINGS)
    with log:
        for i in range(20):
            log.append([b"v%d" % i], keys=[b"k"])
        log.roll()
        for i in range(20, 30):
            log.append([b"v%d" % i], keys=[b"k"])
        log.roll()
        log.update_high_watermark(20)  # the second run of segments is not committed
        active = active_bytes(log)
        result = cleaner.clean(log, 0, force=True)
        assert result.end_offset == 20
        assert [o for o, _, _, _ in records_of(log)] == [19] + list(range(20, 30))
        assert active_bytes(log) == active


def test_min_compaction_lag_leaves_recent_segments_dirty(tmp_path):
    log = Log.open(tmp_path, **SETTINGS)
    with log:
        for i in range(10):
            log.append([b"old%d" % i], keys=[b"k"], timestamp=1000)
        log.roll()
        for i in range(10):
            log.append([b"new%d" % i], keys=[b"k"], timestamp=9000)
        commit(log)
        config = CleanerConfig(min_compaction_lag_ms=5000)
        state = cleaner.cleanable(log.clean_state(), 10_000, config)
        assert state.first_uncleanable_offset == 10
        cleaner.clean(log, 10_000, config, force=True)
        assert [v for _, _, v, _ in records_of(log)] == [b"old9"] + [
            b"new%d" % i for i in range(10)]


def test_a_log_below_the_dirty_ratio_is_left_alone(tmp_path):
    with filled(tmp_path, 30, lambda i: b"k%d" % i) as log:
        cleaner.clean(log, 0)  # everything dirty: cleaned
        log.append([b"one more"], keys=[b"z"])
        commit(log)
        state = cleaner.cleanable(log.clean_state(), 0, CleanerConfig())
        assert 0 < state.dirty_ratio < 0.5 and not state.worth_cleaning(CleanerConfig())
        assert cleaner.clean(log, 0) is None
        assert cleaner.clean(log, 0, CleanerConfig(min_cleanable_dirty_ratio=0.01)) is not None


def test_a_small_offset_map_cleans_in_several_rounds(tmp_path):
    log = Log.open(tmp_path, **SETTINGS)
    with log:
        rng = random.Random(5)
        records = []
        for i in range(120):
            key = b"k%d" % rng.randrange(30)
            records.append((log.append([b"v%d" % i], keys=[key]), key))
        commit(log)
        config = CleanerConfig(offset_map_bytes=6 * (120 + 3))  # about six keys a round
        ends = []
        while True:
            result = cleaner.clean(log, 0, config, force=True)
            if result is None:
                break
            ends.append(result.end_offset)
        assert len(ends) > 3 and ends == sorted(ends) and ends[-1] == log.log_end_offset
        last = {key: offset for offset, key in records}
        assert [o for o, _, _, _ in records_of(log)] == sorted(last.values())


def test_a_corrupt_batch_in_the_dirty_range_stops_the_clean_and_changes_nothing(tmp_path):
    with filled(tmp_path, 30) as log:
        victim = os.path.join(log.path, f"{log.segment_base_offsets[1]:020d}.log")
        with open(victim, "r+b") as f:
            f.seek(70)  # inside the first batch's records: the CRC no longer matches
            byte = f.read(1)
            f.seek(70)
            f.write(bytes([byte[0] ^ 0x40]))
        files = {name: open(os.path.join(log.path, name), "rb").read()
                 for name in os.listdir(log.path) if name != ".lock"}
        with pytest.raises(CorruptRecordError) as error:
            cleaner.clean(log, 0, force=True)
        message = str(error.value)
        assert os.path.basename(victim) in message and "CRC" in message
        assert {name: open(os.path.join(log.path, name), "rb").read()
                for name in os.listdir(log.path) if name != ".lock"} == files
        assert log.cleaner_offset is None and not log.cleaning


def test_a_close_aborts_a_clean_in_progress_and_waits_for_it(tmp_path):
    log = filled(tmp_path, 30)
    steps = []

    def on_group(step):
        steps.append(step)
        if len(steps) == 2:  # after the first swap: closing must wait for the clean's end
            log.abort_clean("a test stops it")

    with pytest.raises(CleanAbortedError, match="a test stops it"):
        cleaner.clean(log, 0, force=True, on_group=on_group)
    assert not any(name.endswith((".cleaned", ".swap", ".deleted"))
                   for name in os.listdir(log.path))
    log.close()
    log = Log.open(tmp_path, **SETTINGS)
    with log:
        kept = [v for _, _, v, _ in records_of(log)]
        assert kept[-1] == b"v29" and len(kept) < 30  # the first group was swapped in


def test_a_truncation_aborts_the_clean_of_the_segments_it_changes(tmp_path):
    with filled(tmp_path, 30, lambda i: b"k%d" % (i % 3)) as log:
        session = log.begin_clean()
        log.end_clean(session)
        # a session that a truncation aborted refuses to swap anything
        session = log.begin_clean()
        log.truncate_to(log.log_end_offset)  # nothing to cut: no abort
        assert session.aborted is None
        log.end_clean(session)
        session = log.begin_clean()
        log.update_high_watermark(25)
        log.truncate_to(27)
        assert session.aborted == "the log was truncated"
        with pytest.raises(CleanAbortedError):
            session.check()
        log.end_clean(session)
        # the truncation deleted the active segment: the one before it is active now
        assert cleaner.clean(log, 0, force=True).end_offset == log.segment_base_offsets[-1]


def test_a_compacted_follower_takes_batches_past_gaps_and_only_forward(tmp_path):
    leader = Log.open(tmp_path / "leader", **SETTINGS)
    follower = Log.open(tmp_path / "follower", **SETTINGS)
    strict = Log.open(tmp_path / "strict", **dict(SETTINGS, compact=False))
    with leader, follower, strict:
        for i in range(40):
            leader.append([b"v%d" % i], keys=[b"k%d" % (i % 3)])
        leader.roll()
        leader.update_high_watermark(leader.log_end_offset)
        cleaner.clean(leader, 0, force=True)
        offset = 0
        while offset < leader.log_end_offset:
            read = leader.read(offset, 300)
            follower.append_as_follower(read.records)
            with pytest.raises(InvalidAppendError):
                strict.append_as_follower(read.records) if read.first_offset else \
                    strict.append_as_follower(codec.encode_batch([b"x"], base_offset=5))
            offset = read.next_offset
        assert records_of(follower) == records_of(leader)
        with pytest.raises(InvalidAppendError, match="must not go back"):
            follower.append_as_follower(codec.encode_batch([b"x"], base_offset=3))
        follower.close()
        reopened = Log.open(tmp_path / "follower", **SETTINGS)
        with reopened:
            assert records_of(reopened) == records_of(leader)
            assert reopened.recovery.set_aside == [] and reopened.recovery.gap is None


def test_a_cleaned_log_opens_with_its_gaps_when_its_topic_is_no_longer_compacted(tmp_path):
    log = filled(tmp_path, 30, lambda i: b"k%d" % (i % 2))
    cleaner.clean(log, 0, force=True)
    kept = records_of(log)
    log.close()
    os.unlink(os.path.join(tmp_path, ".kafka_cleanshutdown"))  # recover: scan everything
    os.unlink(os.path.join(tmp_path, "recovery-point-offset-checkpoint"))
    with Log.open(tmp_path, **dict(SETTINGS, compact=False)) as reopened:
        assert records_of(reopened) == kept
        assert reopened.recovery.gap is None and reopened.recovery.truncated_bytes == 0


def test_bad_settings_are_refused():
    for kwargs in (dict(min_cleanable_dirty_ratio=1.5), dict(delete_retention_ms=-1),
                   dict(min_compaction_lag_ms=True), dict(offset_map_bytes=0)):
        with pytest.raises(ConfigError):
            CleanerConfig(**kwargs)


def test_a_sendfile_region_taken_before_a_swap_still_holds_its_batches(tmp_path):
    """A fetch answered with a `FileRegion` of a segment (sendfile) goes out whole after the
    clean swapped that segment out and removed its file; reads after the swap see the new
    segment."""
    with filled(tmp_path, 30) as log:
        before = records_of(log)
        region = log.read(0, 1 << 20, region_bytes_min=0).records
        try:
            cleaner.clean(log, 0, force=True)
            assert not os.path.exists(os.path.join(log.path, f"{0:020d}.log.deleted"))
            old = [(r.offset, r.value) for b in codec.decode_batches(region.read())
                   for r in b.records]
            assert old == [(o, v) for o, _, v, _ in before][:len(old)] and old
        finally:
            region.close()
        assert [o for o, _, _, _ in records_of(log)] == [29]


def test_nothing_at_or_past_the_high_watermark_is_cleaned(tmp_path):
    """A high watermark inside a batch: the clean ends before that batch, which stays with
    everything after it."""
    with Log.open(tmp_path, **SETTINGS) as log:
        for i in range(12):
            log.append([b"a%d" % i, b"b%d" % i], keys=[b"a", b"b"])
        commit(log)
        log.update_high_watermark(15)  # inside the batch of offsets 14 and 15
        result = cleaner.clean(log, 0, force=True)
        assert result.end_offset == 14
        assert [o for o, _, _, _ in records_of(log)] == [12, 13] + list(range(14, 24))
