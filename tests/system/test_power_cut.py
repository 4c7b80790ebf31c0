"""A simulated power cut (issue 14): every replica loses, at the same moment, whatever it had
not fsynced. Then no record acknowledged to an acks=all producer is missing (write caching
off, the default); with `write.caching=true` the loss is only reported.

The nodes run with EDDYTEST_FSYNC_LOG: eddy.log.segment appends "<log path> <length>" to
that file after each fsync of a segment. The cut: SIGKILL every node at once, then cut every
partition segment (`.log`) back to the last length fsynced for it (to nothing when it never
was fsynced); indexes stay as the page cache left them, as after a real power loss. Restart
and read everything back with a read_committed consumer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from conftest import EddyProcess
from replication_check import History, check
from replication_cluster import Cluster, back_to_three, wait_for
from replication_workload import Writer, read_all, watermarks

RECORDS = 1500
RATE = 1000.0


def fsynced_lengths(fsync_log: Path) -> dict[str, int]:
    """The last length fsynced of each segment, from the hook's log."""
    lengths: dict[str, int] = {}
    if fsync_log.exists():
        for line in fsync_log.read_text().splitlines():
            path, _, size = line.rpartition(" ")
            if path:
                lengths[path] = int(size)
    return lengths


def power_cut(data_dirs: Iterable[Path], fsync_log: Path) -> dict[str, tuple[int, int]]:
    """Cut every partition segment under `data_dirs` to its last fsynced length; returns
    path -> (length before, after) of those cut."""
    synced = fsynced_lengths(fsync_log)
    cut: dict[str, tuple[int, int]] = {}
    for data in data_dirs:
        for seg in sorted((data / "topics").glob("*/partition-*/*.log")):
            size = seg.stat().st_size
            keep = min(size, synced.get(str(seg), 0))
            if keep < size:
                os.truncate(seg, keep)
                cut[str(seg)] = (size, keep)
    return cut


def cut_power(nodes: Sequence[EddyProcess], fsync_log: Path) -> None:
    """SIGKILL every node at once (no node runs between the first kill and the last), then
    cut their segments to what was fsynced."""
    for n in nodes:
        assert n.proc is not None
        n.proc.kill()
    for n in nodes:
        n.kill()
    cut = power_cut([n.data_dir for n in nodes], fsync_log)
    print(f"cut {len(cut)} segments (bytes before, after): {sorted(cut.values())}")


def lost_after_restart(bootstrap: str, topic: str, partitions: int, writer: Writer) -> str:
    """What the checker finds wrong with `topic` read back ('' when nothing)."""
    ends = watermarks(bootstrap, topic, partitions)
    result = check(History(acked=writer.acked, unacked=writer.unacked,
                           reads=[read_all(bootstrap, topic, ends)]))
    print(f"{topic}: {result.summary()}")
    return "" if result.ok and result.acked else result.summary()


def test_power_cut_of_every_replica_loses_no_acknowledged_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fsync_log = tmp_path / "fsyncs.txt"
    monkeypatch.setenv("EDDYTEST_FSYNC_LOG", str(fsync_log))
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        cluster.create_topic("durable", 2, {"min.insync.replicas": "2"})
        cluster.create_topic("cached", 2, {"min.insync.replicas": "2",
                                           "write.caching": "true"})
        nodes = list(cluster.nodes.values())
        durable = Writer(cluster.bootstrap, "durable", RECORDS, RATE, tag="d").start()
        cached = Writer(cluster.bootstrap, "cached", RECORDS, RATE, tag="c").start()
        durable.join(90)
        cached.join(90)
        print(f"acked: durable {len(durable.acked)}, cached {len(cached.acked)}")
        cut_power(nodes, fsync_log)
        for n in nodes:
            n.start(timeout=30)
        wait_for(lambda: all(cluster.brokers(n) == 3 for n in nodes), 40, "all three back")
        for topic in ("durable", "cached"):  # every partition led again, by every node's view
            back_to_three(cluster, topic, 2)
        lost = lost_after_restart(cluster.bootstrap, "durable", 2, durable)
        # write caching: acknowledged before the fsync, so a power cut may lose it (reported)
        lost_after_restart(cluster.bootstrap, "cached", 2, cached)
    finally:
        cluster.stop()
    assert not lost, lost


def test_power_cut_of_a_single_node_loses_no_acknowledged_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster of one: acks=all waits for the node's own fsync."""
    fsync_log = tmp_path / "fsyncs.txt"
    monkeypatch.setenv("EDDYTEST_FSYNC_LOG", str(fsync_log))
    node = EddyProcess(tmp_path / "solo")
    try:
        node.start()
        writer = Writer(node.bootstrap, "solo", RECORDS, RATE).start()
        writer.join(90)
        cut_power([node], fsync_log)
        node.start()
        lost = lost_after_restart(node.bootstrap, "solo", 1, writer)
    finally:
        node.kill()
    assert not lost, lost
