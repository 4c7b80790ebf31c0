"""Single-use stream RPC: dispatch by tag, the sender's trace continued, bad frames and
unknown tags dropped without touching anything else."""

from __future__ import annotations

import asyncio

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from eddy.mesh.frames import TAG_CONTROL_RPC, TAG_PING, Frame, FrameError, encode_frame
from eddy.mesh.rpc import MeshRpc

PEER = b"\x01" * 32


class Loopback:
    """A transport whose requests land on another MeshRpc in the same loop."""

    def __init__(self, server: MeshRpc) -> None:
        self.server = server

    async def request(self, peer: bytes, data: bytes, timeout_s: float) -> bytes:
        answer = await self.server.on_request(PEER, data)
        if answer is None:
            raise ConnectionResetError("stream reset")
        return answer


def pair() -> tuple[MeshRpc, MeshRpc]:
    server, client = MeshRpc(1 << 16), MeshRpc(1 << 16)
    client.transport = Loopback(server)
    return client, server


def test_a_handler_runs_in_the_senders_trace_and_answers_under_its_tag() -> None:
    client, server = pair()
    seen: list[tuple[int, int]] = []

    async def echo(peer: bytes, frame: Frame) -> bytes:
        ctx = trace.get_current_span().get_span_context()
        seen.append((ctx.trace_id, ctx.span_id))
        return frame.payload[::-1]

    server.handle(TAG_PING, echo)
    sender = SpanContext(trace_id=0x1234, span_id=0x99, is_remote=False,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))

    async def go() -> bytes:
        with trace.use_span(NonRecordingSpan(sender)):
            return await client.call(PEER, TAG_PING, b"abc", 1.0)

    assert asyncio.run(go()) == b"cba"
    assert seen == [(0x1234, 0x99)]
    assert server.frames_in == {TAG_PING: 1} and client.frames_out == {TAG_PING: 1}

    async def untraced() -> bytes:
        return await client.call(PEER, TAG_PING, b"xy", 1.0)

    assert asyncio.run(untraced()) == b"yx"
    assert seen[1] == (0, 0)  # no context sent: none continued


def test_unknown_tags_and_malformed_frames_are_dropped_and_counted() -> None:
    _, server = pair()

    async def go() -> list[bytes | None]:
        return [
            await server.on_request(PEER, encode_frame(0x95, b"ext")),  # unknown extension
            await server.on_request(PEER, encode_frame(TAG_CONTROL_RPC, b"")),  # no handler
            await server.on_request(PEER, b"\x10" + b"\x00" * 32 + b"\x05ab"),  # truncated
            await server.on_request(PEER, b"\x00" * 40),  # reserved tag 0x00
        ]

    assert asyncio.run(go()) == [None, None, None, None]
    assert server.dropped == {"unsupported_tag": 2, "truncated": 1, "reserved_tag": 1}


def test_a_handler_that_cannot_decode_its_payload_drops_the_stream() -> None:
    client, server = pair()

    async def strict(peer: bytes, frame: Frame) -> bytes:
        from eddy import postcard
        from eddy.mesh.frames import PullRequest

        return postcard.encode(postcard.decode(PullRequest, frame.payload))

    server.handle(TAG_PING, strict)

    async def go() -> None:
        await client.call(PEER, TAG_PING, b"\x01\x02", 1.0)

    try:
        asyncio.run(go())
    except ConnectionResetError:
        pass
    else:
        raise AssertionError("a payload the handler cannot decode must reset the stream")
    assert server.dropped == {"bad_payload": 1}


def test_an_answer_under_another_tag_is_refused() -> None:
    client, _ = pair()

    class Wrong:
        async def request(self, peer: bytes, data: bytes, timeout_s: float) -> bytes:
            return encode_frame(TAG_CONTROL_RPC, b"")

    client.transport = Wrong()
    try:
        asyncio.run(client.call(PEER, TAG_PING, b"", 1.0))
    except FrameError as exc:
        assert exc.reason == "bad_tag"
    else:
        raise AssertionError("expected FrameError")
