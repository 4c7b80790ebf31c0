"""Writing Arrow batches of rows to Kafka topics: the executors' side of `format("eddy")`'s
batch and streaming writers (eddy.connect.reader.kafka_source).

Rows with `value` (and optionally `key`, `topic`, `partition`, `headers`) are produced
with librdkafka's murmur2 partitioner (Java-compatible key hashing); the `topic` option
overrides a `topic` column. Delivery is at-least-once: a batch fails if any record is
not acknowledged. Rows the options' encodings cannot encode go to the dead-letter topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from eddy.connect.formats.value_encoders import DeadLetters, encode_batch
from eddy.connect.options import OptionError
from eddy.connect.reader.kafka_options import KafkaOptions


@dataclass
class Produced(WriterCommitMessage):
    records: int


def write_batches(options: KafkaOptions, batches: Iterator[Any]) -> Produced:
    """Produce every row of the arrow batches; raise unless all are acknowledged."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(options.client_config(**{
        "client.id": "eddy-connect-writer",
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.kbytes": 256 << 10,
        "enable.idempotence": True,
        "acks": "all",
    }))
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(failures) < 10:
            failures.append(str(err))

    count = 0
    produce = producer.produce
    dead = (DeadLetters(options.dead_letter, options.pipeline, options.stage)
            if options.encodings else None)
    for batch in batches:
        names = batch.schema.names
        if "value" not in names:
            raise OptionError("writing to eddy needs a `value` column")
        n = batch.num_rows
        encoded = encode_batch(batch, options.encodings) if options.encodings else None
        values = (encoded.columns["value"] if encoded and "value" in encoded.columns
                  else _bytes_column(batch.column(names.index("value"))))
        keys = (encoded.columns["key"] if encoded and "key" in encoded.columns
                else _bytes_column(batch.column(names.index("key"))) if "key" in names
                else [None] * n)
        if options.topic:
            topics = [options.topic] * n
        elif "topic" in names:
            topics = batch.column(names.index("topic")).to_pylist()
        else:
            raise OptionError("writing to eddy needs the `topic` option or a `topic` column")
        partitions = (batch.column(names.index("partition")).to_pylist()
                      if "partition" in names else [None] * n)
        headers = (batch.column(names.index("headers")).to_pylist()
                   if "headers" in names else [None] * n)
        for i in range(n):
            if encoded is not None and encoded.errors[i] is not None:
                assert dead is not None
                dead.add(batch, encoded, i)
                continue
            topic = topics[i]
            if not topic:
                raise OptionError(f"row {count + i}: the topic is null or empty")
            kwargs: dict[str, Any] = {"on_delivery": on_delivery}
            if partitions[i] is not None:
                kwargs["partition"] = partitions[i]
            if headers[i]:
                kwargs["headers"] = [(h["key"], h["value"]) for h in headers[i] or ()]
            for _attempt in range(10_000):
                try:
                    produce(topic, values[i], keys[i], **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
        count += n
        producer.poll(0)
    remaining = producer.flush(120)
    if failures or remaining:
        raise KafkaException(
            f"{len(failures) or remaining} record(s) not delivered: "
            f"{failures[0] if failures else 'timed out'}"
        )
    if dead is not None:
        dead.flush()
        count -= dead.count
    return Produced(count)


def _bytes_column(column: Any) -> list[bytes | None]:
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()  # type: ignore[no-any-return]
