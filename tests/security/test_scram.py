"""SCRAM-SHA-256/512: RFC test vectors, round trips, and hostile input on both sides."""

import base64
import random

import pytest

from kraftcore.errors import SaslAuthenticationError
from kraftcore.security import scram
from kraftcore.security.scram import (SCRAM_SHA_256, SCRAM_SHA_512, ScramClient,
                                      ScramCredential, ScramMechanism, ScramServer,
                                      credential_from_salted_password, make_credential)

# RFC 7677 section 3
C_NONCE_256 = "rOprNGfwEbeRWgbNEkqO"
S_NONCE_256 = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT_256 = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST_256 = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST_256 = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL_256 = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL_256 = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="

# RFC 5802 section 5 (SCRAM-SHA-1), run through the same code with SHA-1 as the hash
SHA_1 = ScramMechanism("SCRAM-SHA-1", 0, "sha1")
SALT_1 = base64.b64decode("QSXCR+Q6sek8bf92")
CLIENT_FIRST_1 = b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
SERVER_FIRST_1 = b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096"
CLIENT_FINAL_1 = (b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,"
                  b"p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
SERVER_FINAL_1 = b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="


def fixed(text):
    return lambda: text


def lookup_for(mech, users, salt=b"0123456789abcdef", iterations=4096):
    creds = {u: make_credential(mech, p, salt, iterations) for u, p in users.items()}
    return creds.get


@pytest.mark.parametrize("mech, c_nonce, s_nonce, salt, messages", [
    (SCRAM_SHA_256, C_NONCE_256, S_NONCE_256, SALT_256,
     (CLIENT_FIRST_256, SERVER_FIRST_256, CLIENT_FINAL_256, SERVER_FINAL_256)),
    (SHA_1, "fyko+d2lbbFgONRv9qkxdawL", "3rfcNHYJY1ZVvWVs7j", SALT_1,
     (CLIENT_FIRST_1, SERVER_FIRST_1, CLIENT_FINAL_1, SERVER_FINAL_1)),
])
def test_rfc_examples(mech, c_nonce, s_nonce, salt, messages):
    client_first, server_first, client_final, server_final = messages
    client = ScramClient(mech, "user", "pencil", fixed(c_nonce))
    assert client.first() == client_first
    assert client.final(server_first) == client_final
    client.verify(server_final)
    assert client.complete

    credential = make_credential(mech, "pencil", salt, 4096)
    server = ScramServer(mech, {"user": credential}.get, fixed(s_nonce))
    assert server.evaluate(client_first) == server_first
    assert not server.complete and server.username is None
    assert server.evaluate(client_final) == server_final
    assert server.complete and server.username == "user"


def test_mechanism_table():
    assert (SCRAM_SHA_256.code, SCRAM_SHA_512.code) == (1, 2)
    assert scram.mechanism(2) is SCRAM_SHA_512
    assert scram.mechanism("SCRAM-SHA-256") is SCRAM_SHA_256
    assert (scram.MIN_ITERATIONS, scram.MAX_ITERATIONS, scram.DEFAULT_ITERATIONS) == (
        4096, 16384, 4096)
    for bad in ("SCRAM-SHA-1", 3, True, None):
        with pytest.raises(ValueError):
            scram.mechanism(bad)


def test_credentials():
    salt = b"salt-salt-salt"
    cred = make_credential(SCRAM_SHA_512, "secret", salt, 8192)
    assert isinstance(cred, ScramCredential)
    assert cred.iterations == 8192 and cred.salt == salt
    assert len(cred.stored_key) == len(cred.server_key) == 64
    salted = scram.salted_password(SCRAM_SHA_512, "secret", salt, 8192)
    assert credential_from_salted_password(SCRAM_SHA_512, salted, salt, 8192) == cred
    assert len(make_credential(SCRAM_SHA_256, "secret", salt).stored_key) == 32
    for iterations in (4095, 16385, "4096"):
        with pytest.raises(ValueError):
            make_credential(SCRAM_SHA_256, "secret", salt, iterations)
    with pytest.raises(ValueError):
        make_credential(SCRAM_SHA_256, "secret", b"", 4096)


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
@pytest.mark.parametrize("user", ["alice", "a,b=c", "üser"])
def test_round_trip(mech, user):
    rng = random.Random(7)
    server = ScramServer(mech, lookup_for(mech, {user: "pw"}), rng)
    client = ScramClient(mech, user, "pw", rng)
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete and server.username == user
    assert client.complete


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_bad_password_and_unknown_user_fail_alike(mech):
    rng = random.Random(1)
    lookup = lookup_for(mech, {"alice": "right"})
    outcomes = []
    for user, password in (("alice", "wrong"), ("mallory", "right")):
        server = ScramServer(mech, lookup, rng, fake_salt_key=b"k" * 16)
        client = ScramClient(mech, user, password, rng)
        server_first = server.evaluate(client.first())
        assert b",s=" in server_first and server_first.endswith(b",i=4096")
        with pytest.raises(SaslAuthenticationError) as info:
            server.evaluate(client.final(server_first))
        outcomes.append(str(info.value))
        assert server.failed and not server.complete and server.username is None
        with pytest.raises(SaslAuthenticationError):
            server.evaluate(b"anything")
    assert outcomes[0] == outcomes[1] == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mech.name}")


def test_unknown_user_fake_salt_is_stable_with_a_key():
    salts = set()
    for seed in range(2):
        server = ScramServer(SCRAM_SHA_256, {}.get, random.Random(seed), fake_salt_key=b"k")
        first = server.evaluate(b"n,,n=ghost,r=abcdefgh").decode()
        salts.add(first.split(",")[1])
    assert len(salts) == 1


def server_after_first(mech=SCRAM_SHA_256, user="alice"):
    server = ScramServer(mech, lookup_for(mech, {"alice": "pw"}), fixed("SNONCE"))
    server.evaluate(f"n,,n={user},r=CNONCE".encode())
    return server


@pytest.mark.parametrize("first", [
    b"", b"garbage", b"\xff\xfe", b"n,,", b"n,,n=alice", b"p=tls-unique,,n=alice,r=abc",
    b"y,,n=alice,r=abc", b"x,,n=alice,r=abc", b"n,a=bob,n=alice,r=abc", b"n,,n=,r=abc",
    b"n,,n=al=ice,r=abc", b"n,,n=alice,r=a\x01b", b"n,,r=abc,n=alice",
    b"n,,m=ext,n=alice,r=abc", b"n,,n=alice,r=abc,tokenauth=true", b"n,,n=alice,r=abc,=x",
    b"n,b=x,n=alice,r=abc", "n,,n=alice,r=abc".encode("utf-16"),
])
def test_hostile_client_first(first):
    server = ScramServer(SCRAM_SHA_256, lookup_for(SCRAM_SHA_256, {"alice": "pw"}),
                         random.Random(0))
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(first)
    assert server.failed


def test_authzid_equal_to_user_and_escaped_names():
    server = ScramServer(SCRAM_SHA_256, lookup_for(SCRAM_SHA_256, {"a,b=c": "pw"}),
                         random.Random(0))
    assert server.evaluate(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=abcdefgh").startswith(b"r=abcdefgh")
    server = ScramServer(SCRAM_SHA_256, lookup_for(SCRAM_SHA_256, {"alice": "pw"}),
                         random.Random(0))
    server.evaluate(b"n,,n=alice,r=abcdefgh,someext=1")  # unknown extensions are ignored


@pytest.mark.parametrize("final", [
    b"", b"garbage", b"c=biws,r=CNONCESNONCE", b"c=biws,r=WRONGSNONCE,p=AAAA",
    b"c=biws,r=CNONCE,p=AAAA", b"c=!!!,r=CNONCESNONCE,p=AAAA",
    b"c=eSws,r=CNONCESNONCE,p=AAAA", b"c=biws,r=CNONCESNONCE,p=not*base64",
    b"c=biws,r=CNONCESNONCE,p=" + base64.b64encode(b"x" * 32),
    b"r=CNONCESNONCE,c=biws,p=AAAA", b"\xff,p=AAAA",
])
def test_hostile_client_final(final):
    server = server_after_first()
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(final)
    assert server.failed and not server.complete


def client_after_first(mech=SCRAM_SHA_256):
    client = ScramClient(mech, "alice", "pw", fixed("CNONCE"))
    client.first()
    return client


@pytest.mark.parametrize("server_first", [
    b"", b"garbage", b"\xff", b"e=other-error", b"r=CNONCE,s=c2FsdA==,i=4096",
    b"r=XNONCEsrv,s=c2FsdA==,i=4096", b"r=CNONCEsrv,s=***,i=4096",
    b"r=CNONCEsrv,s=,i=4096", b"r=CNONCEsrv,s=c2FsdA==,i=16385",
    b"r=CNONCEsrv,s=c2FsdA==,i=100000000", b"r=CNONCEsrv,s=c2FsdA==,i=99999999999999999999",
    b"r=CNONCEsrv,s=c2FsdA==,i=1", b"r=CNONCEsrv,s=c2FsdA==,i=-4096",
    b"r=CNONCEsrv,s=c2FsdA==,i=4096x", b"s=c2FsdA==,r=CNONCEsrv,i=4096",
    b"m=x,r=CNONCEsrv,s=c2FsdA==,i=4096",
])
def test_hostile_server_first(server_first):
    client = client_after_first()
    with pytest.raises(SaslAuthenticationError):
        client.final(server_first)
    assert client.failed


@pytest.mark.parametrize("server_final", [
    b"", b"garbage", b"e=invalid-proof", b"v=***", b"v=" + base64.b64encode(b"x" * 32),
])
def test_hostile_server_final(server_final):
    client = client_after_first()
    client.final(b"r=CNONCEsrv,s=c2FsdA==,i=4096")
    with pytest.raises(SaslAuthenticationError):
        client.verify(server_final)
    assert client.failed and not client.complete


def test_out_of_order_calls():
    client = ScramClient(SCRAM_SHA_256, "alice", "pw", fixed("CNONCE"))
    with pytest.raises(SaslAuthenticationError):
        client.verify(b"v=AAAA")
    rng = random.Random(3)
    server = ScramServer(SCRAM_SHA_256, lookup_for(SCRAM_SHA_256, {"alice": "pw"}), rng)
    client = ScramClient(SCRAM_SHA_256, "alice", "pw", rng)
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"n,,n=alice,r=again")
    with pytest.raises(SaslAuthenticationError):
        client.first()


def test_random_garbage_only_raises_sasl_errors():
    rng = random.Random(11)
    for _ in range(300):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
        server = ScramServer(SCRAM_SHA_512, lookup_for(SCRAM_SHA_512, {"alice": "pw"}), rng)
        for message in (b"n,,n=alice,r=" + data, data):
            try:
                server.evaluate(message)
            except SaslAuthenticationError:
                break
        client = client_after_first()
        with pytest.raises(SaslAuthenticationError):
            client.final(b"r=CNONCE" + data)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError):
        ScramServer(SCRAM_SHA_256, None, random.Random())
    with pytest.raises(ValueError):
        ScramServer(SCRAM_SHA_256, {}.get, 42)
    with pytest.raises(ValueError):
        ScramClient(SCRAM_SHA_256, "", "pw", random.Random())
    with pytest.raises(ValueError):
        ScramClient("MD5", "alice", "pw", random.Random())
