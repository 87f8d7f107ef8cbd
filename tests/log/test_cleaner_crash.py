"""Crash safety of a clean (`kraftcore.log.cleaner` and `Log.replace_segments`): whatever
step of the file dance a crash interrupts — `.cleaned` files half written or synced, some
renamed to `.swap`, the replaced segments some or all renamed to `.deleted`, the swap
files some or all at their final names, the `.deleted` files partly removed — the log
opens readable, and each group of segments the clean rewrote reads either as before the
clean or as after it: the same offsets with the same keys and values, nothing lost that
the clean keeps, no offset twice.

Two ways: the directory as it is after every rename, removal and directory sync of a
clean, copied and opened (every step, in process); and a child process that cleans and
kills itself with SIGKILL at a chosen step of the dance (a real kill: no `finally` runs).
"""

import os
import shutil
import signal
import subprocess
import sys

import pytest

from kraftcore.log import Log, cleaner, fileio

SETTINGS = dict(segment_bytes=600, index_interval_bytes=100, fsync="never", compact=True)
KILL_TIMEOUT = 60

# The log both ways build: record i of key k<i % 7>, value derived from the offset, a
# tombstone now and then; then rolled and committed.
BUILD_SOURCE = r'''
def build(log, count=160):
    for i in range(count):
        value = None if i % 23 == 5 else b"value-%d" % i
        log.append([value], keys=[b"k%d" % (i % 7)], timestamp=1000 + i)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
'''
exec(BUILD_SOURCE)


def records_of(log):
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        read = log.read(offset, 1 << 20)
        assert len(read)
        for batch in read.batches():
            out += [(r.offset, r.key, r.value) for r in batch.records]
        offset = read.next_offset
    return out


def snapshot(source, target):
    os.makedirs(target)
    for name in os.listdir(source):
        if name != ".lock":
            shutil.copy2(os.path.join(source, name), os.path.join(target, name))


class Expected:
    """The records before and after the clean, and the groups it rewrote."""

    def __init__(self, tmp_path, count=160):
        path = tmp_path / "reference"
        with Log.open(path, **SETTINGS) as log:
            build(log, count)
            self.before = records_of(log)
            result = cleaner.clean(log, 5000, force=True)
            self.after = records_of(log)
            self.end = result.end_offset
            bases = [b for b in log.segment_base_offsets if b < self.end]
            self.groups = list(zip(bases, bases[1:] + [self.end]))
        assert len(self.groups) > 2 and len(self.after) < len(self.before)

    def check(self, path, what):
        """Open the log at `path` (recovering it) and check it against the two states."""
        with Log.open(path, **SETTINGS) as log:
            got = records_of(log)
            report = log.recovery
        offsets = [r[0] for r in got]
        assert offsets == sorted(set(offsets)), f"{what}: an offset twice or out of order"
        for start, stop in self.groups:
            part = [r for r in got if start <= r[0] < stop]
            old = [r for r in self.before if start <= r[0] < stop]
            new = [r for r in self.after if start <= r[0] < stop]
            assert part in (old, new), f"{what}: offsets [{start}, {stop}) read {part}"
        assert [r for r in got if r[0] >= self.end] == [
            r for r in self.before if r[0] >= self.end], what
        assert report.gap is None and not report.set_aside, (what, report)
        return got, report


def test_every_step_of_the_swap_recovers_to_the_old_or_the_new_segments(tmp_path,
                                                                        monkeypatch):
    expected = Expected(tmp_path, 30)  # a few groups: every step is copied and opened
    path = tmp_path / "log"
    log = Log.open(path, **SETTINGS)
    build(log, 30)
    steps = []

    def taking_snapshots(name):
        real = getattr(fileio, name)

        def call(*args):
            result = real(*args)
            target = tmp_path / f"step-{len(steps):03d}"
            steps.append(f"after {name}{tuple(os.path.basename(str(a)) for a in args)}")
            snapshot(path, target)
            return result
        monkeypatch.setattr(fileio, name, call)

    for name in ("rename", "unlink", "sync_dir"):
        taking_snapshots(name)
    cleaner.clean(log, 5000, force=True)
    monkeypatch.undo()
    log.close()
    assert any(".swap" in step for step in steps) and any(".deleted" in s for s in steps)
    completed = undone = 0
    for i, step in enumerate(steps):
        got, report = expected.check(tmp_path / f"step-{i:03d}", step)
        completed += any("completed" in s for s in report.swaps)
        undone += any("undone" in s for s in report.swaps)
        assert not any(name.endswith((".cleaned", ".swap", ".deleted"))
                       for name in os.listdir(tmp_path / f"step-{i:03d}")), step
    assert completed > 0 and undone == 0
    got, _ = expected.check(path, "after the clean")
    assert got == expected.after


def test_a_swap_that_does_not_read_back_is_undone(tmp_path, monkeypatch):
    """A `.swap` damaged after its sync (the disk's fault): the segments it was to replace
    come back from their `.deleted` files and the swap goes."""
    expected = Expected(tmp_path)
    path = tmp_path / "log"
    log = Log.open(path, **SETTINGS)
    build(log)
    real = fileio.rename
    taken = []

    def rename(source, target):
        real(source, target)
        # the first group's last rename (its `.log.swap` to `.log`): the copy is the
        # directory just before it, the swap's indexes at their final names already
        if str(source).endswith(".log.swap") and not taken:
            taken.append(True)
            snapshot(path, tmp_path / "crashed")
            # undo this one rename in the copy: the crash came just before it
            os.rename(tmp_path / "crashed" / os.path.basename(str(target)),
                      tmp_path / "crashed" / os.path.basename(str(source)))

    monkeypatch.setattr(fileio, "rename", rename)
    cleaner.clean(log, 5000, force=True)
    monkeypatch.undo()
    log.close()
    crashed = tmp_path / "crashed"
    swap = next(n for n in os.listdir(crashed) if n.endswith(".log.swap"))
    with open(crashed / swap, "r+b") as f:
        f.seek(30)
        byte = f.read(1)
        f.seek(30)
        f.write(bytes([byte[0] ^ 0xFF]))
    got, report = expected.check(crashed, "a damaged swap")
    assert any("undone" in s for s in report.swaps), report.swaps
    start, stop = expected.groups[0]
    assert [r for r in got if start <= r[0] < stop] == [
        r for r in expected.before if start <= r[0] < stop]


CHILD = BUILD_SOURCE + r'''
import os, signal, sys
from kraftcore.log import Log, cleaner, fileio

path, kill_at, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
settings = dict(segment_bytes=600, index_interval_bytes=100, fsync="never", compact=True)
log = Log.open(path, **settings)
if log.log_end_offset == 0:
    build(log, count)
    log.flush()
calls = [0]
real_rename = fileio.rename

def rename(source, target):
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)  # before this rename: no cleanup runs
    real_rename(source, target)

fileio.rename = rename
cleaner.clean(log, 5000, force=True)
sys.exit(3)  # the kill did not come
'''


def run_child(path, kill_at, count=160):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(kill_at), str(count)],
                          capture_output=True, timeout=KILL_TIMEOUT)
    return proc.returncode, proc.stderr.decode(errors="replace")


@pytest.mark.parametrize("kill_at", [2, 5, 9])
def test_a_clean_killed_in_the_middle_of_a_swap_reopens_whole(tmp_path, kill_at):
    """SIGKILL at a rename of the dance: 2 is inside `.cleaned` -> `.swap`, 5 among the old
    segments' `.deleted` renames, 9 in a later group. A second clean then finishes."""
    expected = Expected(tmp_path)
    path = tmp_path / "log"
    code, err = run_child(path, kill_at)
    assert code == -signal.SIGKILL, err
    assert any(name.endswith((".cleaned", ".swap", ".deleted")) for name in os.listdir(path))
    expected.check(path, f"killed at rename {kill_at}")
    with Log.open(path, **SETTINGS) as log:
        cleaner.clean(log, 5000, force=True)
    got, _ = expected.check(path, "cleaned again")
    assert [r for r in got if r[0] < expected.end] == [
        r for r in expected.after if r[0] < expected.end]


@pytest.mark.slow
def test_a_clean_killed_at_every_rename_reopens_whole(tmp_path):
    expected = Expected(tmp_path, 60)
    kill_at = 1
    while True:
        path = tmp_path / f"log-{kill_at}"
        code, err = run_child(path, kill_at, 60)
        if code == 3:
            break  # the clean made fewer renames: every one was a kill point
        assert code == -signal.SIGKILL, err
        expected.check(path, f"killed at rename {kill_at}")
        kill_at += 1
    assert kill_at > 10
