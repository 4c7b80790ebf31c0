"""One mesh QUIC connection: aioquic's `QuicConnection` driven on the transport's UDP socket.

`MeshConnection` owns the per-connection state the transport needs: the peer's verified
NodeId and admission (checked right after the TLS handshake), our outgoing requests waiting
for their response, the peer's incoming streams being accumulated (bounded per stream, per
connection and in number), the handler tasks serving them, and the QUIC timer. It knows
nothing of the other connections; every decision that involves them (allow-list, membership,
duplicates, peer up/down) is the transport's (`eddy.mesh.quic.transport`).

Stream handling is `eddy.mesh.quic.streams` (MeshConnection's base); errors, codes and the
connection state are `eddy.mesh.quic.errors` (re-exported here).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from aioquic.quic import events
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.recovery import QuicPacketPacer

from eddy.mesh.identity import IdentityError, peer_node_id, short
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
from eddy.mesh.quic.streams import MeshStreams, _Incoming, _Pending

if TYPE_CHECKING:
    from eddy.mesh.quic.transport import MeshTransport

__all__ = [
    "ALPN",
    "MAX_DATAGRAM_PAYLOAD",
    "CloseCode",
    "IdentityMismatch",
    "MeshConnection",
    "MeshError",
    "MeshQuicConnection",
    "MeshTimeout",
    "PeerRefused",
    "PeerUnavailable",
    "State",
    "StreamCode",
    "_Superseded",
]

ALPN = "eddy-mesh/1"
#: payload bytes a QUIC DATAGRAM frame may carry (packets are at most 1350 bytes)
MAX_DATAGRAM_PAYLOAD = 1200
MAX_PENDING_DATAGRAMS = 256


class _NoPacer(QuicPacketPacer):
    """Never holds packets back (the pacer needs ms timers; pointless on loopback)."""

    def next_send_time(self, now: float) -> float:
        return None  # type: ignore[return-value]  # aioquic's own annotation is wrong

    def update_after_send(self, now: float) -> None:
        return None


class MeshQuicConnection(QuicConnection):
    """QuicConnection that requests the client's certificate when it is the server."""

    def __init__(self, *, no_pacer: bool, max_incoming_bidi: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._local_max_streams_bidi.value = max_incoming_bidi
        self._local_max_streams_bidi.sent = max_incoming_bidi
        if no_pacer:
            self._loss._pacer = _NoPacer(max_datagram_size=self._max_datagram_size)

    def _initialize(self, peer_cid: bytes) -> None:
        super()._initialize(peer_cid)
        if not self._is_client:
            # aioquic exposes client authentication only through this private flag
            self.tls._request_client_certificate = True



class MeshConnection(MeshStreams):
    def __init__(self, host: MeshTransport, quic: MeshQuicConnection,
                 addr: tuple[str, int], *, is_client: bool,
                 expected: bytes | None = None) -> None:
        self.host = host
        self.quic = quic
        self.addr = addr
        self.is_client = is_client
        self.expected = expected
        self.peer_id: bytes | None = None
        #: Unix time the peer's membership token expires, when a token admitted it
        self.admitted_until: float | None = None
        self.state = State.HANDSHAKE
        self.retiring = False
        self.close_code: int | None = None
        self.close_reason = ""
        self.closed_by_peer = False
        self.cids: set[bytes] = set()
        self.ready: asyncio.Future[bytes] = host.loop.create_future()
        self.pending: dict[int, _Pending] = {}
        self.incoming: dict[int, _Incoming] = {}
        self.dropped: set[int] = set()  # peer streams we reset, until they end
        self.deferred_aborts: dict[int, StreamCode] = {}  # our blocked streams to reset
        self.buffered = 0  # bytes of incoming streams held (accumulating or being served)
        self.ping_waiters: dict[int, asyncio.Future[None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._transmit_handle: asyncio.Handle | None = None
        self._terminated = False
        self._processing = False

    # --- driving aioquic -----------------------------------------------------------------

    def usable(self) -> bool:
        """Verified, and neither closing nor closed."""
        return (self.peer_id is not None and self.state in (State.VERIFIED, State.READY)
                and self.quic._close_event is None)

    def label(self) -> str:
        who = short(self.peer_id) if self.peer_id is not None else "?"
        return f"{who}@{self.addr[0]}:{self.addr[1]}"

    def datagram_received(self, data: bytes, addr: NetworkAddress) -> None:
        self.quic.receive_datagram(data, addr, now=time.monotonic())
        self.process()

    def process(self) -> None:
        """Handle aioquic's events, then send what it has to send."""
        if self._processing:
            return  # re-entered from a callback: the outer call finishes the job
        self._processing = True
        try:
            self._process()
        finally:
            self._processing = False

    def _process(self) -> None:
        while (event := self.quic.next_event()) is not None:
            self._handle(event)
        if self.deferred_aborts:
            self._flush_deferred_aborts()
        if (self.state is State.VERIFIED and self.quic._handshake_confirmed
                and self.quic._close_event is None):
            self.state = State.READY
            self.host._conn_ready(self)
        if self.state is not State.CLOSED and self.quic._close_event is not None:
            self._went_down()
        if self.retiring and self.state is State.READY:
            self._finish_retiring_if_idle()
        if self.state is not State.CLOSED and self.quic._close_event is not None:
            self._went_down()
        self.transmit()

    def transmit(self) -> None:
        self._transmit_handle = None
        loop = self.host.loop
        # aioquic gets a fine clock: uvloop's loop.time() has millisecond steps and is
        # cached per loop iteration, which skews RTT samples and ACK timing
        now = time.monotonic()
        for data, addr in self.quic.datagrams_to_send(now=now):
            self.host._sendto(data, addr)
        timer_at = self.quic.get_timer()
        if self._timer is not None and self._timer_at != timer_at:
            self._timer.cancel()
            self._timer = None
        if self._timer is None and timer_at is not None and not self._terminated:
            self._timer = loop.call_later(max(timer_at - now, 0.0), self._on_timer)
        self._timer_at = timer_at

    def transmit_soon(self) -> None:
        if self._transmit_handle is None:
            self._transmit_handle = self.host.loop.call_soon(self.transmit)

    def _on_timer(self) -> None:
        self._timer = None
        now = max(self._timer_at or 0.0, time.monotonic())
        self._timer_at = None
        self.quic.handle_timer(now=now)
        self.process()

    def stop_timers(self) -> None:
        self._terminated = True
        for handle in (self._timer, self._transmit_handle):
            if handle is not None:
                handle.cancel()
        self._timer = self._transmit_handle = None

    def close(self, code: CloseCode, reason: str) -> None:
        if self.quic._close_event is None:
            self.close_code, self.close_reason = int(code), reason
        self.quic.close(error_code=int(code), reason_phrase=reason)
        self.process()

    # --- events --------------------------------------------------------------------------

    def _handle(self, event: events.QuicEvent) -> None:
        if isinstance(event, events.StreamDataReceived):
            self._on_stream_data(event.stream_id, event.data, event.end_stream)
        elif isinstance(event, events.StreamReset):
            self._on_stream_reset(event.stream_id, event.error_code)
        elif isinstance(event, events.StopSendingReceived):
            self._on_stop_sending(event.stream_id, event.error_code)
        elif isinstance(event, events.DatagramFrameReceived):
            if self.usable() and self.peer_id is not None:
                self.host._deliver_message(self.peer_id, event.data)
        elif isinstance(event, events.PingAcknowledged):
            waiter = self.ping_waiters.pop(event.uid, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        elif isinstance(event, events.HandshakeCompleted):
            self._on_handshake(event)
        elif isinstance(event, events.ConnectionIdIssued):
            self.cids.add(event.connection_id)
            self.host._route(event.connection_id, self)
        elif isinstance(event, events.ConnectionIdRetired):
            self.cids.discard(event.connection_id)
            self.host._unroute(event.connection_id, self)
        elif isinstance(event, events.ConnectionTerminated):
            if self.state is not State.CLOSED:
                self._went_down()
            self._terminated = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.host._conn_terminated(self)

    def _on_handshake(self, event: events.HandshakeCompleted) -> None:
        if event.alpn_protocol != ALPN:
            self.host._refuse(self, CloseCode.BAD_IDENTITY,
                              f"ALPN {event.alpn_protocol!r}, expected {ALPN!r}")
            return
        cert = self.quic.tls._peer_certificate
        if cert is None:
            self.host._refuse(self, CloseCode.BAD_IDENTITY, "no certificate presented")
            return
        try:
            peer = peer_node_id(cert)
        except IdentityError as exc:
            self.host._refuse(self, CloseCode.BAD_IDENTITY, str(exc))
            return
        refusal = self.host._check_peer(self, peer, cert)
        if refusal is not None:
            self.peer_id = peer
            self.host._refuse(self, *refusal)
            return
        self.peer_id = peer
        self.state = State.VERIFIED
        if not self.is_client:  # a server's handshake is confirmed on completion
            self.state = State.READY
            self.host._conn_ready(self)

    def _went_down(self) -> None:
        was_ready = self.state is State.READY
        self.state = State.CLOSED
        ev = self.quic._close_event
        if self.close_code is None and ev is not None:
            self.close_code, self.close_reason = ev.error_code, ev.reason_phrase
            self.closed_by_peer = True
        reason = self.close_reason or f"code {self.close_code:#x}"
        superseded = self.closed_by_peer and self.close_code == CloseCode.DUPLICATE
        for pending in self.pending.values():
            if not pending.fut.done():
                if superseded and not pending.buf:
                    pending.fut.set_exception(_Superseded(reason))
                else:
                    pending.fut.set_exception(PeerUnavailable(f"connection closed: {reason}"))
        self.pending.clear()
        for inc in self.incoming.values():
            if inc.task is not None:
                inc.task.cancel()
        for waiter in self.ping_waiters.values():
            if not waiter.done():
                waiter.set_exception(PeerUnavailable("connection closed"))
        self.ping_waiters.clear()
        self.host._conn_down(self, was_ready, superseded)

    def send_datagram(self, data: bytes) -> bool:
        remote_max = self.quic._remote_max_datagram_frame_size
        if (len(data) > MAX_DATAGRAM_PAYLOAD or remote_max is None or len(data) > remote_max
                or len(self.quic._datagrams_pending) >= MAX_PENDING_DATAGRAMS):
            return False
        self.quic.send_datagram_frame(data)
        self.transmit_soon()
        return True

    def send_ping(self, uid: int = 0) -> None:
        self.quic.send_ping(uid)
        self.transmit_soon()

    async def probe(self, timeout_s: float) -> bool:
        """Is the peer still answering on this connection?"""
        if self.state is State.CLOSED:
            return False
        waiter: asyncio.Future[None] = self.host.loop.create_future()
        uid = id(waiter)
        self.ping_waiters[uid] = waiter
        self.send_ping(uid)
        try:
            async with asyncio.timeout(timeout_s):
                await waiter
        except (TimeoutError, PeerUnavailable):
            return False
        finally:
            self.ping_waiters.pop(uid, None)
        return True

    def smoothed_rtt(self) -> float:
        return float(self.quic._loss._rtt_smoothed)

    def maybe_finish_retiring(self) -> None:
        """Close a retired duplicate once nothing is in flight on it in either direction."""
        self.process()

    def _finish_retiring_if_idle(self) -> None:
        if not self.pending and not self.incoming and self.unacked_bytes() == 0:
            self.close_code, self.close_reason = int(CloseCode.DUPLICATE), "duplicate connection"
            self.quic.close(error_code=int(CloseCode.DUPLICATE),
                            reason_phrase="duplicate connection")
