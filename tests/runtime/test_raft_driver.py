"""The Raft driver over real sockets and files: three cores on 127.0.0.1 elect a leader,
commit what it proposes durably, recover it after a restart, and stop on a storage
failure."""

import asyncio
import collections
import dataclasses
import os
import types

import pytest

from kraftcore.errors import InvalidAppendError, LogClosedError, NotLeaderError, StorageError
from kraftcore.layout import BATCH_HEADER_BYTES, RECORD_OVERHEAD_BYTES_MAX
from kraftcore.log import quorum_state
from kraftcore.raft import rpc
from kraftcore.runtime import raft_driver
from kraftcore.runtime.raft_driver import RaftDriver

from tests.harness.drivers import CONFIG, WAIT_S, Quorum, run

def test_three_drivers_elect_a_leader_and_commit_its_proposals(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            last = leader.propose([b"value-%d" % i for i in range(50)])
            await quorum.until(lambda: all(
                any(end >= last for _, end in quorum.applied[i]) for i in quorum.ids))
            # Every node applied the same committed batches, in order.
            assert quorum.applied[1] == quorum.applied[2] == quorum.applied[3]
            assert leader.fsyncs > 0
            # The election state is on disk, in Kafka's quorum-state file.
            state = quorum_state.read(os.path.join(str(tmp_path), str(leader.node_id),
                                                   "__cluster_metadata-0"))
            assert state.leader_id == leader.node_id
    run(scenario())


def test_committed_records_survive_a_restart_of_every_node(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            last = leader.propose([b"kept"] * 10)
            await quorum.until(lambda: leader.core.high_watermark is not None
                               and leader.core.high_watermark > last)
            for i in quorum.ids:
                await quorum.stop_driver(i)
            for i in quorum.ids:
                quorum.start_driver(i)
            await quorum.leader()
            await quorum.until(lambda: all(
                any(end >= last for _, end in quorum.applied[i]) for i in quorum.ids))
    run(scenario())


def test_a_storage_failure_stops_the_node(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            follower = next(d for d in quorum.drivers.values() if d is not leader)

            def broken_flush():
                raise StorageError("fsync failed: EIO")
            follower.storage.flush = broken_flush
            leader.propose([b"x"])
            await quorum.until(lambda: follower.node_id in quorum.fatal)
            assert isinstance(follower.failed, StorageError)
            with pytest.raises(StorageError):
                await follower.handle_request(None)
    run(scenario())


def test_appends_of_one_turn_share_a_batch_and_complete_on_commit(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            start = leader.core.log_end_offset
            futures = [leader.append([b"a%d" % i, b"b%d" % i]) for i in range(300)]
            # Nothing is proposed before the drive; then one batch holds all 600 values.
            assert leader.core.log_end_offset == start
            offsets = await asyncio.gather(*futures)
            assert offsets == [start + 2 * i + 1 for i in range(300)]
            assert leader.core.high_watermark > offsets[-1]
            assert (start, start + 599) in quorum.applied[leader.node_id]
            follower = next(d for d in quorum.drivers.values() if d is not leader)
            with pytest.raises(NotLeaderError):
                follower.append([b"x"])
            with pytest.raises(ValueError):
                leader.append([])
    run(scenario())


def test_appends_above_the_batch_limits_are_split(tmp_path, monkeypatch):
    monkeypatch.setattr(raft_driver, "RAFT_DRIVER_APPEND_BATCH_RECORDS_MAX", 7)
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            start = leader.core.log_end_offset
            futures = [leader.append([b"v"] * 5) for _ in range(4)]
            assert await asyncio.gather(*futures) == [start + 4, start + 9, start + 14,
                                                      start + 19]
            mine = [b for b in quorum.applied[leader.node_id] if b[0] >= start]
            assert mine == [(start, start + 6), (start + 7, start + 13),
                            (start + 14, start + 19)]
    run(scenario())


def test_appends_fail_when_the_leader_resigns_before_they_commit(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            others = [d for d in quorum.drivers.values() if d is not leader]
            for other in others:  # the followers stop answering: nothing can commit
                await quorum.stop_driver(other.node_id)
            future = leader.append([b"lost?"])
            await asyncio.sleep(0.05)
            assert not future.done()
            leader.resign()
            with pytest.raises(NotLeaderError):
                await future
    run(scenario())


def _small_batches(driver, batch_bytes_max=4096):
    driver.core.config = dataclasses.replace(driver.core.config,
                                             batch_bytes_max=batch_bytes_max)


def test_a_call_with_a_refused_value_fails_and_the_calls_around_it_commit(tmp_path):
    """A value the core refuses (its batch would pass batch_bytes_max) fails its own call,
    whose other values are then not proposed; the calls before and after commit."""
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            _small_batches(leader)
            start = leader.core.log_end_offset
            before = leader.append([b"a"])
            refused = leader.append([b"x" * 5000, b"y"])
            after = leader.append([b"c"])
            assert await before == start
            with pytest.raises(InvalidAppendError):
                await refused
            assert await after == start + 1  # b"y" was dropped with its call
            mine = [b for b in quorum.applied[leader.node_id] if b[0] >= start]
            assert mine == [(start, start), (start + 1, start + 1)]
    run(scenario())


def test_appends_are_batched_within_the_cores_batch_size(tmp_path):
    """Many small values, each call fitting easily: the batches `append` builds stay under
    batch_bytes_max once encoded (their framing counted), so every call commits."""
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            _small_batches(leader)
            start = leader.core.log_end_offset
            offsets = await asyncio.gather(*[leader.append([b"v" * 50]) for _ in range(300)])
            assert offsets == list(range(start, start + 300))
            mine = [b for b in quorum.applied[leader.node_id] if b[0] >= start]
            assert len(mine) > 1 and mine[-1][1] == start + 299
    run(scenario())


def test_a_storage_error_while_proposing_fails_every_waiting_append(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()

            def broken_append(batch, epoch):
                raise StorageError("write failed: ENOSPC")
            leader.storage.append_as_leader = broken_append
            futures = [leader.append([b"a"]), leader.append([b"b"])]
            results = await asyncio.wait_for(
                asyncio.gather(*futures, return_exceptions=True), 5)
            assert all(isinstance(r, StorageError) for r in results), results
            assert isinstance(leader.failed, StorageError)
    run(scenario())


def test_a_closed_driver_refuses_appends_and_requests(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            pending = leader.append([b"a"])
            await quorum.stop_driver(leader.node_id)
            with pytest.raises(NotLeaderError):
                await pending
            with pytest.raises(LogClosedError):
                leader.append([b"b"])
            with pytest.raises(LogClosedError):
                await leader.handle_request(None)
    run(scenario())


def test_a_request_is_answered_by_a_future_and_one_given_up_leaves_nothing(tmp_path):
    """`handle_request` returns the answer's future (a listener writes it without a task of
    its own). A request its connection gives up (the future cancelled) is forgotten; the
    core's later answer to it goes nowhere, and the driver goes on."""
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            core = leader.core
            await quorum.until(lambda: core.high_watermark is not None)
            # An observer's Fetch at the leader's log end is answered with the high
            # watermark; its next one is held until records arrive.
            def fetch():
                return leader.handle_request(rpc.fetch_request(
                    None, 99, core.epoch, core.storage.log_end_offset, core.epoch, 10_000,
                    1 << 20))
            first = fetch()
            assert isinstance(first, asyncio.Future)
            await first
            held = fetch()
            await asyncio.sleep(0.05)
            def waiting(future):  # the driver keeps it to answer
                return any(answer is future for answer, _, _ in leader._answers.values())
            assert not held.done() and waiting(held)
            held.cancel()
            await asyncio.sleep(0)
            assert not waiting(held)
            offset = await leader.append([b"after"])  # answers the held Fetch: to no one
            assert offset >= 0 and leader.failed is None
            describe = leader.handle_request(rpc.describe_quorum_request())
            assert type(await describe).__name__ == "DescribeQuorumResponse"
            await asyncio.sleep(0)
            assert not waiting(describe)  # answered ones are forgotten too
    run(scenario())


def test_appends_with_a_callback_settle_in_offset_order_and_may_append_again(tmp_path):
    """`append(values, callback)`: no future; each callback gets (offset, None) once
    committed, in offset order, mixed with futures, and may append from inside itself."""
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            start = leader.core.log_end_offset
            settled = []
            chained = asyncio.get_running_loop().create_future()

            def on_commit(offset, error):
                settled.append((offset, error))
                if len(settled) == 3:  # the third appends once more from its callback
                    leader.append([b"again"], lambda o, e: chained.set_result((o, e)))

            assert leader.append([b"a", b"b"], on_commit) is None
            future = leader.append([b"c"])
            assert leader.append([b"d"], on_commit) is None
            assert leader.append([b"e"], on_commit) is None
            assert await future == start + 2
            assert await asyncio.wait_for(chained, WAIT_S) == (start + 5, None)
            assert settled == [(start + 1, None), (start + 3, None), (start + 4, None)]
            with pytest.raises(TypeError, match="callable"):
                leader.append([b"x"], callback="not a function")
    run(scenario())


def test_an_append_callback_that_raises_is_logged_and_the_node_goes_on(tmp_path, caplog):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()

            def broken(offset, error):
                raise RuntimeError("a bug in the caller")
            leader.append([b"a"], broken)
            after = leader.append([b"b"])
            offset = await after
            assert leader.failed is None
            assert leader.core.high_watermark > offset
            assert "an append callback raised" in caplog.text
    run(scenario())


def test_append_callbacks_get_the_error_when_the_leader_resigns_or_closes(tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            for other in [d for d in quorum.drivers.values() if d is not leader]:
                await quorum.stop_driver(other.node_id)
            errors = []
            leader.append([b"lost?"], lambda offset, error: errors.append((offset, error)))
            await asyncio.sleep(0.05)
            assert errors == []
            leader.resign()
            await quorum.until(lambda: errors)
            assert errors[0][0] is None and isinstance(errors[0][1], NotLeaderError)
    run(scenario())


def test_the_append_gather_is_open_exactly_while_the_node_leads_and_runs(tmp_path):
    """The compiled helper knows nothing of roles: the driver opens its gather when the node
    becomes leader and closes it when it stops leading or the driver closes, so a callback
    append on any other node is refused at once, never gathered."""
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            followers = [d for d in quorum.drivers.values() if d is not leader]
            assert leader._gather.open and not any(f._gather.open for f in followers)
            with pytest.raises(NotLeaderError):
                followers[0].append([b"x"], lambda offset, error: None)
            leader.resign()
            assert not leader._gather.open
            with pytest.raises(NotLeaderError):
                leader.append([b"x"], lambda offset, error: None)
            assert leader._gather.values == []
            successor = await quorum.leader()
            assert successor._gather.open
            await quorum.stop_driver(successor.node_id)
            assert not successor._gather.open
            with pytest.raises(LogClosedError):
                successor.append([b"x"], lambda offset, error: None)
    run(scenario())


def _in_loop(function):
    async def main():
        return function()
    return asyncio.run(main())


class _BatchingCore:
    """Just enough of a leader's core for `RaftDriver._propose_appending`: it records the
    batches proposed and refuses one whose values pass its batch size."""

    epoch = 1
    quorum = types.SimpleNamespace(role="leader")

    def __init__(self, batch_bytes_max):
        self.config = dataclasses.replace(CONFIG, batch_bytes_max=batch_bytes_max)
        self.batches = []
        self.end = 0

    def propose(self, values, now_ms):
        if sum(map(len, values)) > self.config.batch_bytes_max - BATCH_HEADER_BYTES:
            raise InvalidAppendError("over the batch size")
        self.batches.append(list(values))
        self.end += len(values)
        return self.end - 1


def _batching_driver(batch_bytes_max):
    driver = RaftDriver.__new__(RaftDriver)
    driver.core = _BatchingCore(batch_bytes_max)
    driver.clock = lambda: 0
    driver.failed = None
    driver._kick_scheduled = True  # no event loop: the test proposes by hand
    driver._gather = raft_driver.AppendGather(driver.kick, driver._append_checked)
    driver._open_appends()
    driver._uncommitted = collections.deque()
    driver._proposed_at = collections.deque()
    driver.node_id, driver._timer, driver._answers = 1, None, {}
    return driver


def _waiting(driver):
    """(offset, waiter) of each proposed call waiting for its commit, in offset order."""
    return [(end + proposed.shift, waiter) for proposed in driver._uncommitted
            for end, waiter in zip(proposed.ends[proposed.settled:], proposed.unsettled())]


def test_proposing_splits_calls_across_batches_and_drops_what_a_refusal_interrupts(
        monkeypatch):
    def scenario():  # append needs a running event loop
        monkeypatch.setattr(raft_driver, "RAFT_DRIVER_APPEND_BATCH_RECORDS_MAX", 3)
        driver = _batching_driver(BATCH_HEADER_BYTES + 150)
        settled = {}
        for name, values in (("a", [b"a1", b"a2"]), ("b", [b"b1", b"b2", b"b3", b"b4"]),
                             ("c", [b"c1"]), ("d", [b"d1", b"x" * 200, b"d3"]),
                             ("e", [b"e1"]), ("f", [b"x" * 200]), ("g", [b"g1", b"g2"])):
            driver.append(values, lambda o, e, name=name: settled.setdefault(name, (o, e)))
        driver._propose_appending()
        # 3 values a batch at most; a value over the batch size goes alone, and is refused: d
        # fails (d1 was proposed, d3 never is) and batching goes on after d's last value
        assert driver.core.batches == [[b"a1", b"a2", b"b1"], [b"b2", b"b3", b"b4"],
                                       [b"c1", b"d1"], [b"e1"], [b"g1", b"g2"]]
        waiting = _waiting(driver)
        assert [offset for offset, _ in waiting] == [1, 5, 6, 8, 10]
        for offset, waiter in waiting:
            waiter(offset, None)
        assert {name: o for name, (o, e) in settled.items() if e is None} == {
            "a": 1, "b": 5, "c": 6, "e": 8, "g": 10}
        assert all(isinstance(settled[name][1], InvalidAppendError) for name in "df")
    _in_loop(scenario)


def test_proposing_keeps_batches_within_the_cores_batch_size():
    def scenario():  # append needs a running event loop
        driver = _batching_driver(BATCH_HEADER_BYTES
                                  + 3 * (10 + RECORD_OVERHEAD_BYTES_MAX))
        offsets = []
        for i in range(10):
            driver.append([b"v" * 10], lambda o, e: offsets.append(o))
        driver._propose_appending()
        assert [len(batch) for batch in driver.core.batches] == [3, 3, 3, 1]
        for offset, waiter in _waiting(driver):
            waiter(offset, None)
        assert offsets == list(range(10))
    _in_loop(scenario)


def test_a_callback_that_closes_the_driver_while_proposing_fails_the_calls_left():
    def scenario():  # append needs a running event loop
        driver = _batching_driver(BATCH_HEADER_BYTES + 150)
        settled = []

        def close_on_refusal(offset, error):
            settled.append(("big", offset, error))
            driver.close()
        driver.append([b"a"], lambda o, e: settled.append(("a", o, e)))
        driver.append([b"x" * 200], close_on_refusal)
        driver.append([b"b"], lambda o, e: settled.append(("b", o, e)))
        driver._propose_appending()
        assert driver.core.batches == [[b"a"]]  # nothing is proposed after the close
        assert [(name, o, type(e).__name__) for name, o, e in settled] == [
            ("big", None, "InvalidAppendError"), ("a", None, "NotLeaderError"),
            ("b", None, "NotLeaderError")]
        assert not driver._uncommitted
    _in_loop(scenario)


def test_a_callback_that_closes_the_driver_on_commit_stops_the_drive(tmp_path):
    """The drive stops at once: the other waiting calls fail, and nothing touches the
    storage afterwards."""
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            settled = []

            def close_on_commit(offset, error):
                settled.append((offset, error))
                leader.close()
                leader.storage.flush = flushed_after_close
            def flushed_after_close():
                raise AssertionError("the log was flushed after close()")
            leader.append([b"a"], close_on_commit)
            await quorum.until(lambda: settled)
            later = leader.append  # a closed driver refuses appends
            with pytest.raises(LogClosedError):
                later([b"b"])
            await asyncio.sleep(0.05)
            assert settled[0][1] is None and leader.failed is not None
    run(scenario())


def test_a_leader_sends_its_fetch_answers_before_its_fsync_and_a_follower_after(tmp_path):
    """The leader's answer carrying new records leaves before the leader's own fsync of
    them, which runs in a later callback (so the followers append while it flushes); a
    follower fsyncs before its next Fetch reports the records as held."""
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            settled = []  # first a commit in the epoch, so that its election state is durable
            leader.append([b"warm-up"], lambda offset, error: settled.append(error))
            await quorum.until(lambda: settled)
            events = collections.defaultdict(list)
            for i, driver in quorum.drivers.items():
                def send(message, i=i, driver=driver, send=driver._send):
                    events[i].append(("send", type(message.body).__name__,
                                      _carries_records(message.body)))
                    send(message)

                def flush(i=i, flush=driver.storage.flush):
                    events[i].append(("flush",))
                    flush()
                driver._send = send
                driver.storage.flush = flush
            done = []
            leader.append([b"a"], lambda offset, error: done.append(error))
            await quorum.until(lambda: done)
            lead = events[leader.node_id]
            answer = lead.index(("send", "FetchResponse", True))
            assert ("flush",) in lead[answer + 1:]
            for i in quorum.ids:
                if i != leader.node_id:
                    fetches = [n for n, e in enumerate(events[i]) if e[1:2] == ("FetchRequest",)]
                    flushes = [n for n, e in enumerate(events[i]) if e == ("flush",)]
                    assert flushes and any(n > flushes[0] for n in fetches)
            assert done == [None]
    run(scenario())


def _carries_records(body):
    if type(body).__name__ != "FetchResponse":
        return False
    return bool(rpc.fetch_response_partition(body).records)


def test_an_append_outside_the_event_loop_raises_and_changes_nothing():
    driver = _batching_driver(1 << 20)
    driver._kick_scheduled = False  # no drive scheduled: the append must schedule one
    for callback in (None, lambda offset, error: None):
        with pytest.raises(RuntimeError):
            driver.append([b"a"], callback)
    assert driver._gather.take() == ([], [], [])
    assert not driver._kick_scheduled  # the next append, on the loop, schedules the drive


def _committed_through(offset, leader_change=None):
    """A Ready as `_settle_appends` reads it: the last committed offset, a leader change."""
    commit = types.SimpleNamespace(last_offset=offset)
    return types.SimpleNamespace(commits=[commit] if offset is not None else [],
                                 leader_change=leader_change)


def test_committed_appends_settle_in_offset_order_up_to_the_commit_and_no_further():
    def scenario():  # append needs a running event loop
        driver = _batching_driver(1 << 20)
        settled = []
        for name, values in (("a", [b"1", b"2"]), ("b", [b"3"]), ("c", [b"4", b"5", b"6"])):
            driver.append(values, lambda o, e, name=name: settled.append((name, o, e)))
        driver._propose_appending()  # offsets 0-5 in one batch
        driver.append([b"7"], lambda o, e: settled.append(("d", o, e)))
        driver._propose_appending()  # offset 6, a second batch
        driver._settle_appends(_committed_through(None))
        assert settled == []
        driver._settle_appends(_committed_through(2))  # inside the first batch
        assert settled == [("a", 1, None), ("b", 2, None)]
        driver._settle_appends(_committed_through(4))  # c ends at 5: it still waits
        assert len(settled) == 2 and [o for o, _ in _waiting(driver)] == [5, 6]
        leader_change = types.SimpleNamespace(leader_id=2, epoch=3)
        driver._settle_appends(_committed_through(5, leader_change))
        assert settled[2] == ("c", 5, None)
        name, offset, error = settled[3]  # d was not committed when the leader changed
        assert (name, offset, type(error)) == ("d", None, NotLeaderError)
        assert error.leader_id == 2 and not driver._uncommitted
    _in_loop(scenario)
