"""Group commit: fsyncs run off the event loop, and every produce waiting joins the next one."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from eddy.clock import Clock
from eddy.log.file_cache import FILES
from eddy.log.partition import PartitionLog
from eddy.log.segment import Segment
from eddy.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


def _fsync_all(segments: list[Segment]) -> None:
    for seg in segments:
        if not seg.deleted:
            seg.fsync(indexes=False)  # an fsync per file: the indexes wait for shutdown


@dataclass(frozen=True, slots=True)
class GroupCommit:
    """Seed 001's group commit knobs: an fsync about to start waits up to ``window_s`` for
    more appends to join it, unless ``max_bytes`` or ``max_writes`` (records) are already
    waiting (0 / 0.0: start at once). Appends made while an fsync runs always join the
    next one."""

    window_s: float = 0.0
    max_bytes: int = 4 << 20
    max_writes: int = 1000

    def full(self, plog: PartitionLog) -> bool:
        return plog.unflushed_bytes >= self.max_bytes \
            or plog.unflushed_messages >= self.max_writes


class Flusher:
    def __init__(self, clock: Clock, group: GroupCommit | None = None) -> None:
        self._clock = clock
        self.group = group or GroupCommit()
        self._running: dict[int, asyncio.Future[None]] = {}
        self._windows: dict[int, asyncio.Future[None]] = {}  # fsyncs waiting for more

    async def flush(self, plog: PartitionLog, upto: int | None = None) -> None:
        """Return once everything below `upto` (default: the log end) is on disk. A failed
        fsync raises KAFKA_STORAGE_ERROR to every waiter; the next flush tries again."""
        try:
            await self._flush(plog, upto)
        except OSError as exc:
            raise KafkaError(
                ErrorCode.kafka_storage_error,
                f"fsync of {plog.topic}-{plog.partition} failed: {FILES.failure_message(exc)}",
            ) from exc

    async def _flush(self, plog: PartitionLog, upto: int | None) -> None:
        target = plog.log_end_offset if upto is None else upto
        loop = asyncio.get_running_loop()
        for _ in range(1000):  # bounded: each round either flushes or waits for one
            if plog.flushed_offset >= target:
                return
            running = self._running.get(id(plog))
            if running is not None:
                window = self._windows.get(id(plog))
                if window is not None and not window.done() and self.group.full(plog):
                    window.set_result(None)  # enough is waiting: start the fsync now
                await asyncio.shield(running)
                continue
            # joiners wait for this, resolved once the flushed offset has moved (waiting
            # for the executor's future itself could wake them before it has)
            done: asyncio.Future[None] = loop.create_future()
            self._running[id(plog)] = done
            try:
                await self._window(plog, loop)
                segments, covered = plog.segments_to_flush()
                await loop.run_in_executor(None, _fsync_all, segments)
            except OSError as exc:
                log.error("%s-%d: fsync failed: %s", plog.topic, plog.partition, exc)
                done.set_exception(exc)
                done.exception()  # joiners re-raise it; none may be waiting
                raise
            except BaseException:
                done.set_result(None)  # cancelled: joiners look again (and flush themselves)
                raise
            else:
                plog.flush_completed(covered, self._clock.now_ms())
                done.set_result(None)
            finally:
                del self._running[id(plog)]
        raise RuntimeError(f"flush of {plog.topic}-{plog.partition} did not converge")

    async def _window(self, plog: PartitionLog, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for the group commit window unless enough is waiting already."""
        group = self.group
        if group.window_s <= 0 or group.full(plog):
            return
        window: asyncio.Future[None] = loop.create_future()
        self._windows[id(plog)] = window
        try:
            await asyncio.wait({window}, timeout=group.window_s)
        finally:
            del self._windows[id(plog)]
