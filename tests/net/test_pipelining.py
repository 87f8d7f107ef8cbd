"""Pipelining: responses in request order whatever order handlers finish in, and the limits
on requests in flight at both ends (backpressure, never an unbounded queue)."""

import asyncio

import pytest

from kraftcore.errors import RequestQueueFullError
from kraftcore.net import Connection, Listener
from kraftcore.protocol import framing
from kraftcore.protocol.messages import VoteResponse

from .helpers import (HOST, Gate, RawClient, answered_epoch, epoch_of, fetch, fetch_response,
                      run, vote, vote_response, wait_until)


def test_responses_leave_in_request_order_when_handlers_finish_in_reverse():
    """On the wire: the correlation ids come back in the order the requests were sent."""
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        raw = await RawClient.open(listener.port)
        count = 8
        for i in range(count):
            await raw.request(vote(100 + i), 2, correlation_id=1000 + i)
        await wait_until(lambda: len(gate.calls) == count)
        for epoch in reversed(gate.calls):  # the last request finishes first
            gate.release(epoch)
            await asyncio.sleep(0)
        answers = [await raw.read_response(52, 2) for _ in range(count)]
        assert [cid for cid, _ in answers] == [1000 + i for i in range(count)]
        assert [answered_epoch(body) for _, body in answers] == [100 + i for i in range(count)]
        await raw.close()
        await listener.close()
    run(test)


def test_pipelined_client_requests_each_get_their_own_response():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port)
        tasks = [asyncio.ensure_future(conn.send(vote(i))) for i in range(1, 21)]
        await wait_until(lambda: len(gate.calls) == 20)
        assert conn.inflight_count == 20
        for epoch in sorted(gate.calls, key=lambda e: (e * 7) % 20):  # a scrambled order
            gate.release(epoch)
            await asyncio.sleep(0)
        responses = await asyncio.gather(*tasks)
        assert [answered_epoch(r) for r in responses] == list(range(1, 21))
        assert conn.inflight_count == 0
        await conn.close()
        await listener.close()
    run(test)


def test_sync_and_async_handlers_mixed_keep_the_order():
    async def test():
        async def slow(epoch):
            for _ in range(epoch % 3):
                await asyncio.sleep(0)
            return vote_response(epoch)

        def handler(request, peer):
            epoch = request.body.topics[0].partitions[0].replica_epoch
            return vote_response(epoch) if epoch % 2 else slow(epoch)

        listener = await Listener.start(HOST, 0, handler)
        conn = await Connection.open(HOST, listener.port)
        responses = await asyncio.gather(*(conn.send(vote(i)) for i in range(1, 50)))
        assert [answered_epoch(r) for r in responses] == list(range(1, 50))
        await conn.close()
        await listener.close()
    run(test)


def test_an_answered_request_is_freed_without_the_cycle_collector():
    """Nothing of a request answered by an awaitable (its slot, callback, task, request) is
    left in a reference cycle: a busy server would otherwise hand every request to the
    garbage collector."""
    import gc
    import weakref

    async def test():
        handlers = []

        async def answer(request):
            await asyncio.sleep(0)
            return vote_response(epoch_of(request.body))

        def handler(request, peer):
            awaitable = answer(request)  # it holds the request
            handlers.append(weakref.ref(awaitable))
            return awaitable

        listener = await Listener.start(HOST, 0, handler)
        conn = await Connection.open(HOST, listener.port)
        gc.collect()
        gc.disable()
        try:
            responses = await asyncio.gather(*(conn.send(vote(i)) for i in range(1, 21)))
            await asyncio.sleep(0.01)  # the responses' flush and the tasks' last callbacks
            assert [answered_epoch(r) for r in responses] == list(range(1, 21))
            assert len(handlers) == 20
            assert [ref for ref in handlers if ref() is not None] == []
        finally:
            gc.enable()
        await conn.close()
        await listener.close()
    run(test)


def test_an_answer_leaves_at_once_when_nothing_else_is_awaited_on_its_connection():
    """A response whose awaitable completes with no other request of its connection in
    flight is written by the awaitable's own callback, ahead of callbacks the event loop
    queued behind it (on a busy node: the state machine's turn), not a turn later."""
    import socket

    async def test():
        loop = asyncio.get_running_loop()
        pending = []

        def handler(request, peer):
            future = loop.create_future()
            pending.append((future, epoch_of(request.body)))
            return future

        listener = await Listener.start(HOST, 0, handler)
        sock = socket.create_connection((HOST, listener.port))
        try:
            sock.sendall(framing.encode_request(vote(7), 2, 41, "raw"))
            sock.setblocking(False)
            await wait_until(lambda: pending)
            received = []

            def look():  # what the socket holds by now
                try:
                    received.append(sock.recv(65536))
                except BlockingIOError:
                    received.append(b"")

            future, epoch = pending[0]
            future.set_result(vote_response(epoch))  # its callbacks run in the next turn
            loop.call_soon(look)  # queued right behind them
            await wait_until(lambda: received)
            assert received[0], "the answer had not left when the next callback ran"
            assert int.from_bytes(received[0][4:8], "big") == 41  # its correlation id
        finally:
            sock.close()
        await listener.close()
    run(test)


def test_client_in_flight_limit_holds_later_requests_back():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port, inflight_max=2)
        tasks = [asyncio.ensure_future(conn.send(vote(i))) for i in range(1, 6)]
        await wait_until(lambda: len(gate.calls) == 2)
        assert (conn.inflight_count, conn.queued_count) == (2, 3)
        await asyncio.sleep(0.05)  # give a broken limit the chance to show
        assert gate.calls == [1, 2]
        gate.release(1)
        await wait_until(lambda: len(gate.calls) == 3)
        assert gate.calls == [1, 2, 3]  # one slot freed, one more request went out
        assert (conn.inflight_count, conn.queued_count) == (2, 2)
        for epoch in range(2, 6):
            gate.release(epoch)
        responses = await asyncio.gather(*tasks)
        assert [answered_epoch(r) for r in responses] == [1, 2, 3, 4, 5]
        await conn.close()
        await listener.close()
    run(test)


def test_server_in_flight_limit_stops_reading_a_pipelining_client():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler, inflight_per_connection_max=2)
        conn = await Connection.open(HOST, listener.port)
        tasks = [asyncio.ensure_future(conn.send(vote(i))) for i in range(1, 6)]
        await wait_until(lambda: len(gate.calls) == 2)
        assert conn.inflight_count == 5  # all written by the client
        await asyncio.sleep(0.05)
        assert gate.calls == [1, 2]  # but the server handles two at a time
        gate.release(2)  # the second finishes first: still two waiting for their answer
        await asyncio.sleep(0.05)
        assert gate.calls == [1, 2]
        gate.release(1)
        await wait_until(lambda: len(gate.calls) == 4)
        assert gate.calls == [1, 2, 3, 4]
        gate.release_all()
        await wait_until(lambda: len(gate.calls) == 5)
        gate.release_all()
        responses = await asyncio.gather(*tasks)
        assert [answered_epoch(r) for r in responses] == [1, 2, 3, 4, 5]
        await conn.close()
        await listener.close()
    run(test)


def test_send_nowait_queue_is_bounded():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port, inflight_max=1, queued_max=2)
        results = {}

        def collect(epoch):
            return lambda response, error: results.__setitem__(epoch, (response, error))

        for epoch in (1, 2, 3, 4):
            conn.send_nowait(vote(epoch), None, collect(epoch))
        assert results == {}  # callbacks never run inside send_nowait
        await wait_until(lambda: 4 in results)
        response, error = results[4]
        assert response is None and isinstance(error, RequestQueueFullError)
        assert "2 requests already wait" in str(error)
        assert (conn.inflight_count, conn.queued_count) == (1, 2)
        for epoch in (1, 2, 3):
            await wait_until(lambda: epoch in gate.calls)
            gate.release(epoch)
        await wait_until(lambda: len(results) == 4)
        assert [answered_epoch(results[e][0]) for e in (1, 2, 3)] == [1, 2, 3]
        assert all(results[e][1] is None for e in (1, 2, 3))
        await conn.close()
        await listener.close()
    run(test)


def test_a_client_that_does_not_read_is_not_read_either():
    """Responses pile up in the socket when the client never reads; the listener then
    stops reading its requests (write flow control) and resumes when the client drains."""
    async def test():
        records = b"x" * (64 * 1024)
        listener = await Listener.start(HOST, 0, lambda request, peer: fetch_response(records))
        raw = await RawClient.open(listener.port)
        count = 400  # ~26 MB of responses: far beyond any socket buffer
        for i in range(count):
            await raw.request(fetch(i), 12, correlation_id=i)
        server_side = next(iter(listener._connections))
        await wait_until(lambda: server_side._reading_paused)
        # Paused with little held back: what the send buffer took before it said "full"
        # (its 64 KiB high-water mark) plus at most one batch of responses written together.
        response_bytes = len(framing.encode_response(fetch_response(records), 12, 0))
        held = server_side._transport.get_write_buffer_size()
        assert held <= 64 * 1024 + 64 * 1024 + response_bytes, held
        assert held < count * response_bytes // 10
        for i in range(count):
            cid, body = await raw.read_response(1, 12)
            assert cid == i and len(body.responses[0].partitions[0].records) == len(records)
        await raw.close()
        await listener.close()
    run(test)


@pytest.mark.parametrize("limit", [1, 3])
def test_many_more_requests_than_slots_all_complete(limit):
    async def test():
        listener = await Listener.start(HOST, 0, lambda r, p: vote_response(7),
                                        inflight_per_connection_max=limit)
        conn = await Connection.open(HOST, listener.port, inflight_max=limit)
        responses = await asyncio.gather(*(conn.send(vote(i)) for i in range(300)))
        assert all(isinstance(r, VoteResponse) for r in responses)
        await conn.close()
        await listener.close()
    run(test)
