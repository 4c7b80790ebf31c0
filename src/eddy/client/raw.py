"""A minimal blocking Kafka request/response client on kio's message types, for admin APIs
librdkafka's Python binding lacks (DescribeTransactions, ListTransactions, ...)."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as RespV0
from kio.schema.response_header.v1.header import ResponseHeader as RespV1
from kio.serial import entity_reader, entity_writer

from eddy.client import raw_security
from eddy.client.raw_security import RawSecurity
from eddy.protocol.bounds import BoundsError, check, is_panic

API_VERSIONS = 18
#: a response larger than this is refused before it is read (librdkafka's default
#: receive.message.max.bytes is 100 MB); callers that ask for more pass their own cap
DEFAULT_MAX_RESPONSE_BYTES = 100 * 1024 * 1024
#: responses up to this size are received into one buffer sized up front; larger ones
#: grow with the bytes that actually arrive
_PREALLOCATE = 8 * 1024 * 1024
#: the largest SaslHandshake/SaslAuthenticate answer taken (a SCRAM server-first is ~100 B)
_MAX_LOGIN_RESPONSE = 64 * 1024


class MalformedResponse(ConnectionError):
    """The broker sent a response that does not decode (the field is named)."""


class RawClient:
    """One connection; with ``security`` (see ``raw_security.security_of``) over TLS
    and/or logged in with SASL before the first request, as the listener wants."""

    def __init__(self, host: str, port: int, timeout_s: float = 15.0,
                 client_id: str = "eddy-cli",
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 security: RawSecurity | None = None) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._correlation = 0
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        if security is not None:
            try:
                if security.tls:
                    self._sock = raw_security.wrap(self._sock, host, security)
                if security.sasl:  # the login's answers are small: a tight cap meanwhile
                    self.max_response_bytes = min(max_response_bytes, _MAX_LOGIN_RESPONSE)
                    raw_security.login(self, security)
                    self.max_response_bytes = max_response_bytes
            except BaseException:
                self._sock.close()
                raise

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, request: Any) -> Any:
        """Send one request (a kio request instance) and return the decoded response."""
        cls = type(request)
        self._correlation += 1
        buf = io.BytesIO()
        header = HeaderV2 if cls.__flexible__ else HeaderV1
        entity_writer(header)(buf, header(
            request_api_key=cls.__api_key__, request_api_version=cls.__version__,
            correlation_id=self._correlation, client_id=self.client_id))
        entity_writer(cls)(buf, request)
        payload = buf.getvalue()
        self._sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._recv(4))
        if not 4 <= size <= self.max_response_bytes:
            raise MalformedResponse(
                f"response of {size} bytes is outside 4..{self.max_response_bytes}")
        data = self._recv(size)
        return decode_response(cls.__api_key__, cls.__version__, self._correlation, data)

    def _recv(self, n: int) -> memoryview:
        if n > _PREALLOCATE:
            return self._recv_growing(n)
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            chunk = self._sock.recv_into(view[got:])
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            got += chunk
        return view.toreadonly()

    def _recv_growing(self, n: int) -> memoryview:
        """A large response: memory follows the bytes received, not the size announced."""
        out = bytearray()
        while len(out) < n:
            chunk = self._sock.recv(min(n - len(out), _PREALLOCATE))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            out += chunk
        return memoryview(out).toreadonly()


def decode_response(api_key: int, version: int, correlation_id: int,
                    data: bytes | bytearray | memoryview) -> Any:
    """Decode a response frame (size prefix excluded) after checking every length and
    count in it against the bytes present. Raises MalformedResponse naming the field."""
    resp_cls = load_response_schema(api_key, version)
    flexible = resp_cls.__flexible__ and api_key != API_VERSIONS
    header_cls = RespV1 if flexible else RespV0
    try:
        used = check(header_cls, data, 0)
        check(resp_cls, data, used)
    except BoundsError as exc:
        raise MalformedResponse(f"api {api_key} v{version} response: {exc}") from None
    try:
        resp_header, used = entity_reader(header_cls)(data, 0)
        body, _ = entity_reader(resp_cls)(data, used)
    except BaseException as exc:  # kio raises a variety of errors on garbage input
        if not isinstance(exc, Exception) and not is_panic(exc):
            raise
        raise MalformedResponse(
            f"api {api_key} v{version} response: {type(exc).__name__}: {exc}") from None
    if resp_header.correlation_id != correlation_id:
        raise ConnectionError("response out of order")
    return body
