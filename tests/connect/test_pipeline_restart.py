"""The delivery guarantees across a crash: `eddy connect run` killed with SIGKILL in the
middle of a many-batch run, then run again with the same file and checkpoint.

Files sink: every input record exactly once. Topic sink: every input record at least
once, no gap.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from eddy.connect.runtime.runner import run
from eddy.connect.runtime.spec import load_pipeline

from .pipeline_helpers import (
    create_topic,
    eddy_cmd,
    eddy_env,
    produce_fast,
    read_topic,
    write_pipeline,
)

RECORDS = 100_000
PER_BATCH = 10_000


def session_pids(sid: int) -> list[int]:
    """Processes in session `sid` (the pipeline, its Spark JVM, Spark's Python workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # fields 3.. of /proc/PID/stat
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):  # alive, in the session
            pids.append(int(entry.name))
    return pids


def crash(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the pipeline's whole session: no shutdown work anywhere."""
    deadline = time.monotonic() + 20
    while pids := session_pids(proc.pid):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert time.monotonic() < deadline, f"processes of the killed pipeline survived: {pids}"
        time.sleep(0.1)
    proc.wait(10)


def committed_batches(out: Path) -> list[str]:
    commits = out / "_eddy_commits"
    if not commits.is_dir():
        return []
    return sorted(p.name for p in commits.iterdir()
                  if not p.name.startswith(".") and not p.name.endswith(".moving"))


def test_kill_and_restart_exactly_once_files_at_least_once_topic(
        eddy: Any, spark: Any, tmp_path: Path) -> None:
    create_topic(eddy.bootstrap, "clicks", 2)
    produce_fast(eddy.bootstrap, "clicks",
                 (b'{"id":%d,"page":"/p/%d"}' % (i, i % 97) for i in range(RECORDS)),
                 (b"u%d" % (i % 1000) for i in range(RECORDS)))
    out = tmp_path / "out"
    pipeline = write_pipeline(tmp_path, f"""
name: clicks-restart
source:
  type: eddy
  bootstrap: "{eddy.bootstrap}"
  topic: clicks
  max_records_per_batch: {PER_BATCH}
transforms:
  - parse_json: {{schema: "id BIGINT, page STRING", keep: [key]}}
sinks:
  - {{type: files, format: parquet, path: "{out}"}}
  - {{type: eddy, topic: clicks-copy}}
checkpoint: {tmp_path / "ck"}
trigger: 1 second
""")
    log1 = tmp_path / "run1.log"
    with open(log1, "wb") as log:
        proc = subprocess.Popen(
            eddy_cmd("connect", "run", str(pipeline), "--master", "local[2]"),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=eddy_env(), cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(committed_batches(out)) < 2:
            assert proc.poll() is None, f"the pipeline exited early:\n{log1.read_text()}"
            assert time.monotonic() < deadline, (
                f"no second batch committed in 180s:\n{log1.read_text()[-3000:]}")
            time.sleep(0.05)
        # crash at once: the files sink (first) has committed batch 1, the topic sink is
        # still producing it and Spark has not recorded it done, so the restart replays it
    finally:
        crash(proc)
    before = committed_batches(out)
    assert 2 <= len(before) < RECORDS // PER_BATCH, (
        f"the crash should come mid-run: {len(before)} batch(es) committed")
    run_id = json.loads((tmp_path / "ck" / "pipeline.json").read_text())["run_id"]

    # the restart: the same file and checkpoint, available-now, run to completion (in this
    # process, on the tests' Spark session, to spare a second JVM start)
    restarted = load_pipeline(pipeline).model_copy(update={"trigger": "available-now"})
    prepared = run(spark, restarted, poll_s=0.2, max_seconds=240)
    assert prepared.run_id == run_id  # the files sink deduplicates by (run id, batch id)
    assert prepared.batches, "the restart had nothing left to do"
    # it resumes at the batch under way at the crash: the last one the files sink
    # committed (Spark had not recorded it done) or the one after it
    assert prepared.batches[0].batch_id in (len(before) - 1, len(before))
    assert len(committed_batches(out)) > len(before)

    # files: every id exactly once
    df = spark.read.parquet(str(out))
    ids = sorted(r[0] for r in df.select("id").collect())
    assert len(ids) == RECORDS
    assert ids == list(range(RECORDS)), "parquet ids are not 0..N-1 exactly once"

    # topic: every id at least once, none missing; keys kept
    copies = read_topic(eddy.bootstrap, "clicks-copy", timeout=120)
    assert len(copies) >= RECORDS
    seen = [json.loads(r.value)["id"] for r in copies if r.value is not None]
    assert set(seen) == set(range(RECORDS)), (
        f"missing ids in the topic: {sorted(set(range(RECORDS)) - set(seen))[:20]}")
    assert all(r.key == b"u%d" % (json.loads(r.value)["id"] % 1000) for r in copies[:5000])
