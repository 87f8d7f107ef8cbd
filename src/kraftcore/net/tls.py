"""TLS for listeners and client connections: `ssl.SSLContext`s built from Kafka's `ssl.*`
settings, and the principal of a client certificate.

`TlsSettings` holds what Kafka's SslConfigs name, for PEM files only (`ssl.keystore.type`
and `ssl.truststore.type` PEM, which Kafka supports beside JKS and PKCS12):

* `ssl.keystore.location`: a PEM file with the private key and the certificate chain;
  `ssl.key.password` decrypts an encrypted key;
* `ssl.truststore.location` (a PEM file of CA certificates) or `ssl.truststore.certificates`
  (the certificates themselves): whom to trust. A client without either trusts the system's
  CAs; a server without either cannot check client certificates;
* `ssl.client.auth` (`none`, `requested`, `required`) on a server;
* `ssl.endpoint.identification.algorithm` (`https`: a client checks that the server's
  certificate names the host it connects to; empty: it does not);
* `ssl.enabled.protocols` (TLSv1.2, TLSv1.3);
* `ssl.principal.mapping.rules` (Kafka's `RULE:pattern/replacement/[LU]` list and
  `DEFAULT`), applied to the client certificate's distinguished name.

A client certificate's principal is `User:` and its subject's distinguished name written
as Java's `X500Principal.getName()` writes it (RFC 2253: the most specific name first,
`CN=alice,OU=eng,O=example,C=US`), after the mapping rules. A connection without a
verified certificate is `User:ANONYMOUS`.
"""

import dataclasses
import re
import ssl

from kraftcore.errors import ConfigError
from kraftcore.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal

__all__ = ["TlsSettings", "server_context", "client_context", "PrincipalMapper",
           "certificate_principal", "distinguished_name", "CLIENT_AUTH"]

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
               "required": ssl.CERT_REQUIRED}
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# The short names Java's RFC 2253 output uses for the attributes Python's ssl names.
_SHORT_NAMES = {
    "commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
    "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}
_ESCAPED = frozenset(',+"\\<>;')


@dataclasses.dataclass(frozen=True)
class TlsSettings:
    """One listener's (or one client's) TLS settings; `prefix` names the keys they came
    from in error messages (`listener.name.ssl.` or empty)."""

    keystore_location: str = None
    key_password: str = None
    truststore_location: str = None
    truststore_certificates: str = None
    client_auth: str = "none"
    endpoint_identification: bool = True
    enabled_protocols: tuple = ("TLSv1.2", "TLSv1.3")
    principal_mapping_rules: str = "DEFAULT"
    prefix: str = ""

    def __post_init__(self):
        if self.client_auth not in CLIENT_AUTH:
            raise ConfigError(f"{self.prefix}ssl.client.auth: {self.client_auth!r} is not one "
                              f"of {', '.join(CLIENT_AUTH)}")
        for protocol in self.enabled_protocols:
            if protocol not in _PROTOCOLS:
                raise ConfigError(f"{self.prefix}ssl.enabled.protocols: {protocol!r} is not "
                                  f"supported (supported: {', '.join(_PROTOCOLS)})")
        if not self.enabled_protocols:
            raise ConfigError(f"{self.prefix}ssl.enabled.protocols: empty")
        PrincipalMapper(self.principal_mapping_rules, self.prefix)  # checks the rules

    @property
    def has_truststore(self):
        return bool(self.truststore_location or self.truststore_certificates)


def _context(settings, purpose):
    context = ssl.SSLContext(purpose)
    versions = sorted(_PROTOCOLS[p] for p in settings.enabled_protocols)
    context.minimum_version, context.maximum_version = versions[0], versions[-1]
    prefix = settings.prefix
    if settings.keystore_location:
        try:
            context.load_cert_chain(settings.keystore_location, password=settings.key_password)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"{prefix}ssl.keystore.location: cannot load the key and "
                              f"certificate chain from {settings.keystore_location}: {exc}; "
                              "it must be one PEM file holding the private key and the "
                              "certificates (with ssl.key.password if the key is "
                              "encrypted)") from exc
    try:
        if settings.truststore_location:
            context.load_verify_locations(cafile=settings.truststore_location)
        if settings.truststore_certificates:
            context.load_verify_locations(cadata=settings.truststore_certificates)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{prefix}ssl.truststore: cannot load the trusted certificates: "
                          f"{exc}; give PEM certificates") from exc
    return context


def server_context(settings):
    """The context of a listener: its key and chain, and client authentication as
    `ssl.client.auth` asks (which then needs a trust store)."""
    if not settings.keystore_location:
        raise ConfigError(f"{settings.prefix}ssl.keystore.location: missing; a TLS listener "
                          "needs its private key and certificate chain in one PEM file")
    context = _context(settings, ssl.PROTOCOL_TLS_SERVER)
    mode = CLIENT_AUTH[settings.client_auth]
    if mode != ssl.CERT_NONE and not settings.has_truststore:
        raise ConfigError(f"{settings.prefix}ssl.client.auth={settings.client_auth} needs "
                          "ssl.truststore.location or ssl.truststore.certificates: the CAs "
                          "that sign the client certificates")
    context.verify_mode = mode
    return context


def client_context(settings):
    """The context of a client connection: it always checks the server's certificate (with
    the trust store, else the system's CAs), its host name when endpoint identification is
    on, and presents its own key and chain when it has one."""
    context = _context(settings, ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = settings.endpoint_identification
    context.verify_mode = ssl.CERT_REQUIRED
    if not settings.has_truststore:
        context.load_default_certs()
    return context


def _escape(value):
    out = []
    for i, char in enumerate(value):
        if char in _ESCAPED or (char == "#" and i == 0) or (
                char == " " and (i == 0 or i == len(value) - 1)):
            out.append("\\")
        out.append(char)
    return "".join(out)


def distinguished_name(peercert):
    """The subject of `peercert` (a dict from `SSLSocket.getpeercert()`) as RFC 2253 text,
    most specific name first, as Java writes it."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_SHORT_NAMES.get(name, name)}={_escape(value)}"
                             for name, value in rdn))
    return ",".join(rdns)


class PrincipalMapper:
    """Kafka's `ssl.principal.mapping.rules`: a comma-separated list of `DEFAULT` (the name
    as it is) and `RULE:pattern/replacement/` with an optional `L` or `U` (lower or upper
    case) after it. The first rule whose pattern matches the whole name gives the principal
    name (`$1` in the replacement: the pattern's first group); a name no rule matches is
    refused."""

    def __init__(self, text, prefix=""):
        self.rules = []
        where = f"{prefix}ssl.principal.mapping.rules"
        rest = text.strip()
        while rest:
            if rest.startswith("DEFAULT"):
                self.rules.append(None)
                rest = rest[len("DEFAULT"):]
            elif rest.startswith("RULE:"):
                parts, rest = _rule_parts(rest[len("RULE:"):], where)
                pattern, replacement, case = parts
                try:
                    compiled = re.compile(pattern)
                except re.error as exc:
                    raise ConfigError(f"{where}: the pattern {pattern!r} does not compile: "
                                      f"{exc}") from exc
                self.rules.append((compiled, re.sub(r"\$(\d+)", r"\\g<\1>", replacement),
                                   case))
            else:
                raise ConfigError(f"{where}: {rest!r} is neither DEFAULT nor "
                                  "RULE:pattern/replacement/[LU]")
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:].lstrip()
            elif rest:
                raise ConfigError(f"{where}: expected a comma before {rest!r}")
        if not self.rules:
            raise ConfigError(f"{where}: empty; leave it out for DEFAULT")

    def name(self, distinguished):
        """The principal name of `distinguished`, or None when no rule matches it."""
        for rule in self.rules:
            if rule is None:
                return distinguished
            pattern, replacement, case = rule
            match = pattern.fullmatch(distinguished)
            if match is None:
                continue
            name = match.expand(replacement)
            return name.lower() if case == "L" else name.upper() if case == "U" else name
        return None


def _rule_parts(text, where):
    """(pattern, replacement, case) of a rule's text after `RULE:`, and the text after it.
    `/` inside the pattern or the replacement is written `\\/`."""
    parts, current, i = [], [], 0
    while len(parts) < 2:
        if i >= len(text):
            raise ConfigError(f"{where}: a RULE must be RULE:pattern/replacement/ (with an "
                              "optional L or U after it)")
        char = text[i]
        if char == "\\" and text[i + 1:i + 2] == "/":
            current.append("/")
            i += 2
            continue
        if char == "/":
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    case = text[i] if text[i:i + 1] in ("L", "U") else ""
    return (parts[0], parts[1], case), text[i + len(case):]


def certificate_principal(peercert, mapper):
    """The principal of a connection whose verified client certificate is `peercert`
    (None: no certificate, `User:ANONYMOUS`). Raises ValueError when no mapping rule
    matches the certificate's name."""
    if not peercert:
        return ANONYMOUS
    distinguished = distinguished_name(peercert)
    name = mapper.name(distinguished)
    if name is None:
        raise ValueError(f"no rule of ssl.principal.mapping.rules matches the certificate "
                         f"name {distinguished!r}")
    return KafkaPrincipal(USER_TYPE, name)
