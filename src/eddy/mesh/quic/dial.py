"""Dialing, peer verification and duplicate-connection resolution of the mesh transport
(`MeshTransport`'s base, on top of the endpoint `eddy.mesh.quic.endpoint`).

A connection is handed here once its TLS handshake completed: the peer's NodeId is checked
(not ourselves, the dialled one, in the allow-list or carrying a membership token signed by
the cluster key), then it becomes the peer's active connection, or one of two duplicates,
of which the one initiated by the smaller NodeId wins (the rules are in
`eddy.mesh.quic.transport`'s docstring). Peer up/down callbacks are called from here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from typing import TYPE_CHECKING, cast

from aioquic.quic.configuration import QuicConfiguration
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ed25519

from eddy.mesh.identity import short
from eddy.mesh.membership import MembershipError, admitted_until
from eddy.mesh.quic.endpoint import (
    MeshEndpoint,
    PeerDownHandler,
    PeerUpHandler,
    _is_loopback,
)
from eddy.mesh.quic.errors import (
    CloseCode,
    IdentityMismatch,
    PeerRefused,
    PeerUnavailable,
    State,
)
from eddy.mesh.quic.protocol import MeshConnection, MeshQuicConnection

if TYPE_CHECKING:
    from eddy.mesh.quic.transport import MeshTransport

#: the transport's logger (this code was eddy.mesh.quic.transport's own)
log = logging.getLogger("eddy.mesh.quic.transport")


class MeshDialer(MeshEndpoint):
    """Connection setup and the active connection per peer; state is set up by
    `MeshTransport.__init__`."""

    node_id: bytes
    allowed: frozenset[bytes] | None
    cluster_key: ed25519.Ed25519PublicKey | None
    _on_peer_up: PeerUpHandler | None
    _on_peer_down: PeerDownHandler | None
    _client_config: QuicConfiguration
    _dialing: dict[tuple[str, int], MeshConnection]
    _peer_waiters: dict[bytes, list[asyncio.Future[bytes]]]

    # --- dialing -------------------------------------------------------------------------

    def _dial(self, target: tuple[str, int], expected: bytes | None) -> MeshConnection:
        quic = MeshQuicConnection(configuration=self._client_config,
                                  no_pacer=_is_loopback(target[0]),
                                  max_incoming_bidi=self.max_inflight)
        conn = MeshConnection(cast("MeshTransport", self), quic, target, is_client=True,
                              expected=expected)
        self._add(conn, None)
        self._dialing[target] = conn
        quic.connect(target, now=time.monotonic())
        conn.process()
        return conn

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

    # --- callbacks from MeshConnection: the peer's identity, duplicates ------------------

    def _check_peer(self, conn: MeshConnection, peer: bytes, cert: x509.Certificate
                    ) -> tuple[CloseCode, str] | None:
        if self._closed:
            return CloseCode.SHUTDOWN, "node shutting down"
        if peer == self.node_id:
            return CloseCode.BAD_IDENTITY, "connected to ourselves"
        if conn.expected is not None and peer != conn.expected:
            return (CloseCode.IDENTITY_MISMATCH,
                    f"expected node {short(conn.expected)}, found {short(peer)}")
        return self._admit(conn, peer, cert)

    def _admit(self, conn: MeshConnection, peer: bytes, cert: x509.Certificate
               ) -> tuple[CloseCode, str] | None:
        """The allow-list OR a valid membership token (when the cluster key is set)."""
        if self.allowed is not None and peer in self.allowed:
            return None
        if self.cluster_key is None:
            if self.allowed is None:
                return None
            return CloseCode.NOT_ALLOWED, f"node {short(peer)} is not in the allow-list"
        try:
            conn.admitted_until = admitted_until(cert, self.cluster_key, peer, time.time())
        except MembershipError as exc:
            listed = "is not in the allow-list and " if self.allowed is not None else ""
            return (CloseCode.NOT_ALLOWED,
                    f"node {short(peer)} {listed}has no valid membership token: {exc}")
        return None

    def _refuse(self, conn: MeshConnection, code: CloseCode, reason: str) -> None:
        self._log_once((f"{conn.addr}", reason), logging.WARNING,
                       "mesh: refusing connection %s: %s", conn.label(), reason)
        if not conn.ready.done():
            exc = IdentityMismatch if code == CloseCode.IDENTITY_MISMATCH else PeerRefused
            conn.ready.set_exception(exc(reason))
        conn.close(code, reason)

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


def _check_expected(peer: bytes, expected: bytes | None, addr: tuple[str, int]) -> bytes:
    if expected is not None and peer != expected:
        raise IdentityMismatch(
            f"{addr[0]}:{addr[1]} is node {short(peer)}, expected {short(expected)}")
    return peer

