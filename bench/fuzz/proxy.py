"""A recording TCP proxy on loopback: clients connect to it, it forwards every byte to a
real broker and keeps a sample of the request frames (client -> broker direction).

The broker must advertise the proxy's address (``eddy serve --advertised``) so clients
keep talking through it after their first Metadata request.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable

from bench.fuzz.corpus_files import api_version_of

_SIZE = struct.Struct(">i")
MAX_FRAME_BYTES = 32 * 1024  # larger frames (big produce batches) are not kept
MAX_PER_PAIR = 4  # frames kept per (label, api, version), of distinct lengths


class FrameSample:
    """Up to MAX_PER_PAIR frames of distinct lengths per (label, api key, version)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.frames: dict[tuple[str, int, int], list[bytes]] = {}
        self.seen = 0

    def add(self, label: str, frame: bytes) -> None:
        if len(frame) < _SIZE.size + 4:
            return
        key, ver = api_version_of(frame)
        with self._lock:
            self.seen += 1
            kept = self.frames.setdefault((label, key, ver), [])
            if len(frame) > MAX_FRAME_BYTES or len(kept) >= MAX_PER_PAIR:
                return
            if all(len(k) != len(frame) for k in kept):
                kept.append(frame)

    def for_label(self, label: str) -> list[bytes]:
        with self._lock:
            return [f for (lab, _, _), fs in sorted(self.frames.items()) if lab == label
                    for f in fs]


class RecordingProxy:
    """Runs in a thread of its own; ``label`` names the client whose frames arrive now."""

    def __init__(self, sample: FrameSample) -> None:
        self.sample = sample
        self.label = "unlabelled"
        self.upstream: tuple[str, int] | None = None
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()

    def start(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("recording proxy did not start")

    def stop(self) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._on_client, sock=self._sock)
        self._ready.set()
        async with server:
            await self._stopping.wait()
        # no wait_closed: connections still open end with the loop

    async def _on_client(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter
                         ) -> None:
        assert self.upstream is not None
        try:
            breader, bwriter = await asyncio.open_connection(*self.upstream)
        except OSError:
            cwriter.close()
            return
        label = self.label

        def record(frame: bytes) -> None:
            self.sample.add(label, frame)

        await asyncio.gather(
            _pump(creader, bwriter, record), _pump(breader, cwriter, None),
            return_exceptions=True,
        )
        for w in (cwriter, bwriter):
            w.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                on_frame: Callable[[bytes], None] | None) -> None:
    """Copy one direction frame by frame (Kafka is size-prefixed both ways)."""
    try:
        while True:
            head = await reader.readexactly(_SIZE.size)
            (size,) = _SIZE.unpack(head)
            body = await reader.readexactly(size) if size > 0 else b""
            if on_frame is not None:
                on_frame(head + body)
            writer.write(head + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
