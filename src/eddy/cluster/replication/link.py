"""``LeaderLink``: a follower's Kafka connection to the broker it replicates from.

Plain Kafka request/response over TCP with kio's message types (Fetch with this node's
replica id, OffsetForLeaderEpoch), one request in flight. A response is the leader's, but
still a peer's bytes: its size is checked against a cap before anything is read, and every
length and count inside it against the bytes present (``decode_response``), so a broken or
hostile leader costs this connection, never the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import struct
from typing import Any

from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from eddy.client.raw import MalformedResponse, decode_response

__all__ = ["LeaderLink", "MalformedResponse"]

_SIZE = struct.Struct(">i")


class LeaderLink:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 client_id: str, max_response_bytes: int) -> None:
        self._reader = reader
        self._writer = writer
        self._correlation = 0
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes

    @classmethod
    async def connect(cls, address: str, client_id: str, max_response_bytes: int,
                      timeout_s: float) -> LeaderLink:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port)), timeout_s)
        return cls(reader, writer, client_id, max_response_bytes)

    async def call(self, request: Any, timeout_s: float) -> Any:
        """Send a flexible-version kio request, return its decoded response."""
        cls = type(request)
        if not cls.__flexible__:
            raise ValueError("only flexible request versions are sent on a leader link")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(RequestHeader)(buf, RequestHeader(
            request_api_key=cls.__api_key__, request_api_version=cls.__version__,
            correlation_id=self._correlation, client_id=self.client_id))
        entity_writer(cls)(buf, request)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        self._writer.write(frame)
        del frame
        return await asyncio.wait_for(self._response(cls), timeout_s)

    async def _response(self, cls: Any) -> Any:
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 4 <= size <= self.max_response_bytes:
            raise MalformedResponse(
                f"response of {size} bytes is outside 4..{self.max_response_bytes}")
        data = await self._reader.readexactly(size)
        return decode_response(cls.__api_key__, cls.__version__, self._correlation, data)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)
