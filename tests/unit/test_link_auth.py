"""A follower's LeaderLink logs in on a SASL inter-broker listener before its first request:
SaslHandshake v1 then SaslAuthenticate v2 (SCRAM or PLAIN), against a fake leader on a real
socket. A good login lets requests through (and is repeated before the granted session
ends); a mechanism the leader does not offer, a refused login, a SCRAM answer that does not
verify and an oversized answer each fail the connect with a clear error, no password in it."""

from __future__ import annotations

import asyncio
import datetime
import io
import ssl
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from integration.security_nodes import make_certs
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.request_header.v1.header import RequestHeader as ReqV1
from kio.schema.request_header.v2.header import RequestHeader as ReqV2
from kio.schema.response_header.v0.header import ResponseHeader as RespV0
from kio.schema.response_header.v1.header import ResponseHeader as RespV1
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from scramp import ScramMechanism  # type: ignore[import-untyped]

from eddy.client.raw import MalformedResponse
from eddy.cluster.replication.link import LeaderLink
from eddy.cluster.replication.link_auth import LinkAuthError
from eddy.security.inter_broker import InterBrokerSecurity
from eddy.security.tls import TlsMaterial

USER, PASSWORD = "broker", "s3cret-password"
REQUESTS: dict[int, Any] = {17: SaslHandshakeRequest, 36: SaslAuthenticateRequest,
                            3: MetadataRequest}
METADATA = MetadataRequest(topics=(), include_topic_authorized_operations=False)
#: what the fake leader answers: (api key, request) -> a response, or raw bytes to send
Script = Callable[[int, Any], Any]


def encode(response: Any, correlation: int) -> bytes:
    buf = io.BytesIO()
    if type(response).__flexible__:
        entity_writer(RespV1)(buf, RespV1(correlation_id=correlation))
    else:
        entity_writer(RespV0)(buf, RespV0(correlation_id=correlation))
    entity_writer(type(response))(buf, response)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


class FakeLeader:
    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.tls = tls
        self.seen: list[int] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                data = await reader.readexactly(size)
                api_key = struct.unpack_from(">h", data)[0]
                cls = REQUESTS[api_key]
                header, used = entity_reader(ReqV2 if cls.__flexible__ else ReqV1)(data, 0)
                request, _ = entity_reader(cls)(data, used)
                self.seen.append(api_key)
                answer = self.script(api_key, request)
                writer.write(answer if isinstance(answer, bytes)
                             else encode(answer, header.correlation_id))
                await writer.drain()
        except (asyncio.IncompleteReadError, OSError):
            pass
        finally:
            writer.close()


def handshake(mechanisms: tuple[str, ...], code: int = 0) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=ErrorCode(code), mechanisms=mechanisms)


def authenticated(token: bytes, code: int = 0, message: str | None = None,
                  lifetime_ms: int = 0) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=ErrorCode(code), error_message=message, auth_bytes=token,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms))


def scram_leader(password: str = PASSWORD, lifetime_ms: int = 0,
                 tamper_final: bool = False) -> Script:
    """A leader checking SCRAM-SHA-512 logins of USER with scramp's server side."""
    mechanism = ScramMechanism("SCRAM-SHA-512")
    info = mechanism.make_auth_info(password, iteration_count=4096)
    state: dict[str, Any] = {}

    def script(api_key: int, request: Any) -> Any:
        if api_key == 17:
            return handshake(("SCRAM-SHA-256", "SCRAM-SHA-512"))
        if api_key == 3:
            return MetadataResponse(brokers=(), cluster_id=None,
                                    controller_id=BrokerId(-1), topics=(),
                                    throttle_time=datetime.timedelta(0))
        token = bytes(request.auth_bytes).decode()
        if token.startswith("n,"):  # a client-first message
            state["server"] = mechanism.make_server(lambda _user: info)
            state["server"].set_client_first(token)
            return authenticated(state["server"].get_server_first().encode())
        server = state.pop("server")
        try:
            server.set_client_final(token)
        except Exception:
            return authenticated(b"", 58, "Authentication failed during authentication due to "
                                          "invalid credentials with SASL mechanism SCRAM-SHA-512")
        final = server.get_server_final()
        if tamper_final:
            final = final[:-4] + ("AAAA" if not final.endswith("AAAA") else "BBBB")
        return authenticated(final.encode(), lifetime_ms=lifetime_ms)

    return script


def security(mechanism: str = "SCRAM-SHA-512", password: str = PASSWORD
             ) -> InterBrokerSecurity:
    return InterBrokerSecurity("SASL_PLAINTEXT", mechanism, USER, password, None, "/nonexistent")


async def connect(address: str, sec: InterBrokerSecurity) -> LeaderLink:
    return await LeaderLink.connect(address, "test", 1 << 20, 5.0, sec)


def test_scram_login_then_requests() -> None:
    async def main() -> list[int]:
        leader = FakeLeader(scram_leader())
        async with leader as address:
            link = await connect(address, security())
            answer = await link.call(METADATA, 5.0)
            assert isinstance(answer, MetadataResponse)
            await link.close()
        return leader.seen

    assert asyncio.run(main()) == [17, 36, 36, 3]


def test_session_lifetime_means_a_new_login_before_it_ends() -> None:
    async def main() -> list[int]:
        leader = FakeLeader(scram_leader(lifetime_ms=60_000))
        async with leader as address:
            link = await connect(address, security())
            due = link._reauth_at
            assert due is not None  # 85 % of the minute granted
            assert 50 < due - time.monotonic() <= 51
            link._reauth_at = time.monotonic()  # the minute passes
            await link.call(METADATA, 5.0)
            await link.close()
        return leader.seen

    assert asyncio.run(main()) == [17, 36, 36, 17, 36, 36, 3]


def test_plain_login() -> None:
    tokens: list[bytes] = []

    def script(api_key: int, request: Any) -> Any:
        if api_key == 17:
            return handshake(("PLAIN",))
        tokens.append(bytes(request.auth_bytes))
        return authenticated(b"")

    async def main() -> None:
        async with FakeLeader(script) as address:
            await (await connect(address, security("PLAIN"))).close()

    asyncio.run(main())
    assert tokens == [b"\0broker\0" + PASSWORD.encode()]


def fails(script: Script, sec: InterBrokerSecurity | None = None) -> BaseException:
    async def main() -> BaseException:
        async with FakeLeader(script) as address:
            with pytest.raises((LinkAuthError, MalformedResponse)) as info:
                await connect(address, sec or security())
            return info.value

    exc = asyncio.run(main())
    assert PASSWORD not in str(exc)
    return exc


def test_mechanism_not_offered() -> None:
    exc = fails(lambda api_key, request: handshake(("PLAIN",), code=33))
    assert isinstance(exc, LinkAuthError)
    assert "SCRAM-SHA-512 is not enabled" in str(exc) and "offers PLAIN" in str(exc)
    # an answer without error that still does not list the mechanism is refused too
    exc = fails(lambda api_key, request: handshake(("SCRAM-SHA-256",)))
    assert "offers SCRAM-SHA-256" in str(exc)


def test_wrong_password_is_refused() -> None:
    exc = fails(scram_leader(password="another-password"))
    assert isinstance(exc, LinkAuthError)
    assert "refused (error 58" in str(exc) and "'broker'" in str(exc)


def test_server_signature_that_does_not_verify() -> None:
    exc = fails(scram_leader(tamper_final=True))
    assert isinstance(exc, LinkAuthError) and "signature does not verify" in str(exc)


def test_garbage_server_first() -> None:
    def script(api_key: int, request: Any) -> Any:
        if api_key == 17:
            return handshake(("SCRAM-SHA-512",))
        return authenticated(b"\xff\xfe not scram")

    exc = fails(script)
    assert isinstance(exc, LinkAuthError) and "bad server-first" in str(exc)


def test_oversized_answer_fails_before_allocation() -> None:
    def script(api_key: int, request: Any) -> Any:
        return struct.pack(">i", 50 << 20)  # 50 MB announced: above the login's cap

    exc = fails(script)
    assert isinstance(exc, MalformedResponse) and "outside" in str(exc)


def test_malformed_answer() -> None:
    def script(api_key: int, request: Any) -> Any:
        return struct.pack(">i", 6) + b"\0\0\0\1\0\0"  # the header, then a cut body

    exc = fails(script)
    assert isinstance(exc, (MalformedResponse, LinkAuthError))


def tls_security(tmp_path: Path, ca_dir: str) -> tuple[InterBrokerSecurity, ssl.SSLContext]:
    """A SASL_SSL client trusting the CA made in ``ca_dir``, and a leader's server context
    with a certificate of the CA made in ``server``."""
    server = make_certs(tmp_path / "server")
    trusted = server if ca_dir == "server" else make_certs(tmp_path / ca_dir)
    material = TlsMaterial(None, None, None, None, str(trusted.ca), None, "none")
    sec = InterBrokerSecurity("SASL_SSL", "SCRAM-SHA-512", USER, PASSWORD, material,
                              str(tmp_path / "scratch"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(server.server_chain, server.server_key)
    return sec, ctx


def test_scram_over_tls(tmp_path: Path) -> None:
    sec, server_ctx = tls_security(tmp_path, "server")

    async def main() -> list[int]:
        leader = FakeLeader(scram_leader(), tls=server_ctx)
        async with leader as address:
            link = await connect(address, sec)
            await link.call(METADATA, 5.0)
            await link.close()
        return leader.seen

    assert asyncio.run(main()) == [17, 36, 36, 3]


def test_a_leader_certificate_of_another_ca_is_refused(tmp_path: Path) -> None:
    sec, server_ctx = tls_security(tmp_path, "elsewhere")

    async def main() -> BaseException:
        async with FakeLeader(scram_leader(), tls=server_ctx) as address:
            with pytest.raises(LinkAuthError) as info:
                await connect(address, sec)
            return info.value

    exc = asyncio.run(main())
    assert "TLS handshake failed" in str(exc) and "CERTIFICATE_VERIFY_FAILED" in str(exc)
