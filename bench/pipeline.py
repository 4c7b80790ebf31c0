"""`python -m bench.pipeline`: records/s of a pipeline topic -> parquet on local Spark.

Issue 5's benchmark: 100-byte JSON records in an eddy topic, a pipeline with two
transforms (parse_json with a schema, mask by salted hash) writing parquet, on
`local[2]`, trigger available-now. The same records are also pushed through
cut-down plans so the note can say where the time goes:

1. read: `format("eddy")` batch read -> Spark's `noop` sink (the Kafka reader and
   the Arrow hand-over to the JVM);
2. read + transforms -> noop (adds from_json and sha2);
3. read + transforms -> parquet (adds the parquet writer);
4. the pipeline itself: `eddy.connect.runtime.run` (streaming, foreachBatch, the
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
  topic: {topic}
  max_records_per_batch: {batch}
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


def timed(label: str, fn: Any, rows: int, results: dict[str, Any]) -> None:
    started = time.perf_counter()
    fn()
    seconds = time.perf_counter() - started
    results[label] = {"seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)}
    print(f"  {label:<32} {seconds:7.2f} s  {rows / seconds:>12,.0f} rows/s", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--batch", type=int, default=1_000_000,
                    help="max_records_per_batch of the pipeline (1,000,000)")
    ap.add_argument("--only", default="read,transform,parquet,pipeline",
                    help="comma-separated subset of read,transform,parquet,pipeline")
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

        spark = make_session(args.master, app_name="eddy-bench", conf={
            "spark.sql.shuffle.partitions": str(args.partitions)})
        results["spark_startup_s"] = round(time.perf_counter() - started, 2)
        print(f"  spark startup {results['spark_startup_s']} s", flush=True)

        from eddy.connect.runtime import run
        from eddy.connect.spec import load_pipeline_text
        from eddy.connect.transforms import compile_plan

        def source() -> Any:
            return (spark.read.format("eddy")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic).option("includeHeaders", "false").load())

        spec_text = PIPELINE.format(bootstrap=broker.bootstrap, topic=topic, batch=args.batch,
                                    out=work / "out", checkpoint=work / "ck")
        pipeline = load_pipeline_text(spec_text, "bench")
        plan = compile_plan(pipeline.transforms, {})
        from eddy.connect.sources import with_internal_columns

        def transformed() -> Any:
            out, _ = plan.run(with_internal_columns(source(), pipeline))
            return out

        n = args.records
        # warm the Python workers once (their first start is not the steady state)
        source().limit(1000).write.format("noop").mode("overwrite").save()
        if "read" in phases:
            timed("read -> noop", lambda: source().write.format("noop")
                  .mode("overwrite").save(), n, results)
        if "transform" in phases:
            timed("read+transforms -> noop", lambda: transformed().write.format("noop")
                  .mode("overwrite").save(), n, results)
        if "parquet" in phases:
            timed("read+transforms -> parquet", lambda: transformed().write
                  .mode("overwrite").parquet(str(work / "batch-out")), n, results)
        if "pipeline" in phases:
            timed("pipeline (streaming, exactly-once)", lambda: run(spark, pipeline), n,
                  results)
            written = spark.read.parquet(str(work / "out")).count()
            results["pipeline_rows_written"] = written
            if written != n:
                print(f"  WARNING: the pipeline wrote {written} rows, expected {n}")
        spark.stop()
    finally:
        broker.stop()
        broker.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
