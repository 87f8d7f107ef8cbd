"""Request and response headers, 4-byte size framing, and a sans-I/O frame decoder
(kafka-facts §6.1).

* A frame on the wire is an int32 big-endian size N, then N bytes: a header, then a body.
* Request header v1 = api key, api version, correlation id, client id (a nullable string
  with an int16 length); v2 adds a tagged-field section and keeps the client id's classic
  length. A request uses header v2 when its API version is flexible, otherwise v1.
* Response header v0 = correlation id; v1 adds a tagged-field section and is used for
  flexible versions, except by ApiVersions, whose response always uses v0 (KIP-511).
* A request for an ApiVersions version the server does not know is answered without
  parsing its body: ApiVersions v0, error UNSUPPORTED_VERSION (35), listing at least
  ApiVersions' own range so the client can retry (`unsupported_api_versions_response`).

`FrameDecoder` owns no socket: feed it bytes as they arrive and it returns whole frames.
"""

import struct
from typing import NamedTuple

from kraftcore import limits
from kraftcore.errors import ProtocolError, UnsupportedVersionError
from kraftcore.protocol.schema import Field, message

API_VERSIONS_KEY = 18
UNSUPPORTED_VERSION = 35

RequestHeader = message("RequestHeader", kind="header", valid="0-2", flexible="2+", fields=[
    Field("RequestApiKey", "int16"),
    Field("RequestApiVersion", "int16"),
    Field("CorrelationId", "int32"),
    Field("ClientId", "string", versions="1+", nullable="1+", flexible="none", default=None,
          ignorable=True),
])

ResponseHeader = message("ResponseHeader", kind="header", valid="0-1", flexible="1+", fields=[
    Field("CorrelationId", "int32"),
])

_SIZE = struct.Struct(">i")
_HANDOVER_BYTES = limits.NET_SERVER_HANDOVER_BYTES_MIN  # the same size as the listener's
_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_HEADER_V1 = struct.Struct(">ix")  # ResponseHeader v1: correlation id, no tagged fields


def request_header_version(request_cls, version):
    """2 for a flexible API version, else 1."""
    return 2 if request_cls.is_flexible(version) else 1


def response_header_version(response_cls, version):
    """1 for a flexible API version, else 0; ApiVersions always 0."""
    if response_cls.api_key == API_VERSIONS_KEY:
        return 0
    return 1 if response_cls.is_flexible(version) else 0


def frame(payload):
    """Prefix `payload` with its int32 size."""
    if len(payload) > 0x7FFFFFFF:
        raise ValueError(f"a frame holds at most 2 GiB - 1, not {len(payload)} bytes")
    return _SIZE.pack(len(payload)) + bytes(payload)


class Request(NamedTuple):
    """A decoded request frame."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: object  # str or None
    body: object       # the request message
    header: object     # the RequestHeader
    trailing_bytes: int = 0  # bytes after the body, ignored (see decode_request)


_loaded = {}  # kraftcore.protocol.apis and kraftcore.codec, imported on first use


def _apis():
    apis = _loaded.get("apis")
    if apis is None:
        from kraftcore.protocol import apis

        _loaded["apis"] = apis
    return apis


def _codec():
    codec = _loaded.get("codec")
    if codec is None:
        from kraftcore import codec

        _loaded["codec"] = codec
    return codec


def encode_request(body, version, correlation_id, client_id=None):
    """A whole request frame (size, header, body) for message `body` at `version`."""
    cls = type(body)
    if cls.kind != "request":
        raise TypeError(f"{cls.__name__} is not a request message")
    cls.check_version(version)
    header = RequestHeader(request_api_key=cls.api_key, request_api_version=version,
                           correlation_id=correlation_id, client_id=client_id)
    payload = header.encode(request_header_version(cls, version)) + body.encode(version)
    return frame(payload)


def peek_request(frame_bytes):
    """(api key, api version, correlation id) of a request frame, read at fixed positions
    without parsing the rest: what a server needs to answer even an unknown request."""
    if len(frame_bytes) < _PREFIX.size:
        raise ProtocolError(
            f"a request header needs {_PREFIX.size} bytes, the frame has {len(frame_bytes)}", 0)
    return _PREFIX.unpack_from(frame_bytes, 0)


def decode_request(frame_bytes):
    """Decode a request frame (without its size prefix) into a `Request`.

    An unknown API key or version raises `UnsupportedVersionError` carrying `api_key`,
    `api_version` and `correlation_id`, so a server can answer it (for ApiVersions, with
    `unsupported_api_versions_response`). Malformed bytes raise `ProtocolError`.

    Bytes after the body are not an error, as in Kafka (which reads a request's body and
    never checks that the frame ends there; librdkafka's all-topics Metadata v13 request
    carries 3 extra bytes): they are skipped and counted in `Request.trailing_bytes`, for
    the server to log. Responses and metadata records stay strict."""
    api_key, version, correlation_id = peek_request(frame_bytes)
    try:
        cls = _apis().api(api_key).request
        cls.check_version(version)
    except UnsupportedVersionError as exc:
        exc.api_key, exc.api_version, exc.correlation_id = api_key, version, correlation_id
        raise
    codec = _codec()
    header_version = request_header_version(cls, version)
    header, pos = codec.decode_struct(RequestHeader.program(header_version), frame_bytes)
    header._version = header_version
    rest = memoryview(frame_bytes)[pos:]
    body, end = codec.decode_struct(cls.program(version), rest)
    body._version = version
    return Request(api_key, version, correlation_id, header.client_id, body, header,
                   len(rest) - end)


def encode_response(body, version, correlation_id):
    """A whole response frame (size, header, body) for message `body` at `version`: bytes,
    or, when a records field of `body` holds a `kraftcore.types.FileRegion`, a list of
    parts (bytes and regions alternating, beginning and ending with bytes) that make the
    frame in that order, for a writer that sends the regions from their files."""
    cls = type(body)
    if cls.kind != "response":
        raise TypeError(f"{cls.__name__} is not a response message")
    cls.check_version(version)
    # ResponseHeader v0 is the correlation id, v1 adds no tagged fields (one 0 byte): packed
    # directly rather than built and encoded as a message for every answer
    header = (_HEADER_V1 if response_header_version(cls, version) else _SIZE).pack(
        correlation_id)
    parts = body.encode_parts(version)
    size = len(header) + sum(map(len, parts))
    if size > 0x7FFFFFFF:
        raise ValueError(f"a frame holds at most 2 GiB - 1, not {size} bytes")
    # one join: a fetch answer of megabytes is copied once here, not once per piece
    head = b"".join((_SIZE.pack(size), header, parts[0]))
    if len(parts) == 1:
        return head
    parts[0] = head
    return parts


def decode_response(frame_bytes, api_key, version):
    """Decode a response frame (without its size prefix) to the request (`api_key`,
    `version`) it answers. Returns (correlation id, response message)."""
    codec = _codec()
    cls = _apis().api(api_key).response
    cls.check_version(version)
    header_version = response_header_version(cls, version)
    header, pos = codec.decode_struct(ResponseHeader.program(header_version), frame_bytes)
    body = codec.decode_message(cls.program(version), memoryview(frame_bytes)[pos:])
    body._version = version
    return header.correlation_id, body


def unsupported_api_versions_response(correlation_id, api_keys=None):
    """The frame that answers an ApiVersions request of an unknown version: ApiVersions
    v0 with error UNSUPPORTED_VERSION (35). `api_keys` lists `(key, min, max)` to advertise;
    by default just ApiVersions' own range."""
    response_cls = _apis().api(API_VERSIONS_KEY).response
    if api_keys is None:
        low, high = response_cls.valid_versions
        api_keys = [(API_VERSIONS_KEY, low, high)]
    entry = response_cls.ApiVersion
    body = response_cls(error_code=UNSUPPORTED_VERSION, api_keys=[
        entry(api_key=key, min_version=low, max_version=high) for key, low, high in api_keys])
    return encode_response(body, 0, correlation_id)


class FrameDecoder:
    """Splits a byte stream into frames: `feed(data)` returns the whole frames (payloads
    without their size prefix) completed by `data`; a partial frame waits for more. A frame
    is bytes, or, when one large frame is all the decoder holds, a read-only-by-contract
    memoryview of the buffer it was gathered in (handed over rather than copied).

    A negative size or one above `frame_bytes_max` raises `ProtocolError` naming the stream
    position; the stream cannot be resynchronised after that, so every later `feed` raises
    too (close the connection)."""

    def __init__(self, frame_bytes_max=limits.FRAME_BYTES_MAX):
        if not 0 < frame_bytes_max <= 0x7FFFFFFF:
            raise ValueError(f"frame_bytes_max must be in [1, 2^31 - 1], not {frame_bytes_max}")
        self.frame_bytes_max = frame_bytes_max
        self._buffer = bytearray()
        self._consumed = 0  # stream bytes before _buffer[0]
        self._error = None

    @property
    def buffered_bytes(self):
        """Bytes received that do not yet make a whole frame."""
        return len(self._buffer)

    def feed(self, data):
        if self._error is not None:
            raise ProtocolError(*self._error)  # a fresh error: no traceback piles up
        self._buffer += data
        frames = []
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self.frame_bytes_max:
                self._error = (f"frame size {size} is outside [0, {self.frame_bytes_max}]",
                               self._consumed + pos)
                raise ProtocolError(*self._error)
            if len(buf) - pos - 4 < size:
                break
            if pos == 0 and 4 + size == len(buf) and size >= _HANDOVER_BYTES:
                # One large frame fills the buffer: it is handed over, not copied (the
                # decoder starts a new buffer).
                self._buffer = bytearray()
                self._consumed += len(buf)
                frames.append(memoryview(buf)[4:])
                return frames
            frames.append(bytes(memoryview(buf)[pos + 4:pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
            self._consumed += pos
        return frames
