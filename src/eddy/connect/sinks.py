"""A pipeline's sinks as BatchSinks, and the eddy topic sink itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eddy.connect.batch import TOPIC_COLUMN, BatchInfo, BatchSink
from eddy.connect.spec import EddySink, FilesSink, Pipeline, StdoutSink, WebhookSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: columns the eddy sink takes as they are; any other columns become the JSON value
RECORD_COLUMNS = ("key", "value", "headers", "partition")


def as_records(df: DataFrame, topic: str | None) -> DataFrame:
    """key/value/headers/topic columns for producing `df`: `value` as it is if the
    frame has one, else every other column as a JSON object."""
    from pyspark.sql import functions as F

    cols = set(df.columns)
    payload = [c for c in df.columns if c not in (*RECORD_COLUMNS, "topic", TOPIC_COLUMN)]
    out: list[Any] = []
    if "value" in cols:
        out.append(F.col("value").alias("value"))
    else:
        out.append(F.to_json(F.struct(*[F.col(f"`{c}`") for c in payload])).alias("value"))
    if "key" in cols:
        out.append(F.col("key").alias("key"))
    if "headers" in cols:
        out.append(F.col("headers").alias("headers"))
    if topic is None:
        out.append(F.col(TOPIC_COLUMN).alias("topic"))
    return df.select(*out)


class EddyBatchSink:
    """Produce each batch to a topic (or the routed topic): at-least-once, murmur2."""

    single_action = True

    def __init__(self, spec: EddySink, bootstrap: str, name: str) -> None:
        self.spec = spec
        self.bootstrap = bootstrap
        self.name = name

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        frame = as_records(df, self.spec.topic)
        writer = frame.write.format("eddy").option("kafka.bootstrap.servers", self.bootstrap)
        if self.spec.topic is not None:
            writer = writer.option("topic", self.spec.topic)
        for key, value in self.spec.options.items():
            writer = writer.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
        writer.mode("append").save()


def build_sinks(pipeline: Pipeline) -> list[BatchSink]:
    from eddy.connect.file_sink import FilesBatchSink
    from eddy.connect.stdout_sink import StdoutBatchSink
    from eddy.connect.webhook import WebhookBatchSink

    sinks: list[BatchSink] = []
    for i, spec in enumerate(pipeline.sinks):
        name = f"sinks[{i}]:{spec.type}"
        if isinstance(spec, EddySink):
            sinks.append(EddyBatchSink(spec, pipeline.sink_bootstrap(spec), name))
        elif isinstance(spec, FilesSink):
            sinks.append(FilesBatchSink(spec, name))
        elif isinstance(spec, StdoutSink):
            sinks.append(StdoutBatchSink(spec, name))
        else:
            assert isinstance(spec, WebhookSink)
            sinks.append(WebhookBatchSink(spec, name, pipeline.name,
                                          pipeline.dead_letter_target()))
    return sinks
