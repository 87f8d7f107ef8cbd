"""The Raft driver's append bookkeeping (`kraftcore.runtime.raft_driver`), pure Python: the
`append` calls gathered for the next batch, and the settling of those calls once the high
watermark has passed them.

A leader with many small appends in flight does this once per operation on the path of
every commit, so the driver runs a compiled twin (`ext/driver_appends.pyx`, built as
`kraftcore.runtime._appends`) without a Python frame per call; `kraftcore.codec.twin` picks
one of the two by the one switch (`KRAFTCORE_PURE`, `KRAFTCORE_REQUIRE_EXT`). This module is
the specification; both behave the same. Neither knows anything of Raft: whether a call may
be gathered is the `open` flag, which the driver keeps true exactly while its node leads and
it runs.

* `AppendGather(kick, fallback)`: `append(values, callback)` gathers a call when it needs no
  check beyond these: the gather is `open`, `values` is a non-empty list and `callback` is
  callable. Any other call goes to `fallback(values, callback)`, whose answer `append`
  returns: the caller's own checks, errors and futures, ending in `add`. `add(values,
  waiter)` gathers without a check: the values (any iterable) go after the ones already
  gathered, with the index of the call's last value in `ends` and its waiter in `waiters`;
  the first call gathered after a `take` calls `kick()` first (a `kick` that raises, or
  values that cannot be iterated to the end, leave the gather unchanged). `open` starts
  false and is the caller's to set. `take()` returns `(values, ends, waiters)` and empties
  the gather; `close()` does the same, returns the waiters only, and sets `open` false.
* `settle_calls(ends, waiters, start, stop, shift, on_error)` calls
  `waiters[k](ends[k] + shift, None)` for k in `range(start, stop)` (as far as both lists
  go), in order; an Exception a waiter raises goes to `on_error(exc)` and the next waiter
  is called.
"""


class AppendGather:
    """The append calls gathered for the next batch (module docstring)."""

    __slots__ = ("values", "ends", "waiters", "open", "_kick", "_fallback")

    def __init__(self, kick, fallback):
        self.values = []
        self.ends = []
        self.waiters = []
        self.open = False
        self._kick = kick
        self._fallback = fallback

    def append(self, values, callback=None):
        if (not self.open or callback is None or type(values) is not list or not values
                or not callable(callback)):
            return self._fallback(values, callback)
        self.add(values, callback)
        return None

    def add(self, values, waiter):
        gathered = self.values
        if type(values) is not list:
            values = list(values)  # whole before anything changes
        if not gathered:
            self._kick()
        gathered += values
        self.ends.append(len(gathered) - 1)
        self.waiters.append(waiter)

    def take(self):
        taken = self.values, self.ends, self.waiters
        self.values, self.ends, self.waiters = [], [], []
        return taken

    def close(self):
        self.open = False
        return self.take()[2]


def settle_calls(ends, waiters, start, stop, shift, on_error):
    """Call each waiter of `ends[start:stop]` with its offset (module docstring)."""
    if start < 0 or stop < 0:
        raise ValueError(f"settle_calls() needs a start and stop >= 0, not {start}, {stop}")
    k = start
    # the lengths are read on every step: a waiter could shorten a list it holds
    while k < stop and k < len(ends) and k < len(waiters):
        end, waiter = ends[k], waiters[k]
        k += 1
        try:
            waiter(end + shift, None)
        except Exception as exc:  # a waiter's bug must not stop the others
            on_error(exc)
