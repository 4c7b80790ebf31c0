"""One mesh QUIC connection: aioquic's `QuicConnection` driven on the transport's UDP socket.

`MeshConnection` owns the per-connection state the transport needs: the peer's verified
NodeId (checked right after the TLS handshake), our outgoing requests waiting for their
response, the peer's incoming streams being accumulated (bounded per stream, per connection
and in number), the handler tasks serving them, and the QUIC timer. It knows nothing of the
other connections; every decision that involves them (allow-list, duplicates, peer up/down)
is the transport's (`eddy.mesh.quic`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from typing import TYPE_CHECKING, Any

from aioquic.quic import events
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.recovery import QuicPacketPacer

from eddy.mesh.identity import IdentityError, peer_node_id, short

if TYPE_CHECKING:
    from eddy.mesh.quic import MeshTransport

log = logging.getLogger(__name__)

ALPN = "eddy-mesh/1"
#: payload bytes a QUIC DATAGRAM frame may carry (packets are at most 1350 bytes)
MAX_DATAGRAM_PAYLOAD = 1200
MAX_PENDING_DATAGRAMS = 256


class MeshError(Exception):
    """A mesh operation failed; the message says why."""


class MeshTimeout(MeshError):
    """No response within the request's timeout (the stream was reset)."""


class PeerUnavailable(MeshError):
    """No usable connection to that peer (never connected, closed, or lost)."""


class PeerRefused(PeerUnavailable):
    """The peer, or we, closed the connection after the handshake (identity, allow-list)."""


class IdentityMismatch(PeerRefused):
    """The node at the dialled address is not the one we expected."""


class _Superseded(MeshError):
    """The peer closed a duplicate connection before reading our request: safe to resend."""


class CloseCode(enum.IntEnum):
    """Application close codes (CONNECTION_CLOSE of type 0x1d)."""

    SHUTDOWN = 0x100
    DUPLICATE = 0x101
    BAD_IDENTITY = 0x102
    NOT_ALLOWED = 0x103
    IDENTITY_MISMATCH = 0x104
    STALE = 0x105
    DIAL_TIMEOUT = 0x106


class StreamCode(enum.IntEnum):
    """RESET_STREAM / STOP_SENDING codes."""

    CANCELLED = 0x10
    TOO_LARGE = 0x11
    REFUSED = 0x12
    NO_RESPONSE = 0x13
    HANDLER_FAILED = 0x14
    OVERLOADED = 0x15


class State(enum.Enum):
    HANDSHAKE = "handshake"  # TLS in progress
    VERIFIED = "verified"  # peer key checked; a client still waits for HANDSHAKE_DONE
    READY = "ready"  # handed to the transport (active, standby or retiring)
    CLOSED = "closed"  # closing, draining or terminated: unusable


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


class _Pending:
    __slots__ = ("buf", "fut")

    def __init__(self, fut: asyncio.Future[bytes]) -> None:
        self.fut = fut
        self.buf = bytearray()


class _Incoming:
    __slots__ = ("buf", "task")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.task: asyncio.Task[None] | None = None


def _peer_initiated(stream_id: int, is_client: bool) -> bool:
    return bool(stream_id & 1) == is_client


def _is_uni(stream_id: int) -> bool:
    return bool(stream_id & 2)


class MeshConnection:
    def __init__(self, host: MeshTransport, quic: MeshQuicConnection,
                 addr: tuple[str, int], *, is_client: bool,
                 expected: bytes | None = None) -> None:
        self.host = host
        self.quic = quic
        self.addr = addr
        self.is_client = is_client
        self.expected = expected
        self.peer_id: bytes | None = None
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
        refusal = self.host._check_peer(self, peer)
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

    # --- streams -------------------------------------------------------------------------

    def _on_stream_data(self, sid: int, data: bytes, end: bool) -> None:
        if not self.usable():
            return
        assert self.peer_id is not None
        if not _peer_initiated(sid, self.is_client):
            pending = self.pending.get(sid)
            if pending is None:
                return  # answer to a request we gave up on
            if len(pending.buf) + len(data) > self.host.max_stream_bytes:
                self.abort_request(sid, StreamCode.TOO_LARGE)
                pending.fut.set_exception(MeshError(
                    f"response exceeds max_stream_bytes={self.host.max_stream_bytes}"))
                return
            pending.buf += data
            if end:
                del self.pending[sid]
                if not pending.fut.done():
                    pending.fut.set_result(bytes(pending.buf))
            return
        if sid in self.dropped:
            if end:
                self.dropped.discard(sid)
            return
        inc = self.incoming.get(sid)
        if inc is None:
            if not _is_uni(sid) and self._serving() >= self.host.max_inflight:
                self._drop(sid, StreamCode.REFUSED, end)
                self.host._note_refusal(self, "too many concurrent requests")
                return
            inc = self.incoming[sid] = _Incoming()
        if len(inc.buf) + len(data) > self.host.max_stream_bytes:
            self._release(sid, inc)
            self._drop(sid, StreamCode.TOO_LARGE, end)
            self.host._note_refusal(
                self, f"stream over max_stream_bytes={self.host.max_stream_bytes}")
            return
        if self.buffered + len(data) > self.host.max_connection_buffer:
            self._release(sid, inc)
            self._drop(sid, StreamCode.OVERLOADED, end)
            self.host._note_refusal(self, "connection receive buffer full")
            return
        inc.buf += data
        self.buffered += len(data)
        if not end:
            return
        if _is_uni(sid):
            payload = bytes(inc.buf)
            self._release(sid, inc)
            self.host._deliver_message(self.peer_id, payload)
        else:
            inc.task = self.host.loop.create_task(self._serve(sid, inc, self.peer_id))

    def _serving(self) -> int:
        return sum(1 for sid in self.incoming if not _is_uni(sid))

    def _release(self, sid: int, inc: _Incoming) -> None:
        if self.incoming.get(sid) is inc:
            del self.incoming[sid]
            self.buffered -= len(inc.buf)

    def _drop(self, sid: int, code: StreamCode, ended: bool) -> None:
        """Refuse a peer's stream: STOP_SENDING (and RESET_STREAM for a bi stream)."""
        if not ended:
            self.dropped.add(sid)
        with contextlib.suppress(ValueError, RuntimeError):
            self.quic.stop_stream(sid, int(code))
        if not _is_uni(sid):
            with contextlib.suppress(ValueError, RuntimeError):
                self.quic.reset_stream(sid, int(code))
        self.transmit_soon()

    def _on_stream_reset(self, sid: int, code: int) -> None:
        self.dropped.discard(sid)
        pending = self.pending.pop(sid, None)
        if pending is not None and not pending.fut.done():
            pending.fut.set_exception(MeshError(f"peer reset the stream (code {code:#x})"))
            return
        inc = self.incoming.get(sid)
        if inc is not None:
            self._release(sid, inc)
            if inc.task is not None:
                inc.task.cancel()  # the requester gave up: stop the work
        if _peer_initiated(sid, self.is_client) and not _is_uni(sid):
            # finish our half too, or the stream would hold one of the peer's stream credits
            with contextlib.suppress(ValueError, RuntimeError):
                self.quic.reset_stream(sid, int(StreamCode.CANCELLED))
            self.transmit_soon()

    def _on_stop_sending(self, sid: int, code: int) -> None:
        inc = self.incoming.get(sid)
        if inc is not None and inc.task is not None:
            inc.task.cancel()  # nobody will read the answer
        pending = self.pending.pop(sid, None)
        if pending is not None and not pending.fut.done():
            pending.fut.set_exception(
                MeshError(f"peer refused the request stream (code {code:#x})"))
            with contextlib.suppress(ValueError, RuntimeError):
                self.quic.stop_stream(sid, int(StreamCode.CANCELLED))
            self.transmit_soon()

    async def _serve(self, sid: int, inc: _Incoming, peer: bytes) -> None:
        try:
            result = await self.host._on_request(peer, bytes(inc.buf))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("mesh: request handler failed for %s", self.label())
            self._answer(sid, None, StreamCode.HANDLER_FAILED)
        else:
            self._answer(sid, result, StreamCode.NO_RESPONSE)
        finally:
            self._release(sid, inc)
            if self.retiring:
                self.maybe_finish_retiring()

    def _answer(self, sid: int, result: bytes | None, code: StreamCode) -> None:
        if self.state is State.CLOSED:
            return
        try:
            if result is None:
                self.quic.reset_stream(sid, int(code))
            else:
                self.quic.send_stream_data(sid, result, end_stream=True)
        except (ValueError, RuntimeError):
            return  # the peer reset or stopped the stream meanwhile
        self.transmit_soon()

    # --- our side ------------------------------------------------------------------------

    def unacked_bytes(self) -> int:
        """Bytes written on our streams that the peer has not acknowledged yet."""
        return sum(len(s.sender._buffer) for s in self.quic._streams.values())

    def open_request(self, data: bytes) -> tuple[int, asyncio.Future[bytes]]:
        sid = self.quic.get_next_available_stream_id(is_unidirectional=False)
        self.quic.send_stream_data(sid, data, end_stream=True)
        fut: asyncio.Future[bytes] = self.host.loop.create_future()
        self.pending[sid] = _Pending(fut)
        self.transmit_soon()
        return sid, fut

    def abort_request(self, sid: int, code: StreamCode) -> None:
        """Give up on a request: RESET_STREAM + STOP_SENDING so the peer can stop work."""
        self.pending.pop(sid, None)
        if self.state is State.CLOSED:
            return
        stream = self.quic._streams.get(sid)
        if stream is not None and stream.is_blocked:
            # over the peer's stream limit: aioquic would send the frames anyway, which the
            # peer treats as a STREAM_LIMIT_ERROR; reset it once the peer lets it open
            self.deferred_aborts[sid] = code
            return
        self._reset_both(sid, code)
        if self.retiring:
            self.maybe_finish_retiring()

    def _flush_deferred_aborts(self) -> None:
        for sid, code in list(self.deferred_aborts.items()):
            stream = self.quic._streams.get(sid)
            if stream is None or not stream.is_blocked:
                del self.deferred_aborts[sid]
                self._reset_both(sid, code)

    def _reset_both(self, sid: int, code: StreamCode) -> None:
        with contextlib.suppress(ValueError, RuntimeError):
            self.quic.reset_stream(sid, int(code))
        with contextlib.suppress(ValueError, RuntimeError):
            self.quic.stop_stream(sid, int(code))
        self.transmit_soon()

    def send_uni(self, data: bytes) -> None:
        sid = self.quic.get_next_available_stream_id(is_unidirectional=True)
        self.quic.send_stream_data(sid, data, end_stream=True)
        self.transmit_soon()

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
