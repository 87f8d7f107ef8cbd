"""SASL/PLAIN (RFC 4616): one client message, `authzid NUL authcid NUL password`, in UTF-8.

The server accepts it when the authzid is empty or the authcid itself (Kafka's rule: no
acting for another user), the authcid and password are non-empty, and the password equals
the one `lookup_password(authcid)` returns (compared in constant time). An unknown user and
a wrong password fail with the same message. Every failure, including bytes that are not a
PLAIN message, raises `SaslAuthenticationError`.

PLAIN sends the password itself: use it on SASL_SSL listeners, or where the network is
trusted.
"""

import hmac

from kraftcore.errors import SaslAuthenticationError

__all__ = ["PLAIN", "PlainServer", "PlainClient", "FAILURE_MESSAGE"]

PLAIN = "PLAIN"
FAILURE_MESSAGE = ("Authentication failed during authentication due to invalid credentials "
                   "with SASL mechanism PLAIN")


def _fail(message):
    raise SaslAuthenticationError(message)


class PlainServer:
    """The server side of one PLAIN exchange: `evaluate(client_bytes) -> b""`; then
    `complete` is True and `username` the authenticated user."""

    mechanism = PLAIN

    def __init__(self, lookup_password):
        if not callable(lookup_password):
            raise ValueError("lookup_password must be a callable: username -> password or "
                             "None")
        self._lookup = lookup_password
        self.username = None
        self.complete = False
        self.failed = False

    def evaluate(self, data):
        if self.failed or self.complete:
            _fail("the PLAIN exchange is over: it takes one message")
        try:
            self._check(data)
        except SaslAuthenticationError:
            self.failed = True
            raise
        return b""

    def _check(self, data):
        if not isinstance(data, (bytes, bytearray)):
            _fail("invalid PLAIN message: not bytes")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            _fail("invalid PLAIN message: not UTF-8")
        tokens = text.split("\0")
        if len(tokens) != 3:
            _fail("invalid PLAIN message: expected authzid, user name and password separated "
                  "by NUL")
        authzid, username, password = tokens
        if not username:
            _fail("PLAIN authentication failed: no user name")
        if not password:
            _fail("PLAIN authentication failed: no password")
        if authzid and authzid != username:
            _fail("PLAIN authentication failed: the authorization id differs from the user "
                  "name")
        expected = self._lookup(username)
        if expected is not None and not isinstance(expected, str):
            raise TypeError("lookup_password must return text or None")
        # Compare even for an unknown user so that both take the same path.
        given = password.encode("utf-8")
        good = hmac.compare_digest(given, (expected if expected is not None
                                           else "\0" + password).encode("utf-8"))
        if expected is None or not good:
            _fail(FAILURE_MESSAGE)
        self.username = username
        self.complete = True


class PlainClient:
    """The client side: `first()` is the one message (with an empty authzid)."""

    mechanism = PLAIN

    def __init__(self, username, password):
        for name, value in (("username", username), ("password", password)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"PLAIN {name} must be non-empty text")
            if "\0" in value:
                raise ValueError(f"PLAIN {name} must not hold a NUL character")
        self.username = username
        self._password = password

    def first(self):
        return f"\0{self.username}\0{self._password}".encode("utf-8")
