"""What a node does with its copy of a partition it is no longer a replica of, and the
rebalance plan: ``ReplicaMembership`` (when deleting is safe), ``LogManager.empty_partition``
(one partition's data of a topic whose other partitions stay) and ``plan_rebalance``."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from batch_builder import Rec, build_batch

from eddy.broker.replica_membership import MEMBERSHIP_FILE, ReplicaMembership
from eddy.cli.cluster.status import _kafka_info
from eddy.cli.reassign import plan_rebalance
from eddy.cluster.placement import HashRing
from eddy.log.manager import LogManager
from eddy.log.partition import HIGH_WATERMARK_FILE
from eddy.metadata.records import PartitionRecord
from eddy.protocol.record_batch import validate_batches

NOW = 1_700_000_000_000


def record(replicas: tuple[int, ...], epoch: int) -> PartitionRecord:
    return PartitionRecord(replicas, replicas[0], 0, replicas, epoch)


def test_removable_only_after_a_removal_newer_than_the_join(tmp_path: Path) -> None:
    m = ReplicaMembership(str(tmp_path))
    assert not m.removable("t1", 0, record((2, 3), 9))  # never hosted here: never deleted
    m.hosting("t1", 0, record((1, 2), 4))
    m.hosting("t1", 0, record((1, 2), 6))  # the latest epoch as a member counts
    m.hosting("t1", 0, record((1, 2), 5))
    assert not m.removable("t1", 0, record((2, 3), 5))  # a stale state: kept
    assert not m.removable("t1", 0, record((2, 3), 6))
    assert m.removable("t1", 0, record((2, 3), 7))
    m.save()
    again = ReplicaMembership(str(tmp_path))  # survives a restart
    assert again.joined == {"t1": {0: 6}}
    # removed at 5 and added back at 6 while this node was away: a restart that replays
    # the removal again must not delete what it fetched since
    assert not again.removable("t1", 0, record((2, 3), 5))
    again.forget("t1", 0)
    again.save()
    assert ReplicaMembership(str(tmp_path)).joined == {}


def test_an_unreadable_file_deletes_nothing(tmp_path: Path) -> None:
    (tmp_path / MEMBERSHIP_FILE).write_text("{not json")
    m = ReplicaMembership(str(tmp_path))
    assert m.joined == {} and not m.removable("t1", 0, record((2,), 99))


def _append(manager: LogManager, topic: str, partition: int, count: int) -> None:
    plog = manager.partition(topic, partition)
    assert plog is not None
    data = bytearray(build_batch([Rec(b"v%d" % i) for i in range(count)],
                                 base_timestamp=NOW))
    plog.append(data, validate_batches(data, max_batch_bytes=1 << 20), NOW)


def test_empty_partition_keeps_the_other_partitions(tmp_path: Path) -> None:
    manager = LogManager(str(tmp_path))
    manager.load(NOW)
    manager.create_topic("t", 2, {}, NOW)
    _append(manager, "t", 0, 5)
    _append(manager, "t", 1, 7)
    p0 = manager.partition("t", 0)
    assert p0 is not None
    p0.epochs.assign(3, 0)
    p0.high_watermark = 5
    p0.checkpoint_high_watermark()
    (Path(p0.directory) / "producer-state.json").write_text("{}")
    same = manager.empty_partition("t", 0, ("producer-state.json",))
    assert same is p0  # whoever holds it sees the empty log
    assert (p0.log_start_offset, p0.log_end_offset, p0.high_watermark) == (0, 0, 0)
    assert p0.epochs.latest_epoch() < 3
    left = os.listdir(p0.directory)
    assert "producer-state.json" not in left and HIGH_WATERMARK_FILE not in left
    assert all(os.path.getsize(os.path.join(p0.directory, n)) == 0
               for n in os.listdir(p0.directory) if n.endswith(".log"))
    p1 = manager.partition("t", 1)
    assert p1 is not None and p1.log_end_offset == 7
    manager.close()
    reopened = LogManager(str(tmp_path))  # and after a restart too
    reopened.load(NOW)
    r0, r1 = reopened.partition("t", 0), reopened.partition("t", 1)
    assert r0 is not None and r1 is not None
    assert (r0.log_end_offset, r1.log_end_offset) == (0, 7)
    reopened.close()


def test_rebalance_plan_moves_what_the_ring_puts_elsewhere() -> None:
    three = {1: None, 2: None, 3: None}
    placed = HashRing().place("orders", 12, 2, three)
    topics = {"orders": [tuple(r) for r in placed]}
    assert plan_rebalance(topics, three) == ([], [])  # as created: balanced
    four = {**three, 4: None}
    moves, notes = plan_rebalance(topics, four)
    assert not notes and moves
    assert all(4 in want for _, _, _, want in moves)  # only the newcomer gains
    assert len(moves) < 12
    target = HashRing().place("orders", 12, 2, four)
    assert all(list(want) == target[p] for _, p, _, want in moves)
    # a replication factor above the live brokers: left alone, with a note
    moves, notes = plan_rebalance({"wide": [(1, 2, 3)]}, {1: None, 2: None})
    assert moves == [] and notes and notes[0].startswith("wide:")


def test_status_counts_a_moving_partition_against_its_target() -> None:
    def part(pid: int, replicas: list[int], isr: list[int], leader: int) -> SimpleNamespace:
        return SimpleNamespace(id=pid, replicas=replicas, isrs=isr, leader=leader)

    md = SimpleNamespace(cluster_id="c", controller_id=1, brokers={}, topics={
        "t": SimpleNamespace(topic="t", partitions={
            0: part(0, [3, 2, 1], [1, 2], 1),  # moving (1, 2) -> (3, 2): 3 catching up
            1: part(1, [2, 1], [2], 2),  # under-replicated
            2: part(2, [1], [1], -1),  # offline
        })})
    info = _kafka_info(md, {("t", 0): 1})
    assert info["partitions"] == {"total": 3, "under_replicated": 1, "offline": 1}
    assert info["reassigning"] == 1
    # without the reassignment list (an older node): the plain rule
    assert _kafka_info(md)["partitions"]["under_replicated"] == 2
