"""The fuzz campaign against a real broker: mutated frames over many loopback
connections while healthy clients in other processes verify their records.

Each connection worker takes the next batch number, sends that batch's frames back to
back (pipelined) and then a sentinel ApiVersions v0 request, and reads responses until
the sentinel's (the connection is then reused for the next batch), the broker closes
the connection (counted, and a new connection is opened), or --batch-timeout passes (a
held request such as a Fetch with a huge max wait: we close, counted apart). A batch with
a frame whose size prefix lies ends with that frame and a half-close instead.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.fuzz.guard import held_back
from bench.fuzz.mutate import Mutated, Mutator

_SIZE = struct.Struct(">i")
SENTINEL_CLIENT = b"fuzz-sentinel"


def sentinel_frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, len(SENTINEL_CLIENT)) + SENTINEL_CLIENT
    return _SIZE.pack(len(body)) + body


@dataclass
class SentFrame:
    connection: int
    correlation_id: int
    mutated: Mutated


@dataclass
class SendStats:
    frames_sent: int = 0
    bytes_sent: int = 0
    batches: int = 0
    connections_opened: int = 0
    closed_by_broker: int = 0
    ended_after_half_close: int = 0  # batches ending in a bad-size frame and our EOF
    closed_on_timeout: int = 0
    connect_errors: int = 0
    responses: int = 0  # answers to fuzz frames (sentinel answers not counted)
    frames_processed: int = 0  # answered, or before an answered frame on its connection
    bad_size_frames: int = 0
    held_back: int = 0  # frames of a known broker-stalling class not sent (bench.fuzz.guard)
    last_frames: deque[SentFrame] = field(default_factory=lambda: deque(maxlen=16))


class Sender:
    def __init__(self, port: int, mutator: Mutator, seed: int, frames: int, *,
                 connections: int, batch_size: int, batch_timeout: float,
                 on_closed: Callable[[list[Mutated]], None] | None = None,
                 guard: bool = True) -> None:
        self.guard = guard
        self.port = port
        self.on_closed = on_closed  # each batch the broker closed on, for the findings
        self.mutator = mutator
        self.seed = seed
        self.target = frames
        self.connections = connections
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.stats = SendStats()
        self.stopped = asyncio.Event()
        self._batch_numbers = itertools.count()
        self._conn_ids = itertools.count(1)

    def stop(self) -> None:
        self.stopped.set()

    async def run(self) -> SendStats:
        await asyncio.gather(*(self._worker() for _ in range(self.connections)))
        return self.stats

    def _more(self) -> bool:
        return not self.stopped.is_set() and self.stats.frames_sent < self.target

    async def _open(self) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", self.port), 5)
        except (OSError, TimeoutError):
            self.stats.connect_errors += 1
            await asyncio.sleep(0.05)
            return None
        self.stats.connections_opened += 1
        return next(self._conn_ids), reader, writer

    async def _worker(self) -> None:
        conn: tuple[int, asyncio.StreamReader, asyncio.StreamWriter] | None = None
        while self._more():
            if conn is None:
                conn = await self._open()
                if conn is None:
                    if self.stats.connect_errors > 1000:
                        self.stop()
                    continue
            keep = await self._batch(*conn)
            if not keep:
                conn[2].close()
                conn = None
        if conn is not None:
            conn[2].close()

    async def _batch(self, cid: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
        """Send one batch; True when the connection is still usable."""
        number = next(self._batch_numbers)
        first = (number % 200_000) * 10_000 + 1  # correlation ids: batch-unique
        frames = self.mutator.batch(self.seed, number, self.batch_size, first)
        st = self.stats
        if self.guard:
            kept = [m for m in frames if held_back(m) is None]
            st.held_back += len(frames) - len(kept)
            frames = kept
            if not frames:
                return True
        st.batches += 1
        half_close = frames[-1].bad_size
        sentinel = first + 9_999
        payload = bytearray()
        for m in frames:
            payload += m.frame
            st.last_frames.append(SentFrame(cid, _correlation(m), m))
        st.frames_sent += len(frames)
        st.bad_size_frames += int(half_close)
        if not half_close:
            payload += sentinel_frame(sentinel)
        st.bytes_sent += len(payload)
        try:
            writer.write(payload)
            if half_close:
                writer.write_eof()
            await writer.drain()
        except (ConnectionError, OSError):
            st.closed_by_broker += 1
            self._closed(frames)
            return False
        done = 0  # fuzz frames known processed on this batch
        try:
            async with asyncio.timeout(self.batch_timeout):
                while True:
                    head = await reader.readexactly(4)
                    (size,) = _SIZE.unpack(head)
                    resp = await reader.readexactly(size)
                    (corr,) = _SIZE.unpack_from(resp, 0) if size >= 4 else (-1,)
                    if corr == sentinel:
                        st.frames_processed += len(frames)
                        return True
                    st.responses += 1
                    sent = [i for i, m in enumerate(frames) if _correlation(m) == corr]
                    if sent:
                        done = max(done, sent[0] + 1)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            if half_close:  # the broker answers what came before our EOF, then closes
                st.ended_after_half_close += 1
            else:
                st.closed_by_broker += 1
                self._closed(frames)
        except TimeoutError:
            st.closed_on_timeout += 1
        st.frames_processed += done
        return False

    def _closed(self, frames: list[Mutated]) -> None:
        if self.on_closed is not None:
            self.on_closed(frames)


def _correlation(m: Mutated) -> int:
    return _SIZE.unpack_from(m.frame, 8)[0] if len(m.frame) >= 12 else -1
