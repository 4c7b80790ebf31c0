"""The `files` source: a directory of json/csv/parquet files as a streaming DataFrame.

Spark's file stream source does the work: each micro-batch takes the files that
appeared since the last one (at most `max_files_per_batch`), and the checkpoint
remembers which files were read, so a restart reads only new files. The schema
is the spec's DDL or, when absent, inferred by a batch read of the files already
there. Each row's POSITION_COLUMN is its file's path (Spark's hidden
`_metadata.file_path`), with `#<row index>` for parquet (`_metadata.row_index`).
CSV files are read with `header` and `inferSchema` on unless the options say
otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from eddy.connect import probes
from eddy.connect.batch import POSITION_COLUMN
from eddy.connect.connectors import ConnectorSpec, SourceFactory, register

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from eddy.connect.runtime.spec import Pipeline

#: reader options a format gets unless the spec's `options` set them
FORMAT_DEFAULTS: dict[str, dict[str, str]] = {
    "csv": {"header": "true", "inferSchema": "true"},
}
#: sub-directory levels searched for a first data file
MAX_DEPTH = 8


class FilesSource(ConnectorSpec):
    """A directory of json/csv/parquet files; new files are picked up as they appear."""

    type: Literal["files"]
    format: Literal["json", "csv", "parquet"]
    path: str = Field(description="the directory to watch")
    schema_: str | None = Field(
        None, alias="schema", description="Spark DDL schema (default: inferred from the files)"
    )
    max_files_per_batch: int | None = Field(None, ge=1)
    options: dict[str, str] = Field(default_factory=dict, description="Spark reader options")


def reader_options(spec: FilesSource) -> dict[str, str]:
    """The spec's options over the format's defaults (option names compare case-blind)."""
    given = {k.lower() for k in spec.options}
    options = {k: v for k, v in FORMAT_DEFAULTS.get(spec.format, {}).items()
               if k.lower() not in given}
    options.update(spec.options)
    return options


def _local_dir(path: str) -> str | None:
    """The local directory `path` names, or None for a remote URI (s3a://, hdfs://)."""
    if path.startswith("file://"):
        return path[len("file://"):]
    if path.startswith("file:"):
        return path[len("file:"):]
    if "://" in path:
        return None
    return path


def _has_data_files(directory: str) -> bool:
    """True if `directory` (or a sub-directory, e.g. key=value/) holds a file Spark reads:
    names starting with `_` or `.` are skipped, as Spark does."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        if any(not f.startswith(("_", ".")) for f in files):
            return True
        if root.count(os.sep) - directory.count(os.sep) >= MAX_DEPTH:
            dirs[:] = []
    return False


def _no_files_error(spec: FilesSource, why: str) -> ValueError:
    return ValueError(
        f"source.schema: not given, and {why} in source.path ({spec.path!r}) to infer it "
        "from; give source.schema (a Spark DDL schema such as 'id LONG, name STRING') "
        "or add files first"
    )


def discover_files(spark: SparkSession, spec: FilesSource) -> StructType:
    """The schema the source produces (without POSITION_COLUMN): the spec's DDL, or
    inferred from the files in the directory now. ValueError names the field at fault."""
    from pyspark.errors import AnalysisException
    from pyspark.sql.types import DataType, StructType

    local = _local_dir(spec.path)
    if local is not None and not os.path.isdir(local):
        if os.path.exists(local):
            raise ValueError(f"source.path: {spec.path!r} is not a directory")
        raise ValueError(f"source.path: the directory {spec.path!r} does not exist")
    if spec.schema_ is not None:
        try:
            parsed = DataType.fromDDL(spec.schema_)
        except Exception as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), "")
            raise ValueError(
                f"source.schema: not a valid Spark DDL schema {spec.schema_!r}: {first}"
            ) from None
        if not isinstance(parsed, StructType) or not parsed.fields:
            raise ValueError(
                f"source.schema: expected columns such as 'id LONG, name STRING', "
                f"got {spec.schema_!r}"
            )
        return parsed
    if local is not None and not _has_data_files(local):
        raise _no_files_error(spec, "there are no files")
    try:
        schema = (spark.read.format(spec.format).options(**reader_options(spec))
                  .load(spec.path).schema)
    except AnalysisException as exc:
        text = str(exc)
        if "UNABLE_TO_INFER_SCHEMA" in text or "PATH_NOT_FOUND" in text:
            raise _no_files_error(spec, "Spark found no readable files") from None
        raise
    if not schema.fields:
        raise _no_files_error(spec, "the files hold no columns")
    return schema


def files_stream(spark: SparkSession, spec: FilesSource) -> DataFrame:
    """A streaming DataFrame over the directory, with POSITION_COLUMN (the file path)."""
    from pyspark.sql import functions as F

    schema = discover_files(spark, spec)
    reader: Any = (spark.readStream.format(spec.format).schema(schema)
                   .options(**reader_options(spec)))
    if spec.max_files_per_batch is not None:
        reader = reader.option("maxFilesPerTrigger", str(spec.max_files_per_batch))
    df: DataFrame = reader.load(spec.path)
    position = F.col("_metadata.file_path")
    if spec.format == "parquet":
        position = F.concat(position, F.lit("#"), F.col("_metadata.row_index").cast("string"))
    return df.withColumn(POSITION_COLUMN, position)


class FilesSourceFactory(SourceFactory[FilesSource]):
    spec = FilesSource
    rank = 2

    def stream(self, spark: SparkSession, spec: FilesSource, pipeline: Pipeline,
               json_schemas: Mapping[int, str]) -> DataFrame:
        return files_stream(spark, spec)

    def sample(self, spark: SparkSession, spec: FilesSource, rows: int) -> DataFrame:
        reader = spark.read.format(spec.format).options(**reader_options(spec))
        if spec.schema_:
            reader = reader.schema(spec.schema_)
        return reader.load(spec.path).limit(rows)

    def check(self, spec: FilesSource, pipeline: Pipeline, what: str) -> probes.Check:
        return probes.readable_dir(spec.path, what)


register(FilesSourceFactory())
