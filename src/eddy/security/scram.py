"""SCRAM credentials (RFC 5802, RFC 7677): what a server keeps of a password.

A client (Kafka's ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]'``,
confluent-kafka's ``alter_user_scram_credentials``) sends the salted password,
``SaltedPassword = Hi(password, salt, iterations)`` (PBKDF2 with the mechanism's HMAC).
The server derives and keeps only

    ClientKey = HMAC(SaltedPassword, "Client Key")
    StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")

which verify a client's proof and prove the server to the client, and are of no use to
log in with. Pure functions: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

__all__ = [
    "MECHANISMS",
    "ScramKeys",
    "ScramMechanism",
    "UnknownMechanism",
    "derive_keys",
    "mechanism",
    "salted_password",
]


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One of Kafka's ScramMechanism values (the int8 AlterUserScramCredentials carries)."""

    type: int
    name: str
    hash_name: str  # hashlib's name of H

    @property
    def key_length(self) -> int:
        return hashlib.new(self.hash_name).digest_size


#: Kafka's ScramMechanism by type (0 is UNKNOWN there: no mechanism)
MECHANISMS: dict[int, ScramMechanism] = {
    1: ScramMechanism(1, "SCRAM-SHA-256", "sha256"),
    2: ScramMechanism(2, "SCRAM-SHA-512", "sha512"),
}


class UnknownMechanism(ValueError):
    """A mechanism type that is no SCRAM mechanism Kafka knows."""


@dataclass(frozen=True, slots=True)
class ScramKeys:
    """What the server stores of one credential, besides the salt and iterations."""

    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys are secrets of a kind: never in a log line
        return "ScramKeys(stored_key=[hidden], server_key=[hidden])"


def mechanism(mechanism_type: int) -> ScramMechanism:
    """The mechanism of Kafka type ``mechanism_type`` (1 SHA-256, 2 SHA-512)."""
    found = MECHANISMS.get(mechanism_type)
    if found is None:
        raise UnknownMechanism(f"unknown SCRAM mechanism type {mechanism_type}")
    return found


def salted_password(mech: ScramMechanism, password: bytes, salt: bytes,
                    iterations: int) -> bytes:
    """RFC 5802's Hi(password, salt, iterations): what a client computes and sends."""
    return hashlib.pbkdf2_hmac(mech.hash_name, password, salt, iterations)


def derive_keys(mech: ScramMechanism, salted: bytes) -> ScramKeys:
    """StoredKey and ServerKey of a salted password (never kept itself)."""
    client_key = hmac.digest(salted, b"Client Key", mech.hash_name)
    stored_key = hashlib.new(mech.hash_name, client_key).digest()
    server_key = hmac.digest(salted, b"Server Key", mech.hash_name)
    return ScramKeys(stored_key, server_key)
