"""CI smoke test of the benchmark runner: `python -m bench --smoke` runs end to end.

Only that it completes and prints every row of the table is checked: timings never belong
in tests (the numbers of a smoke run are meaningless anyway).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _row_labels() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", "import json, bench.report as r; print(json.dumps(r.LABELS))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )
    labels: list[str] = json.loads(out.stdout)
    return labels


def test_bench_smoke_prints_every_row(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    lines = proc.stdout.splitlines()
    header = next((ln for ln in lines if ln.startswith("metric")), "")
    assert "eddy" in header.split(), proc.stdout
    labels = _row_labels()
    assert len(labels) >= 20
    for label in labels:
        rows = [ln for ln in lines if ln.startswith(label + " ")]
        assert rows, f"row {label!r} missing from:\n{proc.stdout}"
        assert "error" not in rows[0][len(label):], rows[0]
    assert "2 cores" in proc.stdout or "cores" in proc.stdout
    results = list(tmp_path.glob("*.json"))
    assert len(results) == 1
    data = json.loads(results[0].read_text())
    assert not data["results"]["eddy"]["errors"]


def test_pipeline_bench_smoke_writes_every_record() -> None:
    """`python -m bench.pipeline` on a small topic: every phase runs and each pipeline
    run (one micro-batch, then several) writes each record once."""
    records = 20_000
    proc = subprocess.run(
        [sys.executable, "-m", "bench.pipeline", "--records", str(records),
         "--batch", "0,6000"],
        cwd=ROOT, capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    results = json.loads(proc.stderr.strip().splitlines()[-1])
    assert results["records"] == records
    for phase in ("read -> noop", "read+transforms -> noop", "read+transforms -> parquet"):
        assert results[phase]["rows_per_s"] > 0, phase
    one = results["pipeline, backlog in one micro-batch"]
    several = results["pipeline, micro-batches of 6,000"]
    assert one["rows_written"] == several["rows_written"] == records
    assert [b["rows"] for b in one["micro_batches"]] == [records]
    assert sum(b["rows"] for b in several["micro_batches"]) == records
    assert len(several["micro_batches"]) == 4  # 6000 + 6000 + 6000 + 2000
