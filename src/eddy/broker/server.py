"""The Kafka listener: accepts connections and runs each one's request loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sized
from time import perf_counter
from typing import Any, Protocol

from eddy.broker.allocator import tune_malloc
from eddy.broker.broker import Broker
from eddy.broker.connection import Connection
from eddy.broker.handlers import (
    acls,
    admin,
    api_versions,
    configs,
    coordinator,
    elect_leaders,
    fetch,
    groups,
    leader_epoch,
    list_offsets,
    log_admin,
    metadata,
    produce,
    producer_id,
    quorum,
    reassignments,
    sasl,
    transactions,
    users,
)
from eddy.broker.memory_pool import MemoryPool
from eddy.broker.pipeline import serve_pipelined
from eddy.broker.sender import ResponseWriter
from eddy.broker.settings import BrokerSettings
from eddy.protocol.apis import SUPPORTED, ApiKey, VersionRange
from eddy.protocol.codec import (
    Encoded,
    MalformedRequest,
    Request,
    decode_request,
    encode_response,
    peek_header,
    supported_version,
)
from eddy.protocol.errors import CloseConnection, KafkaError
from eddy.security.connection_limits import ConnectionLimits, LogThrottle, resolve_overrides
from eddy.security.listeners import ListenerSpec
from eddy.security.sasl import SaslFailure
from eddy.security.session import (
    MAX_UNAUTHENTICATED_BYTES,
    SaslService,
    Session,
    SessionClosed,
)
from eddy.security.tls import TlsContext, principal_of
from eddy.telemetry.counters import HotCounters, NullCounters

log = logging.getLogger(__name__)

Handler = Callable[[Broker, Request], Awaitable[Any]]
#: a handler of any node kind (KafkaServer passes it the node it serves)
NodeHandler = Callable[[Any, Request], Awaitable[Any]]


class ServedNode(Protocol):
    """What the listener needs of the node it serves (a Broker, or a gateway)."""

    config: BrokerSettings
    host: str  # what clients are told to connect to
    port: int

    def set_advertised_port(self, port: int) -> None: ...


HANDLERS: dict[ApiKey, Handler] = {
    ApiKey.API_VERSIONS: api_versions.handle,
    ApiKey.METADATA: metadata.handle,
    ApiKey.PRODUCE: produce.handle,
    ApiKey.FETCH: fetch.handle,
    ApiKey.LIST_OFFSETS: list_offsets.handle,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: leader_epoch.handle,
    ApiKey.CREATE_TOPICS: admin.create_topics,
    ApiKey.DELETE_TOPICS: admin.delete_topics,
    ApiKey.CREATE_PARTITIONS: admin.create_partitions,
    ApiKey.DESCRIBE_CLUSTER: admin.describe_cluster,
    ApiKey.DESCRIBE_QUORUM: quorum.describe_quorum,
    ApiKey.ELECT_LEADERS: elect_leaders.elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: reassignments.alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: reassignments.list_partition_reassignments,
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
    ApiKey.DESCRIBE_ACLS: acls.describe_acls,
    ApiKey.CREATE_ACLS: acls.create_acls,
    ApiKey.DELETE_ACLS: acls.delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: users.describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: users.alter_user_scram_credentials,
    ApiKey.SASL_HANDSHAKE: sasl.sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.sasl_authenticate,
}
#: what a SASL listener serves before authentication (Kafka's rule; anything else closes)
BEFORE_AUTH = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: the session of connections that need no authentication (callers without a listener)
_OPEN = Session("PLAINTEXT", "", None)

class KafkaServer:
    """The Kafka listener: admits connections within max.connections and
    max.connections.per.ip, serves each in its own task, and sweeps them periodically
    for connections.max.idle.ms and socket.request.read.timeout.ms. Request bytes held in
    memory by all connections together come from one pool (queued.max.request.bytes)."""

    def __init__(self, node: ServedNode, handlers: Mapping[ApiKey, NodeHandler] | None = None,
                 versions: Mapping[ApiKey, VersionRange] | None = None,
                 listener: ListenerSpec | None = None, tls: TlsContext | None = None,
                 sasl: SaslService | None = None) -> None:
        """`handlers` (default: the broker's HANDLERS) get `node` and the request;
        `versions` (default: SUPPORTED) are the API versions served, each with a handler.
        `listener` (default: the config's first) says where and how: TLS listeners need
        `tls`, SASL listeners `sasl`."""
        self.node = node
        self.listener = listener if listener is not None else node.config.listener_specs[0]
        if self.listener.tls and tls is None:
            raise ValueError(f"listener {self.listener.name} uses TLS: no TLS context given")
        if self.listener.sasl and sasl is None:
            raise ValueError(f"listener {self.listener.name} uses SASL: no SASL service given")
        self.tls = tls if self.listener.tls else None
        self.sasl = sasl if self.listener.sasl else None
        self.port = 0
        self.handlers: Mapping[ApiKey, NodeHandler] = handlers if handlers is not None else HANDLERS
        self.versions = versions if versions is not None else SUPPORTED
        config = node.config
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._open: set[Connection] = set()  # admitted and not yet closed, for the sweep
        queued = config.queued_max_request_bytes
        self.pool = (MemoryPool.unbounded() if queued < 0
                     else MemoryPool(queued, config.socket_request_max_bytes))
        self.limits = ConnectionLimits(config.max_connections, config.max_connections_per_ip)
        self._refused_log = LogThrottle(log, logging.WARNING)
        self._dropped_log = LogThrottle(log, logging.INFO)
        self._sweeper: asyncio.Task[None] | None = None
        metrics = getattr(node, "metrics", None)  # a Broker's (a gateway has none yet)
        self.counts: HotCounters = NullCounters() if metrics is None else metrics.counts
        if metrics is not None:
            metrics.watch_listener("kafka", self)

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def start(self) -> int:
        tune_malloc()  # requests of ~1 MB come and go: keep their pages (see allocator.py)
        config = self.node.config
        host, port = self.listener.host, self.listener.port
        if self.sasl is not None:  # before authentication a frame may be no larger
            max_bytes = min(config.socket_request_max_bytes, MAX_UNAUTHENTICATED_BYTES)
        else:
            max_bytes = config.socket_request_max_bytes
        self.limits = ConnectionLimits(
            config.max_connections, config.max_connections_per_ip,
            resolve_overrides(config.connection_overrides),
        )
        loop = asyncio.get_running_loop()
        pool = self.pool
        tls = None if self.tls is None else self.tls.context
        self._server = await loop.create_server(
            lambda: Connection(self, max_bytes, pool, half_close=tls is None), host or None,
            port, reuse_address=True,
            backlog=1024, ssl=tls, ssl_handshake_timeout=10.0 if tls is not None else None,
        )
        bound_port: int = self._server.sockets[0].getsockname()[1]
        self.port = bound_port
        if self.listener.advertised_port is None:
            self.node.set_advertised_port(bound_port)
        self._sweeper = loop.create_task(self._sweep_forever())
        return bound_port

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections, timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    def connection_made(self, conn: Connection) -> None:
        transport = conn.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        ip = str(peer[0]) if peer else ""
        loop = asyncio.get_running_loop()
        refused = self.limits.admit(ip)
        if refused is not None:
            self._refused_log.log(loop.time(), "refusing a connection from %s: %s", ip, refused)
            transport.abort()
            return
        conn.peer_ip = ip
        self._open.add(conn)
        task = loop.create_task(self._on_connection(conn))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _on_connection(self, conn: Connection) -> None:
        transport = conn.transport
        assert transport is not None
        peer = conn.peer_ip  # (peername is gone once the transport has closed)
        try:
            await self._serve(conn, transport)
        except ConnectionError as exc:
            log.debug("connection from %s closed by the client: %s", peer, exc)
        except SessionClosed as exc:  # already logged once, by the SASL service
            log.debug("closing connection from %s: %s", peer, exc)
        except CloseConnection as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except (KafkaError, OSError) as exc:  # e.g. storage (disk full) where no code fits
            log.error("closing connection from %s: %s", peer, exc)
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            transport.close()
            conn.close_out()
            self._open.discard(conn)
            self.limits.release(conn.peer_ip)

    async def _serve(self, conn: Connection, transport: asyncio.Transport) -> None:
        """Requests answered in order (as Kafka does per connection); consecutive Produces
        overlap (see ``pipeline``)."""
        # sendfile would write around TLS: TLS listeners read the file ranges instead
        out = ResponseWriter(transport, conn.drain,
                             self.node.config.sendfile and self.tls is None)
        host = f"/{conn.peer_ip}" if conn.peer_ip else ""
        principal = principal_of(transport) if self.tls is not None else None
        session = Session(self.listener.name, conn.peer_ip, self.sasl,
                          principal or "User:ANONYMOUS")
        send = out.send
        if self.sasl is not None:
            async def send(chunks: list[Sized]) -> None:
                await out.send(chunks)
                if session.close_reason is not None:
                    raise SessionClosed(session.close_reason)
                if session.authenticated:
                    conn.max_bytes = self.node.config.socket_request_max_bytes
        try:
            await serve_pipelined(conn, lambda frame: self.dispatch(frame, host, session),
                                  send, transport.close)
        finally:
            session.cancel_timer()
        conn.busy = False

    async def _sweep_forever(self) -> None:
        config = self.node.config
        shortest = min(config.connections_max_idle_ms, config.socket_request_read_timeout_ms)
        period = max(0.01, min(1.0, shortest / 4000))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            self.sweep(loop.time())
            if self.tls is not None:  # changed PEM files: new connections get them
                self.tls.maybe_reload(loop.time())

    def sweep(self, now: float) -> None:
        """Close the connections that are idle too long or too slow sending a request."""
        config = self.node.config
        idle_ms = config.connections_max_idle_ms
        read_ms = config.socket_request_read_timeout_ms
        for conn in list(self._open):
            conn.trim()
            overdue = conn.overdue(now, idle_ms, read_ms)
            if overdue is None:
                continue
            idle, reason = overdue
            if idle:
                log.debug("closing connection from %s: %s", conn.peer_ip, reason)
            else:
                self._dropped_log.log(now, "closing connection from %s: %s", conn.peer_ip,
                                      reason)
            self._open.discard(conn)
            if conn.transport is not None:
                conn.transport.abort()

    async def _unauthenticated(self, frame: bytes, session: Session) -> list[Sized] | None:
        """A frame on a connection not (or no longer) authenticated: a raw token after a
        v0 handshake, or one of BEFORE_AUTH; anything else closes the connection."""
        if session.legacy_tokens and session.exchange is not None:
            try:
                return [await sasl.legacy_token(session, frame)]
            except SaslFailure as exc:
                raise CloseConnection(str(exc)) from None
        try:
            raw = peek_header(frame)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        if raw.api_key not in BEFORE_AUTH:
            name = ApiKey(raw.api_key).name if raw.api_key in ApiKey._value2member_map_ else (
                f"API key {raw.api_key}")
            if session.was_authenticated:
                raise CloseConnection(
                    f"{name} after the SASL session of {session.principal} ended "
                    f"(connections.max.reauth.ms): the client did not re-authenticate")
            raise CloseConnection(f"{name} before SASL authentication")
        return None

    async def dispatch(self, frame: bytes, client_host: str = "",
                       session: Session = _OPEN) -> list[Sized] | None:
        if not session.authenticated:  # the one per-request check of who the client is
            early = await self._unauthenticated(frame, session)
            if early is not None:
                return early
        try:
            raw = peek_header(frame)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        key = supported_version(raw.api_key, raw.api_version)
        if key is not None and (key not in self.handlers or key not in self.versions
                                or raw.api_version not in self.versions[key]):
            key = None
        if key is None:
            if raw.api_key == ApiKey.API_VERSIONS:
                # answer in v0 with the ranges we have, so the client can retry lower
                body = api_versions.unsupported_response(self.versions)
                return [encode_response(ApiKey.API_VERSIONS, 0, raw.correlation_id, body)]
            raise CloseConnection(
                f"unsupported API key {raw.api_key} version {raw.api_version}"
            )
        start = perf_counter()
        try:
            try:
                request = decode_request(frame, key, raw.api_version, client_host, session)
            except MalformedRequest as exc:
                raise CloseConnection(str(exc)) from None
            body = await self.handlers[key](self.node, request)
            if body is None:
                return None
            if isinstance(body, Encoded):
                return body.chunks
            return [encode_response(key, request.api_version, request.correlation_id, body)]
        finally:
            self.counts.request(key, perf_counter() - start)
