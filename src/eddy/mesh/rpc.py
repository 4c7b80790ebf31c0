"""Request/response over single-use mesh streams: one frame each way, dispatched by tag.

The transport hands us a whole stream (bounded by its max_stream_bytes); this layer parses
the frame (seed 000's grammar: tag, trace context, length, postcard payload), continues the
sender's trace, runs the tag's handler and frames its answer under the same tag. An unknown
tag is dropped with an `unsupported_tag` span; a malformed frame is dropped with a log line
naming why. Neither touches the connection or any other stream.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from opentelemetry import context as otel_context

from eddy.mesh.frames import (
    Frame,
    FrameError,
    current_trace_context,
    encode_frame,
    parse_frame,
    remote_context,
    tag_class,
)
from eddy.postcard import PostcardError
from eddy.telemetry.tracing import span

log = logging.getLogger(__name__)

#: a handler gets the verified peer id and the frame, returns the answer's payload (None:
#: no answer, the stream is reset)
TagHandler = Callable[[bytes, Frame], Awaitable[bytes | None]]


class Transport(Protocol):
    async def request(self, peer: bytes, data: bytes, timeout_s: float) -> bytes: ...


class MeshRpc:
    def __init__(self, max_payload: int) -> None:
        self.max_payload = max_payload
        self.handlers: dict[int, TagHandler] = {}
        self.transport: Transport | None = None
        #: frames seen by tag, for metrics and `eddy cluster status`
        self.frames_in: dict[int, int] = {}
        self.frames_out: dict[int, int] = {}
        self.bytes_in = 0
        self.bytes_out = 0
        self.dropped: dict[str, int] = {}

    def handle(self, tag: int, handler: TagHandler) -> None:
        self.handlers[tag] = handler

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    async def on_request(self, peer: bytes, data: bytes) -> bytes | None:
        """The transport's incoming-stream callback."""
        self.bytes_in += len(data)
        try:
            frame = parse_frame(data, self.max_payload)
        except FrameError as exc:
            self._drop(exc.reason)
            log.info("dropped a mesh stream from %s: %s", peer.hex()[:12], exc)
            return None
        self.frames_in[frame.tag] = self.frames_in.get(frame.tag, 0) + 1
        handler = self.handlers.get(frame.tag)
        if handler is None:
            self.note_unsupported(peer, frame.tag)
            return None
        token = otel_context.attach(remote_context(frame.trace)) if frame.trace else None
        try:
            answer = await handler(peer, frame)
        except PostcardError as exc:
            self._drop("bad_payload")
            log.info("dropped a mesh stream from %s: tag %#04x: %s", peer.hex()[:12],
                     frame.tag, exc)
            return None
        finally:
            if token is not None:
                otel_context.detach(token)
        if answer is None:
            return None
        out = encode_frame(frame.tag, answer, current_trace_context())
        self.bytes_out += len(out)
        return out

    def note_unsupported(self, peer: bytes, tag: int) -> None:
        """A frame under a tag nobody handles: dropped, with seed 000's span."""
        self._drop("unsupported_tag")
        with span("unsupported_tag", tag=tag, tag_class=tag_class(tag), peer=peer.hex()[:12]):
            pass

    def on_message(self, peer: bytes, data: bytes) -> Frame | None:
        """A one-way message (uni stream or datagram) parsed, or None if dropped."""
        self.bytes_in += len(data)
        try:
            frame = parse_frame(data, self.max_payload)
        except FrameError as exc:
            self._drop(exc.reason)
            log.info("dropped a mesh message from %s: %s", peer.hex()[:12], exc)
            return None
        self.frames_in[frame.tag] = self.frames_in.get(frame.tag, 0) + 1
        return frame

    def frame(self, tag: int, payload: bytes) -> bytes:
        """A one-way frame to send, carrying the current trace."""
        self.frames_out[tag] = self.frames_out.get(tag, 0) + 1
        data = encode_frame(tag, payload, current_trace_context())
        self.bytes_out += len(data)
        return data

    async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes:
        """Send one frame on a new bi stream and return the answer's payload. Raises the
        transport's errors, or FrameError if the answer is malformed or under another tag."""
        assert self.transport is not None, "MeshRpc.transport is set when the mesh starts"
        data = self.frame(tag, payload)
        answer = await self.transport.request(peer, data, timeout_s)
        self.bytes_in += len(answer)
        frame = parse_frame(answer, self.max_payload)
        if frame.tag != tag:
            raise FrameError(f"answer under tag {frame.tag:#04x}, asked under {tag:#04x}",
                             "bad_tag")
        return frame.payload
