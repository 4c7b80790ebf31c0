"""A pipeline's source as a Spark DataFrame, streaming or as a small batch sample (each
made by the source's connector), and the internal columns the runtime tracks rows by."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from eddy.connect import connectors
from eddy.connect.batch import (
    ERROR_COLUMN,
    POSITION_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    SOURCE_COLUMNS,
)
from eddy.connect.formats.value_decoding import DECODE_ERROR_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from eddy.connect.runtime.spec import Pipeline


def with_internal_columns(df: DataFrame, pipeline: Pipeline) -> DataFrame:
    """Add the columns the runtime tracks rows by before the transforms: where each
    record came from and its raw key and value (as the source connector says), the
    error (null). After the transforms, finish_internal_columns turns them into what
    dead letters carry."""
    from pyspark.sql import functions as F

    src = pipeline.source
    added: dict[str, Any] = connectors.source(src).internal_columns(df, src)
    if POSITION_COLUMN not in df.columns:  # the files source sets it (the file's path)
        added[POSITION_COLUMN] = F.lit(None).cast("string")
    if DECODE_ERROR_COLUMN in df.columns:  # undecodable records: dead letters
        added[ERROR_COLUMN] = F.concat(F.lit("source: "), F.col(DECODE_ERROR_COLUMN))
        return df.withColumns(added).drop(DECODE_ERROR_COLUMN)
    added[ERROR_COLUMN] = F.lit(None).cast("string")
    return df.withColumns(added)


def finish_internal_columns(df: DataFrame, pipeline: Pipeline) -> DataFrame:
    """After the transforms: the position (`topic/partition@offset`, `datagen@id` or a
    file path: the source connector's) and the raw key and value only on rows that
    failed (null elsewhere, so good rows carry nothing extra), the source columns
    dropped."""
    from pyspark.sql import functions as F

    failed = F.col(ERROR_COLUMN).isNotNull()
    columns = set(df.columns)
    position = connectors.source(pipeline.source).position(columns)
    if position is None:
        position = F.col(POSITION_COLUMN)
    finished = {POSITION_COLUMN: F.when(failed, position)}
    for raw in (RAW_KEY_COLUMN, RAW_VALUE_COLUMN):
        if raw in columns:
            finished[raw] = F.when(failed, F.col(raw))
    return df.withColumns(finished).drop(*[c for c in SOURCE_COLUMNS if c in columns])


def stream(spark: SparkSession, pipeline: Pipeline,
           json_schemas: Mapping[int, str] | None = None) -> DataFrame:
    """The streaming DataFrame of the pipeline's source, as the source gives it (the
    runtime adds the internal columns with the transforms, runner.transform: on the
    stream itself or on each micro-batch). `json_schemas` are the parse_json schemas
    (given or inferred), which a source may use (the eddy reader pre-parses values)."""
    src = pipeline.source
    return connectors.source(src).stream(spark, src, pipeline, json_schemas or {})


def sample(spark: SparkSession, pipeline: Pipeline, rows: int) -> DataFrame:
    """Up to `rows` records of the source as a batch DataFrame (for schema inference
    and `eddy connect discover`), internal columns added."""
    src = pipeline.source
    df = connectors.source(src).sample(spark, src, rows)
    return with_internal_columns(df, pipeline)
