"""How an admin client authenticates: Kafka's client properties (the file Kafka's tools take
with `--command-config`) turned into `kraftcore.net.Connection` options.

Keys read: `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the `ssl.*`
keys of `kraftcore.net.tls` (PEM trust store and key store, `ssl.key.password`,
`ssl.endpoint.identification.algorithm`), `sasl.mechanism` (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512) and `sasl.jaas.config` (its `username` and `password`). Other keys are
ignored, as Kafka's tools ignore the ones they do not use.
"""

import secrets

from kraftcore.errors import ConfigError
from kraftcore.log.meta_properties import parse_properties
from kraftcore.net.tls import TlsSettings, client_context
from kraftcore.security import jaas
from kraftcore.security.sasl import SUPPORTED_MECHANISMS, client_exchange

__all__ = ["connection_options", "read_command_config"]

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def read_command_config(path):
    """The properties of the file at `path` (ConfigError when it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"--command-config {path}: {exc}") from exc


def connection_options(properties):
    """The `Connection` options (`ssl_context`, `sasl`) of client `properties`; {} for
    PLAINTEXT. Raises ConfigError naming the key at fault."""
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError(f"security.protocol: {protocol!r} is not one of "
                          f"{', '.join(_PROTOCOLS)}")
    options = {}
    if protocol in ("SSL", "SASL_SSL"):
        def get(key, default=None):
            value = properties.get(key)
            return value.strip() if value is not None and value.strip() else default

        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            if get(key, "PEM").upper() != "PEM":
                raise ConfigError(f"{key}: {get(key)!r}; kraftcore reads PEM files only")
        endpoint = properties.get("ssl.endpoint.identification.algorithm")
        settings = TlsSettings(
            keystore_location=get("ssl.keystore.location"),
            key_password=get("ssl.key.password"),
            truststore_location=get("ssl.truststore.location"),
            truststore_certificates=get("ssl.truststore.certificates"),
            endpoint_identification=endpoint is None or endpoint.strip().lower() == "https")
        options["ssl_context"] = client_context(settings)
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = properties.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"sasl.mechanism: {mechanism} is not supported (supported: "
                              f"{', '.join(SUPPORTED_MECHANISMS)})")
        text = properties.get("sasl.jaas.config")
        if text is None:
            raise ConfigError("sasl.jaas.config: missing; give the login module with "
                              "username=\"...\" password=\"...\"")
        try:
            username, password = jaas.client_credentials(jaas.parse_jaas_config(text))
        except ValueError as exc:
            raise ConfigError(f"sasl.jaas.config: {exc}") from exc

        def sasl():
            return client_exchange(mechanism, username, password,
                                   nonce=lambda: secrets.token_bytes(24))
        options["sasl"] = sasl
    return options
