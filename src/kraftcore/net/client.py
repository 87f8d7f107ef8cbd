"""A client connection to one address: Kafka requests and responses over one TCP socket.

`Connection` owns the socket, the correlation ids, the requests in flight and the requests
waiting to be sent. The bytes are the protocol layer's (`kraftcore.protocol.framing`): a
request is an int32 size, request header v1 or v2, and a body; a response is an int32 size,
response header v0 or v1 (ApiVersions always v0), and a body (kafka-facts §6.1).

Invariants:

* At most `inflight_max` requests are written and unanswered at once. Later requests wait
  in one FIFO line, so they go out in the order they were submitted. Awaiting callers of
  `send` wait there in person (backpressure). Callbacks handed over with `send_nowait`
  wait there too, but at most `queued_max` of them; past that they fail at once with
  `RequestQueueFullError`.
* Kafka answers in request order on a connection, so the response at the head of the
  stream belongs to the oldest request in flight. Its correlation id must match; a
  mismatch, a response to nothing, a frame above `frame_bytes_max`, or a body that does
  not decode breaks the stream, and the connection is closed.
* Every request ends exactly once: with its response or with an error (ConnectError,
  ConnectionClosedError, RequestTimeoutError, RequestQueueFullError, or the encode error of
  its own body). A callback is never called from inside the `send_nowait` call that handed
  it over, so a caller may hold locks or iterate its own state while submitting.
* A request that is in flight when its timeout expires closes the connection, failing the
  others in flight with ConnectionClosedError. This is Kafka's client rule (the peer is
  presumed stuck), and it means a dead peer cannot pin in-flight slots forever. A request
  whose timeout expires while it still waits in line is dropped unsent; the connection
  stays open.
* Cancelling an awaiting `send` drops the request if it is still in line. If it is already
  in flight, its response is read and discarded when it comes, so the stream stays in sync.

No clock is read except the event loop's, for deadlines.
"""

import asyncio
import collections
import logging
import ssl
import struct
import time

from kraftcore import limits
from kraftcore.errors import (
    ConnectError,
    ConnectionClosedError,
    RequestQueueFullError,
    RequestTimeoutError,
    UnsupportedVersionError,
)
from kraftcore.protocol import framing
from kraftcore.protocol.apis import API_BY_KEY
from kraftcore.protocol.messages import (ApiVersionsRequest, SaslAuthenticateRequest,
                                         SaslHandshakeRequest)

log = logging.getLogger("kraftcore.net")

# Kafka's client defaults: request.timeout.ms and socket.connection.setup.timeout.ms.
REQUEST_TIMEOUT_MS_DEFAULT = 30_000
CONNECT_TIMEOUT_MS_DEFAULT = 10_000
CLIENT_ID = "kraftcore"

_INT32 = struct.Struct(">i")
_NEVER = float("inf")
_CLOCK_RESOLUTION_S = time.get_clock_info("monotonic").resolution
_INT16 = struct.Struct(">h")
_API_VERSIONS_KEY = framing.API_VERSIONS_KEY
_SASL_HANDSHAKE_KEY = 17
_SASL_AUTHENTICATE_KEY = 36
_UNSUPPORTED_VERSION = framing.UNSUPPORTED_VERSION

# Connection states.
_CONNECTING = "connecting"
_NEGOTIATING = "negotiating"  # connected, asking the peer's ApiVersions
_OPEN = "open"
_CLOSED = "closed"

# Request states.
_QUEUED = 0
_INFLIGHT = 1
_DONE = 2


def _api_name(api_key):
    api = API_BY_KEY.get(api_key)
    return api.name if api is not None else f"API {api_key}"


class _Request:
    """One request from submission to its end."""

    __slots__ = ("body", "api_key", "version", "on_response", "timeout_ms", "deadline",
                 "correlation_id", "state", "bounded")

    def __init__(self, body, api_key, version, on_response, timeout_ms, bounded):
        self.body = body
        self.api_key = api_key
        self.version = version
        self.on_response = on_response
        self.timeout_ms = timeout_ms
        self.deadline = None  # event-loop time
        self.correlation_id = None
        self.state = _QUEUED
        self.bounded = bounded

    def describe(self):
        version = "" if self.version is None else f" v{self.version}"
        cid = "" if self.correlation_id is None else f" (correlation id {self.correlation_id})"
        return f"{_api_name(self.api_key)}{version}{cid}"


def _check_positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


def _future_callback(future):
    def on_response(response, error):
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(response)
    return on_response


class _ClientProtocol(asyncio.Protocol):
    """Hands the transport's events to its `Connection` (composition, not inheritance: the
    asyncio callbacks stay off the public class)."""

    __slots__ = ("_conn",)

    def __init__(self, conn):
        self._conn = conn

    def connection_made(self, transport):
        self._conn._on_connection_made(transport)

    def data_received(self, data):
        self._conn._on_data(data)

    def eof_received(self):
        return False  # half-closed by the peer: close our side too

    def connection_lost(self, exc):
        self._conn._on_connection_lost(exc)


class Connection:
    """A client connection to `host`:`port` (see the module docstring for its guarantees).

    Open one with `await Connection.open(host, port, ...)`; it raises `ConnectError` when
    the peer cannot be reached. Options:

    * `client_id`: the request header's client id.
    * `inflight_max`: requests written and unanswered at once.
    * `queued_max`: `send_nowait` requests allowed to wait for their turn.
    * `frame_bytes_max`: the largest response frame accepted; a larger one closes the
      connection.
    * `connect_timeout_ms`, `request_timeout_ms`: the defaults of the connect and of each
      request (a request may pass its own `timeout_ms`).
    * `negotiate_versions`: ask the peer's ApiVersions first (falling back to lower
      ApiVersions versions as Kafka clients do); `api_versions` then maps API key -> the
      peer's (min, max), and a request sent without a version uses the highest version
      both sides know (none in common: `UnsupportedVersionError`).
    * `ssl_context`: connect with TLS (an `ssl.SSLContext`, `kraftcore.net.tls`), checking
      the certificate against `host` (or `server_hostname`).
    * `sasl`: authenticate before any other request: a callable that returns a
      `kraftcore.security.sasl` client exchange (`.mechanism`, `first()`, `step(bytes)`).
      SaslHandshake v1 then SaslAuthenticate until the exchange is done; a refusal fails
      the connection with `ConnectError` carrying the server's message.
    """

    def __init__(self, host, port, *, client_id=CLIENT_ID,
                 inflight_max=limits.NET_INFLIGHT_REQUESTS_MAX,
                 queued_max=limits.NET_QUEUED_REQUESTS_MAX,
                 frame_bytes_max=limits.FRAME_BYTES_MAX,
                 connect_timeout_ms=CONNECT_TIMEOUT_MS_DEFAULT,
                 request_timeout_ms=REQUEST_TIMEOUT_MS_DEFAULT,
                 negotiate_versions=False, on_close=None, ssl_context=None,
                 server_hostname=None, sasl=None):
        _check_positive("inflight_max", inflight_max)
        _check_positive("queued_max", queued_max)
        _check_positive("connect_timeout_ms", connect_timeout_ms)
        _check_positive("request_timeout_ms", request_timeout_ms)
        self._loop = asyncio.get_running_loop()
        self.host = host
        self.port = port
        self.address = (host, port)
        self.client_id = client_id
        self.inflight_max = inflight_max
        self.queued_max = queued_max
        self.connect_timeout_ms = connect_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.negotiate_versions = negotiate_versions
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.sasl = sasl
        self.api_versions = None  # API key -> (min, max) the peer advertised, once negotiated
        self.responses_received = 0
        self._decoder = framing.FrameDecoder(frame_bytes_max)
        self._on_close = on_close
        self._state = _CONNECTING
        self._transport = None
        self._inflight = collections.deque()  # requests written, oldest first
        self._queue = collections.deque()  # requests waiting; may hold finished ones
        self._queued_count = 0  # live requests in _queue
        self._queued_bounded = 0  # live send_nowait requests in _queue
        self._out = []  # frames written in this loop iteration, sent together
        self._flush_handle = None
        self._receiving = False  # inside _on_data, which flushes when it ends
        self._timer = None  # one timer, at the earliest deadline of a live request
        self._timer_at = _NEVER
        self._next_correlation_id = 0
        self._connect_at = self._loop.time()
        self._connect_delay_reason = None
        self._connector = None
        self._lost = self._loop.create_future()  # done once the socket is gone (or never was)
        self._close_error = None  # (class, message) every later request fails with

    def __repr__(self):
        return f"<Connection to {self.host}:{self.port} {self._state}>"

    def _where(self):
        return f"connection to {self.host}:{self.port}"

    # ------------------------------------------------------------------ opening

    @classmethod
    async def open(cls, host, port, **options):
        """Connect (and negotiate versions if asked); `ConnectError` if that fails."""
        conn = cls(host, port, **options)
        conn._start()
        try:
            await asyncio.shield(conn._connector)
        except asyncio.CancelledError:
            await conn.close()
            raise
        if conn._state is not _OPEN:
            error_cls, message = conn._close_error
            raise error_cls(message, conn.address)
        return conn

    def _start(self, delay_s=0.0, delay_reason=None):
        """Start connecting, after `delay_s` seconds (the peer pool's backoff; requests whose
        deadline falls before the attempt fail at once with ConnectError naming
        `delay_reason`)."""
        if self._connector is not None:
            raise RuntimeError("a connection is started once")
        self._connect_at = self._loop.time() + max(0.0, delay_s)
        self._connect_delay_reason = delay_reason
        self._connector = self._loop.create_task(self._connect(delay_s))

    async def _connect(self, delay_s):
        try:
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            if self._state is _CLOSED:
                return
            tls = {}
            if self.ssl_context is not None:
                tls = dict(ssl=self.ssl_context,
                           server_hostname=self.server_hostname or self.host)
            try:
                await asyncio.wait_for(
                    self._loop.create_connection(lambda: _ClientProtocol(self),
                                                 self.host, self.port, **tls),
                    self.connect_timeout_ms / 1000)
            except asyncio.TimeoutError:
                self._shutdown(ConnectError, f"could not connect to {self.host}:{self.port} "
                               f"within {self.connect_timeout_ms} ms; check that the node runs "
                               "and that nothing drops packets on the way")
                return
            except ssl.SSLError as exc:
                self._shutdown(ConnectError, f"the TLS handshake with {self.host}:{self.port} "
                               f"failed: {exc.reason or exc}; check the trust store, the "
                               "certificates and that the listener speaks TLS")
                return
            except OSError as exc:
                self._shutdown(ConnectError, f"could not connect to {self.host}:{self.port}: "
                               f"{exc.strerror or exc}; check that the node runs and listens "
                               "on that address")
                return
            if self._state is _CLOSED:
                return
            if self.negotiate_versions or self.sasl is not None:
                self._state = _NEGOTIATING
                await self._negotiate()
                if self._state is _CLOSED:
                    return
            if self.sasl is not None:
                await self._authenticate()
                if self._state is _CLOSED:
                    return
            self._state = _OPEN
            self._pump()
            self._flush()
        except asyncio.CancelledError:
            # close() cancels a connect in progress; the loop shutting down does too.
            if self._state is not _CLOSED:
                self._shutdown(ConnectionClosedError,
                               f"the {self._where()} was cancelled while connecting")

    async def _setup_request(self, body, api_key, version):
        """Send `body` ahead of every queued request (while the connection is being set up)
        and return its response; None after failing the connection when it goes
        unanswered within the connect timeout."""
        future = self._loop.create_future()
        req = _Request(body, api_key, version, _future_callback(future),
                       self.connect_timeout_ms, False)
        self._set_deadline(req, self._loop.time() + self.connect_timeout_ms / 1000)
        self._write(req)
        self._flush()
        try:
            return await future
        except (ConnectionClosedError, RequestTimeoutError) as exc:
            self._shutdown(ConnectError, f"{self.host}:{self.port} did not answer "
                           f"{_api_name(api_key)}: {exc}")
            return None

    async def _authenticate(self):
        """SASL: the handshake naming the mechanism, then the exchange's tokens."""
        exchange = self.sasl()
        mechanism = exchange.mechanism
        response = await self._setup_request(SaslHandshakeRequest(mechanism=mechanism),
                                             _SASL_HANDSHAKE_KEY, 1)
        if response is None:
            return
        if response.error_code:
            self._shutdown(ConnectError, f"{self.host}:{self.port} refused SASL mechanism "
                           f"{mechanism} (error {response.error_code}; it enables "
                           f"{', '.join(response.mechanisms) or 'none'})")
            return
        theirs = (self.api_versions or {}).get(_SASL_AUTHENTICATE_KEY, (0, 1))[1]
        version = min(theirs, SaslAuthenticateRequest.valid_versions[1])
        token = exchange.first()
        while token is not None:
            response = await self._setup_request(SaslAuthenticateRequest(auth_bytes=token),
                                                 _SASL_AUTHENTICATE_KEY, version)
            if response is None:
                return
            if response.error_code:
                self._shutdown(ConnectError, f"{self.host}:{self.port} refused the SASL "
                               f"{mechanism} authentication (error {response.error_code}): "
                               f"{response.error_message or 'no message'}")
                return
            try:
                token = exchange.step(response.auth_bytes)
            except Exception as exc:  # noqa: BLE001 - the exchange refuses the server
                self._shutdown(ConnectError, f"the SASL {mechanism} answer of "
                               f"{self.host}:{self.port} is refused: {exc}")
                return

    async def _negotiate(self):
        """ApiVersions, highest version first; on UNSUPPORTED_VERSION retry at
        min(this version - 1, the peer's highest ApiVersions version), as Kafka clients do."""
        from kraftcore import __version__

        version = ApiVersionsRequest.valid_versions[1]
        while True:
            body = ApiVersionsRequest(client_software_name="kraftcore",
                                      client_software_version=__version__)
            response = await self._setup_request(body, _API_VERSIONS_KEY, version)
            if response is None:
                return
            if response.error_code == _UNSUPPORTED_VERSION:
                theirs = max((k.max_version for k in response.api_keys
                              if k.api_key == _API_VERSIONS_KEY), default=0)
                if version == 0:
                    break
                version = min(version - 1, theirs)
                continue
            if response.error_code != 0:
                break
            self.api_versions = {k.api_key: (k.min_version, k.max_version)
                                 for k in response.api_keys}
            return
        self._shutdown(ConnectError, f"{self.host}:{self.port} refused ApiVersions (error "
                       f"code {response.error_code}); it does not speak a Kafka protocol "
                       "version kraftcore knows")

    # ------------------------------------------------------------------ state

    @property
    def closed(self):
        """True once the connection failed or was closed: every later request fails."""
        return self._state is _CLOSED

    @property
    def connected(self):
        """True while the socket is open and requests are being sent."""
        return self._state is _OPEN

    def _finished(self):
        """Closed, socket gone, connect task ended: nothing of it is left to wait for."""
        return self._state is _CLOSED and self._lost.done() and (
            self._connector is None or self._connector.done())

    @property
    def inflight_count(self):
        """Requests written and not yet answered (including abandoned ones, whose responses
        will be read and dropped)."""
        return len(self._inflight)

    @property
    def queued_count(self):
        """Requests waiting for a connection or an in-flight slot."""
        return self._queued_count

    def choose_version(self, request_cls):
        """The version a request of `request_cls` is sent at when none is given: the highest
        kraftcore knows, or, after negotiation, the highest both sides know."""
        low, high = request_cls.valid_versions
        if self.api_versions is None:
            return high
        theirs = self.api_versions.get(request_cls.api_key)
        if theirs is not None:
            low, high = max(low, theirs[0]), min(high, theirs[1])
            if low <= high:
                return high
        offered = "none" if theirs is None else f"{theirs[0]}-{theirs[1]}"
        ours = request_cls.valid_versions
        raise UnsupportedVersionError(
            f"{self.host}:{self.port} supports {_api_name(request_cls.api_key)} versions "
            f"{offered}, kraftcore {ours[0]}-{ours[1]}: no version in common; talk to a node "
            "that serves this API")

    # ------------------------------------------------------------------ sending

    async def send(self, body, version=None, timeout_ms=None):
        """Send request `body` (at `version`, default `choose_version`) and return the
        response message. Waits for a free in-flight slot first. Raises RequestTimeoutError
        after `timeout_ms` (default `request_timeout_ms`, counted from this call),
        ConnectError or ConnectionClosedError when the connection fails, and the encode
        error when `body` cannot be encoded at that version."""
        future = self._loop.create_future()
        req = self._submit(body, version, _future_callback(future), timeout_ms, False)
        try:
            return await future
        except asyncio.CancelledError:
            self._abandon(req)
            raise

    def send_nowait(self, body, version, on_response, timeout_ms=None):
        """Hand request `body` over and return at once; `on_response(response, error)` is
        called exactly once later, from the event loop, with the response message (error
        None) or the error (response None). Raises only for a caller's mistake: `body` not a
        request message, or a `version` the message does not have."""
        self._submit(body, version, on_response, timeout_ms, True)

    def _submit(self, body, version, on_response, timeout_ms, bounded):
        cls = type(body)
        if getattr(cls, "kind", None) != "request":
            raise TypeError(f"{cls.__name__} is not a request message")
        if version is not None:
            cls.check_version(version)
        if timeout_ms is None:
            timeout_ms = self.request_timeout_ms
        elif not timeout_ms > 0:
            raise ValueError(f"timeout_ms must be > 0, not {timeout_ms!r}")
        req = _Request(body, cls.api_key, version, on_response, timeout_ms, bounded)
        state = self._state
        loop = self._loop
        if state is _CLOSED:
            error_cls, message = self._close_error
            self._fail_soon(req, error_cls(message, self.address))
            return req
        now = loop.time()
        deadline = now + timeout_ms / 1000
        if state is _CONNECTING and self._connect_at > deadline:
            wait_ms = (self._connect_at - now) * 1000
            reason = f" after: {self._connect_delay_reason}" if self._connect_delay_reason else ""
            self._fail_soon(req, ConnectError(
                f"{self.host}:{self.port} is in reconnect backoff for {wait_ms:.0f} ms more, "
                f"longer than the request's {timeout_ms} ms timeout{reason}", self.address))
            return req
        ready = state is _OPEN and not self._queued_count \
            and len(self._inflight) < self.inflight_max
        if not ready and bounded and self._queued_bounded >= self.queued_max:
            self._fail_soon(req, RequestQueueFullError(
                f"{self.queued_max} requests already wait to be sent on the {self._where()} "
                f"({len(self._inflight)} in flight); {req.describe()} was not sent: send "
                "less often or wait for responses", self.address))
            return req
        self._set_deadline(req, deadline)
        if ready:
            self._write(req)
            if self._flush_handle is None and not self._receiving:
                self._flush_handle = loop.call_soon(self._flush)
        else:
            self._queue.append(req)
            self._queued_count += 1
            if bounded:
                self._queued_bounded += 1
        return req

    def _fail_soon(self, req, error):
        """End `req` with `error` from the event loop, not from inside the caller's call."""
        req.state = _DONE
        self._loop.call_soon(self._finish, req, None, error)

    def _dequeued(self, req):
        self._queued_count -= 1
        if req.bounded:
            self._queued_bounded -= 1

    def _compact_queue(self):
        """Drop finished requests (timed out, abandoned) from the waiting line once they
        outnumber the live ones, so callers that give up cannot grow it."""
        if len(self._queue) > 2 * self._queued_count + 16:
            self._queue = collections.deque(r for r in self._queue if r.state is _QUEUED)

    def _pump(self):
        """Move waiting requests into free in-flight slots."""
        queue = self._queue
        inflight = self._inflight
        while queue and len(inflight) < self.inflight_max and self._state is _OPEN:
            req = queue.popleft()
            if req.state is not _QUEUED:
                continue  # timed out or cancelled while waiting
            self._dequeued(req)
            self._write(req)

    def _write(self, req):
        """Encode `req` and put it in flight (the bytes go out at the next `_flush`)."""
        body = req.body
        try:
            version = req.version
            if version is None:
                version = self.choose_version(type(body))
            cid = self._next_correlation_id
            frame = framing.encode_request(body, version, cid, self.client_id)
        except Exception as exc:  # noqa: BLE001 - the caller's body; the error is theirs
            self._fail_soon(req, exc)
            return
        self._next_correlation_id = (cid + 1) & 0x7FFFFFFF
        req.version = version
        req.correlation_id = cid
        req.body = None
        self._out.append(frame)
        req.state = _INFLIGHT
        self._inflight.append(req)

    def _flush(self):
        self._flush_handle = None
        out = self._out
        if not out:
            return
        if self._state is _CLOSED or self._transport is None:
            out.clear()
            return
        self._transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    # ------------------------------------------------------------------ ending requests

    def _finish(self, req, response, error):
        callback = req.on_response
        req.on_response = None
        req.state = _DONE
        if callback is None:
            return
        try:
            callback(response, error)
        except Exception:  # noqa: BLE001 - a caller's callback must not break the stream
            log.exception("%s: a response callback raised", self._where())

    def _abandon(self, req):
        """The awaiting caller went away: drop `req` if it waits, else ignore its answer."""
        if req.state is _QUEUED:
            self._dequeued(req)
            req.on_response = None
            self._finish(req, None, None)
            self._compact_queue()
        elif req.state is _INFLIGHT:
            req.on_response = None  # its deadline stays: a peer that never answers still fails

    # ------------------------------------------------------------------ deadlines
    # One timer per connection instead of one per request: a request only compares its
    # deadline with the timer's. When the timer fires, the live requests are scanned for the
    # expired ones and the timer is set again at the earliest deadline left. With equal
    # timeouts that happens about once per timeout, and a scan is at most
    # inflight_max + the queue long.

    def _set_deadline(self, req, deadline):
        req.deadline = deadline
        if deadline < self._timer_at:
            self._set_deadline_timer(deadline)

    def _on_timer(self):
        self._timer = None
        self._timer_at = _NEVER
        if self._state is _CLOSED:
            return
        now = self._loop.time() + _CLOCK_RESOLUTION_S  # call_at may fire this much early
        earliest = _NEVER
        for req in list(self._queue):
            if req.state is _QUEUED:
                if req.deadline <= now:
                    self._on_deadline(req)
                elif req.deadline < earliest:
                    earliest = req.deadline
        expired = None
        for req in self._inflight:
            if req.state is _INFLIGHT:
                if req.deadline <= now:
                    if expired is None or req.deadline < expired.deadline:
                        expired = req
                elif req.deadline < earliest:
                    earliest = req.deadline
        if expired is not None:
            self._on_deadline(expired)  # closes the connection
        elif earliest < self._timer_at and self._state is not _CLOSED:
            self._set_deadline_timer(earliest)

    def _set_deadline_timer(self, at):
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_at(at, self._on_timer)
        self._timer_at = at

    def _on_deadline(self, req):
        if req.state is _QUEUED:
            self._dequeued(req)
            self._finish(req, None, RequestTimeoutError(
                f"{req.describe()} waited {req.timeout_ms} ms for its turn on the "
                f"{self._where()} ({len(self._inflight)} requests in flight) and was not sent; "
                "retry, or raise timeout_ms or the in-flight limit", self.address))
            self._compact_queue()
        elif req.state is _INFLIGHT and self._state is _NEGOTIATING:
            # The ApiVersions of the connect: the connect fails (`open` raises ConnectError).
            self._shutdown(ConnectError, f"{self.host}:{self.port} did not answer "
                           f"{req.describe()} within {req.timeout_ms} ms; check that the node "
                           "runs and speaks Kafka's protocol on that port")
        elif req.state is _INFLIGHT:
            self._finish(req, None, RequestTimeoutError(
                f"{req.describe()} got no response within {req.timeout_ms} ms on the "
                f"{self._where()}; the connection was closed. Retry, or raise timeout_ms if "
                "the peer legitimately needs longer", self.address))
            self._shutdown(ConnectionClosedError,
                           f"the {self._where()} was closed because {req.describe()} got no "
                           f"response within {req.timeout_ms} ms")

    def _shutdown(self, error_cls, message, by_us=False, log_level=None):
        """Close for good: every waiting and in-flight request fails with `error_cls`."""
        if self._state is _CLOSED:
            return
        self._state = _CLOSED
        self._close_error = (error_cls, message)
        if log_level is not None:
            log.log(log_level, "%s", message)
        self._out.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        connector = self._connector
        if connector is not None and not connector.done() \
                and connector is not asyncio.current_task(self._loop):
            connector.cancel()  # it ends on its own; close() waits for it
        transport = self._transport
        if transport is not None:
            transport.abort()  # connection_lost follows and completes _lost
        elif not self._lost.done():
            self._lost.set_result(None)
        inflight, queue = self._inflight, self._queue
        self._inflight, self._queue = collections.deque(), collections.deque()
        self._queued_count = self._queued_bounded = 0
        for req in inflight:
            if req.state is not _DONE:
                self._finish(req, None, error_cls(message, self.address))
        for req in queue:
            if req.state is not _DONE:
                self._finish(req, None, error_cls(message, self.address))
        if self._on_close is not None:
            on_close, self._on_close = self._on_close, None
            try:
                on_close(self, None if by_us else error_cls(message, self.address))
            except Exception:  # noqa: BLE001
                log.exception("%s: the on_close callback raised", self._where())

    async def close(self):
        """Close the connection; every request still waiting or in flight fails with
        ConnectionClosedError. Returns once the socket is closed. Idempotent."""
        self._shutdown(ConnectionClosedError, f"the {self._where()} was closed by this side",
                       by_us=True)
        connector = self._connector
        if connector is not None and not connector.done():
            connector.cancel()
            await asyncio.wait([connector])
        await self._lost

    # ------------------------------------------------------------------ transport events

    def _on_connection_made(self, transport):
        if self._state is _CLOSED:  # closed while the connect was completing
            transport.abort()
            return
        self._transport = transport

    def _broken(self, reason):
        self._shutdown(ConnectionClosedError,
                       f"{self.host}:{self.port} broke the protocol ({reason}); the connection "
                       "was closed", log_level=logging.WARNING)

    def _on_data(self, data):
        if self._state is _CLOSED:
            return
        try:
            frames = self._decoder.feed(data)
        except Exception as exc:  # noqa: BLE001 - ProtocolError: a size out of range
            self._broken(f"bad response frame: {exc}")
            return
        inflight = self._inflight
        self._receiving = True
        try:
            self._on_frames(frames, inflight)
        finally:
            self._receiving = False
        if self._state is not _CLOSED:
            if self._queued_count:
                self._pump()
            self._flush()

    def _on_frames(self, frames, inflight):
        for frame in frames:
            if not inflight:
                self._broken("a response arrived with no request in flight")
                return
            req = inflight[0]  # stays in flight (and fails with the rest) if the frame is bad
            if len(frame) < 4:
                self._broken(f"a {len(frame)}-byte response frame has no correlation id")
                return
            (cid,) = _INT32.unpack_from(frame, 0)
            if cid != req.correlation_id:
                self._broken(f"correlation id {cid} answered where {req.correlation_id} "
                             f"({req.describe()}) was due")
                return
            inflight.popleft()
            self.responses_received += 1
            if req.on_response is None:  # abandoned by its caller
                self._finish(req, None, None)
                continue
            try:
                response = self._decode(frame, req)
            except Exception as exc:  # noqa: BLE001 - ProtocolError; the stream is suspect
                req.state = _DONE
                self._finish(req, None, ConnectionClosedError(
                    f"the response to {req.describe()} from {self.host}:{self.port} does not "
                    f"decode ({exc}); the connection was closed", self.address))
                self._broken(f"undecodable response to {req.describe()}: {exc}")
                return
            self._finish(req, response, None)
            if self._state is _CLOSED:  # a callback closed it
                return

    @staticmethod
    def _decode(frame, req):
        version = req.version
        if (req.api_key == _API_VERSIONS_KEY and version > 0 and len(frame) >= 6
                and _INT16.unpack_from(frame, 4)[0] == _UNSUPPORTED_VERSION):
            # A server answers an ApiVersions version it does not know in v0 (KIP-511).
            version = 0
        return framing.decode_response(frame, req.api_key, version)[1]

    def _on_connection_lost(self, exc):
        if not self._lost.done():
            self._lost.set_result(None)
        if self._state is not _CLOSED:
            reason = "the peer closed the connection" if exc is None else \
                f"the connection failed: {exc}"
            self._shutdown(ConnectionClosedError,
                           f"{self.host}:{self.port}: {reason}; requests in flight may or may "
                           "not have been processed")
