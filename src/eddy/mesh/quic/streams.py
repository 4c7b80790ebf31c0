"""Per-connection stream handling of a mesh QUIC connection (`MeshConnection`'s base).

The peer's streams: requests (bi) and messages (uni) are accumulated, bounded per stream,
per connection and in number, then served by a handler task or delivered; resets and
STOP_SENDING in both directions. Our streams: requests waiting for their response, aborted
requests (deferred while the stream is blocked), messages. The connection itself (aioquic
events, handshake, timers, datagrams) is `eddy.mesh.quic.protocol.MeshConnection`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from eddy.mesh.quic.errors import MeshError, State, StreamCode

if TYPE_CHECKING:
    from eddy.mesh.quic.protocol import MeshQuicConnection
    from eddy.mesh.quic.transport import MeshTransport

#: the connection's logger (these methods were MeshConnection's, in eddy.mesh.quic.protocol)
log = logging.getLogger("eddy.mesh.quic.protocol")


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


class MeshStreams:
    """The stream half of `MeshConnection`: its state is set up by `MeshConnection.__init__`."""

    host: MeshTransport
    quic: MeshQuicConnection
    is_client: bool
    peer_id: bytes | None
    state: State
    retiring: bool
    pending: dict[int, _Pending]
    incoming: dict[int, _Incoming]
    dropped: set[int]  # peer streams we reset, until they end
    deferred_aborts: dict[int, StreamCode]  # our blocked streams to reset
    buffered: int  # bytes of incoming streams held (accumulating or being served)

    if TYPE_CHECKING:  # provided by MeshConnection
        def usable(self) -> bool: ...
        def label(self) -> str: ...
        def transmit_soon(self) -> None: ...
        def maybe_finish_retiring(self) -> None: ...

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

