"""ACL decisions for a node that does not follow the cluster's metadata: a gateway asks a
broker over the mesh (TAG_AUTHORIZE, 0x0A) and keeps each decision for at most a second.

The gateway answers some requests itself (Metadata from the mesh directory, FindCoordinator,
DescribeCluster, unknown topics, its BROKER config resource...): it must refuse what a broker
would refuse, with the broker's ACLs. The broker's side (``AuthorizationServer``) decides with
its own ``broker.authorizer`` (eddy.security.authorizer; None: ``enabled`` False, everything
allowed), and answers only a gateway: a live member of its mesh directory whose Hello names
the gateway role (``KafkaOpServer.is_gateway``, the rule TAG_KAFKA_OP_AS follows); anyone
else gets CLUSTER_AUTHORIZATION_FAILED.

The gateway's side: ``RemoteAuthorizer.decide`` answers a batch of checks for one principal
and host from its cache, asks a live broker (``MeshAuthorizationSource``, a few at most, in
random order) for the rest in requests of ``MAX_CHECKS`` at most, and keeps each decision
``CACHE_TTL_S`` (ACL changes apply within a second), ``MAX_CACHED`` at most (the oldest go
first). An answer saying the broker has no authorizer allows everything for ``CACHE_TTL_S``
without asking. When no broker can be asked, the last answer's word stands: allowed when the
cluster had no authorizer, denied otherwise (a warning in the log); nothing is cached then.
``authorize`` / ``authorize_any`` / ``authorized_operations`` mirror
eddy.security.authorizer.Authorizer's, as coroutines. ``LocalDecisions`` is the same
interface over a co-located broker's own authorizer (a node that is broker and gateway).

Whatever a peer sends is checked before use: the principal and host as TAG_KAFKA_OP_AS's
(eddy.security.acting.check_client), at most ``MAX_CHECKS`` checks, names at most
``MAX_NAME`` characters, operations and resource types Kafka's known ones; an answer must
carry one decision per check.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from eddy import postcard
from eddy.mesh.frames import (
    AUTHORIZE_ANY,
    AUTHORIZE_RESOURCE,
    TAG_AUTHORIZE,
    AuthorizeAnswer,
    AuthorizeCheck,
    AuthorizeRequest,
    Frame,
)
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import CLUSTER_NAME, OPERATIONS_OF, AclOperation, ResourceType
from eddy.security.acting import check_client
from eddy.security.authorizer import Authorizer
from eddy.security.mesh_brokers import BrokerAsker

__all__ = ["CACHE_TTL_S", "MAX_CACHED", "MAX_CHECKS", "MAX_NAME", "AuthorizationError",
           "AuthorizationServer", "AuthorizationUnavailable", "Decisions", "LocalDecisions",
           "MeshAuthorizationSource", "RemoteAuthorizer", "answer_for", "any_check",
           "check_answer", "check_request", "resource_check"]

log = logging.getLogger(__name__)
#: how long a decision is used: ACL changes take effect on a gateway within this
CACHE_TTL_S = 1.0
#: decisions kept at most
MAX_CACHED = 65536
#: checks in one request at most, and the longest resource name asked about
MAX_CHECKS = 1000
MAX_NAME = 1024
#: one broker's time to answer, and the brokers asked before giving up
#: what may be asked about (Kafka's operations and resource types, not the filter values)
_OPERATIONS = frozenset(int(op) for op in AclOperation) - {AclOperation.UNKNOWN,
                                                             AclOperation.ANY}
_TYPES = frozenset(int(t) for t in ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}

#: (principal, host, checks) -> one decision per check, or None: the broker has no authorizer
Ask = Callable[[str, str, Sequence[AuthorizeCheck]], Awaitable[list[bool] | None]]


class AuthorizationError(ValueError):
    """A request or answer that breaks the rules (the message says which)."""


class AuthorizationUnavailable(Exception):
    """No broker could be asked (none on the mesh, none answered, or answers refused)."""


def resource_check(op: AclOperation, rtype: ResourceType, name: str) -> AuthorizeCheck:
    return AuthorizeCheck(AUTHORIZE_RESOURCE, int(op), int(rtype), name)


def any_check(op: AclOperation, rtype: ResourceType) -> AuthorizeCheck:
    return AuthorizeCheck(AUTHORIZE_ANY, int(op), int(rtype), "")


# -- the frames' rules -------------------------------------------------------------------------
def _check_one(i: int, c: AuthorizeCheck) -> None:
    if c.kind not in (AUTHORIZE_RESOURCE, AUTHORIZE_ANY):
        raise AuthorizationError(f"checks[{i}].kind: {c.kind}, must be 0 or 1")
    if c.operation not in _OPERATIONS:
        raise AuthorizationError(f"checks[{i}].operation: {c.operation} is no ACL operation")
    if c.resource_type not in _TYPES:
        raise AuthorizationError(f"checks[{i}].resource_type: {c.resource_type} is no "
                                 f"resource type")
    if len(c.name) > MAX_NAME:
        raise AuthorizationError(f"checks[{i}].name: {len(c.name)} characters, at most "
                                 f"{MAX_NAME}")
    if c.kind == AUTHORIZE_ANY and c.name:
        raise AuthorizationError(f"checks[{i}].name: must be empty for a check of any "
                                 f"resource")


def check_request(request: AuthorizeRequest) -> None:
    why = check_client(request.principal, request.host)
    if why is not None:
        raise AuthorizationError(why)
    if not 1 <= len(request.checks) <= MAX_CHECKS:
        raise AuthorizationError(f"checks: {len(request.checks)}, must be 1 to {MAX_CHECKS}")
    for i, c in enumerate(request.checks):
        _check_one(i, c)


def check_answer(answer: AuthorizeAnswer, count: int) -> list[bool] | None:
    """The decisions an answer carries for ``count`` checks (None: no authorizer, all
    allowed). Raises AuthorizationError for a refusal or a wrong number of decisions."""
    if answer.error_code:
        raise AuthorizationError(f"refused with error code {answer.error_code}")
    if not answer.enabled:
        if answer.allowed:
            raise AuthorizationError("no authorizer, yet with decisions")
        return None
    if len(answer.allowed) != count:
        raise AuthorizationError(f"{len(answer.allowed)} decisions for {count} checks")
    return list(answer.allowed)


def answer_for(authorizer: Authorizer | None, request: AuthorizeRequest) -> AuthorizeAnswer:
    """A checked request decided by ``authorizer`` (None: no authorizer)."""
    if authorizer is None:
        return AuthorizeAnswer(0, False, ())
    return AuthorizeAnswer(0, True, tuple(
        _decide(authorizer, request.principal, request.host, c) for c in request.checks))


def _decide(authorizer: Authorizer, principal: str, host: str, c: AuthorizeCheck) -> bool:
    op, rtype = AclOperation(c.operation), ResourceType(c.resource_type)
    if c.kind == AUTHORIZE_ANY:
        return authorizer.authorize_any(principal, host, op, rtype)
    return authorizer.authorize(principal, host, op, rtype, c.name)


# -- the broker's side -------------------------------------------------------------------------
class AuthorizationServer:
    """Tag 0x0A on a broker: decisions of its authorizer, for gateways only."""

    def __init__(self, broker: Any, is_gateway: Callable[[bytes], bool]) -> None:
        self.broker = broker
        self.is_gateway = is_gateway
        self.served = 0
        self.refused = 0

    async def handle(self, peer: bytes, frame: Frame) -> bytes | None:
        if not self.is_gateway(peer):
            self.refused += 1
            log.warning("refused ACL decisions to %s: not a gateway on this node's mesh",
                        peer.hex()[:12])
            return postcard.encode(AuthorizeAnswer(
                int(ErrorCode.cluster_authorization_failed), False, ()))
        try:
            request = postcard.decode(AuthorizeRequest, frame.payload)
            check_request(request)
        except (postcard.PostcardError, AuthorizationError) as exc:
            log.info("bad ACL decision request from %s: %s", peer.hex()[:12], exc)
            return postcard.encode(AuthorizeAnswer(int(ErrorCode.invalid_request), False, ()))
        self.served += 1
        return postcard.encode(answer_for(getattr(self.broker, "authorizer", None), request))


# -- the gateway's side ------------------------------------------------------------------------
class MeshAuthorizationSource(BrokerAsker):
    """Asks the live brokers of the mesh directory, a few at most, in random order."""

    async def ask(self, principal: str, host: str, checks: Sequence[AuthorizeCheck]
                  ) -> list[bool] | None:
        request = AuthorizeRequest(principal, host, tuple(checks))
        check_request(request)
        payload = postcard.encode(request)
        why = "no broker on the mesh"
        for key in self.brokers():
            try:
                data = await self.rpc.call(key, TAG_AUTHORIZE, payload, self.timeout_s)
                return check_answer(postcard.decode(AuthorizeAnswer, data), len(checks))
            except (postcard.PostcardError, AuthorizationError) as exc:
                why = f"broker {key.hex()[:12]} answered: {exc}"
            except Exception as exc:  # the network, the peer: the next broker is asked
                why = f"broker {key.hex()[:12]}: {type(exc).__name__}: {exc}"
        raise AuthorizationUnavailable(why)


class Decisions(ABC):
    """Authorizer's interface as coroutines, over ``decide`` (a batch for one principal)."""

    @abstractmethod
    async def decide(self, principal: str, host: str, checks: Sequence[AuthorizeCheck]
                     ) -> list[bool]:
        """One decision per check, in order."""

    async def authorize(self, principal: str, host: str, operation: AclOperation,
                        rtype: ResourceType, name: str) -> bool:
        (ok,) = await self.decide(principal, host, [resource_check(operation, rtype, name)])
        return ok

    async def authorize_any(self, principal: str, host: str, operation: AclOperation,
                            rtype: ResourceType) -> bool:
        (ok,) = await self.decide(principal, host, [any_check(operation, rtype)])
        return ok

    async def authorized_operations(self, principal: str, host: str, rtype: ResourceType,
                                    name: str) -> int:
        ops = OPERATIONS_OF.get(rtype, ())
        got = await self.decide(principal, host, [resource_check(op, rtype, name)
                                                  for op in ops])
        return sum(1 << op for op, ok in zip(ops, got, strict=True) if ok)

    async def cluster_operations(self, principal: str, host: str) -> int:
        return await self.authorized_operations(principal, host, ResourceType.CLUSTER,
                                                CLUSTER_NAME)


class LocalDecisions(Decisions):
    """The decisions of a co-located broker's authorizer (read when asked: it is set once the
    cluster's metadata runs; None: everything allowed)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    async def decide(self, principal: str, host: str, checks: Sequence[AuthorizeCheck]
                     ) -> list[bool]:
        authorizer: Authorizer | None = getattr(self.broker, "authorizer", None)
        if authorizer is None:
            return [True] * len(checks)
        return [_decide(authorizer, principal, host, c) for c in checks]


_Key = tuple[str, str, AuthorizeCheck]


class RemoteAuthorizer(Decisions):
    """Decisions asked of ``ask`` (a broker), each kept ``ttl_s`` at most."""

    def __init__(self, ask: Ask, ttl_s: float = CACHE_TTL_S, max_entries: int = MAX_CACHED,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ask = ask
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[_Key, tuple[float, bool]] = OrderedDict()
        #: what the last answer said: the cluster has an authorizer (None: never answered)
        self.enabled: bool | None = None
        self._disabled_at = float("-inf")
        self.asks = 0
        self.failures = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _cached(self, key: _Key, now: float) -> bool | None:
        entry = self._entries.get(key)
        if entry is None or now - entry[0] >= self.ttl_s:
            return None
        return entry[1]

    def _keep(self, key: _Key, now: float, ok: bool) -> None:
        self._entries[key] = (now, ok)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    async def decide(self, principal: str, host: str, checks: Sequence[AuthorizeCheck]
                     ) -> list[bool]:
        now = self._clock()
        if now - self._disabled_at < self.ttl_s:
            return [True] * len(checks)
        out: dict[AuthorizeCheck, bool] = {}
        wanted: list[AuthorizeCheck] = []
        askable = check_client(principal, host) is None
        for c in dict.fromkeys(checks):
            cached = self._cached((principal, host, c), now)
            if cached is not None:
                out[c] = cached
            elif askable and len(c.name) <= MAX_NAME:
                wanted.append(c)
            else:  # nothing a broker could be asked: what it would say without an authorizer
                out[c] = self.enabled is False
        for start in range(0, len(wanted), MAX_CHECKS):
            chunk = wanted[start:start + MAX_CHECKS]
            got = await self._ask_chunk(principal, host, chunk)
            if got is None:
                return [True] * len(checks)
            out.update(zip(chunk, got, strict=True))
        return [out[c] for c in checks]

    async def _ask_chunk(self, principal: str, host: str, chunk: list[AuthorizeCheck]
                         ) -> list[bool] | None:
        """The chunk's decisions, kept (None: no authorizer, everything allowed)."""
        self.asks += 1
        try:
            got = await self._ask(principal, host, chunk)
        except Exception as exc:
            self.failures += 1
            allow = self.enabled is False
            log.warning("ACL decisions for %.64r unavailable (%s): %s", principal,
                        "allowed: the cluster had no authorizer" if allow else "denied", exc)
            return None if allow else [False] * len(chunk)
        now = self._clock()
        if got is None:
            self.enabled = False
            self._disabled_at = now
            return None
        self.enabled = True
        for c, ok in zip(chunk, got, strict=True):
            self._keep((principal, host, c), now, ok)
        return got
