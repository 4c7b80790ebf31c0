"""A follower's link to its leader reads size-prefixed frames straight into their buffers:
frames cut anywhere by the socket come out whole and in order, a size outside the cap
fails the link before anything is allocated, one finished frame at most is held (reading
pauses), and a real request/response round trip decodes."""

from __future__ import annotations

import asyncio
import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from bench.fuzz.replica_decoders import CORRELATION, FETCH, seed_inputs
from eddy.cluster.replication.link import LeaderLink, MalformedResponse, _Frames


class FakeTransport:
    def __init__(self) -> None:
        self.paused = False
        self.aborted = False
        self.closing = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        self.aborted = self.closing = True

    def is_closing(self) -> bool:
        return self.closing


def feed(frames: _Frames, data: bytes, cuts: list[int]) -> None:
    """Deliver ``data`` as the socket would, in chunks ending at ``cuts``."""
    pos = 0
    for end in [*sorted(c for c in cuts if 0 < c < len(data)), len(data)]:
        while pos < end:
            buf = frames.get_buffer(-1)
            n = min(len(buf), end - pos)
            assert n > 0
            buf[:n] = data[pos:pos + n]
            frames.buffer_updated(n)
            pos += n


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def new_frames(max_bytes: int = 1 << 20) -> tuple[_Frames, FakeTransport]:
    frames = _Frames(max_bytes)
    transport = FakeTransport()
    frames.connection_made(transport)  # type: ignore[arg-type]
    return frames, transport


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=4, max_size=300), min_size=1, max_size=4),
       st.lists(st.integers(0, 1300), max_size=12))
def test_frames_cut_anywhere_come_out_whole_and_in_order(payloads: list[bytes],
                                                         cuts: list[int]) -> None:
    async def main() -> list[bytes]:
        frames, transport = new_frames()
        out: list[bytes] = []
        for p in payloads:  # one request in flight: each answer is taken before the next
            feed(frames, framed(p), cuts)
            assert transport.paused  # a finished frame waits: reading paused meanwhile
            out.append(bytes(await frames.next_frame()))
            assert not transport.paused
        return out

    assert asyncio.run(main()) == payloads


@pytest.mark.parametrize("size", [-1, 0, 3, (1 << 20) + 1, 0x7FFFFFFF])
def test_a_size_outside_the_cap_fails_the_link_before_allocating(size: int) -> None:
    async def main() -> None:
        frames, transport = new_frames()
        feed(frames, struct.pack(">i", size) + b"xxxx", [])
        assert transport.aborted
        with pytest.raises(MalformedResponse, match=r"outside 4\.\."):
            await frames.next_frame()

    asyncio.run(main())


def test_a_connection_lost_mid_frame_fails_the_waiter() -> None:
    async def main() -> None:
        frames, _ = new_frames()
        waiting = asyncio.ensure_future(frames.next_frame())
        await asyncio.sleep(0)
        feed(frames, framed(b"0123456789")[:9], [])
        frames.connection_lost(None)
        with pytest.raises(ConnectionError):
            await waiting

    asyncio.run(main())


def test_a_fetch_round_trip_over_a_real_socket() -> None:
    answer = seed_inputs()[0]  # a Fetch v12 answer with correlation id CORRELATION

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(size)
        for i in range(0, len(answer) + 4, 7):  # dribbled out in small pieces
            writer.write(framed(answer)[i:i + 7])
            await writer.drain()
        writer.close()

    async def main() -> object:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        link = await LeaderLink.connect(f"127.0.0.1:{port}", "t", 1 << 20, 5.0)
        assert CORRELATION == 1  # the link's first request
        request = fetch_req.FetchRequest(
            replica_id=BrokerId(2), max_wait=datetime.timedelta(0),
            min_bytes=i32(1), max_bytes=i32(1 << 20),
            topics=(fetch_req.FetchTopic(topic=TopicName("t"), partitions=(
                fetch_req.FetchPartition(partition=i32(0), current_leader_epoch=i32(0),
                                         fetch_offset=i64(5), log_start_offset=i64(0),
                                         partition_max_bytes=i32(1 << 20)),)),),
            forgotten_topics_data=())
        response = await link.call(request, 5.0)
        with pytest.raises(ConnectionError):  # the server hung up: the next call fails
            await link.call(request, 5.0)
        await link.close()
        server.close()
        await server.wait_closed()
        return response

    response = asyncio.run(main())
    part = response.responses[0].partitions[0]  # type: ignore[attr-defined]
    assert FETCH == 1 and int(part.high_watermark) == 11 and len(part.records) > 0


def test_a_call_after_the_leader_hung_up_is_a_connection_error_under_uvloop() -> None:
    """The node runs on uvloop, whose transports raise RuntimeError ("the handler is
    closed") on a write after the connection closed: the link must say ConnectionError,
    which the fetcher retries (a RuntimeError killed the fetch loop, issue 28)."""
    import uvloop

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()  # hangs up at once

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        link = await LeaderLink.connect(f"127.0.0.1:{port}", "t", 1 << 20, 5.0)
        request = fetch_req.FetchRequest(
            replica_id=BrokerId(2), max_wait=datetime.timedelta(0), min_bytes=i32(1),
            max_bytes=i32(1 << 20), topics=(), forgotten_topics_data=())
        for _ in range(3):  # the first may still go out before the hang-up is seen
            with pytest.raises(ConnectionError):
                await link.call(request, 5.0)
        await link.close()
        server.close()
        await server.wait_closed()

    uvloop.run(main())


def test_stopping_a_fetcher_whose_loop_died_retrieves_the_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """``Fetcher.stop`` on a loop that had ended in an exception logs it; it raised it
    before, into a task nobody awaited ("Task exception was never retrieved")."""
    from types import SimpleNamespace

    from eddy.cluster.replication.fetcher import Fetcher

    async def dies() -> None:
        raise RuntimeError("the handler is closed")

    async def main() -> None:
        fetcher = Fetcher(SimpleNamespace(), 2)  # type: ignore[arg-type]
        fetcher._task = asyncio.get_running_loop().create_task(dies())
        await asyncio.sleep(0)
        assert fetcher._task.done()
        await fetcher.stop()  # no exception
        assert fetcher._task is None

    with caplog.at_level("WARNING", logger="eddy.cluster.replication.fetcher"):
        asyncio.run(main())
    assert "replicating from node 2 had stopped" in caplog.text
    assert "the handler is closed" in caplog.text
