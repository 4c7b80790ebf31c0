"""Whom a gateway forwards an op for: the principal and address of the Kafka client whose
request it serves, carried to the owning broker (TAG_KAFKA_OP_AS) so the broker's
authorizer judges the client, not the gateway.

The gateway's handlers run inside ``acting_for(req)`` (eddy.gateway.handlers.table wraps each),
which puts the client in a context variable; the forwarder reads it when it sends an op.
Tasks a handler starts inherit it (asyncio copies the context), and work the gateway does
on its own (outside any request) has no client: it travels under TAG_KAFKA_OP as before.

On the broker the client becomes a ``Session`` (``session_of``): ``eddy.security.checks``
reads its principal and address as it reads a direct client's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from eddy.security.session import Session

__all__ = ["MAX_HOST", "MAX_PRINCIPAL", "ClientId", "acting_for", "check_client",
           "current_client", "session_of"]

#: the longest principal ("Type:name"; a SCRAM user name is at most 1024 characters) and
#: client address a broker takes from a gateway
MAX_PRINCIPAL = 1100
MAX_HOST = 255
#: the listener name the broker's sessions of gateway clients carry
GATEWAY_LISTENER = "GATEWAY"


@dataclass(frozen=True, slots=True)
class ClientId:
    principal: str
    host: str


_CLIENT: ContextVar[ClientId | None] = ContextVar("eddy_gateway_client", default=None)


def current_client() -> ClientId | None:
    """The client the current request is served for (None outside a client's request)."""
    return _CLIENT.get()


@contextmanager
def acting_for(req: Any) -> Iterator[None]:
    """While serving ``req``: ops forwarded carry its connection's principal and address."""
    session = getattr(req, "session", None)
    if session is None:
        yield
        return
    token = _CLIENT.set(ClientId(str(session.principal), str(session.peer_ip or "")))
    try:
        yield
    finally:
        _CLIENT.reset(token)


def check_client(principal: str, host: str) -> str | None:
    """Why a principal/host a gateway sent cannot be used (None: it can)."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        return f"principal: {principal[:64]!r} is not TYPE:NAME"
    if len(principal) > MAX_PRINCIPAL:
        return f"principal: {len(principal)} characters, at most {MAX_PRINCIPAL}"
    if len(host) > MAX_HOST:
        return f"host: {len(host)} characters, at most {MAX_HOST}"
    return None


def session_of(client: ClientId) -> Session:
    """The broker-side session of a gateway's client: authenticated (the gateway did it),
    with the client's principal and address."""
    return Session(GATEWAY_LISTENER, client.host, None, client.principal)
