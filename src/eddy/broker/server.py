"""The Kafka listener: accepts connections and runs each one's request loop."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable, Sized
from typing import Any

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


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        host, port = self.broker.config.listen_address
        self._server = await asyncio.start_server(
            self._on_connection, host, port, limit=1 << 20, reuse_address=True, backlog=1024
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

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        max_bytes = self.broker.config.socket_request_max_bytes
        broker = self.broker
        out = ResponseWriter(writer, broker.config.sendfile)
        peer = writer.get_extra_info("peername")
        host = f"/{peer[0]}" if peer else ""
        while True:
            head = await reader.readexactly(4)
            (size,) = _SIZE.unpack(head)
            if size < 0 or size > max_bytes:
                raise CloseConnection(
                    f"request of {size} bytes is outside 0..socket.request.max.bytes={max_bytes}"
                )
            frame = await reader.readexactly(size)
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
