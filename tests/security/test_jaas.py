"""Parsing sasl.jaas.config values."""

import pytest

from kraftcore.security.jaas import (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasEntry,
                                     client_credentials, parse_jaas_config, parse_jaas_entries,
                                     plain_users)

PLAIN_TEXT = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret" '
              'user_alice="alice-secret";')


def test_plain_login_module():
    entry = parse_jaas_config(PLAIN_TEXT)
    assert entry == JaasEntry(PLAIN_LOGIN_MODULE, "required", {
        "username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
        "user_alice": "alice-secret"})
    assert plain_users(entry) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert client_credentials(entry.options) == ("admin", "admin-secret")


def test_scram_login_module_and_value_forms():
    text = ('org.apache.kafka.common.security.scram.ScramLoginModule  REQUIRED\n'
            '  username=u /* a comment */ password=\'p\\"q\\\\r\\n\' // more\n'
            '  tokenauth=true  empty="";')
    entry = parse_jaas_config(text)
    assert entry.login_module == SCRAM_LOGIN_MODULE and entry.control_flag == "required"
    assert entry.options == {"username": "u", "password": 'p"q\\r\n', "tokenauth": "true",
                             "empty": ""}


def test_several_entries():
    entries = parse_jaas_entries("a.B optional; c.D sufficient k=v;")
    assert [e.login_module for e in entries] == ["a.B", "c.D"]
    with pytest.raises(ValueError, match="exactly one"):
        parse_jaas_config("a.B optional; c.D sufficient k=v;")
    with pytest.raises(ValueError, match="exactly one"):
        parse_jaas_config("  ")


@pytest.mark.parametrize("text, where", [
    ('a.B required username="x"', "character 25"),  # no ';'
    ('a.B mandatory;', "character 4"),
    ('a.B required username;', "character 21"),
    ('a.B required username=;', "character 22"),
    ('a.B required username="x;', "character 22"),
    ('a.B required =x;', "character 13"),
    ('a.B required u=x u=y;', "character 19"),
    ('"a.B" required;', "character 0"),
    ('a.B required u=x! ;', "character 16"),
    ('a.B required /* open', "character 13"),
    ('a.B', "character 3"),
])
def test_bad_text(text, where):
    with pytest.raises(ValueError, match=where):
        parse_jaas_config(text)


def test_helpers_need_options():
    with pytest.raises(ValueError, match="no password"):
        client_credentials({"username": "u"})
    with pytest.raises(ValueError):
        plain_users("text")
    with pytest.raises(ValueError):
        parse_jaas_config(None)
