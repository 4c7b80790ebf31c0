"""A short run of `python -m bench.mesh_cluster --quick`: five real nodes join, one is killed
and restarted, and Kafka clients produce and consume through a gateway. Checks that the
benchmark finishes cleanly and reports every row; no timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOSSIP_ROWS = ("join, after last ready line", "join, after last spawn",
               "kill -9 -> dead everywhere", "restart -> alive everywhere")
KAFKA_ROWS = ("produce direct", "produce gateway", "consume direct", "consume gateway",
              "round trip direct", "round trip gateway")


def _eddy_pids(under: Path) -> set[int]:
    """Running `eddy serve` processes with a data dir under `under`."""
    mark = str(under).encode()
    pids = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmd and any(mark in c for c in cmd):
            pids.add(int(d.name))
    return pids


def test_quick_run_reports_every_row_and_cleans_up(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"  # the bench's temp dirs go here (TMPDIR)
    tmp.mkdir()
    out_json = tmp_path / "mesh.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.mesh_cluster", "--quick", "--json", str(out_json)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert run.returncode == 0, f"stdout:\n{run.stdout}\nstderr:\n{run.stderr[-4000:]}"
    lines = run.stdout.splitlines()
    for label in GOSSIP_ROWS:
        for ping in ("500 ms x4", "200 ms x3"):
            row = [ln for ln in lines if ln.startswith(label) and ping in ln]
            assert len(row) == 1, f"no row {label!r} for {ping}:\n{run.stdout}"
            assert " 1/1 " in row[0], row[0]  # the one run measured
    for label in KAFKA_ROWS:
        row = [ln for ln in lines if ln.startswith(label)]
        assert len(row) == 1 and "failed" not in row[0], f"row {label!r}:\n{run.stdout}"
    assert "ERROR" not in run.stdout

    doc = json.loads(out_json.read_text())
    summary = doc["summary"]
    assert summary["errors"] == []
    assert len(summary["gossip"]) == 8
    assert all(r["median_s"] is not None and r["median_s"] >= 0 for r in summary["gossip"])
    assert set(summary["kafka"]) == set(KAFKA_ROWS)
    # every acknowledged record was read back, on both paths
    for path in ("direct", "gateway"):
        produced = doc["kafka"]["produce"][path][0]
        consumed = doc["kafka"]["consume"][path][0]
        assert produced["acked"] == 2_000 and produced["failed"] == 0
        assert consumed["consumed"] == produced["acked"]
        assert doc["kafka"]["rtt"][path][0]["requests"] == 100
    # nothing left behind: no node process, no temp dir
    assert _eddy_pids(tmp) == set()
    assert list(tmp.iterdir()) == []
