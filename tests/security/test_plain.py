"""SASL/PLAIN: the one message, its rules, and hostile input."""

import pytest

from kraftcore.errors import SaslAuthenticationError
from kraftcore.security.plain import FAILURE_MESSAGE, PlainClient, PlainServer

USERS = {"alice": "alice-secret", "bob": "b\u00f6b"}


def test_client_message_and_success():
    client = PlainClient("alice", "alice-secret")
    assert client.first() == b"\0alice\0alice-secret"
    server = PlainServer(USERS.get)
    assert server.evaluate(client.first()) == b""
    assert server.complete and server.username == "alice"
    assert PlainServer(USERS.get).evaluate("\0bob\0b\u00f6b".encode()) == b""


def test_authzid_equal_to_user_is_accepted():
    server = PlainServer(USERS.get)
    server.evaluate(b"alice\0alice\0alice-secret")
    assert server.username == "alice"


@pytest.mark.parametrize("message", [
    b"\0alice\0wrong", b"\0mallory\0alice-secret", b"\0alice\0alice-secret\0",
])
def test_bad_credentials_fail_alike(message):
    server = PlainServer(USERS.get)
    with pytest.raises(SaslAuthenticationError) as info:
        server.evaluate(message)
    if message.count(b"\0") == 2:
        assert str(info.value) == FAILURE_MESSAGE
    assert server.failed and not server.complete and server.username is None


@pytest.mark.parametrize("message", [
    b"", b"garbage", b"\0alice", b"\0\0pw", b"\0alice\0", b"bob\0alice\0alice-secret",
    b"\xff\0alice\0x", "\0alice\0alice-secret".encode("utf-16"), None, "text",
])
def test_hostile_messages(message):
    server = PlainServer(USERS.get)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(message)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"\0alice\0alice-secret")  # a failed exchange stays failed


def test_one_message_only():
    server = PlainServer(USERS.get)
    server.evaluate(b"\0alice\0alice-secret")
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(b"\0alice\0alice-secret")


def test_bad_arguments():
    with pytest.raises(ValueError):
        PlainServer(None)
    for user, password in (("", "pw"), ("a", ""), ("a\0b", "pw"), ("a", None)):
        with pytest.raises(ValueError):
            PlainClient(user, password)
