"""A transaction's markers are written once, however often the coordinator moves.

In a cluster the transaction coordinator keeps its state in the offsets Raft group and
serves on its leader; each node that becomes the leader starts over from the group's
records and finishes the transactions it finds prepared (it writes their markers). A
commit or abort with no transactional offsets once left its completion unwritten (it was
to go with the id's next change): every leader change of the offsets group then found the
transaction still prepared and wrote its markers again, and an idle cluster whose offsets
group changed leader kept appending control batches (issue 28).

Here one coordinator serves with its state in a stand-in for the offsets group (the same
records, no Raft), and "takes over" from those records as a new leader would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from eddy.broker.broker import Broker
from eddy.clock import ManualClock
from eddy.cluster.offsets import Record
from eddy.config import load_config
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.txn.raft_store import TxnRaftLog


class GroupRecords(TxnRaftLog):
    """The offsets group's records as a dict; ``fail_in`` > 0 makes that write from now on
    (1: the next) fail as a write after the leadership moved does."""

    def __init__(self) -> None:
        super().__init__(SimpleNamespace(status=lambda: SimpleNamespace(term=3)))  # type: ignore[arg-type]
        self.records: dict[bytes, bytes] = {}
        self.fail_in = 0

    async def _propose(self, records: list[Record]) -> None:
        if self.fail_in > 0:
            self.fail_in -= 1
            if self.fail_in == 0:
                raise KafkaError(ErrorCode.not_coordinator, "not the leader any more")
        for key, value in records:
            if value is None:
                self.records.pop(key, None)
            else:
                self.records[key] = value

    def ordered(self) -> list[tuple[bytes, bytes | None]]:
        return list(self.records.items())


async def _settle(svc: Any) -> None:
    """Let the finishing tasks a takeover started run to their end."""
    while svc._tasks:
        await asyncio.gather(*svc._tasks, return_exceptions=True)


def _broker(tmp_path: Path, clock: ManualClock) -> Broker:
    cfg = load_config(env={}, overrides={"data_dir": str(tmp_path), "process.roles": "broker"})
    b = Broker(cfg, clock)
    b.load()
    b.logs.create_topic("t", 2, {}, clock.now_ms())
    return b


def test_markers_are_written_once_across_coordinator_takeovers(tmp_path: Path) -> None:
    clock = ManualClock()

    async def run() -> None:
        b = _broker(tmp_path, clock)
        svc = b.transactions
        group = GroupRecords()
        svc.raft = group
        for commit in (True, False):  # a commit, then an abort, neither with offsets
            code, pid, epoch = await svc.init_producer_id("x", 60000, -1, -1)
            assert code == ErrorCode.none
            added = await svc.add_partitions("x", pid, epoch, [("t", 0), ("t", 1)])
            assert set(added.values()) == {ErrorCode.none}
            assert await svc.end_txn("x", pid, epoch, commit) == ErrorCode.none
        ends = [b.logs.partition("t", i).log_end_offset for i in (0, 1)]  # type: ignore[union-attr]
        assert ends == [2, 2]  # one marker per transaction and partition
        for _ in range(5):  # the offsets group's leadership moves away and back, 5 times
            svc.activate(group.ordered())
            await _settle(svc)
            assert svc.coordinator.txns["x"].state == "CompleteAbort"
        assert [b.logs.partition("t", i).log_end_offset  # type: ignore[union-attr]
                for i in (0, 1)] == ends  # no marker written again
        b.logs.close()

    asyncio.run(run())


def test_a_completion_that_was_not_written_is_finished_by_the_next_coordinator(
        tmp_path: Path) -> None:
    """The other side: markers written, the completion's write lost with the leadership.
    The next coordinator finds the transaction prepared and finishes it (its markers
    again, as Kafka's coordinator does), once."""
    clock = ManualClock()

    async def run() -> None:
        b = _broker(tmp_path, clock)
        svc = b.transactions
        group = GroupRecords()
        svc.raft = group
        code, pid, epoch = await svc.init_producer_id("x", 60000, -1, -1)
        assert code == ErrorCode.none
        await svc.add_partitions("x", pid, epoch, [("t", 0)])
        group.fail_in = 2  # the prepare is written, the completion's write fails: the
        # leadership has just moved
        assert await svc.end_txn("x", pid, epoch, True) == ErrorCode.none
        plog = b.logs.partition("t", 0)
        assert plog is not None and plog.log_end_offset == 1
        svc.activate(group.ordered())  # the next leader: prepared in the group's records
        await _settle(svc)
        assert plog.log_end_offset == 2 and svc.coordinator.txns["x"].state == (
            "CompleteCommit")
        svc.activate(group.ordered())  # and the one after it: complete, nothing to do
        await _settle(svc)
        assert plog.log_end_offset == 2
        b.logs.close()

    asyncio.run(run())
