"""SASL on a real listener and client connection (127.0.0.1): PLAIN and SCRAM over
SASL_PLAINTEXT, the principal handlers see, and the refusals that close the connection (a
wrong password, an unknown mechanism, a request before authentication, a handshake of the
wrong version, a client that never authenticates, garbage in the exchange)."""

import asyncio
import random

import pytest

from kraftcore import limits
from kraftcore.errors import ConnectError, ConnectionClosedError
from kraftcore.net import Connection, Listener, ListenerSecurity
from kraftcore.protocol.error_codes import ErrorCode
from kraftcore.protocol.messages import (ApiVersionsRequest, SaslAuthenticateRequest,
                                         SaslHandshakeRequest)
from kraftcore.security.plain import PlainServer
from kraftcore.security.sasl import SaslServerSession, client_exchange
from kraftcore.security.scram import ScramServer, make_credential

from .helpers import HOST, RawClient, Seen, run, vote

USERS = {"alice": "alice-secret"}
CREDENTIALS = {("bob", "SCRAM-SHA-512"): make_credential("SCRAM-SHA-512", "bob-secret",
                                                          b"salt-of-bob", 4096)}


def _security(mechanisms=("PLAIN", "SCRAM-SHA-512")):
    rng = random.Random(7)

    def make_server(mechanism):
        if mechanism == "PLAIN":
            return PlainServer(USERS.get)
        return ScramServer(mechanism, lambda user: CREDENTIALS.get((user, mechanism)), rng)
    return ListenerSecurity("SASL_PLAINTEXT",
                            sasl_session=lambda: SaslServerSession(mechanisms, make_server))


def _login(mechanism, user, password):
    return lambda: client_exchange(mechanism, user, password, nonce=random.Random(1))


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "bob", "bob-secret")])
def test_an_authenticated_client_is_its_user(mechanism, user, password):
    async def main():
        seen = Seen()
        listener = await Listener.start(HOST, 0, seen, security=_security(),
                                        listener_name="SASL_PLAINTEXT")
        try:
            conn = await Connection.open(HOST, listener.port,
                                         sasl=_login(mechanism, user, password))
            assert conn.api_versions[17] == (1, 1)  # SaslHandshake v1 only
            response = await conn.send(vote(4), version=2)
            await conn.close()
        finally:
            await listener.close()
        assert response.topics[0].partitions[0].leader_epoch == 4
        assert str(seen.peers[0].principal) == f"User:{user}"
        assert seen.peers[0].listener == "SASL_PLAINTEXT"
    run(main)


@pytest.mark.parametrize("mechanism,user,password,match", [
    ("PLAIN", "alice", "wrong", "error 58"),
    ("SCRAM-SHA-512", "bob", "wrong", "error 58"),
    ("SCRAM-SHA-512", "nobody", "x", "error 58"),  # as a wrong password
    ("SCRAM-SHA-256", "bob", "bob-secret", "refused SASL mechanism"),
])
def test_refused_logins_close_only_their_connection(mechanism, user, password, match):
    async def main():
        seen = Seen()
        listener = await Listener.start(HOST, 0, seen, security=_security())
        try:
            with pytest.raises(ConnectError, match=match):
                await Connection.open(HOST, listener.port,
                                      sasl=_login(mechanism, user, password))
            conn = await Connection.open(HOST, listener.port,
                                         sasl=_login("PLAIN", "alice", "alice-secret"))
            await conn.send(vote(1), version=2)
            await conn.close()
        finally:
            await listener.close()
        assert len(seen.peers) == 1
    run(main)


def test_requests_out_of_order_close_the_connection():
    async def main():
        seen = Seen()
        listener = await Listener.start(HOST, 0, seen, security=_security())
        try:
            # a request before authentication
            conn = await Connection.open(HOST, listener.port)
            with pytest.raises(ConnectionClosedError):
                await conn.send(vote(1), version=2)
            await conn.close()
            # SaslAuthenticate before a handshake: ILLEGAL_SASL_STATE, then closed
            conn = await Connection.open(HOST, listener.port)
            answer = await conn.send(SaslAuthenticateRequest(auth_bytes=b"\0a\0b"), version=1)
            assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
            with pytest.raises(ConnectionClosedError):
                await conn.send(ApiVersionsRequest(), version=0)
            await conn.close()
            # a handshake of v0 (raw tokens) is not served
            conn = await Connection.open(HOST, listener.port)
            with pytest.raises(ConnectionClosedError):
                await conn.send(SaslHandshakeRequest(mechanism="PLAIN"), version=0)
            await conn.close()
            # garbage in the exchange
            conn = await Connection.open(HOST, listener.port)
            shake = await conn.send(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), version=1)
            assert shake.error_code == 0 and "PLAIN" in shake.mechanisms
            answer = await conn.send(SaslAuthenticateRequest(auth_bytes=b"\xff" * 300),
                                     version=1)
            assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            await conn.close()
        finally:
            await listener.close()
        assert seen.peers == []
    run(main)


def test_a_client_that_never_authenticates_is_closed(monkeypatch):
    monkeypatch.setattr(limits, "NET_AUTHENTICATION_MS_MAX", 200)

    async def main():
        listener = await Listener.start(HOST, 0, Seen(), security=_security())
        try:
            raw = await RawClient.open(listener.port)
            assert await asyncio.wait_for(raw.closed_by_peer(), 30)
            await raw.close()
        finally:
            await listener.close()
    run(main)


def test_a_plaintext_listener_serves_no_sasl():
    async def main():
        listener = await Listener.start(HOST, 0, Seen())
        try:
            conn = await Connection.open(HOST, listener.port, negotiate_versions=True)
            assert 17 not in conn.api_versions and 36 not in conn.api_versions
            await conn.close()
            with pytest.raises((ConnectError, ConnectionClosedError)):
                await Connection.open(HOST, listener.port,
                                      sasl=_login("PLAIN", "alice", "alice-secret"))
        finally:
            await listener.close()
    run(main)
