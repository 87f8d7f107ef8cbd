"""The peer pool: one client connection per other node, by node id, made when first needed
and made again, after a backoff, when it fails.

`PeerPool` owns the address book (node id -> host, port), the current `Connection` of each
peer, and each peer's reconnect schedule. Rules:

* A peer is connected lazily: the first request to it opens the connection, and requests
  sent meanwhile wait on that connection (within their timeouts and its limits).
* When a peer's connection fails (refused, reset, closed by the peer, timed out, broke the
  protocol), the requests on it fail, and the next connection to that peer is not attempted
  before a backoff delay (`kraftcore.net.backoff`, Kafka's exponential backoff with
  jitter). The delay grows with each consecutive connection that ended without delivering
  a single response and starts over after one that did. A request whose timeout ends
  before the next attempt fails at once with ConnectError instead of waiting in vain.
* `update(node_id, host, port)` with a new address closes the old connection (its requests
  fail with ConnectionClosedError) and forgets the backoff: the next request connects to
  the new address at once. The same address again changes nothing.
* `close()` fails every waiting and in-flight request with ConnectionClosedError, closes
  every socket and returns when all are closed and no task of the pool is left.

Randomness (the backoff jitter) comes from the `random.Random` passed in as `rng`.
"""

import asyncio
import functools
import logging

from kraftcore import limits
from kraftcore.errors import ConnectionClosedError, UnknownPeerError
from kraftcore.net.backoff import (
    RECONNECT_BACKOFF_JITTER_DEFAULT,
    RECONNECT_BACKOFF_MS_MAX_DEFAULT,
    RECONNECT_BACKOFF_MS_DEFAULT,
    Backoff,
)
from kraftcore.net.client import (CLIENT_ID, CONNECT_TIMEOUT_MS_DEFAULT, REQUEST_TIMEOUT_MS_DEFAULT,
                                  Connection)

log = logging.getLogger("kraftcore.net")


class _Peer:
    __slots__ = ("host", "port", "connection", "failures", "retry_at", "last_error")

    def __init__(self, host, port):
        self.host = host
        self.port = port
        self.connection = None
        self.failures = 0  # consecutive connections that ended without a response
        self.retry_at = 0.0  # event-loop time before which no new connect is attempted
        self.last_error = None


class PeerPool:
    """Connections to other nodes by node id (see the module docstring for the rules).

    Options: `rng` (a `random.Random` for the backoff jitter; default: an unseeded one),
    `backoff_base_ms`, `backoff_ms_max`, `backoff_jitter` (Kafka's reconnect.backoff.ms,
    reconnect.backoff.max.ms and 0.2), and, per peer connection, `client_id`,
    `connect_timeout_ms`, `request_timeout_ms`, `inflight_per_peer_max`,
    `queued_per_peer_max`, `frame_bytes_max`, `negotiate_versions`, `ssl_context`, `sasl`
    (see `Connection`).
    """

    def __init__(self, *, rng=None, client_id=CLIENT_ID,
                 backoff_base_ms=RECONNECT_BACKOFF_MS_DEFAULT,
                 backoff_ms_max=RECONNECT_BACKOFF_MS_MAX_DEFAULT,
                 backoff_jitter=RECONNECT_BACKOFF_JITTER_DEFAULT,
                 connect_timeout_ms=CONNECT_TIMEOUT_MS_DEFAULT,
                 request_timeout_ms=REQUEST_TIMEOUT_MS_DEFAULT,
                 inflight_per_peer_max=limits.NET_INFLIGHT_REQUESTS_MAX,
                 queued_per_peer_max=limits.NET_QUEUED_REQUESTS_MAX,
                 frame_bytes_max=limits.FRAME_BYTES_MAX, negotiate_versions=False,
                 ssl_context=None, sasl=None):
        self._backoff = Backoff(backoff_base_ms, backoff_ms_max, backoff_jitter, rng)
        self._options = dict(client_id=client_id, connect_timeout_ms=connect_timeout_ms,
                             request_timeout_ms=request_timeout_ms,
                             inflight_max=inflight_per_peer_max,
                             queued_max=queued_per_peer_max, frame_bytes_max=frame_bytes_max,
                             negotiate_versions=negotiate_versions,
                             ssl_context=ssl_context, sasl=sasl)
        self._peers = {}
        self._connections = set()  # every connection not yet fully closed
        self._closed = False

    def __repr__(self):
        return f"<PeerPool of {len(self._peers)} peers>"

    # ------------------------------------------------------------------ addresses

    @property
    def peers(self):
        """{node id: (host, port)} of every known peer."""
        return {node_id: (p.host, p.port) for node_id, p in self._peers.items()}

    def update(self, node_id, host, port):
        """Set the address of `node_id` (see the module docstring)."""
        peer = self._peers.get(node_id)
        if peer is None:
            self._peers[node_id] = _Peer(host, port)
            return
        if (peer.host, peer.port) == (host, port):
            return
        old = (peer.host, peer.port)
        peer.host, peer.port = host, port
        peer.failures, peer.retry_at, peer.last_error = 0, 0.0, None
        self._retire(peer, f"node {node_id} moved from {old[0]}:{old[1]} to {host}:{port}; "
                           "retry the request")

    def remove(self, node_id):
        """Forget `node_id`; requests on its connection fail with ConnectionClosedError."""
        peer = self._peers.pop(node_id, None)
        if peer is not None:
            self._retire(peer, f"node {node_id} was removed from the peer pool")

    def _retire(self, peer, reason):
        conn, peer.connection = peer.connection, None
        if conn is not None:
            conn._shutdown(ConnectionClosedError, reason, by_us=True)

    # ------------------------------------------------------------------ sending

    def connection(self, node_id):
        """The current connection to `node_id`, made (or scheduled after the backoff) if
        there is none. Raises UnknownPeerError for a node without an address."""
        if self._closed:
            raise ConnectionClosedError("the peer pool is closed; make a new one")
        peer = self._peers.get(node_id)
        if peer is None:
            raise UnknownPeerError(f"the peer pool has no address for node {node_id!r}; "
                                   "give it one with update(node_id, host, port)")
        conn = peer.connection
        if conn is not None and not conn.closed:
            return conn
        self._connections = {c for c in self._connections if not c._finished()}
        conn = Connection(peer.host, peer.port, **self._options,
                          on_close=functools.partial(self._on_connection_closed, node_id, peer))
        loop = asyncio.get_running_loop()
        conn._start(max(0.0, peer.retry_at - loop.time()), peer.last_error)
        peer.connection = conn
        self._connections.add(conn)
        return conn

    async def send(self, node_id, body, version=None, timeout_ms=None):
        """Send request `body` to `node_id` and return the response (`Connection.send`)."""
        return await self.connection(node_id).send(body, version, timeout_ms)

    def send_nowait(self, node_id, body, version, on_response, timeout_ms=None):
        """Hand request `body` for `node_id` over and return at once; `on_response(response,
        error)` is called exactly once later from the event loop (`Connection.send_nowait`).
        Raises only for a caller's mistake: an unknown node id, a closed pool, a body that
        is not a request, a version it does not have."""
        self.connection(node_id).send_nowait(body, version, on_response, timeout_ms)

    def _on_connection_closed(self, node_id, peer, conn, error):
        if peer.connection is conn:
            peer.connection = None
        if error is None or self._peers.get(node_id) is not peer:
            return  # closed on purpose
        peer.failures = 1 if conn.responses_received else peer.failures + 1
        delay_ms = self._backoff.delay_ms(peer.failures)
        peer.retry_at = asyncio.get_running_loop().time() + delay_ms / 1000
        peer.last_error = str(error)
        log.info("node %s at %s:%s: %s; next connect attempt in %.0f ms at the earliest",
                 node_id, peer.host, peer.port, error, delay_ms)

    async def close(self):
        """Close every connection (their requests fail with ConnectionClosedError) and
        return once all sockets and tasks are gone. Idempotent."""
        self._closed = True
        connections, self._connections = list(self._connections), set()
        for peer in self._peers.values():
            peer.connection = None
        for conn in connections:
            conn._shutdown(ConnectionClosedError, "the peer pool was closed", by_us=True)
        await asyncio.gather(*(conn.close() for conn in connections))
