"""Write failures: a full disk (ENOSPC, injected through `kraftcore.log.fileio`), a failing
fsync (EIO), and a real EFBIG from the kernel under RLIMIT_FSIZE in a child process.

The contract (see `kraftcore.log.log`): an append that fails to write raises
`StorageError`, is rolled back (nothing of it is visible, now or after a reopen) and leaves
the log writable; a failed fsync takes the log offline: writes raise `LogClosedError`,
reads serve what was durable, and a reopen recovers a consistent log.
"""

import errno
import json
import os
import subprocess
import sys
import threading

import pytest

from kraftcore import codec
from kraftcore.errors import LogClosedError, OffsetOutOfRangeError, StorageError
from kraftcore.log import Log, fileio

TS = 1_700_000_000_000
MARKER = ".kafka_cleanshutdown"


def values(base, count, tag=b"ok"):
    return [b"%s-%d-" % (tag, offset) + b"p" * (40 + offset % 50)
            for offset in range(base, base + count)]


def read_all(log):
    """[(offset, value)] of every record from the log start to the log end offset, checking
    that batches follow each other without gaps."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 16 * 1024)
        assert len(result) > 0, f"empty read at {offset} below the LEO {log.log_end_offset}"
        for batch in result.batches():
            assert batch.base_offset == offset, "a gap between batches"
            for record in batch.records:
                assert record.offset == offset
                out.append((record.offset, record.value))
                offset += 1
        assert result.next_offset == offset
    assert offset == log.log_end_offset
    return out


def expected(acked):
    """[(offset, value)] of the acknowledged appends [(base, values)]."""
    return [(base + i, value) for base, vals in acked for i, value in enumerate(vals)]


def files(path):
    """{name: bytes} of the segment files."""
    out = {}
    for name in sorted(os.listdir(path)):
        if name.endswith((".log", ".index", ".timeindex")):
            with open(os.path.join(path, name), "rb") as f:
                out[name] = f.read()
    return out


def fd_path(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # pragma: no cover - no /proc
        return ""


class WriteFaults:
    """Replaces `fileio.pwrite_all` (every data write of the log: segments, indexes,
    checkpoints). Armed with a byte budget it behaves as a disk filling up: writes go
    through until the budget is spent, the write that crosses it lands partially, and it
    and every later write fail with ENOSPC. Armed with a call number, that call writes
    `partial` bytes for real (all but the last -`partial` if negative) and fails. `only`
    restricts the fault to files whose path it accepts. `calls` records (name, size) of
    every write while armed (a write of several pieces counts as one, of their total
    size)."""

    def __init__(self, monkeypatch):
        self.real = fileio.pwrite_all
        self.budget = self.fail_at = None
        self.partial = 0
        self.only = None
        self.calls = []
        self.fired = 0
        monkeypatch.setattr(fileio, "pwrite_all", self)

    def fill_after(self, budget, only=None):
        self.budget, self.fail_at, self.only, self.calls = budget, None, only, []

    def fail_call(self, number, partial=0, only=None):
        self.budget, self.fail_at, self.partial, self.only, self.calls = (
            None, number, partial, only, [])

    def free(self):
        self.budget = self.fail_at = None

    def _enospc(self, fd, view, position, keep):
        if keep < 0:  # all but the last -keep bytes
            keep += len(view)
        if keep:
            self.real(fd, view[:keep], position)
        self.fired += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    def __call__(self, fd, data, position):
        armed = self.budget is not None or self.fail_at is not None
        if not armed:
            return self.real(fd, data, position)
        path = fd_path(fd)
        if self.only is not None and not self.only(path):
            return self.real(fd, data, position)
        if isinstance(data, (list, tuple)):  # pieces written back to back (pwritev)
            data = b"".join(data)
        view = memoryview(data).cast("B")
        self.calls.append((os.path.basename(path), len(view)))
        if self.fail_at is not None:
            if len(self.calls) == self.fail_at:
                self._enospc(fd, view, position, min(self.partial, len(view)))
        elif len(view) > self.budget:
            keep, self.budget = self.budget, 0
            self._enospc(fd, view, position, keep)
        else:
            self.budget -= len(view)
        return self.real(fd, data, position)


class SyncFaults:
    """Replaces `fileio.sync`: the `fail_at`-th call from now raises EIO (and so does every
    later one, as a dying disk would)."""

    def __init__(self, monkeypatch):
        self.real = fileio.sync
        self.fail_at = None
        self.calls = 0
        self.fired = 0
        self.lock = threading.Lock()
        monkeypatch.setattr(fileio, "sync", self)

    def arm(self, fail_at=1):
        with self.lock:
            self.calls, self.fail_at = 0, fail_at

    def __call__(self, fd):
        with self.lock:
            if self.fail_at is not None:
                self.calls += 1
                if self.calls >= self.fail_at:
                    self.fired += 1
                    raise OSError(errno.EIO, "Input/output error")
        return self.real(fd)


# ================================================================ a full disk

SETTINGS = dict(segment_bytes=1024 * 1024, index_interval_bytes=256)


def build(path, **settings):
    """A log of 12 acknowledged appends (epoch 0) whose next append crosses the index
    interval. Returns (log, acked)."""
    log = Log.open(path, **dict(SETTINGS, **settings))
    acked = []
    for i in range(12):
        base = log.log_end_offset
        vals = values(base, 3 + i % 4)
        assert log.append(vals, timestamp=TS + i, leader_epoch=0) == base
        acked.append((base, vals))
    return log, acked


def failing_append(log, tag=b"FAILED", form="values"):
    """The append the faults hit: a new leader epoch (so it also rewrites the epoch
    checkpoint), crossing the index interval, with the largest timestamp so far. As
    `values` the log encodes the batch; as `encoded` it is given one encoded batch (bytes),
    which the log writes as a patched header followed by the caller's bytes (pwritev)."""
    vals = values(log.log_end_offset, 5, tag)
    if form == "encoded":
        return log.append(codec.encode_batch(vals, timestamp=TS + 1000), leader_epoch=2)
    return log.append(vals, timestamp=TS + 1000, leader_epoch=2)


def write_sizes_of_failing_append(tmp_path, monkeypatch):
    twin_faults = WriteFaults(monkeypatch)
    log, _ = build(tmp_path / "twin-0")
    twin_faults.fill_after(1 << 40)
    failing_append(log)
    sizes = [size for _, size in twin_faults.calls]
    twin_faults.free()
    log.close()
    monkeypatch.undo()
    names = [name for name, _ in twin_faults.calls]
    # the data, then the leader-epoch checkpoint (index entries of the active segment stay
    # in memory until it is sealed)
    assert names[:2] == ["00000000000000000000.log", "leader-epoch-checkpoint.tmp"], names
    return sizes


def budgets(sizes):
    """Byte budgets that make the disk fill up inside or at the edge of every write."""
    out, start = {0, 1, sizes[0] // 2}, 0
    for size in sizes:
        out |= {start, start + 1, start + size - 1}
        start += size
    return sorted(b for b in out if b < start)


def check_state_unchanged(log, acked, before_files, leo, size, epochs):
    assert log.log_end_offset == leo
    assert log.size_bytes == size
    assert log.epoch_entries() == epochs
    assert files(log.path) == before_files, "the failed append left bytes in the files"
    assert read_all(log) == expected(acked)


def reopen_and_check(path, acked, settings, clean):
    log = Log.open(path, **settings)
    try:
        assert log.recovery.clean_shutdown == clean
        content = read_all(log)
        assert content == expected(acked)
        assert not any(value.startswith(b"FAILED") for _, value in content)
        epochs = [(0, 0)] + ([(2, acked[12][0])] if len(acked) > 12 else [])
        assert log.epoch_entries() == epochs
    finally:
        log.close()


@pytest.mark.parametrize("form", ["values", "encoded"])
@pytest.mark.parametrize("then", ["free_space", "close_while_full"])
def test_a_full_disk_at_every_byte_of_an_append_rolls_it_back(tmp_path, monkeypatch, then,
                                                              form):
    sizes = write_sizes_of_failing_append(tmp_path, monkeypatch)
    points = budgets(sizes)
    assert len(points) >= 6
    for number, budget in enumerate(points):
        path = tmp_path / f"full-{number}"
        faults = WriteFaults(monkeypatch)
        log, acked = build(path)
        state = (files(path), log.log_end_offset, log.size_bytes, log.epoch_entries())
        faults.fill_after(budget)
        with pytest.raises(StorageError) as info:
            failing_append(log, form=form)
        where = f"budget {budget} of {sizes}"
        assert faults.fired == 1, where
        assert info.value.errno == errno.ENOSPC, where
        assert isinstance(info.value, OSError)
        check_state_unchanged(log, acked, *state)
        # still full: a second attempt fails the same way and changes nothing
        with pytest.raises(StorageError) as info:
            failing_append(log, form=form)
        assert info.value.errno == errno.ENOSPC, where
        check_state_unchanged(log, acked, *state)
        if then == "free_space":
            faults.free()
            base = log.log_end_offset
            vals = values(base, 4, b"after")
            assert log.append(vals, timestamp=TS + 2000, leader_epoch=2) == base, where
            acked.append((base, vals))
            assert read_all(log) == expected(acked), where
            log.close()
            assert os.path.exists(path / MARKER)
            reopen_and_check(path, acked, SETTINGS, clean=True)
        else:
            with pytest.raises(StorageError):
                log.close()  # the final time index entry and the checkpoints need space
            assert log.closed
            faults.free()
            assert not os.path.exists(path / MARKER)
            reopen_and_check(path, acked, SETTINGS, clean=False)
        # and once more through a full recovery scan, without the marker or checkpoints
        for name in (MARKER, "recovery-point-offset-checkpoint"):
            if os.path.exists(path / name):
                os.unlink(path / name)
        reopen_and_check(path, acked, SETTINGS, clean=False)
        monkeypatch.undo()


@pytest.mark.parametrize("call, partial", [
    (1, 0), (1, 1), (1, 150), (1, -1),  # the batch data: none, some, all but one byte
    (2, 0), (2, 3),  # the leader-epoch checkpoint (the append starts epoch 2)
])
@pytest.mark.parametrize("form", ["values", "encoded"])
def test_enospc_on_one_write_of_an_append(tmp_path, monkeypatch, call, partial, form):
    faults = WriteFaults(monkeypatch)
    path = tmp_path / "once-0"
    log, acked = build(path)
    state = (files(path), log.log_end_offset, log.size_bytes, log.epoch_entries())
    faults.fail_call(call, partial)
    with pytest.raises(StorageError) as info:
        failing_append(log, form=form)
    assert faults.fired == 1 and len(faults.calls) == call
    assert info.value.errno == errno.ENOSPC
    check_state_unchanged(log, acked, *state)
    faults.free()
    base = log.log_end_offset
    vals = values(base, 5, b"retry")
    assert log.append(vals, timestamp=TS + 1000, leader_epoch=2) == base
    acked.append((base, vals))
    log.close()
    reopen_and_check(path, acked, SETTINGS, clean=True)


def test_a_full_disk_with_a_preallocated_segment(tmp_path, monkeypatch):
    # The data lands in preallocated space; only the epoch checkpoint needs a new block.
    faults = WriteFaults(monkeypatch)
    settings = dict(SETTINGS, preallocate=True)
    path = tmp_path / "prealloc-0"
    log, acked = build(path, preallocate=True)
    leo, epochs = log.log_end_offset, log.epoch_entries()
    faults.fill_after(0, only=lambda p: not p.endswith((".log", ".index", ".timeindex")))
    with pytest.raises(StorageError) as info:
        failing_append(log)
    assert faults.fired == 1 and info.value.errno == errno.ENOSPC
    assert (log.log_end_offset, log.epoch_entries()) == (leo, epochs)
    assert read_all(log) == expected(acked)
    # appends within the current epoch need no checkpoint write: they still work
    base = log.log_end_offset
    vals = values(base, 2, b"same-epoch")
    assert log.append(vals, timestamp=TS + 3000, leader_epoch=0) == base
    acked.append((base, vals))
    faults.free()
    log.close()
    log = Log.open(path, **settings)
    assert read_all(log) == expected(acked)
    assert log.epoch_entries() == [(0, 0)]
    log.close()


# ================================================================ a failing fsync


@pytest.mark.parametrize("how", ["append", "flush"])
def test_a_failed_fsync_takes_the_log_offline(tmp_path, monkeypatch, how):
    syncs = SyncFaults(monkeypatch)
    path = tmp_path / "eio-0"
    log = Log.open(path, fsync="always", segment_bytes=4 * 1024)
    acked = []
    for i in range(60):  # several segments
        base = log.log_end_offset
        acked.append((base, values(base, 4)))
        assert log.append(acked[-1][1]) == base
    durable = log.log_end_offset
    assert log.recovery_point == durable and len(log.segment_base_offsets) > 2
    if how == "append":
        syncs.arm()
        with pytest.raises(StorageError) as info:
            log.append(values(durable, 3, b"FAILED"))
    else:
        log.roll()  # room for what follows: no roll (which syncs) in between
        durable = log.log_end_offset
        for _ in range(3):  # appended but not yet durable
            log.append(values(log.log_end_offset, 3, b"FAILED"), sync=False)
        assert log.log_end_offset > durable == log.recovery_point
        syncs.arm()
        with pytest.raises(StorageError) as info:
            log.flush()
    assert syncs.fired == 1 and info.value.errno == errno.EIO
    # offline: only what was durable is served, every write is refused
    assert log.log_end_offset == durable and log.recovery_point == durable
    assert log.high_watermark <= durable
    for attempt in (lambda: log.append(values(durable, 1)), log.flush, log.roll,
                    log.checkpoint, lambda: log.truncate_to(durable - 1),
                    lambda: log.append_as_follower(b"\0" * 70)):
        with pytest.raises(LogClosedError):
            attempt()
    assert syncs.fired == 1, "an offline log must not touch its files again"
    assert read_all(log) == expected(acked)
    assert len(log.read(durable)) == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(durable + 1)
    log.close()
    assert not os.path.exists(path / MARKER), "an offline log must not claim a clean shutdown"
    syncs.fail_at = None

    log = Log.open(path, fsync="always", segment_bytes=4 * 1024)
    try:
        assert not log.recovery.clean_shutdown
        content = read_all(log)
        # what was acknowledged is there; the failed writes may be too (the page cache
        # kept them), but only as whole batches
        assert content[:len(expected(acked))] == expected(acked)
        for offset, value in content[len(expected(acked)):]:
            assert value == values(offset, 1, b"FAILED")[0]
        base = log.log_end_offset
        assert log.append(values(base, 2, b"again")) == base
    finally:
        log.close()


def test_a_failed_group_commit_fails_every_waiting_append(tmp_path, monkeypatch):
    syncs = SyncFaults(monkeypatch)
    log = Log.open(tmp_path / "group-0", fsync="always")
    syncs.arm(fail_at=25)
    acked, errors, lock = [], [], threading.Lock()

    def writer(number):
        for i in range(10_000):
            vals = [b"t%d-%d-%d" % (number, i, j) for j in range(3)]
            try:
                base = log.append(vals)
            except (StorageError, LogClosedError) as exc:
                with lock:
                    errors.append(exc)
                return
            with lock:
                acked.append((base, vals))

    threads = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an append hung after the failure"
    assert syncs.fired >= 1 and len(errors) == 4
    assert any(isinstance(exc, StorageError) and exc.errno == errno.EIO for exc in errors)
    assert acked, "no append succeeded before the failure"
    # every acknowledged append was durable, so it is still served
    content = dict(read_all(log))
    assert log.log_end_offset == log.recovery_point
    for base, vals in acked:
        assert [content.get(base + i) for i in range(3)] == vals
    log.close()


# ================================================================ a real EFBIG

CHILD_CODE = r'''
import json, os, resource, signal, sys
from kraftcore.errors import StorageError
from kraftcore.log import Log

path, limit = sys.argv[1], int(sys.argv[2])

def values(base, count):
    return [b"v-%d-" % o + b"q" * (100 + o % 200) for o in range(base, base + count)]

def read_all(log):
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 16 * 1024)
        if not len(result):
            raise AssertionError("empty read at %d" % offset)
        for batch in result.batches():
            out += [[r.offset, r.value.decode()] for r in batch.records]
        offset = result.next_offset
    return out

def failure(log, exc, base, size):
    return dict(type=type(exc).__name__, storage_error=isinstance(exc, StorageError),
                errno=getattr(exc, "errno", None), message=str(exc), leo_before=base,
                leo_after=log.log_end_offset, size_before=size, size_after=log.size_bytes,
                file_size=os.path.getsize(os.path.join(path, "00000000000000000000.log")))

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
log = Log.open(path, segment_bytes=4 * limit, index_interval_bytes=1024)
report = dict(acked=[])
while len(report["acked"]) < 10_000:
    base, size = log.log_end_offset, log.size_bytes
    try:
        got = log.append(values(base, 1 + base % 13))
    except Exception as exc:
        report["first"] = failure(log, exc, base, size)
        break
    report["acked"].append([got, log.log_end_offset])
try:
    content = read_all(log)
    expected = []
    for b, e in report["acked"]:
        expected += [[o, v.decode()] for o, v in zip(range(b, e), values(b, e - b))]
    report["readback_ok"] = content == expected
except Exception as exc:
    report["readback_ok"] = False
    report["readback_error"] = repr(exc)
base, size = log.log_end_offset, log.size_bytes
try:
    log.append(values(base, 13))
    report["second"] = None
except Exception as exc:
    report["second"] = failure(log, exc, base, size)
try:
    log.close()
    report["closed"] = True
except Exception as exc:
    report["closed"] = repr(exc)
print(json.dumps(report))
'''


def test_a_real_efbig_reaches_the_caller_and_the_log_survives(tmp_path):
    path = tmp_path / "efbig-0"
    limit = 150_000
    proc = subprocess.run([sys.executable, "-c", CHILD_CODE, str(path), str(limit)],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    report = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    first, acked = report.get("first"), report["acked"]
    assert first is not None, "the file size limit was never hit"
    assert first["storage_error"] and first["errno"] == errno.EFBIG, first
    assert first["leo_after"] == first["leo_before"] == acked[-1][1]
    assert first["size_after"] == first["size_before"] == first["file_size"] < limit
    assert report["readback_ok"], report.get("readback_error")
    second = report["second"]
    assert second is not None and second["storage_error"] and second["errno"] == errno.EFBIG
    assert second["leo_after"] == second["leo_before"] == acked[-1][1]
    assert report["closed"] is True, report["closed"]
    assert len(acked) > 10

    value_of = {o: b"v-%d-" % o + b"q" * (100 + o % 200) for o in range(acked[-1][1])}

    def check(clean):
        log = Log.open(path)
        try:
            assert log.recovery.clean_shutdown == clean
            assert log.log_end_offset == acked[-1][1]
            offset, boundaries = 0, []
            while offset < log.log_end_offset:
                result = log.read(offset, 64 * 1024)
                for batch in result.batches():
                    boundaries.append([batch.base_offset, batch.next_offset])
                    for record in batch.records:
                        assert record.offset == offset
                        assert record.value == value_of[offset]
                        offset += 1
                assert result.next_offset == offset
            assert boundaries == acked
            base = log.log_end_offset
            assert log.append([b"after"]) == base
            acked.append([base, base + 1])
            value_of[base] = b"after"
        finally:
            log.close()

    check(clean=True)
    os.unlink(path / MARKER)
    check(clean=False)


# ================================================================ failures racing a close or roll


def _slow_failing_sync(monkeypatch, started):
    """fileio.sync fails once with EIO, 0.3 s after it was called (`started` is set)."""
    real = fileio.sync
    state = {"failed": False}

    def sync(fd):
        if not state["failed"]:
            state["failed"] = True
            started.set()
            threading.Event().wait(0.3)
            raise OSError(errno.EIO, "injected fsync failure")
        real(fd)

    monkeypatch.setattr(fileio, "sync", sync)


@pytest.mark.parametrize("then", ["close", "roll"])
def test_a_sync_that_fails_while_a_close_or_roll_waits_is_not_counted_durable(
        tmp_path, monkeypatch, then):
    """A close (or a roll) that waits for a failing fsync of another thread must not seal
    the segment and count its records durable: the kernel may have dropped them. The log
    is then not marked clean, and its recovery point stays where the last good sync was."""
    path = tmp_path / "race-0"
    log = Log.open(path, fsync="never", segment_bytes=1 << 20)
    log.append(values(0, 10), timestamp=TS)
    durable = log.flush()
    log.append(values(10, 10), timestamp=TS)
    started = threading.Event()
    _slow_failing_sync(monkeypatch, started)
    errors = []

    def flush():
        try:
            log.flush()
        except StorageError as exc:
            errors.append(exc)

    flusher = threading.Thread(target=flush, daemon=True)
    flusher.start()
    assert started.wait(5)
    if then == "close":
        log.close()
    else:
        with pytest.raises(LogClosedError):
            log.roll()
    flusher.join(5)
    assert len(errors) == 1 and errors[0].errno == errno.EIO
    assert log.recovery_point == durable
    log.close()
    assert not os.path.exists(path / MARKER)
    from kraftcore import layout
    from kraftcore.log import checkpoint
    written = checkpoint.read_offset(str(path), layout.RECOVERY_POINT_CHECKPOINT)
    assert written is None or written <= durable


def test_close_does_not_wait_forever_for_an_interval_flush(tmp_path, monkeypatch):
    """`fsync="interval"`: a close that comes while the flush thread is on its way to the
    log's lock returns (it used to hold the lock while joining that thread)."""
    log = Log.open(tmp_path / "interval-0", fsync="interval", fsync_interval_ms=5)
    entered = threading.Event()
    real = log._sync_now

    def slow_sync_now():
        entered.set()
        threading.Event().wait(0.3)
        return real()

    monkeypatch.setattr(log, "_sync_now", slow_sync_now)
    log.append(values(0, 5), timestamp=TS)
    assert entered.wait(5)
    closer = threading.Thread(target=log.close, daemon=True)
    closer.start()
    closer.join(10)
    assert not closer.is_alive(), "close() deadlocked with the interval flush"


def test_a_log_start_whose_checkpoint_fails_is_not_taken_and_a_retry_works(tmp_path,
                                                                          monkeypatch):
    from kraftcore import layout
    from kraftcore.log import checkpoint

    path = tmp_path / "start-0"
    log = Log.open(path, fsync="never", segment_bytes=4096)
    for base in range(0, 200, 20):
        log.append(values(base, 20), timestamp=TS)
    log.update_high_watermark(log.log_end_offset)
    segments = len(os.listdir(path))
    real = checkpoint.write_offset

    def full_disk(directory, name, offset):
        if name == layout.LOG_START_OFFSET_CHECKPOINT:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(directory, name, offset)

    monkeypatch.setattr(checkpoint, "write_offset", full_disk)
    with pytest.raises(StorageError):
        log.advance_log_start_offset(100)
    assert log.log_start_offset == 0 and len(os.listdir(path)) == segments
    monkeypatch.setattr(checkpoint, "write_offset", real)
    assert log.advance_log_start_offset(100) is True
    assert log.log_start_offset == 100 and len(os.listdir(path)) < segments
    assert checkpoint.read_offset(str(path), layout.LOG_START_OFFSET_CHECKPOINT) == 100
    log.close()
