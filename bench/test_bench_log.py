"""Durable log benchmarks: `kraftcore.log.Log` against raw system calls on the same bytes,
measured in the same run, in the same kind of temporary directory (pytest's `tmp_path`, on
the filesystem of the system temp dir).

The data: 64 record batches of 1000 records each, with 100-byte random values, no keys,
and one timestamp per batch. That is 109 997 bytes a batch and 7.0 MB in all. The batches
are encoded once, up front. Every timed call writes (or reads) all 64 of them, so a round
handles a fixed 64 000 records whatever the peer.

Peers, in every group:

* `kraftcore-c` (the baseline of the report: the log on the native kernels) calls
  `Log.append(batch, ...)`. For each batch that means one `scan_batches` call (CRC,
  every record's framing, assigning offsets and the epoch, index entries kept in memory
  until the segment is sealed) and one `os.pwritev` of the batch: its first 16 bytes
  patched with the offset and epoch, then the rest of the caller's bytes (no copy).
* `raw-os` calls `os.write(fd, batch)` on one plain file, plus `os.fdatasync` where the
  group needs durability. This is the least a program must do to get the same bytes into
  the page cache, or onto the disk.

In the report, "kraftcore-c speedup" is raw median / log median: the fraction of raw
speed the log keeps (1.0x = as fast as raw; 0.5x = twice as slow).

Every round starts on fresh files: `benchmark.pedantic` creates them in `setup`, and
`teardown` removes them. Neither runs inside the timed call. In `setup`, both peers write
one small batch (PRIME_BATCH) and sync it, so the log's one-time leader-epoch checkpoint is
not timed. In `teardown`, a log is closed (which fsyncs it) and a raw file is
`fdatasync`ed; then the files are deleted and `os.sync()` commits the deletion. No round
leaves dirty pages or pending block frees behind for the next one.

The group-commit peers (the goal whose margin is smallest against the disk's noise) run
their rounds interleaved, log and raw in turn, in one fixture, and hand the times to
pytest-benchmark afterwards (interleave.py): fsync times drift over a run by more than the
log's own cost, so rounds taken one peer after the other compare different disks. The
report adds the median of the per-round-pair ratios.

Nothing here asserts on a timing. The goals are printed at the end of the run, after the
suite's summary table.
"""

import os
import random
import resource
import shutil
import statistics
import threading
import time

import pytest
from interleave import REPLAY, interleaved

from kraftcore import codec
from kraftcore.log import Log, fileio

SEED = 0x6C6F_6721
BATCHES = 64  # per round: 64 x 110 kB = 7.0 MB
RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
TIMESTAMP_MS = 1_700_000_000_000
GROUP = 8  # group commit: appends per flush()
THREADS = 4  # concurrent appenders with sync=True
READ_CHUNK = 1024 * 1024

LOG_PEER = f"kraftcore-{codec.IMPLEMENTATION}"  # the report's baseline when it is "-c"
RAW_PEER = "raw-os"

# Rounds. Every call writes 7 MB, so no round is short enough to need iterations. The
# fsync groups take the fewest rounds because each round waits for the disk.
ROUNDS = {"never": 30, "group": 30, "threads": 30, "each": 15}
WARMUP_ROUNDS = 2

# What the goals are read against (ratio = raw median / log median).
RATIO_GOALS = (
    ("log-append-never", 0.5, "fsync=never appends >= 0.5x raw os.write"),
    ("log-append-group-commit", 0.8,
     f"group commit (fsync=always, flush() every {GROUP} appends) >= 0.8x raw write+fdatasync"),
)
DURABLE_GROUP = "log-append-group-commit"
DURABLE_RECORDS_PER_S = 1_000_000

# Appended (and synced) in every round's setup, before the timed call, by both peers. A
# fresh log's first append starts leader epoch 0 and so writes the leader-epoch checkpoint
# (write + fsync + rename + directory fsync, ~0.7-1 ms); a live log does that once per
# epoch, not per append, so the rounds time appends to a log whose epoch is known.
PRIME_BATCH = codec.encode_batch([b"prime"], timestamp=TIMESTAMP_MS - 1)

_STATE = {}  # results shared between tests of this module (fsync counts, medians)


# ------------------------------------------------------------------------------ data


@pytest.fixture(scope="module")
def batches():
    """64 encoded batches, each of 1000 random 100-byte values; batch i has timestamp
    TIMESTAMP_MS + i (so the time index grows as it would in a live log)."""
    rng = random.Random(SEED)
    out = []
    for i in range(BATCHES):
        values = [rng.randbytes(VALUE_BYTES) for _ in range(RECORDS_PER_BATCH)]
        out.append(codec.encode_batch(values, timestamp=TIMESTAMP_MS + i))
    assert len({len(b) for b in out}) == 1
    return out


def _describe(benchmark, peer, batches, **extra):
    benchmark.extra_info.update(
        peer=peer, records=len(batches) * RECORDS_PER_BATCH,
        bytes=sum(len(b) for b in batches), **extra)


def _remember(benchmark, group, peer):
    """Keep the median for the goal lines printed at the end (absent with
    --benchmark-disable)."""
    stats = benchmark.stats
    if stats is not None and stats.stats.data:
        _STATE.setdefault("medians", {})[(group, peer)] = stats.stats.median


# ------------------------------------------------------------------------------ files


def _remove(path):
    """Delete a round's files and commit the deletion now (sync), so that the journal commit
    that frees their blocks (and discards them, on a filesystem mounted with `discard` such
    as the benchmark machine's ext4) happens here, untimed, rather than inside the first
    fsync of the next round."""
    shutil.rmtree(path)
    os.sync()


class Rounds:
    """Fresh files for every round under one directory, removed after the round. Whatever a
    round leaves open is closed when the test ends (with --benchmark-disable, pedantic
    runs setup and the target but not teardown)."""

    def __init__(self, root):
        self.root = root
        self.count = 0
        self.logs = []
        self.fds = {}

    def _fresh_dir(self):
        self.count += 1
        path = self.root / f"round-{self.count}"
        path.mkdir()
        return path

    def open_log(self, **settings):
        log = Log.open(self._fresh_dir(), **settings)
        self.logs.append(log)
        log.append(PRIME_BATCH)  # the log's first epoch: writes its checkpoint (2 fsyncs)
        log.flush()
        return log

    def close_log(self, log):
        log.close()  # fsyncs what is left, outside the timed call
        self.logs.remove(log)
        _remove(log.path)

    def open_file(self):
        path = self._fresh_dir() / "raw.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.fds[fd] = path
        fileio.sync_dir(path.parent)  # as Log.open does for its new segment
        _write_all(fd, PRIME_BATCH)  # the same first batch as the log's
        os.fdatasync(fd)
        return fd

    def close_file(self, fd):
        path = self.fds.pop(fd)
        os.fdatasync(fd)  # as Log.close does: the next round starts with no dirty pages
        os.close(fd)
        _remove(path.parent)

    def close_all(self):
        for log in list(self.logs):
            log.close()
        for fd in list(self.fds):
            os.close(fd)
        self.logs.clear()
        self.fds.clear()


@pytest.fixture
def rounds(tmp_path):
    r = Rounds(tmp_path)
    yield r
    r.close_all()


def _count_fsyncs(monkeypatch):
    """Counts the fsyncs of log segments (`fileio.sync`, the only call the log makes to
    sync appended data). The wrapper adds a Python call (~0.1 us) to each fsync (>= 100 us)."""
    count = [0]
    real = fileio.sync

    def counting_sync(fd):
        count[0] += 1
        real(fd)

    monkeypatch.setattr(fileio, "sync", counting_sync)
    return count


@pytest.fixture
def fsyncs(monkeypatch):
    return _count_fsyncs(monkeypatch)


def _check_log(log, durable):
    assert log.log_end_offset == 1 + BATCHES * RECORDS_PER_BATCH  # after PRIME_BATCH
    if durable:
        assert log.recovery_point == log.log_end_offset


def _write_all(fd, data):
    if os.write(fd, data) != len(data):  # a regular file takes the whole write, or fails
        raise OSError(f"short write to fd {fd}")


def _sync_points(total, syncs):
    """The indexes i (0-based) after whose write a raw peer fdatasyncs so that `syncs` syncs
    spread evenly over `total` writes, the last one after the last write."""
    syncs = max(1, min(total, syncs))
    return {(k * total) // syncs - 1 for k in range(1, syncs + 1)}


def _bench_log_appends(benchmark, batches, rounds, fsyncs, run, *, fsync, group, rounds_key,
                       call):
    """Time `run(log)` on a fresh Log(fsync=...) per round, check what it wrote (durable
    unless fsync="never", which must not fsync at all) and report it under `group`."""
    counts = []

    def setup():
        log = rounds.open_log(fsync=fsync)
        fsyncs[0] = 0
        return (log,), {}

    def teardown(log):
        _check_log(log, durable=fsync != "never")
        if fsync == "never":
            assert fsyncs[0] == 0
        counts.append(fsyncs[0])
        rounds.close_log(log)

    benchmark.pedantic(run, setup=setup, teardown=teardown, rounds=ROUNDS[rounds_key],
                       warmup_rounds=WARMUP_ROUNDS)
    extra = {} if fsync == "never" else {"fsyncs_per_round": statistics.median(counts or [0])}
    _describe(benchmark, LOG_PEER, batches, call=call, **extra)
    _remember(benchmark, group, LOG_PEER)


# ------------------------------------------------------------------------------ fsync=never


@pytest.mark.benchmark(group="log-append-never")
def test_append_never_log(benchmark, batches, rounds, fsyncs):
    """Log(fsync="never"): `append(batch)` 64 times. The data stays in the page cache."""

    def run(log):
        append = log.append
        for batch in batches:
            append(batch)

    _bench_log_appends(benchmark, batches, rounds, fsyncs, run, fsync="never",
                       group="log-append-never", rounds_key="never",
                       call=f"Log.append(batch) x{BATCHES}, fsync='never'")


@pytest.mark.benchmark(group="log-append-never")
def test_append_never_raw(benchmark, batches, rounds):
    """`os.write(fd, batch)` 64 times to a fresh plain file."""

    def setup():
        return (rounds.open_file(),), {}

    def run(fd):
        for batch in batches:
            _write_all(fd, batch)

    benchmark.pedantic(run, setup=setup, teardown=rounds.close_file, rounds=ROUNDS["never"],
                       warmup_rounds=WARMUP_ROUNDS)
    _describe(benchmark, RAW_PEER, batches, call=f"os.write(fd, batch) x{BATCHES}")
    _remember(benchmark, "log-append-never", RAW_PEER)


# ------------------------------------------------------------------------------ group commit


def _groups(batches):
    return [batches[i:i + GROUP] for i in range(0, len(batches), GROUP)]


@pytest.fixture(scope="module")
def group_commit_rounds(batches, tmp_path_factory):
    """The rounds of both group-commit peers, run interleaved (log then raw, raw then log,
    ...): over a run, the disk's fsync time drifts by more than the difference measured
    here, and rounds taken one peer after the other would see different disks. Per peer,
    each timed round's seconds (warm-up rounds dropped), and the log's fsyncs per round."""
    groups = _groups(batches)
    rounds = Rounds(tmp_path_factory.mktemp("group-commit"))
    counts = []
    with pytest.MonkeyPatch.context() as patch:
        fsyncs = _count_fsyncs(patch)

        def log_round():
            log = rounds.open_log(fsync="always")
            append, flush = log.append, log.flush
            fsyncs[0] = 0
            started = time.perf_counter()
            for group in groups:
                for batch in group:
                    append(batch, sync=False)
                flush()
            elapsed = time.perf_counter() - started
            _check_log(log, durable=True)
            counts.append(fsyncs[0])
            rounds.close_log(log)
            return elapsed

        def raw_round():
            fd = rounds.open_file()
            started = time.perf_counter()
            for group in groups:
                for batch in group:
                    _write_all(fd, batch)
                os.fdatasync(fd)
            elapsed = time.perf_counter() - started
            rounds.close_file(fd)
            return elapsed

        try:
            samples = interleaved({LOG_PEER: log_round, RAW_PEER: raw_round},
                                  WARMUP_ROUNDS + ROUNDS["group"])
        finally:
            rounds.close_all()
    samples = {peer: times[WARMUP_ROUNDS:] for peer, times in samples.items()}
    _STATE["group-commit-paired"] = statistics.median(
        raw / log for log, raw in zip(samples[LOG_PEER], samples[RAW_PEER]))
    return samples, counts[WARMUP_ROUNDS:]


@pytest.mark.benchmark(group="log-append-group-commit", timer=REPLAY)
def test_append_group_commit_log(benchmark, batches, group_commit_rounds):
    """Log(fsync="always"): 8 times, `append(batch, sync=False)` x8 then `flush()`:
    8 fsyncs per round (rounds interleaved with the raw peer's)."""
    samples, counts = group_commit_rounds
    REPLAY.replay(benchmark, samples[LOG_PEER])
    _describe(benchmark, LOG_PEER, batches, fsyncs_per_round=statistics.median(counts),
              call=f"(Log.append(batch, sync=False) x{GROUP}, Log.flush()) "
                   f"x{len(_groups(batches))}")
    _remember(benchmark, "log-append-group-commit", LOG_PEER)


@pytest.mark.benchmark(group="log-append-group-commit", timer=REPLAY)
def test_append_group_commit_raw(benchmark, batches, group_commit_rounds):
    """`os.write` x8 then `os.fdatasync`, 8 times: the same 8 fsyncs per round (rounds
    interleaved with the log's)."""
    samples, _ = group_commit_rounds
    REPLAY.replay(benchmark, samples[RAW_PEER])
    groups = _groups(batches)
    _describe(benchmark, RAW_PEER, batches, fsyncs_per_round=len(groups),
              call=f"(os.write x{GROUP}, os.fdatasync) x{len(groups)}")
    _remember(benchmark, "log-append-group-commit", RAW_PEER)


# ------------------------------------------------------------------------------ 4 threads


def _start_appenders(log, batches, start):
    """THREADS threads, thread t appending batches[t::THREADS] with sync=True once `start`
    (a barrier shared with the timing thread) opens. Returns (threads, errors)."""
    errors = []

    def appender(mine):
        try:
            start.wait()
            for batch in mine:
                log.append(batch, sync=True)
        except BaseException as exc:  # re-raised by the timing thread
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(batches[t::THREADS],), daemon=True)
               for t in range(THREADS)]
    for thread in threads:
        thread.start()
    return threads, errors


def _concurrent_round(threads, errors, start):
    start.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.mark.benchmark(group="log-append-4-threads")
def test_append_threads_log(benchmark, batches, rounds, fsyncs):
    """Log(fsync="always"): 4 threads, each `append(batch)` (sync=True) of 16 batches;
    concurrent appends share fsyncs. The threads are started (and wait on a barrier) before
    the timed call; the call opens the barrier and joins them."""
    counts = []

    def setup():
        log = rounds.open_log(fsync="always")
        start = threading.Barrier(THREADS + 1)
        threads, errors = _start_appenders(log, batches, start)
        fsyncs[0] = 0
        return (threads, errors, start), {"log": log}

    def run(threads, errors, start, log):
        _concurrent_round(threads, errors, start)

    def teardown(threads, errors, start, log):
        _check_log(log, durable=True)
        counts.append(fsyncs[0])
        rounds.close_log(log)

    benchmark.pedantic(run, setup=setup, teardown=teardown, rounds=ROUNDS["threads"],
                       warmup_rounds=WARMUP_ROUNDS)
    if counts:
        _STATE["thread_fsyncs"] = counts
    _describe(benchmark, LOG_PEER, batches, fsyncs_per_round=statistics.median(counts or [0]),
              fsyncs_min_max=[min(counts or [0]), max(counts or [0])],
              call=f"{THREADS} threads x (Log.append(batch) x{BATCHES // THREADS})")
    _remember(benchmark, "log-append-4-threads", LOG_PEER)


def _measure_thread_fsyncs(tmp_path, batches, fsyncs, times=3):
    """Untimed: the fsyncs a 4-thread round of the log makes (when the log benchmark did
    not run in this session, e.g. with -k)."""
    r = Rounds(tmp_path / "calibrate")
    r.root.mkdir()
    counts = []
    try:
        for _ in range(times):
            log = r.open_log(fsync="always")
            start = threading.Barrier(THREADS + 1)
            threads, errors = _start_appenders(log, batches, start)
            fsyncs[0] = 0
            _concurrent_round(threads, errors, start)
            counts.append(fsyncs[0])
            r.close_log(log)
    finally:
        r.close_all()
    return counts


@pytest.mark.benchmark(group="log-append-4-threads")
def test_append_threads_raw(benchmark, batches, rounds, tmp_path, fsyncs):
    """One thread: `os.write` of the 64 batches with as many `os.fdatasync`s, evenly spread,
    as the log made in its median round (the log benchmark's count, measured again here if
    it did not run)."""
    counts = _STATE.get("thread_fsyncs") or _measure_thread_fsyncs(tmp_path, batches, fsyncs)
    syncs = max(1, round(statistics.median(counts)))
    points = _sync_points(len(batches), syncs)
    plan = [(batch, i in points) for i, batch in enumerate(batches)]

    def setup():
        return (rounds.open_file(),), {}

    def run(fd):
        for batch, sync in plan:
            _write_all(fd, batch)
            if sync:
                os.fdatasync(fd)

    benchmark.pedantic(run, setup=setup, teardown=rounds.close_file, rounds=ROUNDS["threads"],
                       warmup_rounds=WARMUP_ROUNDS)
    _describe(benchmark, RAW_PEER, batches, fsyncs_per_round=syncs,
              call=f"os.write x{BATCHES} with {syncs} os.fdatasync, one thread")
    _remember(benchmark, "log-append-4-threads", RAW_PEER)


# ------------------------------------------------------------------------------ sync per append


@pytest.mark.benchmark(group="log-append-sync-each")
def test_append_sync_each_log(benchmark, batches, rounds, fsyncs):
    """Log(fsync="always"): `append(batch)` (sync=True) 64 times, one fsync each."""

    def run(log):
        append = log.append
        for batch in batches:
            append(batch)

    _bench_log_appends(benchmark, batches, rounds, fsyncs, run, fsync="always",
                       group="log-append-sync-each", rounds_key="each",
                       call=f"Log.append(batch) x{BATCHES}, fsync='always'")


@pytest.mark.benchmark(group="log-append-sync-each")
def test_append_sync_each_raw(benchmark, batches, rounds):
    """`os.write(fd, batch)` then `os.fdatasync(fd)`, 64 times."""

    def setup():
        return (rounds.open_file(),), {}

    def run(fd):
        for batch in batches:
            _write_all(fd, batch)
            os.fdatasync(fd)

    benchmark.pedantic(run, setup=setup, teardown=rounds.close_file, rounds=ROUNDS["each"],
                       warmup_rounds=WARMUP_ROUNDS)
    _describe(benchmark, RAW_PEER, batches, fsyncs_per_round=BATCHES,
              call=f"(os.write, os.fdatasync) x{BATCHES}")
    _remember(benchmark, "log-append-sync-each", RAW_PEER)


# ------------------------------------------------------------------------------ reads


@pytest.fixture(scope="module")
def written_log(tmp_path_factory, batches):
    """A closed log holding the 64 batches (one segment), read by both read peers; its files
    were just written, so they are in the page cache."""
    path = tmp_path_factory.mktemp("read-log")
    with Log.open(path, fsync="never") as log:
        for batch in batches:
            log.append(batch)
    return path


def _segment_files(path):
    return sorted(os.path.join(path, name) for name in os.listdir(path) if name.endswith(".log"))


# Both read loops drop each buffer before the next read. Kept alive until the next read
# returns (a plain `chunk = pread(...)` loop), the 1 MiB buffers cannot be reused: every
# read then lands in fresh memory and page-faults, which costs ~1 ms per 7 MB, 3-4x the
# copy itself, for both peers alike, and hides the difference between them.


def _read_log_all(log):
    offset, end, total = log.log_start_offset, log.log_end_offset, 0
    read = log.read
    while offset < end:
        result = read(offset, READ_CHUNK)
        total += len(result.records)
        offset = result.next_offset
        del result
    return total


def _read_raw_all(files):
    total = 0
    pread = os.pread
    for fd, size in files:
        position = 0
        while position < size:
            chunk = pread(fd, READ_CHUNK, position)
            total += len(chunk)
            position += len(chunk)
            del chunk
    return total


def _faults(benchmark, fn, *args, calls=20):
    """Untimed, after the benchmark: the minor page faults of one call (fresh memory the
    kernel maps for the read buffers), the median over `calls` calls."""
    counts = []
    for _ in range(calls):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        fn(*args)
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    benchmark.extra_info["minor_faults_per_call"] = statistics.median(counts)


@pytest.mark.benchmark(group="log-read-1MiB")
def test_read_log(benchmark, batches, written_log):
    """`Log.read(offset, 1 MiB)` from the log start to its end, following `next_offset`."""
    expected = sum(len(b) for b in batches)
    log = Log.open(written_log, fsync="never")
    try:
        assert benchmark(_read_log_all, log) == expected
        _faults(benchmark, _read_log_all, log)
    finally:
        log.close()
    _describe(benchmark, LOG_PEER, batches, call="Log.read(offset, 1 MiB) until the end")
    _remember(benchmark, "log-read-1MiB", LOG_PEER)


@pytest.mark.benchmark(group="log-read-1MiB")
def test_read_raw(benchmark, batches, written_log):
    """`os.pread(fd, 1 MiB, position)` over the same segment files."""
    expected = sum(len(b) for b in batches)
    fds = [os.open(name, os.O_RDONLY | os.O_CLOEXEC) for name in _segment_files(written_log)]
    try:
        files = [(fd, os.fstat(fd).st_size) for fd in fds]
        assert benchmark(_read_raw_all, files) == expected
        _faults(benchmark, _read_raw_all, files)
    finally:
        for fd in fds:
            os.close(fd)
    _describe(benchmark, RAW_PEER, batches, call="os.pread(fd, 1 MiB, position) until the end")
    _remember(benchmark, "log-read-1MiB", RAW_PEER)


# ------------------------------------------------------------------------------ agreement
# Plain tests (no timing): both peers of a group do the same work.


def _mask_log_fields(data, base_offsets):
    """`data` with each batch's base offset (bytes 0-7) and partition leader epoch (12-15)
    zeroed: the only bytes an append as leader rewrites (neither is covered by the CRC)."""
    out = bytearray(data)
    position = 0
    while position < len(out):
        size = 12 + int.from_bytes(out[position + 8:position + 12], "big")
        base_offsets.append(int.from_bytes(out[position:position + 8], "big", signed=True))
        out[position:position + 8] = bytes(8)
        out[position + 12:position + 16] = bytes(4)
        position += size
    return bytes(out)


def test_log_segment_holds_the_raw_bytes(tmp_path, batches):
    """The log's segment file is the raw peer's file, except the offsets and epoch the log
    stamps into each batch header; offsets run 0, 1000, 2000, ..."""
    with Log.open(tmp_path / "log", fsync="never") as log:
        for batch in batches:
            log.append(batch)
    (segment,) = _segment_files(tmp_path / "log")
    with open(segment, "rb") as f:
        logged = f.read()
    raw = b"".join(batches)
    assert len(logged) == len(raw)
    log_bases, raw_bases = [], []
    assert _mask_log_fields(logged, log_bases) == _mask_log_fields(raw, raw_bases)
    assert log_bases == [i * RECORDS_PER_BATCH for i in range(BATCHES)]
    assert raw_bases == [0] * BATCHES


@pytest.mark.parametrize("mode", ["group", "each", "threads"])
def test_log_fsync_counts(tmp_path, batches, fsyncs, mode):
    """Group commit fsyncs once per flush(), sync-per-append once per append, and 4
    concurrent threads at most once per append and at least once."""
    with Log.open(tmp_path / "log", fsync="always") as log:
        fsyncs[0] = 0
        if mode == "group":
            for i, batch in enumerate(batches):
                log.append(batch, sync=False)
                if i % GROUP == GROUP - 1:
                    log.flush()
            assert fsyncs[0] == BATCHES // GROUP
        elif mode == "each":
            for batch in batches:
                log.append(batch)
            assert fsyncs[0] == BATCHES
        else:
            start = threading.Barrier(THREADS + 1)
            threads, errors = _start_appenders(log, batches, start)
            _concurrent_round(threads, errors, start)
            assert 1 <= fsyncs[0] <= BATCHES
        assert log.recovery_point == log.log_end_offset == BATCHES * RECORDS_PER_BATCH


def test_sync_points_spread_evenly():
    assert _sync_points(64, 8) == {7, 15, 23, 31, 39, 47, 55, 63}
    assert _sync_points(64, 64) == set(range(64))
    assert _sync_points(64, 1) == {63}
    assert len(_sync_points(64, 23)) == 23 and max(_sync_points(64, 23)) == 63


def test_both_read_peers_read_every_byte(batches, written_log):
    expected = sum(len(b) for b in batches)
    with Log.open(written_log, fsync="never") as log:
        assert _read_log_all(log) == expected
    fds = [os.open(name, os.O_RDONLY) for name in _segment_files(written_log)]
    try:
        assert _read_raw_all([(fd, os.fstat(fd).st_size) for fd in fds]) == expected
    finally:
        for fd in fds:
            os.close(fd)


# ------------------------------------------------------------------------------ goals


def terminal_summary(tr):
    """Prints the log goals after the suite's summary table (conftest.py's GOALS hold
    speedup checks only; the durable-rate goal is an absolute number)."""
    medians = _STATE.get("medians")
    if not medians:
        return
    tr.write_line("")
    for group, target, goal in RATIO_GOALS:
        log, raw = medians.get((group, LOG_PEER)), medians.get((group, RAW_PEER))
        if log is None or raw is None:
            tr.write_line(f"log goal NOT MEASURED: {goal}")
            continue
        ratio = raw / log
        status = "MET" if ratio >= target else "NOT MET"
        paired = ""
        if group == DURABLE_GROUP and "group-commit-paired" in _STATE:
            paired = f"; median of the interleaved rounds' own ratios {_STATE['group-commit-paired']:.3f}x"
        tr.write_line(f"log goal {status}: {goal} -- {group} raw/log: {ratio:.3f}x "
                      f"(target {target}x{paired})")
    log = medians.get((DURABLE_GROUP, LOG_PEER))
    goal = (f"durable appends >= {DURABLE_RECORDS_PER_S / 1e6:g} M records/s "
            f"(group commit, flush() every {GROUP} batches of {RECORDS_PER_BATCH})")
    if log is None:
        tr.write_line(f"log goal NOT MEASURED: {goal}")
    else:
        rate = BATCHES * RECORDS_PER_BATCH / log
        status = "MET" if rate >= DURABLE_RECORDS_PER_S else "NOT MET"
        tr.write_line(f"log goal {status}: {goal} -- {rate / 1e6:.2f} M records/s")
    for group in ("log-append-4-threads", "log-append-sync-each"):
        log = medians.get((group, LOG_PEER))
        if log is not None:
            tr.write_line(f"log durable rate, {group}: "
                          f"{BATCHES * RECORDS_PER_BATCH / log / 1e6:.2f} M records/s")
