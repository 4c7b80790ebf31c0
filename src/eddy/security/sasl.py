"""SASL exchanges of the Kafka listener: PLAIN and SCRAM-SHA-256/512 (RFC 5802/7677, the
exchange run by scramp with the stored keys), each a small state machine fed the client's
tokens. Whatever the client sends, a failure is a ``SaslFailure`` whose message names no
secret; the caller answers SASL_AUTHENTICATION_FAILED with it.

PLAIN (RFC 4616) is checked against the user's SCRAM credential: the password is salted
with the stored salt and iterations and the derived StoredKey compared with the stored one,
so no password is ever kept (Kafka's PLAIN reads a JAAS file instead).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable
from typing import Any, Protocol

from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped]

from eddy.metadata.records import ScramCredential
from eddy.security.scram import MECHANISMS, derive_keys, salted_password

__all__ = [
    "CredentialLookup",
    "Exchange",
    "PlainExchange",
    "SaslFailure",
    "ScramExchange",
    "make_exchange",
    "parse_plain",
]

log = logging.getLogger(__name__)
#: (user, Kafka SCRAM mechanism type) -> the stored credential, or None
CredentialLookup = Callable[[str, int], ScramCredential | None]
_SCRAM_TYPES = {m.name: t for t, m in MECHANISMS.items()}
#: the longest user name or password PLAIN takes (RFC 4616 allows 255 UTF-8 characters)
MAX_PLAIN_FIELD = 1024


class SaslFailure(Exception):
    """Authentication failed. ``str(exc)`` goes to the client and the log: no secrets."""

    def __init__(self, message: str, user: str | None = None) -> None:
        super().__init__(message)
        self.user = user


def invalid_credentials(mechanism: str, user: str | None) -> SaslFailure:
    # Kafka's wording, the same for an unknown user and a wrong password
    return SaslFailure("Authentication failed during authentication due to invalid "
                       f"credentials with SASL mechanism {mechanism}", user)


class Exchange(Protocol):
    mechanism: str
    user: str | None  # who the client says it is, once known

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        """The answer to one client token, and whether the exchange succeeded with it."""
        ...


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """RFC 4616's ``[authzid] NUL authcid NUL passwd`` as (authzid, user, password)."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise SaslFailure("Invalid SASL/PLAIN message: expected 3 NUL-separated fields")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise SaslFailure("Invalid SASL/PLAIN message: not UTF-8") from None
    if not user:
        raise SaslFailure("Authentication failed: username not specified")
    if not password:
        raise SaslFailure("Authentication failed: password not specified", user)
    if len(user) > MAX_PLAIN_FIELD or len(password) > MAX_PLAIN_FIELD:
        raise SaslFailure("Invalid SASL/PLAIN message: a field is too long")
    if authzid and authzid != user:
        raise SaslFailure("Authentication failed: Client requested an authorization id that "
                          "is different from username", user)
    return authzid, user, password


def _plain_matches(cred: ScramCredential, password: str) -> bool:
    mech = MECHANISMS[cred.mechanism]
    salted = salted_password(mech, password.encode("utf-8"), cred.salt, cred.iterations)
    return hmac.compare_digest(derive_keys(mech, salted).stored_key, cred.stored_key)


class PlainExchange:
    mechanism = "PLAIN"

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self.user: str | None = None
        self._done = False

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        if self._done:
            raise SaslFailure("Unexpected SASL/PLAIN token after authentication")
        self._done = True
        _, user, password = parse_plain(token)
        self.user = user
        creds = [c for t in sorted(MECHANISMS, reverse=True)
                 if (c := self._lookup(user, t)) is not None]
        if not creds:
            raise invalid_credentials(self.mechanism, user)
        # PBKDF2 of thousands of rounds: off the event loop
        if not await asyncio.to_thread(_plain_matches, creds[0], password):
            raise invalid_credentials(self.mechanism, user)
        return b"", True


class ScramExchange:
    """Server side of SCRAM: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup) -> None:
        self.mechanism = mechanism
        self._type = _SCRAM_TYPES[mechanism]
        self._lookup = lookup
        self.user: str | None = None
        # an alphanumeric server nonce, as Kafka's (librdkafka 2.0 mis-reads some others)
        self._server = ScramMechanism(mechanism).make_server(
            self._auth, s_nonce=secrets.token_hex(16))
        self._step = 0

    def _auth(self, user: str) -> tuple[bytes, bytes, bytes, int] | None:
        self.user = user
        cred = self._lookup(user, self._type)
        if cred is None:
            return None
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        self._step += 1
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure(f"Invalid {self.mechanism} message: not UTF-8") from None
        try:
            if self._step == 1:
                self._server.set_client_first(text)
                return self._server.get_server_first().encode(), False
            if self._step == 2:
                return self._final(text), True
        except SaslFailure:
            raise
        except ScramException as exc:  # scramp's reasons name no secret
            log.debug("%s exchange refused: %s", self.mechanism, exc)
            raise invalid_credentials(self.mechanism, self.user) from None
        except Exception:  # scramp's parsers on hostile input: never a traceback
            raise SaslFailure(f"Invalid {self.mechanism} message", self.user) from None
        raise SaslFailure(f"Unexpected {self.mechanism} message after authentication",
                          self.user)


    def _final(self, text: str) -> bytes:
        """Check client-final (RFC 5802 section 3) and answer server-final. librdkafka
        before 2.6.1 sends ``r=`` with its client nonce once more in front of the nonce
        the server sent (its issue #4895): accepted as Kafka 3.8.1-3.9 accepts it (the
        server's nonce must end it), the proof computed over what the client sent."""
        server = self._server
        nonce = str(server.nonce)
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        proof_at = text.rfind(",p=")
        if proof_at < 0 or "c" not in fields or "r" not in fields or "p" not in fields:
            raise SaslFailure(f"Invalid {self.mechanism} client-final message", self.user)
        client_nonce = nonce[: len(nonce) - len(str(server.s_nonce))]
        if fields["r"] not in (nonce, client_nonce + nonce):
            raise invalid_credentials(self.mechanism, self.user)
        gs2 = base64.b64encode(str(server.gs2_header).encode()).decode()
        if fields["c"] != gs2:
            raise invalid_credentials(self.mechanism, self.user)
        auth_message = ",".join((str(server.client_first_bare), str(server.server_first),
                                 text[:proof_at])).encode()
        hash_name = MECHANISMS[self._type].hash_name
        try:
            proof = base64.b64decode(fields["p"], validate=True)
        except ValueError:
            raise SaslFailure(f"Invalid {self.mechanism} proof", self.user) from None
        signature = hmac.digest(server.stored_key, auth_message, hash_name)
        if len(proof) != len(signature):
            raise invalid_credentials(self.mechanism, self.user)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(hash_name, client_key).digest(),
                                   server.stored_key):
            raise invalid_credentials(self.mechanism, self.user)
        verifier = hmac.digest(server.server_key, auth_message, hash_name)
        return b"v=" + base64.b64encode(verifier)


def make_exchange(mechanism: str, lookup: CredentialLookup) -> Exchange:
    if mechanism == "PLAIN":
        return PlainExchange(lookup)
    return ScramExchange(mechanism, lookup)


def cluster_lookup(broker: Any) -> CredentialLookup:
    """Credentials from the node's replica of the cluster metadata (none outside one)."""

    def lookup(user: str, mechanism: int) -> ScramCredential | None:
        cluster = getattr(broker, "cluster", None) if broker is not None else None
        if cluster is None:
            return None
        found: ScramCredential | None = cluster.state.scram_credential(user, mechanism)
        return found

    return lookup
