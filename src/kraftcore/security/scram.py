"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: the stored
credentials and both sides of the exchange.

Credentials: salted password = PBKDF2-HMAC(password, salt, iterations); client key =
HMAC(salted, "Client Key"); stored key = H(client key); server key = HMAC(salted,
"Server Key"). Kafka's mechanism codes (UserScramCredentialRecord, AlterUserScramCredentials)
are 1 = SCRAM-SHA-256 and 2 = SCRAM-SHA-512; iterations lie in [4096, 16384].

Exchange (four messages):

    client-first   n,[a=authzid],n=user,r=cnonce[,ext]
    server-first   r=cnonce+snonce,s=base64(salt),i=iterations
    client-final   c=base64(gs2 header),r=cnonce+snonce,p=base64(client proof)
    server-final   v=base64(server signature)          (or e=error)

Rules kept by `ScramServer`: the gs2 header is `n` (channel binding, `p=` or `y`, is
refused); an authzid is empty or the user's own name; names are SASLnames (`=2C` for `,`,
`=3D` for `=`); the `tokenauth` extension (delegation tokens) is refused; the final nonce is
the one the server sent; the proof is checked in constant time. An unknown user goes through
a fake exchange (a made-up salt and keys) and fails at the final message exactly as a wrong
password does. Every failure, including bytes that are not a SCRAM message at all, raises
`SaslAuthenticationError`, and a failed server stays failed.

Sans-I/O and deterministic: nonces come from the `nonce` argument (a callable returning
bytes or text, or a `random.Random`); production passes `secrets`-backed bytes.
"""

import base64
import binascii
import hashlib
import hmac
import re
from typing import NamedTuple

from kraftcore.errors import SaslAuthenticationError

__all__ = [
    "ScramMechanism", "SCRAM_SHA_256", "SCRAM_SHA_512", "MECHANISMS", "MIN_ITERATIONS",
    "MAX_ITERATIONS", "DEFAULT_ITERATIONS", "mechanism", "ScramCredential", "make_credential",
    "credential_from_salted_password", "salted_password", "ScramServer", "ScramClient",
    "failure_message",
]

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramMechanism(NamedTuple):
    """A SCRAM mechanism: its SASL name, Kafka's code for it, and its hash's name."""

    name: str
    code: int
    hash_name: str

    def digest(self, data):
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key, data):
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
_BY_CODE = {m.code: m for m in MECHANISMS.values()}


def mechanism(which):
    """The `ScramMechanism` named (`"SCRAM-SHA-256"`) or coded (1) by `which`, or `which`
    itself. Raises ValueError for anything else."""
    if isinstance(which, ScramMechanism):
        return which
    if isinstance(which, str) and which in MECHANISMS:
        return MECHANISMS[which]
    if isinstance(which, int) and not isinstance(which, bool) and which in _BY_CODE:
        return _BY_CODE[which]
    raise ValueError(f"unknown SCRAM mechanism {which!r}: use SCRAM-SHA-256 (code 1) or "
                     "SCRAM-SHA-512 (code 2)")


def failure_message(mech):
    """What a client is told when its credentials are wrong (or its user unknown)."""
    return ("Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {mechanism(mech).name}")


class ScramCredential(NamedTuple):
    """What a server keeps for a user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _check_iterations(mech, iterations):
    if isinstance(iterations, bool) or not isinstance(iterations, int):
        raise ValueError(f"iterations must be an int, not {type(iterations).__name__}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"{mech.name} iterations must be in [{MIN_ITERATIONS}, "
                         f"{MAX_ITERATIONS}], not {iterations}")


def _check_bytes(name, value):
    if not isinstance(value, (bytes, bytearray)) or not value:
        raise ValueError(f"{name} must be non-empty bytes, not {value!r:.40}")
    return bytes(value)


def salted_password(mech, password, salt, iterations):
    """PBKDF2-HMAC of the UTF-8 password (Kafka applies no SASLprep)."""
    mech = mechanism(mech)
    _check_iterations(mech, iterations)
    if not isinstance(password, str):
        raise ValueError(f"password must be text, not {type(password).__name__}")
    salt = _check_bytes("salt", salt)
    return hashlib.pbkdf2_hmac(mech.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(mech, salted, salt, iterations):
    """The credential for a salted password (what AlterUserScramCredentials sends)."""
    mech = mechanism(mech)
    _check_iterations(mech, iterations)
    salted = _check_bytes("salted password", salted)
    salt = _check_bytes("salt", salt)
    client_key = mech.hmac(salted, b"Client Key")
    return ScramCredential(salt, mech.digest(client_key), mech.hmac(salted, b"Server Key"),
                           iterations)


def make_credential(mech, password, salt, iterations=DEFAULT_ITERATIONS):
    """The credential of `password` under `salt` and `iterations`."""
    mech = mechanism(mech)
    return credential_from_salted_password(
        mech, salted_password(mech, password, salt, iterations), salt, iterations)


# ------------------------------------------------------------------------------ messages

_PRINTABLE = re.compile(r"^[\x21-\x2b\x2d-\x7e]+$")  # RFC 5802 `printable`: no ','
_EXTENSION = re.compile(r"^([A-Za-z][A-Za-z0-9]*)=([^,]*)$")


def _fail(message):
    raise SaslAuthenticationError(message)


def _b64decode(text, what):
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        _fail(f"invalid SCRAM message: {what} is not base64")


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def _decode_name(text):
    """A SASLname's text: '=2C' is ',', '=3D' is '='; any other '=' is an error."""
    if not text:
        _fail("invalid SCRAM message: empty user name")
    if "," in text:
        _fail("invalid SCRAM message: ',' in a user name must be sent as =2C")
    parts = text.split("=")
    out = [parts[0]]
    for part in parts[1:]:
        if part[:2] == "2C":
            out.append("," + part[2:])
        elif part[:2] == "3D":
            out.append("=" + part[2:])
        else:
            _fail("invalid SCRAM message: '=' in a user name must be sent as =3D")
    return "".join(out)


def _encode_name(name):
    return name.replace("=", "=3D").replace(",", "=2C")


def _text(data, what):
    if not isinstance(data, (bytes, bytearray)):
        _fail(f"invalid SCRAM {what}: not bytes")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        _fail(f"invalid SCRAM {what}: not UTF-8")


def _attributes(parts, what):
    """[(letter, value)] of `x=value` parts."""
    out = []
    for part in parts:
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            _fail(f"invalid SCRAM {what}: {part[:40]!r} is not an attribute")
        out.append((part[0], part[2:]))
    return out


def _nonce_source(nonce):
    """A callable returning printable nonce text, from `nonce` (a callable returning bytes
    or text, or a `random.Random`)."""
    if hasattr(nonce, "getrandbits"):
        rng = nonce
        return lambda: base64.urlsafe_b64encode(
            rng.getrandbits(192).to_bytes(24, "big")).decode("ascii")
    if not callable(nonce):
        raise ValueError(f"nonce must be a callable or a random.Random, not "
                         f"{type(nonce).__name__}")

    def make():
        value = nonce()
        if isinstance(value, (bytes, bytearray)):
            if len(value) < 8:
                raise ValueError("a SCRAM nonce needs at least 8 random bytes")
            return base64.urlsafe_b64encode(bytes(value)).decode("ascii").rstrip("=")
        if isinstance(value, str) and _PRINTABLE.match(value):
            return value
        raise ValueError(f"the nonce source gave {value!r:.40}, not bytes or printable text "
                         "without ','")
    return make


class ClientFirst(NamedTuple):
    gs2_header: str
    authzid: str
    username: str
    nonce: str
    extensions: dict
    bare: str


def parse_client_first(data):
    """The parts of a client-first message; SaslAuthenticationError when malformed."""
    text = _text(data, "client first message")
    parts = text.split(",")
    if len(parts) < 4:
        _fail("invalid SCRAM client first message: too few fields")
    flag, authz = parts[0], parts[1]
    if flag.startswith("p="):
        _fail("SCRAM channel binding is not supported")
    if flag not in ("n", "y"):
        _fail("invalid SCRAM client first message: bad gs2 header")
    if flag == "y":
        _fail("SCRAM channel binding is not supported")
    authzid = ""
    if authz:
        if not authz.startswith("a="):
            _fail("invalid SCRAM client first message: bad authzid")
        authzid = _decode_name(authz[2:])
    rest = parts[2:]
    if rest[0].startswith("m="):
        _fail("SCRAM mandatory extensions are not supported")
    attrs = _attributes(rest[:2], "client first message")
    if attrs[0][0] != "n" or attrs[1][0] != "r":
        _fail("invalid SCRAM client first message: expected n= then r=")
    username = _decode_name(attrs[0][1])
    nonce = attrs[1][1]
    if not _PRINTABLE.match(nonce):
        _fail("invalid SCRAM client first message: bad nonce")
    extensions = {}
    for part in rest[2:]:
        match = _EXTENSION.match(part)
        if not match:
            _fail("invalid SCRAM client first message: bad extension")
        extensions[match.group(1)] = match.group(2)
    return ClientFirst(f"{flag},{authz},", authzid, username, nonce, extensions,
                       ",".join(rest))


class _Exchange:
    """State shared by both sides: fails once, then refuses every call."""

    def __init__(self, mech):
        self.mechanism = mechanism(mech)
        self.failed = False
        self.complete = False

    def _guard(self, step):
        if self.failed:
            _fail(f"the {self.mechanism.name} exchange already failed")
        if self.complete:
            _fail(f"the {self.mechanism.name} exchange is already complete")
        self._expect(step)

    def _expect(self, step):
        if self._state != step:
            _fail(f"{self.mechanism.name}: a {step.replace('_', ' ')} message was not "
                  f"expected now")

    def _run(self, step, function, *args):
        self._guard(step)
        try:
            return function(*args)
        except SaslAuthenticationError:
            self.failed = True
            raise
        except (ValueError, TypeError, UnicodeError, binascii.Error) as exc:
            self.failed = True
            raise SaslAuthenticationError(f"invalid {self.mechanism.name} message: "
                                          f"{exc}") from None


class ScramServer(_Exchange):
    """The server side of one SCRAM exchange. `lookup(username)` returns the user's
    `ScramCredential` for this mechanism or None; `nonce` gives the server's nonces.
    `fake_salt_key` (bytes, one secret per process) keeps the fake salt of an unknown user
    the same across connections; without it the fake salt differs each time.

    `evaluate(client_bytes) -> server_bytes` runs one step; after the second the exchange is
    `complete` and `username` is the authenticated user."""

    def __init__(self, mech, lookup, nonce, *, fake_salt_key=None):
        super().__init__(mech)
        if not callable(lookup):
            raise ValueError("lookup must be a callable: username -> ScramCredential or None")
        self._lookup = lookup
        self._nonce = _nonce_source(nonce)
        self._fake_key = fake_salt_key
        self._state = "client_first"
        self.username = None
        self._user = None
        self._credential = None
        self._real = False
        self._first = None
        self._server_first = None
        self._full_nonce = None

    def evaluate(self, data):
        if self._state == "client_first":
            return self._run("client_first", self._on_first, data)
        return self._run("client_final", self._on_final, data)

    def _fake_credential(self, username):
        key = self._fake_key if self._fake_key else self._nonce().encode("ascii")
        salt = hmac.new(key, username.encode("utf-8"), "sha256").digest()[:16]
        keys = self.mechanism.hmac(key, b"fake:" + salt)
        return ScramCredential(salt, self.mechanism.digest(keys), keys, DEFAULT_ITERATIONS)

    def _on_first(self, data):
        first = parse_client_first(data)
        if first.authzid and first.authzid != first.username:
            _fail("SCRAM authorization id differs from the user name")
        if first.extensions.get("tokenauth", "").lower() == "true":
            _fail("SCRAM delegation token authentication (tokenauth) is not supported")
        credential = self._lookup(first.username)
        if credential is not None and not isinstance(credential, ScramCredential):
            raise TypeError("lookup must return a ScramCredential or None")
        self._real = credential is not None
        if credential is None:
            credential = self._fake_credential(first.username)
        self._credential = credential
        self._first = first
        self._user = first.username
        self._full_nonce = first.nonce + self._nonce()
        self._server_first = (f"r={self._full_nonce},s={_b64(credential.salt)},"
                              f"i={credential.iterations}")
        self._state = "client_final"
        return self._server_first.encode("ascii")

    def _on_final(self, data):
        text = _text(data, "client final message")
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            _fail("invalid SCRAM client final message: no proof")
        attrs = _attributes(without_proof.split(","), "client final message")
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            _fail("invalid SCRAM client final message: expected c= then r=")
        binding = _b64decode(attrs[0][1], "channel binding")
        if binding != self._first.gs2_header.encode("utf-8"):
            _fail("invalid SCRAM client final message: channel binding differs from the "
                  "gs2 header")
        if not hmac.compare_digest(attrs[1][1].encode("utf-8"),
                                   self._full_nonce.encode("utf-8")):
            _fail("invalid SCRAM client final message: nonce mismatch")
        proof = _b64decode(proof_part, "proof")
        mech = self.mechanism
        credential = self._credential
        auth_message = ",".join((self._first.bare, self._server_first,
                                 without_proof)).encode("utf-8")
        signature = mech.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            _fail(failure_message(mech))
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        good = hmac.compare_digest(mech.digest(client_key), credential.stored_key)
        if not (good and self._real):
            _fail(failure_message(mech))
        self.complete = True
        self.username = self._user
        self._state = "done"
        return ("v=" + _b64(mech.hmac(credential.server_key, auth_message))).encode("ascii")


class ScramClient(_Exchange):
    """The client side of one SCRAM exchange: `first()`, then `final(server_first)`, then
    `verify(server_final)` (raises unless the server proved it knows the credential)."""

    def __init__(self, mech, username, password, nonce):
        super().__init__(mech)
        if not isinstance(username, str) or not username:
            raise ValueError("username must be non-empty text")
        if not isinstance(password, str):
            raise ValueError("password must be text")
        self.username = username
        self._password = password
        self._nonce = _nonce_source(nonce)
        self._state = "first"
        self._bare = None
        self._server_signature = None

    def first(self):
        def make():
            self._client_nonce = self._nonce()
            self._bare = f"n={_encode_name(self.username)},r={self._client_nonce}"
            self._state = "server_first"
            return ("n,," + self._bare).encode("utf-8")
        return self._run("first", make)

    def final(self, server_first):
        return self._run("server_first", self._on_server_first, server_first)

    def verify(self, server_final):
        return self._run("server_final", self._on_server_final, server_final)

    def _on_server_first(self, data):
        text = _text(data, "server first message")
        if text.startswith("e="):
            _fail(f"{self.mechanism.name} server refused: {text[2:200]}")
        parts = text.split(",")
        if parts and parts[0].startswith("m="):
            _fail("SCRAM mandatory extensions are not supported")
        attrs = _attributes(parts, "server first message")
        if len(attrs) < 3 or [a for a, _ in attrs[:3]] != ["r", "s", "i"]:
            _fail("invalid SCRAM server first message: expected r=, s=, i=")
        nonce, salt_text, iterations_text = (v for _, v in attrs[:3])
        if (not nonce.startswith(self._client_nonce) or len(nonce) <= len(self._client_nonce)
                or not _PRINTABLE.match(nonce)):
            _fail("invalid SCRAM server first message: the nonce does not extend ours")
        salt = _b64decode(salt_text, "salt")
        if not salt:
            _fail("invalid SCRAM server first message: empty salt")
        if not re.fullmatch(r"[0-9]{1,9}", iterations_text):
            _fail("invalid SCRAM server first message: bad iteration count")
        iterations = int(iterations_text)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            _fail(f"{self.mechanism.name} server asks for {iterations} iterations, outside "
                  f"[{MIN_ITERATIONS}, {MAX_ITERATIONS}]: refused")
        mech = self.mechanism
        salted = salted_password(mech, self._password, salt, iterations)
        client_key = mech.hmac(salted, b"Client Key")
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        auth_message = ",".join((self._bare, text, without_proof)).encode("utf-8")
        signature = mech.hmac(mech.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)
        self._state = "server_final"
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def _on_server_final(self, data):
        text = _text(data, "server final message")
        if text.startswith("e="):
            _fail(f"{self.mechanism.name} server refused: {text[2:200]}")
        if not text.startswith("v="):
            _fail("invalid SCRAM server final message: expected v=")
        signature = _b64decode(text[2:].split(",", 1)[0], "server signature")
        if not hmac.compare_digest(signature, self._server_signature):
            _fail(f"{self.mechanism.name}: the server's signature is wrong; it does not know "
                  "the credential")
        self.complete = True
        self._state = "done"
