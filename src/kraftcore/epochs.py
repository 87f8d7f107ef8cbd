"""The leader-epoch cache: which offset each leader epoch of the log starts at (Kafka's
`LeaderEpochFileCache`), and the "end offset for epoch" query followers use to find where
their log diverges from the leader's (KIP-101, KIP-595).

Invariant: epochs and start offsets strictly increase from one entry to the next. The
cache changes only with the log: an append that starts a new epoch, a truncation, a move
of the log start offset. Persisting it is the log's job.
"""

import bisect

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, entries=()):
        self._epochs = [epoch for epoch, _ in entries]
        self._offsets = [offset for _, offset in entries]

    def entries(self):
        return list(zip(self._epochs, self._offsets))

    @property
    def latest_epoch(self):
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def assign(self, epoch, start_offset):
        """Record that `epoch` starts at `start_offset`; True if that changed the cache.

        An epoch not above the latest one is ignored, as Kafka does; callers that must not
        see one (appends) refuse it before it gets here."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        if self._offsets and start_offset <= self._offsets[-1]:
            # A new epoch starting at or before the latest one's start: the entries it
            # covers hold no record of theirs (Kafka drops every entry whose start offset
            # is >= the new one's). Such an entry is left where the log start offset moved
            # up to the log end.
            self.truncate_from_end(start_offset)
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        return True

    def truncate_from_end(self, end_offset):
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        keep = bisect.bisect_left(self._offsets, end_offset)
        changed = keep < len(self._epochs)
        del self._epochs[keep:], self._offsets[keep:]
        return changed

    def truncate_from_start(self, start_offset):
        """Forget epochs that end before `start_offset`; the epoch holding it now starts
        there (the log start offset moved up)."""
        holder = bisect.bisect_right(self._offsets, start_offset) - 1
        if holder < 0:
            return False
        changed = holder > 0 or self._offsets[holder] != start_offset
        del self._epochs[:holder], self._offsets[:holder]
        self._offsets[0] = start_offset
        return changed

    def clear(self):
        changed = bool(self._epochs)
        self._epochs.clear()
        self._offsets.clear()
        return changed

    def epoch_for_offset(self, offset):
        """The epoch the record at `offset` was written in, UNDEFINED_EPOCH if unknown."""
        slot = bisect.bisect_right(self._offsets, offset) - 1
        return self._epochs[slot] if slot >= 0 else UNDEFINED_EPOCH

    def end_offset_for_epoch(self, epoch, log_end_offset):
        """(epoch, end offset) answering "where does `epoch` end in this log?".

        * the latest epoch ends at the log end offset;
        * an older epoch ends where the next higher epoch starts, and the answer names the
          largest epoch <= the one asked (or the one asked, if it is below every epoch);
        * an epoch above every known one, or UNDEFINED_EPOCH: (UNDEFINED_EPOCH,
          UNDEFINED_OFFSET).
        """
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        floor = higher - 1
        found = self._epochs[floor] if floor >= 0 else epoch
        return found, self._offsets[higher]
