"""The `datagen` source: generated rows for a Spark DDL schema, at a rate, from a seed,
through `format("eddy-datagen")` (eddy.connect.datasources.datagen)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from eddy.connect import probes
from eddy.connect.batch import SOURCE_OFFSET_COLUMN
from eddy.connect.connectors import ConnectorSpec, SourceFactory, register

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from eddy.connect.runtime.spec import Pipeline


class DatagenSource(ConnectorSpec):
    """Generated rows: a Spark DDL schema, a rate, a seed; the same seed gives the same rows."""

    type: Literal["datagen"]
    schema_: str = Field(
        "id LONG, name STRING, amount DOUBLE, ts TIMESTAMP", alias="schema",
        description="Spark DDL schema of the generated rows",
    )
    rate: int = Field(1000, ge=1, description="rows per second")
    count: int | None = Field(None, ge=0, description="stop after this many rows (default: none)")
    seed: int = Field(0, description="random seed: the same seed gives the same rows")
    partitions: int = Field(2, ge=1, le=1024, description="Spark input partitions per batch")
    max_rows_per_batch: int | None = Field(None, ge=1, description="at most this many rows "
                                           "per micro-batch")


def datagen_options(src: DatagenSource) -> dict[str, str]:
    opts = {"schema": src.schema_, "rate": str(src.rate), "seed": str(src.seed),
            "partitions": str(src.partitions)}
    if src.count is not None:
        opts["count"] = str(src.count)
    if src.max_rows_per_batch is not None:
        opts["maxRowsPerBatch"] = str(src.max_rows_per_batch)
    return opts


class DatagenSourceFactory(SourceFactory[DatagenSource]):
    spec = DatagenSource
    rank = 1

    def data_sources(self) -> tuple[type[Any], ...]:
        from eddy.connect.datasources.datagen import DatagenDataSource

        return (DatagenDataSource,)

    def stream(self, spark: SparkSession, spec: DatagenSource, pipeline: Pipeline,
               json_schemas: Mapping[int, str]) -> DataFrame:
        return spark.readStream.format("eddy-datagen").options(**datagen_options(spec)).load()

    def sample(self, spark: SparkSession, spec: DatagenSource, rows: int) -> DataFrame:
        opts = datagen_options(spec)
        opts["count"] = str(min(rows, spec.count if spec.count is not None else rows))
        return spark.read.format("eddy-datagen").options(**opts).load()

    def internal_columns(self, df: DataFrame, spec: DatagenSource) -> dict[str, Column]:
        """The row index (column `id`, when the schema has one) as the source offset."""
        from pyspark.sql import functions as F

        if "id" not in df.columns:
            return {}
        return {SOURCE_OFFSET_COLUMN: F.col("id").cast("bigint")}

    def position(self, columns: Collection[str]) -> Column | None:
        """`datagen@<id>`."""
        from pyspark.sql import functions as F

        if SOURCE_OFFSET_COLUMN not in columns:
            return None
        return F.concat(F.lit("datagen@"), F.col(SOURCE_OFFSET_COLUMN).cast("string"))

    def check(self, spec: DatagenSource, pipeline: Pipeline, what: str) -> probes.Check:
        return probes.Check(what, True, "generated locally")


register(DatagenSourceFactory())
