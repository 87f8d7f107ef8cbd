"""The network: Kafka's request/response protocol over asyncio TCP. The only package of
kraftcore that touches sockets; the bytes it moves are `kraftcore.protocol.framing`'s.

* `server`: `Listener`, a node's listening socket. It hands each request to a handler and
  writes the responses in request order; a connection that breaks the protocol is closed
  alone, never the listener. It bounds connections (in all, per address, idle time) and,
  with `RequestMemory`, the bytes of requests read and not answered.
* `client`: `Connection`, one client connection. It keeps correlation ids, a bounded number
  of requests in flight (more wait their turn), per-request timeouts, and fails every
  request with a clear error when the connection ends.
* `pool`: `PeerPool`, connections to the other nodes by node id. It connects lazily and
  reconnects with exponential backoff and jitter.
* `tls`: TLS contexts from Kafka's `ssl.*` settings, and the principal of a client
  certificate; `ListenerSecurity` (in `server`) says how a listener authenticates clients.
* `backoff`: `Backoff`, the reconnect delay schedule (no clock, an injected rng).

Guarantees, limits and errors: docs/net.md.
"""

from kraftcore.net.backoff import Backoff
from kraftcore.net.client import Connection
from kraftcore.net.pool import PeerPool
from kraftcore.net.server import Listener, ListenerSecurity, Peer, RequestMemory

__all__ = ["Backoff", "Connection", "Listener", "ListenerSecurity", "Peer", "PeerPool",
           "RequestMemory"]
