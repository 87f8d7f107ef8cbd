"""The keys a SCRAM credential stores (RFC 5802 §3), computed from the salted password a
client sends in AlterUserScramCredentials: StoredKey = H(HMAC(SaltedPassword, "Client
Key")), ServerKey = HMAC(SaltedPassword, "Server Key"), with H SHA-256 or SHA-512 by
mechanism; and SaltedPassword itself (PBKDF2 with HMAC-H), what an admin client sends.

Mechanism codes are Kafka's ScramMechanism types: SCRAM-SHA-256 is 1, SCRAM-SHA-512 is 2.
Iterations Kafka accepts: 4096 to 16384.
"""

import hashlib
import hmac

__all__ = ["SCRAM_SHA_256", "SCRAM_SHA_512", "MECHANISMS", "MECHANISM_NAMES",
           "ITERATIONS_MIN", "ITERATIONS_MAX", "mechanism_of", "salted_password",
           "stored_key", "server_key"]

SCRAM_SHA_256 = 1
SCRAM_SHA_512 = 2
MECHANISMS = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
"""mechanism code -> hashlib name of its hash."""
MECHANISM_NAMES = {SCRAM_SHA_256: "SCRAM-SHA-256", SCRAM_SHA_512: "SCRAM-SHA-512"}
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384


def mechanism_of(name):
    """The code of a mechanism named `SCRAM-SHA-256` / `SCRAM-SHA-512` (any case)."""
    for code, text in MECHANISM_NAMES.items():
        if str(name).strip().upper() == text:
            return code
    raise ValueError(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)")


def _hash(mechanism):
    try:
        return MECHANISMS[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (1 SCRAM-SHA-256, "
                         "2 SCRAM-SHA-512)") from None


def salted_password(mechanism, password, salt, iterations):
    """Hi(password, salt, iterations): PBKDF2 with HMAC-H (`password` text or bytes)."""
    if isinstance(password, str):
        password = password.encode("utf-8")
    return hashlib.pbkdf2_hmac(_hash(mechanism), password, bytes(salt), int(iterations))


def stored_key(mechanism, salted):
    """H(HMAC(SaltedPassword, "Client Key"))."""
    name = _hash(mechanism)
    client_key = hmac.new(bytes(salted), b"Client Key", name).digest()
    return hashlib.new(name, client_key).digest()


def server_key(mechanism, salted):
    """HMAC(SaltedPassword, "Server Key")."""
    return hmac.new(bytes(salted), b"Server Key", _hash(mechanism)).digest()
