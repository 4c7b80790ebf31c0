"""`format("eddy-datagen")`: generated rows for a Spark DDL schema, at a rate, from a seed.

Row i is a pure function of (seed, column name, i): the same seed gives the same
rows on every run and after a restart. Values come from a splitmix64 hash over
numpy uint64 arrays (no per-row Python). A column named `id` holds the row index;
`timestamp` columns hold BASE_TIME + i milliseconds; strings are `<column>-<n>`
from a vocabulary of 1000.

Options (strings): `schema` (DDL, default DEFAULT_SCHEMA), `rate` (rows/s, default
1000), `count` (total rows; required for batch reads), `seed` (default 0),
`partitions` (Spark input partitions per batch, default 2), `maxRowsPerBatch`
(at most this many rows per micro-batch).

Streaming offsets are `{"rows": n}`. A micro-batch gets the rows due by now: `rate`
per second since the reader's first `latestOffset` call, capped by `count`. Under
Trigger.AvailableNow every row up to `count` is available at once (one second's
worth, `rate` rows, when there is no `count`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from eddy.connect.options import int_option

DEFAULT_SCHEMA = "id LONG, name STRING, amount DOUBLE, ts TIMESTAMP"
DEFAULT_RATE = 1000
DEFAULT_PARTITIONS = 2
#: rows per pyarrow RecordBatch handed to Spark
ARROW_BATCH = 65_536
#: timestamps start here (2024-01-01T00:00:00Z, microseconds since the epoch), 1 ms a row
BASE_TIME_US = 1_704_067_200_000_000
#: dates fall in the 366 days from 2024-01-01 (days since the epoch)
BASE_DATE = 19_723
#: distinct values of a string column
VOCABULARY = 1000
SUPPORTED_TYPES = (
    "BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, DECIMAL(p,s), STRING, BOOLEAN, "
    "TIMESTAMP, TIMESTAMP_NTZ, DATE, BINARY"
)

#: the clock latestOffset reads (seconds, monotonic); tests may replace it
monotonic: Callable[[], float] = time.monotonic

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


# ---- options ------------------------------------------------------------------------------


def _int_option(options: Mapping[str, str], name: str, default: int | None,
                minimum: int | None) -> int | None:
    return int_option(options, name, default, minimum, label="datagen ")


@dataclass(frozen=True)
class DatagenOptions:
    """The parsed options of `format("eddy-datagen")`."""

    schema: str = DEFAULT_SCHEMA
    rate: int = DEFAULT_RATE
    count: int | None = None
    seed: int = 0
    partitions: int = DEFAULT_PARTITIONS
    max_rows_per_batch: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> DatagenOptions:
        """Check every option; a bad value raises ValueError naming the option."""
        opts = {str(k).lower(): v for k, v in options.items()}
        schema = opts.get("schema", DEFAULT_SCHEMA)
        if not str(schema).strip():
            raise ValueError("datagen option schema: empty; give a Spark DDL schema")
        rate = _int_option(opts, "rate", DEFAULT_RATE, 1)
        seed = _int_option(opts, "seed", 0, None)
        partitions = _int_option(opts, "partitions", DEFAULT_PARTITIONS, 1)
        assert rate is not None and seed is not None and partitions is not None
        if partitions > 1024:
            raise ValueError(f"datagen option partitions: at most 1024, got {partitions}")
        return cls(
            schema=str(schema),
            rate=rate,
            count=_int_option(opts, "count", None, 0),
            seed=seed,
            partitions=partitions,
            max_rows_per_batch=_int_option(opts, "maxRowsPerBatch", None, 1),
        )


# ---- generating values (runs on the executors) --------------------------------------------


def _splitmix(z: Any) -> Any:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _column_key(seed: int, name: str) -> int:
    digest = hashlib.blake2b(f"{seed & _MASK}:{name.lower()}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def row_hashes(seed: int, name: str, start: int, end: int) -> Any:
    """One uint64 per row index in [start, end) for column `name`."""
    idx = np.arange(start, end, dtype=np.uint64)
    return _splitmix(idx * np.uint64(_GOLDEN) + np.uint64(_column_key(seed, name)))


Generator = Callable[[int, int, int], Any]
"""(seed, start, end) -> a pyarrow Array of end - start values."""


def _integral(name: str, dtype: str, modulus: int) -> Generator:
    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        if name.lower() == "id":
            return pa.array(np.arange(start, end, dtype=np.int64).astype(dtype))
        h = row_hashes(seed, name, start, end)
        return pa.array((h % np.uint64(modulus)).astype(dtype))

    return gen


def _floating(name: str, dtype: str) -> Generator:
    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        h = row_hashes(seed, name, start, end)
        unit = (h >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))
        return pa.array(np.round(unit * 1000.0, 2).astype(dtype))

    return gen


def _decimal(name: str, precision: int, scale: int) -> Generator:
    modulus = 10 ** min(precision, 18)

    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        h = row_hashes(seed, name, start, end)
        words = np.zeros((end - start, 2), dtype=np.uint64)  # little-endian int128, >= 0
        words[:, 0] = h % np.uint64(modulus)
        return pa.Array.from_buffers(
            pa.decimal128(precision, scale), end - start, [None, pa.py_buffer(words.tobytes())]
        )

    return gen


def _string(name: str) -> Generator:
    vocabulary: list[Any] = []

    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        if name.lower() == "id":
            return pa.array(np.arange(start, end, dtype=np.int64)).cast(pa.string())
        if not vocabulary:
            vocabulary.append(pa.array([f"{name}-{n}" for n in range(VOCABULARY)], pa.string()))
        h = row_hashes(seed, name, start, end)
        return vocabulary[0].take(pa.array((h % np.uint64(VOCABULARY)).astype(np.int64)))

    return gen


def _boolean(name: str) -> Generator:
    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        return pa.array((row_hashes(seed, name, start, end) & np.uint64(1)).astype(bool))

    return gen


def _timestamp(tz: str | None) -> Generator:
    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        micros = BASE_TIME_US + np.arange(start, end, dtype=np.int64) * 1000
        return pa.array(micros, pa.timestamp("us", tz=tz))

    return gen


def _date(name: str) -> Generator:
    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        h = row_hashes(seed, name, start, end)
        days = (h % np.uint64(366)).astype(np.int32) + np.int32(BASE_DATE)
        return pa.array(days, pa.date32())

    return gen


def _binary(name: str) -> Generator:
    def gen(seed: int, start: int, end: int) -> Any:
        import pyarrow as pa

        h = row_hashes(seed, name, start, end).astype(">u8")
        fixed = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(8), end - start, [None, pa.py_buffer(h.tobytes())]
        )
        return fixed.cast(pa.binary())

    return gen


def column_generator(name: str, dtype: DataType) -> Generator:
    """The generator for one column; ValueError names the column if its type is not
    supported."""
    if isinstance(dtype, LongType):
        return _integral(name, "int64", 1_000_000_000)
    if isinstance(dtype, IntegerType):
        return _integral(name, "int32", 1_000_000)
    if isinstance(dtype, ShortType):
        return _integral(name, "int16", 10_000)
    if isinstance(dtype, ByteType):
        return _integral(name, "int8", 100)
    if isinstance(dtype, DoubleType):
        return _floating(name, "float64")
    if isinstance(dtype, FloatType):
        return _floating(name, "float32")
    if isinstance(dtype, DecimalType):
        return _decimal(name, dtype.precision, dtype.scale)
    if isinstance(dtype, StringType):
        return _string(name)
    if isinstance(dtype, BooleanType):
        return _boolean(name)
    if isinstance(dtype, TimestampNTZType):
        return _timestamp(None)
    if isinstance(dtype, TimestampType):
        return _timestamp("UTC")
    if isinstance(dtype, DateType):
        return _date(name)
    if isinstance(dtype, BinaryType):
        return _binary(name)
    hint = ""
    if isinstance(dtype, CharType | VarcharType):
        hint = " (PySpark data sources cannot return CHAR/VARCHAR: use STRING)"
    raise ValueError(
        f"datagen schema: column {name!r} has type {dtype.simpleString().upper()}; "
        f"supported: {SUPPORTED_TYPES}{hint}"
    )


class RowGenerator:
    """Makes pyarrow RecordBatches of rows [start, end) for a Spark schema."""

    def __init__(self, schema: StructType, seed: int) -> None:
        if not schema.fields:
            raise ValueError("datagen schema: no columns")
        self.seed = seed
        self.generators = [column_generator(f.name, f.dataType) for f in schema.fields]
        from pyspark.sql.pandas.types import to_arrow_schema

        # exactly the arrow schema PySpark checks the batches against
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")

    def batch(self, start: int, end: int) -> Any:
        import pyarrow as pa

        columns = [gen(self.seed, start, end) for gen in self.generators]
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_schema)

    def batches(self, start: int, end: int, size: int = ARROW_BATCH) -> Iterator[Any]:
        for lo in range(start, end, size):
            yield self.batch(lo, min(lo + size, end))


# ---- planning -----------------------------------------------------------------------------


class RowRange(InputPartition):
    """Rows [start, end): one Spark task."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"RowRange([{self.start}, {self.end}))"


def split_rows(start: int, end: int, parts: int) -> list[RowRange]:
    """[start, end) in up to `parts` contiguous ranges of near-equal size."""
    n = end - start
    k = min(parts, n)
    if k <= 0:
        return []
    bounds = [start + n * i // k for i in range(k + 1)]
    return [RowRange(bounds[i], bounds[i + 1]) for i in range(k)]


def _rows(offset: Mapping[str, Any] | None) -> int:
    if not offset:
        return 0
    return int(offset.get("rows", 0))


# ---- the data source ----------------------------------------------------------------------


class DatagenDataSource(DataSource):
    """`spark.read.format("eddy-datagen")` (needs `count`) and `readStream`."""

    @classmethod
    def name(cls) -> str:
        return "eddy-datagen"

    def schema(self) -> str:
        return DatagenOptions.parse(self.options).schema

    def reader(self, schema: StructType) -> DataSourceReader:
        options = DatagenOptions.parse(self.options)
        if options.count is None:
            raise ValueError("datagen option count: required for a batch read (spark.read)")
        return DatagenBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DatagenStreamReader(DatagenOptions.parse(self.options), schema)


class DatagenBatchReader(DataSourceReader):
    """Rows [0, count)."""

    def __init__(self, options: DatagenOptions, schema: StructType) -> None:
        self.options = options
        self.rows = RowGenerator(schema, options.seed)

    def partitions(self) -> Sequence[InputPartition]:
        return split_rows(0, self.options.count or 0, self.options.partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RowRange)
        yield from self.rows.batches(partition.start, partition.end)


class DatagenStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets `{"rows": n}`; `rate` rows a second, capped by `count`."""

    def __init__(self, options: DatagenOptions, schema: StructType,
                 clock: Callable[[], float] | None = None) -> None:
        self.options = options
        self.rows = RowGenerator(schema, options.seed)
        self._clock = clock
        self._origin: tuple[int, float] | None = None
        self._available_now = False
        self._target: int | None = None
        self._latest: int | None = None

    def now(self) -> float:
        return self._clock() if self._clock is not None else monotonic()

    def initialOffset(self) -> dict[str, int]:
        return {"rows": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows_per_batch is not None:
            return ReadMaxRows(self.options.max_rows_per_batch)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def available(self, begin: int) -> int:
        """Rows that exist by now, given the query stands at `begin`."""
        count = self.options.count
        if self._available_now:
            if self._target is None:
                self._target = count if count is not None else begin + self.options.rate
            due = self._target
        else:
            now = self.now()
            if self._origin is None:
                self._origin = (begin, now)
            rows0, t0 = self._origin
            due = rows0 + int(self.options.rate * max(0.0, now - t0))
        if count is not None:
            due = min(due, count)
        return max(begin, due)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = _rows(start)
        end = self._latest = self.available(begin)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + max(0, int(limit.max_rows)))
        return {"rows": end}

    def reportLatestOffset(self) -> dict[str, int] | None:
        return None if self._latest is None else {"rows": self._latest}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return split_rows(_rows(start), _rows(end), self.options.partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RowRange)
        yield from self.rows.batches(partition.start, partition.end)

    def commit(self, end: dict[str, Any]) -> None:
        pass
