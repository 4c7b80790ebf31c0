"""Group commit: every produce waiting on a partition joins the fsync in flight, and a joiner
woken by it finds the flushed offset already moved (it once could run first, spin over the
finished fsync and fail with "did not converge")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import uvloop
from batch_builder import Rec, build_batch

from eddy.broker.flusher import Flusher, GroupCommit
from eddy.clock import WallClock
from eddy.log.config import TopicConfig
from eddy.log.partition import PartitionLog
from eddy.protocol.record_batch import validate_batches

NOW = 1_700_000_000_000


def append(plog: PartitionLog, n: int) -> int:
    data = bytearray(build_batch([Rec(b"v%d" % i) for i in range(n)], base_timestamp=NOW))
    return plog.append(data, validate_batches(data, max_batch_bytes=1 << 20), NOW).last_offset


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_concurrent_flushes_all_converge_and_share_fsyncs(tmp_path: Path, loop_name: str
                                                          ) -> None:
    loop_factory = uvloop.new_event_loop if loop_name == "uvloop" else None
    plog = PartitionLog.open(str(tmp_path), "t", 0, TopicConfig(), True, NOW)
    flusher = Flusher(WallClock())
    fsyncs = 0
    real = plog.segments_to_flush

    def counting():  # type: ignore[no-untyped-def]
        nonlocal fsyncs
        fsyncs += 1
        return real()

    plog.segments_to_flush = counting  # type: ignore[method-assign]

    async def produce(n: int) -> int:
        end = append(plog, n) + 1
        await flusher.flush(plog)
        assert plog.flushed_offset >= end
        return end

    async def main() -> list[int]:
        rounds: list[int] = []
        for _ in range(20):  # waves of produces arriving while an fsync runs
            rounds += await asyncio.gather(*(produce(3) for _ in range(8)))
        return rounds

    if loop_factory is None:
        ends = asyncio.run(main())
    else:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            ends = runner.run(main())
    assert max(ends) == plog.log_end_offset == plog.flushed_offset == 20 * 8 * 3
    assert fsyncs < 20 * 8  # joined: far fewer fsyncs than produces
    plog.close()


def test_a_flush_arriving_as_an_fsync_ends_waits_for_its_bookkeeping(tmp_path: Path) -> None:
    """The window between the fsync finishing and its starter recording it: a new flush
    that runs then must wait for the record, not spin over a finished fsync."""
    plog = PartitionLog.open(str(tmp_path), "t", 0, TopicConfig(), True, NOW)
    flusher = Flusher(WallClock())

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fsync_done: asyncio.Future[None] = loop.create_future()
        loop.run_in_executor = lambda *_: fsync_done  # type: ignore[method-assign,assignment]
        append(plog, 3)
        first = loop.create_task(flusher.flush(plog))
        await asyncio.sleep(0)  # the fsync is in flight
        append(plog, 3)
        late = loop.create_task(flusher.flush(plog))  # its first step runs next...
        fsync_done.set_result(None)  # ...before the starter hears the fsync ended
        second_fsync: asyncio.Future[None] = loop.create_future()
        loop.run_in_executor = lambda *_: second_fsync  # type: ignore[method-assign,assignment]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        second_fsync.set_result(None)
        await asyncio.wait_for(asyncio.gather(first, late), 2)
        assert plog.flushed_offset == plog.log_end_offset == 6

    asyncio.run(main())
    plog.close()


def _counting(plog: PartitionLog) -> list[int]:
    calls: list[int] = []
    real = plog.segments_to_flush

    def counting():  # type: ignore[no-untyped-def]
        calls.append(plog.log_end_offset)
        return real()

    plog.segments_to_flush = counting  # type: ignore[method-assign]
    return calls


def test_the_group_commit_window_gathers_appends_into_one_fsync(tmp_path: Path) -> None:
    plog = PartitionLog.open(str(tmp_path), "t", 0, TopicConfig(), True, NOW)
    calls = _counting(plog)
    flusher = Flusher(WallClock(), GroupCommit(window_s=0.05, max_writes=1000))

    async def main() -> None:
        append(plog, 2)
        first = asyncio.create_task(flusher.flush(plog))
        await asyncio.sleep(0.01)  # inside the window: joins the same fsync
        append(plog, 2)
        await asyncio.gather(first, flusher.flush(plog))

    asyncio.run(main())
    assert calls == [4]  # one fsync, covering both appends
    assert plog.flushed_offset == 4
    plog.close()


def test_a_full_window_starts_the_fsync_at_once(tmp_path: Path) -> None:
    plog = PartitionLog.open(str(tmp_path), "t", 0, TopicConfig(), True, NOW)
    calls = _counting(plog)
    flusher = Flusher(WallClock(), GroupCommit(window_s=30.0, max_writes=5))

    async def main() -> None:
        append(plog, 2)
        first = asyncio.create_task(flusher.flush(plog))
        await asyncio.sleep(0.01)
        append(plog, 4)  # 6 records waiting >= max_writes: no 30 s wait
        await asyncio.wait_for(asyncio.gather(first, flusher.flush(plog)), 5)

    asyncio.run(main())
    assert calls == [6]
    plog.close()
