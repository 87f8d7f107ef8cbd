"""Kafka principals: `User:alice`, the type and the name of whoever sent a request.

A connection's principal comes from its listener's security protocol (Kafka's
DefaultKafkaPrincipalBuilder): `User:ANONYMOUS` on PLAINTEXT and on SSL without a client
certificate, `User:<distinguished name of the certificate>` on SSL with one, and
`User:<authenticated name>` on SASL_PLAINTEXT and SASL_SSL.
"""

from typing import NamedTuple

__all__ = ["KafkaPrincipal", "ANONYMOUS", "USER_TYPE", "parse_principal"]

USER_TYPE = "User"


class KafkaPrincipal(NamedTuple):
    """A principal: its type (`User`) and its name."""

    type: str
    name: str

    def __str__(self):
        return f"{self.type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def parse_principal(text):
    """The principal written as `Type:name` (`User:alice`; the name may hold colons, as a
    certificate's name can). Raises ValueError on text without a type or a name."""
    if not isinstance(text, str):
        raise TypeError(f"a principal is text such as 'User:alice', not {type(text).__name__}")
    kind, colon, name = text.partition(":")
    if not colon or not kind or not name:
        raise ValueError(f"principal {text!r} is not in the form Type:name (e.g. User:alice)")
    return KafkaPrincipal(kind, name)
