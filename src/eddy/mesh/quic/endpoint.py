"""The mesh transport's UDP endpoint and connection table (`MeshTransport`'s base).

One UDP socket per node serves both directions (see `eddy.mesh.quic.transport`): this part opens and
closes it, routes each packet to its connection by destination connection id (accepting a
new connection for an unknown one, within the connection and half-open limits), sends
connections' packets, keeps idle connections alive, and tracks every connection and its
connection ids. Dialing and choosing between duplicate connections is `eddy.mesh.quic.dial`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from aioquic._buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import NetworkAddress
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from eddy.mesh.identity import NodeIdentity, short
from eddy.mesh.quic.errors import CloseCode, PeerUnavailable, State
from eddy.mesh.quic.protocol import MeshConnection, MeshQuicConnection

if TYPE_CHECKING:
    from eddy.mesh.quic.streams import MeshStreams
    from eddy.mesh.quic.transport import MeshTransport

#: the transport's logger (this code was eddy.mesh.quic.transport's own)
log = logging.getLogger("eddy.mesh.quic.transport")

MIB = 1024 * 1024
SOCKET_BUFFER = 4 * MIB
CID_LENGTH = 8
MAX_UDP_PAYLOAD = 1350
#: packets between nodes on a loopback address (lo's MTU is 64 KiB): aioquic's cost is per
#: packet, so 1 MiB requests move at ~120 MB/s instead of ~16 (python -m bench.mesh_rpc);
#: aioquic 1.7 fails to parse frames in packets above ~16 KiB, hence 16000
LOOPBACK_UDP_PAYLOAD = 16000
INITIAL_MIN_SIZE = 1200

RequestHandler = Callable[[bytes, bytes], Awaitable[bytes | None]]
MessageHandler = Callable[[bytes, bytes], None]
PeerUpHandler = Callable[[bytes, tuple[str, int]], None]
PeerDownHandler = Callable[[bytes], None]


class _Endpoint(asyncio.DatagramProtocol):
    def __init__(self, owner: MeshEndpoint) -> None:
        self.owner = owner
        self.lost = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()  # the socket is closed: its port is free again

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.owner._datagram_received(data, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("mesh: socket error %s", exc)  # ICMP unreachable etc.: timers handle it


class MeshEndpoint:
    """The socket and the connection table; state is set up by `MeshTransport.__init__`."""

    identity: NodeIdentity
    host: str
    port: int
    idle_timeout_s: float
    max_inflight: int
    max_connections: int
    max_half_open: int
    _on_message: MessageHandler
    _transport: asyncio.DatagramTransport | None
    _endpoint: _Endpoint | None
    _family: socket.AddressFamily
    _bound: tuple[str, int] | None
    _by_cid: dict[bytes, MeshConnection]
    _conns: set[MeshConnection]
    _active: dict[bytes, MeshConnection]
    _logged: set[tuple[str, str]]
    _tasks: set[asyncio.Task[None]]
    _keepalive: asyncio.Task[None] | None
    _closed: bool
    _server_config: QuicConfiguration

    # --- life cycle ----------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_DGRAM)
        family, _, _, _, sockaddr = infos[0]
        self._family = socket.AddressFamily(family)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            for opt, name in ((socket.SO_RCVBUF, "SO_RCVBUF"), (socket.SO_SNDBUF, "SO_SNDBUF")):
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
                got = sock.getsockopt(socket.SOL_SOCKET, opt)
                if got < SOCKET_BUFFER:  # Linux reports twice what it grants
                    log.warning("mesh: kernel capped %s at %d bytes (asked %d); raise "
                                "net.core.%s", name, got, SOCKET_BUFFER,
                                "rmem_max" if opt == socket.SO_RCVBUF else "wmem_max")
            sock.bind(sockaddr)
            sock.setblocking(False)
            transport, endpoint = await loop.create_datagram_endpoint(
                lambda: _Endpoint(self), sock=sock)
        except BaseException:
            sock.close()
            raise
        self._transport = transport
        self._endpoint = endpoint
        name = sock.getsockname()
        self._bound = (str(name[0]), int(name[1]))
        self._keepalive = loop.create_task(self._keepalive_loop())
        log.info("mesh: node %s listening on %s:%d (udp)", self.identity.short(), *self._bound)
        return self._bound

    async def close(self) -> None:
        """Close every connection (peers learn it at once) and the socket."""
        if self._closed:
            return
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        for conn in list(self._conns):
            conn.close(CloseCode.SHUTDOWN, "node shutting down")
        self._stop_everything()
        if self._transport is not None:
            self._transport.close()
        await self.wait_closed()

    async def wait_closed(self) -> None:
        """Wait (at most a second) until the socket is closed after close() or abort()."""
        if self._endpoint is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._endpoint.lost.wait()

    def abort(self) -> None:
        """Drop the socket and all state without telling anyone (what a crash looks like)."""
        self._closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self._transport is not None:
            self._transport.abort()
        for conn in list(self._conns):
            conn.state = State.CLOSED
            for pending in conn.pending.values():
                if not pending.fut.done():
                    pending.fut.set_exception(PeerUnavailable("transport aborted"))
            conn.pending.clear()
        self._stop_everything()

    def _stop_everything(self) -> None:
        for conn in list(self._conns):
            conn.stop_timers()
            for inc in conn.incoming.values():
                if inc.task is not None:
                    inc.task.cancel()
        for task in self._tasks:
            task.cancel()
        self._active.clear()
        self._conns.clear()
        self._by_cid.clear()

    async def _keepalive_loop(self) -> None:
        interval = max(self.idle_timeout_s / 3.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = time.time()
            for conn in list(self._conns):
                if not conn.usable():
                    continue
                if conn.admitted_until is not None and now >= conn.admitted_until:
                    log.warning("mesh: closing %s: its membership token expired",
                                conn.label())
                    conn.close(CloseCode.NOT_ALLOWED, "membership token expired")
                    continue
                conn.send_ping()

    # --- datagrams in and out ------------------------------------------------------------

    def _datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        if self._closed:
            return
        try:
            header = pull_quic_header(Buffer(data=data), host_cid_length=CID_LENGTH)
        except Exception:
            return  # not QUIC: ignore
        conn: MeshConnection | None = self._by_cid.get(header.destination_cid)
        if conn is None:
            if (header.packet_type != QuicPacketType.INITIAL or len(data) < INITIAL_MIN_SIZE
                    or header.version not in self._server_config.supported_versions):
                return
            conn = self._accept(header.destination_cid, (str(addr[0]), int(addr[1])))
            if conn is None:
                return
        try:
            conn.datagram_received(data, (str(addr[0]), int(addr[1])))
        except Exception:
            log.exception("mesh: error handling a packet from %s; closing it", conn.label())
            with contextlib.suppress(Exception):
                conn.close(CloseCode.BAD_IDENTITY, "internal error")

    def _sendto(self, data: bytes, addr: NetworkAddress) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(data, addr)

    def _accept(self, odcid: bytes, addr: tuple[str, int]) -> MeshConnection | None:
        half_open = sum(1 for c in self._conns
                        if not c.is_client and c.state is State.HANDSHAKE)
        if half_open >= self.max_half_open or len(self._conns) >= self.max_connections:
            self._log_once(("overload", ""), logging.WARNING,
                           "mesh: too many connections or handshakes; dropping new ones")
            return None
        quic = MeshQuicConnection(
            configuration=self._server_config, original_destination_connection_id=odcid,
            no_pacer=_is_loopback(addr[0]), max_incoming_bidi=self.max_inflight)
        conn = MeshConnection(cast("MeshTransport", self), quic, addr, is_client=False)
        self._add(conn, odcid)
        return conn

    def _add(self, conn: MeshConnection, odcid: bytes | None) -> None:
        conn.ready.add_done_callback(_consume)
        self._conns.add(conn)
        for cid in (odcid, conn.quic.host_cid):
            if cid is not None:
                conn.cids.add(cid)
                self._route(cid, conn)

    # --- callbacks from MeshConnection ---------------------------------------------------

    def _route(self, cid: bytes, conn: MeshConnection) -> None:
        self._by_cid[cid] = conn

    def _unroute(self, cid: bytes, conn: MeshConnection) -> None:
        if self._by_cid.get(cid) is conn:
            del self._by_cid[cid]

    def _note_refusal(self, conn: MeshStreams, what: str) -> None:
        self._log_once((conn.label(), what), logging.WARNING,
                       "mesh: resetting a stream from %s: %s", conn.label(), what)

    def _log_once(self, key: tuple[str, str], level: int, msg: str, *args: object) -> None:
        if key in self._logged:
            log.debug(msg, *args)
            return
        if len(self._logged) >= 4096:
            self._logged.clear()
        self._logged.add(key)
        log.log(level, msg, *args)

    def _deliver_message(self, peer: bytes, data: bytes) -> None:
        try:
            self._on_message(peer, data)
        except Exception:
            log.exception("mesh: on_message failed for a message from %s", short(peer))

    def _conn_terminated(self, conn: MeshConnection) -> None:
        for cid in conn.cids:
            self._unroute(cid, conn)
        self._conns.discard(conn)

    def _spawn(self, coro: Awaitable[None]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _consume(fut: asyncio.Future[bytes]) -> None:
    if not fut.cancelled():
        fut.exception()  # mark retrieved: nobody may be waiting on a server's future
