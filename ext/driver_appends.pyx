"""The Raft driver's append bookkeeping, compiled as `kraftcore.runtime._appends`: native twin
of `kraftcore.runtime.appends` (read its docstring for the contract). The checks of an
`append` call, its gathering and the settling loop run here without a Python frame per
call; the callers' waiters are still called one by one. It knows nothing of Raft: the
driver sets `open`.
"""
cimport cython


@cython.final
cdef class AppendGather:
    """The append calls gathered for the next batch (`kraftcore.runtime.appends`)."""

    cdef readonly list values
    cdef readonly list ends
    cdef readonly list waiters
    cdef public bint open
    cdef object _kick
    cdef object _fallback

    def __init__(self, kick, fallback):
        self.values = []
        self.ends = []
        self.waiters = []
        self.open = False
        self._kick = kick
        self._fallback = fallback

    def append(self, values, callback=None):
        if (not self.open or callback is None or type(values) is not list
                or not (<list>values) or not callable(callback)):
            return self._fallback(values, callback)
        self._add(<list>values, callback)
        return None

    def add(self, values, waiter):
        self._add(values, waiter)

    cdef inline void _add(self, values, waiter) except *:
        cdef list gathered = self.values
        if type(values) is not list:
            values = list(values)  # whole before anything changes
        if not gathered:
            self._kick()
        gathered.extend(<list>values)
        self.ends.append(len(gathered) - 1)
        self.waiters.append(waiter)

    def take(self):
        taken = (self.values, self.ends, self.waiters)
        self.values = []
        self.ends = []
        self.waiters = []
        return taken

    def close(self):
        self.open = False
        return self.take()[2]


@cython.wraparound(False)
def settle_calls(list ends not None, list waiters not None, Py_ssize_t start,
                 Py_ssize_t stop, shift, on_error):
    """Call each waiter of `ends[start:stop]` with its offset (`kraftcore.runtime.appends`)."""
    cdef Py_ssize_t k
    if start < 0 or stop < 0:
        raise ValueError(f"settle_calls() needs a start and stop >= 0, not {start}, {stop}")
    k = start
    # the lengths are read on every step: a waiter could shorten a list it holds
    while k < stop and k < len(ends) and k < len(waiters):
        end = ends[k]
        waiter = waiters[k]
        k += 1
        try:
            waiter(end + shift, None)
        except Exception as exc:  # a waiter's bug must not stop the others
            on_error(exc)
