"""`eddy connect run`: a pipeline file becomes a Spark Structured Streaming query.

The source is read as a stream; every micro-batch goes through foreachBatch:
transforms (column expressions) -> good rows to every sink, bad rows to the
dead-letter topic. Spark's checkpoint (`<checkpoint>/spark`) records each
micro-batch's offsets before it runs and its completion after every sink
returned, so after a crash the unfinished batch is replayed with the same rows:
file sinks deduplicate by (run id, batch id) for exactly-once output, topics get
at-least-once. `<checkpoint>/pipeline.json` keeps the run id and the JSON schemas
inferred for parse_json, so a restart parses the same way.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eddy.connect.batch import (
    ERROR_COLUMN,
    INTERNAL_COLUMNS,
    TOPIC_COLUMN,
    TRACE_COLUMN,
    BatchInfo,
    observed,
)
from eddy.connect.deadletter import KafkaDeadLetters
from eddy.connect.runtime import source_frames
from eddy.connect.runtime.sink_frames import build_sinks, for_sink
from eddy.connect.runtime.spec import Pipeline
from eddy.connect.transforms.compiler import Plan, TransformError, compile_plan, infer_json_schema
from eddy.connect.transforms.spec import ParseJson, Route, Sql
from eddy.log.state_files import atomic_write

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


class PipelineError(RuntimeError):
    """The pipeline cannot run as written; the message says where and why."""


@dataclass
class BatchStats:
    batch_id: int
    dead_letters: int = 0
    seconds: float = 0.0


@dataclass
class Prepared:
    """A pipeline ready to start: its compiled transforms and its run state."""

    pipeline: Pipeline
    plan: Plan
    run_id: str
    json_schemas: dict[int, str]
    batches: list[BatchStats] = field(default_factory=list)


def _state_path(pipeline: Pipeline) -> Path:
    return pipeline.checkpoint_dir() / "pipeline.json"


def read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise PipelineError(f"{path}: unreadable pipeline state ({exc})") from None
    return data if isinstance(data, dict) else {}


def prepare(spark: SparkSession, pipeline: Pipeline) -> Prepared:
    """Compile the transforms against the source's schema (inferring parse_json
    schemas from a sample when not given) and load or create the run state."""
    state_path = _state_path(pipeline)
    state = read_state(state_path)
    run_id = str(state.get("run_id") or uuid.uuid4().hex)
    schemas = {int(k): str(v) for k, v in dict(state.get("json_schemas", {})).items()}
    for i, t in enumerate(pipeline.transforms):
        if isinstance(t, ParseJson) and t.parse_json.schema_ is None and i not in schemas:
            before = compile_plan(pipeline.transforms[:i], schemas)
            rows = source_frames.sample(spark, pipeline, t.parse_json.sample)
            sample_df, _ = before.run(rows)
            texts = [r[0] for r in sample_df.selectExpr(
                f"CAST(`{t.parse_json.field}` AS STRING)").collect()]
            inferred = infer_json_schema(spark, texts)
            if inferred is None:
                raise PipelineError(
                    f"transforms[{i}].parse_json: no schema given and none can be inferred: "
                    f"the source has no JSON records yet (give `schema`)"
                )
            schemas[i] = inferred
            log.info("transforms[%d].parse_json: inferred schema %s", i, inferred)
    plan = compile_plan(pipeline.transforms, schemas)
    # analysis only: unknown columns, bad SQL and bad types fail here, not mid-stream
    try:
        out, _ = plan.run(source_frames.sample(spark, pipeline, 0))
        out.schema  # noqa: B018 - forces analysis
    except TransformError as exc:
        raise PipelineError(str(exc)) from None
    state_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(str(state_path), json.dumps({
        "run_id": run_id, "name": pipeline.name,
        "json_schemas": {str(k): v for k, v in schemas.items()},
    }, indent=2).encode())
    return Prepared(pipeline, plan, run_id, schemas)


def transform(prepared: Prepared, df: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """The pipeline's transforms over a source frame (streaming or one micro-batch), with
    the internal columns dead letters need; and the frames of rows set aside as bad
    before a `sql` step."""
    pipeline = prepared.pipeline
    out, aside = prepared.plan.run(source_frames.with_internal_columns(df, pipeline))
    return (source_frames.finish_internal_columns(out, pipeline),
            [source_frames.finish_internal_columns(frame, pipeline) for frame in aside])


def single_pass(pipeline: Pipeline, sinks: list[Any]) -> bool:
    """Whether each micro-batch can be read once: one sink that reads its frame in one
    Spark action, and no `sql` step (which sets bad rows aside in frames of their own).
    Then the transforms are part of the streaming query (planned once, not per batch)
    and bad rows are counted on the way to the sink (an Observation)."""
    return (len(sinks) == 1 and bool(getattr(sinks[0], "single_action", False))
            and not any(isinstance(t, Sql) for t in pipeline.transforms))


def process_batch(prepared: Prepared, sinks: list[Any], dead: KafkaDeadLetters | None,
                  df: DataFrame, batch_id: int, transformed: bool = False) -> BatchStats:
    """One micro-batch: transforms (unless `transformed`), sinks, dead letters. Raises
    to fail the batch.

    In single_pass mode the batch is read once and only a batch that had bad rows reads
    its source again to send them; otherwise the transformed batch is cached for the
    sinks and the dead letters."""
    started = time.monotonic()
    stats = BatchStats(batch_id)
    info = BatchInfo(batch_id, prepared.run_id)
    out, aside = (df, []) if transformed else transform(prepared, df)
    if single_pass(prepared.pipeline, sinks):  # then no step set rows aside
        _single_pass(prepared, sinks[0], dead, out, info, stats)
    else:
        _cached(prepared, sinks, dead, out, aside, info, stats)
    stats.seconds = time.monotonic() - started
    return stats


def _output_columns(pipeline: Pipeline, out: DataFrame) -> list[str]:
    """The columns sinks get: internal ones dropped (a routed topic and the source record's
    trace kept: for_sink gives the trace to the eddy sink alone), quoted."""
    routed = any(isinstance(t, Route) for t in pipeline.transforms)
    return [f"`{c}`" for c in out.columns if c not in INTERNAL_COLUMNS or (
        routed and c == TOPIC_COLUMN) or c == TRACE_COLUMN]


def good_rows(pipeline: Pipeline, out: DataFrame) -> DataFrame:
    """The transformed rows without an error, with the columns sinks get."""
    from pyspark.sql import functions as F

    columns = _output_columns(pipeline, out)
    return out.filter(F.col(ERROR_COLUMN).isNull()).select(*columns)


def _single_pass(prepared: Prepared, sink: Any, dead: KafkaDeadLetters | None,
                 out: DataFrame, info: BatchInfo, stats: BatchStats) -> None:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    watch = Observation()
    # only what the sink needs, and the error: Spark does not prune columns through an
    # observation
    narrow = out.select(*_output_columns(prepared.pipeline, out), ERROR_COLUMN)
    watched = narrow.observe(watch, F.count(F.lit(1)).alias("rows"),
                             F.count(F.col(ERROR_COLUMN)).alias("bad"))

    def good_count() -> int | None:
        seen = observed(watch)
        return None if seen is None else int(seen["rows"]) - int(seen["bad"])

    sink.write(for_sink(sink, good_rows(prepared.pipeline, watched)),
               replace(info, rows=good_count))
    metrics = observed(watch)
    # no metrics: the sink had nothing to do (a replay of a committed batch): look again
    if metrics is None or metrics["bad"]:
        _send_dead_letters(dead, [out.filter(F.col(ERROR_COLUMN).isNotNull())], info, stats)


def _cached(prepared: Prepared, sinks: list[Any], dead: KafkaDeadLetters | None,
            out: DataFrame, aside: list[DataFrame], info: BatchInfo,
            stats: BatchStats) -> None:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    out = out.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        good = good_rows(prepared.pipeline, out)
        for sink in sinks:
            sink.write(for_sink(sink, good), info)
        _send_dead_letters(dead, [out.filter(F.col(ERROR_COLUMN).isNotNull()), *aside],
                           info, stats)
    finally:
        out.unpersist()


def _send_dead_letters(dead: KafkaDeadLetters | None, frames: list[DataFrame],
                       info: BatchInfo, stats: BatchStats) -> None:
    for frame in frames:
        if frame.isEmpty():
            continue
        if dead is None:
            sample = frame.select(ERROR_COLUMN).first()
            raise PipelineError(
                f"bad records and no dead-letter topic to put them in "
                f"(set dead_letter in the pipeline): {sample[0] if sample else ''}"
            )
        stats.dead_letters += frame.count()
        dead.send(frame, None, info)


def start(spark: SparkSession, prepared: Prepared) -> StreamingQuery:
    pipeline = prepared.pipeline
    sinks = build_sinks(pipeline)
    target = pipeline.dead_letter_target()
    dead = KafkaDeadLetters(target[0], target[1], pipeline.name) if target else None
    stream = source_frames.stream(spark, pipeline, prepared.json_schemas)
    transformed = single_pass(pipeline, sinks)
    if transformed:
        try:
            stream, _ = transform(prepared, stream)
        except TransformError as exc:
            raise PipelineError(str(exc)) from None

    def on_batch(df: DataFrame, batch_id: int) -> None:
        stats = process_batch(prepared, sinks, dead, df, batch_id, transformed)
        prepared.batches.append(stats)
        del prepared.batches[:-100]

    writer = (
        stream.writeStream.foreachBatch(on_batch)
        .queryName(pipeline.name.replace("-", "_").replace(".", "_"))
        .option("checkpointLocation", str(pipeline.checkpoint_dir() / "spark"))
    )
    if pipeline.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{pipeline.interval_ms} milliseconds")
    return writer.start()


def run(spark: SparkSession, pipeline: Pipeline,
        on_progress: Callable[[StreamingQuery, Prepared], object] | None = None,
        poll_s: float = 1.0, max_seconds: float | None = None) -> Prepared:
    """Run until the query ends (available-now: when caught up) or `max_seconds`."""
    prepared = prepare(spark, pipeline)
    query = start(spark, prepared)
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    try:
        while query.isActive:
            query.awaitTermination(poll_s)  # type: ignore[arg-type]
            if on_progress is not None:
                on_progress(query, prepared)
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        if query.isActive:
            query.stop()
    error = query.exception()
    if error is not None:
        raise PipelineError(f"pipeline {pipeline.name} failed: {_first_line(error)}")
    return prepared


def _first_line(error: Any) -> str:
    text = str(getattr(error, "desc", None) or error)
    for line in text.splitlines():
        if "Error" in line or "Exception" in line:
            return line.strip()
    return text.splitlines()[0] if text else "unknown error"
