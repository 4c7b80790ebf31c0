"""Spark's Kafka row schema in Arrow, and RecordBatches of it built from what a reader got.

The columns are those of Spark's Kafka source: key, value (binary), topic, partition,
offset, timestamp (microseconds, UTC), timestampType (0 CreateTime, 1 LogAppendTime)
and, when asked for, headers (a list of key/value structs). Batches are built either
from librdkafka's Message objects or over the buffers eddy.connect.reader.fetcher's record
decoder filled (no copy).
"""

from __future__ import annotations

from typing import Any


def arrow_batch(msgs: list[Any], include_headers: bool, schema: Any) -> Any:
    """Columns straight from librdkafka's Message objects: one C-level map per column,
    arithmetic in pyarrow (this is the per-record hot path of every read)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka import Message

    stamps = list(map(Message.timestamp, msgs))
    ts_ms = pa.array([t[1] for t in stamps], pa.int64())
    types = [t[0] for t in stamps]
    columns: list[Any] = [
        pa.array(list(map(Message.key, msgs)), pa.binary()),
        pa.array(list(map(Message.value, msgs)), pa.binary()),
        pa.array(list(map(Message.topic, msgs)), pa.string()),
        pa.array(list(map(Message.partition, msgs)), pa.int32()),
        pa.array(list(map(Message.offset, msgs)), pa.int64()),
        pc.multiply(ts_ms, 1000).cast(pa.timestamp("us", tz="UTC")),
        # librdkafka: 1 CreateTime, 2 LogAppendTime; Spark's Kafka source: 0 and 1
        pc.max_element_wise(pc.subtract(pa.array(types, pa.int32()), 1), 0),
    ]
    if include_headers:
        offsets = [0]
        keys: list[str] = []
        values: list[Any] = []
        header_lists: list[Any] = list(map(Message.headers, msgs))
        for hl in header_lists:
            if hl:
                for k, v in hl:
                    keys.append(k)
                    values.append(v)
            offsets.append(len(keys))
        struct = pa.StructArray.from_arrays(
            [pa.array(keys, pa.string()), pa.array(values, pa.binary())], ["key", "value"]
        )
        columns.append(pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), struct))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def arrow_schema(include_headers: bool) -> Any:
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()),
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct(
            [pa.field("key", pa.string()), pa.field("value", pa.binary())]))))
    return pa.schema(fields)


def arrow_from_columns(cols: dict[str, Any], topic: str, partition: int, schema: Any,
                        include_headers: bool) -> Any:
    """A RecordBatch over record_columns' buffers (no copy): Spark's Kafka row schema."""
    import pyarrow as pa

    n = cols["rows"]
    buf = pa.py_buffer

    def binary(parts: tuple[Any, ...], kind: Any) -> Any:
        validity, offsets, data, nulls = parts
        return pa.Array.from_buffers(
            kind, len(offsets) // 4 - 1,
            [buf(validity) if validity is not None else None, buf(offsets), buf(data)],
            null_count=nulls)

    columns: list[Any] = [
        binary(cols["keys"], pa.binary()),
        binary(cols["values"], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, buf(cols["offsets"])]),
        pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n,
                              [None, buf(cols["timestamps"])]),
        pa.Array.from_buffers(pa.int32(), n, [None, buf(cols["timestamp_types"])]),
    ]
    if include_headers:
        struct = pa.StructArray.from_arrays(
            [binary(cols["header_keys"], pa.string()),
             binary(cols["header_values"], pa.binary())], ["key", "value"])
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, buf(cols["header_offsets"])])
        columns.append(pa.ListArray.from_arrays(offsets, struct))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
