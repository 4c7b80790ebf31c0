"""The metrics cost bench (bench.metrics) end to end in its CI size: both settings of
`metrics.enable` ran a produce and its read-back on real brokers (the one with metrics on
counted the run's records on /metrics, the one with them off counted none), and /metrics
answered with every partition's samples, in both formats. Timings are never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.metrics import summarize


def test_smoke_run_measures_both_settings_and_the_scrape(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.metrics", "--smoke",
                          "--results-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "produce overhead of metrics on: throughput" in out.stdout
    (saved,) = tmp_path.glob("*-metrics-smoke.json")
    data = json.loads(saved.read_text())
    results = data["results"]
    runs = results["runs"]
    assert [r["metrics"] for r in runs] == [True, False]
    for run in runs:
        assert "error" not in run, run
        produced, consumed = run["produce"], run["consume"]
        assert produced["acked"] > 0 and produced["size"] == 1024
        assert consumed["consumed"] == produced["acked"]
        if run["metrics"]:  # (a retried batch may be appended twice: acks=1, no idempotence)
            assert produced["acked"] <= run["messages_counted"] <= produced["sent"]
        else:
            assert run["messages_counted"] == 0
    summary = results["summary"]
    for kind in ("produce", "consume"):
        assert len(summary[kind]["on"]["mib_s"]) == len(summary[kind]["off"]["mib_s"]) == 1
        assert "mib_s_overhead_pct" in summary[kind]
    scrape = results["scrape"]
    assert "error" not in scrape, scrape
    assert scrape["partitions"] == 50
    for fmt in ("text", "openmetrics"):
        s = scrape[fmt]
        assert s["scrapes"] == len(s["all_ms"]) == 3
        assert 0 < s["min_ms"] <= s["median_ms"] <= s["max_ms"]
        assert s["samples"] >= 3 * 50  # log size, segments and lag of each partition


def test_summary_medians_and_overheads() -> None:
    def run(metrics: bool, mib_s: float, cores: float, msgs_s: float) -> dict[str, object]:
        r = {"mib_s": mib_s, "broker_cores": cores, "msgs_s": msgs_s}
        return {"metrics": metrics, "produce": r, "consume": {"error": "x"}}

    runs = [run(True, 90.0, 0.9, 90_000), run(False, 100.0, 0.8, 100_000),
            run(False, 110.0, 0.8, 100_000), run(True, 100.0, 1.0, 100_000),
            run(True, 80.0, 0.8, 80_000), run(False, 50.0, 0.4, 50_000)]
    produce = summarize(runs)["produce"]
    assert produce["on"]["mib_s"] == [90.0, 100.0, 80.0]
    assert produce["on"]["median_mib_s"] == 90.0
    assert produce["off"]["median_mib_s"] == 100.0
    assert produce["mib_s_overhead_pct"] == 10.0  # on is 10 % slower
    # CPU per record: on 10 us each, off 8 us each: 25 % more
    assert produce["on"]["median_cpu_us_per_record"] == 10.0
    assert produce["off"]["median_cpu_us_per_record"] == 8.0
    assert produce["cpu_us_per_record_overhead_pct"] == 25.0
    assert summarize(runs)["consume"] == {}  # failed runs are left out
