"""The transport side of one Kafka connection: size-prefixed request frames received
straight into buffers, queued for the request loop in arrival order, every buffered byte
accounted to the process-wide memory pool, and write flow control for the responses."""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Protocol, cast

from eddy.broker.memory_pool import MemoryPool
from eddy.protocol.errors import CloseConnection

_SIZE = struct.Struct(">i")
SCRATCH_BYTES = 64 * 1024  # frames up to this size are cut out of one reused buffer
QUEUED_BYTES = 2 * 1024 * 1024  # stop reading while this much is received and unserved
#: request bytes a connection may hold outside its scratch buffer without drawing on the
#: pool, so small requests keep flowing while large ones wait for memory
ALLOWANCE = SCRATCH_BYTES
#: a large-frame buffer up to this size is kept for the connection's next large frame
#: (producers send ~1 MB requests back to back: no allocation per request)
KEEP_BYTES = 1 << 20


class ConnectionOwner(Protocol):
    def connection_made(self, conn: Connection) -> None: ...


class Connection(asyncio.BufferedProtocol):
    """Frames up to the scratch buffer's size are cut out of it; a larger frame is
    received into a buffer of its own that grows only as its bytes arrive (doubling when
    full, so never past twice what arrived nor the frame's size), copied out once when
    complete, and kept (up to KEEP_BYTES, while the pool is calm) for the connection's
    next large frame.

    Every request byte held outside the scratch buffer (that buffer, frames queued or
    being handled) beyond ALLOWANCE is reserved in the memory pool before it is
    allocated; when the pool cannot cover it, reading pauses until the pool grants it.
    The request loop calls release() once it has handled a frame.

    Reading also goes on while the loop handles earlier requests (up to QUEUED_BYTES), so
    a client's next request is already in memory when the previous response is written.
    """

    def __init__(self, owner: ConnectionOwner, max_bytes: int,
                 pool: MemoryPool | None = None, half_close: bool = True) -> None:
        self._owner = owner
        self._half_close = half_close  # False on TLS, which cannot answer after the EOF
        self.max_bytes = max_bytes  # largest frame (raised once a SASL client logs in)
        self._pool = pool if pool is not None else MemoryPool.unbounded()
        self.transport: asyncio.Transport | None = None
        self.peer_ip = ""  # set by the server when it admits the connection
        self._buf = bytearray(SCRATCH_BYTES)
        self._start = 0  # unparsed bytes are _buf[_start:_end]
        self._end = 0
        # a large frame's buffer, the frame's size (0: none being received), bytes of it
        # received, and whether one began since the last trim()
        self._big: bytearray | None = None
        self._big_size = 0
        self._big_pos = 0
        self._big_used = False
        self._frames: deque[bytes] = deque()
        self._queued = 0
        self._queue_full = False
        self._ended = False  # no frames after the queued ones (EOF, lost, or bad input)
        self._error: Exception | None = None  # raised once the queued frames are served
        self._eof_pending = False  # EOF came while complete frames wait for memory
        self._reading_paused = False
        self._frame_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._lost = False
        # request bytes held outside the scratch buffer, and the part charged to the pool
        self._held = 0
        self._charged = 0
        self._wanted = 0  # > 0 while waiting for the pool: the bytes to hold once granted
        self._pooled_frame = False  # the frame being read drew on the pool
        # read by the server's periodic sweep (see overdue())
        self.active = True  # bytes moved since the last sweep
        self.busy = False  # a request is being handled
        self._frames_in = 0
        self._idle_since = 0.0
        self._partial_since: float | None = None
        self._partial_frames = 0

    # ---- asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._owner.connection_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._big_size:
            big = self._big
            assert big is not None
            end = min(len(big), self._big_size)
            if self._big_pos == end:  # reading pauses before this can happen
                raise RuntimeError("read while waiting for request memory")
            return memoryview(big)[self._big_pos : end]
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.active = True
        if self._ended:  # after bad input: reading is paused, anything in flight is dropped
            self._start = self._end = 0
            return
        if self._big_size:
            pos = self._big_pos = self._big_pos + nbytes
            if pos == self._big_size:
                self._finish_big()
            elif pos == len(self._big):  # type: ignore[arg-type]
                self._grow_big()
            return
        self._end += nbytes
        self._parse()

    def eof_received(self) -> bool:
        if self._wanted and not self._big_size:
            self._eof_pending = True  # complete frames wait in the scratch buffer for memory
        else:
            self._end_stream(None)
        # keep the transport open: queued requests still get their responses
        return self._half_close

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._eof_pending = False
        self._end_stream(None)
        self._drop_partial()
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionResetError("connection lost"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self.active = True
        self._writing_paused = False
        waiter = self._drain_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---- receiving -----------------------------------------------------------------------

    def _parse(self) -> None:
        """Queue every complete frame in the scratch buffer; a large one's head moves to
        a buffer of its own, which then receives the rest directly. Stops (reading paused)
        where the memory pool cannot cover the next frame: it stays in the buffer."""
        buf = self._buf
        start, end = self._start, self._end
        need = _SIZE.size
        while end - start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(buf, start)
            if size < 0 or size > self.max_bytes:
                self._start = self._end = 0
                self._end_stream(CloseConnection(
                    f"request of {size} bytes is outside 0..socket.request.max.bytes="
                    f"{self.max_bytes}"
                ))
                return
            body = start + _SIZE.size
            if end - body >= size:
                if self._held + size - self._charged <= ALLOWANCE:
                    self._held += size  # (the usual case: already covered)
                elif not self._grow(size):
                    break
                self._push(bytes(memoryview(buf)[body : body + size]))
                start = body + size
                continue
            if _SIZE.size + size > len(buf):
                if not self._start_big(size, body, end):
                    break
                self._start = self._end = 0
                return
            need = _SIZE.size + size
            break
        if start == end:
            start = end = 0
        elif start + need > len(buf):  # the partial frame needs the room at the front
            buf[: end - start] = memoryview(buf)[start:end]
            start, end = 0, end - start
        self._start, self._end = start, end

    def _start_big(self, size: int, body: int, end: int) -> bool:
        """Move a large frame's head (scratch[body:end]) into the large-frame buffer,
        the one kept from before if the pool is calm, else a new one of SCRATCH_BYTES;
        False (reading paused) if the pool makes us wait for it."""
        big = self._big
        if big is not None and not self._pool.calm:
            self._drop_big()  # others need memory: start afresh, under the pool's rules
            big = None
        if big is None:
            if not self._grow(SCRATCH_BYTES):
                return False
            big = self._big = bytearray(SCRATCH_BYTES)
        head = end - body
        big[:head] = memoryview(self._buf)[body:end]
        self._big_size, self._big_pos = size, head
        self._big_used = True
        return True

    def _grow_big(self) -> None:
        """The large frame's buffer is full: double it (so it holds at most twice what
        arrived), at most to the frame's size, unless the pool makes us wait."""
        big = self._big
        assert big is not None
        size = min(2 * len(big), self._big_size)
        if not self._grow(size - len(big)):
            return
        bigger = bytearray(size)
        bigger[: self._big_pos] = big
        self._big = bigger

    def _finish_big(self) -> None:
        """The large frame is complete: queue a copy of it; keep the buffer for the next
        one if it is small enough and the pool calm, else let it go."""
        big = self._big
        assert big is not None
        size, self._big_size = self._big_size, 0
        frame = bytes(memoryview(big)[:size])
        need = self._held + size - ALLOWANCE - self._charged
        if (len(big) <= KEEP_BYTES and self._pool.calm
                and (need <= 0 or self._pool.try_reserve(need))):
            self._charged += max(0, need)
            self._held += size
        else:
            self._big = None
            self._held += size
            self._shrink(len(big))  # (the buffer held at least the frame's size)
        self._push(frame)

    def _drop_big(self) -> None:
        big = self._big
        if big is not None:
            self._big = None
            self._big_size = 0
            self._shrink(len(big))

    def _grow(self, nbytes: int) -> bool:
        """Hold nbytes more, reserving what goes beyond the allowance; False (reading
        paused until memory_granted) when the pool makes us wait."""
        need = self._held + nbytes - ALLOWANCE - self._charged
        if need > 0:
            self._pooled_frame = True
            if not self._pool.reserve(self, need):
                self._wanted = nbytes
                self._update_reading()
                return False
            self._charged += need
        self._held += nbytes
        return True

    def _shrink(self, nbytes: int) -> None:
        self._held -= nbytes
        excess = self._charged - max(0, self._held - ALLOWANCE)
        if excess > 0:
            self._charged -= excess
            self._pool.release(excess)

    def memory_granted(self, nbytes: int) -> None:
        """The pool reserved what we waited for: go on where reading stopped."""
        self._charged += nbytes
        self._wanted = 0
        if self._big_size:
            self._grow_big()
        else:
            self._parse()
        self._shrink(0)  # give back whatever of the grant is no longer needed
        if self._eof_pending and not self._wanted:
            self._eof_pending = False
            self._end_stream(None)
        self._update_reading()

    def _push(self, frame: bytes) -> None:
        if self._pooled_frame:
            self._pooled_frame = False
            self._pool.done(self)  # a complete frame: the next in line may be the finisher
        if self._ended:
            self._shrink(len(frame))
            return
        self._frames.append(frame)
        self._frames_in += 1
        self._queued += len(frame)
        if self._queued >= QUEUED_BYTES and not self._queue_full:
            self._queue_full = True
            self._update_reading()
        self._wake_reader()

    def _end_stream(self, error: Exception | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._drop_partial()
        self._update_reading()
        self._wake_reader()

    def _drop_partial(self) -> None:
        """Forget the frame being received and any wait for memory."""
        if self._big_size:
            self._drop_big()
        if self._wanted or self._pooled_frame:
            self._wanted = 0
            self._pooled_frame = False
            self._pool.done(self)

    def _update_reading(self) -> None:
        paused = self._queue_full or self._wanted > 0 or self._error is not None
        if paused == self._reading_paused or self.transport is None or self._lost:
            return
        if not paused and self._ended:
            return
        self._reading_paused = paused
        if paused:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def _wake_reader(self) -> None:
        waiter = self._frame_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read_frame(self) -> bytes | None:
        """The next request frame, in arrival order; None at the end of the stream (after
        the queued frames). Raises CloseConnection after them if the input was bad. The
        caller calls release(len(frame)) once it has handled the frame."""
        if not self._frames and not self._ended:
            # resolved by the next frame or the end of the stream, whichever comes first
            self._frame_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._frame_waiter
            finally:
                self._frame_waiter = None
        if self._frames:
            frame = self._frames.popleft()
            self._queued -= len(frame)
            if self._queue_full and self._queued < QUEUED_BYTES // 2:
                self._queue_full = False
                self._update_reading()
            return frame
        if self._error is not None:
            raise self._error
        return None

    def release(self, nbytes: int) -> None:
        """A frame of nbytes has been handled: its memory goes back to the pool."""
        if self._charged:
            self._shrink(nbytes)
        else:
            self._held -= nbytes

    def close_out(self) -> None:
        """The request loop has ended: drop what is queued, give back all memory."""
        self._ended = True
        self._frames.clear()
        self._queued = 0
        self._drop_partial()
        self._drop_big()
        self._shrink(self._held)

    def trim(self) -> None:
        """Called by the server's sweep: let the large-frame buffer go unless a large
        frame began since the last call and nobody else needs memory."""
        if (self._big is not None and not self._big_size
                and (not self._big_used or not self._pool.calm)):
            self._drop_big()
        self._big_used = False

    # ---- timeouts ------------------------------------------------------------------------

    def overdue(self, now: float, idle_ms: int, read_timeout_ms: int
                ) -> tuple[bool, str] | None:
        """Called by the server's sweep with its clock (seconds): (idle?, why) if the
        connection should be closed now. Idle: no bytes in or out for idle_ms while
        nothing was being handled or waiting for memory. Read deadline: a frame whose
        first bytes came read_timeout_ms ago (to the sweep's precision) is incomplete,
        though we were reading all along."""
        if self.active or self.busy or self._wanted:
            self.active = False
            self._idle_since = now
        elif (now - self._idle_since) * 1000 >= idle_ms:
            return True, f"idle for more than connections.max.idle.ms={idle_ms}"
        if (self._reading_paused or self._ended
                or (not self._big_size and self._start == self._end)):
            self._partial_since = None
        elif self._partial_since is None or self._partial_frames != self._frames_in:
            self._partial_since = now
            self._partial_frames = self._frames_in
        elif (now - self._partial_since) * 1000 >= read_timeout_ms:
            got = self._big_pos if self._big_size else self._end - self._start
            return False, (f"request still incomplete (about {got} bytes received) after "
                    f"socket.request.read.timeout.ms={read_timeout_ms}")
        return None

    # ---- sending -------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        self.active = True
        if self._lost:
            raise ConnectionResetError("connection lost")
        if not self._writing_paused:
            return
        self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._drain_waiter
        finally:
            self._drain_waiter = None
