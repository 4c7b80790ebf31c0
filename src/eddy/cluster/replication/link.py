"""``LeaderLink``: a follower's Kafka connection to the broker it replicates from.

Plain Kafka request/response over TCP with kio's message types (Fetch with this node's
replica id, OffsetForLeaderEpoch), one request in flight. A response is the leader's, but
still a peer's bytes: its size is checked against a cap before anything is allocated, and
every length and count inside it against the bytes present (``decode_response``), so a
broken or hostile leader costs this connection, never the process.

The socket is read straight into the response's own buffer (``asyncio.BufferedProtocol``):
a fetch answer of a megabyte or more is copied once on its way in, not into a stream
buffer, out of it, and moved down behind it (measured: ~14 % of a follower's time).

The link speaks the inter-broker listener's security protocol (``InterBrokerSecurity``):
TLS with the node's client context, and on SASL a login (``link_auth``) before the first
request, repeated before the session the leader granted runs out.
"""

from __future__ import annotations

import asyncio
import io
import ssl
import struct
import time
from typing import TYPE_CHECKING, Any, cast

from kio.serial import entity_writer

from eddy.client.raw import MalformedResponse, decode_response
from eddy.cluster.replication.link_auth import (
    MAX_AUTH_RESPONSE_BYTES,
    authenticate,
    link_failure,
)
from eddy.security.tls import TlsError

if TYPE_CHECKING:
    from eddy.security.inter_broker import InterBrokerSecurity

__all__ = ["LeaderLink", "MalformedResponse"]

_SIZE = struct.Struct(">i")
#: re-authenticate when this share of the granted session lifetime has passed (Kafka:
#: 85-95 %)
REAUTH_AT = 0.85


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
        self._security: InterBrokerSecurity | None = None
        self._where = ""
        self._reauth_at: float | None = None  # monotonic time of the next login

    @classmethod
    async def connect(cls, address: str, client_id: str, max_response_bytes: int,
                      timeout_s: float, security: InterBrokerSecurity | None = None
                      ) -> LeaderLink:
        """A link to ``address``, secured as ``security`` says (None: plain TCP): TLS
        verified against the node's trusted CAs, then the SASL login. A TlsError, a
        LinkAuthError (both OSErrors) or a MalformedResponse when that fails."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        frames = _Frames(max_response_bytes)
        where = f"{address} ({security.protocol if security else 'PLAINTEXT'})"
        try:
            context = security.ssl_context() if security is not None else None
            tls: dict[str, Any] = ({} if context is None else
                                   {"ssl": context, "server_hostname": host,
                                    "ssl_handshake_timeout": timeout_s})
            transport, _ = await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: frames, host, int(port), **tls), timeout_s)
        except ssl.SSLError as exc:  # the leader's certificate, or ours, refused
            raise link_failure(where, f"TLS handshake failed: {exc.reason or exc}") from None
        except TlsError as exc:  # this node's PEM material does not load
            raise link_failure(where, str(exc)) from None
        link = cls(transport, frames, client_id)
        link._where = where
        if security is not None and security.mechanism is not None:
            link._security = security
            try:
                await link._login(timeout_s)
            except BaseException:
                await link.close()
                raise
        return link

    async def _login(self, timeout_s: float) -> None:
        security = self._security
        assert security is not None and security.mechanism is not None
        assert security.user is not None and security.password is not None
        cap, self._frames.max_bytes = self._frames.max_bytes, MAX_AUTH_RESPONSE_BYTES
        try:
            lifetime_ms = await authenticate(self._call, security.mechanism, security.user,
                                             security.password, timeout_s, self._where)
        finally:
            self._frames.max_bytes = cap
        self._reauth_at = (time.monotonic() + lifetime_ms / 1000 * REAUTH_AT
                           if lifetime_ms > 0 else None)

    async def call(self, request: Any, timeout_s: float) -> Any:
        """Send a kio request, return its decoded response (logging in again first when
        the SASL session is about to end)."""
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            await self._login(timeout_s)
        return await self._call(request, timeout_s)

    async def _call(self, request: Any, timeout_s: float) -> Any:
        if self._transport.is_closing():
            # the leader hung up (or the link was closed) since the last answer: a write now
            # would raise uvloop's RuntimeError ("the handler is closed"), not a
            # connection error the fetcher retries
            raise ConnectionResetError(f"the connection to {self._where or 'the leader'} "
                                       "is closed")
        cls = type(request)
        header = cls.__header_schema__  # v2 for flexible versions, v1 before
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header)(buf, header(
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
