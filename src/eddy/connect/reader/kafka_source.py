"""`format("eddy")`: Kafka topics as a Spark data source, for batch and streaming, both ways.

Reading: one Spark input partition per topic partition; a task consumes its
offset range through a Kafka client (librdkafka), so it works against any
Kafka-compatible broker, and yields pyarrow RecordBatches with Spark's Kafka row
schema (built by eddy.connect.reader.kafka_rows). Streaming offsets are
`{"topic/partition": next_offset}`; partitions that appear later (new topics matching a
pattern, added partitions) start at earliest.

Writing (the produce loop: eddy.connect.reader.kafka_writer): rows with `value` (and optionally
`key`, `topic`, `partition`, `headers`) are produced with librdkafka's murmur2
partitioner (Java-compatible key hashing); the `topic` option overrides a `topic`
column, as in Spark's Kafka sink. Delivery is at-least-once: a task fails if any record
is not acknowledged. Keys and values may be encoded through a schema registry
(`value.format`...: see eddy.connect.formats.value_encoding); rows that cannot be encoded go to
the dead-letter topic (`dead_letter_bootstrap`, `dead_letter_topic`), or fail the task
without one.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from eddy.connect.formats.value_encoding import prepare_all
from eddy.connect.options import OptionError
from eddy.connect.reader.kafka_options import (
    Cluster,
    KafkaOptions,
    key_of,
    split_key,
)
from eddy.connect.reader.kafka_rows import arrow_batch, arrow_from_columns, arrow_schema
from eddy.connect.reader.kafka_writer import Produced as Produced  # re-exported
from eddy.connect.reader.kafka_writer import write_batches as write_batches  # re-exported

log = logging.getLogger(__name__)

#: records per pyarrow batch handed to Spark
ARROW_BATCH = 50_000
#: a task gives up when a partition yields nothing new for this long
STALL_TIMEOUT_S = 60.0
#: the names the row builders had here (tests/connect/test_fast_reader.py, bench)
_arrow_schema = arrow_schema
_arrow_from_columns = arrow_from_columns


class TopicRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(key_of(topic, partition))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"TopicRange({self.topic}/{self.partition} [{self.start}, {self.end}))"


def plan_ranges(start: dict[str, int], end: dict[str, int]) -> list[TopicRange]:
    """One range per partition with something to read; new partitions start at 0
    (the consumer resets to the log start offset if 0 is gone)."""
    ranges: list[TopicRange] = []
    for key in sorted(end):
        topic, partition = split_key(key)
        lo, hi = int(start.get(key, 0)), int(end[key])
        if hi > lo:
            ranges.append(TopicRange(topic, partition, lo, hi))
    return ranges


def limit_offsets(start: dict[str, int], latest: dict[str, int], max_rows: int
                  ) -> dict[str, int]:
    """Split a max-records budget over partitions in proportion to what each has
    waiting (Spark's maxOffsetsPerTrigger). The shares add up to the budget exactly
    (the rounding remainder goes to the largest fractions), so a backlog of k budgets
    takes k batches, not k plus one for the crumbs; every partition with data gets
    at least 1."""
    lag = {k: max(0, v - int(start.get(k, 0))) for k, v in latest.items()}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(latest)
    shares = {k: waiting * max_rows // total for k, waiting in lag.items()}
    left = max_rows - sum(shares.values())
    for key in sorted(lag, key=lambda k: (-(lag[k] * max_rows % total), k))[:left]:
        shares[key] += 1
    return {key: (int(start.get(key, 0)) + min(waiting, max(1, shares[key])) if waiting
                  else latest[key]) for key, waiting in lag.items()}


# ---- reading a range (runs on the executors) ----------------------------------------------


def read_range(options: KafkaOptions, rng: TopicRange,
               clock: Any = time.monotonic) -> Iterator[Any]:
    """Read [start, end) of one partition as pyarrow RecordBatches: the fast reader
    (eddy.connect.reader.fetcher) unless the options ask for librdkafka or it cannot serve
    the range, in which case librdkafka reads what is left."""
    if options.decodings:
        from eddy.connect.formats.value_decoding import decode_batch, output_schema

        # schema ids may travel in headers: read them, whether or not they are output
        batches = _read_range(replace(options, include_headers=True), rng, clock)
        decoded = output_schema(arrow_schema(options.include_headers), options.decodings)
        for batch in batches:
            yield decode_batch(batch, options.decodings, decoded)
        return
    batches = _read_range(options, rng, clock)
    if options.parse_value_schema is None:
        yield from batches
        return
    import pyarrow as pa

    from eddy.connect.reader.json_columns import PARSED_COLUMN, ValueParser

    parser = ValueParser(options.parse_value_schema)
    schema = arrow_schema(options.include_headers).append(pa.field(PARSED_COLUMN, parser.type))
    for batch in batches:
        yield batch.append_column(schema.field(len(batch.schema)),
                                  parser.parse(batch.column("value")))


def _read_range(options: KafkaOptions, rng: TopicRange, clock: Any) -> Iterator[Any]:
    from eddy.connect.reader import fetcher

    start = rng.start
    if options.reader != "librdkafka":
        schema = arrow_schema(options.include_headers)
        reached = [rng.start]
        try:
            config = fetcher.FetchConfig.from_client(options.bootstrap, options.client)
            yield from fetcher.read_partition(
                config, rng.topic, rng.partition, rng.start, rng.end,
                options.include_headers, ARROW_BATCH,
                lambda cols: arrow_from_columns(cols, rng.topic, rng.partition, schema,
                                                 options.include_headers),
                STALL_TIMEOUT_S, clock, reached.append)
            return
        except fetcher.Unsupported as exc:
            if options.reader == "native":
                raise OptionError(f"option reader=native: {exc}") from None
            log.info("reading %s/%d through librdkafka: %s", rng.topic, rng.partition, exc)
            start = reached[-1]
        except fetcher.FetchFailed as exc:
            raise RuntimeError(str(exc)) from None
    yield from read_range_librdkafka(options, TopicRange(rng.topic, rng.partition, start,
                                                         rng.end), clock)


def read_range_librdkafka(options: KafkaOptions, rng: TopicRange,
                          clock: Any = time.monotonic) -> Iterator[Any]:
    """Consume [start, end) of one partition through librdkafka and yield pyarrow
    RecordBatches."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

    consumer = Consumer(options.client_config(**{
        "group.id": "eddy-connect-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 16 << 20,
        "queued.max.messages.kbytes": 256 << 10,
        "queued.min.messages": 1_000_000,
        "enable.partition.eof": True,
    }))
    schema = arrow_schema(options.include_headers)
    # tens of thousands of Message objects per batch and no reference cycles: the cyclic
    # GC would only rescan them over and over (measured: half the reader's time)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = rng.start if rng.start > 0 else OFFSET_BEGINNING
        consumer.assign([TopicPartition(rng.topic, rng.partition, start)])
        pending: list[Any] = []
        next_offset = rng.start
        last_progress = clock()
        while next_offset < rng.end:
            msgs: list[Any] = consumer.consume(num_messages=10_000, timeout=0.1)
            progressed = False
            good = msgs
            if any(map(Message.error, msgs)):
                good = []
                for m in msgs:
                    error = m.error()
                    if error is None:
                        good.append(m)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        # the end of the log: control records (transaction markers) at
                        # the end leave a gap that no message fills
                        next_offset = max(next_offset, m.offset())
                        progressed = True
                    else:
                        raise RuntimeError(
                            f"reading {rng.topic}/{rng.partition}: {error.str()}")
            if good:
                last = good[-1].offset()
                if last >= rng.end:
                    good = [m for m in good if m.offset() < rng.end]
                pending.extend(good)
                next_offset = max(next_offset, last + 1)
                progressed = True
            if progressed:
                last_progress = clock()
            elif clock() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(
                    f"reading {rng.topic}/{rng.partition}: no progress at offset "
                    f"{next_offset} (want up to {rng.end}) for {STALL_TIMEOUT_S:.0f}s"
                )
            if len(pending) >= ARROW_BATCH:
                yield arrow_batch(pending, options.include_headers, schema)
                pending = []
        if pending:
            yield arrow_batch(pending, options.include_headers, schema)
    finally:
        consumer.close()
        if gc_was_enabled:
            gc.enable()


# ---- the data source ----------------------------------------------------------------------


class EddyDataSource(DataSource):
    """`spark.read.format("eddy")`, `readStream`, `write` and `writeStream`."""

    @classmethod
    def name(cls) -> str:
        return "eddy"

    def schema(self) -> str:
        return KafkaOptions.parse(self.options, reading=False).resolved().schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return EddyBatchReader(_resolved(KafkaOptions.parse(self.options), schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return EddyStreamReader(_resolved(KafkaOptions.parse(self.options), schema))

    def writer(self, schema: StructType, overwrite: bool) -> EddyWriter:
        return EddyWriter(KafkaOptions.parse(self.options, reading=False, writing=True),
                          schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> EddyStreamWriter:
        return EddyStreamWriter(KafkaOptions.parse(self.options, reading=False,
                                                   writing=True), schema)


def _resolved(options: KafkaOptions, schema: StructType) -> KafkaOptions:
    """The options with their reader schemas fetched, checked against the schema Spark
    planned with (fetched a moment earlier by schema(): a new version registered in
    between would make the tasks' batches disagree with the plan)."""
    if not options.decodings:
        return options
    from eddy.connect.formats.value_decoding import field_ddl

    resolved = options.resolved()
    planned = {f.name: f.dataType.simpleString() for f in schema.fields}
    for dec in resolved.decodings:
        if dec.field in planned and planned[dec.field] != field_ddl(dec):
            raise OptionError(
                f"option {dec.field}.format: subject {dec.subject!r} got a new version "
                f"({dec.reader.version if dec.reader else '?'}) while the query was being "
                "planned: start it again")
    return resolved


class EddyBatchReader(DataSourceReader):
    def __init__(self, options: KafkaOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        cluster = Cluster(self.options)
        parts = cluster.partitions()
        start = cluster.resolve(self.options.starting, parts, self.options.starting_timestamp,
                                self.options.starting_by_timestamp)
        end = cluster.resolve(self.options.ending, parts)
        return plan_ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TopicRange)
        yield from read_range(self.options, partition)


class EddyStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: KafkaOptions) -> None:
        self.options = options
        self._cluster: Cluster | None = None
        self._latest: dict[str, int] | None = None
        self._target: dict[str, int] | None = None  # availableNow: stop here

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self.options)
        return self._cluster

    def initialOffset(self) -> dict[str, int]:
        opts = self.options
        parts = self.cluster.partitions()
        return self.cluster.resolve(opts.starting, parts, opts.starting_timestamp,
                                    opts.starting_by_timestamp)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.cluster.latest(self.cluster.partitions())

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        if self._target is not None:
            latest = dict(self._target)
        else:
            latest = self.cluster.latest(self.cluster.partitions())
        # a partition the query already read keeps its place even if metadata lags
        for key, offset in start.items():
            latest[key] = max(int(offset), latest.get(key, 0))
        self._latest = dict(latest)
        if isinstance(limit, ReadMaxRows):
            return limit_offsets(start, latest, int(limit.max_rows))
        return latest

    def reportLatestOffset(self) -> dict[str, int] | None:
        return self._latest

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return plan_ranges(start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, TopicRange)
        yield from read_range(self.options, partition)

    def commit(self, end: dict[str, int]) -> None:
        pass

    def stop(self) -> None:
        self._cluster = None


# ---- writing (the tasks run eddy.connect.reader.kafka_writer on the executors) -------------------


class EddyWriter(DataSourceArrowWriter):
    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        if "value" not in schema.fieldNames():
            raise OptionError("writing to eddy needs a `value` column")
        if not options.topic and "topic" not in schema.fieldNames():
            raise OptionError("writing to eddy needs the `topic` option or a `topic` column")
        if options.encodings:  # on the driver: derive, register, fetch the ids
            options = replace(options, encodings=prepare_all(options.encodings, schema))
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_batches(self.options, iterator)


class EddyStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        self.options = EddyWriter(options, schema).options  # same checks, prepared

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
