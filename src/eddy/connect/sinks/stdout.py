"""Stdout sink: each micro-batch's rows printed on the driver, as JSON lines or a table.

`json` prints one JSON object per row per line (binary as UTF-8 text when it
decodes, else base64; timestamps ISO 8601 in UTC), ready for `jq`. `table` prints a
rich table per batch, at most TABLE_ROWS rows unless `limit` says otherwise; rows
beyond it are counted. `limit` caps the rows printed per batch. Rows reach the
driver partition by partition (toLocalIterator), or through `limit`, so a big batch
does not have to fit in the driver's memory. Delivery is at-least-once: a replayed
batch is printed again.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, TextIO

from pydantic import Field

from eddy.connect import probes
from eddy.connect.batch import BatchInfo
from eddy.connect.connectors import ConnectorSpec, SinkFactory, register
from eddy.connect.datasources.json_rows import dumps, row_converter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from eddy.connect.runtime.spec import Pipeline

#: rows a table shows when the sink has no `limit` (a table is built in memory)
TABLE_ROWS = 1000


class StdoutSink(ConnectorSpec):
    """Print each batch: one JSON object per line, or a table."""

    type: Literal["stdout"]
    format: Literal["json", "table"] = "json"
    limit: int | None = Field(None, ge=1, description="rows shown per batch (default: all)")


class StdoutBatchSink:
    """Prints each micro-batch to `stream` (default: sys.stdout at write time)."""

    single_action = False  # a limit, or one job per partition (toLocalIterator)

    def __init__(self, spec: StdoutSink, name: str = "stdout",
                 stream: TextIO | None = None) -> None:
        self.spec = spec
        self.name = name
        self.stream = stream

    def _rows(self, df: DataFrame) -> Iterable[Any]:
        if self.spec.limit is not None:
            return df.limit(self.spec.limit).collect()
        return df.toLocalIterator()

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        stream = self.stream if self.stream is not None else sys.stdout
        convert = row_converter(df.schema)
        if self.spec.format == "json":
            for row in self._rows(df):
                stream.write(dumps(convert(row)) + "\n")
            stream.flush()
            return
        self._table(df, batch, stream, convert)

    def _table(self, df: DataFrame, batch: BatchInfo, stream: TextIO, convert: Any) -> None:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        shown_max = self.spec.limit if self.spec.limit is not None else TABLE_ROWS
        table = Table()
        for column in df.columns:
            table.add_column(column, overflow="fold")
        shown = more = 0
        for row in self._rows(df):
            if shown >= shown_max:
                more += 1
                continue
            cells = []
            for value in convert(row).values():
                if value is None:
                    cells.append(Text("null", style="dim"))
                else:
                    cells.append(Text(value if isinstance(value, str) else dumps(value)))
            table.add_row(*cells)
            shown += 1
        console = Console(file=stream, highlight=False)
        console.print(Text(f"{self.name} · batch {batch.batch_id}", style="bold"))
        console.print(table)
        if more or not shown:
            console.print(f"{shown} of {shown + more} rows shown" if more else "no rows")
        stream.flush()


class StdoutSinkFactory(SinkFactory[StdoutSink]):
    spec = StdoutSink
    rank = 1

    def build(self, spec: StdoutSink, name: str, pipeline: Pipeline) -> StdoutBatchSink:
        return StdoutBatchSink(spec, name)

    def check(self, spec: StdoutSink, pipeline: Pipeline, what: str) -> probes.Check:
        return probes.Check(what, True, "prints to standard output")


register(StdoutSinkFactory())
