"""A node of its own restarted with a prepared transaction in ``__transaction_state`` (the
crash came between PrepareCommit and its markers): the first maintenance pass writes the
markers and completes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eddy.broker.broker import Broker
from eddy.clock import ManualClock
from eddy.config import load_config
from eddy.protocol.errors import ErrorCode


def test_a_prepared_transaction_is_finished_by_the_first_maintenance_pass(
        tmp_path: Path) -> None:
    cfg = load_config(env={}, overrides={"data_dir": str(tmp_path), "process.roles": "broker"})
    clock = ManualClock()

    async def crash_while_prepared() -> None:
        b = Broker(cfg, clock)
        b.load()
        b.logs.create_topic("t", 1, {}, clock.now_ms())
        svc = b.transactions
        code, pid, epoch = await svc.init_producer_id("x", 60000, -1, -1)
        assert code == ErrorCode.none
        added = await svc.add_partitions("x", pid, epoch, [("t", 0)])
        assert added == {("t", 0): ErrorCode.none}
        code, markers = svc.coordinator.end_txn("x", pid, epoch, True, clock.now_ms())
        assert code == ErrorCode.none and markers is not None
        await svc._persist(svc.coordinator.txns["x"])  # PrepareCommit on disk, no markers
        b.logs.close(clean=False)

    async def restart() -> None:
        b = Broker(cfg, clock)
        b.load()
        svc = b.transactions
        assert svc.coordinator.txns["x"].state == "PrepareCommit"
        await svc.abort_expired()  # what the maintenance loop runs every 100 ms
        assert svc.coordinator.txns["x"].state == "CompleteCommit"
        plog = b.logs.partition("t", 0)
        assert plog is not None and plog.log_end_offset == 1  # the commit marker
        b.logs.close()

    asyncio.run(crash_while_prepared())
    asyncio.run(restart())
