"""Crash safety: a child process appends to a `Log` and is killed with SIGKILL at a random
moment, several times in a row on the same directory.

Every value is derived from its offset, so the parent can check any recovered log without
knowing what the child managed to write. The child prints one `ack <base> <end>` line after
each `append` returns. After each kill the parent copies the directory and opens the copy
(the crashed original is left for the next child, which recovers it itself and reports the
log end offset it found), then checks:

* offsets run contiguously from 0, every record holds the value and key derived from its
  offset, every batch carries the leader epoch its round used and the epoch cache agrees;
* with fsync="always", every acknowledged append is there as the exact batch that was
  acknowledged; at most one unacknowledged batch per round (the append in flight) may be
  there too, intact;
* nothing beyond the end: the log end offset is the end of the last decodable batch, and
  after recovery the segment files hold exactly the batches a read returns, no tail.
"""

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

from kraftcore.log import Log

SEGMENT_BYTES = 64 * 1024
CHILD_RUN_SECONDS = 60  # a child left alone stops by itself after this
START_TIMEOUT = 60  # generous: interpreter start-up on a loaded machine
KILL_TIMEOUT = 30

# The content of the log as a function of offsets, shared by the child and the parent.
CONTENT_SOURCE = r'''
def record_count(base):
    """Records in the batch appended at `base`."""
    return 1 + (base * 2654435761 >> 7) % 24


def value_of(offset):
    return (b"%d:" % offset) * (1 + offset % 9)


def key_of(offset):
    return None if offset % 4 == 0 else b"k%d" % offset
'''
exec(CONTENT_SOURCE)

CHILD_CODE = CONTENT_SOURCE + r'''
import sys, time
from kraftcore.log import Log

path, fsync, epoch, space = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
segment_bytes = int(sys.argv[5])
log = Log.open(path, fsync=fsync, segment_bytes=segment_bytes,
               preallocate=space == "preallocate",
               prefill_bytes=4096 if space == "prefill" else 0, fsync_interval_ms=5)
out = sys.stdout
out.write("open %d %d\n" % (log.log_start_offset, log.log_end_offset))
out.flush()
deadline = time.monotonic() + float(sys.argv[6])
while time.monotonic() < deadline:
    base = log.log_end_offset
    offsets = range(base, base + record_count(base))
    got = log.append([value_of(o) for o in offsets], keys=[key_of(o) for o in offsets],
                     leader_epoch=epoch)
    if got != base:
        sys.stderr.write("append returned base %d, expected %d\n" % (got, base))
        sys.exit(2)
    out.write("ack %d %d\n" % (base, offsets.stop))
    out.flush()
sys.exit(3)  # never killed: the parent is gone or stuck
'''


class Child:
    """One appending child: collects its stdout lines in a thread until it dies."""

    def __init__(self, path, fsync, epoch, space):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD_CODE, str(path), fsync, str(epoch), space,
             str(SEGMENT_BYTES), str(CHILD_RUN_SECONDS)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = []
        self.changed = threading.Condition()
        self.eof = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            if not raw.endswith(b"\n"):  # cut by the kill: never a whole line
                break
            with self.changed:
                self.lines.append(raw.decode().split())
                self.changed.notify_all()
        with self.changed:
            self.eof = True
            self.changed.notify_all()

    def wait_for(self, predicate, timeout):
        """Wait until predicate(lines) holds, the child's output ends, or the timeout."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate(self.lines) and not self.eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            return predicate(self.lines)

    def stderr(self):
        try:
            return self.proc.stderr.read().decode(errors="replace")
        except ValueError:
            return ""

    def kill(self):
        """SIGKILL the child; return (the LEO it opened at, its acks [(base, end)])."""
        if self.proc.poll() is not None:
            pytest.fail(f"the child exited by itself with {self.proc.returncode}: "
                        f"{self.stderr()}")
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=KILL_TIMEOUT)
        self.reader.join(timeout=KILL_TIMEOUT)
        assert not self.reader.is_alive()
        assert self.proc.returncode == -signal.SIGKILL, self.stderr()
        self.proc.stdout.close()
        self.proc.stderr.close()
        opened = [line for line in self.lines if line[0] == "open"]
        assert len(opened) == 1, self.lines[:3]
        acks = [(int(line[1]), int(line[2])) for line in self.lines if line[0] == "ack"]
        return int(opened[0][2]), acks

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=KILL_TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()


def run_round(path, fsync, epoch, space, rng):
    """Start a child, let it append for a random while, SIGKILL it."""
    child = Child(path, fsync, epoch, space)
    try:
        if not child.wait_for(lambda lines: lines, START_TIMEOUT):
            pytest.fail(f"the child did not open the log: {child.stderr()}")
        # Most rounds wait for a first ack, then kill after a random number of further
        # acks or a random time, whichever comes first; some kill right after the open.
        if rng.random() < 0.8:
            if not child.wait_for(lambda lines: len(lines) > 1, START_TIMEOUT):
                pytest.fail(f"the child acknowledged nothing: {child.stderr()}")
            more = rng.randint(0, 400)
            child.wait_for(lambda lines: len(lines) > 1 + more, rng.uniform(0.02, 0.3))
        opened_at, acks = child.kill()
        return opened_at, acks
    finally:
        child.cleanup()


def read_all(log):
    """Every batch from the log start to the log end offset, read in chunks."""
    batches, raw = [], bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 32 * 1024)
        assert len(result) > 0, f"empty read at {offset} below the LEO {log.log_end_offset}"
        assert result.first_offset == offset
        raw += result.records
        batches += result.batches()
        offset = result.next_offset
    assert offset == log.log_end_offset
    assert len(log.read(log.log_end_offset)) == 0
    return batches, bytes(raw)


def segment_files_bytes(path):
    names = sorted(name for name in os.listdir(path) if name.endswith(".log"))
    data = b""
    for name in names:
        with open(os.path.join(path, name), "rb") as f:
            content = f.read()
        # every file is whole batches back to back, nothing after them
        position = 0
        while position < len(content):
            assert len(content) - position >= 61, f"{name}: torn tail at {position}"
            position += 12 + struct.unpack_from(">i", content, position + 8)[0]
        assert position == len(content), f"{name}: a batch runs past the end of the file"
        data += content
    return data


def check_log(path, round_epochs):
    """Open (recover) the log at `path` and check its consistency; return
    (log end offset, {batch base: batch end}, epochs per batch base)."""
    log = Log.open(path, segment_bytes=SEGMENT_BYTES)
    try:
        assert not log.recovery.clean_shutdown
        assert log.log_start_offset == 0
        batches, raw = read_all(log)
        expected_next = 0
        ends, epochs_seen = {}, []
        for batch in batches:
            assert batch.base_offset == expected_next, "offsets are not contiguous"
            assert batch.records_count == record_count(batch.base_offset), \
                f"batch at {batch.base_offset} is not one the child appended"
            offsets = [record.offset for record in batch.records]
            assert offsets == list(range(batch.base_offset, batch.next_offset))
            for record in batch.records:
                assert record.value == value_of(record.offset), f"offset {record.offset}"
                assert record.key == key_of(record.offset), f"offset {record.offset}"
            assert batch.partition_leader_epoch in round_epochs
            ends[batch.base_offset] = batch.next_offset
            epochs_seen.append(batch.partition_leader_epoch)
            expected_next = batch.next_offset
        assert log.log_end_offset == expected_next
        assert epochs_seen == sorted(epochs_seen), "leader epochs go backwards"
        # the epoch cache: one entry per epoch, starting at its first batch (Kafka's rule)
        expected_entries = []
        for batch in batches:
            if not expected_entries or expected_entries[-1][0] != batch.partition_leader_epoch:
                expected_entries.append((batch.partition_leader_epoch, batch.base_offset))
        assert log.epoch_entries() == expected_entries
        leo = log.log_end_offset
    finally:
        log.close()
    # nothing beyond the end: the recovered files hold exactly what the reads returned
    assert segment_files_bytes(path) == raw
    return leo, ends


def crash_rounds(tmp_path, fsync, space, rounds, seed, complete):
    rng = random.Random(seed)
    path = tmp_path / "crash-0"
    acked, unacked_allowed = {}, 0
    previous_leo = 0
    for number in range(rounds):
        epoch = number * 2  # a new leader epoch every round
        opened_at, acks = run_round(path, fsync, epoch, space, rng)
        # the child recovered the same crashed directory the parent checked last round
        assert opened_at == previous_leo, f"round {number}"
        expected_base = opened_at
        for base, end in acks:
            assert base == expected_base
            expected_base = end
            acked[base] = end
        unacked_allowed += 1

        copy = tmp_path / f"copy-{number}"
        shutil.copytree(path, copy)
        leo, ends = check_log(copy, set(range(0, epoch + 1, 2)))
        shutil.rmtree(copy)
        if complete:
            missing = {base: end for base, end in acked.items() if ends.get(base) != end}
            assert not missing, f"round {number}: acknowledged appends lost: {missing}"
            # beyond the acknowledged ones, only the append in flight of each round
            assert len(ends) - len(acked) <= unacked_allowed
        previous_leo = leo
    assert acked, "no child acknowledged anything"
    return previous_leo


SPACE_MODES = ["plain", "preallocate", "prefill"]  # how the log sets up its segment files


@pytest.mark.parametrize("space", SPACE_MODES)
def test_sigkill_loses_no_acknowledged_append(tmp_path, space):
    leo = crash_rounds(tmp_path, "always", space, rounds=8,
                       seed=20240611 + SPACE_MODES.index(space), complete=True)
    assert leo > 0


@pytest.mark.parametrize("fsync", ["never", "interval"])
def test_sigkill_without_fsync_leaves_a_consistent_log(tmp_path, fsync):
    crash_rounds(tmp_path, fsync, "plain", rounds=5, seed=777, complete=False)


def test_content_scheme_is_offset_derived():
    # the checks above rely on these being distinct per offset and varied per batch
    assert len({value_of(o) for o in range(1000)}) == 1000
    assert len({record_count(b) for b in range(1000)}) > 10
