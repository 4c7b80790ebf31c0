"""The mesh transport (seed 000): one QUIC connection per node pair, on aioquic.

One UDP socket per node serves both directions: we accept on it and dial from it. Packets
are routed to connections by destination connection id, so the address a peer dials from is
its listening address: an inbound connection's address is the one to dial back, and a dial
to an address we already have a connection with (in either direction) is recognised.

Both sides present a self-signed Ed25519 certificate (the server requests the client's) and
we verify the peer ourselves once the handshake completes: the NodeId is the certificate's
key, checked against the dialled NodeId and the allow-list. A client treats a connection as
up only once the server confirmed the handshake (HANDSHAKE_DONE), which a server refusing it
never sends.

Duplicates: when both nodes dial each other, the connection initiated by the smaller NodeId
wins on both sides. The other one is retired: no new work goes to it, and it is closed once
nothing is in flight on it (so no request is lost; a request the peer never read is resent
on the winner). If the winner seems dead when a loser arrives (the peer restarted), a PING
decides: no answer, the old connection is closed and the new one takes over.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

from aioquic._buffer import Buffer
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import NetworkAddress
from aioquic.quic.packet import QuicPacketType, pull_quic_header

from eddy.mesh.identity import NodeIdentity, short
from eddy.mesh.quic_protocol import (
    ALPN,
    MAX_DATAGRAM_PAYLOAD,
    CloseCode,
    IdentityMismatch,
    MeshConnection,
    MeshError,
    MeshQuicConnection,
    MeshTimeout,
    PeerRefused,
    PeerUnavailable,
    State,
    StreamCode,
    _Superseded,
)

__all__ = [
    "ALPN",
    "MAX_DATAGRAM_PAYLOAD",
    "IdentityMismatch",
    "MeshError",
    "MeshTimeout",
    "MeshTransport",
    "PeerRefused",
    "PeerUnavailable",
]

log = logging.getLogger(__name__)

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
    def __init__(self, owner: MeshTransport) -> None:
        self.owner = owner
        self.lost = asyncio.Event()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()  # the socket is closed: its port is free again

    def datagram_received(self, data: bytes, addr: tuple[str | int, ...]) -> None:
        self.owner._datagram_received(data, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("mesh: socket error %s", exc)  # ICMP unreachable etc.: timers handle it


class MeshTransport:
    def __init__(
        self,
        identity: NodeIdentity,
        host: str,
        port: int,
        *,
        allowed: frozenset[bytes] | None = None,
        on_request: RequestHandler,
        on_message: MessageHandler,
        on_peer_up: PeerUpHandler | None = None,
        on_peer_down: PeerDownHandler | None = None,
        max_stream_bytes: int = 16 * MIB,
        max_inflight_requests_per_peer: int = 256,
        idle_timeout_s: float = 10.0,
        max_connection_buffer: int = 64 * MIB,
        max_send_queue_bytes: int = 32 * MIB,
        max_connections: int = 1024,
        max_half_open: int = 128,
    ) -> None:
        self.identity = identity
        self.node_id = identity.node_id
        self.host, self.port = host, port
        self.allowed = allowed
        self._on_request = on_request
        self._on_message = on_message
        self._on_peer_up = on_peer_up
        self._on_peer_down = on_peer_down
        self.max_stream_bytes = max_stream_bytes
        self.max_inflight = max_inflight_requests_per_peer
        self.idle_timeout_s = idle_timeout_s
        self.max_connection_buffer = max_connection_buffer
        self.max_send_queue_bytes = max_send_queue_bytes
        self.max_connections = max_connections
        self.max_half_open = max_half_open
        self._transport: asyncio.DatagramTransport | None = None
        self._endpoint: _Endpoint | None = None
        self._family = socket.AF_INET
        self._bound: tuple[str, int] | None = None
        self._by_cid: dict[bytes, MeshConnection] = {}
        self._conns: set[MeshConnection] = set()
        self._active: dict[bytes, MeshConnection] = {}
        self._dialing: dict[tuple[str, int], MeshConnection] = {}
        self._peer_waiters: dict[bytes, list[asyncio.Future[bytes]]] = {}
        self._logged: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._keepalive: asyncio.Task[None] | None = None
        self._closed = False
        self._server_config = self._config(is_client=False)
        self._client_config = self._config(is_client=True)

    def _config(self, *, is_client: bool) -> QuicConfiguration:
        return QuicConfiguration(
            alpn_protocols=[ALPN],
            is_client=is_client,
            idle_timeout=self.idle_timeout_s,
            max_datagram_frame_size=65536,
            max_datagram_size=(LOOPBACK_UDP_PAYLOAD if _is_loopback(self.host)
                               else MAX_UDP_PAYLOAD),
            max_data=4 * MIB,
            max_stream_data=MIB,
            verify_mode=ssl.CERT_NONE,  # no CA: the peer's key is checked after the handshake
            certificate=self.identity.certificate(),
            private_key=self.identity.private_key,
            connection_id_length=CID_LENGTH,
        )

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

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
            for conn in list(self._conns):
                if conn.usable():
                    conn.send_ping()

    # --- public API ----------------------------------------------------------------------

    def peers(self) -> dict[bytes, tuple[str, int]]:
        """Connected, verified peers and their (listening) address."""
        return {p: c.addr for p, c in self._active.items() if c.usable()}

    def connection_count(self, peer: bytes) -> int:
        """Connections to that peer not yet closing (1 in steady state)."""
        return sum(1 for c in self._conns if c.peer_id == peer and c.usable())

    async def connect(self, addr: tuple[str, int], expected: bytes | None = None, *,
                      timeout_s: float = 5.0) -> bytes:
        """Dial `addr` (or reuse the connection we have with it); returns the peer's NodeId.

        expected=None accepts any valid key (dialling a seed); otherwise another key is
        refused with IdentityMismatch."""
        if self._closed or self._transport is None:
            raise MeshError("transport not started or closed")
        target = await self._resolve(addr)
        for existing in list(self._active.values()):
            if existing.addr == target and existing.usable() and existing.peer_id is not None:
                return _check_expected(existing.peer_id, expected, addr)
        dialing = self._dialing.get(target)
        # a dial in progress is joined (its result is checked against our `expected` below)
        conn = dialing if dialing is not None and dialing.state is not State.CLOSED else (
            self._dial(target, expected))
        try:
            async with asyncio.timeout(timeout_s):
                peer = await asyncio.shield(conn.ready)
        except TimeoutError:
            if not conn.ready.done() and conn.state is not State.CLOSED:
                conn.close(CloseCode.DIAL_TIMEOUT, "dial timed out")
            for waiters in self._peer_waiters.values():
                if conn.ready in waiters:
                    waiters.remove(conn.ready)
            raise MeshTimeout(f"no mesh handshake with {addr[0]}:{addr[1]} within "
                              f"{timeout_s}s") from None
        finally:
            if self._dialing.get(target) is conn and conn.ready.done():
                del self._dialing[target]
        return _check_expected(peer, expected, addr)

    async def request(self, peer: bytes, data: bytes, timeout_s: float) -> bytes:
        """Send `data` on a new bi stream and return the peer's whole answer."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        for _attempt in range(2):
            conn = self._usable(peer)
            self._check_send_queue(conn, len(data))
            sid, fut = conn.open_request(data)
            try:
                async with asyncio.timeout_at(deadline):
                    return await fut
            except _Superseded:
                continue  # the peer closed a duplicate unread: resend on the survivor
            except TimeoutError:
                conn.abort_request(sid, StreamCode.CANCELLED)
                raise MeshTimeout(f"no answer from {short(peer)} within {timeout_s}s") from None
            except asyncio.CancelledError:
                conn.abort_request(sid, StreamCode.CANCELLED)
                raise
        raise PeerUnavailable(f"connections to {short(peer)} keep closing")

    def send(self, peer: bytes, data: bytes) -> None:
        """One reliable message on its own uni stream (delivered to the peer's on_message)."""
        conn = self._usable(peer)
        self._check_send_queue(conn, len(data))
        conn.send_uni(data)

    def send_datagram(self, peer: bytes, data: bytes) -> bool:
        """Best effort (QUIC DATAGRAM); False when not connected, too big or queue full."""
        conn = self._active.get(peer)
        if conn is None or not conn.usable():
            return False
        return conn.send_datagram(data)

    def _usable(self, peer: bytes) -> MeshConnection:
        conn = self._active.get(peer)
        if conn is None or not conn.usable():
            raise PeerUnavailable(f"not connected to {short(peer)}")
        return conn

    def _check_send_queue(self, conn: MeshConnection, size: int) -> None:
        if conn.unacked_bytes() + size > self.max_send_queue_bytes:
            raise MeshError(f"send queue full ({self.max_send_queue_bytes} bytes unacknowledged"
                            f" to {conn.label()})")

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
        conn = MeshConnection(self, quic, addr, is_client=False)
        self._add(conn, odcid)
        return conn

    def _dial(self, target: tuple[str, int], expected: bytes | None) -> MeshConnection:
        quic = MeshQuicConnection(configuration=self._client_config,
                                  no_pacer=_is_loopback(target[0]),
                                  max_incoming_bidi=self.max_inflight)
        conn = MeshConnection(self, quic, target, is_client=True, expected=expected)
        self._add(conn, None)
        self._dialing[target] = conn
        quic.connect(target, now=time.monotonic())
        conn.process()
        return conn

    def _add(self, conn: MeshConnection, odcid: bytes | None) -> None:
        conn.ready.add_done_callback(_consume)
        self._conns.add(conn)
        for cid in (odcid, conn.quic.host_cid):
            if cid is not None:
                conn.cids.add(cid)
                self._route(cid, conn)

    async def _resolve(self, addr: tuple[str, int]) -> tuple[str, int]:
        host, port = addr
        try:
            return (str(ipaddress.ip_address(host)), int(port))
        except ValueError:
            pass
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, family=self._family, type=socket.SOCK_DGRAM)
        if not infos:
            raise PeerUnavailable(f"cannot resolve {host}")
        sockaddr = infos[0][4]
        return (str(sockaddr[0]), int(sockaddr[1]))

    # --- callbacks from MeshConnection ---------------------------------------------------

    def _route(self, cid: bytes, conn: MeshConnection) -> None:
        self._by_cid[cid] = conn

    def _unroute(self, cid: bytes, conn: MeshConnection) -> None:
        if self._by_cid.get(cid) is conn:
            del self._by_cid[cid]

    def _check_peer(self, conn: MeshConnection, peer: bytes) -> tuple[CloseCode, str] | None:
        if self._closed:
            return CloseCode.SHUTDOWN, "node shutting down"
        if peer == self.node_id:
            return CloseCode.BAD_IDENTITY, "connected to ourselves"
        if conn.expected is not None and peer != conn.expected:
            return (CloseCode.IDENTITY_MISMATCH,
                    f"expected node {short(conn.expected)}, found {short(peer)}")
        if self.allowed is not None and peer not in self.allowed:
            return CloseCode.NOT_ALLOWED, f"node {short(peer)} is not in the allow-list"
        return None

    def _refuse(self, conn: MeshConnection, code: CloseCode, reason: str) -> None:
        self._log_once((f"{conn.addr}", reason), logging.WARNING,
                       "mesh: refusing connection %s: %s", conn.label(), reason)
        if not conn.ready.done():
            exc = IdentityMismatch if code == CloseCode.IDENTITY_MISMATCH else PeerRefused
            conn.ready.set_exception(exc(reason))
        conn.close(code, reason)

    def _note_refusal(self, conn: MeshConnection, what: str) -> None:
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

    def _preferred(self, conn: MeshConnection) -> bool:
        """Was this connection initiated by the smaller of the two NodeIds?"""
        assert conn.peer_id is not None
        initiator = self.node_id if conn.is_client else conn.peer_id
        return initiator == min(self.node_id, conn.peer_id)

    def _conn_ready(self, conn: MeshConnection) -> None:
        peer = conn.peer_id
        assert peer is not None
        cur = self._active.get(peer)
        if cur is None or cur is conn or not cur.usable():
            self._set_active(conn, announce=cur is None)
        elif self._preferred(cur) and not self._preferred(conn):
            self._spawn(self._probe_then_settle(cur, conn))
        else:  # conn is the winner, or both have the same initiator and the newer wins
            self._set_active(conn, announce=False)
            self._retire(cur)
        if not conn.ready.done():
            conn.ready.set_result(peer)

    def _set_active(self, conn: MeshConnection, *, announce: bool) -> None:
        peer = conn.peer_id
        assert peer is not None
        self._active[peer] = conn
        for fut in self._peer_waiters.pop(peer, []):
            if not fut.done():
                fut.set_result(peer)
        if announce:
            log.info("mesh: peer %s up (%s:%d)", short(peer), *conn.addr)
            if self._on_peer_up is not None:
                try:
                    self._on_peer_up(peer, conn.addr)
                except Exception:
                    log.exception("mesh: on_peer_up failed")

    def _retire(self, conn: MeshConnection) -> None:
        conn.retiring = True

        def give_up() -> None:
            if conn.state is not State.CLOSED:
                conn.close(CloseCode.STALE, "duplicate connection did not drain")

        asyncio.get_running_loop().call_later(max(2.0, self.idle_timeout_s), give_up)
        conn.maybe_finish_retiring()

    async def _probe_then_settle(self, cur: MeshConnection, new: MeshConnection) -> None:
        alive = await cur.probe(max(1.0, 4 * cur.smoothed_rtt()))
        if new.state is State.CLOSED:
            return
        if alive or self._active.get(new.peer_id or b"") not in (cur, new):
            if self._active.get(new.peer_id or b"") is not new:
                self._retire(new)
            return
        log.info("mesh: %s stopped answering; using the new connection", cur.label())
        cur.close(CloseCode.STALE, "peer stopped answering")  # _conn_down promotes `new`

    def _conn_down(self, conn: MeshConnection, was_ready: bool, superseded: bool) -> None:
        peer = conn.peer_id
        if not conn.ready.done():
            if superseded and peer is not None:
                # the peer keeps the other connection between us: wait for it to show up
                other = self._active.get(peer)
                if other is not None and other.usable():
                    conn.ready.set_result(peer)
                else:
                    self._peer_waiters.setdefault(peer, []).append(conn.ready)
            elif conn.closed_by_peer and conn.close_code in set(CloseCode):
                conn.ready.set_exception(PeerRefused(f"refused by peer: {conn.close_reason}"))
            else:
                conn.ready.set_exception(PeerUnavailable(
                    f"connection closed during handshake: {conn.close_reason or 'no reason'}"))
        if peer is None or self._active.get(peer) is not conn:
            return
        del self._active[peer]
        alt = next((c for c in self._conns if c is not conn and c.peer_id == peer
                    and c.state is State.READY and c.usable() and not c.retiring), None)
        if alt is not None:
            self._set_active(alt, announce=False)
            return
        log.info("mesh: peer %s down (%s)", short(peer), conn.close_reason or "closed")
        if self._on_peer_down is not None:
            try:
                self._on_peer_down(peer)
            except Exception:
                log.exception("mesh: on_peer_down failed")

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


def _check_expected(peer: bytes, expected: bytes | None, addr: tuple[str, int]) -> bytes:
    if expected is not None and peer != expected:
        raise IdentityMismatch(
            f"{addr[0]}:{addr[1]} is node {short(peer)}, expected {short(expected)}")
    return peer


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _consume(fut: asyncio.Future[bytes]) -> None:
    if not fut.cancelled():
        fut.exception()  # mark retrieved: nobody may be waiting on a server's future
