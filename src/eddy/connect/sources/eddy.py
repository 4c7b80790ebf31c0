"""The `eddy` source: topics read through the Kafka protocol (any Kafka-compatible broker)
by `format("eddy")` (eddy.connect.reader), with Spark Kafka source option names."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from eddy.connect import probes
from eddy.connect.batch import (
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
    SOURCE_TOPIC_COLUMN,
    TRACE_COLUMN,
)
from eddy.connect.connectors import ConnectorSpec, SourceFactory, register
from eddy.connect.spec_model import DEFAULT_BOOTSTRAP, check_bootstrap, check_http_url, check_topic

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from eddy.connect.runtime.spec import Pipeline


class EddySource(ConnectorSpec):
    """Read one or more topics through the Kafka protocol (any Kafka-compatible broker)."""

    type: Literal["eddy"]
    bootstrap: str = Field(DEFAULT_BOOTSTRAP, description="broker HOST:PORT list")
    topic: str | None = Field(None, description="one topic to read")
    topics: list[str] | None = Field(None, description="several topics to read")
    pattern: str | None = Field(None, description="a regex of topic names to read")
    starting_offsets: Literal["earliest", "latest"] | dict[str, dict[str, int]] = Field(
        "earliest",
        description="earliest, latest, or {topic: {partition: offset}} (-2 earliest, -1 latest)",
    )
    starting_timestamp: int | None = Field(
        None, description="start at the first record at or after this time (ms since epoch)"
    )
    max_records_per_batch: int | None = Field(
        None, ge=1, description="at most this many records per micro-batch (all partitions)"
    )
    include_headers: bool = Field(True, description="read record headers")
    options: dict[str, str] = Field(
        default_factory=dict, description="extra Kafka client properties (kafka.* or librdkafka)"
    )
    value_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="value.format",
        description="avro, json or protobuf: values in Confluent's wire format, decoded into "
                    "a struct "
                    "column `value` through the schema registry (bad ones: dead letters)")
    key_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="key.format", description="as value.format, for the key")
    schema_registry_url: str | None = Field(
        None, alias="schema.registry.url", description="the schema registry (http://HOST:PORT)")
    value_subject: str | None = Field(
        None, alias="value.subject", description="reader schema subject (default <topic>-value)")
    value_schema_version: int | None = Field(
        None, ge=1, alias="value.schema.version",
        description="pin the reader schema version (default: latest at start)")
    key_subject: str | None = Field(
        None, alias="key.subject", description="reader schema subject (default <topic>-key)")
    key_schema_version: int | None = Field(
        None, ge=1, alias="key.schema.version", description="pin the key's reader schema")

    _bootstrap = field_validator("bootstrap")(check_bootstrap)

    @field_validator("schema_registry_url")
    @classmethod
    def _registry_url(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value)

    @model_validator(mode="after")
    def _registry_for_formats(self) -> EddySource:
        for name, fmt in (("value.format", self.value_format), ("key.format", self.key_format)):
            if fmt != "bytes" and self.schema_registry_url is None:
                raise ValueError(f"{name}: {fmt} needs schema.registry.url")
        for name, subject in (("value", self.value_subject), ("key", self.key_subject)):
            if subject is None and getattr(self, f"{name}_format") != "bytes" and (
                    self.topic is None and len(self.topics or ()) != 1):
                raise ValueError(f"{name}.format: set {name}.subject (the default subject "
                                 f"<topic>-{name} needs a single `topic`)")
        return self

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else check_topic(value)

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("must list at least one topic")
            for topic in value:
                check_topic(topic)
        return value

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_subscription(self) -> EddySource:
        chosen = [n for n in ("topic", "topics", "pattern") if getattr(self, n) is not None]
        if len(chosen) != 1:
            raise ValueError("set exactly one of topic, topics or pattern")
        return self

    def kafka_bootstrap(self) -> str | None:
        return self.bootstrap


def eddy_options(src: EddySource) -> dict[str, str]:
    """The pipeline's eddy source as `format("eddy")` options (Spark Kafka names)."""
    opts = {
        "kafka.bootstrap.servers": src.bootstrap,
        "includeHeaders": "true" if src.include_headers else "false",
    }
    if src.topic is not None:
        opts["subscribe"] = src.topic
    elif src.topics is not None:
        opts["subscribe"] = ",".join(src.topics)
    else:
        assert src.pattern is not None
        opts["subscribePattern"] = src.pattern
    if isinstance(src.starting_offsets, dict):
        opts["startingOffsets"] = json.dumps(src.starting_offsets)
    else:
        opts["startingOffsets"] = src.starting_offsets
    if src.starting_timestamp is not None:
        opts["startingTimestamp"] = str(src.starting_timestamp)
    if src.max_records_per_batch is not None:
        opts["maxOffsetsPerTrigger"] = str(src.max_records_per_batch)
    for key, value in src.options.items():
        opts[key if key.startswith("kafka.") else f"kafka.{key}"] = value
    if src.schema_registry_url is not None:
        opts["schema.registry.url"] = src.schema_registry_url
    for name in ("value", "key"):
        fmt = getattr(src, f"{name}_format")
        if fmt != "bytes":
            opts[f"{name}.format"] = fmt
            subject, version = getattr(src, f"{name}_subject"), getattr(
                src, f"{name}_schema_version")
            if subject is not None:
                opts[f"{name}.subject"] = subject
            if version is not None:
                opts[f"{name}.schema.version"] = str(version)
    return opts


def value_json_pushdown(pipeline: Pipeline, json_schemas: Mapping[int, str]) -> str | None:
    """The `parseValueSchema` option for a pipeline whose first transform parses the
    record value as JSON with a schema the reader can parse (json_columns), else None."""
    from pyspark.sql.types import StructType

    from eddy.connect.reader.json_columns import pushable_fields
    from eddy.connect.transforms.spec import ParseJson

    first = pipeline.transforms[0] if pipeline.transforms else None
    if not (isinstance(pipeline.source, EddySource) and isinstance(first, ParseJson)
            and first.parse_json.field == "value"):
        return None
    ddl = json_schemas.get(0) or first.parse_json.schema_
    if ddl is None:
        return None
    struct = StructType.fromDDL(ddl)
    value = struct.jsonValue()
    return struct.json() if isinstance(value, dict) and pushable_fields(value) else None


class EddySourceFactory(SourceFactory[EddySource]):
    spec = EddySource
    rank = 0

    def data_sources(self) -> tuple[type[Any], ...]:
        from eddy.connect.reader.kafka_source import EddyDataSource

        return (EddyDataSource,)

    def stream(self, spark: SparkSession, spec: EddySource, pipeline: Pipeline,
               json_schemas: Mapping[int, str]) -> DataFrame:
        """The topics as a stream; a leading parse_json of the value is done by the reader
        (value_json_pushdown)."""
        opts = eddy_options(spec)
        value_json = value_json_pushdown(pipeline, json_schemas)
        if value_json is not None:
            from eddy.connect.reader.json_columns import OPTION

            opts[OPTION] = value_json
        return spark.readStream.format("eddy").options(**opts).load()

    def sample(self, spark: SparkSession, spec: EddySource, rows: int) -> DataFrame:
        opts = eddy_options(spec)
        opts.pop("maxOffsetsPerTrigger", None)
        return spark.read.format("eddy").options(**opts).load().limit(rows)

    def internal_columns(self, df: DataFrame, spec: EddySource) -> dict[str, Column]:
        """Where each record came from, its raw key and value (the reader keeps them
        itself when it decodes keys or values), the trace it belongs to."""
        from pyspark.sql import functions as F

        added = {SOURCE_TOPIC_COLUMN: F.col("topic"), SOURCE_PARTITION_COLUMN: F.col("partition"),
                 SOURCE_OFFSET_COLUMN: F.col("offset"), RAW_KEY_COLUMN: F.col("key"),
                 RAW_VALUE_COLUMN: F.col("value")}
        # decoded keys/values: the reader keeps the original bytes in the raw columns
        for raw in (RAW_KEY_COLUMN, RAW_VALUE_COLUMN):
            if raw in df.columns:
                del added[raw]
        if "headers" in df.columns:  # the trace the record belongs to, for the eddy sink
            added[TRACE_COLUMN] = F.expr(
                "CAST(try_element_at(filter(headers, h -> h.key = 'traceparent'), 1).value "
                "AS STRING)")
        return added

    def position(self, columns: Collection[str]) -> Column | None:
        """`topic/partition@offset`."""
        from pyspark.sql import functions as F

        if SOURCE_TOPIC_COLUMN not in columns:
            return None
        return F.concat(F.col(SOURCE_TOPIC_COLUMN), F.lit("/"),
                        F.col(SOURCE_PARTITION_COLUMN).cast("string"), F.lit("@"),
                        F.col(SOURCE_OFFSET_COLUMN).cast("string"))

    def check(self, spec: EddySource, pipeline: Pipeline, what: str) -> probes.Check:
        topics = [spec.topic] if spec.topic else list(spec.topics or [])
        return probes.kafka(spec.bootstrap, what, topics)


register(EddySourceFactory())
