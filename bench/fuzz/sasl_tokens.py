"""Fuzz target of the SASL tokens a client sends before it is authenticated (Eddy's
``eddy.security.sasl``): PLAIN's NUL-separated fields and SCRAM's client-first and
client-final messages. Only ``SaslFailure`` (answered SASL_AUTHENTICATION_FAILED) is
documented; anything else escaping is a finding.

The first input byte picks what the rest is: 0 a PLAIN token, 1 a SCRAM-SHA-256
client-first message, 2 a client-final message after a valid client-first, 3 both (split
at the first NUL) with SCRAM-SHA-512. ``seeds()`` gives well-formed inputs of each kind.
"""

from __future__ import annotations

import asyncio
import contextlib

from eddy.metadata.records import ScramCredential
from eddy.security.sasl import SaslFailure, make_exchange
from eddy.security.scram import MECHANISMS, derive_keys, salted_password

_SALT = b"fuzz-salt-16byte"
_PASSWORD = b"fuzz-password"
FIRST = b"n,,n=fuzz,r=fyko+d2lbbFgONRv9qkxdawL"


def _credential(mechanism: int) -> ScramCredential:
    mech = MECHANISMS[mechanism]
    keys = derive_keys(mech, salted_password(mech, _PASSWORD, _SALT, 4096))
    return ScramCredential("fuzz", mechanism, _SALT, keys.stored_key, keys.server_key, 4096)


_CREDS = {(c.user, c.mechanism): c for c in (_credential(1), _credential(2))}


def _lookup(user: str, mechanism: int) -> ScramCredential | None:
    return _CREDS.get((user, mechanism))


async def _run(data: bytes) -> None:
    kind, body = (data[0] % 4, data[1:]) if data else (0, b"")
    if kind == 0:
        await make_exchange("PLAIN", _lookup).step(body)
    elif kind == 1:
        await make_exchange("SCRAM-SHA-256", _lookup).step(body)
    else:
        mechanism = "SCRAM-SHA-256" if kind == 2 else "SCRAM-SHA-512"
        exchange = make_exchange(mechanism, _lookup)
        first, _, final = body.partition(b"\x00") if kind == 3 else (FIRST, b"", body)
        await exchange.step(first)
        await exchange.step(final)


_LOOP: asyncio.AbstractEventLoop | None = None


def check_input(data: bytes) -> None:
    """One input; returns normally on success or a documented SaslFailure."""
    global _LOOP
    if _LOOP is None:
        _LOOP = asyncio.new_event_loop()
    with contextlib.suppress(SaslFailure):
        _LOOP.run_until_complete(_run(data))


def seeds() -> list[bytes]:
    """Well-formed inputs of each kind (a real PLAIN token, SCRAM messages)."""
    return [
        b"\x00\x00fuzz\x00" + _PASSWORD,
        b"\x00fuzz\x00fuzz\x00wrong",
        b"\x01" + FIRST,
        b"\x02c=biws,r=fyko+d2lbbFgONRv9qkxdawLabc,p=AAAA",
        b"\x03" + FIRST + b"\x00c=biws,r=x,p=dGVzdA==",
    ]
