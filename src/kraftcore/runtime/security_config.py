"""A node's security settings, read from the same `server.properties` keys Kafka reads:
TLS (`ssl.*`), SASL (`sasl.*` and the JAAS text), and authorization (`authorizer.class.name`,
`super.users`, `allow.everyone.if.no.acl.found`).

A listener's setting is `listener.name.<listener name in lower case>.<key>` when given,
else `<key>` (Kafka's rule). The JAAS text of a SASL mechanism on a listener is
`listener.name.<listener>.<mechanism in lower case>.sasl.jaas.config`, else
`sasl.jaas.config`. Key stores and trust stores are PEM files only (`ssl.keystore.type`
and `ssl.truststore.type` PEM; left out they are read as PEM).

`parse_security(properties, protocols)` checks every listener's settings (without reading
any file) and returns a `SecurityConfig`; a problem raises `ConfigError` naming the key.
"""

import dataclasses

from kraftcore.errors import ConfigError
from kraftcore.net.tls import TlsSettings
from kraftcore.security import jaas
from kraftcore.security.principal import parse_principal
from kraftcore.security.sasl import SUPPORTED_MECHANISMS

__all__ = ["SecurityConfig", "ListenerSecurityConfig", "parse_security", "is_security_key",
           "check_client_mechanism",
           "STANDARD_AUTHORIZER", "TLS_PROTOCOLS", "SASL_PROTOCOLS"]

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# Kafka's authorizer of KRaft clusters; kraftcore implements its rules.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_GSSAPI = "GSSAPI"  # Kafka's default mechanism, which kraftcore does not implement
_TOP_KEYS = frozenset({"super.users", "allow.everyone.if.no.acl.found", "authorizer.class.name",
                       "sasl.mechanism.inter.broker.protocol",
                       "sasl.mechanism.controller.protocol"})


def is_security_key(key):
    """Whether `key` is one of the settings this module reads."""
    return (key in _TOP_KEYS or key.startswith(("ssl.", "sasl.", "listener.name.")))


@dataclasses.dataclass(frozen=True)
class ListenerSecurityConfig:
    """One listener's security: its protocol, its TLS settings (TLS protocols), its enabled
    SASL mechanisms and the JAAS options of each ({mechanism: {option: value}})."""

    name: str
    protocol: str
    tls: TlsSettings = None
    sasl_mechanisms: tuple = ()
    jaas: dict = dataclasses.field(default_factory=dict)

    @property
    def uses_tls(self):
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self):
        return self.protocol in SASL_PROTOCOLS

    def plain_users(self):
        """{user: password} of the PLAIN mechanism's `user_<name>` options."""
        return jaas.plain_users(self.jaas.get("PLAIN", {}))

    def client_credentials(self, mechanism):
        """(username, password) this node authenticates with as a client of this
        listener's `mechanism` (the `username` and `password` options of its JAAS text)."""
        try:
            return jaas.client_credentials(self.jaas.get(mechanism, {}))
        except ValueError as exc:
            raise ConfigError(f"listener.name.{self.name.lower()}.{mechanism.lower()}"
                              f".sasl.jaas.config: {exc}; it needs username and password: the "
                              f"credentials this node uses to reach {self.name} "
                              "listeners") from exc


@dataclasses.dataclass(frozen=True)
class SecurityConfig:
    """The node's security settings: each listener's, and the authorizer's."""

    listeners: dict  # name -> ListenerSecurityConfig (every listener and controller listener)
    authorizer_enabled: bool = False
    super_users: tuple = ()  # KafkaPrincipal
    allow_everyone_if_no_acl_found: bool = False
    inter_broker_mechanism: str = _GSSAPI
    controller_mechanism: str = _GSSAPI

    def listener(self, name):
        return self.listeners[name]


def _lookup(properties, listener, key):
    """(key it came from, value) of `key` for `listener`: the listener's own first."""
    own = f"listener.name.{listener.lower()}.{key}"
    if own in properties:
        return own, properties[own].strip()
    if key in properties:
        return key, properties[key].strip()
    return key, None


def _tls(properties, listener):
    def get(key, default=None):
        return _lookup(properties, listener, key)[1] or default

    prefix = f"listener.name.{listener.lower()}."
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        where, value = _lookup(properties, listener, key)
        if value and value.upper() != "PEM":
            raise ConfigError(f"{where}: {value!r}; kraftcore reads PEM files only (set it to "
                              "PEM and give PEM files)")
    for key in ("ssl.keystore.key", "ssl.keystore.certificate.chain"):
        where, value = _lookup(properties, listener, key)
        if value:
            raise ConfigError(f"{where}: keys given inline are not supported; put the key and "
                              "its certificate chain in one PEM file and set "
                              "ssl.keystore.location")
    protocols = tuple(p.strip() for p in get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3")
                      .split(",") if p.strip())
    endpoint = _lookup(properties, listener, "ssl.endpoint.identification.algorithm")[1]
    return TlsSettings(
        keystore_location=get("ssl.keystore.location"),
        key_password=get("ssl.key.password"),
        truststore_location=get("ssl.truststore.location"),
        truststore_certificates=get("ssl.truststore.certificates"),
        client_auth=get("ssl.client.auth", "none").lower(),
        endpoint_identification=(endpoint is None or endpoint.lower() == "https"),
        enabled_protocols=protocols,
        principal_mapping_rules=get("ssl.principal.mapping.rules", "DEFAULT"),
        prefix=prefix if any(k.startswith(prefix + "ssl.") for k in properties) else "")


def _mechanisms(properties, listener):
    where, text = _lookup(properties, listener, "sasl.enabled.mechanisms")
    mechanisms = tuple(m.strip().upper() for m in (text or _GSSAPI).split(",") if m.strip())
    for mechanism in mechanisms:
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"{where}: {mechanism} is not supported by kraftcore (supported: "
                              f"{', '.join(SUPPORTED_MECHANISMS)})"
                              + ("; Kafka enables GSSAPI by default, set this key"
                                 if text is None else ""))
    if not mechanisms:
        raise ConfigError(f"{where}: empty; a SASL listener needs at least one mechanism")
    return mechanisms


def _jaas(properties, listener, mechanism):
    own = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    key = own if own in properties else "sasl.jaas.config"
    text = properties.get(key)
    if text is None:
        return {}
    try:
        return dict(jaas.parse_jaas_config(text).options)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from exc


def _boolean(properties, key, default):
    text = properties.get(key)
    if text is None:
        return default
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key}: {text.strip()!r} must be true or false")
    return value == "true"


def parse_security(properties, protocols):
    """The security settings in `properties` (key -> text) for the listeners of
    `protocols` ({listener name: security protocol})."""
    listeners = {}
    for name, protocol in protocols.items():
        tls = _tls(properties, name) if protocol in TLS_PROTOCOLS else None
        mechanisms, jaas = (), {}
        if protocol in SASL_PROTOCOLS:
            mechanisms = _mechanisms(properties, name)
            jaas = {m: _jaas(properties, name, m) for m in mechanisms}
        listeners[name] = ListenerSecurityConfig(name, protocol, tls, mechanisms, jaas)

    authorizer = properties.get("authorizer.class.name", "").strip()
    if authorizer not in ("", STANDARD_AUTHORIZER):
        raise ConfigError(f"authorizer.class.name: {authorizer!r} is not supported; kraftcore "
                          f"implements {STANDARD_AUTHORIZER} (or leave it empty: no ACLs)")
    super_users = []
    for text in properties.get("super.users", "").split(";"):
        if text.strip():
            try:
                super_users.append(parse_principal(text.strip()))
            except ValueError as exc:
                raise ConfigError(f"super.users: {exc}; separate principals with ';'") from exc
    mechanism_keys = {}
    for key in ("sasl.mechanism.inter.broker.protocol", "sasl.mechanism.controller.protocol"):
        mechanism_keys[key] = properties.get(key, _GSSAPI).strip().upper()
    return SecurityConfig(
        listeners=listeners, authorizer_enabled=bool(authorizer),
        super_users=tuple(super_users),
        allow_everyone_if_no_acl_found=_boolean(properties, "allow.everyone.if.no.acl.found",
                                                False),
        inter_broker_mechanism=mechanism_keys["sasl.mechanism.inter.broker.protocol"],
        controller_mechanism=mechanism_keys["sasl.mechanism.controller.protocol"])


def check_client_mechanism(security, listener, mechanism, key):
    """Raise ConfigError unless this node can authenticate to `listener` (a SASL listener)
    with `mechanism` (the value of `key`)."""
    config = security.listeners[listener]
    if not config.uses_sasl:
        return
    if mechanism not in config.sasl_mechanisms:
        raise ConfigError(f"{key}: {mechanism} is not among the mechanisms listener {listener} "
                          f"enables ({', '.join(config.sasl_mechanisms)})")
    config.client_credentials(mechanism)
