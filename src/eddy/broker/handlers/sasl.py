"""SaslHandshake (v0, v1) and SaslAuthenticate (v0-v2): the client's side of the SASL
exchange, run by the listener's ``SaslService`` on the connection's ``Session``.

Kafka's rules: a handshake names a mechanism of sasl.enabled.mechanisms (else
UNSUPPORTED_SASL_MECHANISM with the enabled list, and the connection closes); a failed
exchange answers SASL_AUTHENTICATION_FAILED and closes; SASL requests on a listener without
SASL, or out of order, answer ILLEGAL_SASL_STATE and close. After a v0 handshake the tokens
come as raw frames (``legacy_token``), not in SaslAuthenticate.
"""

from __future__ import annotations

import datetime
from typing import Any

from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.sasl import SaslFailure
from eddy.security.session import Session

__all__ = ["legacy_token", "sasl_authenticate", "sasl_handshake"]

NOT_SASL = "this listener does not use SASL"


async def sasl_handshake(node: Any, req: Request) -> Any:
    mod = response_module(ApiKey.SASL_HANDSHAKE, req.api_version)
    session: Session | None = req.session
    if session is None or session.sasl is None:
        if session is not None:
            session.close_reason = f"SaslHandshake: {NOT_SASL}"
        return build(mod.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state,
                     mechanisms=())
    service = session.sasl
    enabled = tuple(service.mechanisms)
    mechanism = str(req.body.mechanism)
    if mechanism not in enabled:
        session.close_reason = (f"SaslHandshake: mechanism {mechanism[:64]!r} is not enabled "
                                f"(sasl.enabled.mechanisms={','.join(enabled)})")
        return build(mod.SaslHandshakeResponse,
                     error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
    refused = service.begin(session, mechanism, req.api_version)
    if refused is not None:
        session.close_reason = f"SaslHandshake: {refused}"
        return build(mod.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state,
                     mechanisms=enabled)
    return build(mod.SaslHandshakeResponse, error_code=ErrorCode.none, mechanisms=enabled)


def _authenticate_response(mod: Any, code: ErrorCode, message: str | None, answer: bytes,
                           lifetime_ms: int) -> Any:
    return build(mod.SaslAuthenticateResponse, error_code=code, error_message=message,
                 auth_bytes=answer,
                 session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))


async def sasl_authenticate(node: Any, req: Request) -> Any:
    mod = response_module(ApiKey.SASL_AUTHENTICATE, req.api_version)
    session: Session | None = req.session
    if (session is None or session.sasl is None or session.exchange is None
            or session.legacy_tokens):
        why = NOT_SASL if session is None or session.sasl is None else (
            "SaslAuthenticate before a SaslHandshake v1 chose a mechanism")
        if session is not None:
            session.close_reason = f"SaslAuthenticate: {why}"
        return _authenticate_response(mod, ErrorCode.illegal_sasl_state,
                                      f"Unexpected SaslAuthenticate: {why}", b"", 0)
    try:
        answer, lifetime = await session.sasl.step(session, bytes(req.body.auth_bytes),
                                                   req.api_version >= 1)
    except SaslFailure as exc:
        return _authenticate_response(mod, ErrorCode.sasl_authentication_failed, str(exc),
                                      b"", 0)
    return _authenticate_response(mod, ErrorCode.none, None, answer, lifetime)


async def legacy_token(session: Session, token: bytes) -> bytes:
    """A raw token after a v0 SaslHandshake: the raw answer (Kafka closes the connection
    on a failure without an answer: SaslFailure propagates)."""
    assert session.sasl is not None
    answer, _ = await session.sasl.step(session, token, False)
    return answer
