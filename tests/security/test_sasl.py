"""SaslHandshake + SaslAuthenticate flows with both sides in-process."""

import random

import pytest

from kraftcore.errors import SaslAuthenticationError
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from kraftcore.security.plain import PlainServer
from kraftcore.security.principal import KafkaPrincipal
from kraftcore.security.sasl import SaslServerSession, client_exchange
from kraftcore.security.scram import ScramServer, make_credential

PASSWORDS = {"alice": "alice-secret", "admin": "admin-secret"}
ENABLED = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def make_server(rng):
    def make(mechanism):
        if mechanism == "PLAIN":
            return PlainServer(PASSWORDS.get)
        creds = {u: make_credential(mechanism, p, b"salty-salt", 4096)
                 for u, p in PASSWORDS.items()}
        return ScramServer(mechanism, creds.get, rng)
    return make


def session(rng=None):
    return SaslServerSession(ENABLED, make_server(rng or random.Random(5)))


def run_flow(mechanism, username, password):
    """Drive a whole exchange; returns (session, last response)."""
    rng = random.Random(9)
    server = session(rng)
    response = server.handshake(1, SaslHandshakeRequest(mechanism=mechanism))
    assert response.error_code == ErrorCode.NONE and response.mechanisms == ENABLED
    client = client_exchange(mechanism, username, password, rng)
    assert client.mechanism == mechanism
    to_send = client.first()
    while True:
        response = server.authenticate(2, SaslAuthenticateRequest(auth_bytes=to_send))
        if response.error_code != ErrorCode.NONE:
            return server, response
        to_send = client.step(response.auth_bytes)
        if to_send is None:
            return server, response


@pytest.mark.parametrize("mechanism", ENABLED)
def test_success(mechanism):
    server, response = run_flow(mechanism, "alice", "alice-secret")
    assert response.error_code == ErrorCode.NONE and response.session_lifetime_ms == 0
    assert server.complete and not server.failed
    assert server.principal == KafkaPrincipal("User", "alice")
    assert server.mechanism == mechanism and server.handshake_version == 1


@pytest.mark.parametrize("mechanism", ENABLED)
@pytest.mark.parametrize("user, password", [("alice", "nope"), ("mallory", "alice-secret")])
def test_bad_credentials(mechanism, user, password):
    server, response = run_flow(mechanism, user, password)
    assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED == 58
    assert response.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}")
    assert server.failed and not server.complete and server.principal is None


def test_unknown_mechanism():
    server = session()
    response = server.handshake(1, SaslHandshakeRequest(mechanism="GSSAPI"))
    assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM == 33
    assert response.mechanisms == ENABLED
    assert server.failed


def test_disabled_mechanism():
    server = SaslServerSession(["SCRAM-SHA-512"], make_server(random.Random()))
    response = server.handshake(1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert response.error_code == 33 and response.mechanisms == ["SCRAM-SHA-512"]


def test_out_of_order():
    server = session()
    response = server.authenticate(2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0x"))
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE == 34
    assert server.failed

    server = session()
    assert server.handshake(1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    again = server.handshake(1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert again.error_code == 34 and server.failed

    server, _ = run_flow("PLAIN", "alice", "alice-secret")
    late = server.authenticate(2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0x"))
    assert late.error_code == 34
    assert server.handshake(1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 34


def test_garbage_auth_bytes():
    for mechanism in ENABLED:
        server = session()
        server.handshake(1, SaslHandshakeRequest(mechanism=mechanism))
        response = server.authenticate(1, SaslAuthenticateRequest(auth_bytes=b"\xff\x00junk"))
        assert response.error_code == 58 and response.error_message and server.failed


def test_client_exchange_rules():
    with pytest.raises(ValueError):
        client_exchange("GSSAPI", "a", "b")
    with pytest.raises(ValueError):
        client_exchange("SCRAM-SHA-256", "a", "b")  # no nonce source
    plain = client_exchange("PLAIN", "alice", "pw")
    with pytest.raises(SaslAuthenticationError):
        plain.step(b"")
    plain.first()
    with pytest.raises(SaslAuthenticationError):
        plain.step(b"challenge")


def test_bad_session_arguments():
    with pytest.raises(ValueError):
        SaslServerSession([], make_server(random.Random()))
    with pytest.raises(ValueError):
        SaslServerSession(["GSSAPI"], make_server(random.Random()))
    with pytest.raises(ValueError):
        SaslServerSession(["PLAIN"], None)
