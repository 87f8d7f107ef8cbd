"""The peer pool: lazy connections by node id, reconnect with backoff after failures
(the jitter from the injected rng), address updates, and a close that leaves nothing."""

import asyncio
import logging
import random
import re

import pytest

from kraftcore.errors import (ConnectError, ConnectionClosedError, NetworkError,
                              UnknownPeerError)
from kraftcore.net import Listener, PeerPool
from kraftcore.net.backoff import Backoff

from .helpers import HOST, Gate, answered_epoch, run, vote, vote_response, wait_until


def _answer(request, peer):
    return vote_response(request.body.topics[0].partitions[0].replica_epoch)


async def _free_port():
    listener = await Listener.start(HOST, 0, _answer)
    port = listener.port
    await listener.close()
    return port


def test_connects_lazily_and_reuses_the_connection():
    async def test():
        listener = await Listener.start(HOST, 0, _answer)
        pool = PeerPool(rng=random.Random(1))
        pool.update(1, HOST, listener.port)
        assert pool.peers == {1: (HOST, listener.port)}
        await asyncio.sleep(0.01)
        assert listener.connection_count == 0  # nothing sent, nothing connected
        assert answered_epoch(await pool.send(1, vote(5))) == 5
        assert answered_epoch(await pool.send(1, vote(6), 1)) == 6
        assert listener.connection_count == 1
        await pool.close()
        await listener.close()
    run(test)


def test_send_nowait_calls_back_later_with_response_or_error():
    async def test():
        listener = await Listener.start(HOST, 0, _answer)
        pool = PeerPool(rng=random.Random(1))
        pool.update(1, HOST, listener.port)
        pool.update(2, HOST, await _free_port())  # nobody listens there
        results = {}
        for node_id, epoch in ((1, 10), (1, 11), (2, 12)):
            pool.send_nowait(node_id, vote(epoch), None,
                             lambda response, error, e=epoch: results.__setitem__(
                                 e, (response, error)))
        assert results == {}  # never from inside send_nowait
        await wait_until(lambda: len(results) == 3)
        assert [answered_epoch(results[e][0]) for e in (10, 11)] == [10, 11]
        assert results[12][0] is None and isinstance(results[12][1], ConnectError)
        await pool.close()
        await listener.close()
    run(test)


def test_caller_mistakes_raise_at_once():
    async def test():
        pool = PeerPool(rng=random.Random(1))
        with pytest.raises(UnknownPeerError, match="no address for node 7"):
            pool.send_nowait(7, vote(1), None, lambda r, e: None)
        with pytest.raises(UnknownPeerError):
            await pool.send(7, vote(1))
        pool.update(1, HOST, 1)
        with pytest.raises(Exception, match="versions 0-2, not 9"):
            pool.send_nowait(1, vote(1), 9, lambda r, e: None)
        await pool.close()
        with pytest.raises(ConnectionClosedError, match="pool is closed"):
            pool.send_nowait(1, vote(1), None, lambda r, e: None)
    run(test)


def test_reconnects_after_a_restart_with_the_rng_jittered_backoff(caplog):
    """The node restarts on the same port: the request on the dead connection fails, the
    next attempt comes after the backoff and fails while the node is down, and the one
    after reconnects. The delays logged are exactly those of a Backoff with the same seed:
    failures 1 (the connection had answered), then 2 (a refused connect)."""
    async def test():
        listener = await Listener.start(HOST, 0, _answer)
        port = listener.port
        pool = PeerPool(rng=random.Random(2024), backoff_base_ms=20, backoff_ms_max=200)
        pool.update(1, HOST, port)
        assert answered_epoch(await pool.send(1, vote(1))) == 1
        conn = pool.connection(1)

        await listener.close()
        await wait_until(lambda: conn.closed)
        with pytest.raises(ConnectError, match=f"could not connect to {HOST}:{port}"):
            await pool.send(1, vote(2), timeout_ms=10_000)  # waits out the backoff first

        listener = await Listener.start(HOST, port, _answer)
        assert answered_epoch(await pool.send(1, vote(3), timeout_ms=10_000)) == 3
        assert pool.connection(1) is not conn
        await pool.close()
        await listener.close()

    with caplog.at_level(logging.INFO, logger="kraftcore.net"):
        run(test)
    delays = [re.search(r"next connect attempt in (\d+) ms", r.getMessage())
              for r in caplog.records]
    delays = [int(m.group(1)) for m in delays if m]
    expected = Backoff(20, 200, 0.2, random.Random(2024))
    assert delays == [round(expected.delay_ms(1)), round(expected.delay_ms(2))]


def test_during_the_backoff_a_short_request_fails_at_once():
    async def test():
        dead = await _free_port()
        pool = PeerPool(rng=random.Random(3), backoff_base_ms=60_000, backoff_ms_max=60_000)
        pool.update(1, HOST, dead)
        with pytest.raises(ConnectError, match="could not connect"):
            await pool.send(1, vote(1), timeout_ms=5_000)
        # The next attempt is ~1 minute away: a request with 5 s to live fails now, sent
        # nowhere, and says why.
        with pytest.raises(ConnectError, match="reconnect backoff .* could not connect"):
            await pool.send(1, vote(2), timeout_ms=5_000)

        # A new address forgets the backoff.
        listener = await Listener.start(HOST, 0, _answer)
        pool.update(1, HOST, listener.port)
        assert answered_epoch(await pool.send(1, vote(3), timeout_ms=5_000)) == 3
        await pool.close()
        await listener.close()
    run(test)


def test_update_to_a_new_address_moves_the_peer():
    async def test():
        gate = Gate()
        old = await Listener.start(HOST, 0, gate.handler)
        new = await Listener.start(HOST, 0, _answer)
        pool = PeerPool(rng=random.Random(4))
        pool.update(1, HOST, old.port)
        pending = asyncio.ensure_future(pool.send(1, vote(1)))
        await wait_until(lambda: gate.calls == [1])
        pool.update(1, HOST, old.port)  # the same address: nothing happens
        assert not pending.done()
        pool.update(1, HOST, new.port)
        with pytest.raises(ConnectionClosedError, match=f"moved from {HOST}:{old.port}"):
            await pending
        assert answered_epoch(await pool.send(1, vote(2))) == 2
        pool.remove(1)
        with pytest.raises(UnknownPeerError):
            await pool.send(1, vote(3))
        await pool.close()
        await old.close()
        await new.close()
    run(test)


def test_close_fails_everything_and_leaves_no_task_behind():
    """In flight, waiting for a slot, waiting for a delayed connect, and awaiting callers:
    all end with ConnectionClosedError; `run` then checks that no task is left."""
    async def test():
        gate = Gate()
        listener = await Listener.start(HOST, 0, gate.handler)
        dead = await _free_port()
        pool = PeerPool(rng=random.Random(5), inflight_per_peer_max=2,
                        backoff_base_ms=60_000, backoff_ms_max=60_000)
        pool.update(1, HOST, listener.port)
        pool.update(2, HOST, dead)
        with pytest.raises(ConnectError):
            await pool.send(2, vote(99))  # node 2 is now in a one-minute backoff

        results = {}

        def collect(epoch):
            return lambda response, error: results.__setitem__(epoch, (response, error))

        for epoch in (1, 2, 3):  # two in flight, one waiting for a slot
            pool.send_nowait(1, vote(epoch), None, collect(epoch))
        pool.send_nowait(2, vote(4), None, collect(4), timeout_ms=120_000)  # waits for the
        # delayed connect
        awaiting = asyncio.ensure_future(pool.send(1, vote(5)))
        await wait_until(lambda: len(gate.calls) == 2)
        assert results == {}

        await pool.close()
        assert sorted(results) == [1, 2, 3, 4]
        for response, error in results.values():
            assert response is None and isinstance(error, ConnectionClosedError)
            assert "pool was closed" in str(error)
        with pytest.raises(ConnectionClosedError):
            await awaiting
        await pool.close()  # idempotent
        await listener.close()  # the two handlers still waiting are cancelled
    run(test)


def test_errors_are_network_errors_with_the_address():
    async def test():
        dead = await _free_port()
        pool = PeerPool(rng=random.Random(6))
        pool.update(3, HOST, dead)
        with pytest.raises(NetworkError) as info:
            await pool.send(3, vote(1))
        assert info.value.address == (HOST, dead)
        assert isinstance(info.value, ConnectionError)
        await pool.close()
    run(test)
