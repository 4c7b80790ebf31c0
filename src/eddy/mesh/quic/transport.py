"""The mesh transport (seed 000): one QUIC connection per node pair, on aioquic.

One UDP socket per node serves both directions: we accept on it and dial from it. Packets
are routed to connections by destination connection id, so the address a peer dials from is
its listening address: an inbound connection's address is the one to dial back, and a dial
to an address we already have a connection with (in either direction) is recognised.

Both sides present a self-signed Ed25519 certificate (the server requests the client's) and
we verify the peer ourselves once the handshake completes: the NodeId is the certificate's
key, checked against the dialled NodeId and the allow-list, or, with the cluster's public
key configured, a membership token for it in the certificate (`eddy.mesh.membership`;
a connection admitted by a token is closed when the token expires). A client treats a connection as
up only once the server confirmed the handshake (HANDSHAKE_DONE), which a server refusing it
never sends.

Duplicates: when both nodes dial each other, the connection initiated by the smaller NodeId
wins on both sides. The other one is retired: no new work goes to it, and it is closed once
nothing is in flight on it (so no request is lost; a request the peer never read is resent
on the winner). If the winner seems dead when a loser arrives (the peer restarted), a PING
decides: no answer, the old connection is closed and the new one takes over.

`MeshTransport` (here: settings, dialing a peer, requests and messages) is built on
`eddy.mesh.quic.dial` (peer verification, duplicates, peer up/down) and
`eddy.mesh.quic.endpoint` (the socket, the connection table); one connection is
`eddy.mesh.quic.protocol` with its streams in `eddy.mesh.quic.streams`, and the errors are
`eddy.mesh.quic.errors` (the public ones are re-exported here).
"""

from __future__ import annotations

import asyncio
import socket
import ssl

from aioquic.quic.configuration import QuicConfiguration
from cryptography.hazmat.primitives.asymmetric import ed25519

from eddy.mesh.identity import NodeIdentity, short
from eddy.mesh.membership import MembershipToken, extension
from eddy.mesh.quic.dial import MeshDialer, _check_expected
from eddy.mesh.quic.endpoint import (
    CID_LENGTH,
    LOOPBACK_UDP_PAYLOAD,
    MAX_UDP_PAYLOAD,
    MIB,
    MessageHandler,
    PeerDownHandler,
    PeerUpHandler,
    RequestHandler,
    _Endpoint,
    _is_loopback,
)
from eddy.mesh.quic.errors import (
    CloseCode,
    IdentityMismatch,
    MeshError,
    MeshTimeout,
    PeerRefused,
    PeerUnavailable,
    State,
    StreamCode,
    _Superseded,
)
from eddy.mesh.quic.protocol import ALPN, MAX_DATAGRAM_PAYLOAD, MeshConnection

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


class MeshTransport(MeshDialer):
    def __init__(
        self,
        identity: NodeIdentity,
        host: str,
        port: int,
        *,
        allowed: frozenset[bytes] | None = None,
        cluster_key: ed25519.Ed25519PublicKey | None = None,
        membership: MembershipToken | None = None,
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
        self.cluster_key = cluster_key
        self.membership = membership
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
            certificate=self.identity.certificate(
                None if self.membership is None else extension(self.membership)),
            private_key=self.identity.private_key,
            connection_id_length=CID_LENGTH,
        )

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

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
