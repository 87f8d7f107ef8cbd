"""The controller's event queue: every controller action runs as one event, one at a time,
in order (kafka-facts §8.1), so the controller's state needs no locks.

The queue itself runs nothing on its own: its owner calls `run(now_ms)`, which runs every
event that is due, in order, and returns the deadline of the next deferred event (or
None). The runtime calls it from the one thread (or task) that owns the controller; the
simulator calls it after every input. Time is an input: the queue reads no clock.

* `append(name, fn)` runs `fn(now_ms)` after every event already queued;
* `prepend(name, fn)` runs it before them (used for activation);
* `schedule_deferred(tag, deadline_ms, fn)` runs it once `now_ms >= deadline_ms`; a second
  schedule under the same tag replaces the first; `cancel_deferred(tag)` drops it.

Events queued by an event run in the same `run` call. The queue takes at most
`events_max` client operations (`ControllerQueueFullError` beyond): a controller that
cannot keep up refuses work instead of growing without bound. The Raft core's inputs
(commits, leader changes, snapshots) are always taken: refusing one would lose log.
"""

import collections

from kraftcore.errors import ControllerError
from kraftcore.limits import CONTROLLER_QUEUE_EVENTS_MAX

__all__ = ["EventQueue", "ControllerQueueFullError"]

# Kafka's code for a request the controller could not take in time / at all.
_THROTTLING_QUOTA_EXCEEDED = 89


class ControllerQueueFullError(ControllerError):
    def __init__(self, events_max):
        super().__init__(_THROTTLING_QUOTA_EXCEEDED,
                         f"the controller's event queue holds its limit of {events_max} "
                         "events; retry later")


class EventQueue:
    def __init__(self, events_max=CONTROLLER_QUEUE_EVENTS_MAX):
        if events_max < 1:
            raise ValueError(f"events_max must be positive, not {events_max}")
        self.events_max = events_max
        self._events = collections.deque()
        self._deferred = {}  # tag -> (deadline_ms, fn)
        self.events_run = 0
        # Optional, for a runtime that measures: `clock()` (seconds) is read when an event
        # is queued and when it runs, and each wait in between goes to `waits_s` (the
        # owner empties it). None: nothing is read, as in the simulator.
        self.clock = None
        self.waits_s = []

    def __len__(self):
        return len(self._events)

    def _check_room(self):
        if len(self._events) >= self.events_max:
            raise ControllerQueueFullError(self.events_max)

    def append(self, name, fn, *, bounded=True):
        """`bounded=False` is for the inputs that must never be refused (the Raft core's
        commits and leader changes: dropping one would leave a gap in the log)."""
        if bounded:
            self._check_room()
        self._events.append((name, fn, self.clock() if self.clock is not None else 0))

    def prepend(self, name, fn, *, bounded=True):
        if bounded:
            self._check_room()
        self._events.appendleft((name, fn, self.clock() if self.clock is not None else 0))

    def schedule_deferred(self, tag, deadline_ms, fn):
        self._deferred[tag] = (deadline_ms, fn)

    def cancel_deferred(self, tag):
        self._deferred.pop(tag, None)

    def deferred_deadline(self, tag):
        entry = self._deferred.get(tag)
        return None if entry is None else entry[0]

    def clear(self):
        """Drop every queued and deferred event (the controller is shutting down)."""
        self._events.clear()
        self._deferred.clear()

    def next_deadline(self):
        if not self._deferred:
            return None
        return min(deadline for deadline, _ in self._deferred.values())

    def run(self, now_ms):
        """Run every queued event and every deferred event due at `now_ms`; returns the
        next deferred deadline, or None."""
        events = self._events
        clock = self.clock
        while True:
            while events:
                _, fn, queued = events.popleft()
                self.events_run += 1
                if clock is not None:
                    self.waits_s.append(clock() - queued)
                fn(now_ms)
            due = [tag for tag, (deadline, _) in self._deferred.items() if deadline <= now_ms]
            if not due:
                return self.next_deadline()
            due.sort(key=lambda tag: (self._deferred[tag][0], tag))
            for tag in due:
                entry = self._deferred.get(tag)
                if entry is not None and entry[0] <= now_ms:
                    del self._deferred[tag]
                    events.append((tag, entry[1], clock() if clock is not None else 0))
