"""SCRAM credentials for a node that does not follow the cluster's metadata: a gateway asks
a broker over the mesh (TAG_CREDENTIALS, 0x09) and keeps the answers for at most a second.

The broker's side (``CredentialServer``) answers from its replica of the metadata, and only
a live member of its mesh directory: a node that was admitted by the mesh transport
(mesh.allowed.nodes, or a membership token signed with mesh.cluster.public.key) and said
Hello. Gateways are no registered brokers, so the directory is the rule, not the metadata's
broker registrations; anyone else gets CLUSTER_AUTHORIZATION_FAILED.

The gateway's side: the SASL exchanges look credentials up synchronously
(``CredentialLookup``), so ``PrefetchingSaslService`` fills a ``CredentialCache`` first:
before the first token of an exchange is run it reads the user name from that token (the
PLAIN message, or SCRAM's client-first as scramp parses it) and awaits the broker's answer.
The cache holds each answer (found or not) ``CACHE_TTL_S`` at most, so a changed or deleted
user takes effect within a second; it holds ``MAX_CACHED`` answers at most (the oldest go
first), and a broker that cannot be asked means no credential (the login fails as for a
wrong password, with a warning in the log).

Whatever a peer sends is checked before use: names at most 1024 characters, salts 1 to 1024
bytes, keys of the mechanism's size (32 or 64 bytes), Kafka's iteration bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from scramp import ScramMechanism  # type: ignore[import-untyped]

from eddy import postcard
from eddy.mesh.directory import DEAD, Directory
from eddy.mesh.frames import TAG_CREDENTIALS, CredentialAnswer, CredentialRequest, Frame
from eddy.metadata.records import ScramCredential
from eddy.metadata.security import (
    MAX_ITERATIONS,
    MAX_NAME,
    MAX_SALT,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
)
from eddy.protocol.errors import ErrorCode
from eddy.security.mesh_brokers import BrokerAsker
from eddy.security.sasl import SaslFailure, parse_plain
from eddy.security.session import SaslService, Session

__all__ = ["CACHE_TTL_S", "MAX_CACHED", "CredentialCache", "CredentialError",
           "CredentialServer", "CredentialUnavailable", "MeshCredentialSource",
           "PrefetchingSaslService", "answer_of", "check_request", "credential_of",
           "first_user"]

log = logging.getLogger(__name__)
#: how long an answer is used: user changes take effect on a gateway within this
CACHE_TTL_S = 1.0
#: answers kept at most
MAX_CACHED = 4096
#: one broker's time to answer, and the brokers asked before giving up
#: the longest a login waits for its credentials
PREFETCH_TIMEOUT_S = 5.0
_MECHANISM_TYPES = {name: t for t, (name, _) in SCRAM_MECHANISMS.items()}

Fetch = Callable[[str, int], Awaitable[ScramCredential | None]]


class CredentialError(ValueError):
    """A credential request or answer that breaks the rules (the message says which)."""


class CredentialUnavailable(Exception):
    """No broker could be asked (none on the mesh, none answered, or answers refused)."""


# -- the frames' rules -------------------------------------------------------------------------
def check_request(request: CredentialRequest) -> None:
    if not 1 <= len(request.user) <= MAX_NAME:
        raise CredentialError(f"user: {len(request.user)} characters, must be 1 to {MAX_NAME}")
    if request.mechanism not in SCRAM_MECHANISMS:
        raise CredentialError(f"mechanism: {request.mechanism} is no SCRAM mechanism")


def answer_of(credential: ScramCredential | None, error_code: int = 0) -> CredentialAnswer:
    if credential is None:
        return CredentialAnswer(error_code, False, b"", b"", b"", 0)
    return CredentialAnswer(0, True, credential.salt, credential.stored_key,
                            credential.server_key, credential.iterations)


def credential_of(answer: CredentialAnswer, user: str, mechanism: int) -> ScramCredential | None:
    """The credential an answer carries (None: not found). Raises CredentialError for a
    refusal or fields out of bounds."""
    if answer.error_code:
        raise CredentialError(f"refused with error code {answer.error_code}")
    if not answer.found:
        if answer.salt or answer.stored_key or answer.server_key or answer.iterations:
            raise CredentialError("not found, yet with credential fields")
        return None
    name, key_len = SCRAM_MECHANISMS[mechanism]
    if not 1 <= len(answer.salt) <= MAX_SALT:
        raise CredentialError(f"salt: {len(answer.salt)} bytes, must be 1 to {MAX_SALT}")
    for what, key in (("stored_key", answer.stored_key), ("server_key", answer.server_key)):
        if len(key) != key_len:
            raise CredentialError(f"{what}: {len(key)} bytes, {name} keys are {key_len}")
    if not MIN_ITERATIONS <= answer.iterations <= MAX_ITERATIONS:
        raise CredentialError(f"iterations: {answer.iterations}, must be {MIN_ITERATIONS} to "
                              f"{MAX_ITERATIONS}")
    return ScramCredential(user, mechanism, answer.salt, answer.stored_key, answer.server_key,
                           answer.iterations)


# -- the broker's side -------------------------------------------------------------------------
class CredentialServer:
    """Tag 0x09 on a broker: credentials from its replica of the metadata."""

    def __init__(self, broker: Any, directory: Directory) -> None:
        self.broker = broker
        self.directory = directory
        self.served = 0
        self.refused = 0

    def is_member(self, peer: bytes) -> bool:
        member = self.directory.members.get(peer)
        return member is not None and member.state != DEAD and peer != self.directory.local.key

    async def handle(self, peer: bytes, frame: Frame) -> bytes | None:
        if not self.is_member(peer):
            self.refused += 1
            log.warning("refused a credential lookup from %s: not a member of this mesh",
                        peer.hex()[:12])
            return postcard.encode(answer_of(None, ErrorCode.cluster_authorization_failed))
        try:
            request = postcard.decode(CredentialRequest, frame.payload)
            check_request(request)
        except (postcard.PostcardError, CredentialError) as exc:
            log.info("bad credential lookup from %s: %s", peer.hex()[:12], exc)
            return postcard.encode(answer_of(None, ErrorCode.invalid_request))
        cluster = getattr(self.broker, "cluster", None)
        if cluster is None:
            return postcard.encode(answer_of(None, ErrorCode.broker_not_available))
        self.served += 1
        found: ScramCredential | None = cluster.state.scram_credential(request.user,
                                                                       request.mechanism)
        return postcard.encode(answer_of(found))


# -- the gateway's side ------------------------------------------------------------------------
class MeshCredentialSource(BrokerAsker):
    """Asks the live brokers of the mesh directory, a few at most, in random order."""

    async def fetch(self, user: str, mechanism: int) -> ScramCredential | None:
        request = CredentialRequest(user, mechanism)
        check_request(request)
        payload = postcard.encode(request)
        why = "no broker on the mesh"
        for key in self.brokers():
            try:
                data = await self.rpc.call(key, TAG_CREDENTIALS, payload, self.timeout_s)
                return credential_of(postcard.decode(CredentialAnswer, data), user, mechanism)
            except (postcard.PostcardError, CredentialError) as exc:
                why = f"broker {key.hex()[:12]} answered: {exc}"
            except Exception as exc:  # the network, the peer: the next broker is asked
                why = f"broker {key.hex()[:12]}: {type(exc).__name__}: {exc}"
        raise CredentialUnavailable(why)


class CredentialCache:
    """Answers of ``fetch`` by (user, mechanism), each for ``ttl_s`` at most; ``lookup`` is
    the synchronous CredentialLookup the exchanges call, ``prefetch`` fills it."""

    def __init__(self, fetch: Fetch, ttl_s: float = CACHE_TTL_S,
                 max_entries: int = MAX_CACHED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[tuple[str, int], tuple[float, ScramCredential | None]] = (
            OrderedDict())
        self._pending: dict[tuple[str, int], asyncio.Future[None]] = {}
        self.fetches = 0
        self.failures = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _fresh(self, key: tuple[str, int], within: float) -> tuple[float,
                                                                   ScramCredential | None] | None:
        entry = self._entries.get(key)
        if entry is None or self._clock() - entry[0] >= within:
            return None
        return entry

    def lookup(self, user: str, mechanism: int) -> ScramCredential | None:
        entry = self._fresh((user, mechanism), self.ttl_s)
        return None if entry is None else entry[1]

    async def prefetch(self, user: str, mechanisms: Iterable[int]) -> None:
        """Make the answers for ``user`` fresh (refetched past half their lifetime, so a
        lookup right after finds them). Never raises: a failure leaves no answer."""
        waits = []
        for mechanism in mechanisms:
            key = (user, mechanism)
            if self._fresh(key, self.ttl_s / 2) is not None:
                continue
            pending = self._pending.get(key)
            if pending is None:
                if len(self._pending) >= self.max_entries:
                    continue  # a flood of logins: this one finds no credential
                pending = asyncio.ensure_future(self._fill(key))
                self._pending[key] = pending
                pending.add_done_callback(self._forget(key))
            waits.append(asyncio.shield(pending))
        if waits:
            await asyncio.gather(*waits)

    def _forget(self, key: tuple[str, int]) -> Callable[[asyncio.Future[None]], None]:
        def done(_: asyncio.Future[None]) -> None:
            self._pending.pop(key, None)

        return done

    async def _fill(self, key: tuple[str, int]) -> None:
        self.fetches += 1
        try:
            found = await self._fetch(*key)
        except Exception as exc:
            self.failures += 1
            self._entries.pop(key, None)
            log.warning("credentials of %.64r (%s) unavailable: %s", key[0],
                        SCRAM_MECHANISMS.get(key[1], ("?",))[0], exc)
            return
        self._entries[key] = (self._clock(), found)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


def _scram_user(mechanism: str, text: str) -> str | None:
    """The user of a SCRAM client-first message, exactly as scramp hands it to the lookup
    (its parser, run with a lookup that only notes the name)."""
    seen: list[str] = []

    def note(user: str) -> None:
        seen.append(str(user))
        raise LookupError("noted")

    # scramp's refusal of the message, or the note's own stop
    with contextlib.suppress(Exception):
        ScramMechanism(mechanism).make_server(note).set_client_first(text)
    return seen[0] if seen else None


def first_user(mechanism: str, token: bytes) -> str | None:
    """The user name the first token of an exchange names (None: none to look up)."""
    if mechanism == "PLAIN":
        try:
            user: str | None = parse_plain(token)[1]
        except SaslFailure:
            return None
    elif mechanism in _MECHANISM_TYPES:
        try:
            user = _scram_user(mechanism, token.decode("utf-8"))
        except UnicodeDecodeError:
            return None
    else:
        return None
    return user if user and len(user) <= MAX_NAME else None


def mechanism_types(mechanism: str) -> list[int]:
    """The credentials an exchange reads: PLAIN tries both SCRAM credentials."""
    if mechanism == "PLAIN":
        return sorted(SCRAM_MECHANISMS, reverse=True)
    found = _MECHANISM_TYPES.get(mechanism)
    return [] if found is None else [found]


class PrefetchingSaslService(SaslService):
    """A SaslService whose credentials are fetched (``prefetch``) before the first token
    of an exchange is checked against them."""

    def __init__(self, mechanisms: list[str], cache: CredentialCache, reauth_ms: int,
                 failure_delay_ms: int, failures_per_minute: int) -> None:
        super().__init__(mechanisms, cache.lookup, reauth_ms, failure_delay_ms,
                         failures_per_minute)
        self.cache = cache

    async def step(self, session: Session, token: bytes, with_lifetime: bool
                   ) -> tuple[bytes, int]:
        exchange = session.exchange
        now = asyncio.get_running_loop().time()
        if (exchange is not None and exchange.user is None
                and self.limiter.allowed(session.peer_ip, now)):
            user = first_user(exchange.mechanism, token)
            if user is not None:
                try:
                    await asyncio.wait_for(
                        self.cache.prefetch(user, mechanism_types(exchange.mechanism)),
                        PREFETCH_TIMEOUT_S)
                except TimeoutError:
                    log.warning("credentials of %.64r not fetched within %.0f s", user,
                                PREFETCH_TIMEOUT_S)
        return await super().step(session, token, with_lifetime)
