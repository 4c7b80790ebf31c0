"""CI smoke of the cluster benchmarks: each runs end to end on tiny sizes and prints its
table (their numbers mean nothing here; timings are never asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

RUNS = {
    "gossip_sim": (["--nodes", "20", "--seeds", "1", "--broadcasts", "3"], "conv_ms"),
    "mesh_rpc": (["--seconds", "0.3"], "1 mib requests, 4 in flight"),
    "raft_sim": (["--seeds", "3", "--nodes", "3"], "failures"),
    "sim": (["--smoke"], "ctrl after crash"),
    "raft_storage": (["--smoke"], "recovery"),
    "placement": (["--smoke"], "max/min"),
    "metadata_failover": (["--rounds", "1"], "leaders moved"),
    "replication": (["--smoke", "--no-save"], "first ack on the new leader"),
    "offsets_cluster": (["--seconds", "0.5", "--committers", "2"], "commits/s"),
    "raft_cluster": (["--seconds", "0.3", "--elections", "1", "--snapshot-entries", "2000",
                      "--snapshot-every", "500"], "snapshot install"),
}


@pytest.mark.parametrize("bench", sorted(RUNS))
def test_cluster_bench_runs(bench: str) -> None:
    args, expected = RUNS[bench]
    out = subprocess.run([sys.executable, "-m", f"bench.{bench}", *args],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert expected in out.stdout.lower(), out.stdout[-2000:]
