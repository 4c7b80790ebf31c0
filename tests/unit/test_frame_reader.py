"""The listener's frame reader (eddy.broker.connection.Connection): size-prefixed frames come
out whole and in order however the bytes are split across reads, small ones through the
scratch buffer and large ones straight into their own; a bad size ends the stream after the
frames before it; reading pauses while too much is queued; EOF and a lost connection end
the stream after the queued frames."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.broker import connection
from eddy.protocol.errors import CloseConnection


class _Transport:
    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False


class _Server:
    def connection_made(self, conn: Any) -> None:
        pass


def _conn(max_bytes: int = 100 << 20) -> tuple[Any, _Transport]:
    conn = connection.Connection(_Server(), max_bytes)  # type: ignore[arg-type]
    transport = _Transport()
    conn.connection_made(transport)
    return conn, transport


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _feed(conn: Any, data: bytes, chunks: list[int]) -> None:
    """Deliver data as the transport would: into get_buffer(), in reads of the given sizes
    (each cut to what the buffer takes)."""
    pos = 0
    for i in range(len(data) + 1):  # every round moves at least one byte
        if pos >= len(data):
            return
        buf = conn.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), chunks[i % len(chunks)], len(data) - pos)
        buf[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        pos += n


async def _drain_frames(conn: Any, count: int) -> list[bytes]:
    return [await asyncio.wait_for(conn.read_frame(), 1) for _ in range(count)]


_PATTERN = bytes(range(251)) * 2


def _bodies(sizes: list[int]) -> list[bytes]:
    """Distinct bodies of the given sizes (a byte pattern shifted per frame)."""
    out = []
    for i, size in enumerate(sizes):
        row = _PATTERN[i % 251 : i % 251 + 251]
        out.append((row * (size // 251 + 1))[:size])
    return out


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(st.integers(0, 300), st.integers(60_000, 70_000), st.integers(200_000, 300_000)),
        min_size=1, max_size=6,
    ),
    # read sizes, cycled: small ones split headers and bodies; the last keeps it quick
    chunks=st.lists(st.sampled_from([1, 3, 4, 5, 97, 4096]), max_size=4).map(
        lambda c: [*c, 65_536]),
)
def test_frames_come_out_whole_and_in_order(sizes: list[int], chunks: list[int]) -> None:
    bodies = _bodies(sizes)
    conn, _ = _conn()
    data = b"".join(_frame(b) for b in bodies)

    async def run() -> list[bytes]:
        _feed(conn, data, chunks)
        return await _drain_frames(conn, len(bodies))

    assert asyncio.run(run()) == bodies


def test_frame_filling_the_scratch_buffer_exactly() -> None:
    scratch = connection.SCRATCH_BYTES
    bodies = _bodies([scratch - 4, scratch - 3, 10, scratch - 4])
    conn, _ = _conn()
    data = b"".join(_frame(b) for b in bodies)

    async def run() -> list[bytes]:
        _feed(conn, data, [7, scratch, 3])
        return await _drain_frames(conn, len(bodies))

    assert asyncio.run(run()) == bodies


def test_bad_size_ends_the_stream_after_the_frames_before_it() -> None:
    conn, transport = _conn(max_bytes=1000)
    data = _frame(b"first") + struct.pack(">i", 1001) + b"x" * 50

    async def run() -> None:
        _feed(conn, data, [1000])
        assert await conn.read_frame() == b"first"
        with pytest.raises(CloseConnection, match=r"socket\.request\.max\.bytes=1000"):
            await conn.read_frame()

    asyncio.run(run())
    assert transport.paused


def test_negative_size_is_refused() -> None:
    conn, _ = _conn()

    async def run() -> None:
        _feed(conn, struct.pack(">i", -1), [4])
        with pytest.raises(CloseConnection):
            await conn.read_frame()

    asyncio.run(run())


def test_eof_ends_the_stream_after_the_queued_frames() -> None:
    conn, _ = _conn()

    async def run() -> None:
        _feed(conn, _frame(b"a") + _frame(b"b") + b"\x00\x00", [1 << 16])
        assert conn.eof_received() is True  # the transport stays open for the responses
        assert await conn.read_frame() == b"a"
        assert await conn.read_frame() == b"b"
        assert await conn.read_frame() is None  # the partial frame is dropped

    asyncio.run(run())


def test_reader_waiting_is_woken_by_a_frame_and_by_a_lost_connection() -> None:
    async def run() -> None:
        conn, _ = _conn()
        waiting = asyncio.ensure_future(conn.read_frame())
        await asyncio.sleep(0)
        _feed(conn, _frame(b"late"), [2])
        assert await asyncio.wait_for(waiting, 1) == b"late"
        waiting = asyncio.ensure_future(conn.read_frame())
        await asyncio.sleep(0)
        conn.connection_lost(None)
        assert await asyncio.wait_for(waiting, 1) is None
        with pytest.raises(ConnectionResetError):
            await conn.drain()

    asyncio.run(run())


def test_reading_pauses_while_too_much_is_queued_and_resumes_once_served() -> None:
    conn, transport = _conn()
    big = b"z" * (connection.QUEUED_BYTES // 2 + 1)

    async def run() -> None:
        _feed(conn, _frame(big) + _frame(big) + _frame(b"small"), [1 << 20])
        assert transport.paused and transport.pauses == 1
        assert await conn.read_frame() == big
        assert await conn.read_frame() == big
        assert not transport.paused
        assert await conn.read_frame() == b"small"

    asyncio.run(run())


def test_drain_waits_for_resume_writing() -> None:
    async def run() -> None:
        conn, _ = _conn()
        await asyncio.wait_for(conn.drain(), 1)  # not paused: returns at once
        conn.pause_writing()
        waiting = asyncio.ensure_future(conn.drain())
        await asyncio.sleep(0)
        assert not waiting.done()
        conn.resume_writing()
        await asyncio.wait_for(waiting, 1)

    asyncio.run(run())
