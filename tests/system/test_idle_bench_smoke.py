"""A short run of `python -m bench.idle`: one node, then three, do a little work, sit idle
for a few seconds and are stopped with SIGTERM. Checks that the benchmark reports every
node (CPU, RSS, elections, appends, exit) and leaves nothing behind; no timing and no
idleness figure is asserted (those are the benchmark's to report, on a quiet machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_mesh_bench_smoke import _eddy_pids

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_idle_run_reports_every_node_and_cleans_up(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"  # the bench's temp dirs go here (TMPDIR)
    tmp.mkdir()
    out_json = tmp_path / "idle.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.idle", "--minutes", "0.05", "--settle", "1",
         "--json", str(out_json)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    assert "ERROR" not in run.stdout
    doc = json.loads(out_json.read_text())
    sizes = [r["nodes"] for r in doc["results"]]
    assert sizes == [1, 3]
    for r in doc["results"]:
        assert r["workload"]["idempotent_left"] == 0
        # 1000, a transaction of 1 and 3 committed ones of 10 (read_committed)
        assert r["workload"]["consumed"] == 1031
        assert len(r["per_node"]) == r["nodes"]
        for p in r["per_node"]:
            assert p["cpu_pct"] >= 0 and p["rss_mib"] > 0
            assert p["raft_elections"] >= 0 and p["partition_elections"] >= 0
        assert [s["exit_code"] for s in r["sigterm"]] == [0] * r["nodes"]
        assert all(s["stages"] for s in r["sigterm"])  # each node logged its stop's stages
    for label in ("1 node(s), idle for", "3 node(s), idle for", "SIGTERM n1: exit 0"):
        assert label in run.stdout, run.stdout
    # nothing left behind: no node process, no temp dir
    assert _eddy_pids(tmp) == set()
    assert list(tmp.iterdir()) == []
