"""The listener of a node: accepts TCP connections, reads Kafka request frames, hands each
request to the node's handler and writes the responses back (kafka-facts §6.1).

`Listener` owns the listening socket and every connection it accepted; `close()` ends them
all. Each connection keeps these rules:

* Responses go out in request order, even when handlers finish out of order (Kafka's
  guarantee to a client that pipelines). A response that is ready waits for the ones ahead
  of it.
* At most `max_inflight_per_connection` requests are being handled (or waiting for the
  responses ahead of them) at once. Past that, and while the socket's send buffer is full,
  the connection is not read: a client that pipelines more, or never reads its responses,
  is slowed down instead of growing memory.
* A connection whose bytes break the protocol is closed alone; the listener and every
  other connection keep going. That covers a frame size outside [0, max_frame_bytes], a
  header or body that does not decode, an API key this listener does not serve, an API
  version it does not know, and a handler that raises or returns something that is not a
  response to the request. One log line says which connection and why (with the traceback
  when the handler failed).
* The responses that become ready in one event-loop turn leave in one write (at the start
  of the next turn), not one `send` each: a commit that completes many requests costs one
  system call per connection.
* ApiVersions is answered by the listener itself (unless `handle_api_versions=False`):
  error 0 and the version range of every API it serves. An ApiVersions request of a
  version the listener does not know is answered, without parsing its body, in v0 with
  UNSUPPORTED_VERSION and the same list, so the client can retry lower (KIP-511); the
  connection stays open.

The handler is `handler(request, peer)`: `request` is a `kraftcore.protocol.framing.Request`
and `peer` the client's (host, port). It returns the response message, or an awaitable of
it (a coroutine is run as a task and cancelled if its connection closes first). The
listener encodes the response at the request's version with its correlation id.
"""

import asyncio
import collections
import functools
import inspect
import logging

from kraftcore import limits
from kraftcore.errors import ListenError, ProtocolError, UnsupportedVersionError
from kraftcore.protocol import framing
from kraftcore.protocol.apis import API_BY_KEY
from kraftcore.protocol.schema import Message

log = logging.getLogger("kraftcore.net")

_API_VERSIONS_KEY = framing.API_VERSIONS_KEY
# Responses produced in one go (one read's worth of requests) are written together, but no
# more than this many bytes are held back: past it they are written at once, so that a full
# send buffer pauses the connection before the next request is handled.
_CORK_BYTES = 64 * 1024


def _check_positive(name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


class Listener:
    """A listening socket and its connections. Start one with `await Listener.start(...)`."""

    def __init__(self, handler, *, max_frame_bytes, max_inflight_per_connection,
                 max_connections, api_keys, handle_api_versions, name):
        _check_positive("max_frame_bytes", max_frame_bytes)
        _check_positive("max_inflight_per_connection", max_inflight_per_connection)
        _check_positive("max_connections", max_connections)
        if api_keys is None:
            served = dict(API_BY_KEY)
        else:
            served = {}
            for key in api_keys:
                if key not in API_BY_KEY:
                    raise ValueError(f"API key {key!r} is not one kraftcore implements "
                                     f"(known: {sorted(API_BY_KEY)})")
                served[key] = API_BY_KEY[key]
            served[_API_VERSIONS_KEY] = API_BY_KEY[_API_VERSIONS_KEY]
        self.handler = handler
        self.name = name
        self.max_frame_bytes = max_frame_bytes
        self.max_inflight_per_connection = max_inflight_per_connection
        self.max_connections = max_connections
        self.handle_api_versions = handle_api_versions
        self.host = None
        self.port = None
        self._served = dict(sorted(served.items()))
        self._advertised = [(key, *api.valid_versions) for key, api in self._served.items()]
        self._api_versions_bodies = {}
        self._server = None
        self._connections = set()
        self._tasks = set()  # handler tasks this listener created and must see finish
        self._closing = False
        self._all_closed = None

    @classmethod
    async def start(cls, host, port, handler, *, max_frame_bytes=limits.FRAME_BYTES_MAX,
                    max_inflight_per_connection=limits.NET_SERVER_INFLIGHT_REQUESTS_MAX,
                    max_connections=limits.NET_LISTENER_CONNECTIONS_MAX, api_keys=None,
                    handle_api_versions=True, name="kraftcore"):
        """Listen on `host`:`port` (port 0: a free port, see `.port`). `api_keys` limits the
        APIs served and advertised (default: every API kraftcore implements; ApiVersions is
        always served). `name` prefixes the log lines."""
        self = cls(handler, max_frame_bytes=max_frame_bytes,
                   max_inflight_per_connection=max_inflight_per_connection,
                   max_connections=max_connections, api_keys=api_keys,
                   handle_api_versions=handle_api_versions, name=name)
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(lambda: _ServerConnection(self), host, port)
        except OSError as exc:
            raise ListenError(f"{name}: cannot listen on {host}:{port}: "
                              f"{exc.strerror or exc}; choose another port or stop the "
                              "process that holds this one", (host, port)) from exc
        self.host, self.port = self._server.sockets[0].getsockname()[:2]
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

    def _api_versions_body(self, version):
        body = self._api_versions_bodies.get(version)
        if body is None:
            cls = API_BY_KEY[_API_VERSIONS_KEY].response
            body = cls(error_code=0, throttle_time_ms=0, api_keys=[
                cls.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, low, high in self._advertised])
            self._api_versions_bodies[version] = body
        return body

    def _connection_closed(self, conn):
        self._connections.discard(conn)
        if not self._connections and self._all_closed is not None \
                and not self._all_closed.done():
            self._all_closed.set_result(None)

    async def close(self):
        """Stop listening, close every connection (handlers still running on them are
        cancelled) and return once all of it is done. Idempotent."""
        if not self._closing:
            self._closing = True
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


class _Slot:
    """A request whose response is not written yet: `frame` is set once it is ready."""

    __slots__ = ("request", "future", "owned", "callback", "frame")

    def __init__(self, request, future, owned):
        self.request = request
        self.future = future
        self.owned = owned
        self.callback = None
        self.frame = None


class _ServerConnection(asyncio.Protocol):
    """One accepted connection (see the module docstring for its rules)."""

    def __init__(self, listener):
        self._listener = listener
        self._decoder = framing.FrameDecoder(listener.max_frame_bytes)
        self._transport = None
        self.peer = ("?", 0)
        self._slots = collections.deque()  # requests in order, answered or not
        self._backlog = collections.deque()  # frames read but not dispatched (while busy)
        self._out = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self._closed = False
        self._reading_paused = False
        self._writing_paused = False

    # ------------------------------------------------------------------ transport events

    def connection_made(self, transport):
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = tuple(peer[:2])
        listener = self._listener
        if listener._closing:
            self._closed = True
            transport.abort()
            return
        if len(listener._connections) >= listener.max_connections:
            self._closed = True
            log.warning("%s: refused the connection from %s:%s: already %d connections open "
                        "(max_connections)", listener.name, *self.peer,
                        len(listener._connections))
            transport.abort()
            return
        listener._connections.add(self)

    def connection_lost(self, exc):
        self._closed = True
        self._cancel_handlers()
        self._backlog.clear()
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

    def data_received(self, data):
        if self._closed:
            return
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            self._fail(f"bad frame: {exc}")
            return
        backlog = self._backlog
        for frame in frames:
            if backlog or self._busy():
                backlog.append(frame)
            else:
                self._dispatch(frame)
                if self._closed:
                    return
        if backlog or self._busy():
            self._pause_reading()
        self._flush()

    # ------------------------------------------------------------------ requests

    def _busy(self):
        return self._writing_paused or \
            len(self._slots) >= self._listener.max_inflight_per_connection

    def _pause_reading(self):
        if not self._reading_paused and not self._closed:
            self._reading_paused = True
            self._transport.pause_reading()

    def _dispatch(self, frame):
        listener = self._listener
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
        if api_key == _API_VERSIONS_KEY and listener.handle_api_versions:
            self._respond(framing.encode_response(
                listener._api_versions_body(version), version, correlation_id))
            return
        try:
            result = listener.handler(request, self.peer)
        except Exception:  # noqa: BLE001 - a handler bug closes this connection only
            log.exception("%s: the handler failed on %s v%d from %s:%s; closing that "
                          "connection", listener.name, api.name, version, *self.peer)
            self._fail(None)
            return
        if isinstance(result, Message):
            frame = self._encode(request, result)
            if frame is not None:
                self._respond(frame)
        elif inspect.isawaitable(result):
            future = asyncio.ensure_future(result)
            slot = _Slot(request, future, future is not result)
            if slot.owned:
                listener._tasks.add(future)
            self._slots.append(slot)
            slot.callback = functools.partial(self._on_handler_done, slot)
            future.add_done_callback(slot.callback)
        else:
            self._fail(f"the handler returned {type(result).__name__} for {api.name} "
                       f"v{version}, not a response message")

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
        """Send `frame` now if nothing is ahead of it, else when its turn comes."""
        if self._slots:
            slot = _Slot(None, None, False)
            slot.frame = frame
            self._slots.append(slot)
        else:
            self._write(frame)

    def _write(self, frame):
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
        if not isinstance(result, Message):
            self._fail(f"the handler's awaitable returned {type(result).__name__} for "
                       f"{name} v{request.api_version}, not a response message")
            return
        frame = self._encode(request, result)
        if frame is None:
            return
        slot.frame = frame
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
        backlog = self._backlog
        while backlog and not self._busy() and not self._closed:
            self._dispatch(backlog.popleft())
        if self._reading_paused and not backlog and not self._busy() and not self._closed:
            self._reading_paused = False
            self._transport.resume_reading()

    def _flush(self):
        self._flush_scheduled = False
        out = self._out
        if out:
            self._out = []
            self._out_bytes = 0
            if not self._closed:
                # may call pause_writing, which marks the connection busy
                self._transport.write(out[0] if len(out) == 1 else b"".join(out))

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
        self._closed = True
        self._backlog.clear()
        self._cancel_handlers()
        self._transport.close()

    def abort(self):
        """Close at once, dropping unsent responses (the listener is closing)."""
        self._closed = True
        self._backlog.clear()
        self._cancel_handlers()
        self._out = []
        self._out_bytes = 0
        if self._transport is not None:
            self._transport.abort()
