"""The listener's defences against peers that flood, hoard or linger: every request counts
toward the in-flight limit and a connection gets a bounded share of each event-loop turn;
idle connections are closed; connections are limited in all and per address; the request
memory bounds what is buffered (partial frames included), lets small requests through,
resumes reading as it is released, never lets two frames wait for each other, and takes
back the room of a frame whose client stops sending it.

A turn of the event loop is measured with a callback that reschedules itself (`Turns`):
what happens between two of its calls happened in one turn. No test asserts on a duration.
"""

import asyncio
import fcntl
import logging
import struct
import termios

import pytest

from kraftcore import limits
from kraftcore.net import Connection, Listener, RequestMemory
from kraftcore.protocol import framing
from kraftcore.protocol.messages import ApiVersionsRequest

from .helpers import (HOST, Gate, RawClient, answered_epoch, epoch_of, open_raw, run, vote,
                      vote_response, wait_until)

NET_LOGGER = "kraftcore.net"
# A second loopback address (Linux routes all of 127.0.0.0/8 to lo): "another client host".
OTHER_HOST = "127.0.0.2"


class Turns:
    """Calls `sample()` once per turn of the event loop; `max_step` is the most `sample()`
    grew between two calls, i.e. in one turn."""

    def __init__(self, sample):
        self.sample = sample
        self.last = sample()
        self.max_step = 0
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_soon(self._tick)

    def _tick(self):
        now = self.sample()
        self.max_step = max(self.max_step, now - self.last)
        self.last = now
        self.handle = self.loop.call_soon(self._tick)

    def stop(self):
        self.handle.cancel()


def server_side(listener, client_port):
    """The listener's connection object for the client bound to `client_port`."""
    for conn in listener._connections:
        if conn.peer[1] == client_port:
            return conn
    return None


def pipelined(frame, count):
    """`count` copies of request `frame` with correlation ids 0, 1, ... (patched in)."""
    out = bytearray(frame * count)
    for i in range(count):
        struct.pack_into(">i", out, i * len(frame) + 8, i)
    return bytes(out)


API_VERSIONS_FRAME = framing.encode_request(
    ApiVersionsRequest(client_software_name="flood", client_software_version="1"), 3, 0, "f")
VOTE_FRAME = framing.encode_request(vote(7), 2, 0, "f")


def client_port(raw):
    return raw.writer.get_extra_info("sockname")[1]


# ------------------------------------------------------------------ in flight and fairness


@pytest.mark.parametrize("kind", ["api-versions", "sync-handler"])
def test_requests_answered_inline_count_toward_the_in_flight_limit(kind):
    """A client pipelines thousands of requests that are answered inline (ApiVersions by the
    listener itself, or a handler that returns its answer at once) without reading: the
    listener takes up at most `inflight_per_connection_max` of them per turn (and stops when
    the client's socket is full, if the answers fill it), and answers them all, in order,
    once the client reads."""
    count = 60_000

    async def test():
        listener = await Listener.start(HOST, 0, lambda r, p: vote_response(epoch_of(r.body)),
                                        inflight_per_connection_max=4)
        raw = await open_raw(listener.port, rcvbuf=4096)
        await wait_until(lambda: server_side(listener, client_port(raw)) is not None)
        conn = server_side(listener, client_port(raw))
        turns = Turns(lambda: conn._requests)
        frame = API_VERSIONS_FRAME if kind == "api-versions" else VOTE_FRAME
        raw.writer.write(pipelined(frame, count))
        await wait_until(lambda: conn._requests == count or (
            conn._writing_paused and conn._reading_paused))
        assert turns.max_step <= 4, turns.max_step
        turns.stop()
        api_key, version = (18, 3) if kind == "api-versions" else (52, 2)
        for i in range(count):
            cid, _ = await raw.read_response(api_key, version)
            assert cid == i
        await raw.close()
        await listener.close()
    run(test)


def test_a_flooding_connection_gets_a_share_of_each_turn_and_others_are_answered():
    """One connection pipelines 40 000 ApiVersions in one go; another's requests are
    answered while that flood is still being worked through, and no turn takes up more
    than the in-flight limit of the flooding connection's requests."""
    count = 40_000

    async def test():
        listener = await Listener.start(HOST, 0, lambda r, p: vote_response(epoch_of(r.body)))
        flood = await open_raw(listener.port)
        await wait_until(lambda: server_side(listener, client_port(flood)) is not None)
        flooding = server_side(listener, client_port(flood))
        turns = Turns(lambda: flooding._requests)

        async def drain():  # the flooder reads its answers, so nothing pauses it
            for _ in range(count):
                await flood.read_frame()
        reader = asyncio.ensure_future(drain())
        flood.writer.write(pipelined(API_VERSIONS_FRAME, count))
        await wait_until(lambda: flooding._requests >= 1000)
        other = await Connection.open(HOST, listener.port)
        for epoch in (1, 2, 3):
            assert answered_epoch(await other.send(vote(epoch))) == epoch
        assert flooding._requests < count, "the flood was over before the others' turn"
        await reader
        assert flooding._requests == count
        assert turns.max_step <= limits.NET_SERVER_INFLIGHT_REQUESTS_MAX, turns.max_step
        turns.stop()
        await other.close()
        await flood.close()
        await listener.close()
    run(test)


# ------------------------------------------------------------------ idle connections


def test_idle_connections_are_closed_and_busy_ones_are_not(caplog):
    """With connections_idle_ms_max: a connection that never sends, and one that sends only
    part of a frame, are closed; one that keeps sending requests stays; one whose request is
    being handled for longer than that stays, and is answered; after its answer it is idle
    and is closed in turn."""
    async def test():
        gate = Gate()

        def handler(request, peer):
            epoch = epoch_of(request.body)
            return vote_response(epoch) if epoch >= 1000 else gate.handler(request, peer)

        listener = await Listener.start(HOST, 0, handler, connections_idle_ms_max=500,
                                        name="node-5")
        silent = await RawClient.open(listener.port)
        partial = await RawClient.open(listener.port)
        await partial.write(VOTE_FRAME[:-5])  # a frame that never completes
        busy = await RawClient.open(listener.port)
        await busy.request(vote(9), 2, correlation_id=1)
        await wait_until(lambda: gate.calls == [9])
        chatty = await Connection.open(HOST, listener.port)
        stop = asyncio.Event()

        async def chat():  # a request every 20 ms until told to stop
            epoch = 1000
            while not stop.is_set():
                assert answered_epoch(await chatty.send(vote(epoch))) == epoch
                epoch += 1
                await asyncio.sleep(0.02)
        chatting = asyncio.ensure_future(chat())
        assert await silent.closed_by_peer()
        assert await partial.closed_by_peer()
        await wait_until(lambda: listener.connection_count == 2)  # busy and chatty stay
        gate.release(9)
        cid, body = await busy.read_response(52, 2)
        assert (cid, answered_epoch(body)) == (1, 9)
        assert await busy.closed_by_peer()  # idle after its answer
        stop.set()
        await chatting
        assert not chatty.closed and listener.connection_count == 1
        await chatty.close()
        await wait_until(lambda: listener.connection_count == 0)
        for raw in (silent, partial, busy):
            await raw.close()
        await listener.close()

    with caplog.at_level(logging.INFO, logger=NET_LOGGER):
        run(test)
    lines = [r.getMessage() for r in caplog.records if r.name == NET_LOGGER]
    assert lines and all(line.startswith("node-5: closing ") and "no request for 500 ms "
                         "(connections_idle_ms_max)" in line for line in lines), lines


# ------------------------------------------------------------------ connection limits


def test_connections_beyond_the_per_address_limit_are_closed(caplog):
    """Kafka's max.connections.per.ip: the third connection from one address is closed at
    once; the first two keep working, another address still connects, and a slot frees when
    one of the two closes."""
    async def test():
        listener = await Listener.start(HOST, 0, lambda r, p: vote_response(epoch_of(r.body)),
                                        connections_per_ip_max=2, name="node-6")
        first = await Connection.open(HOST, listener.port)
        second = await Connection.open(HOST, listener.port)
        assert answered_epoch(await second.send(vote(1))) == 1
        extra = await RawClient.open(listener.port)
        assert await extra.closed_by_peer()
        await extra.close()
        elsewhere = await open_raw(listener.port, source=OTHER_HOST)
        await elsewhere.request(vote(2), 2, correlation_id=5)
        assert answered_epoch((await elsewhere.read_response(52, 2))[1]) == 2
        assert answered_epoch(await first.send(vote(3))) == 3
        assert answered_epoch(await second.send(vote(4))) == 4
        await first.close()
        await wait_until(lambda: listener.connection_count == 2)
        again = await Connection.open(HOST, listener.port)
        assert answered_epoch(await again.send(vote(5))) == 5
        for conn in (again, second):
            await conn.close()
        await elsewhere.close()
        await listener.close()

    with caplog.at_level(logging.WARNING, logger=NET_LOGGER):
        run(test)
    lines = [r.getMessage() for r in caplog.records if r.name == NET_LOGGER]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"node-6: refused the connection from {HOST}:")
    assert lines[0].endswith(f"already 2 connections from {HOST} (connections_per_ip_max)")


def test_refused_connections_are_logged_at_most_once_per_interval(caplog):
    async def test():
        listener = await Listener.start(HOST, 0, lambda r, p: vote_response(7),
                                        connections_max=1, name="node-7")
        kept = await Connection.open(HOST, listener.port)
        for _ in range(30):
            extra = await RawClient.open(listener.port)
            assert await extra.closed_by_peer()
            await extra.close()
        assert answered_epoch(await kept.send(vote(7))) == 7
        await kept.close()
        await listener.close()

    with caplog.at_level(logging.WARNING, logger=NET_LOGGER):
        run(test)
    lines = [r.getMessage() for r in caplog.records if r.name == NET_LOGGER]
    # 30 refusals within a few interval lengths at most: one line, maybe a few
    assert 1 <= len(lines) < 30, lines
    assert lines[0].endswith("already 1 connections open (connections_max)")


# ------------------------------------------------------------------ request memory


def big_vote_frame(size, correlation_id):
    """A Vote v2 request frame of about `size` bytes (its cluster id carries the bulk)."""
    body = vote(correlation_id)
    body.cluster_id = "c" * size
    return framing.encode_request(body, 2, correlation_id, "big")


def buffered_bytes(listener):
    """What the listener's connections hold in their input buffers right now."""
    return sum(len(conn._in) for conn in listener._connections if conn._in is not None)


def test_request_memory_bounds_partial_frames_and_reading_resumes():
    """Five connections each send most of a frame about as large as the whole request
    memory. The first frame gets its room; the others stop reading, holding at most the
    guaranteed bytes each, while a small request from another connection is still answered.
    When the first frame completes and is answered, the next waiting one gets its room, and
    so on: every frame is answered."""
    cap = 1024 * 1024
    guaranteed = limits.NET_CONNECTION_GUARANTEED_BYTES_MIN

    async def test():
        memory = RequestMemory(cap)
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler, frame_bytes_max=cap,
                                        memory=memory)
        frames = [big_vote_frame(cap - 200, 100 + i) for i in range(5)]
        assert all(cap // 2 < len(f) <= cap for f in frames)
        senders = []
        for frame in frames:
            raw = await RawClient.open(listener.port)
            raw.writer.write(frame[:-1000])  # all but the last 1000 bytes
            senders.append(raw)
        await wait_until(lambda: memory.waiting_count == 4)
        # The first holds its whole frame's room; the others at most the guaranteed bytes.
        assert memory.used_bytes <= cap + 5 * guaranteed, memory.used_bytes
        assert buffered_bytes(listener) <= memory.used_bytes
        assert memory.used_bytes >= len(frames[0])

        probe = await Connection.open(HOST, listener.port)
        probe_answer = asyncio.ensure_future(probe.send(vote(1)))
        await wait_until(lambda: 1 in gate.calls)
        gate.release(1)
        assert answered_epoch(await probe_answer) == 1
        assert memory.waiting_count == 4 and memory.used_bytes <= cap + 6 * guaranteed

        for i, (raw, frame) in enumerate(zip(senders, frames)):
            epoch = 100 + i
            raw.writer.write(frame[-1000:])
            await wait_until(lambda epoch=epoch: epoch in gate.calls)
            assert memory.used_bytes <= cap + 6 * guaranteed
            gate.release(epoch)
            cid, body = await raw.read_response(52, 2)
            assert (cid, answered_epoch(body)) == (epoch, epoch)
        await wait_until(lambda: memory.used_bytes == 0)
        assert memory.waiting_count == 0
        for raw in senders:
            await raw.close()
        await probe.close()
        await listener.close()
    run(test)


def test_frames_waiting_for_request_memory_are_served_in_arrival_order():
    """A frame that waits for room is not overtaken by a later one that would fit: the
    later one waits behind it (beyond its guaranteed bytes) until the first has its room,
    so a large frame cannot be starved by a stream of smaller ones."""
    cap = 1024 * 1024

    async def test():
        memory = RequestMemory(cap)
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler, frame_bytes_max=cap,
                                        memory=memory)
        first, second, third = (big_vote_frame(size, epoch) for size, epoch in
                                ((900 * 1024, 1), (600 * 1024, 2), (100 * 1024, 3)))
        holder = await RawClient.open(listener.port)
        await holder.write(first[:-10])
        await wait_until(lambda: memory.used_bytes >= len(first))
        large = await RawClient.open(listener.port)
        await large.write(second[:100])  # it waits for its room with the rest unread
        await wait_until(lambda: memory.waiting_count == 1)
        room = cap - memory.used_bytes
        assert room > len(third)
        large.writer.write(second[100:])
        small = await RawClient.open(listener.port)  # it would fit the room left
        await small.write(third)
        await wait_until(lambda: memory.waiting_count == 2)  # the small one waits too
        assert gate.calls == []
        await holder.write(first[-10:])
        await wait_until(lambda: gate.calls == [1])
        assert memory.waiting_count == 2  # the first is still held while it is handled
        gate.release(1)
        assert answered_epoch((await holder.read_response(52, 2))[1]) == 1
        await wait_until(lambda: sorted(gate.calls) == [1, 2, 3])  # both got their room
        gate.release_all()
        for epoch, raw in ((2, large), (3, small)):
            assert answered_epoch((await raw.read_response(52, 2))[1]) == epoch
        for raw in (holder, large, small):
            await raw.close()
        await listener.close()
    run(test)


def unread_bytes(conn):
    """Bytes that wait in the socket of the listener's connection `conn`, not read yet."""
    sock = conn._transport.get_extra_info("socket")
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


def test_a_partial_frame_behind_waiting_requests_counts_at_once_and_stalls_no_other():
    """One read brings connection D three small requests (one more than its in-flight limit)
    and the first 50 000 bytes of a frame as large as the request memory. That frame counts
    its whole size at once, though a request waits ahead of it. Connection E then sends a
    frame as large and waits for room. D's requests are answered, D sends the rest of its
    frame: D's frame is handled, then E's. (Had D's partial frame been counted only as
    read, D would queue behind E while holding those bytes, and E would never fit.)"""
    cap = 1024 * 1024

    async def test():
        memory = RequestMemory(cap)
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler, frame_bytes_max=cap,
                                        memory=memory, inflight_per_connection_max=2)
        small = b"".join(framing.encode_request(vote(i), 2, i, "d") for i in (1, 2, 3))
        d_frame, e_frame = big_vote_frame(cap - 200, 50), big_vote_frame(cap - 200, 60)
        d = await RawClient.open(listener.port)
        await wait_until(lambda: server_side(listener, client_port(d)) is not None)
        d_conn = server_side(listener, client_port(d))
        d_conn._transport.pause_reading()  # so that one read takes all of it
        head = small + d_frame[:50_000]
        await d.write(head)
        await wait_until(lambda: unread_bytes(d_conn) == len(head))
        d_conn._transport.resume_reading()
        await wait_until(lambda: gate.calls == [1, 2])
        assert memory.used_bytes == len(small) + len(d_frame), memory
        assert memory.waiting_count == 0

        e = await RawClient.open(listener.port)
        e.writer.write(e_frame)
        await wait_until(lambda: memory.waiting_count == 1)
        gate.release(1)
        gate.release(2)
        await wait_until(lambda: gate.calls == [1, 2, 3])
        gate.release(3)
        for i in (1, 2, 3):
            assert answered_epoch((await d.read_response(52, 2))[1]) == i
        d.writer.write(d_frame[len(head) - len(small):])
        await wait_until(lambda: 50 in gate.calls)
        gate.release(50)
        assert answered_epoch((await d.read_response(52, 2))[1]) == 50
        await wait_until(lambda: 60 in gate.calls)
        gate.release(60)
        assert answered_epoch((await e.read_response(52, 2))[1]) == 60
        await wait_until(lambda: memory.used_bytes == 0)
        for raw in (d, e):
            await raw.close()
        await listener.close()
    run(test, timeout_s=30)


def test_a_connection_that_sends_none_of_its_reserved_frame_is_closed(monkeypatch, caplog):
    """A client sends only the 4-byte size of a frame as large as the request memory (the
    default: frame_bytes_max), which reserves all of it, and nothing more. Another
    client's 40 KB request needs room beyond its guaranteed bytes: it is answered once the
    first client, which sent no byte of its frame for limits.NET_PARTIAL_FRAME_STALL_MS_MAX,
    has been closed. The one that waited for room (and sent no byte meanwhile either) is
    not closed."""
    monkeypatch.setattr(limits, "NET_PARTIAL_FRAME_STALL_MS_MAX", 300, raising=False)
    cap = 8 * 1024 * 1024

    async def test():
        listener = await Listener.start(HOST, 0, lambda r, p: vote_response(epoch_of(r.body)),
                                        frame_bytes_max=cap, name="node-8")
        memory = listener.memory
        hoarder = await RawClient.open(listener.port)
        await hoarder.write(struct.pack(">i", cap))
        await wait_until(lambda: memory.used_bytes == cap + 4)
        body = vote(5)
        body.cluster_id = "c" * 40_000
        client = await Connection.open(HOST, listener.port, request_timeout_ms=20_000)
        assert answered_epoch(await client.send(body)) == 5
        assert await hoarder.closed_by_peer()
        assert answered_epoch(await client.send(vote(6))) == 6
        await wait_until(lambda: memory.used_bytes == 0)
        await client.close()
        await hoarder.close()
        await listener.close()

    with caplog.at_level(logging.WARNING, logger=NET_LOGGER):
        run(test)
    lines = [r.getMessage() for r in caplog.records if r.name == NET_LOGGER]
    assert len(lines) == 1, lines
    assert lines[0].startswith("node-8: closing 1 connection(s) that sent no byte of the "
                               "frame they reserved for 300 ms "
                               "(limits.NET_PARTIAL_FRAME_STALL_MS_MAX): 127.0.0.1:"), lines


def test_a_large_frame_that_keeps_arriving_is_read_to_the_end(monkeypatch):
    """A frame as large as the request memory arrives a little at a time, some bytes between
    any two sweeps of the listener, over three times limits.NET_PARTIAL_FRAME_STALL_MS_MAX: it
    is not closed, and it is answered."""
    monkeypatch.setattr(limits, "NET_PARTIAL_FRAME_STALL_MS_MAX", 1000, raising=False)
    cap = 1024 * 1024
    chunks = 24  # a sweep every eighth of the stall bound: 24 sweeps are 3 bounds

    async def test():
        listener = await Listener.start(HOST, 0, lambda r, p: vote_response(epoch_of(r.body)),
                                        frame_bytes_max=cap)
        frame = big_vote_frame(cap - 200, 9)
        raw = await RawClient.open(listener.port)
        step = len(frame) // chunks + 1
        for start in range(0, len(frame), step):
            await raw.write(frame[start:start + step])
            if start + step < len(frame):
                read = start + step
                await wait_until(lambda read=read: buffered_bytes(listener) == read)
                # a sweep after that read: it sees the frame progress
                sweep = listener._sweep_handle
                await wait_until(lambda sweep=sweep: listener._sweep_handle is not sweep)
        assert answered_epoch((await raw.read_response(52, 2))[1]) == 9
        await raw.close()
        await listener.close()
    run(test)


def test_request_memory_is_shared_and_given_back_when_connections_close():
    cap = 256 * 1024

    async def test():
        memory = RequestMemory(cap)
        handler = lambda r, p: vote_response(epoch_of(r.body))
        one = await Listener.start(HOST, 0, handler, frame_bytes_max=cap, memory=memory)
        two = await Listener.start(HOST, 0, handler, frame_bytes_max=cap, memory=memory)
        holder = await RawClient.open(one.port)
        await holder.write(big_vote_frame(cap - 200, 1)[:-10])
        await wait_until(lambda: memory.used_bytes > cap // 2)
        waiter = await RawClient.open(two.port)
        frame = big_vote_frame(cap - 200, 2)
        waiter.writer.write(frame)
        await wait_until(lambda: memory.waiting_count == 1)
        await holder.close()  # its frame never completes: its room comes back on close
        cid, body = await waiter.read_response(52, 2)
        assert (cid, answered_epoch(body)) == (2, 2)
        await wait_until(lambda: memory.used_bytes == 0)
        await waiter.close()
        await one.close()
        await two.close()
    run(test)


def test_pipelined_frames_that_wait_are_counted():
    """Frames read but not yet taken up (the in-flight limit is reached) count in the
    request memory until they are answered."""
    async def test():
        memory = RequestMemory(1024 * 1024)
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler, memory=memory,
                                        frame_bytes_max=1024 * 1024,
                                        inflight_per_connection_max=2)
        raw = await RawClient.open(listener.port)
        frames = [framing.encode_request(vote(i), 2, i, "raw") for i in range(1, 6)]
        await raw.write(b"".join(frames))
        await wait_until(lambda: len(gate.calls) == 2)
        await wait_until(lambda: memory.used_bytes == sum(len(f) for f in frames))
        gate.release_all()
        await wait_until(lambda: len(gate.calls) == 4)
        gate.release_all()
        await wait_until(lambda: len(gate.calls) == 5)
        gate.release_all()
        for i in range(1, 6):
            cid, body = await raw.read_response(52, 2)
            assert (cid, answered_epoch(body)) == (i, i)
        await wait_until(lambda: memory.used_bytes == 0)
        await raw.close()
        await listener.close()
    run(test)


# ------------------------------------------------------------------ arguments


def test_bad_limits_are_refused_with_what_to_do():
    async def test():
        handler = lambda r, p: vote_response(1)
        with pytest.raises(ValueError, match="must hold at least one frame of frame_bytes_max"):
            await Listener.start(HOST, 0, handler, frame_bytes_max=2048,
                                 memory=RequestMemory(1024))
        with pytest.raises(ValueError, match="connections_per_ip_max must be None"):
            await Listener.start(HOST, 0, handler, connections_per_ip_max=0)
        with pytest.raises(ValueError, match="connections_idle_ms_max must be None"):
            await Listener.start(HOST, 0, handler, connections_idle_ms_max=-1)
        with pytest.raises(TypeError, match="memory must be a RequestMemory"):
            await Listener.start(HOST, 0, handler, memory=1024)
        with pytest.raises(ValueError, match="bytes_max must be None"):
            RequestMemory(0)
    run(test)
