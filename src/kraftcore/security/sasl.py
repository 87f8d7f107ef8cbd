"""One connection's SASL authentication, independent of sockets: the server side answers
SaslHandshake and SaslAuthenticate requests (KIP-152), the client side drives a mechanism.

Server states: `handshake` (a SaslHandshake picks an enabled mechanism) -> `authenticate`
(SaslAuthenticate requests carry the mechanism's messages) -> `complete` or `failed`.

* An unknown mechanism answers UNSUPPORTED_SASL_MECHANISM with the enabled ones, and fails
  the session (the listener closes the connection after sending).
* A second SaslHandshake, a SaslAuthenticate before a handshake or after the end answers
  ILLEGAL_SASL_STATE and fails the session.
* A mechanism failure answers SASL_AUTHENTICATION_FAILED with its message and fails the
  session.
* Success sets `complete` and `principal` (`User:<name>`); the last response carries the
  mechanism's final message (SCRAM's server signature; nothing for PLAIN).

`failed` means: send this response, then close the connection. Session re-authentication
(KIP-368) is not offered: SessionLifetimeMs is 0.
"""

from kraftcore.errors import SaslAuthenticationError
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse
from kraftcore.security.plain import PLAIN, PlainClient
from kraftcore.security.principal import USER_TYPE, KafkaPrincipal
from kraftcore.security.scram import MECHANISMS as SCRAM_MECHANISMS
from kraftcore.security.scram import ScramClient

__all__ = ["SUPPORTED_MECHANISMS", "SaslServerSession", "client_exchange"]

SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)


class SaslServerSession:
    """The server side of one connection's SASL authentication. `enabled_mechanisms` are
    the listener's (`sasl.enabled.mechanisms`); `make_server(mechanism)` returns a fresh
    mechanism server (`PlainServer`, `ScramServer`) for the one the client picks."""

    def __init__(self, enabled_mechanisms, make_server):
        enabled = list(enabled_mechanisms)
        if not enabled:
            raise ValueError("a SASL session needs at least one enabled mechanism")
        unknown = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"unsupported SASL mechanism(s) {', '.join(map(str, unknown))}; "
                             f"supported: {', '.join(SUPPORTED_MECHANISMS)}")
        if not callable(make_server):
            raise ValueError("make_server must be a callable: mechanism -> mechanism server")
        self.enabled_mechanisms = enabled
        self._make_server = make_server
        self.mechanism = None
        self.handshake_version = None
        self._server = None
        self.principal = None
        self.complete = False
        self.failed = False

    def handshake(self, version, body):
        """The SaslHandshakeResponse to a SaslHandshakeRequest `body` of `version`."""
        if self.mechanism is not None or self.complete or self.failed:
            self.failed = True
            return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                         mechanisms=list(self.enabled_mechanisms))
        requested = getattr(body, "mechanism", None)
        if requested not in self.enabled_mechanisms:
            self.failed = True
            return SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                         mechanisms=list(self.enabled_mechanisms))
        self.mechanism = requested
        self.handshake_version = version
        self._server = self._make_server(requested)
        return SaslHandshakeResponse(error_code=ErrorCode.NONE,
                                     mechanisms=list(self.enabled_mechanisms))

    def authenticate(self, version, body):
        """The SaslAuthenticateResponse to a SaslAuthenticateRequest `body` of `version`."""
        if self._server is None or self.complete or self.failed:
            self.failed = True
            state = ("before a SaslHandshake" if self._server is None
                     else "after authentication ended")
            return _auth_response(ErrorCode.ILLEGAL_SASL_STATE,
                                  f"SaslAuthenticate request received {state}")
        auth_bytes = getattr(body, "auth_bytes", None)
        try:
            challenge = self._server.evaluate(auth_bytes if auth_bytes is not None else b"")
        except SaslAuthenticationError as exc:
            self.failed = True
            return _auth_response(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
        if self._server.complete:
            self.complete = True
            self.principal = KafkaPrincipal(USER_TYPE, self._server.username)
        return SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None,
                                        auth_bytes=challenge or b"", session_lifetime_ms=0)


def _auth_response(code, message):
    return SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"",
                                    session_lifetime_ms=0)


class _PlainExchange:
    def __init__(self, username, password):
        self.mechanism = PLAIN
        self._client = PlainClient(username, password)
        self._sent = False

    def first(self):
        self._sent = True
        return self._client.first()

    def step(self, server_bytes):
        if not self._sent:
            raise SaslAuthenticationError("PLAIN: first() was not called")
        if server_bytes:
            raise SaslAuthenticationError("PLAIN: the server sent a challenge; PLAIN has none")
        return None


class _ScramExchange:
    def __init__(self, mechanism, username, password, nonce):
        self.mechanism = mechanism
        self._client = ScramClient(mechanism, username, password, nonce)
        self._final_sent = False

    def first(self):
        return self._client.first()

    def step(self, server_bytes):
        if not self._final_sent:
            self._final_sent = True
            return self._client.final(server_bytes)
        self._client.verify(server_bytes)
        return None


def client_exchange(mechanism, username, password, nonce=None):
    """The client side of `mechanism` for `username`: `first() -> bytes` to send first,
    then `step(server_bytes) -> bytes` to send next, or None when done (for SCRAM after the
    server's signature checked). `nonce` (SCRAM only) is a callable returning random bytes
    or a `random.Random`. Failures raise `SaslAuthenticationError`."""
    if mechanism == PLAIN:
        return _PlainExchange(username, password)
    if mechanism in SCRAM_MECHANISMS:
        if nonce is None:
            raise ValueError(f"{mechanism} needs a nonce source")
        return _ScramExchange(mechanism, username, password, nonce)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}; supported: "
                     f"{', '.join(SUPPORTED_MECHANISMS)}")
