"""``LeaderLink``: a follower's Kafka connection to the broker it replicates from.

Plain Kafka request/response over TCP with kio's message types (Fetch with this node's
replica id, OffsetForLeaderEpoch), one request in flight. A response is the leader's, but
still a peer's bytes: its size is checked against a cap before anything is allocated, and
every length and count inside it against the bytes present (``decode_response``), so a
broken or hostile leader costs this connection, never the process.

The socket is read straight into the response's own buffer (``asyncio.BufferedProtocol``):
a fetch answer of a megabyte or more is copied once on its way in, not into a stream
buffer, out of it, and moved down behind it (measured: ~14 % of a follower's time).
"""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any, cast

from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from eddy.client.raw import MalformedResponse, decode_response

__all__ = ["LeaderLink", "MalformedResponse"]

_SIZE = struct.Struct(">i")


class _Frames(asyncio.BufferedProtocol):
    """Reads size-prefixed frames into buffers of their size; holds at most one finished
    frame (reading pauses until it is taken: memory stays one frame per link)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.transport: asyncio.Transport | None = None
        self._head = bytearray(4)
        self._frame: bytearray | None = None  # the frame being read (after its size)
        self._view = memoryview(self._head)
        self._got = 0
        self._done: bytearray | None = None
        self._failure: BaseException | None = None
        self._waiter: asyncio.Future[bytearray] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._failure is not None:  # aborted: whatever still arrives is dropped
            return memoryview(self._head)
        return self._view[self._got:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._failure is not None:
            return
        self._got += nbytes
        if self._got < len(self._view):
            return
        if self._frame is None:
            (size,) = _SIZE.unpack(self._head)
            if not 4 <= size <= self.max_bytes:
                self._fail(MalformedResponse(
                    f"response of {size} bytes is outside 4..{self.max_bytes}"))
                return
            self._frame = bytearray(size)
            self._view, self._got = memoryview(self._frame), 0
            return
        self._done, self._frame = self._frame, None
        self._view, self._got = memoryview(self._head), 0
        if self.transport is not None:
            self.transport.pause_reading()  # until this one is taken
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("the leader closed the connection"))

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._done is not None:
            waiter.set_result(self._take())
        elif self._failure is not None:
            waiter.set_exception(self._failure)

    def _take(self) -> bytearray:
        frame, self._done = self._done, None
        assert frame is not None
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
        return frame

    async def next_frame(self) -> bytearray:
        if self._done is not None:
            return self._take()
        if self._failure is not None:
            raise self._failure
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            return await self._waiter
        finally:
            self._waiter = None


class LeaderLink:
    def __init__(self, transport: asyncio.Transport, frames: _Frames, client_id: str) -> None:
        self._transport = transport
        self._frames = frames
        self._correlation = 0
        self.client_id = client_id

    @classmethod
    async def connect(cls, address: str, client_id: str, max_response_bytes: int,
                      timeout_s: float) -> LeaderLink:
        host, _, port = address.rpartition(":")
        frames = _Frames(max_response_bytes)
        transport, _ = await asyncio.wait_for(
            asyncio.get_running_loop().create_connection(
                lambda: frames, host.strip("[]"), int(port)), timeout_s)
        return cls(transport, frames, client_id)

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
        self._transport.write(frame)
        del frame
        data = await asyncio.wait_for(self._frames.next_frame(), timeout_s)
        return decode_response(cls.__api_key__, cls.__version__, self._correlation,
                               memoryview(data).toreadonly())

    async def close(self) -> None:
        self._transport.close()
