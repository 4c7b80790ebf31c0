"""One connection's request loop: answers in request order; consecutive Produces overlap
(each starts while the earlier ones still wait), anything else waits for what came before;
a request that closes the connection does so after the earlier answers went out."""

from __future__ import annotations

import asyncio
from collections.abc import Sized

import pytest

from eddy.broker.pipeline import MAX_IN_FLIGHT, serve_pipelined
from eddy.protocol.errors import CloseConnection

PRODUCE = b"\x00\x00"
FETCH = b"\x00\x01"


class Conn:
    def __init__(self, frames: list[bytes]) -> None:
        self.frames = list(frames)
        self.busy = False
        self.released = 0
        self.closed = asyncio.Event()

    async def read_frame(self) -> bytes | None:
        if self.frames:
            await asyncio.sleep(0)
            return self.frames.pop(0)
        await self.closed.wait()
        return None

    def release(self, nbytes: int) -> None:
        self.released += nbytes


def frame(kind: bytes, n: int) -> bytes:
    return kind + n.to_bytes(2, "big")


async def run(frames: list[bytes], delays: dict[int, float],
              fail: int | None = None) -> tuple[list[int], list[str], Conn]:
    conn = Conn(frames)
    sent: list[int] = []
    events: list[str] = []

    async def dispatch(f: bytes) -> list[Sized] | None:
        n = int.from_bytes(f[2:4], "big")
        events.append(f"start {n}")
        await asyncio.sleep(delays.get(n, 0))
        events.append(f"end {n}")
        if n == fail:
            raise CloseConnection(f"request {n} is bad")
        return [n.to_bytes(2, "big")]

    async def send(chunks: list[Sized]) -> None:
        sent.append(int.from_bytes(bytes(chunks[0]), "big"))  # type: ignore[call-overload]
        if len(sent) + (1 if fail is not None else 0) >= len(frames):
            conn.closed.set()

    def abort() -> None:
        conn.closed.set()

    await asyncio.wait_for(serve_pipelined(conn, dispatch, send, abort), 5)
    return sent, events, conn


def test_produces_overlap_and_answer_in_order() -> None:
    frames = [frame(PRODUCE, i) for i in range(4)]
    sent, events, conn = asyncio.run(run(frames, {0: 0.05, 1: 0.01}))
    assert sent == [0, 1, 2, 3]
    # every produce started before the first one finished
    assert events.index("start 3") < events.index("end 0")
    assert conn.released == sum(len(f) for f in frames)
    assert not conn.busy


def test_other_requests_wait_for_everything_before() -> None:
    frames = [frame(PRODUCE, 0), frame(FETCH, 1), frame(PRODUCE, 2)]
    sent, events, _ = asyncio.run(run(frames, {0: 0.05, 1: 0.03}))
    assert sent == [0, 1, 2]
    assert events.index("end 0") < events.index("start 1")
    # a produce after a fetch waits for the fetch too
    assert events.index("end 1") < events.index("start 2")


def test_a_failing_request_closes_after_earlier_answers() -> None:
    frames = [frame(PRODUCE, 0), frame(PRODUCE, 1), frame(FETCH, 2)]
    with pytest.raises(CloseConnection, match="request 1"):
        asyncio.run(run(frames, {0: 0.03}, fail=1))


def test_in_flight_is_bounded() -> None:
    n = MAX_IN_FLIGHT * 3
    frames = [frame(PRODUCE, i) for i in range(n)]
    sent, events, _ = asyncio.run(run(frames, {i: 0.01 for i in range(n)}))
    assert sent == list(range(n))
    started = 0
    most = 0
    for e in events:
        started += 1 if e.startswith("start") else -1
        most = max(most, started)
    assert most <= MAX_IN_FLIGHT + 1
