"""The dead-letter topic: records a pipeline could not process or deliver.

A dead letter keeps the original key and value (for a Kafka source) or the row as
JSON (other sources), and says what went wrong in its headers:

- `eddy.error`: the reason, e.g. "parse_json: malformed JSON or a field not matching..."
- `eddy.source`: where the record came from, e.g. `orders/0@42` (topic/partition@offset)
- `eddy.pipeline`: the pipeline's name
- `eddy.stage`: `transform` or the sink that gave up, e.g. `sink[1]:webhook`
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from eddy.connect.batch import (
    ERROR_COLUMN,
    INTERNAL_COLUMNS,
    POSITION_COLUMN,
    RAW_KEY_COLUMN,
    RAW_VALUE_COLUMN,
    BatchInfo,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

HEADER_ERROR = "eddy.error"
HEADER_SOURCE = "eddy.source"
HEADER_PIPELINE = "eddy.pipeline"
HEADER_STAGE = "eddy.stage"

Record = tuple[bytes | None, bytes | None, list[tuple[str, str | bytes | None]]]


def headers(error: str, position: str | None, pipeline: str, stage: str
            ) -> list[tuple[str, str | bytes | None]]:
    out: list[tuple[str, str | bytes | None]] = [
        (HEADER_ERROR, error.encode()),
        (HEADER_PIPELINE, pipeline.encode()),
        (HEADER_STAGE, stage.encode()),
    ]
    if position:
        out.insert(1, (HEADER_SOURCE, position.encode()))
    return out


def produce(bootstrap: str, topic: str, records: Iterable[Record],
            options: dict[str, Any] | None = None, timeout_s: float = 60.0) -> int:
    """Produce dead letters with acks=all and idempotence; raise if any is not delivered."""
    from confluent_kafka import KafkaException, Producer

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "log_level": 3,
        "client.id": "eddy-connect-dead-letters",
    }
    conf.update(options or {})
    producer = Producer(conf)
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    count = 0
    for key, value, hdrs in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, headers=hdrs,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
    remaining = producer.flush(timeout_s)
    if remaining or failures:
        reason = failures[0] if failures else f"{remaining} not delivered in {timeout_s}s"
        raise KafkaException(f"dead-letter topic {topic!r} at {bootstrap}: {reason}")
    return count


class KafkaDeadLetters:
    """The runtime's dead-letter writer: turns bad rows into records on a topic through
    `format("eddy")`, so the write runs on the executors like any other sink."""

    def __init__(self, bootstrap: str, topic: str, pipeline: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.pipeline = pipeline

    def records_frame(self, df: DataFrame, error: str | None, stage: str) -> DataFrame:
        """key, value, headers columns for `df`'s rows (value: the original value if the
        row has one, else the row as JSON)."""
        from pyspark.sql import functions as F

        columns = set(df.columns)
        payload_cols = [c for c in df.columns if c not in INTERNAL_COLUMNS]
        if "value" in columns and df.schema["value"].dataType.typeName() in (
                "binary", "string"):
            value = F.col("value").cast("binary")
        elif "value" in columns:  # a decoded (struct) value
            value = F.to_json(F.col("value")).cast("binary")
        else:
            value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in payload_cols])).cast("binary")
        if RAW_VALUE_COLUMN in columns:
            # the source record's own bytes, null included; after a `sql` step the raw
            # columns (and the position) are gone and the row's JSON stands in
            known = (F.col(POSITION_COLUMN).isNotNull() if POSITION_COLUMN in columns
                     else F.lit(True))
            value = F.when(known, F.col(RAW_VALUE_COLUMN)).otherwise(value)
        key = (F.col("key").cast("binary") if "key" in columns and df.schema["key"].dataType
               .typeName() in ("binary", "string") else F.lit(None).cast("binary"))
        if RAW_KEY_COLUMN in columns:
            key = F.col(RAW_KEY_COLUMN)
        reason = F.lit(error) if error is not None else F.coalesce(
            F.col(ERROR_COLUMN), F.lit("unknown error")
        )
        position = F.col(POSITION_COLUMN) if POSITION_COLUMN in columns else F.lit(None)

        def header(name: str, text: Any) -> Any:
            return F.struct(F.lit(name).alias("key"), text.cast("binary").alias("value"))

        hdrs = F.filter(
            F.array(
                header(HEADER_ERROR, reason),
                header(HEADER_SOURCE, position),
                header(HEADER_PIPELINE, F.lit(self.pipeline)),
                header(HEADER_STAGE, F.lit(stage)),
            ),
            lambda h: h["value"].isNotNull(),
        )
        return df.select(key.alias("key"), value.alias("value"), hdrs.alias("headers"))

    def send(self, df: DataFrame, error: str | None, batch: BatchInfo,
             stage: str = "transform") -> int:
        frame = self.records_frame(df, error, stage)
        (
            frame.write.format("eddy")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", self.topic)
            .mode("append")
            .save()
        )
        return -1
