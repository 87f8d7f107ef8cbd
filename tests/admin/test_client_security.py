"""Kafka client properties (`--command-config`) turned into connection options: TLS and
SASL as asked, and a clear error naming the key for settings that cannot work."""

import ssl

import pytest
import trustme

from kraftcore.admin.client_security import connection_options, read_command_config
from kraftcore.errors import ConfigError

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="alice-secret";')


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return str(path)


def test_plaintext_needs_nothing():
    assert connection_options({}) == {}
    assert connection_options({"security.protocol": "plaintext"}) == {}


def test_sasl_ssl_gives_a_context_and_a_login(ca_file):
    options = connection_options({
        "security.protocol": "SASL_SSL", "ssl.truststore.location": ca_file,
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS})
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].check_hostname
    exchange = options["sasl"]()
    assert exchange.mechanism == "SCRAM-SHA-512"
    assert exchange.first().startswith(b"n,,n=alice,r=")
    no_check = connection_options({"security.protocol": "SSL",
                                   "ssl.truststore.location": ca_file,
                                   "ssl.endpoint.identification.algorithm": ""})
    assert not no_check["ssl_context"].check_hostname


@pytest.mark.parametrize("properties,key", [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "ssl.truststore.type"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": JAAS}, "sasl.mechanism"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "nonsense"}, "sasl.jaas.config"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent.pem"},
     "ssl.truststore"),
])
def test_settings_that_cannot_work_are_refused(properties, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        connection_options(properties)


def test_the_file_must_be_readable(tmp_path):
    with pytest.raises(ConfigError, match="--command-config"):
        read_command_config(str(tmp_path / "missing.properties"))
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SSL\n")
    assert read_command_config(str(path)) == {"security.protocol": "SSL"}
