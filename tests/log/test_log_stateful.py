"""A stateful property test: random sequences of appends (leader and follower), high
watermark moves, truncations, log start moves, rolls, clean closes and crashes with reopen,
checked after every step against an in-memory model of batches."""

import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kraftcore import codec
from kraftcore.errors import InvalidOffsetError
from kraftcore.log import Log

pytestmark = pytest.mark.smoke

SETTINGS = dict(segment_bytes=4000, index_interval_bytes=150, fsync="never")


class LogMachine(RuleBasedStateMachine):
    @initialize()
    def start(self):
        self.dir = tempfile.mkdtemp(prefix="kraftcore-stateful-")
        self.path = f"{self.dir}/model-0"
        self.log = Log.open(self.path, **SETTINGS)
        self.batches = []  # (base offset, [values], epoch)
        self.log_start = 0
        self.hw = 0
        self.counter = 0
        # An epoch entry that starts at the log end (only when the log is empty after its
        # start moved to its end) is dropped on reopen, as Kafka's loader does: it cannot
        # tell it from an entry whose records a crash tore off; and by a truncation that
        # empties the log, as Kafka's truncateFromEnd drops every entry starting at or after
        # the new end. The next append restores it.
        self.empty_log_epoch_dropped = False

    def teardown(self):
        if hasattr(self, "log"):
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ model

    @property
    def leo(self):
        if not self.batches:
            return self.log_start
        base, vals, _ = self.batches[-1]
        return base + len(vals)

    @property
    def latest_epoch(self):
        return max((epoch for _, _, epoch in self.batches), default=-1)

    def _values(self, n, size):
        self.counter += 1
        return [f"{self.counter}.{i}|".encode().ljust(size, b"#") for i in range(n)]

    # ------------------------------------------------------------------ rules

    @rule(n=st.integers(1, 20), size=st.integers(0, 100), bump=st.integers(0, 2),
          encoded=st.booleans())
    def append(self, n, size, bump, encoded):
        epoch = max(self.latest_epoch, 0) + bump
        vals = self._values(n, size)
        records = codec.encode_batch(vals, base_offset=77) if encoded else vals
        assert self.log.append(records, leader_epoch=epoch) == self.leo
        self.batches.append((self.leo, vals, epoch))
        self.empty_log_epoch_dropped = False

    @rule(n=st.integers(1, 10), batches=st.integers(1, 3), bump=st.integers(0, 1))
    def append_as_follower(self, n, batches, bump):
        epoch = max(self.latest_epoch, 0) + bump
        data, base, added = b"", self.leo, []
        for _ in range(batches):
            vals = self._values(n, 40)
            data += codec.encode_batch(vals, base_offset=base, leader_epoch=epoch)
            added.append((base, vals, epoch))
            base += n
        assert self.log.append_as_follower(data) == self.leo
        self.batches.extend(added)
        self.empty_log_epoch_dropped = self.empty_log_epoch_dropped and not added

    @rule(data=st.data())
    def move_high_watermark(self, data):
        self.hw = data.draw(st.integers(self.log_start, self.leo))
        self.log.update_high_watermark(self.hw)

    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(max(self.log_start - 2, 0), self.leo + 2))
        holder = next((b for b in self.batches if b[0] + len(b[1]) > offset), None)
        cut = holder[0] if holder else offset
        if offset >= self.leo:
            assert self.log.truncate_to(offset) is False
        elif offset < self.log_start or offset < self.hw or cut < self.hw:
            with pytest.raises(InvalidOffsetError):
                self.log.truncate_to(offset)
        else:
            assert self.log.truncate_to(offset) is True
            self.batches = [b for b in self.batches if b[0] < cut]
            self.empty_log_epoch_dropped |= self.log_start == self.leo

    @rule(data=st.data())
    def advance_log_start(self, data):
        offset = data.draw(st.integers(0, self.leo))
        if offset > self.hw and offset > self.log_start:
            with pytest.raises(InvalidOffsetError):
                self.log.advance_log_start_offset(offset)
        else:
            self.log.advance_log_start_offset(offset)
            self.log_start = max(self.log_start, offset)

    @rule()
    def roll(self):
        self.log.roll()

    @rule()
    def close_and_reopen(self):
        self.log.close()
        self.log = Log.open(self.path, **SETTINGS)
        self.empty_log_epoch_dropped = self.empty_log_epoch_dropped or self.log_start == self.leo
        assert self.log.recovery.clean_shutdown

    @rule()
    def crash_and_reopen(self):
        self.log._release()  # the process dies; the OS keeps what was written
        self.log = Log.open(self.path, **SETTINGS)
        self.empty_log_epoch_dropped = self.empty_log_epoch_dropped or self.log_start == self.leo
        assert not self.log.recovery.clean_shutdown
        assert self.log.recovery.truncated_bytes == 0
        self.hw = self.log.high_watermark  # only the checkpointed value survives a crash
        assert self.log_start <= self.hw <= self.leo

    # ------------------------------------------------------------------ checks

    @invariant()
    def offsets_match(self):
        if not hasattr(self, "log"):
            return
        assert (self.log.log_start_offset, self.log.high_watermark, self.log.log_end_offset) == (
            self.log_start, self.hw, self.leo)

    @invariant()
    def contents_match(self):
        if not hasattr(self, "log"):
            return
        expected = [(base + i, v) for base, vals, _ in self.batches for i, v in enumerate(vals)
                    if base + i >= self.log_start]
        got, offset = [], self.log_start
        while offset < self.leo:
            result = self.log.read(offset, 700)
            assert len(result) > 0
            for batch in result.batches():
                got.extend((r.offset, r.value) for r in batch.records if r.offset >= offset)
            offset = result.next_offset
        assert got == expected

    @invariant()
    def epochs_match(self):
        if not hasattr(self, "log"):
            return
        full = []
        for base, _, epoch in self.batches:
            if not full or epoch > full[-1][0]:
                full.append((epoch, base))
        start = self.log_start
        kept = [(e, max(s, start)) for i, (e, s) in enumerate(full)
                if i + 1 == len(full) or full[i + 1][1] > start]
        if self.empty_log_epoch_dropped:
            kept = [(e, s) for e, s in kept if s < self.leo]
        assert self.log.epoch_entries() == kept


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
