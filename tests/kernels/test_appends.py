"""The append kernel (`kraftcore._py.appends` and its native twin): what a leader's
`append` gathers, what it leaves to its caller's checks, and the settling of the calls."""

import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import IMPLEMENTATIONS


class _Caller:
    """The two callables a gather is given: `kick` and `fallback`, recording their calls."""

    def __init__(self, role="leader"):
        self.quorum = types.SimpleNamespace(role=role)
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


def _gather(impl, role="leader"):
    caller = _Caller(role)
    return impl.appends.AppendGather(caller.quorum, caller.kick, caller.fallback), caller


def _waiter(offset, error):
    pass


@pytest.mark.smoke
def test_an_append_that_passes_the_checks_is_gathered_and_kicks_once_per_take(impl):
    gather, caller = _gather(impl)
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


@pytest.mark.parametrize("values, callback, role", [
    ([b"a"], None, "leader"),  # a future is the caller's
    ((b"a",), _waiter, "leader"),  # not a list
    ([], _waiter, "leader"),
    ([b"a"], "not callable", "leader"),
    ([b"a"], _waiter, "follower"),
    ([b"a"], _waiter, "candidate"),
])
def test_every_other_append_goes_to_the_fallback_untouched(impl, values, callback, role):
    gather, caller = _gather(impl, role)
    assert gather.append(values, callback) == "fallback's answer"
    assert caller.fallbacks == [(values, callback)] and caller.kicks == 0
    assert gather.take() == ([], [], [])


def test_a_closed_gather_hands_back_its_waiters_and_gathers_no_more(impl):
    gather, caller = _gather(impl)
    gather.append([b"a"], _waiter)
    assert gather.close() == [_waiter] and gather.closed
    assert gather.append([b"b"], _waiter) == "fallback's answer"
    assert gather.take() == ([], [], [])


def test_add_gathers_any_iterable_without_checks(impl):
    gather, caller = _gather(impl, "follower")
    gather.add((b"a", b"b"), "anything")
    gather.add(iter([b"c"]), None)
    assert gather.take() == ([b"a", b"b", b"c"], [1, 2], ["anything", None])
    assert caller.kicks == 1


def test_values_that_fail_halfway_leave_the_gather_unchanged(impl):
    gather, caller = _gather(impl)
    gather.add([b"a"], _waiter)

    def values():
        yield b"b"
        raise OSError("read failed")

    with pytest.raises(OSError, match="read failed"):
        gather.add(values(), _waiter)
    assert gather.take() == ([b"a"], [0], [_waiter])


def test_a_kick_that_raises_leaves_the_gather_unchanged(impl):
    gather, caller = _gather(impl)
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


def test_settling_calls_each_waiter_in_range_with_its_offset(impl):
    calls = []
    waiters = [_recorder(calls, name) for name in "abcd"]
    impl.appends.settle_calls([1, 2, 5, 6], waiters, 1, 3, 100, None)
    assert calls == [("b", 102, None), ("c", 105, None)]
    calls.clear()
    impl.appends.settle_calls([1, 2, 5, 6], waiters, 2, 99, 0, None)  # as far as lists go
    assert calls == [("c", 5, None), ("d", 6, None)]
    calls.clear()
    impl.appends.settle_calls([1, 2], waiters, 0, 4, 0, None)  # the shorter list ends it
    impl.appends.settle_calls([1, 2, 3], waiters, 2, 2, 0, None)
    impl.appends.settle_calls([], [], 0, 0, 0, None)
    assert calls == [("a", 1, None), ("b", 2, None)]


def test_a_waiter_that_raises_is_reported_and_the_next_one_is_called(impl):
    calls, reported = [], []

    def broken(offset, error):
        raise ValueError(f"bug at {offset}")

    impl.appends.settle_calls([0, 1, 2], [broken, _recorder(calls, "b"), broken], 0, 3, 10,
                              reported.append)
    assert calls == [("b", 11, None)]
    assert [str(exc) for exc in reported] == ["bug at 10", "bug at 12"]


def test_what_is_not_an_exception_stops_the_settling(impl):
    calls = []

    def interrupted(offset, error):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        impl.appends.settle_calls([0, 1], [interrupted, _recorder(calls, "b")], 0, 2, 0,
                                  calls.append)
    assert calls == []


def test_a_waiter_that_shortens_the_lists_ends_the_settling_there(impl):
    calls = []
    ends = [0, 1, 2, 3]
    waiters = [None] * 4

    def shorten(offset, error):
        calls.append(offset)
        del ends[2:]

    waiters[:] = [shorten, _recorder(calls, "b"), _recorder(calls, "c"), _recorder(calls, "d")]
    impl.appends.settle_calls(ends, waiters, 0, 4, 0, None)
    assert calls == [0, ("b", 1, None)]


@pytest.mark.parametrize("start, stop", [(-1, 2), (0, -1)])
def test_a_negative_range_is_refused(impl, start, stop):
    with pytest.raises(ValueError, match="start and stop >= 0"):
        impl.appends.settle_calls([0, 1], [_waiter, _waiter], start, stop, 0, None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.binary(max_size=3), max_size=3),
              st.booleans(), st.sampled_from(["leader", "follower"])),
    st.tuples(st.just("take")),
    st.tuples(st.just("close"))), max_size=30),
    st.integers(0, 10), st.integers(0, 12), st.integers(-5, 5))
def test_the_implementations_agree(steps, start, stop, shift):
    """The same steps on every implementation: the same answers, gathers and settlings."""
    outcomes = {}
    for name, modules in IMPLEMENTATIONS.items():
        appends = modules[5]
        caller = _Caller()
        gather = appends.AppendGather(caller.quorum, caller.kick, caller.fallback)
        seen, taken = [], []
        for step in steps:
            if step[0] == "append":
                _, values, with_callback, role = step
                caller.quorum.role = role
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
                          ends, gather.closed, settled)
    assert len(set(map(repr, outcomes.values()))) == 1, outcomes
