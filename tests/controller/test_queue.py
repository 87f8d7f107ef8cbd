"""The controller's event queue: the waits it reports when a runtime gives it a clock."""

from kraftcore.controller.queue import EventQueue


def test_a_queue_given_a_clock_reports_each_events_wait():
    ticks = iter([1.0, 1.5, 4.0, 4.25, 9.0])
    queue = EventQueue()
    queue.clock = lambda: next(ticks)
    ran = []
    queue.append("a", lambda now: ran.append("a"))   # queued at 1.0
    queue.prepend("b", lambda now: ran.append("b"))  # queued at 1.5
    queue.run(0)                                     # b at 4.0, a at 4.25
    assert ran == ["b", "a"] and queue.waits_s == [2.5, 3.25]
    plain = EventQueue()  # no clock: nothing is read or kept
    plain.append("x", lambda now: None)
    plain.run(0)
    assert plain.waits_s == []
