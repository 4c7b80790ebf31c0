"""`python -m bench.pipeline`: records/s of a pipeline topic -> parquet on local Spark.

Issue 5's benchmark: 100-byte JSON records in an eddy topic, a pipeline with two
transforms (parse_json with a schema, mask by salted hash) writing parquet, on
`local[2]`, trigger available-now. The same records are also pushed through
cut-down plans so the note can say where the time goes:

1. read: `format("eddy")` batch read -> Spark's `noop` sink (the Kafka reader and
   the Arrow hand-over to the JVM);
2. read + transforms -> noop (adds from_json and sha2);
3. read + transforms -> parquet (adds the parquet writer);
4. the pipeline itself: `eddy.connect.runtime.runner.run` (streaming, foreachBatch, the
   dead-letter split, the exactly-once file commit).

Spark's start-up is reported apart. Needs nothing beyond the project's own deps.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.brokers import EddyBroker

RECORD_BYTES = 100


def make_value(i: int) -> bytes:
    """A JSON object of exactly RECORD_BYTES bytes."""
    base = {"id": i, "email": f"user{i % 100000}@example.com", "amount": round(i * 0.37 % 1000, 2),
            "region": ("eu", "us", "ap")[i % 3], "note": ""}
    text = json.dumps(base, separators=(",", ":"))
    pad = RECORD_BYTES - len(text)
    base["note"] = "x" * max(0, pad)
    return json.dumps(base, separators=(",", ":")).encode()[:RECORD_BYTES]


def fill(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 20,
                         "compression.type": "none"})
    values = [make_value(i) for i in range(1000)]
    started = time.perf_counter()
    for i in range(records):
        for _ in range(1000):
            try:
                producer.produce(topic, values[i % 1000], str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)
    return time.perf_counter() - started


PIPELINE = """
name: bench-pipeline
source:
  type: eddy
  bootstrap: {bootstrap}
  topic: {topic}{batch}
transforms:
  - parse_json: {{schema: "id LONG, email STRING, amount DOUBLE, region STRING, note STRING"}}
  - mask: {{field: email, method: hash, salt: bench}}
sinks:
  - type: files
    format: parquet
    path: {out}
checkpoint: {checkpoint}
trigger: available-now
"""


def cpu_by_role(broker_pid: int) -> dict[str, float]:
    """CPU seconds used so far by the JVM, the PySpark Python workers, the broker, this
    driver process, and the whole machine (processes that exited are not counted)."""
    from bench.procstat import cpu_seconds, machine_busy_seconds, self_cpu_seconds

    out = {"jvm": 0.0, "python workers": 0.0, "broker": cpu_seconds(broker_pid) or 0.0,
           "driver": self_cpu_seconds(), "machine": machine_busy_seconds() or 0.0}
    try:
        import psutil
    except ImportError:
        return out
    for proc in psutil.Process().children(recursive=True):
        try:
            name = proc.name()
            cmd = " ".join(proc.cmdline())
            used = sum(proc.cpu_times()[:2])
        except psutil.Error:
            continue
        if name == "java":
            out["jvm"] += used
        elif "pyspark" in cmd:
            out["python workers"] += used
    return out


def timed(label: str, fn: Any, rows: int, results: dict[str, Any], broker_pid: int) -> None:
    before = cpu_by_role(broker_pid)
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    after = cpu_by_role(broker_pid)
    cpu = {k: round(after[k] - before[k], 2) for k in after}
    results[label] = {"seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
                      "cpu_s": cpu}
    per_row = ", ".join(f"{k} {v * 1e6 / rows:.2f}" for k, v in cpu.items())
    print(f"  {label:<38} {seconds:7.2f} s  {rows / seconds:>10,.0f} rows/s   "
          f"CPU us/row: {per_row}", flush=True)


def run_pipeline(spark: Any, pipeline: Any, batch: int, n: int, results: dict[str, Any],
                 broker_pid: int) -> None:
    """The pipeline itself, timed; then what its micro-batches took and a row count of
    what it wrote."""
    from eddy.connect.runtime.runner import run

    progress: dict[int, Any] = {}

    def watch(query: Any, _prepared: Any) -> None:
        for p in query.recentProgress:
            progress[p["batchId"]] = p

    label = (f"pipeline, micro-batches of {batch:,}" if batch
             else "pipeline, backlog in one micro-batch")
    timed(label, lambda: run(spark, pipeline, on_progress=watch, poll_s=0.5), n, results,
          broker_pid)
    batches = [progress[b] for b in sorted(progress)]
    results[label]["micro_batches"] = [
        {"rows": p["numInputRows"], "ms": p["durationMs"]["triggerExecution"]}
        for p in batches]
    later = [p for p in batches[1:] if p["numInputRows"]]
    if later:
        rows = sum(p["numInputRows"] for p in later)
        ms = sum(p["durationMs"]["triggerExecution"] for p in later)
        results[label]["after_first_batch_rows_per_s"] = round(rows * 1000 / ms)
        print(f"    {len(batches)} micro-batches; the first took "
              f"{batches[0]['durationMs']['triggerExecution'] / 1000:.1f} s, the "
              f"{len(later)} after it ran at {rows * 1000 / ms:,.0f} rows/s", flush=True)
    out = pipeline.sinks[0].path
    written = spark.read.parquet(out).count()
    results[label]["rows_written"] = written
    if written != n:
        print(f"  WARNING: the pipeline wrote {written} rows, expected {n}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__)
    ap.add_argument("--records", type=int, default=10_000_000,
                    help="records in the topic (10,000,000: 1 GB, enough for Spark's JIT "
                         "warm-up to be a part, not the whole)")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--batch", default="0,1000000",
                    help="max_records_per_batch of the pipeline, one run per value; 0 is "
                         "the pipeline's default, no cap: the backlog in one micro-batch "
                         "(0,1000000)")
    ap.add_argument("--only", default="read,transform,parquet,pipeline",
                    help="comma-separated subset of read,transform,parquet,pipeline")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting, e.g. spark.driver.extraJavaOptions=... (repeatable)")
    args = ap.parse_args(argv)
    phases = set(args.only.split(","))

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix="eddy-bench-pipeline-"))
    broker = EddyBroker()
    broker.start()
    results: dict[str, Any] = {"records": args.records, "record_bytes": RECORD_BYTES,
                               "partitions": args.partitions, "master": args.master}
    try:
        topic = "bench-orders"
        print(f"filling {topic}: {args.records:,} x {RECORD_BYTES} B JSON, "
              f"{args.partitions} partitions", flush=True)
        fill_s = fill(broker.bootstrap, topic, args.records, args.partitions)
        print(f"  produced in {fill_s:.1f} s", flush=True)

        started = time.perf_counter()
        from eddy.connect.spark import make_session

        conf = {"spark.sql.shuffle.partitions": str(args.partitions)}
        conf.update(item.split("=", 1) for item in args.conf)
        spark = make_session(args.master, app_name="eddy-bench", conf=conf)
        results["spark_startup_s"] = round(time.perf_counter() - started, 2)
        print(f"  spark startup {results['spark_startup_s']} s", flush=True)

        from eddy.connect.runtime.runner import good_rows
        from eddy.connect.runtime.spec import load_pipeline_text
        from eddy.connect.transforms.compiler import compile_plan

        def pipeline_spec(batch: int) -> Any:
            cap = f"\n  max_records_per_batch: {batch}" if batch else ""
            return load_pipeline_text(PIPELINE.format(
                bootstrap=broker.bootstrap, topic=topic, batch=cap, out=work / f"out-{batch}",
                checkpoint=work / f"ck-{batch}"), "bench")

        batch_sizes = [int(b) for b in args.batch.split(",") if b.strip()]
        pipeline = pipeline_spec(batch_sizes[0])
        plan = compile_plan(pipeline.transforms, {})
        from eddy.connect.reader.json_columns import OPTION
        from eddy.connect.runtime.source_frames import with_internal_columns
        from eddy.connect.sources.eddy import value_json_pushdown

        pushdown = value_json_pushdown(pipeline, {})

        def source(parsed: bool = False) -> Any:
            reader = (spark.read.format("eddy")
                      .option("kafka.bootstrap.servers", broker.bootstrap)
                      .option("subscribe", topic).option("includeHeaders", "false"))
            if parsed and pushdown is not None:
                reader = reader.option(OPTION, pushdown)
            return reader.load()

        def transformed() -> Any:
            """What the pipeline's sink gets: transformed rows without errors."""
            out, _ = plan.run(with_internal_columns(source(parsed=True), pipeline))
            return good_rows(pipeline, out)

        n = args.records
        # warm the Python workers once (their first start is not the steady state)
        source().limit(1000).write.format("noop").mode("overwrite").save()
        if "read" in phases:
            timed("read -> noop", lambda: source().write.format("noop")
                  .mode("overwrite").save(), n, results, broker.pid)
        if "transform" in phases:
            timed("read+transforms -> noop", lambda: transformed().write.format("noop")
                  .mode("overwrite").save(), n, results, broker.pid)
        if "parquet" in phases:
            timed("read+transforms -> parquet", lambda: transformed().write
                  .mode("overwrite").parquet(str(work / "batch-out")), n, results, broker.pid)
        if "pipeline" in phases:
            for batch in batch_sizes:
                run_pipeline(spark, pipeline_spec(batch), batch, n, results, broker.pid)
        spark.stop()
    finally:
        broker.stop()
        broker.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
