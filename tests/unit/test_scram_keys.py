"""The keys a server keeps of a SCRAM password, checked against RFC 7677's SCRAM-SHA-256
exchange (user "user", password "pencil"): the client proof and server signature of the
RFC follow from the StoredKey and ServerKey derived here, and the mechanisms map as
Kafka's ScramMechanism types do."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from eddy.security.scram import (
    MECHANISMS,
    UnknownMechanism,
    derive_keys,
    mechanism,
    salted_password,
)

# RFC 7677 section 3
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
ITERATIONS = 4096
CLIENT_FIRST_BARE = "n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = ("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                "s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL_NO_PROOF = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
AUTH_MESSAGE = f"{CLIENT_FIRST_BARE},{SERVER_FIRST},{CLIENT_FINAL_NO_PROOF}".encode()


def test_rfc7677_exchange_verifies_with_the_derived_keys() -> None:
    sha256 = mechanism(1)
    salted = salted_password(sha256, b"pencil", SALT, ITERATIONS)
    keys = derive_keys(sha256, salted)
    assert len(keys.stored_key) == len(keys.server_key) == 32

    # what a server does with only the stored keys: recover ClientKey from the RFC's proof
    # and check that it hashes to StoredKey; sign the exchange with ServerKey
    signature = hmac.digest(keys.stored_key, AUTH_MESSAGE, "sha256")
    client_key = bytes(a ^ b for a, b in zip(PROOF, signature, strict=True))
    assert hashlib.sha256(client_key).digest() == keys.stored_key
    assert hmac.digest(keys.server_key, AUTH_MESSAGE, "sha256") == SERVER_SIGNATURE


def test_a_wrong_password_gives_other_keys() -> None:
    sha256 = mechanism(1)
    right = derive_keys(sha256, salted_password(sha256, b"pencil", SALT, ITERATIONS))
    wrong = derive_keys(sha256, salted_password(sha256, b"pencils", SALT, ITERATIONS))
    assert right.stored_key != wrong.stored_key and right.server_key != wrong.server_key
    assert "hidden" in repr(right) and right.stored_key.hex() not in repr(right)


def test_sha512_keys_are_of_its_length_and_differ_from_sha256() -> None:
    sha512 = mechanism(2)
    salted = salted_password(sha512, b"pencil", SALT, ITERATIONS)
    assert len(salted) == sha512.key_length == 64
    keys = derive_keys(sha512, salted)
    assert len(keys.stored_key) == len(keys.server_key) == 64
    # StoredKey is H(HMAC(SaltedPassword, "Client Key")) with H = SHA-512
    client_key = hmac.new(salted, b"Client Key", hashlib.sha512).digest()
    assert keys.stored_key == hashlib.sha512(client_key).digest()
    assert keys.server_key == hmac.new(salted, b"Server Key", hashlib.sha512).digest()


def test_mechanisms_are_kafkas_types() -> None:
    assert {t: m.name for t, m in MECHANISMS.items()} == {1: "SCRAM-SHA-256",
                                                          2: "SCRAM-SHA-512"}
    for bad in (0, 3, -1):
        with pytest.raises(UnknownMechanism):
            mechanism(bad)
