"""The security bench (bench.security) end to end in its CI size: produce and read-back
through the PLAINTEXT and the SASL_SSL listener of one broker, new connections of each kind
(TCP, TLS, SCRAM, TLS + SCRAM), and a SCRAM user and an ACL created through node 1 of a
3-node cluster seen on nodes 2 and 3. The report's structure and that every measured number
is positive are checked; timings are never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.security import summarize

pytestmark = pytest.mark.timeout(240)


def test_smoke_run_measures_both_listeners_connections_and_propagation(tmp_path: Path) -> None:
    path = tmp_path / "security.json"
    out = subprocess.run([sys.executable, "-m", "bench.security", "--smoke", "--json",
                          str(path)], capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    for title in ("PLAINTEXT vs SASL_SSL", "new connections/s", "ACL propagation ms"):
        assert title in out.stdout, out.stdout
    report = json.loads(path.read_text())
    assert report["smoke"] is True and report["errors"] == []

    runs = report["throughput"]["runs"]
    assert [r["side"] for r in runs] == ["plaintext", "sasl_ssl"]
    for run in runs:
        assert "error" not in run, run
        produced, consumed = run["produce"], run["consume"]
        assert produced["size"] == 1024 and produced["acked"] > 0
        assert produced["failed"] == produced["unacked"] == 0
        assert consumed["consumed"] == produced["acked"]
        for r in (produced, consumed):
            assert r["mib_s"] > 0 and r["msgs_s"] > 0 and r["seconds"] > 0
    summary = report["throughput"]["summary"]
    for kind in ("produce", "consume"):
        for side in ("plaintext", "sasl_ssl"):
            s = summary[kind][side]
            assert s["median_mib_s"] > 0 and s["median_msgs_s"] > 0
            assert len(s["mib_s"]) == 1

    assert set(report["connections"]) == {"plaintext", "tls", "sasl", "tls_sasl"}
    for kind, c in report["connections"].items():
        assert "error" not in c, (kind, c)
        assert c["connections"] > 0 and c["per_s"] > 0 and c["seconds"] > 0, (kind, c)
        assert c["failed"] == 0
        assert c["broker_cpu_ms_per_connection"] > 0 and c["client_cores"] > 0, (kind, c)

    prop = report["propagation"]
    assert "error" not in prop, prop
    assert prop["nodes"] == 3 and len(prop["rounds"]) == 1
    (rnd,) = prop["rounds"]
    assert set(rnd["user_ms"]) == set(rnd["acl_ms"]) == {"2", "3"}
    assert all(v > 0 for v in [*rnd["user_ms"].values(), *rnd["acl_ms"].values(),
                               rnd["user_answer_ms"], rnd["acl_answer_ms"]])
    for key in ("acl_ms", "user_ms", "acl_answer_ms", "user_answer_ms"):
        assert 0 < prop[key]["min"] <= prop[key]["median"] <= prop[key]["max"], prop[key]


def test_summary_medians_and_differences() -> None:
    def run(side: str, mib_s: float, cores: float, msgs_s: float) -> dict[str, object]:
        r = {"mib_s": mib_s, "broker_cores": cores, "msgs_s": msgs_s}
        return {"side": side, "produce": r, "consume": {"error": "x"}}

    runs = [run("plaintext", 100.0, 1.0, 100_000), run("sasl_ssl", 80.0, 1.2, 80_000),
            run("sasl_ssl", 60.0, 0.9, 60_000), run("plaintext", 120.0, 1.2, 120_000),
            run("plaintext", 90.0, 0.9, 90_000), run("sasl_ssl", 70.0, 1.05, 70_000)]
    produce = summarize(runs)["produce"]
    assert produce["plaintext"]["mib_s"] == [100.0, 120.0, 90.0]
    assert produce["plaintext"]["median_mib_s"] == 100.0
    assert produce["sasl_ssl"]["median_mib_s"] == 70.0
    assert produce["sasl_ssl_mib_s_diff_pct"] == -30.0
    # CPU per record: 10 us each on PLAINTEXT, 15 us each on SASL_SSL
    assert produce["plaintext"]["median_cpu_us_per_record"] == 10.0
    assert produce["sasl_ssl"]["median_cpu_us_per_record"] == 15.0
    assert produce["sasl_ssl_cpu_us_per_record_diff_pct"] == 50.0
    assert summarize(runs)["consume"] == {}  # failed runs are left out
