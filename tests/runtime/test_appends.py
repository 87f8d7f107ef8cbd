"""The Raft driver's append bookkeeping (`kraftcore.runtime.appends` and its compiled twin,
`kraftcore.runtime._appends`), run on both: what an open gather takes, what it leaves to its
caller's checks, and the settling of the calls."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftcore import codec
from kraftcore.runtime import raft_driver

HELPERS = codec.twins("kraftcore.runtime._appends", "kraftcore.runtime.appends")


@pytest.fixture(params=sorted(HELPERS))
def appends(request):
    """One implementation of the helper module."""
    return HELPERS[request.param]


@pytest.mark.smoke
def test_the_driver_runs_the_helper_the_switch_picks():
    expected = "kraftcore.runtime.appends" if codec.IMPLEMENTATION == "py" \
        else "kraftcore.runtime._appends"
    assert raft_driver.AppendGather.__module__ == expected
    assert raft_driver.settle_calls is HELPERS[codec.IMPLEMENTATION].settle_calls


class _Caller:
    """The two callables a gather is given: `kick` and `fallback`, recording their calls."""

    def __init__(self):
        self.kicks = 0
        self.fallbacks = []
        self.kick_error = None

    def kick(self):
        if self.kick_error is not None:
            raise self.kick_error
        self.kicks += 1

    def fallback(self, values, callback):
        self.fallbacks.append((values, callback))
        return "fallback's answer"


def _gather(appends, is_open=True):
    caller = _Caller()
    gather = appends.AppendGather(caller.kick, caller.fallback)
    gather.open = is_open
    return gather, caller


def _waiter(offset, error):
    pass


@pytest.mark.smoke
def test_an_append_that_passes_the_checks_is_gathered_and_kicks_once_per_take(appends):
    gather, caller = _gather(appends)
    def other(offset, error):
        pass
    assert gather.append([b"a", b"b"], _waiter) is None
    assert gather.append([b"c"], other) is None
    assert (gather.values, gather.ends, gather.waiters) == ([b"a", b"b", b"c"], [1, 2],
                                                          [_waiter, other])
    assert caller.kicks == 1 and caller.fallbacks == []
    assert gather.take() == ([b"a", b"b", b"c"], [1, 2], [_waiter, other])
    assert (gather.values, gather.ends, gather.waiters) == ([], [], [])
    gather.append([b"d"], _waiter)
    assert caller.kicks == 2 and gather.take() == ([b"d"], [0], [_waiter])


def test_a_new_gather_is_closed_until_its_owner_opens_it(appends):
    caller = _Caller()
    gather = appends.AppendGather(caller.kick, caller.fallback)
    assert gather.open is False
    assert gather.append([b"a"], _waiter) == "fallback's answer"
    gather.open = True
    assert gather.append([b"b"], _waiter) is None
    gather.open = False
    assert gather.append([b"c"], _waiter) == "fallback's answer"
    assert gather.take() == ([b"b"], [0], [_waiter])


@pytest.mark.parametrize("values, callback, is_open", [
    ([b"a"], None, True),  # a future is the caller's
    ((b"a",), _waiter, True),  # not a list
    ([], _waiter, True),
    ([b"a"], "not callable", True),
    ([b"a"], _waiter, False),
])
def test_every_other_append_goes_to_the_fallback_untouched(appends, values, callback,
                                                           is_open):
    gather, caller = _gather(appends, is_open)
    assert gather.append(values, callback) == "fallback's answer"
    assert caller.fallbacks == [(values, callback)] and caller.kicks == 0
    assert gather.take() == ([], [], [])


def test_a_closed_gather_hands_back_its_waiters_and_gathers_no_more(appends):
    gather, caller = _gather(appends)
    gather.append([b"a"], _waiter)
    assert gather.close() == [_waiter] and gather.open is False
    assert gather.append([b"b"], _waiter) == "fallback's answer"
    assert gather.take() == ([], [], [])


def test_add_gathers_any_iterable_without_checks(appends):
    gather, caller = _gather(appends, is_open=False)
    gather.add((b"a", b"b"), "anything")
    gather.add(iter([b"c"]), None)
    assert gather.take() == ([b"a", b"b", b"c"], [1, 2], ["anything", None])
    assert caller.kicks == 1


def test_values_that_fail_halfway_leave_the_gather_unchanged(appends):
    gather, caller = _gather(appends)
    gather.add([b"a"], _waiter)

    def values():
        yield b"b"
        raise OSError("read failed")

    with pytest.raises(OSError, match="read failed"):
        gather.add(values(), _waiter)
    assert gather.take() == ([b"a"], [0], [_waiter])


def test_a_kick_that_raises_leaves_the_gather_unchanged(appends):
    gather, caller = _gather(appends)
    caller.kick_error = RuntimeError("no running event loop")
    with pytest.raises(RuntimeError, match="no running event loop"):
        gather.append([b"a"], _waiter)
    assert gather.take() == ([], [], [])
    caller.kick_error = None
    gather.append([b"a"], _waiter)
    caller.kick_error = RuntimeError("not called: something is gathered")
    gather.append([b"b"], _waiter)
    assert gather.take() == ([b"a", b"b"], [0, 1], [_waiter, _waiter])


def _recorder(calls, name):
    return lambda offset, error: calls.append((name, offset, error))


def test_settling_calls_each_waiter_in_range_with_its_offset(appends):
    calls = []
    waiters = [_recorder(calls, name) for name in "abcd"]
    appends.settle_calls([1, 2, 5, 6], waiters, 1, 3, 100, None)
    assert calls == [("b", 102, None), ("c", 105, None)]
    calls.clear()
    appends.settle_calls([1, 2, 5, 6], waiters, 2, 99, 0, None)  # as far as lists go
    assert calls == [("c", 5, None), ("d", 6, None)]
    calls.clear()
    appends.settle_calls([1, 2], waiters, 0, 4, 0, None)  # the shorter list ends it
    appends.settle_calls([1, 2, 3], waiters, 2, 2, 0, None)
    appends.settle_calls([], [], 0, 0, 0, None)
    assert calls == [("a", 1, None), ("b", 2, None)]


def test_a_waiter_that_raises_is_reported_and_the_next_one_is_called(appends):
    calls, reported = [], []

    def broken(offset, error):
        raise ValueError(f"bug at {offset}")

    appends.settle_calls([0, 1, 2], [broken, _recorder(calls, "b"), broken], 0, 3, 10,
                              reported.append)
    assert calls == [("b", 11, None)]
    assert [str(exc) for exc in reported] == ["bug at 10", "bug at 12"]


def test_what_is_not_an_exception_stops_the_settling(appends):
    calls = []

    def interrupted(offset, error):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        appends.settle_calls([0, 1], [interrupted, _recorder(calls, "b")], 0, 2, 0,
                                  calls.append)
    assert calls == []


def test_a_waiter_that_shortens_the_lists_ends_the_settling_there(appends):
    calls = []
    ends = [0, 1, 2, 3]
    waiters = [None] * 4

    def shorten(offset, error):
        calls.append(offset)
        del ends[2:]

    waiters[:] = [shorten, _recorder(calls, "b"), _recorder(calls, "c"), _recorder(calls, "d")]
    appends.settle_calls(ends, waiters, 0, 4, 0, None)
    assert calls == [0, ("b", 1, None)]


@pytest.mark.parametrize("start, stop", [(-1, 2), (0, -1)])
def test_a_negative_range_is_refused(appends, start, stop):
    with pytest.raises(ValueError, match="start and stop >= 0"):
        appends.settle_calls([0, 1], [_waiter, _waiter], start, stop, 0, None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.binary(max_size=3), max_size=3),
              st.booleans(), st.booleans()),
    st.tuples(st.just("take")),
    st.tuples(st.just("close"))), max_size=30),
    st.integers(0, 10), st.integers(0, 12), st.integers(-5, 5))
def test_the_implementations_agree(steps, start, stop, shift):
    """The same steps on every implementation: the same answers, gathers and settlings."""
    outcomes = {}
    for name, appends in HELPERS.items():
        caller = _Caller()
        gather = appends.AppendGather(caller.kick, caller.fallback)
        seen, taken = [], []
        for step in steps:
            if step[0] == "append":
                _, values, with_callback, is_open = step
                gather.open = is_open
                seen.append(gather.append(values, _waiter if with_callback else None))
            elif step[0] == "take":
                taken.append(gather.take())
            else:
                taken.append(gather.close())
        ends, waiters = gather.ends, gather.waiters
        settled = []
        appends.settle_calls(ends, [lambda o, e: settled.append(o)] * len(waiters), start,
                             stop, shift, None)
        outcomes[name] = (seen, taken, caller.kicks, len(caller.fallbacks), gather.values,
                          ends, gather.open, settled)
    assert len(set(map(repr, outcomes.values()))) == 1, outcomes
