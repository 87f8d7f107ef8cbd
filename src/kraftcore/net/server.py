"""The listener of a node: accepts TCP connections, reads Kafka request frames, hands each
request to the node's handler and writes the responses back (kafka-facts §6.1).

`Listener` owns the listening socket and every connection it accepted; `close()` ends them
all. `RequestMemory` is the budget of request bytes that one or more listeners share (a
node's `queued.max.request.bytes`). Each connection keeps these rules:

* Responses go out in request order, even when handlers finish out of order (Kafka's
  guarantee to a client that pipelines). A response that is ready waits for the ones ahead
  of it.
* Every request counts toward the connection's in-flight limit, ApiVersions and other
  requests answered inline included: a request is in flight from the moment it is taken up
  until its response is handed to the socket, and a response produced inline is handed
  over at the end of the event-loop turn that produced it. So at most
  `inflight_per_connection_max` requests of one connection are taken up per turn, and at
  most `limits.NET_SERVER_READ_BYTES_MAX` bytes are read from it per turn: a connection
  that pipelines thousands of requests in one read gets them handled over many turns, and
  the other connections (the quorum's among them) get their turn in between.
* Frames read but not taken up stay buffered and reading pauses. Reading also pauses while
  the socket's send buffer is full: a client that pipelines more, or never reads its
  responses, is slowed down instead of growing memory.
* Request memory (`RequestMemory`): the bytes of requests read and not yet answered, partial
  frames included, are counted against a budget. A frame counts its whole declared size from
  the moment its 4-byte size has been read, whether or not whole frames wait ahead of it in
  the connection's buffer: the rest is reserved if it fits, else the connection stops
  reading and waits, first come first served, for that much room. A connection reads only
  while it has room, and at most that room; reading resumes as requests are answered or
  connections close. The first `limits.NET_CONNECTION_GUARANTEED_BYTES_MIN` a connection holds
  are outside the budget's limit: small requests flow while others hold the budget, a frame
  as large as the budget fits once the others have given theirs back, and the total stays
  below the budget + that much per connection.
* Two large frames cannot stall each other halfway. What a connection holds beyond its
  guaranteed bytes is (a) whole requests, buffered or being handled, given back as they are
  answered, whatever the memory does; (b) a partial frame whose whole size is counted,
  which needs only its client's bytes to finish; or (c) the part read of a partial frame
  whose rest did not fit. A read made while others wait brings at most the connection's
  guaranteed bytes (or the 4 of a size), so its (c) lies within those once its (a) is
  back. (c) beyond them comes from a read made while nobody waited, and the same call
  that read it reserves the rest or queues the connection, which is then the head of the
  queue, and stays the head until it gets its room. So the head waits only for bytes of
  kinds (a) and (b), which come back without anyone getting room, and for its own; with
  those back it holds its frame (at most `frame_bytes_max` + 4) and its guaranteed bytes,
  which fit a budget of at least `frame_bytes_max`. The queue is served in order, so every
  waiting connection becomes the head in its turn and gets its room. (Counting a partial
  frame only once the frames ahead of it are taken up would break this: a connection
  could hold part of a frame beyond its guaranteed bytes and queue behind a head that
  needs those bytes.)
* A reservation does not outlive its client's silence: a connection that holds the
  reserved rest of a frame beyond its guaranteed bytes, has no request being handled, and
  reads no byte for `limits.NET_PARTIAL_FRAME_STALL_MS_MAX` is closed (a client that sends 4
  bytes of size and nothing more would otherwise keep that much room from every other
  connection, for as long as it stays connected). Any byte restarts the count, so a large
  frame that keeps arriving, however slowly, is read to its end. The sweep below checks it
  (whenever the memory has a limit); a read only bumps a counter.
* Connection limits: at most `connections_max` open connections, at most
  `connections_per_ip_max` from one address; a connection beyond either is closed as soon as
  it is accepted, and the open ones keep working. Refusals are logged at most once per
  `limits.NET_REFUSAL_LOG_INTERVAL_MS_MIN`, with a count of the ones not logged.
* Idle connections: with `connections_idle_ms_max`, a connection on which no request was
  taken up for that long, and which has no request being handled, is closed. One periodic
  sweep per listener checks every connection (for idleness and for stalled reservations);
  a request only bumps a counter.
* A connection whose bytes break the protocol is closed alone; the listener and every
  other connection keep going. That covers a frame size outside [0, frame_bytes_max], a
  header or body that does not decode, an API key this listener does not serve, an API
  version it does not know, and a handler that raises or returns something that is not a
  response to the request. One log line says which connection and why (with the traceback
  when the handler failed).
* The responses that become ready in one event-loop turn leave in one write (at the start
  of the next turn), not one `send` each: a commit that completes many requests costs one
  system call per connection.
* A response whose records are file regions (`kraftcore.types.FileRegion`, a Fetch
  answer's large reads) is written in parts, the regions with `loop.sendfile` (from the
  page cache to the socket, never through this process). The connection takes up no new
  request until they are out (Kafka mutes a channel while it sends); every region is
  closed, sent or dropped; a region its file no longer holds whole (truncated since the
  read) would leave the frame short, so that connection is closed.
* ApiVersions is answered by the listener itself (unless `handle_api_versions=False`):
  error 0 and the version range of every API it serves. An ApiVersions request of a
  version the listener does not know is answered, without parsing its body, in v0 with
  UNSUPPORTED_VERSION and the same list, so the client can retry lower (KIP-511); the
  connection stays open.

Security (`security`, a `ListenerSecurity`; none: PLAINTEXT):

* TLS (SSL, SASL_SSL): the listener's `ssl.SSLContext` wraps every connection. A handshake
  that fails is the end of that connection alone; one that does not finish within
  `limits.NET_TLS_HANDSHAKE_MS_MAX` is dropped. Connection limits count a connection once
  its handshake is done.
* Who the client is: `peer.principal`. `User:ANONYMOUS` on PLAINTEXT; on SSL the verified
  client certificate's name (`kraftcore.net.tls`), or ANONYMOUS without one; on SASL the
  name the client authenticated as.
* SASL (SASL_PLAINTEXT, SASL_SSL): the listener serves SaslHandshake (v1) and
  SaslAuthenticate itself, through a `kraftcore.security.sasl` session per connection.
  Until the client has authenticated it may send ApiVersions, SaslHandshake and
  SaslAuthenticate only: any other request closes the connection, and so does an answer
  with an error (unknown mechanism, wrong credentials, a request out of order):
  `limits.NET_FAILED_AUTHENTICATION_DELAY_MS` after it is sent (Kafka's
  `connection.failed.authentication.delay.ms`, so that the client reads it first), taking
  up nothing more meanwhile. A connection that has not authenticated `limits.NET_AUTHENTICATION_MS_MAX` after
  its TLS handshake is closed.

The handler is `handler(request, peer)`: `request` is a `kraftcore.protocol.framing.Request`
and `peer` the client's `Peer`: its (host, port), with `.principal` and `.listener`. It returns the response message, or an awaitable of
it (a coroutine is run as a task and cancelled if its connection closes first). The
listener encodes the response at the request's version with its correlation id. A Produce
handler may answer None: nothing is sent (acks=0), and the connection goes on.

`api_keys` lists the APIs served (ApiVersions always is); as a dict {key: (low, high)} it
also narrows the versions advertised and accepted (None keeps the schema's range).
"""

import asyncio
import collections
import functools
import inspect
import logging
import struct
import sys

from kraftcore import limits
from kraftcore.errors import ListenError, ProtocolError, UnsupportedVersionError
from kraftcore.protocol import framing
from kraftcore.protocol.apis import API_BY_KEY
from kraftcore.net.tls import PrincipalMapper, certificate_principal
from kraftcore.protocol.schema import Message
from kraftcore.security.principal import ANONYMOUS
from kraftcore.types import FileRegion

log = logging.getLogger("kraftcore.net")

_API_VERSIONS_KEY = framing.API_VERSIONS_KEY
_SASL_HANDSHAKE_KEY = 17
_SASL_AUTHENTICATE_KEY = 36
_SASL_KEYS = (_SASL_HANDSHAKE_KEY, _SASL_AUTHENTICATE_KEY)
_REFUSED = object()  # a connection's SASL state once its authentication was refused
# SaslHandshake v0 (raw SASL tokens after it) is not served: v1 and SaslAuthenticate only.
_SASL_VERSIONS = {_SASL_HANDSHAKE_KEY: (1, 1)}
_PRODUCE_KEY = 0
_CORK_BYTES = limits.NET_SERVER_CORK_BYTES_MAX
_READ_BYTES = limits.NET_SERVER_READ_BYTES_MAX
_GUARANTEED_BYTES = limits.NET_CONNECTION_GUARANTEED_BYTES_MIN
_HANDOVER_BYTES = limits.NET_SERVER_HANDOVER_BYTES_MIN
_SIZE = struct.Struct(">i")
_size_at = _SIZE.unpack_from


class Peer(tuple):
    """A client: its (host, port), and who it is. `principal`: a
    `kraftcore.security.principal.KafkaPrincipal`; `listener`: the name of the listener it
    reached (None for a listener without one)."""

    def __new__(cls, host, port, principal=ANONYMOUS, listener=None):
        self = super().__new__(cls, (host, port))
        self.principal = principal
        self.listener = listener
        return self

    def __repr__(self):
        return f"Peer({self[0]!r}, {self[1]!r}, {str(self.principal)!r})"


class ListenerSecurity:
    """How a listener authenticates its clients. `protocol`: Kafka's security protocol
    name; `ssl_context`: the server context (SSL, SASL_SSL); `principal_mapper`: a
    `kraftcore.net.tls.PrincipalMapper` for client certificates (None: DEFAULT, the name
    as it is); `sasl_session`: a callable
    that makes one `kraftcore.security.sasl.SaslServerSession` per connection (SASL_*)."""

    def __init__(self, protocol, *, ssl_context=None, principal_mapper=None,
                 sasl_session=None):
        tls = protocol in ("SSL", "SASL_SSL")
        sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(f"unknown security protocol {protocol!r}")
        if tls != (ssl_context is not None):
            raise ValueError(f"{protocol} {'needs' if tls else 'takes no'} ssl_context")
        if sasl != (sasl_session is not None):
            raise ValueError(f"{protocol} {'needs' if sasl else 'takes no'} sasl_session")
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.principal_mapper = (PrincipalMapper("DEFAULT") if principal_mapper is None
                                 else principal_mapper)
        self.sasl_session = sasl_session


_PLAINTEXT = ListenerSecurity("PLAINTEXT")


def _close_regions(parts):
    for part in parts:
        if type(part) is FileRegion:
            part.close()


def _pooled(held):
    """The part of a connection's `held` bytes that counts against the request memory's
    limit: what lies beyond its guaranteed bytes."""
    return held - _GUARANTEED_BYTES if held > _GUARANTEED_BYTES else 0


def _peers(conns):
    """"host:port, ..." of the first five of `conns` (for a log line)."""
    shown = ", ".join(f"{h}:{p}" for h, p in (c.peer for c in conns[:5]))
    return shown + (", ..." if len(conns) > 5 else "")


def _check_positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


def _check_optional(name, value, minimum):
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or value < minimum):
        raise ValueError(f"{name} must be None (no limit) or an integer >= {minimum}, "
                         f"not {value!r}")


class RequestMemory:
    """The bytes of requests read and not yet answered (partial frames included, each
    counted at its declared size), shared by the listeners given it: a node's
    `queued.max.request.bytes`. `bytes_max` None counts without a limit.

    `used_bytes` is everything the connections hold. The limit applies to what each holds
    beyond its `limits.NET_CONNECTION_GUARANTEED_BYTES_MIN`, so `used_bytes` stays below
    `bytes_max` + those bytes per connection, and a frame of up to `bytes_max` always fits
    once the others have given theirs back (the guaranteed bytes of connections that wait
    do not stand in its way). Connections that wait for room are served first come, first
    served; the module docstring gives the rules and why no two of them wait for each
    other."""

    def __init__(self, bytes_max=None):
        _check_optional("bytes_max", bytes_max, 1)
        self.bytes_max = bytes_max
        self._max = sys.maxsize if bytes_max is None else bytes_max
        self.used_bytes = 0
        self._pooled = 0  # the sum of _pooled(held) over the connections: kept <= _max
        self._waiting = collections.deque()  # connections waiting for room, oldest first
        self._wake_scheduled = False

    def __repr__(self):
        return (f"<RequestMemory {self.used_bytes} of {self.bytes_max} bytes, "
                f"{self.waiting_count} waiting>")

    @property
    def waiting_count(self):
        """Connections that stopped reading until room is released."""
        return sum(1 for conn in self._waiting if conn._waiting_memory)

    def _room(self, held):
        """Bytes a connection holding `held` may read now: its guaranteed bytes left, and
        the room under the limit unless others wait for it (they come first)."""
        room = 0 if self._waiting else max(self._max - self._pooled, 0)
        if held < _GUARANTEED_BYTES:
            return (_GUARANTEED_BYTES - held) + room
        return room

    def _fits(self, held, want, first=False):
        """Whether a connection holding `held` may take `want` more bytes now: within its
        guaranteed bytes always; beyond them if they fit under the limit and nobody waits
        ahead of it (`first`: it is the oldest waiting)."""
        beyond = _pooled(held + want) - _pooled(held)
        if not beyond:
            return True
        if self._waiting and not first:
            return False
        return beyond <= self._max - self._pooled

    def _released(self):
        if self._waiting and not self._wake_scheduled:
            # Woken in a turn of their own: a release happens in the middle of taking up
            # another connection's frames, which must not run into the waiters' code.
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self):
        self._wake_scheduled = False
        waiting = self._waiting
        while waiting:
            conn = waiting[0]
            if not conn._waiting_memory:  # closed meanwhile
                waiting.popleft()
                continue
            if not self._fits(conn._held, conn._memory_want, first=True):
                break
            waiting.popleft()
            conn._on_memory()


class Listener:
    """A listening socket and its connections. Start one with `await Listener.start(...)`."""

    def __init__(self, handler, *, frame_bytes_max, inflight_per_connection_max,
                 connections_max, connections_per_ip_max, connections_idle_ms_max, memory,
                 api_keys, handle_api_versions, name, security=None, listener_name=None):
        _check_positive("frame_bytes_max", frame_bytes_max)
        _check_positive("inflight_per_connection_max", inflight_per_connection_max)
        _check_positive("connections_max", connections_max)
        _check_optional("connections_per_ip_max", connections_per_ip_max, 1)
        _check_optional("connections_idle_ms_max", connections_idle_ms_max, 0)
        if memory is None:
            memory = RequestMemory(frame_bytes_max)
        elif not isinstance(memory, RequestMemory):
            raise TypeError(f"memory must be a RequestMemory, not {type(memory).__name__}")
        if memory.bytes_max is not None and memory.bytes_max < frame_bytes_max:
            raise ValueError(f"the request memory ({memory.bytes_max} bytes) must hold at "
                             f"least one frame of frame_bytes_max ({frame_bytes_max}), or a "
                             "request of that size could never be read; raise it or lower "
                             "frame_bytes_max")
        ranges = {}
        if api_keys is None:
            served = dict(API_BY_KEY)
        else:
            served = {}
            for key in api_keys:
                if key not in API_BY_KEY:
                    raise ValueError(f"API key {key!r} is not one kraftcore implements "
                                     f"(known: {sorted(API_BY_KEY)})")
                served[key] = API_BY_KEY[key]
                narrowed = api_keys.get(key) if isinstance(api_keys, dict) else None
                if narrowed is not None:
                    low, high = API_BY_KEY[key].valid_versions
                    if not low <= narrowed[0] <= narrowed[1] <= high:
                        raise ValueError(f"versions {narrowed} of API key {key} are not "
                                         f"within the known {low}-{high}")
                    ranges[key] = tuple(narrowed)
            served[_API_VERSIONS_KEY] = API_BY_KEY[_API_VERSIONS_KEY]
        security = _PLAINTEXT if security is None else security
        if not isinstance(security, ListenerSecurity):
            raise TypeError(f"security must be a ListenerSecurity, not "
                            f"{type(security).__name__}")
        for key in _SASL_KEYS:  # served by the listener itself, on SASL listeners only
            served.pop(key, None)
            if security.sasl_session is not None:
                served[key] = API_BY_KEY[key]
                ranges[key] = _SASL_VERSIONS.get(key, API_BY_KEY[key].valid_versions)
        self.security = security
        self.listener_name = listener_name
        self.handler = handler
        self.name = name
        self.frame_bytes_max = frame_bytes_max
        self.inflight_per_connection_max = inflight_per_connection_max
        self.connections_max = connections_max
        self.connections_per_ip_max = connections_per_ip_max
        self.connections_idle_ms_max = connections_idle_ms_max
        self.memory = memory
        self.handle_api_versions = handle_api_versions
        self.host = None
        self.port = None
        self._served = dict(sorted(served.items()))
        self._ranges = {key: ranges.get(key, api.valid_versions)
                        for key, api in self._served.items()}
        self._advertised = [(key, *self._ranges[key]) for key in self._served]
        self._api_versions_frames = {}
        self._server = None
        self._connections = set()
        self._per_ip = {}  # host -> open connections from it
        self._tasks = set()  # handler tasks this listener created and must see finish
        self._closing = False
        self._all_closed = None
        # One read buffer for every connection: a read is taken up, or what remains of it
        # copied into the connection's own buffer, before the next connection reads.
        self._read_buffer = bytearray(_READ_BYTES)
        self._read_view = memoryview(self._read_buffer)
        self._sweep_handle = None
        # Read when the listener starts (tests shorten it).
        self._stall_ms = limits.NET_PARTIAL_FRAME_STALL_MS_MAX
        self._refusal_log_at = 0.0
        self._refusals_unlogged = 0
        # requests whose frame held bytes after the body (read past, as Kafka does)
        self.requests_with_trailing_bytes = 0

    @classmethod
    async def start(cls, host, port, handler, *, frame_bytes_max=limits.FRAME_BYTES_MAX,
                    inflight_per_connection_max=limits.NET_SERVER_INFLIGHT_REQUESTS_MAX,
                    connections_max=limits.NET_LISTENER_CONNECTIONS_MAX,
                    connections_per_ip_max=None, connections_idle_ms_max=None, memory=None,
                    api_keys=None, handle_api_versions=True, name="kraftcore", security=None,
                    listener_name=None):
        """Listen on `host`:`port` (port 0: a free port, see `.port`). `api_keys` limits the
        APIs served and advertised (default: every API kraftcore implements; ApiVersions is
        always served). `connections_per_ip_max` and `connections_idle_ms_max` None: no
        limit. `memory`: a `RequestMemory` shared with other listeners (default: one of this
        listener's own, of `frame_bytes_max`). `name` prefixes the log lines. `security`: a
        `ListenerSecurity` (None: PLAINTEXT); `listener_name` is given to handlers as
        `peer.listener`."""
        self = cls(handler, frame_bytes_max=frame_bytes_max,
                   inflight_per_connection_max=inflight_per_connection_max,
                   connections_max=connections_max,
                   connections_per_ip_max=connections_per_ip_max,
                   connections_idle_ms_max=connections_idle_ms_max, memory=memory,
                   api_keys=api_keys, handle_api_versions=handle_api_versions, name=name,
                   security=security, listener_name=listener_name)
        loop = asyncio.get_running_loop()
        tls = {}
        if self.security.ssl_context is not None:
            tls = dict(ssl=self.security.ssl_context,
                       ssl_handshake_timeout=limits.NET_TLS_HANDSHAKE_MS_MAX / 1000)
        try:
            self._server = await loop.create_server(lambda: _ServerConnection(self), host,
                                                    port, **tls)
        except OSError as exc:
            raise ListenError(f"{name}: cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}; choose another port or stop the "
                              "process that holds this one", (host, port)) from exc
        self.host, self.port = self._server.sockets[0].getsockname()[:2]
        if connections_idle_ms_max is not None or self.memory.bytes_max is not None:
            self._schedule_sweep()
        return self

    def __repr__(self):
        return f"<Listener {self.name} on {self.host}:{self.port}>"

    @property
    def address(self):
        """(host, port) the listener is bound to."""
        return (self.host, self.port)

    @property
    def connection_count(self):
        """Connections open now."""
        return len(self._connections)

    @property
    def api_keys(self):
        """[(api key, min version, max version)] this listener serves and advertises."""
        return list(self._advertised)

    def _api_versions_frame(self, version, correlation_id):
        """The ApiVersions answer at `version`: encoded once, then only the correlation id
        (the first field of every response header) changes."""
        frame = self._api_versions_frames.get(version)
        if frame is None:
            cls = API_BY_KEY[_API_VERSIONS_KEY].response
            body = cls(error_code=0, throttle_time_ms=0, api_keys=[
                cls.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, low, high in self._advertised])
            frame = framing.encode_response(body, version, 0)
            self._api_versions_frames[version] = frame
        return b"".join((frame[:4], _SIZE.pack(correlation_id), frame[8:]))

    # ------------------------------------------------------------------ admission

    def _admit(self, conn):
        """True if `conn` may stay open (and is now counted), False if it must be closed."""
        if self._closing:
            return False
        host = conn.peer[0]
        if len(self._connections) >= self.connections_max:
            self._log_refusal(conn.peer, f"already {len(self._connections)} connections open "
                                         "(connections_max)")
            return False
        count = self._per_ip.get(host, 0)
        if self.connections_per_ip_max is not None and count >= self.connections_per_ip_max:
            self._log_refusal(conn.peer, f"already {count} connections from {host} "
                                         "(connections_per_ip_max)")
            return False
        self._per_ip[host] = count + 1
        self._connections.add(conn)
        return True

    def _log_refusal(self, peer, why):
        now = asyncio.get_running_loop().time()
        if now < self._refusal_log_at:
            self._refusals_unlogged += 1
            return
        more = self._refusals_unlogged
        self._refusals_unlogged = 0
        self._refusal_log_at = now + limits.NET_REFUSAL_LOG_INTERVAL_MS_MIN / 1000
        log.warning("%s: refused the connection from %s:%s: %s%s", self.name, *peer, why,
                    f" ({more} more refused since the last such line)" if more else "")

    def _connection_closed(self, conn):
        if conn in self._connections:
            self._connections.discard(conn)
            host = conn.peer[0]
            count = self._per_ip.get(host, 0) - 1
            if count > 0:
                self._per_ip[host] = count
            else:
                self._per_ip.pop(host, None)
        if not self._connections and self._all_closed is not None \
                and not self._all_closed.done():
            self._all_closed.set_result(None)

    # ------------------------------------------------------------------ idle connections

    def _schedule_sweep(self):
        """The next sweep in an eighth of the shortest bound it checks: the idle timeout,
        and (with a request memory limit) the stall bound of reserved frames."""
        bounds_ms = []
        if self.connections_idle_ms_max is not None:
            bounds_ms.append(self.connections_idle_ms_max)
        if self.memory.bytes_max is not None:
            bounds_ms.append(self._stall_ms)
        interval_ms = min(max(min(bounds_ms) // 8, limits.NET_IDLE_SWEEP_INTERVAL_MS_MIN),
                          limits.NET_IDLE_SWEEP_INTERVAL_MS_MAX)
        self._sweep_handle = asyncio.get_running_loop().call_later(interval_ms / 1000,
                                                                    self._sweep)

    def _sweep(self):
        """Close the connections without a request since `connections_idle_ms_max`, and
        those that hold the reserved rest of a frame beyond their guaranteed bytes, have no
        request being handled and read no byte for `limits.NET_PARTIAL_FRAME_STALL_MS_MAX`. A
        connection that took up a request (or read a byte) since the last sweep, or is not
        in that state, starts its time again at this sweep, so none is closed early."""
        self._sweep_handle = None
        if self._closing:
            return
        now = asyncio.get_running_loop().time()
        idle_ms = self.connections_idle_ms_max
        idle_s = None if idle_ms is None else idle_ms / 1000
        stall_s = None if self.memory.bytes_max is None else self._stall_ms / 1000
        expired = []
        stalled = []
        for conn in self._connections:
            if idle_s is not None:
                if conn._requests != conn._requests_seen or conn._slots or conn._sender:
                    conn._requests_seen = conn._requests
                    conn._idle_since = now
                elif now - conn._idle_since >= idle_s:
                    expired.append(conn)
                    continue
            if stall_s is not None:
                if conn._reserved and conn._reads == conn._reads_seen and not conn._slots \
                        and conn._held > _GUARANTEED_BYTES:
                    if now - conn._stalled_since >= stall_s:
                        stalled.append(conn)
                else:
                    conn._reads_seen = conn._reads
                    conn._stalled_since = now
        if expired:
            log.info("%s: closing %d connection(s) with no request for %d ms "
                     "(connections_idle_ms_max): %s", self.name, len(expired), idle_ms,
                     _peers(expired))
            for conn in expired:
                conn.abort()
        if stalled:
            log.warning("%s: closing %d connection(s) that sent no byte of the frame they "
                        "reserved for %d ms (limits.NET_PARTIAL_FRAME_STALL_MS_MAX): %s",
                        self.name, len(stalled), self._stall_ms, _peers(stalled))
            for conn in stalled:
                conn.abort()
        self._schedule_sweep()

    async def close(self):
        """Stop listening, close every connection (handlers still running on them are
        cancelled) and return once all of it is done. Idempotent."""
        if not self._closing:
            self._closing = True
            if self._sweep_handle is not None:
                self._sweep_handle.cancel()
                self._sweep_handle = None
            self._all_closed = asyncio.get_running_loop().create_future()
            if not self._connections:
                self._all_closed.set_result(None)
            self._server.close()
            for conn in list(self._connections):
                conn.abort()
        await self._all_closed
        await self._server.wait_closed()
        while self._tasks:
            await asyncio.wait(list(self._tasks))


def _certificate_principal(transport, security):
    """The principal of a TLS connection's verified client certificate (ANONYMOUS without
    one)."""
    return certificate_principal(transport.get_extra_info("peercert"),
                                 security.principal_mapper)


class _Slot:
    """A request whose response is not written yet: `frame` is set once it is ready.
    `charge`: the request's bytes counted in the request memory until it is answered."""

    __slots__ = ("request", "future", "owned", "callback", "frame", "charge")

    def __init__(self, request, future, owned):
        self.request = request
        self.future = future
        self.owned = owned
        self.callback = None
        self.frame = None
        self.charge = 0


class _ServerConnection(asyncio.BufferedProtocol):
    """One accepted connection (see the module docstring for its rules).

    Input: reads land in the listener's shared buffer and are taken up from there; what is
    not taken up (whole frames that must wait, a partial frame) is kept in `_in`. `_held`
    is what this connection counts in the request memory: the bytes in `_in`, the reserved
    rest of its partial frame (`_reserved`) and its requests in flight (`_Slot.charge`)."""

    def __init__(self, listener):
        self._listener = listener
        self._memory = listener.memory
        self._transport = None
        self.peer = ("?", 0)
        self._slots = collections.deque()  # requests in order, answered or not
        self._in = None  # bytearray of input not taken up yet, or None
        # `_in[:_tail]` are whole frames (sizes checked); a frame that is not whole, if
        # any, begins at `_tail`
        self._tail = 0
        self._reserved = 0  # bytes of the partial frame in `_in` counted but not read yet
        self._held = 0
        self._inline = 0  # requests answered inline in this turn (in flight until its end)
        self._frames_waiting = False  # whole frames in `_in` that could not be taken up
        self._turn_scheduled = False
        self._waiting_memory = False
        self._memory_want = 0
        self._requests = 0  # requests taken up, ever (the idle sweep compares it)
        self._requests_seen = 0
        self._idle_since = 0.0
        self._reads = 0  # reads, ever (the sweep compares it: a reserved frame progresses)
        self._reads_seen = 0
        self._stalled_since = 0.0
        self._out = []
        self._out_bytes = 0
        self._out_regions = False  # `_out` holds file regions
        self._sender = None  # the task sending output that holds file regions, if any
        self._flush_scheduled = False
        self._closed = False
        self._reading_paused = False
        self._writing_paused = False
        self._sasl = None  # the SASL session until the client has authenticated
        self._auth_timer = None

    # ------------------------------------------------------------------ transport events

    def connection_made(self, transport):
        self._transport = transport
        listener = self._listener
        security = listener.security
        address = transport.get_extra_info("peername")
        host, port = tuple(address[:2]) if address else ("?", 0)
        self.peer = Peer(host, port, ANONYMOUS, listener.listener_name)
        if not listener._admit(self):
            self._closed = True
            transport.abort()
            return
        loop = asyncio.get_running_loop()
        self._idle_since = loop.time()
        if security.sasl_session is not None:
            self._sasl = security.sasl_session()
            self._auth_timer = loop.call_later(limits.NET_AUTHENTICATION_MS_MAX / 1000,
                                               self._authentication_expired)
        elif security.ssl_context is not None:
            try:
                principal = _certificate_principal(transport, security)
            except ValueError as exc:
                log.warning("%s: closing the connection from %s:%s: %s", listener.name,
                            host, port, exc)
                self.abort()
                return
            self.peer = Peer(host, port, principal, listener.listener_name)

    def _authentication_expired(self):
        self._auth_timer = None
        if not self._closed and self._sasl is not None:
            self._fail(f"no SASL authentication within {limits.NET_AUTHENTICATION_MS_MAX} ms")

    def connection_lost(self, exc):
        self._closed = True
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None
        if self._sender is not None:
            self._sender.cancel()
        self._drop_output()
        self._cancel_handlers()
        self._free_input()
        self._listener._connection_closed(self)

    def eof_received(self):
        return False  # the client half-closed: close our side too

    def pause_writing(self):
        self._writing_paused = True
        self._pause_reading()

    def resume_writing(self):
        self._writing_paused = False
        self._advance()
        self._flush()

    def get_buffer(self, sizehint):
        """Where the next read lands: the listener's buffer, as much of it as this
        connection may read now (the rest of its reserved frame, or the room it has)."""
        n = self._reserved  # the rest of a frame already counted, and no further
        if not n:
            n = self._memory._room(self._held)
            if n < 4:
                # No room: read the next frame's size anyway (that much past the limit), to
                # know what to wait for. `_in` holds at most a part of that size here.
                # (at least 1: `_in` holds a whole size only once that frame is counted)
                n = max(4 - (len(self._in) - self._tail if self._in is not None else 0), 1)
        if n >= _READ_BYTES:
            return self._listener._read_view
        return self._listener._read_view[:n]

    def buffer_updated(self, nbytes):
        if self._closed:
            return
        self._inline = 0  # a read starts a turn of this connection
        self._reads += 1
        view = self._listener._read_view
        data = self._in
        if data is None:
            self._frames_waiting = False
            pos = self._take_up(view, 0, nbytes, False)
            if self._closed:
                return
            if pos < nbytes:
                self._in = data = bytearray(view[pos:nbytes])
                self._charge(nbytes - pos)
                # Whole frames wait ahead of the rest: find where the last frame begins.
                self._tail = self._scan(data, 0) if self._frames_waiting else 0
                if self._closed:
                    return
        else:
            reserved = self._reserved
            if nbytes <= reserved:
                self._reserved = reserved - nbytes
            else:
                self._reserved = 0
                self._charge(nbytes - reserved)
            data += view[:nbytes]
            self._tail = self._scan(data, self._tail)
            if self._closed:
                return
            self._drain()
            if self._closed:
                return
        self._settle()
        self._flush()

    # ------------------------------------------------------------------ input

    def _take_up(self, buf, pos, end, charged):
        """Take up the whole frames of `buf[pos:end]` while the in-flight limit allows; the
        position of the first byte not taken up. `charged`: whether the frames are counted
        in the request memory already."""
        max_frame = self._listener.frame_bytes_max
        limit = self._listener.inflight_per_connection_max
        slots = self._slots
        while end - pos >= 4:
            size = _size_at(buf, pos)[0]
            if size < 0 or size > max_frame:
                self._fail(f"bad frame: frame size {size} is outside [0, {max_frame}]")
                return end
            stop = pos + 4 + size
            if stop > end:
                break
            if self._writing_paused or self._sender is not None or \
                    len(slots) + self._inline >= limit:
                self._frames_waiting = True
                break
            frame = bytes(buf[pos + 4:stop])
            pos = stop
            self._dispatch(frame, 4 + size if charged else 0)
            if self._closed:
                return end
        return pos

    def _scan(self, data, pos):
        """Where the last frame of `data` that is not whole begins, from `pos` (a frame's
        start) on: the frames before it are whole and their sizes checked. Walks each
        frame of `_in` once: `_tail` remembers how far it got."""
        max_frame = self._listener.frame_bytes_max
        end = len(data)
        while end - pos >= 4:
            size = _size_at(data, pos)[0]
            if size < 0 or size > max_frame:
                self._fail(f"bad frame: frame size {size} is outside [0, {max_frame}]")
                return 0
            if pos + 4 + size > end:
                break
            pos += 4 + size
        return pos

    def _drain(self):
        """Take up what `_in` holds, as far as allowed."""
        self._frames_waiting = False
        data = self._in
        if data is None:
            return
        end = len(data)
        if end >= _HANDOVER_BYTES and _size_at(data, 0)[0] + 4 == end and not self._busy():
            # One large frame (its size was checked when it began) and nothing else: the
            # decoder gets the buffer itself, not a copy.
            self._in = None
            self._tail = 0
            self._dispatch(memoryview(data)[4:], end)
            return
        with memoryview(data) as view:
            pos = self._take_up(view, 0, end, True)
        if self._closed:
            return
        if pos >= end:
            self._in = None
            self._tail = 0
        elif pos:
            del data[:pos]
            self._tail -= pos

    def _busy(self):
        return self._writing_paused or self._sender is not None or \
            len(self._slots) + self._inline >= self._listener.inflight_per_connection_max

    def _settle(self):
        """After input was read or taken up: count the whole size of a partial frame whose
        size has arrived (or wait for room for it), whether or not whole frames wait ahead
        of it; then read on, or pause (frames wait for their turn, or for request memory)."""
        if self._closed:
            return
        data = self._in
        if data is not None and not self._reserved and not self._waiting_memory:
            tail = self._tail
            if len(data) - tail >= 4:
                # the rest of the partial frame (`_scan` found it is not whole)
                want = _size_at(data, tail)[0] + 4 - (len(data) - tail)
                if self._memory._fits(self._held, want):
                    self._charge(want)
                    self._reserved = want
                else:
                    self._wait_for_memory(want)
        if self._frames_waiting or self._busy():
            self._pause_reading()
            if self._inline and not self._writing_paused and not self._turn_scheduled:
                # The turn's share is used up: the rest waits for the next turn.
                self._turn_scheduled = True
                asyncio.get_running_loop().call_soon(self._next_turn)
            return
        if self._reading_paused and not self._waiting_memory:
            self._reading_paused = False
            self._transport.resume_reading()

    def _next_turn(self):
        self._turn_scheduled = False
        if self._closed:
            return
        self._inline = 0
        self._drain()
        self._settle()
        self._flush()

    def _pause_reading(self):
        if not self._reading_paused and not self._closed:
            self._reading_paused = True
            self._transport.pause_reading()

    # ------------------------------------------------------------------ request memory

    def _charge(self, n):
        held = self._held
        self._held = held + n
        memory = self._memory
        memory.used_bytes += n
        memory._pooled += _pooled(held + n) - _pooled(held)

    def _release(self, n):
        if n and not self._closed:
            held = self._held
            self._held = held - n
            memory = self._memory
            memory.used_bytes -= n
            memory._pooled += _pooled(held - n) - _pooled(held)
            memory._released()

    def _wait_for_memory(self, want):
        self._pause_reading()
        self._waiting_memory = True
        self._memory_want = want
        self._memory._waiting.append(self)

    def _on_memory(self):
        """The request memory has room for the rest of this connection's frame."""
        self._waiting_memory = False
        want = self._memory_want
        self._charge(want)
        self._reserved = want
        self._settle()

    def _free_input(self):
        """Drop the input and give back everything this connection counted."""
        self._waiting_memory = False
        self._in = None
        self._tail = 0
        self._reserved = 0
        held, self._held = self._held, 0
        if held:
            memory = self._memory
            memory.used_bytes -= held
            memory._pooled -= _pooled(held)
            memory._released()

    # ------------------------------------------------------------------ requests

    def _dispatch(self, frame, charged):
        """Take up one request. `charged`: its bytes counted in the request memory (0 when
        it never waited)."""
        self._requests += 1
        listener = self._listener
        if self._sasl is _REFUSED:  # closing in a moment: nothing more is taken up
            self._release(charged)
            return
        try:
            api_key, version, correlation_id = framing.peek_request(frame)
        except ProtocolError as exc:
            self._fail(f"malformed request header: {exc}")
            return
        api = listener._served.get(api_key)
        if api is None:
            known = API_BY_KEY.get(api_key)
            what = f"{known.name} (API key {api_key})" if known else f"unknown API key {api_key}"
            self._fail(f"request for {what}, which this listener does not serve")
            return
        try:
            request = framing.decode_request(frame)
        except UnsupportedVersionError:
            if api_key == _API_VERSIONS_KEY:
                self._release(charged)
                self._respond(framing.unsupported_api_versions_response(
                    correlation_id, listener._advertised))
                return
            low, high = api.valid_versions
            self._fail(f"{api.name} v{version} is not supported (versions {low}-{high})")
            return
        except ProtocolError as exc:
            self._fail(f"malformed {api.name} v{version} request: {exc}")
            return
        except Exception:  # noqa: BLE001 - a decoder bug must not take the listener down
            log.exception("%s: decoding %s v%d from %s:%s raised unexpectedly; closing that "
                          "connection", listener.name, api.name, version, *self.peer)
            self._fail(None)
            return
        if request.trailing_bytes:
            listener.requests_with_trailing_bytes += 1  # Kafka reads past them too
            log.debug("%s: %s v%d from %s:%s carries %d bytes after its body; ignored",
                      listener.name, api.name, version, *self.peer, request.trailing_bytes)
        low, high = listener._ranges[api_key]
        if not low <= version <= high:
            self._fail(f"{api.name} v{version} is not served here (versions {low}-{high})")
            return
        if api_key == _API_VERSIONS_KEY and listener.handle_api_versions:
            self._release(charged)
            self._respond(listener._api_versions_frame(version, correlation_id))
            return
        if self._sasl is not None or api_key in _SASL_KEYS:
            self._release(charged)
            self._authenticate(request, api)
            return
        try:
            result = listener.handler(request, self.peer)
        except Exception:  # noqa: BLE001 - a handler bug closes this connection only
            log.exception("%s: the handler failed on %s v%d from %s:%s; closing that "
                          "connection", listener.name, api.name, version, *self.peer)
            self._fail(None)
            return
        if result is None and api_key == _PRODUCE_KEY:
            self._release(charged)  # acks=0: the producer waits for no answer
        elif isinstance(result, Message):
            self._release(charged)
            frame = self._encode(request, result)
            if frame is not None:
                self._respond(frame)
        elif inspect.isawaitable(result):
            future = asyncio.ensure_future(result)
            slot = _Slot(request, future, future is not result)
            if slot.owned:
                listener._tasks.add(future)
            slot.charge = 4 + len(frame)
            if not charged:
                self._charge(slot.charge)
            self._slots.append(slot)
            slot.callback = functools.partial(self._on_handler_done, slot)
            future.add_done_callback(slot.callback)
        else:
            self._fail(f"the handler returned {type(result).__name__} for {api.name} "
                       f"v{version}, not a response message")

    def _authenticate(self, request, api):
        """SaslHandshake and SaslAuthenticate, and anything else sent before the client has
        authenticated (which closes the connection)."""
        sasl = self._sasl
        if sasl is None:  # authenticated already (SASL requests need a SASL listener)
            self._fail(f"{api.name} after the client authenticated; re-authentication is "
                       "not supported")
            return
        if request.api_key == _SASL_HANDSHAKE_KEY:
            answer = sasl.handshake(request.api_version, request.body)
        elif request.api_key == _SASL_AUTHENTICATE_KEY:
            answer = sasl.authenticate(request.api_version, request.body)
        else:
            self._fail(f"{api.name} before SASL authentication (only ApiVersions, "
                       "SaslHandshake and SaslAuthenticate may come first)")
            return
        frame = self._encode(request, answer)
        if frame is None:
            return
        self._respond(frame)
        if answer.error_code:
            # Kafka's connection.failed.authentication.delay.ms: the answer goes out, and the
            # connection closes a little later, so that the client reads why
            message = getattr(answer, "error_message", None)
            self._sasl = _REFUSED
            self._pause_reading()
            if self._auth_timer is not None:
                self._auth_timer.cancel()
            self._auth_timer = asyncio.get_running_loop().call_later(
                limits.NET_FAILED_AUTHENTICATION_DELAY_MS / 1000, self._fail,
                f"SASL {api.name} refused (error {answer.error_code}"
                f"{': ' + message if message else ''})")
        elif getattr(sasl, "complete", False):
            self._sasl = None
            if self._auth_timer is not None:
                self._auth_timer.cancel()
                self._auth_timer = None
            host, port = self.peer
            self.peer = Peer(host, port, sasl.principal, self._listener.listener_name)

    def _encode(self, request, body):
        """The response frame for `body`, or None after closing the connection when `body`
        is not a valid response to `request`."""
        cls = type(body)
        if cls.kind != "response" or cls.api_key != request.api_key:
            self._fail(f"the handler answered {API_BY_KEY[request.api_key].name} with "
                       f"{cls.__name__}")
            return None
        try:
            return framing.encode_response(body, request.api_version, request.correlation_id)
        except Exception as exc:  # noqa: BLE001 - EncodeError: a handler bug
            self._fail(f"the handler's {cls.__name__} does not encode at "
                       f"v{request.api_version}: {exc}")
            return None

    def _respond(self, frame):
        """Send `frame` now if nothing is ahead of it, else when its turn comes. An answer
        that leaves now counts as in flight until the end of this turn."""
        if self._slots:
            slot = _Slot(None, None, False)
            slot.frame = frame
            self._slots.append(slot)
        else:
            self._inline += 1
            self._write(frame)

    def _write(self, frame):
        if not frame:
            return
        if type(frame) is list:  # parts: bytes and file regions
            self._out.extend(frame)
            self._out_regions = True
            self._out_bytes += sum(map(len, frame))
        else:
            self._out.append(frame)
            self._out_bytes += len(frame)
        if self._out_bytes >= _CORK_BYTES:
            self._flush()

    def _on_handler_done(self, slot, future):
        slot.callback = None  # it held the slot: a reference cycle left to the collector
        listener = self._listener
        listener._tasks.discard(future)
        if future.cancelled():
            if not self._closed:
                self._fail("the handler's awaitable was cancelled")
            return
        error = future.exception()  # retrieved even when the connection is gone
        if self._closed:
            return
        request = slot.request
        name = API_BY_KEY[request.api_key].name
        if error is not None:
            log.error("%s: the handler failed on %s v%d from %s:%s; closing that connection",
                      listener.name, name, request.api_version, *self.peer,
                      exc_info=(type(error), error, error.__traceback__))
            self._fail(None)
            return
        result = future.result()
        if result is None and request.api_key == _PRODUCE_KEY:
            charge, slot.charge = slot.charge, 0
            self._release(charge)
            slot.frame = b""  # acks=0: nothing goes out, the slot just leaves its place
            self._advance()
            return
        if not isinstance(result, Message):
            self._fail(f"the handler's awaitable returned {type(result).__name__} for "
                       f"{name} v{request.api_version}, not a response message")
            return
        frame = self._encode(request, result)
        if frame is None:
            return
        slot.frame = frame
        charge, slot.charge = slot.charge, 0
        self._release(charge)
        self._advance()
        if not self._slots:
            # Nothing else is awaited on this connection: the answer leaves now, ahead of
            # whatever else the event loop has queued.
            self._flush()
        elif not self._flush_scheduled:
            # The responses completed in this event-loop turn (a commit completes many)
            # leave in one write at the start of the next.
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _advance(self):
        """Write the responses that are ready at the head, then take up read frames."""
        slots = self._slots
        while slots and slots[0].frame is not None:
            self._write(slots.popleft().frame)
        if self._closed:
            return
        if self._in is not None:
            self._drain()
        self._settle()

    def _flush(self):
        self._flush_scheduled = False
        if self._sender is not None:
            return  # the sender takes up `_out` when its parts are out
        out = self._out
        if out:
            self._out = []
            self._out_bytes = 0
            if self._closed:
                _close_regions(out)
            elif self._out_regions:
                self._out_regions = False
                # Reading pauses while the regions go out (Kafka mutes a channel while it
                # sends a response); `_busy` holds new requests back meanwhile.
                self._pause_reading()
                self._sender = asyncio.ensure_future(self._send(out))
            else:
                # may call pause_writing, which marks the connection busy
                self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def _send(self, parts):
        """Send `parts` in order, the file regions with `sendfile` (the kernel copies them
        from the page cache to the socket), then what `_out` gathered meanwhile. A region
        the file no longer holds whole (truncated since the read) would leave the frame
        short: the connection is closed. Then requests are taken up again."""
        loop = asyncio.get_running_loop()
        transport = self._transport
        pending = collections.deque(parts)
        short = None
        try:
            while pending:
                part = pending.popleft()
                if type(part) is FileRegion:
                    try:
                        sent = await loop.sendfile(transport, part.file, part.position,
                                                   part.length)
                    finally:
                        part.close()
                    if sent != part.length:
                        short = (part, sent)
                        break
                    continue
                run = [part]
                while pending and type(pending[0]) is not FileRegion:
                    run.append(pending.popleft())
                transport.write(run[0] if len(run) == 1 else b"".join(run))
                if not pending and self._out:  # (after a fault too: they were ready)
                    pending.extend(self._out)
                    self._out = []
                    self._out_bytes = 0
                    self._out_regions = False
        except (OSError, RuntimeError) as exc:  # the connection broke, or is closing
            log.debug("%s: sending to %s:%s failed: %s", self._listener.name, *self.peer, exc)
            short = exc
        finally:
            _close_regions(pending)
            self._sender = None
        if short is not None:
            if isinstance(short, tuple) and not self._closed:
                log.warning("%s: closing the connection from %s:%s: a response's records "
                            "(%d bytes at position %d of a segment) were truncated while "
                            "being sent (%d sent)", self._listener.name, *self.peer,
                            short[0].length, short[0].position, short[1])
            self.abort()
            return
        if self._closed:
            self._drop_output()
            transport.close()  # a fault closed the connection while this was sending
            return
        self._advance()
        self._flush()

    def _drop_output(self):
        """Forget the output not handed to the socket (the connection is closing)."""
        out, self._out = self._out, []
        self._out_bytes = 0
        self._out_regions = False
        _close_regions(out)
        for slot in self._slots:
            if slot.frame:
                _close_regions(slot.frame if type(slot.frame) is list else ())

    # ------------------------------------------------------------------ closing

    def _cancel_handlers(self):
        slots, self._slots = self._slots, collections.deque()
        for slot in slots:
            if slot.future is not None and not slot.future.done():
                if slot.owned:
                    slot.future.cancel()
                else:  # someone else's future: stop listening, leave it alone
                    slot.future.remove_done_callback(slot.callback)

    def _fail(self, reason):
        """Close this connection for a protocol or handler fault (`reason` None: already
        logged). Responses that were ready go out first."""
        if self._closed:
            return
        if reason is not None:
            log.warning("%s: closing the connection from %s:%s: %s", self._listener.name,
                        *self.peer, reason)
        self._flush()
        self._free_input()
        self._closed = True
        self._cancel_handlers()
        if self._sender is None:
            self._transport.close()
        # else the sender closes it once the parts it has are out

    def abort(self):
        """Close at once, dropping unsent responses (the listener is closing, or the
        connection was idle too long)."""
        self._free_input()
        self._closed = True
        self._drop_output()
        self._cancel_handlers()
        if self._sender is not None:
            self._sender.cancel()
        if self._transport is not None:
            self._transport.abort()
