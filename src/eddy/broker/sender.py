"""Write a response: bytes through the transport, file ranges by os.sendfile when the
transport's buffer is empty (so ordering holds), else by pread."""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import Awaitable, Callable, Sized
from typing import Protocol

_SIZE = struct.Struct(">i")


class FileRange(Protocol):
    fd: int
    position: int
    length: int

    def read(self) -> bytes: ...


def _sendfile_nonblocking(sock_fd: int, rng: FileRange) -> int:
    """Send as much of the range as the socket takes now; returns bytes sent."""
    sent = 0
    while sent < rng.length:
        try:
            n = os.sendfile(sock_fd, rng.fd, rng.position + sent, rng.length - sent)
        except (BlockingIOError, InterruptedError):
            break
        if n == 0:
            break
        sent += n
    return sent


class ResponseWriter:
    def __init__(self, transport: asyncio.WriteTransport, drain: Callable[[], Awaitable[None]],
                 use_sendfile: bool) -> None:
        self._transport = transport
        self._drain = drain
        sock = transport.get_extra_info("socket")
        if transport.get_extra_info("ssl_object") is not None:
            use_sendfile = False  # bytes written to the socket would bypass TLS
        self._sock_fd = sock.fileno() if (use_sendfile and sock is not None) else -1
        self.sendfile_bytes = 0

    async def send(self, chunks: list[Sized]) -> None:
        """Write one response. Raises ConnectionResetError if the client has gone (it may
        close while the request is handled): an ordinary disconnect, not an error."""
        transport = self._transport
        if transport.is_closing():
            raise ConnectionResetError("the client closed the connection before the response")
        pending: list[bytes | bytearray | memoryview] = [
            _SIZE.pack(sum(len(c) for c in chunks))
        ]
        for chunk in chunks:
            if isinstance(chunk, bytes | bytearray | memoryview):
                pending.append(chunk)
                continue
            rng: FileRange = chunk  # type: ignore[assignment]
            sent = 0
            if self._sock_fd >= 0:
                transport.writelines(pending)
                pending = []
                if transport.get_write_buffer_size() == 0:
                    sent = _sendfile_nonblocking(self._sock_fd, rng)
                    self.sendfile_bytes += sent
            if sent < rng.length:
                pending.append(
                    rng.read() if sent == 0
                    else os.pread(rng.fd, rng.length - sent, rng.position + sent)
                )
        transport.writelines(pending)
        await self._drain()
