"""The replicas' high watermark checkpoint (Kafka's replication-offset-checkpoint, every
5 s): only the partitions whose HWM moved are written, and the writes (an fsync each) run in
an executor thread, never on the event loop, where hundreds of them held the Raft
heartbeats behind a long step (issue 28)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace

from eddy.cluster.replication.fetcher import Follow
from eddy.cluster.replication.leader import LeaderState
from eddy.cluster.replication.manager import Led, ReplicaManager
from eddy.log.manager import LogManager
from eddy.log.partition import HIGH_WATERMARK_FILE, PartitionLog


def test_moved_high_watermarks_are_checkpointed_off_the_event_loop(tmp_path: Path) -> None:
    logs = LogManager(str(tmp_path))
    logs.load(0)
    logs.create_topic("t", 3, {}, 0)
    led, followed, alone = (logs.partition("t", i) for i in range(3))
    assert led is not None and followed is not None and alone is not None
    led.sole_replica = followed.sole_replica = False
    alone.sole_replica = True  # no other replica: its HWM is its log end, never written
    manager = ReplicaManager(SimpleNamespace(node_id=1), SimpleNamespace())  # type: ignore[arg-type]
    for key, plog in ((("t", 0), led), (("t", 2), alone)):
        manager.led[key] = Led(plog, LeaderState(1, (1, 2), (1, 2), 0, 0, 0, 0))
    manager.following[("t", 1)] = Follow("t", 1, followed, 2, 0)
    writers: list[int] = []
    original = PartitionLog.write_high_watermark

    def spy(self: PartitionLog, value: int) -> bool:
        writers.append(threading.get_ident())
        return original(self, value)

    PartitionLog.write_high_watermark = spy  # type: ignore[method-assign]
    try:
        async def run() -> list[int]:
            loop_thread = threading.get_ident()
            counts = [await manager.checkpoint_off_loop()]  # the loaded HWMs are on disk
            led.high_watermark, followed.high_watermark = 7, 5
            alone.high_watermark = 9
            counts.append(await manager.checkpoint_off_loop())
            counts.append(await manager.checkpoint_off_loop())  # nothing moved since
            assert writers and loop_thread not in writers
            return counts

        assert asyncio.run(run()) == [0, 2, 0]
    finally:
        PartitionLog.write_high_watermark = original  # type: ignore[method-assign]
    for plog, value in ((led, "7"), (followed, "5")):
        assert (Path(plog.directory) / HIGH_WATERMARK_FILE).read_text().strip() == value
    assert not (Path(alone.directory) / HIGH_WATERMARK_FILE).exists()
    logs.close()
