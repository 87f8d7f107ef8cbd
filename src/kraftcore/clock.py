"""Real time for the layers that take time as an input (the log, later the Raft driver).

The log, Raft, controller and metadata code never read a clock themselves: they are given a
callable returning milliseconds, and tests give them a fake one. These are the real ones.
"""

import threading
import time


def wall_clock_ms():
    """Milliseconds since the Unix epoch: record timestamps, segment age, retention."""
    return time.time_ns() // 1_000_000


def monotonic_ms():
    """Milliseconds of a clock that never goes backwards: deadlines and intervals."""
    return time.monotonic_ns() // 1_000_000


class Ticker:
    """Calls `action()` every `interval_ms` on a daemon thread until `stop()` or until the
    action returns False or raises (the exception is kept in `.error`)."""

    def __init__(self, interval_ms, action, name="kraftcore-ticker"):
        self._interval_s = interval_ms / 1000
        self._action = action
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.error = None

    def start(self):
        self._thread.start()
        return self

    def _run(self):
        while not self._stopped.wait(self._interval_s):
            try:
                if self._action() is False:
                    return
            except Exception as exc:  # noqa: BLE001 - reported through .error
                self.error = exc
                return

    def stop(self):
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
