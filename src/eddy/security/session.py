"""Who is on one connection, and the SASL state rules of the Kafka listener.

``Session.authenticated`` is the one attribute the listener tests per request: True from
the start on PLAINTEXT and SSL listeners; on SASL listeners once an exchange succeeded, and
False again when a KIP-368 session ends (connections.max.reauth.ms) without a
re-authentication. ``SaslService`` (one per SASL listener) runs the exchanges: mechanism
choice, failure delay, per-address rate limit, logging without secrets, session lifetime.
"""

from __future__ import annotations

import asyncio
import logging

from eddy.protocol.errors import CloseConnection
from eddy.security.connection_limits import LogThrottle
from eddy.security.ratelimit import FailureLimiter
from eddy.security.sasl import CredentialLookup, Exchange, SaslFailure, make_exchange

__all__ = ["ANONYMOUS", "SaslService", "Session", "SessionClosed"]

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"
#: Kafka's sasl.server.max.receive.size: the largest frame before authentication
MAX_UNAUTHENTICATED_BYTES = 524288


class SessionClosed(CloseConnection):
    """The connection closes after a SASL answer (a failure, logged where it happened)."""


class Session:
    """One connection's security state (read by handlers as ``request.session``)."""

    __slots__ = (
        "_timer",
        "authenticated",
        "close_reason",
        "exchange",
        "expires_at",
        "legacy_tokens",
        "listener",
        "mechanism",
        "peer_ip",
        "principal",
        "sasl",
        "was_authenticated",
    )

    def __init__(self, listener: str, peer_ip: str, sasl: SaslService | None,
                 principal: str = ANONYMOUS) -> None:
        self.listener = listener
        self.peer_ip = peer_ip
        self.sasl = sasl
        self.authenticated = sasl is None
        self.was_authenticated = False
        self.principal = principal
        self.mechanism: str | None = None
        self.exchange: Exchange | None = None
        self.legacy_tokens = False  # after a v0 SaslHandshake: raw tokens, no Kafka header
        self.close_reason: str | None = None  # close once the current answer is out
        self.expires_at: float | None = None  # loop time the SASL session ends
        self._timer: asyncio.TimerHandle | None = None

    def expire(self) -> None:
        """The SASL session ended: requests other than a re-authentication close it."""
        self._timer = None
        self.authenticated = False

    def cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def set_lifetime(self, seconds: float) -> None:
        self.cancel_timer()
        loop = asyncio.get_running_loop()
        self.expires_at = loop.time() + seconds
        self._timer = loop.call_at(self.expires_at, self.expire)


class SaslService:
    """The SASL side of one listener."""

    def __init__(self, mechanisms: list[str], lookup: CredentialLookup, reauth_ms: int,
                 failure_delay_ms: int, failures_per_minute: int) -> None:
        self.mechanisms = mechanisms
        self.lookup = lookup
        self.reauth_ms = reauth_ms
        self.failure_delay_s = failure_delay_ms / 1000
        self.limiter = FailureLimiter(failures_per_minute)
        self._limited_log = LogThrottle(log, logging.WARNING)
        self.failures = 0
        self.successes = 0

    def begin(self, session: Session, mechanism: str, version: int) -> str | None:
        """A SaslHandshake: None if the exchange may start, else why not (the connection
        is then closed after the answer)."""
        if session.exchange is not None:
            return "a SASL exchange is already in progress"
        if session.was_authenticated and (version == 0 or mechanism != session.mechanism):
            return (f"re-authentication must use SaslHandshake v1 and the mechanism "
                    f"{session.mechanism}")
        session.mechanism = mechanism
        session.exchange = make_exchange(mechanism, self.lookup)
        session.legacy_tokens = version == 0
        return None

    async def _fail(self, session: Session, mechanism: str) -> None:
        session.exchange = None
        session.authenticated = False
        session.cancel_timer()
        session.close_reason = f"SASL authentication failed ({mechanism})"
        if self.failure_delay_s:
            await asyncio.sleep(self.failure_delay_s)

    async def step(self, session: Session, token: bytes, with_lifetime: bool
                   ) -> tuple[bytes, int]:
        """Feed one token: (answer, session lifetime in ms, 0 if none). Raises SaslFailure
        after the configured delay; the caller answers it and closes the connection."""
        exchange = session.exchange
        if exchange is None:
            raise SaslFailure("SaslAuthenticate without a SaslHandshake first")
        loop = asyncio.get_running_loop()
        now = loop.time()
        if not self.limiter.allowed(session.peer_ip, now):
            self.failures += 1
            self._limited_log.log(now, "refusing SASL logins from %s for now: more than %d "
                                  "failed in the last minute", session.peer_ip,
                                  int(self.limiter.capacity))
            await self._fail(session, exchange.mechanism)
            raise SaslFailure("Authentication failed: too many failed logins from this "
                              "address; try again later")
        try:
            answer, done = await exchange.step(token)
            principal = f"User:{exchange.user}"
            if done and session.was_authenticated and principal != session.principal:
                raise SaslFailure("Cannot change the principal during re-authentication",
                                  exchange.user)
        except SaslFailure as exc:
            self.failures += 1
            self.limiter.failed(session.peer_ip, now)
            log.warning("SASL authentication failed from %s (listener %s, %s, user %.64r): %s",
                        session.peer_ip, session.listener, exchange.mechanism, exc.user, exc)
            await self._fail(session, exchange.mechanism)
            raise
        if not done:
            return answer, 0
        self.successes += 1
        session.exchange = None
        session.legacy_tokens = False
        again = session.was_authenticated
        session.principal = principal
        session.authenticated = session.was_authenticated = True
        lifetime = 0
        if self.reauth_ms:
            lifetime = self.reauth_ms
            session.set_lifetime(lifetime / 1000)
        log.debug("%s %s from %s on %s with %s", principal,
                  "re-authenticated" if again else "authenticated", session.peer_ip,
                  session.listener, exchange.mechanism)
        return answer, lifetime if with_lifetime else 0
