"""Authentication and authorization of the HTTP listeners (schema registry, admin) with the
principals of the Kafka listeners.

- ``parse_basic``: an ``Authorization: Basic ...`` header as (user, password), bounded before
  it is decoded; a malformed one is an ``HttpAuthError`` saying what is wrong with it (never
  echoing it).
- ``PasswordCheck``: a password checked against the user's SCRAM credential by the PLAIN
  mechanism's own exchange (``eddy.security.sasl.PlainExchange``: salted with the stored salt
  and iterations, the derived StoredKey compared with the stored one), off the event loop.
  A success is remembered while the user's credentials stay what they were (keyed by an HMAC
  of user and password under a key of this process, never the password itself), so a client
  that sends its credentials with every request, as HTTP clients do, costs one key
  derivation, not one per request.
- ``HttpSecurity``: one listener's settings: ``BASIC`` or ``NONE`` (then the principal is
  the verified client certificate's, as on an SSL Kafka listener, else ``User:ANONYMOUS``);
  failed logins limited per source address as SASL's are (``FailureLimiter``,
  ``sasl.failed.logins.per.ip.per.minute``) and answered after
  ``connection.failed.authentication.delay.ms``; logged without secrets; the node's
  authorizer. ``http_security`` builds it from the node's config.
- ``auth_middleware``: the aiohttp middleware: authenticates every request but those to the
  open paths, answers 401 (with ``WWW-Authenticate: Basic realm="eddy"``) or 429 in the
  listener's own error shape, and leaves a ``Caller`` on the request; the listener's routes
  ask it ``allowed(op, type, name)`` (``caller_of``), and ``denied_message`` words a 403.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from eddy.metadata.records import ScramCredential
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.authorizer import Authorizer
from eddy.security.connection_limits import LogThrottle
from eddy.security.ratelimit import FailureLimiter
from eddy.security.sasl import (
    MAX_PLAIN_FIELD,
    CredentialLookup,
    PlainExchange,
    SaslFailure,
    cluster_lookup,
)
from eddy.security.scram import MECHANISMS
from eddy.security.session import ANONYMOUS
from eddy.security.settings import http_authentication_method
from eddy.security.tls import TlsContext, TlsMaterial, principal_of

if TYPE_CHECKING:
    from eddy.security.config_fields import SecuritySettings

__all__ = [
    "CALLER",
    "MAX_AUTHORIZATION_CHARS",
    "REALM",
    "Caller",
    "HttpAuthError",
    "HttpSecurity",
    "PasswordCheck",
    "auth_middleware",
    "caller_of",
    "denied_message",
    "http_security",
    "parse_basic",
]

log = logging.getLogger(__name__)

REALM = "eddy"
CHALLENGE = f'Basic realm="{REALM}"'
#: the longest Authorization header looked at (its credentials then fit PLAIN's limits)
MAX_AUTHORIZATION_CHARS = 4096
UNAUTHORIZED = "Unauthorized: invalid user name or password"
MISSING = "Unauthorized: this listener needs HTTP basic authentication (user:password)"
LIMITED = "Too many failed logins from this address; try again later"
#: successful logins remembered at most, and for how long (seconds)
REMEMBERED_MAX = 4096
REMEMBERED_S = 300.0

#: a listener's error answer: (HTTP status, message) -> response
Render = Callable[[int, str], web.StreamResponse]


class HttpAuthError(Exception):
    """A request that is not let in: its status (401, 429) and a message with no secret."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None
                 ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers if headers is not None else {}


def _unauthorized(message: str) -> HttpAuthError:
    return HttpAuthError(401, message, {"WWW-Authenticate": CHALLENGE})


def parse_basic(header: str) -> tuple[str, str]:
    """``Basic base64(user:password)`` (RFC 7617) as (user, password); HttpAuthError 401
    for anything else: too long, another scheme, not base64, not UTF-8, no colon, an empty
    user or password, a NUL, a field longer than PLAIN takes."""
    if len(header) > MAX_AUTHORIZATION_CHARS:
        raise _unauthorized(f"Malformed Authorization header: longer than "
                            f"{MAX_AUTHORIZATION_CHARS} characters")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise _unauthorized("Unsupported Authorization scheme: this listener takes Basic")
    try:
        raw = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _unauthorized("Malformed Basic credentials: not base64") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _unauthorized("Malformed Basic credentials: not UTF-8") from None
    user, colon, password = text.partition(":")
    if not colon:
        raise _unauthorized("Malformed Basic credentials: expected user:password")
    if not user or not password:
        raise _unauthorized("Malformed Basic credentials: empty user name or password")
    if "\x00" in text:
        raise _unauthorized("Malformed Basic credentials: NUL character")
    if len(user) > MAX_PLAIN_FIELD or len(password) > MAX_PLAIN_FIELD:
        raise _unauthorized("Malformed Basic credentials: user name or password too long")
    return user, password


class PasswordCheck:
    """Passwords checked against the users' SCRAM credentials, successes remembered."""

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._key = secrets.token_bytes(32)
        #: HMAC(user, password) -> (the user's credentials then, until when)
        self._known: dict[bytes, tuple[tuple[ScramCredential | None, ...], float]] = {}
        self.derivations = 0  # passwords actually checked (a metric, and for tests)

    def _credentials(self, user: str) -> tuple[ScramCredential | None, ...]:
        return tuple(self._lookup(user, t) for t in sorted(MECHANISMS))

    def _tag(self, user: str, password: str) -> bytes:
        return hmac.digest(self._key, user.encode() + b"\x00" + password.encode(), "sha256")

    def remembered(self, user: str, password: str, now: float) -> bool:
        """Was this password accepted lately, with the user's credentials unchanged since?"""
        tag = self._tag(user, password)
        entry = self._known.get(tag)
        if entry is None:
            return False
        credentials, until = entry
        if now >= until or credentials != self._credentials(user):
            del self._known[tag]
            return False
        return True

    async def verify(self, user: str, password: str, now: float) -> bool:
        """Whether ``password`` is ``user``'s, checked as SASL/PLAIN checks it."""
        self.derivations += 1
        token = b"\x00" + user.encode() + b"\x00" + password.encode()
        try:
            await PlainExchange(self._lookup).step(token)
        except SaslFailure:
            return False
        if len(self._known) >= REMEMBERED_MAX:
            self._known = {k: v for k, v in self._known.items() if v[1] > now}
            while len(self._known) >= REMEMBERED_MAX:  # all fresh: the oldest go
                del self._known[next(iter(self._known))]
        self._known[self._tag(user, password)] = (self._credentials(user), now + REMEMBERED_S)
        return True


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, and what the node's authorizer lets them do."""

    principal: str
    host: str
    authorizer: Authorizer | None

    def allowed(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, op, rtype, name)


CALLER = web.RequestKey("eddy_http_caller", Caller)


def caller_of(request: web.Request) -> Caller | None:
    """The request's caller (None: the listener runs without ``auth_middleware``)."""
    return request.get(CALLER)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def denied_message(op: AclOperation, rtype: ResourceType, name: str) -> str:
    """Confluent's wording of a 403, with Kafka's operation and resource names."""
    return f"User is denied operation {_camel(op.name)} on {_camel(rtype.name)}: {name}"


def peer_ip(request: web.Request) -> str:
    return request.remote or ""


class HttpSecurity:
    """The authentication of one HTTP listener and the node's authorizer."""

    def __init__(self, listener: str, method: str, lookup: CredentialLookup,
                 authorizer: Callable[[], Authorizer | None], *, tls: TlsContext | None = None,
                 failures_per_minute: int = 30, failure_delay_s: float = 0.1) -> None:
        self.listener = listener
        self.method = method
        self.check = PasswordCheck(lookup)
        self.authorizer = authorizer
        self.tls = tls
        self.limiter = FailureLimiter(failures_per_minute)
        self.failure_delay_s = failure_delay_s
        self._limited_log = LogThrottle(log, logging.WARNING)
        self.failures = 0
        self.successes = 0

    async def authenticate(self, request: web.Request) -> str:
        """The principal of ``request``; HttpAuthError when it is not let in."""
        if self.method != "BASIC":
            transport = request.transport
            found = principal_of(transport) if transport is not None else None
            return found if found is not None else ANONYMOUS
        header = request.headers.get("Authorization")
        if header is None:  # a client's first try (a browser's): not a failed login
            raise _unauthorized(MISSING)
        host = peer_ip(request)
        now = asyncio.get_running_loop().time()
        try:
            user, password = parse_basic(header)
        except HttpAuthError as exc:
            await self._failed(host, None, exc.message, now)
            raise
        if self.check.remembered(user, password, now):  # known good: not a guess
            self.successes += 1
            return f"User:{user}"
        if not self.limiter.allowed(host, now):
            self.failures += 1
            self._limited_log.log(now, "%s: refusing HTTP logins from %s for now: more than "
                                  "%d failed in the last minute", self.listener, host,
                                  int(self.limiter.capacity))
            raise HttpAuthError(429, LIMITED, {"Retry-After": "60"})
        if not await self.check.verify(user, password, now):
            await self._failed(host, user, "invalid credentials", now)
            raise _unauthorized(UNAUTHORIZED)
        self.successes += 1
        log.debug("%s: User:%s authenticated from %s", self.listener, user, host)
        return f"User:{user}"

    async def _failed(self, host: str, user: str | None, reason: str, now: float) -> None:
        self.failures += 1
        self.limiter.failed(host, now)
        log.warning("%s: HTTP basic authentication failed from %s (user %.64r): %s",
                    self.listener, host, user, reason)
        if self.failure_delay_s:
            await asyncio.sleep(self.failure_delay_s)

    def caller(self, request: web.Request, principal: str) -> Caller:
        return Caller(principal, peer_ip(request), self.authorizer())


def auth_middleware(security: HttpSecurity, render: Render,
                    open_paths: frozenset[str] = frozenset()) -> Middleware:
    """Authenticate every request (but those to ``open_paths``) with ``security``; refusals
    rendered by ``render`` in the listener's error shape."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in open_paths:
            return await handler(request)
        try:
            principal = await security.authenticate(request)
        except HttpAuthError as exc:
            response = render(exc.status, exc.message)
            response.headers.update(exc.headers)
            return response
        request[CALLER] = security.caller(request, principal)
        return await handler(request)

    return authenticate


def http_security(listener: Literal["registry", "admin"], config: SecuritySettings,
                  data_dir: str, ssl_enabled: bool, method: str,
                  broker: object) -> HttpSecurity:
    """The security of the ``registry`` or ``admin`` listener of a node with ``broker`` and
    data in ``data_dir``: its ``<listener>.ssl.enabled`` (``ssl_enabled``: with the Kafka
    listeners' PEM material in ``config``) and ``<listener>.authentication.method``
    (``method``), the users of the cluster's metadata, the broker's authorizer. TlsError
    when the PEM material does not load."""
    tls = None
    if ssl_enabled:
        tls = TlsContext(TlsMaterial.from_config(config), os.path.join(data_dir, ".tls"),
                         config.ssl_reload_check_interval_ms / 1000)

    def authorizer() -> Authorizer | None:
        found: Authorizer | None = getattr(broker, "authorizer", None)
        return found

    return HttpSecurity(
        listener, http_authentication_method(method, f"{listener}.authentication.method"),
        cluster_lookup(broker), authorizer, tls=tls,
        failures_per_minute=config.sasl_failed_logins_per_ip_per_minute,
        failure_delay_s=config.connection_failed_authentication_delay_ms / 1000)
