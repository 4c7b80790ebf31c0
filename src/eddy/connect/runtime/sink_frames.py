"""A pipeline's sinks as BatchSinks, and the eddy topic sink itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eddy.connect.batch import TOPIC_COLUMN, TRACE_COLUMN, BatchInfo, BatchSink
from eddy.connect.runtime.spec import EddySink, FilesSink, Pipeline, StdoutSink, WebhookSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: columns the eddy sink takes as they are; any other columns become the JSON value (or,
#: with value.format, the struct value encoded: eddy.connect.formats.value_encoding)
RECORD_COLUMNS = ("key", "value", "headers", "partition")
#: a W3C traceparent is 55 characters; anything much longer is not one
MAX_TRACEPARENT = 128


def for_sink(sink: object, df: DataFrame) -> DataFrame:
    """The frame a sink writes: the trace column only for the eddy sink, which turns it
    into the records' traceparent header (eddy.connect.batch.TRACE_COLUMN)."""
    if isinstance(sink, EddyBatchSink) or TRACE_COLUMN not in df.columns:
        return df
    return df.drop(TRACE_COLUMN)


def as_records(df: DataFrame, topic: str | None, encoded: bool = False) -> DataFrame:
    """key/value/headers/topic columns for producing `df`: `value` as it is if the
    frame has one, else every other column as a JSON object (`encoded`: as a struct,
    which the writer encodes with value.format)."""
    from pyspark.sql import functions as F

    cols = set(df.columns)
    payload = [c for c in df.columns
               if c not in (*RECORD_COLUMNS, "topic", TOPIC_COLUMN, TRACE_COLUMN)]
    out: list[Any] = []
    if "value" in cols:
        out.append(F.col("value").alias("value"))
    elif encoded:
        out.append(F.struct(*[F.col(f"`{c}`") for c in payload]).alias("value"))
    else:
        out.append(F.to_json(F.struct(*[F.col(f"`{c}`") for c in payload])).alias("value"))
    if "key" in cols:
        out.append(F.col("key").alias("key"))
    if "headers" in cols:  # kept by the transforms: the traceparent is among them
        out.append(F.col("headers").alias("headers"))
    elif TRACE_COLUMN in cols:  # the source record's trace, continued
        trace = F.col(TRACE_COLUMN)
        out.append(F.when(trace.isNotNull() & (F.length(trace) <= MAX_TRACEPARENT), F.array(
            F.struct(F.lit("traceparent").alias("key"),
                     F.encode(trace, "UTF-8").alias("value")))).alias("headers"))
    if topic is None:
        out.append(F.col(TOPIC_COLUMN).alias("topic"))
    return df.select(*out)


class EddyBatchSink:
    """Produce each batch to a topic (or the routed topic): at-least-once, murmur2."""

    single_action = True

    def __init__(self, spec: EddySink, bootstrap: str, name: str, pipeline: str = "",
                 dead_letter: tuple[str, str] | None = None) -> None:
        self.spec = spec
        self.bootstrap = bootstrap
        self.name = name
        self.pipeline = pipeline
        self.dead_letter = dead_letter

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        encoding = self.spec.write_options()
        frame = as_records(df, self.spec.topic, encoded=self.spec.value_format != "bytes")
        writer = frame.write.format("eddy").option("kafka.bootstrap.servers", self.bootstrap)
        if self.spec.topic is not None:
            writer = writer.option("topic", self.spec.topic)
        if encoding:  # rows that cannot be encoded: dead letters, named by this stage
            writer = writer.options(**encoding, pipeline=self.pipeline, stage=self.name)
            if self.dead_letter is not None:
                writer = writer.options(dead_letter_bootstrap=self.dead_letter[0],
                                        dead_letter_topic=self.dead_letter[1])
        for key, value in self.spec.options.items():
            writer = writer.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
        writer.mode("append").save()


def build_sinks(pipeline: Pipeline) -> list[BatchSink]:
    from eddy.connect.datasources.webhook import WebhookBatchSink
    from eddy.connect.sinks.files import FilesBatchSink
    from eddy.connect.sinks.stdout import StdoutBatchSink

    sinks: list[BatchSink] = []
    for i, spec in enumerate(pipeline.sinks):
        name = f"sinks[{i}]:{spec.type}"
        if isinstance(spec, EddySink):
            sinks.append(EddyBatchSink(spec, pipeline.sink_bootstrap(spec), name,
                                       pipeline.name, pipeline.dead_letter_target()))
        elif isinstance(spec, FilesSink):
            sinks.append(FilesBatchSink(spec, name))
        elif isinstance(spec, StdoutSink):
            sinks.append(StdoutBatchSink(spec, name))
        else:
            assert isinstance(spec, WebhookSink)
            sinks.append(WebhookBatchSink(spec, name, pipeline.name,
                                          pipeline.dead_letter_target()))
    return sinks
