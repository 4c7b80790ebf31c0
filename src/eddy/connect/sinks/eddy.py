"""The `eddy` sink: rows produced to a topic, or to the topic a `route` chose, through
`format("eddy")` (eddy.connect.reader.kafka_writer): at-least-once, murmur2 partitioning,
keys and values in Confluent's wire format when value.format/key.format say so."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from eddy.connect import probes
from eddy.connect.batch import TOPIC_COLUMN, TRACE_COLUMN, BatchInfo
from eddy.connect.connectors import ConnectorSpec, SinkFactory, register
from eddy.connect.spec_model import check_bootstrap, check_http_url, check_topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from eddy.connect.runtime.spec import Pipeline

#: columns the eddy sink takes as they are; any other columns become the JSON value (or,
#: with value.format, the struct value encoded: eddy.connect.formats.value_encoding)
RECORD_COLUMNS = ("key", "value", "headers", "partition")
#: a W3C traceparent is 55 characters; anything much longer is not one
MAX_TRACEPARENT = 128


class EddySink(ConnectorSpec):
    """Produce to a topic (murmur2 key partitioning), or to the topic a `route` chose."""

    type: Literal["eddy"]
    bootstrap: str | None = Field(None, description="default: the source's bootstrap")
    topic: str | None = Field(None, description="target topic (default: the routed topic)")
    options: dict[str, str] = Field(default_factory=dict, description="producer properties")
    value_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="value.format",
        description="avro, json or protobuf: the `value` column (or, without one, the "
                    "row) in Confluent's wire format, with a schema derived from its type "
                    "and registered; bytes: `value` as it is, else the row as JSON")
    key_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="key.format", description="as value.format, for the `key` column")
    schema_registry_url: str | None = Field(
        None, alias="schema.registry.url", description="the schema registry (http://HOST:PORT)")
    value_subject: str | None = Field(
        None, alias="value.subject", description="subject (default <topic>-value)")
    key_subject: str | None = Field(
        None, alias="key.subject", description="subject (default <topic>-key)")
    auto_register_schemas: bool = Field(
        True, alias="auto.register.schemas",
        description="register the derived schema (false: it must be registered already)")
    use_latest_version: bool = Field(
        False, alias="use.latest.version",
        description="write with the subject's latest schema instead of the derived one")

    _bootstrap = field_validator("bootstrap")(
        lambda v: None if v is None else check_bootstrap(v)
    )

    @field_validator("schema_registry_url")
    @classmethod
    def _registry_url(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value)

    @model_validator(mode="after")
    def _registry_for_formats(self) -> EddySink:
        for name in ("value", "key"):
            fmt = getattr(self, f"{name}_format")
            if fmt == "bytes":
                continue
            if self.schema_registry_url is None:
                raise ValueError(f"{name}.format: {fmt} needs schema.registry.url")
            if self.topic is None and getattr(self, f"{name}_subject") is None:
                raise ValueError(f"{name}.format: set {name}.subject (the default subject "
                                 f"<topic>-{name} needs `topic`)")
        return self

    def write_options(self) -> dict[str, str]:
        """The schema-aware options of `format("eddy")` this sink sets."""
        opts: dict[str, str] = {}
        for name in ("value", "key"):
            fmt = getattr(self, f"{name}_format")
            if fmt != "bytes":
                opts[f"{name}.format"] = fmt
                subject = getattr(self, f"{name}_subject")
                if subject is not None:
                    opts[f"{name}.subject"] = subject
        if opts:
            assert self.schema_registry_url is not None
            opts["schema.registry.url"] = self.schema_registry_url
            opts["auto.register.schemas"] = str(self.auto_register_schemas).lower()
            opts["use.latest.version"] = str(self.use_latest_version).lower()
        return opts

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else check_topic(value)

    def kafka_bootstrap(self) -> str | None:
        return self.bootstrap

    def route_problem(self) -> str | None:
        if self.topic is None:
            return "an eddy sink needs `topic`, or a `route` transform choosing one"
        return None


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
    #: the source record's trace (TRACE_COLUMN) reaches this sink: it continues it
    takes_trace = True

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


class EddySinkFactory(SinkFactory[EddySink]):
    spec = EddySink
    rank = 0

    def data_sources(self) -> tuple[type[Any], ...]:
        from eddy.connect.reader.kafka_source import EddyDataSource

        return (EddyDataSource,)

    def build(self, spec: EddySink, name: str, pipeline: Pipeline) -> EddyBatchSink:
        return EddyBatchSink(spec, pipeline.sink_bootstrap(spec), name, pipeline.name,
                             pipeline.dead_letter_target())

    def check(self, spec: EddySink, pipeline: Pipeline, what: str) -> probes.Check:
        return probes.kafka(pipeline.sink_bootstrap(spec), what,
                            [spec.topic] if spec.topic else None)


register(EddySinkFactory())
