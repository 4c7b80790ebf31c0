"""format("eddy-datagen"): deterministic rows, types, options, rate limiting, streaming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from eddy.connect.datasources.datagen import (
    BASE_TIME_US,
    DEFAULT_SCHEMA,
    DatagenDataSource,
    DatagenOptions,
    DatagenStreamReader,
    RowGenerator,
    RowRange,
    split_rows,
)

WIDE = StructType([
    StructField("id", LongType()),
    StructField("name", StringType()),
    StructField("amount", DoubleType()),
    StructField("ts", TimestampType()),
    StructField("local_ts", TimestampNTZType()),
    StructField("day", DateType()),
    StructField("blob", BinaryType()),
    StructField("price", DecimalType(10, 2)),
    StructField("tiny", ByteType()),
    StructField("small", ShortType()),
    StructField("n", IntegerType()),
    StructField("ratio", FloatType()),
    StructField("flag", BooleanType(), nullable=False),
])
DEFAULT = StructType([
    StructField("id", LongType()), StructField("name", StringType()),
    StructField("amount", DoubleType()), StructField("ts", TimestampType()),
])


def _rows(gen: RowGenerator, start: int, end: int) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(gen.batches(start, end, size=300))).to_pylist()


# ---- generating rows ----------------------------------------------------------------------


def test_same_seed_same_rows_in_any_split() -> None:
    one = _rows(RowGenerator(WIDE, 7), 0, 1000)
    again = _rows(RowGenerator(WIDE, 7), 0, 1000)
    assert one == again
    # row i does not depend on the range it is generated in (restarts, partitions)
    assert _rows(RowGenerator(WIDE, 7), 640, 1000) == one[640:]
    assert [r["id"] for r in one] == list(range(1000))


def test_different_seed_different_rows() -> None:
    a = _rows(RowGenerator(WIDE, 1), 0, 200)
    b = _rows(RowGenerator(WIDE, 2), 0, 200)
    for column in ("name", "amount", "blob", "price", "n", "flag"):
        assert [r[column] for r in a] != [r[column] for r in b], column
    # the row index and timestamps do not depend on the seed
    assert [r["id"] for r in a] == [r["id"] for r in b]
    assert [r["ts"] for r in a] == [r["ts"] for r in b]


def test_types_match_what_pyspark_checks() -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    batch = RowGenerator(WIDE, 0).batch(0, 100)
    assert batch.schema.equals(to_arrow_schema(WIDE, timezone="UTC"))
    assert batch.schema.field("name").type == pa.string()
    assert batch.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    rows = batch.to_pylist()
    assert rows[3]["ts"].timestamp() * 1_000_000 == BASE_TIME_US + 3000
    assert all(r["name"].startswith("name-") for r in rows)
    assert all(0 <= r["amount"] < 1000 for r in rows)
    assert all(len(r["blob"]) == 8 for r in rows)
    assert all(r["price"].as_tuple().exponent == -2 for r in rows)
    assert len({r["name"] for r in rows}) > 50  # values vary


def test_unsupported_type_names_the_column() -> None:
    schema = StructType([StructField("id", LongType()),
                         StructField("tags", MapType(StringType(), IntegerType()))])
    with pytest.raises(ValueError, match=r"datagen schema: column 'tags' has type MAP"):
        RowGenerator(schema, 0)
    with pytest.raises(ValueError, match=r"column 'code'.*use STRING"):
        RowGenerator(StructType([StructField("code", CharType(3))]), 0)


@pytest.mark.parametrize(("options", "message"), [
    ({"rate": "fast"}, "datagen option rate: expected an integer, got 'fast'"),
    ({"rate": "0"}, "datagen option rate: must be at least 1"),
    ({"count": "-5"}, "datagen option count: must be at least 0"),
    ({"seed": "1.5"}, "datagen option seed"),
    ({"partitions": "0"}, "datagen option partitions"),
    ({"partitions": "5000"}, "datagen option partitions: at most 1024"),
    ({"maxRowsPerBatch": "0"}, "datagen option maxRowsPerBatch"),
    ({"schema": " "}, "datagen option schema"),
])
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DatagenOptions.parse(options)


def test_options_defaults_and_case() -> None:
    assert DatagenOptions.parse({}) == DatagenOptions(schema=DEFAULT_SCHEMA, rate=1000,
                                                     count=None, seed=0, partitions=2)
    parsed = DatagenOptions.parse({"RATE": "5", "count": "9", "seed": "-3",
                                   "maxrowsperbatch": "4"})
    assert (parsed.rate, parsed.count, parsed.seed, parsed.max_rows_per_batch) == (5, 9, -3, 4)


def test_split_rows() -> None:
    assert split_rows(5, 5, 3) == []
    assert [(r.start, r.end) for r in split_rows(0, 10, 3)] == [(0, 3), (3, 6), (6, 10)]
    assert [(r.start, r.end) for r in split_rows(10, 12, 4)] == [(10, 11), (11, 12)]


# ---- streaming offsets --------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _reader(clock: Clock, **options: str) -> DatagenStreamReader:
    return DatagenStreamReader(DatagenOptions.parse(options), DEFAULT, clock=clock)


def test_latest_offset_follows_the_rate() -> None:
    clock = Clock()
    reader = _reader(clock, rate="100")
    assert reader.initialOffset() == {"rows": 0}
    assert reader.latestOffset({"rows": 0}, ReadAllAvailable()) == {"rows": 0}
    clock.t += 1.5
    assert reader.latestOffset({"rows": 0}, ReadAllAvailable()) == {"rows": 150}
    assert reader.reportLatestOffset() == {"rows": 150}
    clock.t += 0.5
    assert reader.latestOffset({"rows": 150}, ReadMaxRows(30)) == {"rows": 180}
    assert reader.reportLatestOffset() == {"rows": 200}
    assert reader.partitions({"rows": 150}, {"rows": 150}) == []
    ranges = reader.partitions({"rows": 150}, {"rows": 180})
    assert [(r.start, r.end) for r in ranges] == [(150, 165), (165, 180)]  # type: ignore[attr-defined]


def test_latest_offset_after_restart_and_count_cap() -> None:
    clock = Clock()
    reader = _reader(clock, rate="1000", count="2500")
    # a restarted query stands at 2000: the rate counts from there
    assert reader.latestOffset({"rows": 2000}, ReadAllAvailable()) == {"rows": 2000}
    clock.t += 0.2
    assert reader.latestOffset({"rows": 2000}, ReadAllAvailable()) == {"rows": 2200}
    clock.t += 10
    assert reader.latestOffset({"rows": 2200}, ReadAllAvailable()) == {"rows": 2500}
    assert reader.latestOffset({"rows": 2500}, ReadAllAvailable()) == {"rows": 2500}


def test_default_read_limit() -> None:
    assert isinstance(_reader(Clock()).getDefaultReadLimit(), ReadAllAvailable)
    assert _reader(Clock(), maxRowsPerBatch="10").getDefaultReadLimit() == ReadMaxRows(10)


def test_available_now_takes_count_or_one_second() -> None:
    clock = Clock()
    reader = _reader(clock, rate="100", count="1000")
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset({"rows": 0}, ReadMaxRows(400)) == {"rows": 400}
    assert reader.latestOffset({"rows": 400}, ReadAllAvailable()) == {"rows": 1000}
    assert reader.latestOffset({"rows": 1000}, ReadAllAvailable()) == {"rows": 1000}
    endless = _reader(clock, rate="100")
    endless.prepareForTriggerAvailableNow()
    assert endless.latestOffset({"rows": 50}, ReadAllAvailable()) == {"rows": 150}
    clock.t += 60  # the target is fixed when the run starts
    assert endless.latestOffset({"rows": 150}, ReadAllAvailable()) == {"rows": 150}


def test_read_yields_the_range() -> None:
    reader = _reader(Clock(), seed="3")
    batches = list(reader.read(RowRange(10, 20)))
    assert [r["id"] for b in batches for r in b.to_pylist()] == list(range(10, 20))


# ---- through Spark ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def datagen(spark: Any) -> Any:
    spark.dataSource.register(DatagenDataSource)
    return spark


def test_batch_read(datagen: Any) -> None:
    df = (datagen.read.format("eddy-datagen")
          .options(count="1000", seed="11", partitions="3").load())
    assert df.schema == DEFAULT
    rows = sorted(df.collect(), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(1000))
    expected = _rows(RowGenerator(DEFAULT, 11), 0, 1000)
    assert [r["name"] for r in rows] == [e["name"] for e in expected]
    assert [r["amount"] for r in rows] == [e["amount"] for e in expected]
    # a schema given to the reader wins over the option
    typed = (datagen.read.format("eddy-datagen").schema("id INT, flag BOOLEAN")
             .option("count", "5").load())
    assert sorted(typed.collect()) == sorted(
        (r["id"], r["flag"]) for r in _rows(
            RowGenerator(StructType([StructField("id", IntegerType()),
                                     StructField("flag", BooleanType())]), 0), 0, 5))


def test_errors_through_spark(datagen: Any) -> None:
    with pytest.raises(Exception, match="datagen option count: required for a batch read"):
        datagen.read.format("eddy-datagen").load().collect()
    with pytest.raises(Exception, match="datagen schema: column 'm' has type MAP"):
        (datagen.read.format("eddy-datagen")
         .options(count="3", schema="id INT, m MAP<STRING, INT>").load().collect())
    with pytest.raises(Exception, match="datagen option rate: expected an integer"):
        datagen.read.format("eddy-datagen").options(rate="x", count="3").load().collect()


def _run_available_now(spark: Any, out: Path, checkpoint: Path, **options: str) -> list[Any]:
    """One available-now run into a parquet sink (exactly-once across restarts);
    returns every row in the sink so far."""
    query = (spark.readStream.format("eddy-datagen").options(**options).load()
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the query did not finish"
        assert query.exception() is None
    finally:
        query.stop()
    return list(spark.read.parquet(str(out)).collect())


def test_stream_available_now_then_restart(datagen: Any, tmp_path: Path) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"seed": "5", "partitions": "3",
               "schema": "id LONG, name STRING, amount DOUBLE, ts TIMESTAMP"}
    first = _run_available_now(datagen, out, checkpoint, count="3000", **options)
    assert sorted(r["id"] for r in first) == list(range(3000))
    # the restarted query resumes at 3000 and makes exactly the new rows, equal to
    # what one longer run would have made
    rows = _run_available_now(datagen, out, checkpoint, count="4000", **options)
    assert sorted(r["id"] for r in rows) == list(range(4000))
    expected = _rows(RowGenerator(DEFAULT, 5), 0, 4000)
    got = sorted(rows, key=lambda r: r["id"])
    assert [(r["name"], r["amount"]) for r in got] == [
        (e["name"], e["amount"]) for e in expected]
