"""`kraftcore.security.scram_keys`: the keys a credential stores, against RFC 7677's
SCRAM-SHA-256 test vector (user "user", password "pencil")."""

import base64
import hashlib
import hmac

import pytest

from kraftcore.security import scram_keys as K


def test_rfc7677_vector():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = K.salted_password(K.SCRAM_SHA_256, "pencil", salt, 4096)
    stored = K.stored_key(K.SCRAM_SHA_256, salted)
    server = K.server_key(K.SCRAM_SHA_256, salted)
    # The vector's ServerSignature = HMAC(ServerKey, AuthMessage)
    auth = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF"
            b"$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaT"
            b"CAfuxFIlj)hNlF$k0")
    signature = hmac.new(server, auth, "sha256").digest()
    assert base64.b64encode(signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    assert stored == hashlib.sha256(client_key).digest()


def test_sha512_lengths_and_mechanisms():
    salted = K.salted_password(K.SCRAM_SHA_512, b"secret", b"salt", 4096)
    assert len(salted) == len(K.stored_key(2, salted)) == len(K.server_key(2, salted)) == 64
    assert K.mechanism_of("scram-sha-512") == K.SCRAM_SHA_512
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        K.stored_key(3, salted)
    with pytest.raises(ValueError):
        K.mechanism_of("PLAIN")
