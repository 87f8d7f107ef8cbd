"""Fail-stop of the Raft driver (kraftcore.runtime.raft_driver): an exception on any path
that calls into the core — its timer's drive, a request or a response handed to it, the
application's on_ready, a proposal — stops the node (`failed`, `on_fatal`) with one error
line naming the node, what failed and the exception, instead of leaving it running and
doing nothing. The errors a caller makes stay the caller's. The same on a real trigger: a
node whose next election would pass the last epoch stops at its election timer.

The exceptions are injected (no input reaches such a bug in the core any more); the
process-level version of these checks is in test_hostile_processes.py."""

import logging
import os

import pytest

from kraftcore.errors import (InvalidAppendError, InvalidOffsetError, NotLeaderError,
                              RaftEpochExhaustedError)
from kraftcore.limits import RAFT_EPOCH_MAX
from kraftcore.log import quorum_state
from kraftcore.types import ElectionState

from tests.harness.drivers import Quorum, run

RUNTIME_LOGGER = "kraftcore.runtime"


def stop_lines(caplog, node_id):
    return [r.getMessage() for r in caplog.records
            if r.name == RUNTIME_LOGGER and r.levelno >= logging.ERROR
            and r.getMessage().startswith(f"node {node_id} stops: ")]


def test_an_exception_in_the_timers_drive_stops_the_node_with_one_line(tmp_path, caplog):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            follower = next(d for d in quorum.drivers.values() if d is not leader)

            def broken_poll(now_ms):
                raise ValueError("boom")
            follower.core.poll = broken_poll  # every drive polls, the timer's included
            await quorum.until(lambda: follower.node_id in quorum.fatal)
            assert isinstance(follower.failed, ValueError)
            assert quorum.fatal[follower.node_id] is follower.failed
            assert stop_lines(caplog, follower.node_id) == [
                f"node {follower.node_id} stops: the Raft core failed: ValueError: boom"]
            with pytest.raises(ValueError):
                follower.handle_request(None)
            with pytest.raises(ValueError):
                follower.append([b"x"])
            # The other two go on: the leader still commits.
            last = leader.propose([b"after"])
            await quorum.until(lambda: any(end >= last for _, end in
                                           quorum.applied[leader.node_id]))
    with caplog.at_level(logging.INFO, logger=RUNTIME_LOGGER):
        run(scenario())


def test_an_exception_handling_a_request_stops_the_node(tmp_path, caplog):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()

            def broken_handle(message, now_ms):
                raise KeyError("bad request")
            leader.core.handle = broken_handle  # the followers keep fetching from it
            await quorum.until(lambda: leader.node_id in quorum.fatal)
            assert isinstance(leader.failed, KeyError)
            (line,) = stop_lines(caplog, leader.node_id)
            assert line.startswith(f"node {leader.node_id} stops: the Raft core, handling a ")
            assert line.endswith("failed: KeyError: 'bad request'")
    with caplog.at_level(logging.INFO, logger=RUNTIME_LOGGER):
        run(scenario())


def test_an_exception_handling_a_response_stops_the_node(tmp_path, caplog):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            follower = next(d for d in quorum.drivers.values() if d is not leader)
            handle = follower.core.handle

            def broken_handle(message, now_ms):
                if message.body.kind == "response":
                    raise ZeroDivisionError("in a response")
                return handle(message, now_ms)
            follower.core.handle = broken_handle
            await quorum.until(lambda: follower.node_id in quorum.fatal)
            (line,) = stop_lines(caplog, follower.node_id)
            assert (f"the Raft core, handling a FetchResponse from node {leader.node_id} "
                    "failed: ZeroDivisionError: in a response") in line
    with caplog.at_level(logging.INFO, logger=RUNTIME_LOGGER):
        run(scenario())


def test_an_exception_in_on_ready_stops_the_node(tmp_path, caplog):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            on_ready = leader.on_ready

            def broken_on_ready(ready):
                if ready.commits:
                    raise RuntimeError("cannot apply")
                on_ready(ready)
            leader.on_ready = broken_on_ready
            leader.propose([b"x"])
            await quorum.until(lambda: leader.node_id in quorum.fatal)
            (line,) = stop_lines(caplog, leader.node_id)
            assert line == (f"node {leader.node_id} stops: the application's on_ready "
                            "failed: RuntimeError: cannot apply")
    with caplog.at_level(logging.INFO, logger=RUNTIME_LOGGER):
        run(scenario())


def test_an_unexpected_error_from_a_proposal_stops_the_node_but_caller_errors_do_not(
        tmp_path):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()
            follower = next(d for d in quorum.drivers.values() if d is not leader)
            with pytest.raises(NotLeaderError):
                follower.propose([b"x"])
            with pytest.raises(ValueError):
                leader.propose([])
            with pytest.raises(InvalidAppendError):
                leader.propose(["not bytes"])
            with pytest.raises(InvalidOffsetError):
                leader.create_snapshot(10**9, b"")
            assert leader.failed is None and follower.failed is None
            last = leader.propose([b"still fine"])
            await quorum.until(lambda: any(end >= last for _, end in
                                           quorum.applied[leader.node_id]))

            def broken_append(batch, epoch):
                raise MemoryError("no room")
            leader.storage.append_as_leader = broken_append
            with pytest.raises(MemoryError):
                leader.propose([b"y"])
            assert isinstance(leader.failed, MemoryError)
            assert leader.node_id in quorum.fatal
    run(scenario())


def test_a_node_that_exhausts_the_epochs_stops_at_its_election_timer(tmp_path, caplog):
    """Every node's quorum-state says node 1 led epoch RAFT_EPOCH_MAX: node 1 restarts
    resigned, and its election timer needs an epoch kraftcore never uses, as does the
    candidacy of a follower that wins a pre-vote. Each of them stops with
    RaftEpochExhaustedError; none leads, none runs on at an epoch it cannot leave."""
    for i in (1, 2, 3):
        directory = os.path.join(str(tmp_path), str(i), "__cluster_metadata-0")
        os.makedirs(directory)
        quorum_state.write(directory, ElectionState(RAFT_EPOCH_MAX, leader_id=1,
                                                    voted_id=1), 1)

    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            assert quorum.drivers[1].core.role == "resigned"
            await quorum.until(lambda: 1 in quorum.fatal and len(quorum.fatal) >= 2)
            assert not any(d.core.role == "leader" for d in quorum.drivers.values())
            for i in quorum.fatal:
                assert isinstance(quorum.fatal[i], RaftEpochExhaustedError)
                (line,) = stop_lines(caplog, i)
                assert f"RaftEpochExhaustedError: node {i} would become" in line
                assert f"at epoch {RAFT_EPOCH_MAX + 1}" in line and "exhausted" in line
                state = quorum_state.read(os.path.join(str(tmp_path), str(i),
                                                       "__cluster_metadata-0"))
                assert state.epoch == RAFT_EPOCH_MAX
    with caplog.at_level(logging.INFO, logger=RUNTIME_LOGGER):
        run(scenario())


def test_the_failure_traceback_is_kept_at_debug(tmp_path, caplog):
    async def scenario():
        async with Quorum(str(tmp_path)) as quorum:
            leader = await quorum.leader()

            def broken_poll(now_ms):
                raise ValueError("boom")
            leader.core.poll = broken_poll
            await quorum.until(lambda: leader.node_id in quorum.fatal)
    with caplog.at_level(logging.DEBUG, logger=RUNTIME_LOGGER):
        run(scenario())
    tracebacks = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert tracebacks and "broken_poll" in caplog.text
