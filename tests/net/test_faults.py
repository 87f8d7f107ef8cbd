"""Faults: a connection that breaks the protocol is closed alone (the listener and the
other connections keep working, one log line says why); timeouts; connections that end
with requests in flight; bad responses seen by the client."""

import asyncio
import logging
import struct

import pytest

from kraftcore.errors import (ConnectError, ConnectionClosedError, NetworkError,
                              RequestTimeoutError)
from kraftcore.net import Connection, Listener
from kraftcore.protocol import framing
from kraftcore.protocol.messages import DescribeQuorumResponse, FetchRequest, VoteRequest

from .helpers import (HOST, Gate, RawClient, answered_epoch, fetch, fetch_response,
                      request_frame_with, run, vote, vote_response, wait_until)

NET_LOGGER = "kraftcore.net"


def _vote_v2_frame(correlation_id=5):
    return framing.encode_request(vote(3), 2, correlation_id, "raw")


def _handler(request, peer):
    body = request.body
    if isinstance(body, VoteRequest):
        epoch = body.topics[0].partitions[0].replica_epoch
        if epoch == 666:
            raise RuntimeError("handler bug")
        if epoch == 667:
            return None
        if epoch == 668:
            return DescribeQuorumResponse()  # the wrong API
        if epoch == 669:
            async def fails():
                raise RuntimeError("async handler bug")
            return fails()
        return vote_response(epoch)
    if isinstance(body, FetchRequest):
        return fetch_response(b"r" * 100)
    raise AssertionError(body)


def _with_payload(payload):
    return struct.pack(">i", len(payload)) + payload


_VOTE_PAYLOAD = _vote_v2_frame()[4:]

# What is sent, and a piece of the log line that must say why the connection was closed.
BAD_INPUTS = {
    "garbage bytes": (b"\x00\x00\x00\x05hello", "malformed request header"),
    "negative size": (b"\xff\xff\xff\xfe" + b"x" * 8, "frame size -2 is outside"),
    "oversize frame": (struct.pack(">i", 4096) + b"\x00" * 16, "frame size 4096 is outside"),
    "unknown api key": (request_frame_with(999, 0, 1), "unknown API key 999"),
    "unsupported version": (request_frame_with(52, 99, 1), "Vote v99 is not supported"),
    "api not served": (framing.encode_request(fetch(0), 12, 1, "raw"),
                       "Fetch (API key 1), which this listener does not serve"),
    "truncated body": (_with_payload(_VOTE_PAYLOAD[:-3]), "malformed Vote v2 request"),
    "handler raises": (framing.encode_request(vote(666), 2, 1, "raw"), "handler failed"),
    "handler returns None": (framing.encode_request(vote(667), 2, 1, "raw"),
                             "returned NoneType"),
    "handler answers the wrong api": (framing.encode_request(vote(668), 2, 1, "raw"),
                                      "answered Vote with DescribeQuorumResponse"),
    "async handler raises": (framing.encode_request(vote(669), 2, 1, "raw"),
                             "handler failed"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_a_bad_connection_is_closed_alone(case, caplog):
    async def test():
        listener = await Listener.start(HOST, 0, _handler, frame_bytes_max=1024,
                                        api_keys=[52], name="node-9")
        healthy = await Connection.open(HOST, listener.port)
        assert answered_epoch(await healthy.send(vote(1))) == 1

        bad = await RawClient.open(listener.port)
        await bad.request(vote(2), 2, correlation_id=41)  # a good request first:
        cid, body = await bad.read_response(52, 2)  # it is answered
        assert (cid, answered_epoch(body)) == (41, 2)
        caplog.clear()
        await bad.write(BAD_INPUTS[case][0])
        assert await bad.closed_by_peer()
        await bad.close()

        assert answered_epoch(await healthy.send(vote(3))) == 3  # still open
        newcomer = await Connection.open(HOST, listener.port)  # still accepting
        assert answered_epoch(await newcomer.send(vote(4))) == 4
        await wait_until(lambda: listener.connection_count == 2)
        await newcomer.close()
        await healthy.close()
        await listener.close()

    with caplog.at_level(logging.WARNING, logger=NET_LOGGER):
        run(test)
    lines = [r for r in caplog.records if r.name == NET_LOGGER]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    message = lines[0].getMessage()
    assert message.startswith("node-9: ") and f"{HOST}:" in message
    assert BAD_INPUTS[case][1] in message, message
    if case.startswith(("handler raises", "async handler raises")):
        assert lines[0].exc_info is not None and "handler bug" in str(lines[0].exc_info[1])


def test_bytes_after_a_request_body_are_skipped_and_answered():
    """As in Kafka, bytes after a request's body do not break the connection: the request is
    answered, and the handler sees how many there were."""
    seen = []

    def handler(request, peer):
        seen.append(request.trailing_bytes)
        return _handler(request, peer)

    async def test():
        listener = await Listener.start(HOST, 0, handler, api_keys=[52])
        raw = await RawClient.open(listener.port)
        await raw.write(_with_payload(_VOTE_PAYLOAD + b"\x01\x02"))
        cid, body = await raw.read_response(52, 2)
        assert (cid, answered_epoch(body)) == (5, 3)
        await raw.request(vote(4), 2, correlation_id=6)  # the connection goes on
        cid, body = await raw.read_response(52, 2)
        assert (cid, answered_epoch(body)) == (6, 4)
        assert listener.requests_with_trailing_bytes == 1  # counted
        await raw.close()
        await listener.close()
    run(test)
    assert seen == [2, 0]


def test_oversize_frame_is_refused_from_its_size_alone():
    """The listener closes the connection on the size prefix: it never waits for (or
    buffers) the body of a frame that is too big."""
    async def test():
        listener = await Listener.start(HOST, 0, _handler, frame_bytes_max=1024)
        raw = await RawClient.open(listener.port)
        await raw.write(struct.pack(">i", 100 * 1024 * 1024))  # and nothing else
        assert await raw.closed_by_peer()
        await raw.close()
        await listener.close()
    run(test)


def test_timeout_of_a_request_in_flight_closes_the_connection():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port)
        stuck = asyncio.ensure_future(conn.send(vote(1), timeout_ms=50))
        other = asyncio.ensure_future(conn.send(vote(2)))  # default timeout: 30 s
        with pytest.raises(RequestTimeoutError, match="no response within 50 ms") as info:
            await stuck
        assert info.value.address == (HOST, listener.port)
        with pytest.raises(ConnectionClosedError, match="got no response within 50 ms"):
            await other
        assert conn.closed
        with pytest.raises(ConnectionClosedError):
            await conn.send(vote(3))
        await conn.close()
        await listener.close()
    run(test)


def test_timeout_while_waiting_for_a_slot_drops_the_request_unsent():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port, inflight_max=1)
        first = asyncio.ensure_future(conn.send(vote(1)))
        await wait_until(lambda: gate.calls == [1])
        with pytest.raises(RequestTimeoutError, match="was not sent"):
            await conn.send(vote(2), timeout_ms=30)
        assert not conn.closed and conn.queued_count == 0
        gate.release(1)
        assert answered_epoch(await first) == 1
        assert answered_epoch(await asyncio.ensure_future(_send_released(conn, gate, 3))) == 3
        assert gate.calls == [1, 3]  # request 2 never reached the server
        await conn.close()
        await listener.close()
    run(test)


async def _send_released(conn, gate, epoch):
    gate.release(epoch)
    return await conn.send(vote(epoch))


def test_listener_closing_mid_request_fails_it_clearly():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port)
        pending = [asyncio.ensure_future(conn.send(vote(i))) for i in (1, 2)]
        await wait_until(lambda: len(gate.calls) == 2)
        await listener.close()  # cancels the two handlers
        for task in pending:
            with pytest.raises(ConnectionClosedError, match="may or may not have been "
                                                            "processed"):
                await task
        assert conn.closed
        await conn.close()
    run(test)


def test_cancelled_send_in_flight_keeps_the_stream_in_sync():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port)
        abandoned = asyncio.ensure_future(conn.send(vote(1)))
        await wait_until(lambda: gate.calls == [1])
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        gate.release(1)
        gate.release(2)
        assert answered_epoch(await conn.send(vote(2))) == 2
        assert conn.inflight_count == 0 and not conn.closed
        await conn.close()
        await listener.close()
    run(test)


def test_connect_refused_is_a_connect_error():
    async def test():
        listener = await Listener.start(HOST, 0, _handler)
        port = listener.port
        await listener.close()
        with pytest.raises(ConnectError, match=f"could not connect to {HOST}:{port}"):
            await Connection.open(HOST, port)
    run(test)


def test_send_nowait_on_a_closed_connection_reports_through_the_callback():
    async def test():
        listener = await Listener.start(HOST, 0, _handler)
        conn = await Connection.open(HOST, listener.port)
        await conn.close()
        results = []
        conn.send_nowait(vote(1), 2, lambda response, error: results.append((response, error)))
        assert results == []
        await wait_until(lambda: results)
        assert results[0][0] is None and isinstance(results[0][1], ConnectionClosedError)
        with pytest.raises(TypeError):
            conn.send_nowait(vote_response(1), None, lambda r, e: None)  # a response body
        await listener.close()
    run(test)


def test_encode_error_fails_only_that_request():
    async def test():
        listener = await Listener.start(HOST, 0, _handler)
        conn = await Connection.open(HOST, listener.port)
        with pytest.raises(Exception, match="cannot be written at this version"):
            await conn.send(FetchRequest(replica_id=2, max_wait_ms=1, min_bytes=1), 17)
        assert answered_epoch(await conn.send(vote(1))) == 1
        await conn.close()
        await listener.close()
    run(test)


# ------------------------------------------------------------------------------ bad peers


async def _fake_server(reply):
    """A server that answers each request frame with `reply(correlation_id)` bytes."""
    async def serve(reader, writer):
        decoder = framing.FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    _, _, cid = framing.peek_request(frame)
                    writer.write(reply(cid))
        except ConnectionError:
            pass
        writer.close()
    return await asyncio.start_server(serve, HOST, 0)


BAD_RESPONSES = {
    "wrong correlation id": lambda cid: framing.encode_response(vote_response(1), 2, cid + 1),
    "oversize frame": lambda cid: struct.pack(">ii", 10_000, cid) + b"\x00" * 9996,
    "garbage body": lambda cid: struct.pack(">ii", 7, cid) + b"\xff\xff\xff",
    "two responses to one request":
        lambda cid: framing.encode_response(vote_response(1), 2, cid) * 2,
}


@pytest.mark.parametrize("case", sorted(BAD_RESPONSES))
def test_a_peer_breaking_the_protocol_closes_the_client_connection(case, caplog):
    async def test():
        server = await _fake_server(BAD_RESPONSES[case])
        port = server.sockets[0].getsockname()[1]
        conn = await Connection.open(HOST, port, frame_bytes_max=4096)
        if case == "two responses to one request":
            assert answered_epoch(await conn.send(vote(1), 2)) == 1
            await wait_until(lambda: conn.closed)
        else:
            with pytest.raises(ConnectionClosedError) as info:
                await conn.send(vote(1), 2)
            assert isinstance(info.value, NetworkError)
        assert conn.closed
        await conn.close()
        server.close()
        await server.wait_closed()
    with caplog.at_level(logging.WARNING, logger=NET_LOGGER):
        run(test)
    assert any("broke the protocol" in r.getMessage() for r in caplog.records)


def test_a_later_request_with_a_shorter_timeout_expires_first():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port)
        patient = asyncio.ensure_future(conn.send(vote(1), timeout_ms=60_000))
        hasty = asyncio.ensure_future(conn.send(vote(2), timeout_ms=40))
        with pytest.raises(RequestTimeoutError, match=r"Vote v2 \(correlation id 1\) got no "
                                                      r"response within 40 ms"):
            await hasty
        with pytest.raises(ConnectionClosedError):
            await patient
        await conn.close()
        await listener.close()
    run(test)


def test_deadlines_of_answered_requests_do_not_expire_later_ones():
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        conn = await Connection.open(HOST, listener.port)
        gate.release(1)
        assert answered_epoch(await conn.send(vote(1), timeout_ms=30)) == 1
        slow = asyncio.ensure_future(conn.send(vote(2), timeout_ms=60_000))
        await asyncio.sleep(0.1)  # the 30 ms deadline of request 1 has passed
        assert not conn.closed and not slow.done()
        gate.release(2)
        assert answered_epoch(await slow) == 2
        await conn.close()
        await listener.close()
    run(test)


def test_a_future_the_handler_does_not_own_is_left_alone_when_its_connection_closes():
    async def test():
        pending = []

        def handler(request, peer):
            future = asyncio.get_running_loop().create_future()  # the "driver's" future
            pending.append(future)
            return future

        listener = await Listener.start(HOST, 0, handler)
        conn = await Connection.open(HOST, listener.port)
        task = asyncio.ensure_future(conn.send(vote(1)))
        await wait_until(lambda: pending)
        await conn.close()
        with pytest.raises(ConnectionClosedError):
            await task
        await wait_until(lambda: listener.connection_count == 0)
        assert not pending[0].cancelled()
        pending[0].set_result(vote_response(1))  # completing it later harms nothing
        await asyncio.sleep(0)
        await listener.close()
    run(test)


def test_connections_beyond_the_listener_limit_are_closed_at_once(caplog):
    async def test():
        listener = await Listener.start(HOST, 0, _handler, connections_max=1, name="node-3")
        first = await Connection.open(HOST, listener.port)
        extra = await RawClient.open(listener.port)
        assert await extra.closed_by_peer()
        await extra.close()
        assert answered_epoch(await first.send(vote(1))) == 1
        await first.close()
        await wait_until(lambda: listener.connection_count == 0)
        again = await Connection.open(HOST, listener.port)  # a slot is free again
        assert answered_epoch(await again.send(vote(2))) == 2
        await again.close()
        await listener.close()
    with caplog.at_level(logging.WARNING, logger=NET_LOGGER):
        run(test)
    lines = [r.getMessage() for r in caplog.records if r.name == NET_LOGGER]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"node-3: refused the connection from {HOST}:")
    assert lines[0].endswith("already 1 connections open (connections_max)")


def test_a_peer_that_never_answers_api_versions_is_a_connect_error():
    """It accepts the connection and stays silent: the negotiation of the connect times
    out, and `open` raises ConnectError (what a failed connect raises), not a closed
    connection."""
    async def scenario():
        async def silent(reader, writer):
            await reader.read()  # until the client goes
            writer.close()

        server = await asyncio.start_server(silent, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        try:
            with pytest.raises(ConnectError, match="did not answer ApiVersions"):
                await Connection.open(HOST, port, negotiate_versions=True,
                                      connect_timeout_ms=200)
        finally:
            server.close()
            await server.wait_closed()
    run(scenario)
