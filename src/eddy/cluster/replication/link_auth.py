"""The SASL login of a ``LeaderLink``: SaslHandshake v1, then SaslAuthenticate v2 exchanges
(SCRAM-SHA-256/512 with scramp's client, RFC 5802; or PLAIN, RFC 4616), before the first
Fetch, and again before the session the leader granted runs out (KIP-368).

The answers are the leader's bytes: the link reads them under a small size cap
(``MAX_AUTH_RESPONSE_BYTES``) and decodes them with every length checked; whatever is wrong
(a mechanism the leader does not enable, a refused login, a SCRAM answer that does not
verify) raises ``LinkAuthError``, a ``ConnectionError``, so the fetcher drops the link and
tries again after its backoff. Each distinct failure is logged once as a warning; no
message holds the password.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from scramp import ScramClient, ScramException  # type: ignore[import-untyped]

__all__ = ["MAX_AUTH_RESPONSE_BYTES", "LinkAuthError", "authenticate", "link_failure"]

log = logging.getLogger(__name__)
#: the largest SaslHandshake/SaslAuthenticate answer taken (a SCRAM server-first is ~100 B)
MAX_AUTH_RESPONSE_BYTES = 64 * 1024
#: how much of a peer's text goes into a message
_SHOWN = 200
_warned: set[str] = set()
_MAX_WARNED = 256

Call = Callable[[Any, float], Awaitable[Any]]


class LinkAuthError(ConnectionError):
    """The leader refused this node's login (SASL or TLS), or answered it wrongly. No
    secrets in it."""


def _shown(text: object) -> str:
    out = str(text)
    return out if len(out) <= _SHOWN else out[:_SHOWN] + "..."


def link_failure(where: str, message: str) -> LinkAuthError:
    """The error of a failed login to ``where``, logged as a warning the first time."""
    exc = LinkAuthError(f"{where}: {message}")
    key = str(exc)
    if key not in _warned:  # once per distinct failure: the fetcher retries on and on
        if len(_warned) >= _MAX_WARNED:
            _warned.clear()
        _warned.add(key)
        log.warning("%s (replication from there waits until it succeeds)", exc)
    return exc


def _lifetime_ms(response: Any) -> int:
    lifetime = response.session_lifetime
    if isinstance(lifetime, datetime.timedelta):
        return max(0, int(lifetime.total_seconds() * 1000))
    return max(0, int(lifetime or 0))


async def _step(call: Call, token: bytes, timeout_s: float, where: str, user: str,
                mechanism: str) -> Any:
    response = await call(SaslAuthenticateRequest(auth_bytes=token), timeout_s)
    code = int(response.error_code)
    if code != 0:
        detail = _shown(response.error_message) if response.error_message else "no message"
        raise link_failure(where, f"SASL {mechanism} login as {user!r} refused "
                                  f"(error {code}: {detail})")
    return response


async def authenticate(call: Call, mechanism: str, user: str, password: str,
                       timeout_s: float, where: str) -> int:
    """Log in on a connection whose requests go through ``call``; the session lifetime the
    leader granted, in ms (0: no limit). LinkAuthError when the login fails."""
    handshake = await call(SaslHandshakeRequest(mechanism=mechanism), timeout_s)
    code = int(handshake.error_code)
    offered = [_shown(m)[:64] for m in list(handshake.mechanisms)[:16]]
    if code != 0 or mechanism not in offered:
        raise link_failure(where, f"sasl.mechanism.inter.broker.protocol={mechanism} is "
                                  f"not enabled there (error {code}; it offers "
                                  f"{', '.join(offered) or 'nothing'})")
    if mechanism == "PLAIN":
        token = b"\0" + user.encode() + b"\0" + password.encode()
        return _lifetime_ms(await _step(call, token, timeout_s, where, user, mechanism))
    try:
        scram = ScramClient([mechanism], user, password)
        first_token = scram.get_client_first().encode()
    except ScramException as exc:
        raise link_failure(where, f"{mechanism} cannot start: {_shown(exc)}") from None
    first = await _step(call, first_token, timeout_s, where, user, mechanism)
    try:
        scram.set_server_first(bytes(first.auth_bytes).decode())
        final_token = scram.get_client_final().encode()
    except (ScramException, UnicodeDecodeError) as exc:
        raise link_failure(where, f"{mechanism}: bad server-first message: {_shown(exc)}") from None
    final = await _step(call, final_token, timeout_s, where, user, mechanism)
    try:
        scram.set_server_final(bytes(final.auth_bytes).decode())
    except (ScramException, UnicodeDecodeError) as exc:
        raise link_failure(where, f"{mechanism}: the server's signature does not verify "
                           f"({_shown(exc)})") from None
    return _lifetime_ms(final)
