"""Group commit: fsyncs run off the event loop, and every produce waiting joins the next one."""

from __future__ import annotations

import asyncio
import logging

from eddy.clock import Clock
from eddy.log.file_cache import FILES
from eddy.log.partition import PartitionLog
from eddy.log.segment import Segment
from eddy.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


def _fsync_all(segments: list[Segment]) -> None:
    for seg in segments:
        if not seg.deleted:
            seg.fsync()


class Flusher:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._running: dict[int, asyncio.Future[None]] = {}

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
                await asyncio.shield(running)
                continue
            segments, covered = plog.segments_to_flush()
            # joiners wait for this, resolved once the flushed offset has moved (waiting
            # for the executor's future itself could wake them before it has)
            done: asyncio.Future[None] = loop.create_future()
            self._running[id(plog)] = done
            try:
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
