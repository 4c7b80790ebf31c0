"""TLS and SASL for the raw client (``eddy.client.raw``), from the librdkafka properties the
CLI takes with ``-X`` (the same ones its AdminClient is given): ``security.protocol``
(PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), ``sasl.mechanism(s)`` (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512), ``sasl.username``/``sasl.password``, ``ssl.ca.location``,
``ssl.certificate.location``/``ssl.key.location``/``ssl.key.password``,
``enable.ssl.certificate.verification`` and ``ssl.endpoint.identification.algorithm``
(https, librdkafka's default, or none). The login is SaslHandshake v1 then
SaslAuthenticate v2 exchanges (RFC 4616 PLAIN, RFC 5802 SCRAM with scramp's client)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from scramp import ScramClient, ScramException  # type: ignore[import-untyped]

__all__ = ["RawSecurity", "SecurityError", "login", "security_of", "wrap"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: how much of a broker's text goes into a message
_SHOWN = 200


class SecurityError(ConnectionError):
    """The settings are unusable, or the broker refused the TLS or SASL login. Never holds
    the password."""


class _Caller(Protocol):
    def call(self, request: Any) -> Any: ...


@dataclass(frozen=True, slots=True)
class RawSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str = ""
    password: str = ""
    ca_location: str | None = None
    cert_location: str | None = None
    key_location: str | None = None
    key_password: str | None = None
    verify: bool = True
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def _flag(conf: Mapping[str, str], key: str, default: bool) -> bool:
    value = conf.get(key)
    if value is None:
        return default
    text = value.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise SecurityError(f"{key}={value!r}: expected true or false")


def security_of(conf: Mapping[str, str]) -> RawSecurity:
    """The security settings of librdkafka properties; SecurityError naming the property
    when one is not supported here."""
    protocol = conf.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise SecurityError(f"security.protocol={protocol}: expected one of "
                            f"{', '.join(PROTOCOLS)}")
    mechanism = (conf.get("sasl.mechanism") or conf.get("sasl.mechanisms")
                 or "PLAIN").strip().upper()
    if protocol.startswith("SASL_"):
        if mechanism not in MECHANISMS:
            raise SecurityError(f"sasl.mechanism={mechanism}: this command supports "
                                f"{', '.join(MECHANISMS)}")
        if not conf.get("sasl.username"):
            raise SecurityError(f"security.protocol={protocol} needs sasl.username and "
                                "sasl.password")
    identification = conf.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if identification not in ("https", "none", ""):
        raise SecurityError(f"ssl.endpoint.identification.algorithm={identification}: "
                            "expected https or none")
    verify = _flag(conf, "enable.ssl.certificate.verification", True)
    return RawSecurity(
        protocol=protocol, mechanism=mechanism, username=conf.get("sasl.username", ""),
        password=conf.get("sasl.password", ""), ca_location=conf.get("ssl.ca.location"),
        cert_location=conf.get("ssl.certificate.location"),
        key_location=conf.get("ssl.key.location"), key_password=conf.get("ssl.key.password"),
        verify=verify, check_hostname=verify and identification == "https")


def _context(sec: RawSecurity) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = sec.check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED if sec.verify else ssl.CERT_NONE
    try:
        if sec.ca_location:
            ctx.load_verify_locations(cafile=sec.ca_location)
        elif sec.verify:
            ctx.load_default_certs()
        if sec.cert_location:
            ctx.load_cert_chain(sec.cert_location, sec.key_location, sec.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise SecurityError(f"cannot load the TLS files (ssl.ca.location, "
                            f"ssl.certificate.location, ssl.key.location): {exc}") from None
    return ctx


def wrap(sock: socket.socket, host: str, sec: RawSecurity) -> socket.socket:
    """``sock`` with the TLS handshake done (the certificate checked as ``sec`` says)."""
    try:
        return _context(sec).wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        raise SecurityError(f"the broker's certificate does not verify: "
                            f"{exc.verify_message or exc}") from None
    except (ssl.SSLError, OSError) as exc:
        sock.close()
        raise SecurityError(f"TLS handshake failed: {exc}") from None


def _shown(text: object) -> str:
    out = str(text)
    return out if len(out) <= _SHOWN else out[:_SHOWN] + "..."


def _step(client: _Caller, token: bytes, sec: RawSecurity) -> bytes:
    resp = client.call(SaslAuthenticateRequest(auth_bytes=token))
    if int(resp.error_code) != 0:
        detail = _shown(resp.error_message) if resp.error_message else "no message"
        raise SecurityError(f"SASL {sec.mechanism} login as {sec.username!r} refused: "
                            f"{detail}")
    return bytes(resp.auth_bytes)


def login(client: _Caller, sec: RawSecurity) -> None:
    """SASL login on a fresh connection; SecurityError when the broker refuses it."""
    handshake = client.call(SaslHandshakeRequest(mechanism=sec.mechanism))
    offered = [_shown(m)[:64] for m in list(handshake.mechanisms)[:16]]
    if int(handshake.error_code) != 0:
        raise SecurityError(f"sasl.mechanism={sec.mechanism} is not enabled on the broker "
                            f"(it offers {', '.join(offered) or 'nothing'})")
    if sec.mechanism == "PLAIN":
        _step(client, b"\0" + sec.username.encode() + b"\0" + sec.password.encode(), sec)
        return
    try:
        scram = ScramClient([sec.mechanism], sec.username, sec.password)
        server_first = _step(client, scram.get_client_first().encode(), sec)
        scram.set_server_first(server_first.decode())
        server_final = _step(client, scram.get_client_final().encode(), sec)
        scram.set_server_final(server_final.decode())
    except (ScramException, UnicodeDecodeError) as exc:
        raise SecurityError(f"SASL {sec.mechanism}: the broker's answer does not verify "
                            f"({_shown(exc)})") from None
