"""The Kafka listener: accepts connections and runs each one's request loop."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Sized
from typing import Any, cast

from eddy.broker.broker import Broker
from eddy.broker.handlers import (
    admin,
    api_versions,
    configs,
    coordinator,
    fetch,
    groups,
    list_offsets,
    log_admin,
    metadata,
    produce,
    producer_id,
    transactions,
)
from eddy.broker.sender import ResponseWriter
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import (
    Encoded,
    MalformedRequest,
    Request,
    decode_request,
    encode_response,
    peek_header,
    supported_version,
)
from eddy.protocol.errors import CloseConnection

log = logging.getLogger(__name__)

Handler = Callable[[Broker, Request], Awaitable[Any]]

HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.CREATE_TOPICS: admin.create_topics,
    ApiKey.DELETE_TOPICS: admin.delete_topics,
    ApiKey.CREATE_PARTITIONS: admin.create_partitions,
    ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
    ApiKey.FIND_COORDINATOR: coordinator.find_coordinator,
    ApiKey.DESCRIBE_CONFIGS: configs.describe_configs,
    ApiKey.ALTER_CONFIGS: configs.alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.incremental_alter_configs,
    ApiKey.DELETE_RECORDS: log_admin.delete_records,
    ApiKey.DESCRIBE_LOG_DIRS: log_admin.describe_log_dirs,
    ApiKey.INIT_PRODUCER_ID: producer_id.init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: transactions.add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: transactions.add_offsets_to_txn,
    ApiKey.END_TXN: transactions.end_txn,
    ApiKey.TXN_OFFSET_COMMIT: transactions.txn_offset_commit,
    ApiKey.DESCRIBE_PRODUCERS: transactions.describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: transactions.describe_transactions,
    ApiKey.LIST_TRANSACTIONS: transactions.list_transactions,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.OFFSET_COMMIT: groups.offset_commit,
    ApiKey.OFFSET_FETCH: groups.offset_fetch,
    ApiKey.LIST_GROUPS: groups.list_groups,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.DELETE_GROUPS: groups.delete_groups,
    ApiKey.OFFSET_DELETE: groups.offset_delete,
}

_SIZE = struct.Struct(">i")
_SCRATCH_BYTES = 64 * 1024  # frames up to this size are cut out of one reused buffer
_QUEUED_BYTES = 2 * 1024 * 1024  # stop reading while this much is received and unserved


class _Connection(asyncio.BufferedProtocol):
    """The transport side of one connection: size-prefixed request frames received
    straight into buffers (a frame larger than the scratch buffer into a buffer of its
    own, so a 1 MB produce request is not copied chunk by chunk on its way in), queued
    for the request loop in arrival order, and write flow control for the responses.

    Reading goes on while the loop handles earlier requests (up to _QUEUED_BYTES), so a
    client's next request is already in memory when the previous response is written.
    """

    def __init__(self, server: KafkaServer, max_bytes: int) -> None:
        self._server = server
        self._max_bytes = max_bytes
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray(_SCRATCH_BYTES)
        self._start = 0  # unparsed bytes are _buf[_start:_end]
        self._end = 0
        self._big: bytearray | None = None  # a large frame being received, and how much
        self._big_pos = 0
        self._frames: deque[bytes] = deque()
        self._queued = 0
        self._ended = False  # no frames after the queued ones (EOF, lost, or bad input)
        self._error: Exception | None = None  # raised once the queued frames are served
        self._reading_paused = False
        self._frame_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._lost = False

    # ---- asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._server.connection_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big is not None:
            return memoryview(self._big)[self._big_pos :]
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._ended:  # after bad input: reading is paused, anything in flight is dropped
            self._start = self._end = 0
            return
        if self._big is not None:
            self._big_pos += nbytes
            if self._big_pos == len(self._big):
                frame = bytes(self._big)
                self._big = None
                self._push(frame)
            return
        self._end += nbytes
        self._parse()

    def eof_received(self) -> bool:
        self._end_stream(None)
        return True  # keep the transport open: queued requests still get their responses

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._end_stream(None)
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---- receiving -----------------------------------------------------------------------

    def _parse(self) -> None:
        """Queue every complete frame in the scratch buffer; a large one's head moves to
        a buffer of its own, which then receives the rest directly."""
        buf = self._buf
        start, end = self._start, self._end
        need = _SIZE.size
        while end - start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 0 or size > self._max_bytes:
                self._start = self._end = 0
                self._end_stream(CloseConnection(
                    f"request of {size} bytes is outside 0..socket.request.max.bytes="
                    f"{self._max_bytes}"
                ))
                return
            body = start + _SIZE.size
            if end - body >= size:
                self._push(bytes(memoryview(buf)[body : body + size]))
                start = body + size
                continue
            if _SIZE.size + size > len(buf):
                big = bytearray(size)
                big[: end - body] = memoryview(buf)[body:end]
                self._big, self._big_pos = big, end - body
                self._start = self._end = 0
                return
            need = _SIZE.size + size
            break
        if start == end:
            start = end = 0
        elif start + need > len(buf):  # the partial frame needs the room at the front
            buf[: end - start] = memoryview(buf)[start:end]
            start, end = 0, end - start
        self._start, self._end = start, end

    def _push(self, frame: bytes) -> None:
        if self._ended:
            return
        self._frames.append(frame)
        self._queued += len(frame)
        if self._queued >= _QUEUED_BYTES and not self._reading_paused:
            self._pause_reading()
        self._wake_reader()

    def _end_stream(self, error: Exception | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        if error is not None:
            self._pause_reading()
        self._wake_reader()

    def _pause_reading(self) -> None:
        if self.transport is not None and not self._lost and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def _wake_reader(self) -> None:
        waiter = self._frame_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read_frame(self) -> bytes | None:
        """The next request frame, in arrival order; None at the end of the stream (after
        the queued frames). Raises CloseConnection after them if the input was bad."""
        if not self._frames and not self._ended:
            # resolved by the next frame or the end of the stream, whichever comes first
            self._frame_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._frame_waiter
            finally:
                self._frame_waiter = None
        if self._frames:
            frame = self._frames.popleft()
            self._queued -= len(frame)
            if (self._reading_paused and self._queued < _QUEUED_BYTES // 2
                    and not self._ended and self.transport is not None):
                self._reading_paused = False
                self.transport.resume_reading()
            return frame
        if self._error is not None:
            raise self._error
        return None

    # ---- sending -------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._drain_waiter
        finally:
            self._drain_waiter = None


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        host, port = self.broker.config.listen_address
        max_bytes = self.broker.config.socket_request_max_bytes
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self, max_bytes), host, port, reuse_address=True,
            backlog=1024,
        )
        bound_port: int = self._server.sockets[0].getsockname()[1]
        self.broker.set_advertised_port(bound_port)
        return bound_port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections, timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    def connection_made(self, conn: _Connection) -> None:
        task = asyncio.get_running_loop().create_task(self._on_connection(conn))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _on_connection(self, conn: _Connection) -> None:
        transport = conn.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        try:
            await self._serve(conn, transport, peer)
        except ConnectionError:
            pass
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            transport.close()

    async def _serve(self, conn: _Connection, transport: asyncio.Transport, peer: Any
                     ) -> None:
        """One request at a time, answered in order (as Kafka does per connection)."""
        broker = self.broker
        out = ResponseWriter(transport, conn.drain, broker.config.sendfile)
        host = f"/{peer[0]}" if peer else ""
        while True:
            frame = await conn.read_frame()
            if frame is None:
                return
            chunks = await self.dispatch(broker, frame, host)
            if chunks is not None:
                await out.send(chunks)

    @staticmethod
    async def dispatch(broker: Broker, frame: bytes, client_host: str = ""
                       ) -> list[Sized] | None:
        try:
            raw = peek_header(frame)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        key = supported_version(raw.api_key, raw.api_version)
        if key is None:
            if raw.api_key == ApiKey.API_VERSIONS:
                # answer in v0 with the ranges we have, so the client can retry lower
                body = api_versions.unsupported_response()
                return [encode_response(ApiKey.API_VERSIONS, 0, raw.correlation_id, body)]
            raise CloseConnection(
                f"unsupported API key {raw.api_key} version {raw.api_version}"
            )
        try:
            request = decode_request(frame, key, raw.api_version, client_host)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        body = await HANDLERS[key](broker, request)
        if body is None:
            return None
        if isinstance(body, Encoded):
            return body.chunks
        return [encode_response(key, request.api_version, request.correlation_id, body)]
