"""A pipeline's source as a Spark DataFrame, streaming or as a small batch sample."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from eddy.connect.batch import (
    ERROR_COLUMN,
    POSITION_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    SOURCE_COLUMNS,
    SOURCE_OFFSET_COLUMN,
    SOURCE_PARTITION_COLUMN,
    SOURCE_TOPIC_COLUMN,
    TRACE_COLUMN,
)
from eddy.connect.formats.value_decoding import DECODE_ERROR_COLUMN
from eddy.connect.runtime.spec import DatagenSource, EddySource, FilesSource, Pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def datagen_options(src: DatagenSource) -> dict[str, str]:
    opts = {"schema": src.schema_, "rate": str(src.rate), "seed": str(src.seed),
            "partitions": str(src.partitions)}
    if src.count is not None:
        opts["count"] = str(src.count)
    if src.max_rows_per_batch is not None:
        opts["maxRowsPerBatch"] = str(src.max_rows_per_batch)
    return opts


def with_internal_columns(df: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Add the columns the runtime tracks rows by before the transforms: where each
    record came from, its raw key and value (eddy source), the error (null). After the
    transforms, finish_internal_columns turns them into what dead letters carry."""
    from pyspark.sql import functions as F

    src = pipeline.source
    added: dict[str, Any] = {}
    if isinstance(src, EddySource):
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
    elif isinstance(src, DatagenSource) and "id" in df.columns:
        added = {SOURCE_OFFSET_COLUMN: F.col("id").cast("bigint")}
    if POSITION_COLUMN not in df.columns:  # the files source sets it (the file's path)
        added[POSITION_COLUMN] = F.lit(None).cast("string")
    if DECODE_ERROR_COLUMN in df.columns:  # undecodable records: dead letters
        added[ERROR_COLUMN] = F.concat(F.lit("source: "), F.col(DECODE_ERROR_COLUMN))
        return df.withColumns(added).drop(DECODE_ERROR_COLUMN)
    added[ERROR_COLUMN] = F.lit(None).cast("string")
    return df.withColumns(added)


def finish_internal_columns(df: DataFrame, pipeline: Pipeline) -> DataFrame:
    """After the transforms: the position (`topic/partition@offset`, `datagen@id` or a
    file path) and the raw key and value only on rows that failed (null elsewhere, so
    good rows carry nothing extra), the source columns dropped."""
    from pyspark.sql import functions as F

    failed = F.col(ERROR_COLUMN).isNotNull()
    columns = set(df.columns)
    if SOURCE_TOPIC_COLUMN in columns:
        position = F.concat(F.col(SOURCE_TOPIC_COLUMN), F.lit("/"),
                            F.col(SOURCE_PARTITION_COLUMN).cast("string"), F.lit("@"),
                            F.col(SOURCE_OFFSET_COLUMN).cast("string"))
    elif SOURCE_OFFSET_COLUMN in columns:
        position = F.concat(F.lit("datagen@"), F.col(SOURCE_OFFSET_COLUMN).cast("string"))
    else:
        position = F.col(POSITION_COLUMN)
    finished = {POSITION_COLUMN: F.when(failed, position)}
    for raw in (RAW_KEY_COLUMN, RAW_VALUE_COLUMN):
        if raw in columns:
            finished[raw] = F.when(failed, F.col(raw))
    return df.withColumns(finished).drop(*[c for c in SOURCE_COLUMNS if c in columns])


def value_json_pushdown(pipeline: Pipeline, json_schemas: dict[int, str]) -> str | None:
    """The `parseValueSchema` option for a pipeline whose first transform parses the
    record value as JSON with a schema the reader can parse (json_columns), else None."""
    from pyspark.sql.types import StructType

    from eddy.connect.reader.json_columns import pushable_fields
    from eddy.connect.runtime.spec import ParseJson

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


def stream(spark: SparkSession, pipeline: Pipeline, value_json: str | None = None
           ) -> DataFrame:
    """The streaming DataFrame of the pipeline's source, as the source gives it (the
    runtime adds the internal columns with the transforms, runtime.transform: on the
    stream itself or on each micro-batch). `value_json` is value_json_pushdown's option
    (the reader pre-parses values)."""
    src = pipeline.source
    if isinstance(src, EddySource):
        opts = eddy_options(src)
        if value_json is not None:
            from eddy.connect.reader.json_columns import OPTION

            opts[OPTION] = value_json
        df = spark.readStream.format("eddy").options(**opts).load()
    elif isinstance(src, DatagenSource):
        df = spark.readStream.format("eddy-datagen").options(**datagen_options(src)).load()
    else:
        from eddy.connect.sources.files import files_stream

        df = files_stream(spark, src)
    return df


def sample(spark: SparkSession, pipeline: Pipeline, rows: int) -> DataFrame:
    """Up to `rows` records of the source as a batch DataFrame (for schema inference
    and `eddy connect discover`), internal columns added."""
    src = pipeline.source
    if isinstance(src, EddySource):
        opts = eddy_options(src)
        opts.pop("maxOffsetsPerTrigger", None)
        df = spark.read.format("eddy").options(**opts).load().limit(rows)
    elif isinstance(src, DatagenSource):
        opts = datagen_options(src)
        opts["count"] = str(min(rows, src.count if src.count is not None else rows))
        df = spark.read.format("eddy-datagen").options(**opts).load()
    else:
        df = _files_sample(spark, src, rows)
    return with_internal_columns(df, pipeline)


def _files_sample(spark: SparkSession, src: FilesSource, rows: int) -> DataFrame:
    from eddy.connect.sources.files import reader_options

    reader = spark.read.format(src.format).options(**reader_options(src))
    if src.schema_:
        reader = reader.schema(src.schema_)
    return reader.load(src.path).limit(rows)
