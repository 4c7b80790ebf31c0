"""A pipeline's sinks as BatchSinks (each built by its connector), and the frame each gets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eddy.connect import connectors
from eddy.connect.batch import TRACE_COLUMN, BatchSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from eddy.connect.runtime.spec import Pipeline


def for_sink(sink: object, df: DataFrame) -> DataFrame:
    """The frame a sink writes: the trace column only for a sink that `takes_trace` (the
    eddy sink turns it into the records' traceparent header: eddy.connect.batch.TRACE_COLUMN)."""
    if getattr(sink, "takes_trace", False) or TRACE_COLUMN not in df.columns:
        return df
    return df.drop(TRACE_COLUMN)


def build_sinks(pipeline: Pipeline) -> list[BatchSink]:
    return [connectors.sink(spec).build(spec, f"sinks[{i}]:{spec.type}", pipeline)
            for i, spec in enumerate(pipeline.sinks)]
