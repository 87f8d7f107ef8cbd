"""TLS listeners and client connections on 127.0.0.1: the handshake, client certificates and
the principal they give, refusals (an untrusted server, a missing client certificate), and
hostile handshakes (garbage, a truncated hello, a client that stalls) that end their own
connection only."""

import asyncio
import socket

import pytest
import trustme

from kraftcore import limits
from kraftcore.errors import ConfigError, ConnectError, ConnectionClosedError
from kraftcore.net import Connection, Listener, ListenerSecurity
from kraftcore.net.tls import (PrincipalMapper, TlsSettings, certificate_principal,
                               client_context, distinguished_name, server_context)
from kraftcore.security.principal import ANONYMOUS

from .helpers import HOST, Seen, run, vote


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate for alice, as PEM
    files; and a second CA nobody trusts."""
    base = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    files = {}

    def write(name, blob):
        path = base / name
        blob.write_to_path(str(path))
        files[name] = str(path)

    write("ca.pem", ca.cert_pem)
    write("other-ca.pem", other.cert_pem)
    write("server.pem", ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem)
    write("alice.pem", ca.issue_cert("alice.example", common_name="alice",
                                     organization_name="Example",
                                     organization_unit_name="eng")
          .private_key_and_cert_chain_pem)
    write("mallory.pem", other.issue_cert("mallory.example", common_name="mallory")
          .private_key_and_cert_chain_pem)
    return files


def _listener_security(pki, client_auth="required", rules="DEFAULT"):
    settings = TlsSettings(keystore_location=pki["server.pem"], truststore_location=pki["ca.pem"],
                           client_auth=client_auth, principal_mapping_rules=rules)
    return ListenerSecurity("SSL", ssl_context=server_context(settings),
                            principal_mapper=PrincipalMapper(rules))


def _client(pki, keystore=None, trust="ca.pem"):
    return client_context(TlsSettings(keystore_location=keystore and pki[keystore],
                                      truststore_location=pki[trust]))


def test_a_client_certificate_names_the_principal(pki):
    async def main():
        seen = Seen()
        listener = await Listener.start(HOST, 0, seen, security=_listener_security(pki),
                                        listener_name="SSL")
        try:
            conn = await Connection.open(HOST, listener.port,
                                         ssl_context=_client(pki, "alice.pem"))
            response = await conn.send(vote(7), version=2)
            await conn.close()
        finally:
            await listener.close()
        assert response.topics[0].partitions[0].leader_epoch == 7
        (peer,) = seen.peers
        assert peer[0] == HOST and peer.listener == "SSL"
        name = peer.principal.name
        assert peer.principal.type == "User" and name.startswith("CN=alice,OU=eng,O=Example")
    run(main)


def test_mapping_rules_shorten_the_certificate_name(pki):
    async def main():
        seen = Seen()
        rules = "RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/U,DEFAULT"
        listener = await Listener.start(HOST, 0, seen,
                                        security=_listener_security(pki, rules=rules))
        try:
            conn = await Connection.open(HOST, listener.port,
                                         ssl_context=_client(pki, "alice.pem"))
            await conn.send(vote(1), version=2)
            await conn.close()
        finally:
            await listener.close()
        assert str(seen.peers[0].principal) == "User:ALICE@ENG"
    run(main)


def test_without_a_client_certificate_the_principal_is_anonymous(pki):
    async def main():
        seen = Seen()
        listener = await Listener.start(HOST, 0, seen,
                                        security=_listener_security(pki, "requested"))
        try:
            conn = await Connection.open(HOST, listener.port, ssl_context=_client(pki))
            await conn.send(vote(1), version=2)
            await conn.close()
        finally:
            await listener.close()
        assert seen.peers[0].principal == ANONYMOUS
    run(main)


def test_refusals_end_only_their_own_connection(pki):
    async def main():
        seen = Seen()
        listener = await Listener.start(HOST, 0, seen, security=_listener_security(pki))
        try:
            # no client certificate where one is required (under TLS 1.3 the client hears
            # of the refusal once its handshake is done: its first request fails)
            with pytest.raises((ConnectError, ConnectionClosedError)):
                conn = await Connection.open(HOST, listener.port, ssl_context=_client(pki))
                await conn.send(vote(1), version=2)
            # a certificate from a CA the listener does not trust
            with pytest.raises((ConnectError, ConnectionClosedError)):
                conn = await Connection.open(HOST, listener.port,
                                             ssl_context=_client(pki, "mallory.pem"))
                await conn.send(vote(1), version=2)
            # a server the client does not trust
            with pytest.raises(ConnectError, match="TLS handshake"):
                await Connection.open(HOST, listener.port,
                                      ssl_context=_client(pki, "alice.pem", "other-ca.pem"))
            # plaintext on a TLS port
            with pytest.raises(ConnectionClosedError):
                conn = await Connection.open(HOST, listener.port, negotiate_versions=True,
                                             connect_timeout_ms=2000)
            conn = await Connection.open(HOST, listener.port,
                                         ssl_context=_client(pki, "alice.pem"))
            assert (await conn.send(vote(3), version=2)).topics[0].partitions[0].leader_epoch == 3
            await conn.close()
        finally:
            await listener.close()
        assert len(seen.peers) == 1
    run(main)


def _raw(port):
    sock = socket.create_connection((HOST, port))
    sock.settimeout(30)
    return sock


def _closed(sock):
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    finally:
        sock.close()


def test_hostile_handshakes_are_closed_and_others_go_on(pki, monkeypatch):
    monkeypatch.setattr(limits, "NET_TLS_HANDSHAKE_MS_MAX", 300)
    hello = bytes.fromhex("16030100c8010000c40303") + bytes(32)  # a ClientHello's start

    async def main():
        seen = Seen()
        listener = await Listener.start(HOST, 0, seen, security=_listener_security(pki))
        loop = asyncio.get_running_loop()
        try:
            garbage = _raw(listener.port)
            garbage.sendall(b"\x00\x00\x00\x10" + b"not a tls record" * 64)
            truncated = _raw(listener.port)
            truncated.sendall(hello)  # and nothing more: the handshake times out
            stalled = _raw(listener.port)  # sends nothing at all
            conn = await Connection.open(HOST, listener.port,
                                         ssl_context=_client(pki, "alice.pem"))
            assert (await conn.send(vote(5), version=2)).topics[0].partitions[0].leader_epoch == 5
            for sock in (garbage, truncated, stalled):
                assert await loop.run_in_executor(None, _closed, sock)
            assert (await conn.send(vote(6), version=2)).topics[0].partitions[0].leader_epoch == 6
            await conn.close()
        finally:
            await listener.close()
    run(main)


def test_distinguished_names_are_written_as_java_writes_them():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Ex, Inc"),),
                        (("commonName", "#bob "),))}
    assert distinguished_name(cert) == "CN=\\#bob\\ ,O=Ex\\, Inc,C=US"
    assert certificate_principal(None, PrincipalMapper("DEFAULT")) == ANONYMOUS


def test_mapping_rules_are_checked():
    mapper = PrincipalMapper("RULE:^CN=([^,]*),.*$/$1/L, RULE:^OU=a\\/b$/slash/")
    assert mapper.name("CN=Alice,O=x") == "alice"
    assert mapper.name("OU=a/b") == "slash"
    assert mapper.name("O=nobody") is None  # no rule matches: refused
    with pytest.raises(ValueError, match="no rule"):
        certificate_principal({"subject": ((("organizationName", "x"),),)}, mapper)
    for bad in ("RULE:abc", "NOPE", "RULE:(/x/", ""):
        with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
            PrincipalMapper(bad)


def test_settings_are_checked(pki, tmp_path):
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        TlsSettings(client_auth="always")
    with pytest.raises(ConfigError, match="ssl.enabled.protocols"):
        TlsSettings(enabled_protocols=("SSLv3",))
    with pytest.raises(ConfigError, match="ssl.keystore.location: missing"):
        server_context(TlsSettings())
    with pytest.raises(ConfigError, match="needs ssl.truststore"):
        server_context(TlsSettings(keystore_location=pki["server.pem"], client_auth="required"))
    bad = tmp_path / "bad.pem"
    bad.write_text("not a pem")
    with pytest.raises(ConfigError, match="cannot load the key"):
        server_context(TlsSettings(keystore_location=str(bad)))
    with pytest.raises(ConfigError, match="truststore"):
        client_context(TlsSettings(truststore_location=str(bad)))
