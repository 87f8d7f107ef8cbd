"""The `--add-scram` value of `kraftcore format` (Kafka's `kafka-storage format --add-scram`):
one SCRAM credential to put in the bootstrap metadata, as a `UserScramCredentialRecord`.

    SCRAM-SHA-256=[name=alice,password=alice-secret]
    SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",saltedpassword="YCE="]

Keys: `name` (required); `password` or `saltedpassword` (exactly one); `salt` (base64, as
Kafka reads it; required with `saltedpassword`, else random); `iterations` (4096 to 16384,
default 4096). A value may be double-quoted (the quotes are dropped), which lets it hold
`,`. A bad value raises ValueError with a one-line reason.
"""

import base64
import binascii
import re

from kraftcore.metadata.records import UserScramCredentialRecord
from kraftcore.security.scram import (DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS,
                                      MIN_ITERATIONS, credential_from_salted_password,
                                      salted_password)

__all__ = ["parse_add_scram", "SALT_BYTES", "KEYS"]

SALT_BYTES = 32
KEYS = ("name", "password", "saltedpassword", "salt", "iterations")
_PAIR_SPLIT = re.compile(r',(?=(?:[^"]*"[^"]*")*[^"]*$)')  # commas outside quotes


def _base64(key, text):
    padded = text + "=" * (-len(text) % 4)
    try:
        value = base64.b64decode(padded.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise ValueError(f"'{key}' is not base64: {text!r}") from None
    if not value:
        raise ValueError(f"'{key}' is empty")
    return value


def _pairs(body):
    options = {}
    for pair in _PAIR_SPLIT.split(body):
        key, eq, value = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"{pair!r} is not key=value")
        if key not in KEYS:
            raise ValueError(f"unknown key {key!r} (keys: {', '.join(KEYS)})")
        if key in options:
            raise ValueError(f"'{key}' is given twice")
        options[key] = value.replace('"', "")
    return options


def parse_add_scram(text, rng):
    """The `UserScramCredentialRecord` of an `--add-scram` value; `rng` (a `random.Random`;
    the command passes a `random.SystemRandom`) draws the salt when none is given."""
    if not isinstance(text, str):
        raise ValueError("an --add-scram value is text")
    mechanism_name, eq, body = text.strip().partition("=")
    if not eq:
        raise ValueError(f"{text!r} is not MECHANISM=[key=value,...], e.g. "
                         "SCRAM-SHA-256=[name=alice,password=alice-secret]")
    mech = MECHANISMS.get(mechanism_name)
    if mech is None:
        raise ValueError(f"the SCRAM mechanism {mechanism_name!r} is not supported (use "
                         f"{' or '.join(MECHANISMS)})")
    if len(body) < 2 or body[0] != "[" or body[-1] != "]":
        raise ValueError(f"the value of {mechanism_name} must be [key=value,...], not "
                         f"{body!r}")
    options = _pairs(body[1:-1])
    name = options.get("name")
    if not name:
        raise ValueError("'name' is required")
    iterations = DEFAULT_ITERATIONS
    if "iterations" in options:
        if not re.fullmatch(r"[0-9]{1,9}", options["iterations"]):
            raise ValueError(f"'iterations' must be a number, not {options['iterations']!r}")
        iterations = int(options["iterations"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"'iterations' must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}], "
                             f"not {iterations}")
    has_password, has_salted = "password" in options, "saltedpassword" in options
    if has_password == has_salted:
        raise ValueError("give exactly one of 'password' and 'saltedpassword'")
    if has_salted and "salt" not in options:
        raise ValueError("'saltedpassword' needs 'salt'")
    if "salt" in options:
        salt = _base64("salt", options["salt"])
    else:
        salt = rng.getrandbits(8 * SALT_BYTES).to_bytes(SALT_BYTES, "big")
    if has_password:
        if not options["password"]:
            raise ValueError("'password' is empty")
        salted = salted_password(mech, options["password"], salt, iterations)
    else:
        salted = _base64("saltedpassword", options["saltedpassword"])
    credential = credential_from_salted_password(mech, salted, salt, iterations)
    return UserScramCredentialRecord(
        name=name, mechanism=mech.code, salt=credential.salt,
        stored_key=credential.stored_key, server_key=credential.server_key,
        iterations=credential.iterations)
