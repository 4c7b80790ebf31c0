"""`eddy connect validate|run|list-connectors|spec|check|discover`, run as a user runs
them: `python -m eddy connect ...` in a subprocess, output captured (not a TTY)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from eddy.telemetry.pipeline_status import STATUS_TOPIC, decode

from .pipeline_helpers import create_topic, produce, read_topic, run_eddy, write_pipeline


def pipeline_text(bootstrap: str, tmp_path: Path, schema: str | None = None) -> str:
    parse = f"{{keep: [key], schema: '{schema}'}}" if schema else "{keep: [key]}"
    return f"""\
name: cli-orders
source:
  type: eddy
  bootstrap: "{bootstrap}"
  topic: orders
transforms:
  - parse_json: {parse}
  - mask: {{field: email, method: keep_last, keep: 3}}
sinks:
  - type: files
    format: parquet
    path: {tmp_path / "out"}
checkpoint: {tmp_path / "ck"}
trigger: 2 seconds
"""


def test_validate_ok(tmp_path: Path) -> None:
    path = write_pipeline(tmp_path, pipeline_text("127.0.0.1:9092", tmp_path))
    r = run_eddy("connect", "validate", str(path), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        f"{path}: ok: pipeline cli-orders: eddy -> 2 transform(s) -> files")

    r = run_eddy("connect", "validate", str(path), "-o", "json", timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "name": "cli-orders", "source": "eddy", "transforms": ["parse_json", "mask"],
        "sinks": ["files"], "trigger": "2 seconds", "checkpoint": str(tmp_path / "ck"),
        "dead_letter": "127.0.0.1:9092/cli-orders.dead-letter",
    }


def test_validate_bad_file(tmp_path: Path) -> None:
    text = (pipeline_text("127.0.0.1:9092", tmp_path)
            .replace("method: keep_last", "method: shred")
            .replace("trigger: 2 seconds", "trigger: 2 fortnights"))
    path = write_pipeline(tmp_path, text)
    r = run_eddy("connect", "validate", str(path), timeout=60)
    assert r.returncode == 1
    assert r.stdout == ""
    assert f"{path}:8: transforms[1].mask.method: " in r.stderr
    assert f"{path}:14: trigger: " in r.stderr
    assert r.stderr.startswith("error: the pipeline file has problems:")

    r = run_eddy("connect", "validate", str(tmp_path / "missing.yaml"), timeout=60)
    assert r.returncode == 1
    assert f"{tmp_path / 'missing.yaml'}: cannot read the pipeline file" in r.stderr


def test_list_connectors_json() -> None:
    r = run_eddy("connect", "list-connectors", "-o", "json", timeout=60)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {(c["kind"], c["name"]) for c in rows} == {
        ("source", "eddy"), ("source", "datagen"), ("source", "files"),
        ("sink", "eddy"), ("sink", "stdout"), ("sink", "files"), ("sink", "webhook"),
        *(("transform", t) for t in ("parse_json", "mask", "rename", "drop", "select",
                                     "cast", "timestamp", "filter", "route", "sql")),
    }
    assert all(c["description"] for c in rows)


def test_spec_of_a_connector() -> None:
    r = run_eddy("connect", "spec", "sink/files", timeout=60)
    assert r.returncode == 0, r.stderr
    schema = json.loads(r.stdout)
    assert schema["type"] == "object"
    assert "path" in schema["properties"] and "path" in schema["required"]
    assert set(schema["properties"]["format"]["enum"]) == {"parquet", "json", "csv"}

    # a bare name shared by a source and a sink gives both
    r = run_eddy("connect", "spec", "eddy", timeout=60)
    assert r.returncode == 0, r.stderr
    both = json.loads(r.stdout)
    assert set(both) == {"source", "sink"}
    assert "topic" in both["source"]["properties"]


def test_spec_of_an_unknown_connector() -> None:
    r = run_eddy("connect", "spec", "nope", timeout=60)
    assert r.returncode == 1
    assert r.stdout == ""
    assert "no connector 'nope'" in r.stderr
    for known in ("sink/files", "source/datagen", "transform/mask", "sink/webhook"):
        assert known in r.stderr


def test_check_against_a_live_broker(eddy: Any, tmp_path: Path) -> None:
    create_topic(eddy.bootstrap, "orders", 1)
    path = write_pipeline(tmp_path, pipeline_text(eddy.bootstrap, tmp_path))
    r = run_eddy("connect", "check", str(path), timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "ok   source eddy", "ok   sinks[0] files", "ok   dead letters", "ok   checkpoint"]
    assert f"{eddy.bootstrap} reachable" in lines[0]

    r = run_eddy("connect", "check", str(path), "-o", "json", timeout=90)
    assert r.returncode == 0
    assert json.loads(r.stdout)["status"] == "SUCCEEDED"


def test_check_an_unreachable_broker(tmp_path: Path) -> None:
    path = write_pipeline(tmp_path, pipeline_text("127.0.0.1:1", tmp_path))
    r = run_eddy("connect", "check", str(path), timeout=90)
    assert r.returncode == 1
    failed = [line for line in r.stdout.splitlines() if line.startswith("FAIL")]
    assert failed and failed[0].startswith("FAIL  source eddy: cannot reach a broker at "
                                           "127.0.0.1:1")
    assert any(line.startswith("ok   sinks[0] files") for line in r.stdout.splitlines())


def test_discover(eddy: Any, tmp_path: Path) -> None:
    create_topic(eddy.bootstrap, "orders", 2)
    produce(eddy.bootstrap, "orders", [
        (f"c{i}".encode(), json.dumps({"id": i, "email": f"u{i}@x.io", "total": i * 1.5,
                                       "items": [{"sku": "a", "qty": i}]}).encode())
        for i in range(30)])
    path = write_pipeline(tmp_path, pipeline_text(eddy.bootstrap, tmp_path))
    r = run_eddy("connect", "discover", str(path), "--master", "local[1]", "-o", "json",
                 timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    found = json.loads(r.stdout)
    assert found["source"] == "eddy"
    assert found["schema"] == {
        "key": "binary", "value": "binary", "topic": "string", "partition": "int",
        "offset": "bigint", "timestamp": "timestamp", "timestampType": "int",
        "headers": "array<struct<key:string,value:binary>>",
    }
    assert found["sampled_records"] == 30
    assert found["streams"] == ["orders/0", "orders/1"]
    assert found["transforms[0].parse_json"] == (
        "`email` string, `id` bigint, `items` array<struct<qty:bigint,sku:string>>, "
        "`total` double")


def test_run_available_now(eddy: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    create_topic(eddy.bootstrap, "orders", 2)
    docs = [{"id": i, "email": f"person{i}@example.com"} for i in range(50)]
    produce(eddy.bootstrap, "orders", [(f"c{d['id']}".encode(), json.dumps(d).encode())
                                       for d in docs])
    # (the schema given: inferring it is shown by test_discover and test_pipelines)
    path = write_pipeline(tmp_path, pipeline_text(eddy.bootstrap, tmp_path,
                                                  schema="id INT, email STRING"))
    r = run_eddy("connect", "run", str(path), "--available-now", "--master", "local[1]",
                 timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    # progress as log lines (stderr is not a TTY)
    progress = [line for line in r.stderr.splitlines() if re.match(r"batch \d+: ", line)]
    assert progress, r.stderr[-3000:]
    assert re.match(r"batch 0: 50 rows in [\d.]+s \([\d,]+ rows/s\), total 50, "
                    r"dead letters 0, lag orders/0=0 orders/1=0$", progress[0]), progress
    assert "pipeline cli-orders: stopped after 50 record(s), 0 dead letter(s)" in r.stderr

    rows = sorted(pq.read_table(tmp_path / "out").to_pylist(), key=lambda r: r["id"])
    assert rows == [{"key": f"c{d['id']}".encode(), "email": "*" * (len(d["email"]) - 3)
                     + d["email"][-3:], "id": d["id"]} for d in docs]
    # it reported its progress and its end to the topic _eddy_pipelines of its Eddy
    reports = [decode(r.key, r.value) for r in read_topic(eddy.bootstrap, STATUS_TOPIC)
               if r.value is not None]
    assert reports and {s.name for s in reports} == {"cli-orders"}
    last = reports[-1]
    assert (last.state, last.rows_total, last.dead_letters, last.lag_records) == (
        "stopped", 50, 0, 0)
