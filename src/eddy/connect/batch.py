"""What every sink is told about the micro-batch it writes, and how it hands over bad rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: column a transform sets to say why a row failed (NULL on a good row)
ERROR_COLUMN = "_eddy_error"
#: column naming the source position of a row, e.g. "orders/0@42" (topic/partition@offset)
POSITION_COLUMN = "_eddy_position"
#: column a `route` transform sets to the target topic
TOPIC_COLUMN = "_eddy_topic"
#: the source record's own key and value, kept so a dead letter carries the original bytes
RAW_KEY_COLUMN = "_eddy_raw_key"
RAW_VALUE_COLUMN = "_eddy_raw_value"
#: where a record came from, carried through the transforms as it is; POSITION_COLUMN is
#: made of them only for rows that fail (formatting it for every row is not free)
SOURCE_TOPIC_COLUMN = "_eddy_src_topic"
SOURCE_PARTITION_COLUMN = "_eddy_src_partition"
SOURCE_OFFSET_COLUMN = "_eddy_src_offset"
SOURCE_COLUMNS = (SOURCE_TOPIC_COLUMN, SOURCE_PARTITION_COLUMN, SOURCE_OFFSET_COLUMN)
#: the source record's W3C `traceparent` header, if it had one: the eddy sink writes it on
#: the records it produces from the row, so a pipeline continues its records' traces
TRACE_COLUMN = "_eddy_traceparent"
INTERNAL_COLUMNS = (ERROR_COLUMN, POSITION_COLUMN, TOPIC_COLUMN, RAW_KEY_COLUMN, RAW_VALUE_COLUMN,
                    TRACE_COLUMN, *SOURCE_COLUMNS)


@dataclass(frozen=True)
class BatchInfo:
    """One micro-batch: Spark's batch id and the pipeline run it belongs to.

    `run_id` names one checkpoint's life: Spark restarts batch ids at 0 when a
    checkpoint is deleted, so (run_id, batch_id) is what a sink may deduplicate on.
    `rows`, when the runtime knows how, tells how many rows the frame a sink got had,
    once the sink's action has run (None when it has not); a sink that needs the count
    then has no need to count them itself.
    """

    batch_id: int
    run_id: str
    rows: Callable[[], int | None] | None = field(default=None, compare=False)


class DeadLetters(Protocol):
    """Takes rows that could not be delivered; each row keeps its columns, and `error`
    says why. The rows end up in the dead-letter topic (eddy.connect.deadletter)."""

    def send(self, df: DataFrame, error: str | None, batch: BatchInfo) -> int:
        """Write `df`'s rows (with ERROR_COLUMN if `error` is None); returns rows sent."""
        ...


class BatchSink(Protocol):
    """A sink the runtime calls once per micro-batch, from foreachBatch on the driver."""

    name: str
    #: write() reads the frame with one Spark action that visits every row, so the
    #: runtime can count bad rows on the way instead of caching the batch
    single_action: bool

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        """Write the batch's good rows (internal columns already dropped, except
        TOPIC_COLUMN for sinks that route). Raise to fail the batch: Spark retries it."""
        ...


def observed(observation: Any) -> dict[str, Any] | None:
    """An Observation's metrics if the action it watched has run, else None (where
    `Observation.get` would wait forever)."""
    jo = getattr(observation, "_jo", None)
    if jo is None or not jo.future().isCompleted():
        return None
    return dict(observation.get)
