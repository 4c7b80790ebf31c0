"""The request memory pool (queued.max.request.bytes): reservations, the line of waiters,
the finisher that can always complete, and how connections use it: large frames grow with
the bytes that arrived, reading pauses instead of allocating, small requests flow on the
per-connection allowance, and any mix of connections completes every frame (no deadlock).
"""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.broker.connection import ALLOWANCE, SCRATCH_BYTES, Connection
from eddy.broker.memory_pool import MemoryPool

KiB = 1024


class _Owner:
    """Stands for a connection waiting on the pool; records its grants."""

    def __init__(self, pool: MemoryPool | None = None) -> None:
        self.pool = pool
        self.granted: list[int] = []

    def memory_granted(self, nbytes: int) -> None:
        self.granted.append(nbytes)


def test_reserve_within_the_pool_and_release() -> None:
    pool = MemoryPool(100, 40)
    a = _Owner()
    assert pool.reserve(a, 60)
    assert pool.used == 60
    pool.release(60)
    assert pool.used == 0
    assert pool.reserve(a, 0)  # nothing to reserve always fits


def test_a_pool_smaller_than_one_request_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold"):
        MemoryPool(100, 101)


def test_one_owner_at_a_time_may_use_the_last_largest_bytes() -> None:
    pool = MemoryPool(100, 40)  # 60 shared, 40 kept for the finisher
    x, f, a = _Owner(), _Owner(), _Owner()
    assert pool.reserve(x, 60)
    assert pool.reserve(f, 30)  # beyond the shared part: f becomes the finisher
    assert pool.is_finisher(f)
    assert not pool.reserve(a, 5)  # no second finisher
    assert pool.used == 90 and pool.waiting == 1
    assert pool.reserve(f, 10)  # the finisher goes on up to the whole pool
    assert not pool.reserve(f, 1)  # ...and no further: it waits, ahead of everyone
    pool.release(1)
    assert f.granted == [1] and a.granted == []
    pool.done(f)  # f's request is complete: a takes the role, and what it asked for
    assert pool.is_finisher(a) and a.granted == []  # ...once it fits
    pool.release(5)
    assert a.granted == [5]


def test_waiters_are_granted_in_arrival_order_and_nobody_overtakes() -> None:
    pool = MemoryPool(100, 40)
    x, f, a, b = _Owner(), _Owner(), _Owner(), _Owner()
    assert pool.reserve(x, 60)
    assert pool.reserve(f, 30)  # the finisher
    assert not pool.reserve(a, 20)
    assert not pool.reserve(b, 1)  # would fit the pool, but a is first
    pool.release(10)
    assert (a.granted, b.granted) == ([], [])
    pool.done(f)  # a becomes the finisher: 80 + 20 fits the whole pool
    assert a.granted == [20] and b.granted == []
    pool.release(30)  # f's request has been handled
    assert b.granted == []  # 71 is over the shared 60 and a is still the finisher
    pool.done(a)
    assert b.granted == [1] and pool.used == 71


def test_an_owner_that_leaves_the_line_is_not_granted() -> None:
    pool = MemoryPool(100, 40)
    x, f, a, b = _Owner(), _Owner(), _Owner(), _Owner()
    pool.reserve(x, 60)
    pool.reserve(f, 40)
    assert not pool.reserve(a, 10)
    assert not pool.reserve(b, 10)
    pool.done(a)  # a's connection closed
    pool.done(f)
    pool.release(60)
    assert a.granted == [] and b.granted == [10]


def test_unbounded_pool_always_grants() -> None:
    pool = MemoryPool.unbounded()
    assert pool.reserve(_Owner(), 1 << 40)


# ---- connections on a pool -----------------------------------------------------------------


class _Transport:
    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class _Server:
    def connection_made(self, conn: Any) -> None:
        pass


def _conn(pool: MemoryPool, max_bytes: int) -> tuple[Connection, _Transport]:
    conn = Connection(_Server(), max_bytes, pool)
    transport = _Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def _frame(size: int, seed: int) -> bytes:
    body = bytes((seed + i) % 251 for i in range(min(size, 251))) * (size // 251 + 1)
    return struct.pack(">i", size) + body[:size]


def _feed(conn: Connection, transport: _Transport, data: bytes, pos: int, most: int) -> int:
    """Deliver up to `most` bytes from data[pos:] while reading is not paused; returns the
    new position."""
    while pos < len(data) and most > 0 and not transport.paused:
        buf = conn.get_buffer(-1)
        n = min(len(buf), most, len(data) - pos)
        buf[:n] = data[pos : pos + n]
        conn.buffer_updated(n)
        pos += n
        most -= n
    return pos


def test_a_large_frame_takes_memory_as_its_bytes_arrive() -> None:
    pool = MemoryPool.unbounded()
    conn, transport = _conn(pool, 100 << 20)
    data = _frame(100 << 20, 1)[: 300 * KiB]  # a 100 MiB request, 300 KiB of it sent
    assert _feed(conn, transport, data, 0, len(data)) == len(data)
    assert pool.used <= 2 * len(data)  # not the 100 MiB announced


def test_small_requests_flow_on_the_allowance_while_the_pool_is_full() -> None:
    async def run() -> None:
        big = 512 * KiB
        pool = MemoryPool(big, big)  # room for one large request, nothing more
        a, ta = _conn(pool, big)
        b, tb = _conn(pool, big)
        c, tc = _conn(pool, big)
        frame_a, frame_b = _frame(big - 4, 1), _frame(big - 4, 2)
        pos_a = _feed(a, ta, frame_a, 0, 300 * KiB)
        pos_b = _feed(b, tb, frame_b, 0, 300 * KiB)
        assert tb.paused and not ta.paused  # b waits for memory; a is the finisher
        smalls = b"".join(_frame(1000, i) for i in range(50))
        assert _feed(c, tc, smalls, 0, len(smalls)) == len(smalls)
        for _ in range(50):  # c is not held up: one small request at a time is free
            frame = await asyncio.wait_for(c.read_frame(), 1)
            assert frame is not None and len(frame) == 1000
            c.release(len(frame))
        assert _feed(a, ta, frame_a, pos_a, len(frame_a)) == len(frame_a)
        got_a = await asyncio.wait_for(a.read_frame(), 1)
        assert got_a == frame_a[4:]
        pos_b = _feed(b, tb, frame_b, pos_b, len(frame_b))
        assert pos_b < len(frame_b) and tb.paused  # a's request holds the pool until handled
        a.release(len(got_a))
        assert not tb.paused  # b was woken
        assert _feed(b, tb, frame_b, pos_b, len(frame_b)) == len(frame_b)
        assert await asyncio.wait_for(b.read_frame(), 1) == frame_b[4:]

    asyncio.run(run())


def test_eof_while_waiting_for_memory_still_serves_the_complete_frames() -> None:
    async def run() -> None:
        pool = MemoryPool(256 * KiB, 256 * KiB)
        hog, thog = _conn(pool, 256 * KiB)
        conn, transport = _conn(pool, 256 * KiB)
        hog_frame = _frame(256 * KiB - 4, 9)
        _feed(hog, thog, hog_frame, 0, len(hog_frame))  # holds the pool, not yet handled
        held = await hog.read_frame()
        assert held is not None
        frames = [_frame(40 * KiB, i) for i in range(6)]  # more than the pool has left
        data = b"".join(frames)
        delivered = _feed(conn, transport, data, 0, len(data))
        assert transport.paused and delivered < len(data)
        conn.eof_received()  # the client sent no more
        complete = delivered // len(frames[0])  # frames that arrived whole
        first = await asyncio.wait_for(conn.read_frame(), 1)
        assert first == frames[0][4:]
        hog.release(len(held))
        got = [first]
        while (frame := await asyncio.wait_for(conn.read_frame(), 1)) is not None:
            got.append(frame)
            conn.release(len(frame))
        assert complete >= 2 and got == [f[4:] for f in frames[:complete]]

    asyncio.run(run())


def test_the_buffer_kept_for_the_next_large_frame_goes_when_idle_or_needed() -> None:
    async def run() -> None:
        pool = MemoryPool(4 << 20, 1 << 20)
        conn, transport = _conn(pool, 1 << 20)
        frames = [_frame(900 * KiB, i) for i in range(3)]
        for frame in frames:  # one after another, as a producer sends them
            _feed(conn, transport, frame, 0, len(frame))
            got = await asyncio.wait_for(conn.read_frame(), 1)
            assert got == frame[4:]
            conn.release(len(got))
        kept = pool.used
        assert 0 < kept <= 1 << 20  # the buffer, ready for the next one
        conn.trim()  # a large frame came since the last sweep: kept
        assert pool.used == kept
        conn.trim()  # none since: let go
        assert pool.used == 0
        other, tother = _conn(pool, 1 << 20)
        _feed(conn, transport, frames[0], 0, len(frames[0]))
        conn.release(len(await asyncio.wait_for(conn.read_frame(), 1)))
        assert pool.used == kept
        handled = _Owner()  # requests being handled hold the rest of the pool
        assert pool.reserve(handled, pool.capacity - pool.used)
        pool.done(handled)
        hog = _frame(1 << 20, 7)  # so another connection's large frame must wait
        _feed(other, tother, hog, 0, len(hog))
        assert tother.paused
        conn.trim()  # (a large frame came since the last sweep, but others wait)
        assert not tother.paused  # its memory went to the waiting connection

    asyncio.run(run())


def test_closing_gives_all_memory_back() -> None:
    pool = MemoryPool(1 << 20, 1 << 20)
    conn, transport = _conn(pool, 1 << 20)
    data = _frame(100 * KiB, 1) + _frame(900 * KiB, 2)[: 500 * KiB]
    _feed(conn, transport, data, 0, len(data))
    assert pool.used > 0
    conn.connection_lost(None)
    conn.close_out()
    assert pool.used == 0


def test_two_half_sent_large_frames_both_complete() -> None:
    """Each holds about half the pool and needs more: one of them (the finisher) may use
    the part kept back, completes, and once handled lets the other complete."""
    async def run() -> None:
        big = 400 * KiB
        pool = MemoryPool(big, big)
        (a, ta), (b, tb) = _conn(pool, big), _conn(pool, big)
        fa, fb = _frame(big, 1), _frame(big, 2)
        pa = _feed(a, ta, fa, 0, 200 * KiB)
        pb = _feed(b, tb, fb, 0, 200 * KiB)
        assert _feed(a, ta, fa, pa, len(fa)) == len(fa)
        pb = _feed(b, tb, fb, pb, len(fb))
        got_a = await asyncio.wait_for(a.read_frame(), 1)
        assert got_a == fa[4:] and tb.paused
        a.release(len(got_a))
        assert _feed(b, tb, fb, pb, len(fb)) == len(fb)
        assert await asyncio.wait_for(b.read_frame(), 1) == fb[4:]

    asyncio.run(run())


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(
        st.lists(st.one_of(st.integers(0, 2000), st.integers(60 * KiB, 400 * KiB)),
                 min_size=1, max_size=3),
        min_size=2, max_size=8,
    ),
    extra=st.sampled_from([0, 100 * KiB, 600 * KiB]),
    seed=st.integers(0, 2**32),
)
def test_every_frame_of_every_connection_completes(
        sizes: list[list[int]], extra: int, seed: int) -> None:
    """Connections send their frames in random slices, each served and released by its
    own request loop; however small the pool, all frames come out whole and the pool
    never goes over its capacity nor keeps anything once the connections are closed."""
    largest = 400 * KiB
    pool = MemoryPool(largest + extra, largest)
    rng = random.Random(seed)

    async def run() -> None:
        conns = [_conn(pool, largest) for _ in sizes]
        datas = [[_frame(s, i * 10 + j) for j, s in enumerate(row)] for i, row in
                 enumerate(sizes)]
        got: list[list[bytes]] = [[] for _ in sizes]

        async def serve(i: int) -> None:
            conn = conns[i][0]
            while (frame := await conn.read_frame()) is not None:
                got[i].append(frame)
                await asyncio.sleep(0)
                conn.release(len(frame))

        servers = [asyncio.ensure_future(serve(i)) for i in range(len(sizes))]
        streams = [b"".join(d) for d in datas]
        pos = [0] * len(sizes)
        for _ in range(100_000):  # bounded: a deadlock fails below instead of hanging
            open_ = [i for i in range(len(sizes)) if pos[i] < len(streams[i])]
            if not open_:
                break
            ready = [i for i in open_ if not conns[i][1].paused]
            if ready:
                i = rng.choice(ready)
                pos[i] = _feed(conns[i][0], conns[i][1], streams[i], pos[i],
                               rng.choice([1, 5000, 40_000, 100_000]))
                assert pool.used <= pool.capacity
            await asyncio.sleep(0)
        assert all(p == len(s) for p, s in zip(pos, streams, strict=True)), "stuck"
        for conn, _ in conns:
            conn.eof_received()
        await asyncio.wait_for(asyncio.gather(*servers), 5)
        assert got == [[d[4:] for d in row] for row in datas]
        for conn, _ in conns:  # as the server does when a connection's loop ends
            conn.close_out()
        assert pool.used == 0

    asyncio.run(run())


def test_allowance_is_the_scratch_buffer_size() -> None:
    assert ALLOWANCE == SCRATCH_BYTES == 64 * KiB
