"""A tiny Kafka client over a raw socket, using kio's message types: for APIs the client
libraries do not expose."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as RespV0
from kio.schema.response_header.v1.header import ResponseHeader as RespV1
from kio.serial import entity_reader, entity_writer


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, request: Any) -> Any:
        cls = type(request)
        self.correlation += 1
        buf = io.BytesIO()
        header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
        entity_writer(header_cls)(buf, header_cls(
            request_api_key=cls.__api_key__, request_api_version=cls.__version__,
            correlation_id=self.correlation, client_id="raw-test"))
        entity_writer(cls)(buf, request)
        payload = buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._recv(4))
        data = self._recv(size)
        resp_cls = load_response_schema(cls.__api_key__, cls.__version__)
        flexible = resp_cls.__flexible__ and cls.__api_key__ != 18
        header, used = entity_reader(RespV1 if flexible else RespV0)(data, 0)
        assert header.correlation_id == self.correlation
        body, _ = entity_reader(resp_cls)(data, used)
        return body

    def _recv(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)


def request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)
