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

API_VERSIONS = 18


class RawClient:
    def __init__(self, host: str, port: int, timeout_s: float = 15.0,
                 client_id: str = "eddy-cli") -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._correlation = 0
        self.client_id = client_id

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
        data = self._recv(size)
        resp_cls = load_response_schema(cls.__api_key__, cls.__version__)
        flexible = resp_cls.__flexible__ and cls.__api_key__ != API_VERSIONS
        resp_header, used = entity_reader(RespV1 if flexible else RespV0)(data, 0)
        if resp_header.correlation_id != self._correlation:
            raise ConnectionError("response out of order")
        body, _ = entity_reader(resp_cls)(data, used)
        return body

    def _recv(self, n: int) -> memoryview:
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            chunk = self._sock.recv_into(view[got:])
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            got += chunk
        return view.toreadonly()
