"""`RaftDriver`: one `RaftCore` on a real event loop, real storage and real sockets — the
`Ready` contract of `kraftcore.raft.types` carried out with durability first.

It owns the core, its `FileRaftStorage` (the `__cluster_metadata-0` directory), the
quorum-state file beside it, the requests it answers and the timer of the core's next
deadline. Inputs — a Raft request from a peer (`handle_request`), a response to one of the
core's requests, a proposal, the deadline — go into the core at once; the work they cause
is taken in one *drive* per event-loop turn (`kick` only schedules it), so everything that
arrived in the same turn shares one fsync: group commit.

A drive takes every Ready the core has, in order:

1. what the application needs at once goes to `on_ready(ready)` (the controller or the
   broker's metadata: the snapshot to load, the commits, the leader change — none of it
   waits for durability, as the contract says);
2. if any of the Readys taken must persist something, the newest election state among them
   is written to `quorum-state` (atomically, fsynced) and then the log is fsynced — once
   for all of them;
3. only then are their messages sent (requests through the peer pool, answers to the
   waiting `handle_request` calls) and `on_persisted` called for each, in order.

A leader's Readys (`send_first`) go the other way round when they need a flush: their
messages are sent first, and the fsync runs in a callback queued behind the ones that write
those answers to the sockets, so the followers append and fsync the records while the
leader does. No other drive runs in between: `on_persisted` stays in order.

Appending as a library (`append(values)`, on the event loop's thread, which it checks only
for the first call gathered for a drive when none is scheduled yet; the checks, the
gathering and the settling run in the driver's compiled helper, `kraftcore.runtime.appends`,
whose gather the driver keeps open exactly while this node leads and the driver runs):
values appended in one event-loop turn go to the core together at the next drive (before
each Ready it takes, so that what a commit's callbacks append goes out in the same drive,
with the Fetch answers the core holds for that commit), in batches of at most
`limits.RAFT_DRIVER_APPEND_BATCH_RECORDS_MAX` values and
`limits.RAFT_DRIVER_APPEND_BATCH_BYTES_MAX` value bytes, kept within the core's
`batch_bytes_max` once framed; each call's asyncio future gives the offset of its
last value once the high watermark has passed it (the commit, made durable on a
majority). If this node stops leading before then, the future fails with `NotLeaderError`:
the values may or may not be committed later. A value the core refuses (a batch of it
alone would pass `batch_bytes_max`) fails its call with `InvalidAppendError`, and the
call's values not yet proposed are dropped; a storage error fails every waiting call and
the node. After `close()`, `append` raises `LogClosedError`. `append(values, callback)`
is the same without a future: `callback(offset, error)` is called on the event-loop
thread, in the drive that settles the call (offset and None once committed; None and the
error otherwise) — for callers with many small appends in flight, where a future and its
scheduled callbacks per call would cost more than the append itself. An exception a
callback raises is logged and does not stop the drive. The values must be what the
log's state machine expects; on a node with a controller, the active controller is the
metadata log's writer, and only NoOpRecords may be appended beside it (anything else makes
it step down, see `kraftcore.controller.controller`).

Persistence runs on the event-loop thread: the log is not shared with another thread, and
while an fsync blocks, the sockets keep buffering, so the next drive takes a bigger group.

Fail-stop: any exception raised while the driver calls into the core (a request or a
response handed to it, a proposal, a resignation, a snapshot, its timer, a drive: polling,
taking Readys, the application's `on_ready`, persisting, sending, acknowledging) stops the
node: `failed` is set, one error line names the node, what failed and the exception (its
traceback follows at DEBUG), every waiting append fails with it, every waiting answer is
BROKER_NOT_AVAILABLE (as a `Node` answers the Raft requests that come after it, so that a
listener logs nothing per request), and `on_fatal(exc)` is called (a `Node` then exits
with status 1). A Raft node whose core or storage failed must stop rather than go on
answering, or sit wedged. What the caller did wrong is not a failure of the node:
`NotLeaderError` and `InvalidAppendError` from a proposal, `InvalidOffsetError` from a
snapshot, go back to the caller alone.

Time is the wall clock in milliseconds (batch timestamps come from it, as in Kafka).
"""

import asyncio
import bisect
import collections
import functools
import itertools
import logging
import operator
import random

from kraftcore import codec
from kraftcore.apis.errors import error_response
from kraftcore.errors import (InvalidAppendError, InvalidOffsetError, KraftcoreError,
                              LogClosedError, NotLeaderError)
from kraftcore.layout import BATCH_HEADER_BYTES, RECORD_OVERHEAD_BYTES_MAX
from kraftcore.limits import (RAFT_DRIVER_APPEND_BATCH_BYTES_MAX,
                              RAFT_DRIVER_APPEND_BATCH_RECORDS_MAX,
                              RAFT_DRIVER_READYS_PER_DRIVE_MAX)
from kraftcore.protocol.apis import api
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.raft import rpc
from kraftcore.raft.core import RaftCore
from kraftcore.raft.side import RaftSide
from kraftcore.raft.types import RaftMessage
from kraftcore.clock import wall_clock_ms

log = logging.getLogger("kraftcore.runtime")

# The append bookkeeping: compiled, or its pure-Python twin, as the one switch picks.
_appends = codec.twin("kraftcore.runtime._appends", "kraftcore.runtime.appends")
AppendGather = _appends.AppendGather
settle_calls = _appends.settle_calls



class _StepFailed(Exception):
    """An exception raised by one step of a drive, with the step's name (for the one line
    the node logs when it stops)."""

    def __init__(self, step, error):
        super().__init__(step, error)
        self.step = step
        self.error = error


def _requester(body):
    """The node id a Raft request comes from, read from its body (-1 when it names none,
    e.g. DescribeQuorum from an admin client)."""
    name = type(body).__name__
    try:
        if name == "FetchRequest":
            state = body.replica_state
            return state.replica_id if state is not None and state.replica_id >= 0 \
                else body.replica_id
        if name == "FetchSnapshotRequest":
            return body.replica_id
        partition = body.topics[0].partitions[0]
        if name == "VoteRequest":
            return partition.replica_id
        if name in ("BeginQuorumEpochRequest", "EndQuorumEpochRequest"):
            return partition.leader_id
    except (AttributeError, IndexError, TypeError):
        pass
    return -1


def _settle_future(future, offset, error):
    """The waiter of an `append` call that returned `future`."""
    if not future.done():
        if error is None:
            future.set_result(offset)
        else:
            future.set_exception(error)


def _callback_raised(exc):
    log.error("an append callback raised", exc_info=exc)


def _settle(waiter, offset, error):
    """Call an append's waiter: `callback(offset, error)` or a future's `_settle_future`."""
    try:
        waiter(offset, error)
    except Exception as exc:  # a caller's bug must not stop the node's drive
        _callback_raised(exc)


class _Proposed:
    """The `append` calls of one proposed batch, waiting for its commit: call k ends at
    offset `ends[k] + shift` and is settled by `waiters[k]`; the first `settled` are."""

    __slots__ = ("shift", "ends", "waiters", "settled")

    def __init__(self, shift, ends, waiters):
        self.shift = shift
        self.ends = ends
        self.waiters = waiters
        self.settled = 0

    def unsettled(self):
        return self.waiters[self.settled:]


class RaftDriver(RaftSide):
    def __init__(self, node_id, voters, storage, election_store, config, pool, *, rng=None,
                 clock=wall_clock_ms, on_ready=None, on_fatal=None):
        self.node_id = node_id
        self.storage = storage
        self.election_store = election_store
        self.pool = pool
        self.clock = clock
        self.on_ready = on_ready or (lambda ready: None)
        self.on_fatal = on_fatal or (lambda exc: None)
        self.core = RaftCore(node_id, voters, storage, election_store.read(), config,
                             rng or random.Random(), clock())
        self._pending = collections.deque()
        # local correlation id -> (asyncio future of the response body, the request's body,
        # its version): what a failure answers it with needs the last two
        self._answers = {}
        self._next_cid = 0
        self._kick_scheduled = False
        self._persist_scheduled = False  # a leader's fsync queued behind its sent messages
        self._timer = None
        self._timer_at = None
        # The `append` calls waiting for the next drive: their values, and for each call
        # the index of its last value and its waiter (a callable(offset, error)).
        self._gather = AppendGather(self.kick, self._append_checked)
        # `append` below, as the gather's own method: in the compiled helper, an append that
        # needs no more than its checks runs without a Python frame
        self.append = self._gather.append
        self._uncommitted = collections.deque()  # _Proposed batches, in offset order
        self._appends_error = None  # what the waiters failed with when the driver stopped
        self.failed = None
        self.fsyncs = 0
        self.readys = 0
        # Commit latency as leader (Kafka's raft commit-latency): (last offset, clock ms)
        # of each proposed batch until the high watermark passes it; then count, sum and
        # maximum of the ms in between.
        self._proposed_at = collections.deque()
        self.commit_latency_count = 0
        self.commit_latency_sum_ms = 0
        self.commit_latency_max_ms = 0
        self._open_appends()

    def _open_appends(self):
        """Open the gather exactly while this node leads and the driver runs: called after
        every call into the core that can change its role (construction, handle, poll,
        resign); closing or failing closes the gather for good."""
        self._gather.open = self.failed is None and self.core.quorum.role == "leader"

    # ------------------------------------------------------------------ inputs

    def kick(self):
        """Drive the core later in this event-loop turn (once, however often asked)."""
        if self._kick_scheduled or self.failed is not None:
            return
        asyncio.get_running_loop().call_soon(self._drive)  # outside the loop: RuntimeError
        self._kick_scheduled = True

    def handle_request(self, body, version=None):
        """Answer a Raft request from a peer (or DescribeQuorum from an admin client): an
        asyncio future of the response body, done in the drive that sends it. A plain
        future rather than a coroutine, so that a listener writes the answer without a
        task's extra turn of the event loop; cancelling it gives the request up. If the
        driver fails first, the answer is `unavailable_response(body, version)`; `version`
        is the request's (default: the one this driver speaks)."""
        if self.failed is not None:
            raise self.failed
        self._next_cid += 1
        cid = self._next_cid
        answer = asyncio.get_running_loop().create_future()
        try:
            self.core.handle(RaftMessage(_requester(body), self.node_id, cid, body),
                             self.clock())
        except Exception as exc:
            self._fail(exc, f"the Raft core, handling a {type(body).__name__}")
            raise
        self._open_appends()
        self._answers[cid] = (answer, body, version)
        answer.add_done_callback(functools.partial(self._forget_answer, cid))
        self.kick()
        return answer

    def _forget_answer(self, cid, answer):
        self._answers.pop(cid, None)

    def unavailable_response(self, body, version=None):
        """The answer of a node stopping on a failure to Raft request `body` (at `version`;
        default: the one this driver speaks): BROKER_NOT_AVAILABLE in the response of the
        request's API (`kraftcore.apis.errors.error_response`)."""
        key = body.api_key
        if version is None:
            version = rpc.VERSIONS[api(key).name]
        return error_response(key, version, body, ErrorCode.BROKER_NOT_AVAILABLE,
                              f"node {self.node_id} is stopping on a failure")

    def propose(self, values, *, timestamp_ms=None):
        """Append `values` as the leader; returns the last offset (raises NotLeaderError,
        InvalidAppendError). `timestamp_ms`: the batch's timestamp (default: the clock
        now). Any other error from the core stops the node (and is raised)."""
        if self.failed is not None:
            raise self.failed
        if not values:
            raise ValueError("propose() needs at least one value")
        now = self.clock()
        try:
            last = self.core.propose(values, now, timestamp_ms=timestamp_ms)
        except (NotLeaderError, InvalidAppendError):
            raise
        except Exception as exc:
            self._fail(exc, "the Raft core, proposing")
            raise
        self._proposed_at.append((last, now))
        self.kick()
        return last

    def append(self, values, callback=None):
        """Append `values` (a non-empty list of bytes) as the leader with the other appends
        of this event-loop turn; returns an asyncio future of the last value's offset, done
        once committed — or, given `callback`, returns None and calls `callback(offset,
        error)` instead (see the module docstring). Raises NotLeaderError at once on a node
        that is not the leader. (A driver's `append` attribute is its AppendGather's: the
        same call, with the checks below only for what the gather does not take itself.)"""
        return self._gather.append(values, callback)

    def _append_checked(self, values, callback):
        """`append` with every check, for the calls the gather leaves to it."""
        if self.failed is not None:
            raise self.failed
        core = self.core
        if core.quorum.role != "leader":
            raise NotLeaderError(self.node_id, core.leader_id, core.epoch)
        values = list(values)  # whole before anything is gathered
        if not values:
            raise ValueError("append() needs at least one value")
        if callback is None:
            # outside the event loop: RuntimeError, nothing changed
            future = asyncio.get_running_loop().create_future()
            callback = functools.partial(_settle_future, future)
        elif callable(callback):
            future = None
        else:
            raise TypeError(f"append() callback must be callable, not "
                            f"{type(callback).__name__}")
        self._gather.add(values, callback)  # outside the event loop: RuntimeError
        return future

    def _propose_appending(self):
        """Propose what `append` gathered, in batches within the RAFT_DRIVER_APPEND_BATCH_*
        limits and the core's batch size. A call whose values are refused (in whichever of
        its batches) fails with the core's error, and its values not yet proposed are
        dropped; the other calls go on. Any other error fails every call not yet proposed, and is
        raised (the drive then fails the node)."""
        values, ends, waiters = self._gather.take()
        budget = min(RAFT_DRIVER_APPEND_BATCH_BYTES_MAX,
                     self.core.config.batch_bytes_max - BATCH_HEADER_BYTES)
        count = len(values)
        framed = None  # None: everything fits one batch (the usual case)
        if (count > RAFT_DRIVER_APPEND_BATCH_RECORDS_MAX
                or sum(map(len, values)) + count * RECORD_OVERHEAD_BYTES_MAX > budget):
            # framed[i]: the bytes values[:i] take at most once framed
            # (RECORD_OVERHEAD_BYTES_MAX each), for finding each batch's end by bisection
            framed = list(map(operator.add, itertools.accumulate(map(len, values), initial=0),
                              range(0, (count + 1) * RECORD_OVERHEAD_BYTES_MAX,
                                    RECORD_OVERHEAD_BYTES_MAX)))
        start = call = 0  # the first value of the next batch; the first call not settled
        try:
            while start < count:
                if framed is None:
                    end, stop = count, len(ends)
                else:
                    end = min(bisect.bisect_right(framed, framed[start] + budget, start + 1)
                              - 1, start + RAFT_DRIVER_APPEND_BATCH_RECORDS_MAX, count)
                    end = max(end, start + 1)  # a value alone over the budget: the core decides
                    stop = bisect.bisect_left(ends, end, call)  # calls[call:stop] end in it
                now = self.clock()
                try:
                    last = self.core.propose(values if framed is None else values[start:end],
                                             now)
                    self._proposed_at.append((last, now))
                except (NotLeaderError, InvalidAppendError) as error:
                    while call < stop:
                        call += 1
                        _settle(waiters[call - 1], None, error)
                    if call < len(ends) and (ends[call - 1] + 1 if call else 0) < end:
                        # the next call has values in the refused batch: it fails, and its
                        # other values are not proposed
                        call += 1
                        end = ends[call - 1] + 1
                        _settle(waiters[call - 1], None, error)
                    if self.failed is not None:  # a callback closed or failed the driver
                        for waiter in waiters[call:]:
                            _settle(waiter, None, self._appends_error)
                        return
                else:
                    self._uncommitted.append(
                        _Proposed(last - (end - 1), ends[call:stop], waiters[call:stop]))
                    call = stop
                start = end
        except BaseException as exc:
            for waiter in waiters[call:]:
                _settle(waiter, None, exc)
            raise

    def _note_commit_latency(self, ready, now):
        proposed = self._proposed_at
        if ready.commits:
            committed = ready.commits[-1].last_offset
            while proposed and proposed[0][0] <= committed:
                took = now - proposed.popleft()[1]
                self.commit_latency_count += 1
                self.commit_latency_sum_ms += took
                if took > self.commit_latency_max_ms:
                    self.commit_latency_max_ms = took
        if ready.leader_change is not None:
            proposed.clear()  # no longer the leader of those batches

    def _settle_appends(self, ready):
        """Settle the committed appends; fail them all on a leader change."""
        uncommitted = self._uncommitted
        if ready.commits:
            committed = ready.commits[-1].last_offset
            while uncommitted:
                proposed = uncommitted[0]
                shift, ends, waiters, pos = (proposed.shift, proposed.ends, proposed.waiters,
                                             proposed.settled)
                if ends[-1] + shift <= committed:
                    uncommitted.popleft()  # before its callbacks, which may close the driver
                    stop = len(ends)
                else:  # the commit ends inside this batch: settle the calls it covers
                    stop = proposed.settled = bisect.bisect_right(ends, committed - shift, pos)
                    if stop == pos:
                        break
                settle_calls(ends, waiters, pos, stop, shift, _callback_raised)
        if ready.leader_change is not None and uncommitted:
            error = NotLeaderError(self.node_id, ready.leader_change.leader_id,
                                   ready.leader_change.epoch)
            while uncommitted:
                for waiter in uncommitted.popleft().unsettled():
                    _settle(waiter, None, error)

    def resign(self):
        if self.failed is not None:
            return
        try:
            self.core.resign(self.clock())
        except Exception as exc:
            self._fail(exc, "the Raft core, resigning")
            return
        self._open_appends()
        self.kick()

    def create_snapshot(self, end_offset, data):
        """The core's `create_snapshot`; InvalidOffsetError (a bad end offset) goes back to
        the caller, any other error stops the node (and is raised)."""
        if self.failed is not None:
            raise self.failed
        try:
            snapshot_id = self.core.create_snapshot(end_offset, data)
        except InvalidOffsetError:
            raise
        except Exception as exc:
            self._fail(exc, "the Raft core, creating a snapshot")
            raise
        log.info("node %s: wrote metadata snapshot %s (end offset %s, epoch %s, %s bytes)",
                 self.node_id, snapshot_id, snapshot_id.end_offset, snapshot_id.epoch,
                 len(data))
        self.kick()
        return snapshot_id

    def _on_response(self, request, response, error):
        if error is not None or self.failed is not None:
            return  # the core gives the request up after its own timeout
        try:
            self.core.handle(RaftMessage(request.destination, self.node_id,
                                         request.correlation_id, response), self.clock())
        except Exception as exc:
            self._fail(exc, f"the Raft core, handling a {type(response).__name__} from node "
                            f"{request.destination}")
            return
        self._open_appends()
        self.kick()

    # ------------------------------------------------------------------ the drive

    def _drive(self):
        self._kick_scheduled = False
        if self.failed is not None or self._persist_scheduled:
            return  # a queued persistence drives again once it is done
        try:
            self._drive_once()
        except _StepFailed as failed:
            self._fail(failed.error, failed.step)
        except Exception as exc:
            self._fail(exc, "the Raft core")

    def _drive_once(self):
        core = self.core
        now = self.clock()
        deadline = None
        for _ in range(RAFT_DRIVER_READYS_PER_DRIVE_MAX):
            if self._gather.values:
                # before each Ready: what the callbacks of the previous one appended goes
                # out with the answers the core holds for it
                self._propose_appending()
                if self.failed is not None:
                    return  # a callback closed the driver
            deadline = core.poll(now)
            self._open_appends()
            ready = core.take_ready()
            if ready is None:
                if not self._pending:
                    break
                self._complete_pending()
                if self._persist_scheduled:
                    return
                continue
            self.readys += 1
            if self._proposed_at:
                self._note_commit_latency(ready, now)
            try:
                self.on_ready(ready)  # the state machine first: callbacks see the commits
            except Exception as exc:
                raise _StepFailed("the application's on_ready", exc) from exc
            if self._uncommitted:
                self._settle_appends(ready)
            if self.failed is not None:
                return  # closed by the application or a callback: nothing more is persisted
            self._pending.append(ready)
        else:
            self.kick()  # more work than one turn should take: continue next turn
        self._arm_timer(deadline, now)

    def _complete_pending(self):
        """Persist what the pending Readys need (once for all), then send and acknowledge
        each in order; or, for a leader's Readys that need a flush, send first and queue
        the persistence (module docstring)."""
        pending, self._pending = self._pending, collections.deque()
        if (all(ready.send_first for ready in pending)
                and any(ready.flush_offset is not None for ready in pending)):
            self._send_messages(pending)
            self._persist_scheduled = True
            asyncio.get_running_loop().call_soon(self._persist_sent, pending)
            return
        self._persist(pending)
        self._send_messages(pending)
        self._acknowledge(pending)

    def _persist_sent(self, pending):
        self._persist_scheduled = False
        if self.failed is not None:
            return  # closed or failed meanwhile: the log is not touched again
        try:
            self._persist(pending)
            self._acknowledge(pending)
        except _StepFailed as failed:
            self._fail(failed.error, failed.step)
            return
        except Exception as exc:
            self._fail(exc, "the Raft core")
            return
        self.kick()

    def _persist(self, pending):
        state = None
        flush = False
        for ready in pending:
            if ready.election_state is not None:
                state = ready.election_state
            flush = flush or ready.flush_offset is not None
        try:
            if state is not None:
                self.election_store.write(state)
            if flush:
                self.storage.flush()
                self.fsyncs += 1
        except Exception as exc:
            raise _StepFailed("persisting (quorum-state, log flush)", exc) from exc

    def _send_messages(self, pending):
        for ready in pending:
            for message in ready.messages:
                self._send(message)

    def _acknowledge(self, pending):
        now = self.clock()
        for ready in pending:
            self.core.on_persisted(ready.number)
        self.core.poll(now)
        self._open_appends()

    def _send(self, message):
        body = message.body
        if body.kind == "request":
            name = api(body.api_key).name
            try:
                self.pool.send_nowait(message.destination, body, rpc.VERSIONS[name],
                                      lambda response, error, m=message:
                                      self._on_response(m, response, error))
            except KraftcoreError as exc:
                log.warning("node %s: cannot send %s to node %s: %s", self.node_id, name,
                            message.destination, exc)
            except Exception as exc:
                raise _StepFailed(f"sending {name} to node {message.destination}",
                                  exc) from exc
            return
        waiting = self._answers.get(message.correlation_id)
        if waiting is not None and not waiting[0].done():
            waiting[0].set_result(body)

    def _arm_timer(self, deadline, now):
        if deadline is None:
            return
        if self._timer is not None and self._timer_at == deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        delay_s = max(0, deadline - now) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)

    def _on_timer(self):
        self._timer = None
        self._timer_at = None
        self._drive()  # fails the node on any error, like every drive

    def _fail(self, exc, what):
        """Stop the node on `exc`, raised by `what` (module docstring: fail-stop)."""
        if self.failed is not None:
            return  # closed, or failed already: nothing more to stop
        log.error("node %s stops: %s failed: %s: %s", self.node_id, what, type(exc).__name__,
                  exc)
        log.debug("node %s: the failure's traceback", self.node_id, exc_info=exc)
        self.failed = exc
        if self._timer is not None:
            self._timer.cancel()
        # The requests in flight get the answer a stopping node gives (Node._handle), not
        # the exception: a listener would log its traceback once per request.
        for answer, body, version in list(self._answers.values()):
            if answer.done():
                continue
            try:
                response = self.unavailable_response(body, version)
            except Exception:  # noqa: BLE001 - not a Raft API's body: the stop goes on
                answer.set_exception(exc)
            else:
                answer.set_result(response)
        self._fail_appends(exc)
        self.on_fatal(exc)

    def _fail_appends(self, exc):
        self._appends_error = exc
        waiters = self._gather.close() + [
            waiter for proposed in self._uncommitted for waiter in proposed.unsettled()]
        self._uncommitted.clear()
        for waiter in waiters:
            _settle(waiter, None, exc)

    def close(self):
        """Stop driving: pending appends fail with NotLeaderError; afterwards `append` and
        `handle_request` raise LogClosedError and no drive touches the storage."""
        if self.failed is None:
            self.failed = LogClosedError(f"node {self.node_id}: the Raft driver is closed")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for answer, _, _ in self._answers.values():
            if not answer.done():
                answer.cancel()
        self._fail_appends(NotLeaderError(self.node_id, None, self.core.epoch))
