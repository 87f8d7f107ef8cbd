"""`kraftcore.log.Log`: appends as leader and follower, reads, rolls, indexes, the high
watermark rules, truncation, log start and retention, checkpoints, and bad input refused
with the log left unchanged."""

import os
import threading

import pytest
from hypothesis import given, settings, strategies as st

from kraftcore import codec
from kraftcore.errors import (ConfigError, CorruptRecordError, InvalidAppendError,
                              InvalidOffsetError, LogClosedError, OffsetOutOfRangeError,
                              StorageError)
from kraftcore.log import Log, LeaderEpochCache
from kraftcore.types import FileRegion

pytestmark = pytest.mark.smoke

TS = 1_700_000_000_000


class FakeClock:
    def __init__(self, now=TS):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def open_log(tmp_path, clock):
    opened = []

    def open_(name="topic-0", **settings):
        log = Log.open(tmp_path / name, clock=clock, **settings)
        opened.append(log)
        return log

    yield open_
    for log in opened:
        log.close()


def values(n, tag="v", size=100):
    return [(f"{tag}{i}:".encode() * size)[:size] for i in range(n)]


def read_all(log, start=None, committed=False):
    offset = log.log_start_offset if start is None else start
    out = []
    end = log.high_watermark if committed else log.log_end_offset
    while offset < end:
        result = log.read(offset, 64 * 1024, committed=committed)
        if not len(result):
            break
        for batch in result.batches():
            out.extend((r.offset, r.value) for r in batch.records if r.offset >= offset)
        offset = result.next_offset
    return out


def test_append_values_assigns_offsets_and_reads_back(open_log):
    log = open_log()
    assert log.append(values(10)) == 0
    assert log.append(values(5, "w")) == 10
    assert log.log_end_offset == 15
    assert read_all(log) == list(enumerate(values(10) + values(5, "w")))
    batches = log.read(0).batches()
    assert [b.partition_leader_epoch for b in batches] == [0, 0]
    assert batches[0].base_timestamp == TS


def test_append_encoded_batches_stamps_offsets_and_epoch(open_log):
    log = open_log()
    encoded = codec.encode_batch(values(3), base_offset=999, leader_epoch=-1) + \
        codec.encode_batch(values(2), base_offset=5)
    log.append(values(1))
    assert log.append(encoded, leader_epoch=4) == 1
    batches = log.read(1).batches()  # CRCs verified: stamping did not break them
    assert [(b.base_offset, b.partition_leader_epoch) for b in batches] == [(1, 4), (4, 4)]
    assert log.epoch_entries() == [(0, 0), (4, 1)]
    assert log.latest_epoch == 4


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_one_encoded_batch_is_stamped_without_touching_the_callers_bytes(open_log, kind):
    """A single batch given as bytes is written as a patched header plus the caller's
    bytes; other buffers are copied first. Either way the caller's object is unchanged
    and the log holds the batch with its offset and epoch."""
    log = open_log()
    log.append(values(3))
    original = codec.encode_batch(values(4), base_offset=77, leader_epoch=-1)
    given = kind(bytearray(original)) if kind is memoryview else kind(original)
    assert log.append(given, leader_epoch=6) == 3
    assert bytes(given) == original
    (batch,) = log.read(3).batches()  # CRC verified
    assert (batch.base_offset, batch.partition_leader_epoch) == (3, 6)
    assert [r.value for r in batch.records] == values(4)
    with open(os.path.join(log.path, "00000000000000000000.log"), "rb") as f:
        tail = f.read()[-len(original):]
    assert tail[16:] == original[16:] and tail[8:12] == original[8:12]
    assert int.from_bytes(tail[:8], "big") == 3 and int.from_bytes(tail[12:16], "big") == 6


def test_only_bytes_of_exactly_one_batch_take_the_single_batch_path():
    """Which bytes `append` writes as one stamped batch: their batch length (read alone,
    whatever the base offset) covers them exactly; two batches, a cut batch or fewer bytes
    than a header do not."""
    from kraftcore.log.log import _one_batch

    one = codec.encode_batch(values(3), base_offset=2**62)
    assert _one_batch(one) and _one_batch(codec.encode_batch(values(1)))
    assert not _one_batch(one + codec.encode_batch(values(1)))
    assert not _one_batch(one[:-1]) and not _one_batch(one[:60]) and not _one_batch(b"")


def test_a_refused_single_batch_writes_nothing(open_log):
    log = open_log()
    log.append(values(2))
    size = log.size_bytes
    damaged = bytearray(codec.encode_batch(values(3)))
    damaged[-1] ^= 1  # breaks the CRC
    with pytest.raises(CorruptRecordError):
        log.append(bytes(damaged))
    with pytest.raises(InvalidAppendError):
        log.append(codec.encode_batch(values(3)), leader_epoch=-5)
    assert (log.size_bytes, log.log_end_offset) == (size, 2)


def test_follower_appends_must_be_contiguous(open_log):
    log = open_log()
    log.append_as_follower(codec.encode_batch(values(3), base_offset=0, leader_epoch=1))
    with pytest.raises(InvalidAppendError, match="contiguous"):
        log.append_as_follower(codec.encode_batch(values(1), base_offset=4, leader_epoch=1))
    with pytest.raises(InvalidAppendError, match="contiguous"):
        log.append_as_follower(codec.encode_batch(values(1), base_offset=2, leader_epoch=1))
    with pytest.raises(InvalidAppendError, match="below the log's latest epoch"):
        log.append_as_follower(codec.encode_batch(values(1), base_offset=3, leader_epoch=0))
    assert log.log_end_offset == 3 and len(read_all(log)) == 3
    assert log.append_as_follower(codec.encode_batch(values(1), base_offset=3, leader_epoch=2)) == 3
    assert log.epoch_entries() == [(1, 0), (2, 3)]


@pytest.mark.parametrize("damage", ["crc", "truncated", "garbage", "empty"])
def test_invalid_batches_are_refused_and_the_log_is_unchanged(open_log, damage):
    log = open_log()
    log.append(values(4))
    before = sorted(os.listdir(log.path)), log.size_bytes, read_all(log)
    good = codec.encode_batch(values(2), base_offset=4)
    bad = {"crc": good[:-1] + bytes([good[-1] ^ 1]), "truncated": good[:-3],
           "garbage": b"\x00" * 70, "empty": b""}[damage]
    error = InvalidAppendError if damage == "empty" else CorruptRecordError
    payload = good + bad if bad else bad  # a good batch first: all or nothing is written
    with pytest.raises(error):
        log.append(payload)
    with pytest.raises(error):
        log.append_as_follower(payload)
    assert log.log_end_offset == 4
    assert (sorted(os.listdir(log.path)), log.size_bytes, read_all(log)) == before
    assert log.append(good) == 4


def test_bad_arguments_are_refused(open_log):
    log = open_log(batch_bytes_max=1000)
    with pytest.raises(InvalidAppendError, match="above the limit"):
        log.append([b"x" * 2000])
    with pytest.raises(InvalidAppendError, match="epoch"):
        log.append(values(1), leader_epoch=-3)
    log.append(values(1), leader_epoch=5)
    with pytest.raises(InvalidAppendError, match="below the log's latest epoch 5"):
        log.append(values(1), leader_epoch=4)
    with pytest.raises(TypeError, match="list of values"):
        log.append(12)
    with pytest.raises(TypeError):
        log.append([1, 2])
    assert log.log_end_offset == 1


def test_config_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="unknown log setting"):
        Log.open(tmp_path / "a", segmentbytes=10)
    with pytest.raises(ConfigError, match="fsync"):
        Log.open(tmp_path / "a", fsync="sometimes")
    with pytest.raises(ConfigError, match="segment_bytes"):
        Log.open(tmp_path / "a", segment_bytes=2**31)
    with pytest.raises(ConfigError, match="must be int"):
        Log.open(tmp_path / "a", segment_bytes="1024")
    with pytest.raises(ConfigError, match="prefill_bytes must be >= 0"):
        Log.open(tmp_path / "a", prefill_bytes=-1)


def test_a_directory_is_opened_once(open_log, tmp_path):
    open_log("x-0")
    with pytest.raises(StorageError, match="already open"):
        Log.open(tmp_path / "x-0")


def test_segments_roll_by_size_and_time_with_kafka_names(open_log, clock):
    log = open_log(segment_bytes=30_000, segment_ms=60_000)
    for _ in range(6):
        log.append(values(100))  # ~11 KB per batch: two batches per segment
    assert log.segment_base_offsets == [0, 200, 400]
    clock.now += 60_001
    log.append(values(1))
    assert log.segment_base_offsets == [0, 200, 400, 600]
    names = sorted(n for n in os.listdir(log.path) if not n.startswith("."))
    assert "00000000000000000200.log" in names and "00000000000000000600.timeindex" in names
    assert read_all(log) == list(enumerate(values(100) * 6 + values(1)))


def _sparse_batch(last_offset_delta, value=b"x"):
    """One record whose batch claims `last_offset_delta` + 1 offsets (as a compacted batch
    may), with its CRC made good."""
    batch = bytearray(codec.encode_batch([value], timestamp=TS))
    batch[23:27] = last_offset_delta.to_bytes(4, "big")
    batch[17:21] = codec.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return batch


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "follower"])
def test_offsets_beyond_a_segments_int32_range_roll_a_new_segment(open_log, tmp_path, kind):
    """Offsets are stored relative to the segment's base as int32: an append that would
    pass 2^31 - 1 goes to a new segment, as Kafka's roll does."""
    log = open_log()
    delta = 2**30
    for i in range(3):
        batch = _sparse_batch(delta, value=b"%d" % i)
        if kind == "bytes":
            log.append(bytes(batch))
        elif kind == "bytearray":
            log.append(batch)
        else:
            batch[0:8] = log.log_end_offset.to_bytes(8, "big")
            log.append_as_follower(bytes(batch))
    step = delta + 1
    assert log.segment_base_offsets == [0, step, 2 * step]
    assert log.log_end_offset == 3 * step
    log.close()
    log = open_log()  # the segments read back, their relative offsets within range
    assert log.segment_base_offsets == [0, step, 2 * step]
    assert [(b.base_offset, b.records[0].value) for offset in (0, step, 2 * step)
            for b in log.read(offset, 1 << 20).batches()] == [
        (0, b"0"), (step, b"1"), (2 * step, b"2")]


def test_an_append_larger_than_a_segment_is_refused(open_log):
    log = open_log(segment_bytes=5000)
    with pytest.raises(InvalidAppendError, match="cannot fit a segment"):
        log.append(values(100))


def test_reads_return_whole_batches_within_max_bytes(open_log):
    log = open_log(index_interval_bytes=1000)
    for i in range(20):
        log.append(values(10, tag=f"b{i}-"))
    batch_bytes = len(log.read(0, 1))
    result = log.read(37, 3 * batch_bytes)
    assert (result.first_offset, result.next_offset) == (30, 60)
    assert isinstance(result.records, memoryview) and len(result) == 3 * batch_bytes
    assert len(log.read(37, 1)) == batch_bytes  # the first batch comes whole
    assert len(log.read(200)) == 0
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 200\)"):
        log.read(201)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1)


def test_committed_reads_stop_at_the_high_watermark(open_log):
    log = open_log()
    for _ in range(5):
        log.append(values(10))
    assert len(log.read(0, committed=True)) == 0
    log.update_high_watermark(30)
    result = log.read(0, 10**6, committed=True)
    assert result.next_offset == 30 and result.high_watermark == 30
    assert len(log.read(30, committed=True)) == 0
    assert read_all(log, committed=True) == list(enumerate(values(10) * 3))


def test_the_high_watermark_stays_within_the_log(open_log):
    log = open_log()
    log.append(values(5))
    with pytest.raises(InvalidOffsetError, match="log end offset 5"):
        log.update_high_watermark(6)
    log.update_high_watermark(5)
    assert log.high_watermark == 5


def test_offset_for_timestamp(open_log):
    log = open_log(segment_bytes=4000, index_interval_bytes=100)
    for i in range(30):
        log.append(values(3, size=200), timestamps=[TS + 10 * i, TS + 10 * i + 1, TS + 10 * i + 2])
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(TS + 101) == 31
    assert log.offset_for_timestamp(TS + 103) == 33
    assert log.offset_for_timestamp(TS + 292) == 89
    assert log.offset_for_timestamp(TS + 293) is None


def test_truncation_respects_the_high_watermark_and_the_log_start(open_log):
    log = open_log(segment_bytes=3000)
    for epoch in range(6):
        log.append(values(10, size=100), leader_epoch=epoch)
    log.update_high_watermark(20)
    with pytest.raises(InvalidOffsetError, match="high watermark"):
        log.truncate_to(19)
    with pytest.raises(InvalidOffsetError, match="starts at 20"):
        log.update_high_watermark(25) or log.truncate_to(25)
    log.update_high_watermark(20)
    assert log.truncate_to(60) is False
    assert log.truncate_to(35)  # inside the batch [30, 39]: the whole batch goes
    assert log.log_end_offset == 30
    assert log.epoch_entries() == [(e, 10 * e) for e in range(3)]
    assert log.end_offset_for_epoch(1) == (1, 20)
    assert log.end_offset_for_epoch(2) == (2, 30)
    assert read_all(log) == list(enumerate(values(10) * 3))
    assert log.append(values(1), leader_epoch=7) == 30
    log.advance_log_start_offset(10)
    with pytest.raises(InvalidOffsetError, match="log start offset"):
        log.truncate_to(5)


def test_advancing_the_log_start_deletes_whole_segments(open_log):
    log = open_log(segment_bytes=3000)
    for epoch in range(6):
        log.append(values(10), leader_epoch=epoch)
    with pytest.raises(InvalidOffsetError, match="high watermark"):
        log.advance_log_start_offset(1)
    log.update_high_watermark(60)
    assert log.advance_log_start_offset(25)
    assert log.log_start_offset == 25 and log.segment_base_offsets[0] == 20
    assert log.epoch_entries()[0] == (2, 25)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(24)
    assert log.read(25).first_offset == 20
    assert not log.advance_log_start_offset(10)


def test_retention_by_bytes_and_time(open_log, clock):
    log = open_log(segment_bytes=3000, retention_bytes=5000)
    for _ in range(8):
        log.append(values(10))
    log.roll()
    assert log.segment_base_offsets == [0, 20, 40, 60, 80]  # nothing below the HW yet
    log.update_high_watermark(80)
    assert log.enforce_retention() == 1  # 4 x ~2.2 KB: dropping one leaves >= 5000 bytes
    assert log.segment_base_offsets == [20, 40, 60, 80] and log.log_start_offset == 20
    assert log.read(log.log_start_offset).first_offset == log.log_start_offset

    timed = open_log("timed-0", segment_bytes=3000, retention_ms=1000)
    start = clock.now
    for i in range(6):  # segments [0, 20) [20, 40) [40, 60), newest timestamps start+1, +3, +5
        timed.append(values(10), timestamp=start + i)
    timed.update_high_watermark(60)
    clock.now = start + 1002
    assert timed.enforce_retention() == 1  # only the first segment's newest record is > 1 s old
    assert timed.log_start_offset == 20
    clock.now = start + 2000
    assert timed.enforce_retention() == 1  # the active segment is never deleted
    assert timed.segment_base_offsets == [40] and timed.log_start_offset == 40


def test_truncate_fully_and_start_at(open_log):
    log = open_log()
    log.append(values(5), leader_epoch=3)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (1000, 1000, 1000)
    assert log.epoch_entries() == [] and log.segment_base_offsets == [1000]
    assert log.append(values(2), leader_epoch=4) == 1000


def test_reopen_after_a_clean_close_skips_the_scan(open_log, tmp_path, clock):
    log = open_log(segment_bytes=3000)
    for epoch in range(5):
        log.append(values(10), leader_epoch=epoch)
    log.update_high_watermark(40)
    log.close()
    assert os.path.exists(tmp_path / "topic-0" / ".kafka_cleanshutdown")
    again = open_log()
    assert again.recovery.clean_shutdown and again.recovery.scanned_segments == 0
    assert not os.path.exists(tmp_path / "topic-0" / ".kafka_cleanshutdown")
    assert (again.log_end_offset, again.high_watermark) == (50, 40)
    assert again.epoch_entries() == [(e, 10 * e) for e in range(5)]
    assert read_all(again) == list(enumerate(values(10) * 5))
    assert again.append(values(1)) == 50


def test_a_damaged_index_is_rebuilt(open_log, tmp_path):
    log = open_log(index_interval_bytes=500)
    for _ in range(10):
        log.append(values(10))
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.index"
    good = index.read_bytes()
    index.write_bytes(good[:8] + b"\xff" * 8 + good[16:])
    again = open_log(index_interval_bytes=500)
    assert again.recovery.rebuilt_indexes == [0]
    assert index.read_bytes() == good
    assert read_all(again) == list(enumerate(values(10) * 10))


def test_checkpoint_files_use_kafkas_text_format(open_log, tmp_path):
    log = open_log("__cluster_metadata-0")
    log.append(values(3), leader_epoch=0)
    log.append(values(2), leader_epoch=3)
    log.update_high_watermark(4)
    log.close()
    d = tmp_path / "__cluster_metadata-0"
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 3\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n1\n__cluster_metadata 0 4\n"
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\n__cluster_metadata 0 5\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\n__cluster_metadata 0 0\n"


def test_a_broken_checkpoint_forces_a_full_scan(open_log, tmp_path):
    log = open_log()
    log.append(values(3), leader_epoch=2)
    log.close()
    (tmp_path / "topic-0" / "leader-epoch-checkpoint").write_text("0\n5\n1 1\n")
    again = open_log()
    assert again.recovery.ignored_checkpoints and again.recovery.scanned_segments == 1
    assert again.epoch_entries() == [(2, 0)]


def test_closed_logs_refuse_work(open_log):
    log = open_log()
    log.append(values(1))
    log.close()
    log.close()  # idempotent
    with pytest.raises(LogClosedError):
        log.append(values(1))
    with pytest.raises(LogClosedError):
        log.read(0)


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_every_policy_makes_appends_durable_by_flush(open_log, policy):
    log = open_log(fsync=policy, fsync_interval_ms=10)
    log.append(values(3))
    assert log.flush() == 3 and log.recovery_point == 3


def test_always_syncs_before_returning(open_log):
    log = open_log(fsync="always")
    log.append(values(3))
    assert log.recovery_point == 3
    log.append(values(3), sync=False)
    assert log.recovery_point == 3
    log.flush()
    assert log.recovery_point == 6


def test_concurrent_appends_share_fsyncs(open_log, monkeypatch):
    from kraftcore.log import fileio

    syncs = []
    real_sync = fileio.sync

    def counting_sync(fd):
        syncs.append(fd)
        real_sync(fd)

    monkeypatch.setattr(fileio, "sync", counting_sync)
    log = open_log(fsync="always")
    batch = codec.encode_batch(values(100))
    barrier = threading.Barrier(4)

    def worker():
        barrier.wait()
        for _ in range(25):
            log.append(batch)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert log.log_end_offset == 10_000 and log.recovery_point == 10_000
    assert len(syncs) <= 100  # never more than one per append; shared when they overlap
    offsets = [o for o, _ in read_all(log)]
    assert offsets == list(range(10_000))


def test_interval_policy_syncs_in_the_background(open_log):
    log = open_log(fsync="interval", fsync_interval_ms=5)
    log.append(values(3))
    deadline = threading.Event()
    for _ in range(2000):
        if log.recovery_point == 3:
            break
        deadline.wait(0.005)
    assert log.recovery_point == 3


def test_leader_epoch_cache_end_offsets():
    cache = LeaderEpochCache([(1, 0), (3, 100), (6, 250)])
    assert cache.end_offset_for_epoch(6, 400) == (6, 400)
    assert cache.end_offset_for_epoch(3, 400) == (3, 250)
    assert cache.end_offset_for_epoch(4, 400) == (3, 250)
    assert cache.end_offset_for_epoch(0, 400) == (0, 0)
    assert cache.end_offset_for_epoch(7, 400) == (-1, -1)
    assert cache.end_offset_for_epoch(-1, 400) == (-1, -1)
    assert cache.epoch_for_offset(99) == 1 and cache.epoch_for_offset(250) == 6
    cache.truncate_from_start(120)
    assert cache.entries() == [(3, 120), (6, 250)]
    cache.truncate_from_end(250)
    assert cache.entries() == [(3, 120)]
    assert not cache.assign(2, 500) and cache.assign(4, 500)


def test_a_new_epoch_at_the_latest_ones_start_replaces_it():
    """The log start moved up to the log end (no record left of epoch 0), then a leader of
    epoch 1 appends there: epoch 1 starts at 6, and epoch 0 holds nothing."""
    cache = LeaderEpochCache([(0, 0)])
    cache.truncate_from_start(6)
    assert cache.entries() == [(0, 6)]
    assert cache.assign(1, 6)
    assert cache.entries() == [(1, 6)]
    assert cache.end_offset_for_epoch(0, 9) == (0, 6)


def test_a_truncation_that_empties_the_log_drops_the_epoch_entry_at_its_end(open_log):
    """The log start moved to 4, then a truncation to 4 leaves no record: like Kafka's
    truncateFromEnd, every entry starting at or after the new end goes, the clamped (0, 4)
    too; the next append of the epoch brings it back."""
    log = open_log()
    log.append(values(4), leader_epoch=0)
    log.update_high_watermark(4)
    log.append(values(1), leader_epoch=0)
    log.advance_log_start_offset(4)
    assert log.epoch_entries() == [(0, 4)]
    assert log.truncate_to(4) is True
    assert (log.log_start_offset, log.log_end_offset, log.epoch_entries()) == (4, 4, [])
    log.append(values(1), leader_epoch=0)
    assert log.epoch_entries() == [(0, 4)]


def test_verify_records_can_be_limited_to_crcs(open_log):
    from tests.kernels.records_util import with_records

    good = codec.encode_batch([b"x"])
    broken = with_records(good, good[61:] + b"\x00")  # a valid CRC over a stray byte
    with pytest.raises(CorruptRecordError, match="remain"):
        open_log().append(broken)
    trusting = open_log("trusting-0", verify_records=False)
    assert trusting.append(broken) == 0
    with pytest.raises(CorruptRecordError):
        trusting.append(codec.encode_batch([b"y"])[:-1])  # framing and CRC still checked


def test_truncating_at_the_end_forgets_an_epoch_that_has_no_record(tmp_path):
    """A leader records its epoch's start and loses leadership before appending: as a
    follower, a truncation to its log end drops that entry (Kafka's truncateTo), or every
    divergence check would find it again."""
    log = Log.open(tmp_path / "l", fsync="never")
    log.append([b"a"], leader_epoch=0)
    assert log.start_epoch(1)
    assert log.epoch_entries() == [(0, 0), (1, 1)]
    assert not log.truncate_to(1)  # nothing to cut
    assert log.epoch_entries() == [(0, 0)]
    log.close()
    reopened = Log.open(tmp_path / "l", fsync="never")
    assert reopened.epoch_entries() == [(0, 0)]
    reopened.close()


def _reference_read(batches, offset, bytes_max, end):
    """What a read must return, from the batches' (base, last, size) alone: from the batch
    holding `offset` (its last offset >= it), whole batches ending below `end` that fit
    `bytes_max`, the first whatever its size."""
    taken = []
    for base, last, size in batches:
        if last < offset:
            continue
        if last >= end or (taken and sum(t[2] for t in taken) + size > bytes_max):
            break
        taken.append((base, last, size))
    return taken


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_reads_and_regions_match_a_reference_over_segments_and_index_jumps(tmp_path_factory,
                                                                            data):
    """Random appends (batch sizes from one record to many, appends of several batches),
    small segments and index intervals so that reads cross index entries: every read,
    in memory or as a file region, is exactly the reference's batches."""
    directory = tmp_path_factory.mktemp("reads")
    log = Log.open(directory / "t-0", clock=FakeClock(),
                   segment_bytes=data.draw(st.sampled_from([16000, 40000, 1 << 20])),
                   index_interval_bytes=data.draw(st.sampled_from([1, 300, 4096])))
    try:
        for _ in range(data.draw(st.integers(1, 25))):
            sizes = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=3))
            batches = b"".join(codec.encode_batch(values(n, size=data.draw(
                st.integers(1, 400)))) for n in sizes)
            log.append(batches, leader_epoch=0)
        log.update_high_watermark(data.draw(st.integers(0, log.log_end_offset)))
        layout, segment_of, offset = [], {}, 0
        while offset < log.log_end_offset:  # one read per segment: reads stop at its end
            read = log.read(offset, 1 << 30)
            for b in read.batches():
                layout.append((b.base_offset, b.base_offset + b.last_offset_delta, b.size_bytes))
                segment_of[b.base_offset] = offset
            offset = read.next_offset
        assert layout[-1][1] + 1 == log.log_end_offset
        for _ in range(30):
            offset = data.draw(st.integers(0, log.log_end_offset))
            bytes_max = data.draw(st.integers(0, sum(b[2] for b in layout)))
            committed = data.draw(st.booleans())
            end = log.high_watermark if committed else log.log_end_offset
            expected = _reference_read(layout, offset, bytes_max, end)
            if expected:
                home = segment_of[expected[0][0]]
                expected = [b for b in expected if segment_of[b[0]] == home]
            plain = log.read(offset, bytes_max, committed=committed)
            region = log.read(offset, bytes_max, committed=committed, region_bytes_min=1)
            got = [(b.base_offset, b.base_offset + b.last_offset_delta, b.size_bytes)
                   for b in plain.batches()]
            assert got == expected
            if expected:
                assert isinstance(region.records, FileRegion)
                try:
                    assert region.records.read() == bytes(plain.records)
                finally:
                    region.records.close()
                assert (plain.first_offset, region.first_offset) == (expected[0][0],) * 2
                assert plain.next_offset == region.next_offset
                assert expected[-1][1] < plain.next_offset <= \
                    ([b[0] for b in layout if b[0] > expected[-1][1]] or [log.log_end_offset])[0]
            else:
                assert len(region.records) == 0 and not isinstance(region.records, FileRegion)
    finally:
        log.close()


def test_a_read_out_of_file_descriptors_is_copied_instead(open_log, monkeypatch):
    """A region needs a descriptor of its own: with none left (EMFILE) the read is copied,
    not failed; another OSError is the storage's failure."""
    import errno

    import kraftcore.log.log as log_module

    log = open_log()
    log.append(values(50))
    expected = bytes(log.read(0).records)

    def no_descriptors(fd):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(log_module.os, "dup", no_descriptors)
    result = log.read(0, region_bytes_min=1)
    assert isinstance(result.records, memoryview) and bytes(result.records) == expected

    def broken(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(log_module.os, "dup", broken)
    with pytest.raises(StorageError, match="I/O error"):
        log.read(0, region_bytes_min=1)
