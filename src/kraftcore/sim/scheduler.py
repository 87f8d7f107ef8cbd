"""The simulator's clock and event loop, and the one source of its randomness.

`Scheduler` owns simulated time: a heap of `(time_ms, sequence, callback, args)`. Events run
in time order, and events due at the same millisecond run in the order they were scheduled
(the sequence number breaks ties), so a run depends only on its seed. Nothing here reads a
real clock; time moves only when the next event is popped, and never backwards.

`Rngs` derives one `random.Random` per purpose (parameters, network, each node, the
workload, the faults) from a single seed, in a fixed order. Giving each purpose its own
stream keeps, for example, an extra network draw from shifting every fault that follows.
"""

import heapq
import random

from kraftcore.limits import SIM_EVENTS_PER_RUN_MAX



class Scheduler:
    """A deterministic discrete-event loop over simulated milliseconds."""

    __slots__ = ("now_ms", "events_run", "_heap", "_sequence")

    def __init__(self, start_ms=0):
        if start_ms < 0:
            raise ValueError(f"start_ms must be >= 0, not {start_ms}")
        self.now_ms = start_ms
        self.events_run = 0
        self._heap = []
        self._sequence = 0

    def at(self, time_ms, callback, *args):
        """Run `callback(*args)` at `time_ms` (not before the current time)."""
        if time_ms < self.now_ms:
            raise ValueError(f"cannot schedule at {time_ms} ms: the clock is at {self.now_ms} ms")
        heapq.heappush(self._heap, (time_ms, self._sequence, callback, args))
        self._sequence += 1

    def after(self, delay_ms, callback, *args):
        """Run `callback(*args)` `delay_ms` from now."""
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, not {delay_ms}")
        self.at(self.now_ms + delay_ms, callback, *args)

    @property
    def pending(self):
        """How many events are scheduled."""
        return len(self._heap)

    @property
    def next_time_ms(self):
        """When the next event is due, or None when there is none."""
        return self._heap[0][0] if self._heap else None

    def run_next(self):
        """Run the earliest event; False when there was none."""
        if not self._heap:
            return False
        time_ms, _, callback, args = heapq.heappop(self._heap)
        self.now_ms = time_ms
        self.events_run += 1
        callback(*args)
        return True

    def run_until(self, end_ms, stop=None, after_event=None):
        """Run events due at or before `end_ms`, then leave the clock at `end_ms`.

        `after_event()` runs after each event (the invariant checks); `stop()` is asked after
        each event and ends the run early when true. Returns the number of events run."""
        ran = 0
        heap = self._heap
        while heap and heap[0][0] <= end_ms:
            if ran >= SIM_EVENTS_PER_RUN_MAX:
                raise RuntimeError(f"more than {SIM_EVENTS_PER_RUN_MAX} events before {end_ms} ms")
            self.run_next()
            ran += 1
            if after_event is not None:
                after_event()
            if stop is not None and stop():
                return ran
        if end_ms > self.now_ms:
            self.now_ms = end_ms
        return ran


class Rngs:
    """Per-purpose random generators derived from one seed.

    `child()` draws the next child seed from the master generator, so the children depend
    on the seed and on the order of the calls, which the simulator keeps fixed."""

    def __init__(self, seed):
        self.seed = seed
        self._master = random.Random(seed)

    def child(self):
        return random.Random(self._master.getrandbits(64))
