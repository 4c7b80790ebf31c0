"""``serve_pipelined``: one connection's request loop, answering in order, with consecutive
Produce requests overlapped.

Kafka handles a connection's requests one at a time. An acks=all Produce here waits after
its append (group-commit fsync, the ISR's fetches), and a client keeps several in flight
(librdkafka: up to 5): handled one at a time, each would wait a whole fsync and replication
round of its own. So a Produce whose predecessors still in flight are all Produces starts
at once: its appends run (on the event loop, in arrival order: tasks start in the order
they were made) while the earlier ones wait, and they all share the next fsync and fetch
round. Any other request waits until every earlier one is done, as before, so what it sees
and does is ordered exactly as if handled one at a time. Responses go out in request order.
At most ``MAX_IN_FLIGHT`` requests are pending per connection (handled or answered: a client
that does not read its answers stops being read); their frames stay counted in the memory
pool until handled.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sized
from typing import Any, Protocol

from eddy.protocol.apis import ApiKey

__all__ = ["MAX_IN_FLIGHT", "serve_pipelined"]

MAX_IN_FLIGHT = 8
_PRODUCE = int(ApiKey.PRODUCE).to_bytes(2, "big")

Chunks = list[Sized] | None


class FrameSource(Protocol):
    busy: bool

    async def read_frame(self) -> bytes | None: ...

    def release(self, nbytes: int) -> None: ...


def _is_produce(frame: bytes) -> bool:
    return frame[:2] == _PRODUCE


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # a request whose connection went away: its outcome is dropped


async def serve_pipelined(conn: FrameSource,
                          dispatch: Callable[[bytes], Awaitable[Chunks]],
                          send: Callable[[list[Sized]], Awaitable[None]],
                          abort: Callable[[], None]) -> None:
    """Run until the client closes (or a request closes the connection: its exception is
    raised here once the earlier responses were sent)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[asyncio.Task[Chunks] | None] = asyncio.Queue()
    unsent: deque[bool] = deque()  # requests taken whose answers are not out: a Produce?
    sent = asyncio.Event()  # an answer went out

    async def handle(frame: bytes) -> Chunks:
        try:
            return await dispatch(frame)
        finally:
            conn.release(len(frame))

    async def write_in_order() -> None:
        try:
            while True:
                task = await queue.get()
                if task is None:
                    return
                chunks = await task
                if chunks is not None:
                    await send(chunks)
                del chunks  # sent: let go of its file pins
                unsent.popleft()
                conn.busy = bool(unsent)
                sent.set()
        except BaseException:
            abort()  # the reader stops at its next read; what is queued is dropped
            while not queue.empty():
                left = queue.get_nowait()
                if left is not None:
                    left.add_done_callback(_retrieve)
            raise

    async def wait_sent() -> None:
        sent.clear()
        waiter = loop.create_task(sent.wait())
        try:
            await asyncio.wait({writer, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()

    writer = loop.create_task(write_in_order())
    writer.add_done_callback(_retrieve)  # raised below; if this loop is cancelled, dropped
    try:
        while not writer.done():
            frame = await conn.read_frame()
            if frame is None:
                break
            produce = _is_produce(frame)
            # a Produce overlaps earlier Produces (up to MAX_IN_FLIGHT); anything else
            # waits until every earlier answer is out, as one request at a time would
            while unsent and not writer.done() and (
                    not (produce and all(unsent)) or len(unsent) >= MAX_IN_FLIGHT):
                await wait_sent()
            if writer.done():
                conn.release(len(frame))
                break
            conn.busy = True
            task = loop.create_task(handle(frame))
            del frame
            unsent.append(produce)
            queue.put_nowait(task)
    except BaseException:
        writer.cancel()  # cancelled (the listener stops): answers still queued are dropped
        raise
    finally:
        queue.put_nowait(None)  # the writer sends what is queued, then stops
    await writer
