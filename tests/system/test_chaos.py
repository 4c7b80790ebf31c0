"""The fault harness (bench.chaos, issue 28) in its CI size: three nodes (each a broker and
a metadata voter, on this worker's loopback block 127.0.B.2-4), a topic of 3 partitions with
replication factor 3 and min.insync.replicas=2, an idempotent acks=all producer writing to
every partition while faults hit the cluster one after another, each healed and waited
out (every node back in every ISR) before the next. Then read_committed consumers through
two nodes read everything back and the checks find nothing lost, duplicated, misplaced or
out of order, no fatal client error, and byte-identical replicas. Once on a quiet machine,
once with a process busy-looping on every core for the whole round.

Each fault's unavailability (the longest gap between acknowledged writes of a partition) is
printed, never asserted: `python -m bench.chaos` measures it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench package

from bench.chaos.cluster import Cluster
from bench.chaos.net import Hog, net_faults
from bench.chaos.rounds import run_round

#: the fault kinds CI runs, quiet and under the hog (bench.chaos runs them all)
QUIET = ["kill", "pause", "isolate", "controller"]
HOGGED = ["kill", "pause", "isolate", "controller"]


@pytest.mark.parametrize(("hog", "kinds"), [(False, QUIET), (True, HOGGED)],
                         ids=["quiet", "cpu-hog"])
def test_faults_lose_nothing_and_every_one_recovers(tmp_path: Path, hog: bool,
                                                   kinds: list[str]) -> None:
    cluster = Cluster(tmp_path)
    with net_faults(cluster.block) as net, Hog(hog):
        try:
            cluster.start()
            report = run_round(cluster, "chaos", kinds, net)
        finally:
            cluster.stop()
    print(report.summary())
    assert report.ok, report.summary()
    assert [f.kind for f in report.faults] == kinds, report.summary()
