"""The files source: json/csv/parquet directories as streams, schema inference, new files."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eddy.connect.batch import POSITION_COLUMN
from eddy.connect.sources.files import FilesSource, discover_files, files_stream, reader_options


def _spec(**fields: Any) -> FilesSource:
    return FilesSource.model_validate({"type": "files", **fields})


def _write_json(path: Path, ids: range) -> None:
    path.write_text("".join(json.dumps({"id": i, "name": f"n{i}", "score": i / 2}) + "\n"
                            for i in ids))


def _run_available_now(df: Any, out: Path, checkpoint: Path) -> tuple[list[Any], list[int]]:
    """One available-now run into a parquet sink; returns all rows in the sink so far
    and the input rows of each micro-batch of this run."""
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(120), "the query did not finish"
        assert query.exception() is None
        batches = [int(p["numInputRows"]) for p in query.recentProgress
                   if p["numInputRows"]]
    finally:
        query.stop()
    rows = list(df.sparkSession.read.parquet(str(out)).collect())
    return rows, batches


def test_json_directory_new_files_are_picked_up(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    _write_json(src / "a.json", range(0, 5))
    _write_json(src / "b.json", range(5, 12))
    (src / "_ignored.json").write_text("not json\n")
    spec = _spec(format="json", path=str(src), max_files_per_batch=1)
    assert discover_files(spark, spec).simpleString() == (
        "struct<id:bigint,name:string,score:double>")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    rows, batches = _run_available_now(files_stream(spark, spec), out, checkpoint)
    assert sorted(r["id"] for r in rows) == list(range(12))
    assert sorted(batches) == [5, 7]  # one file per micro-batch
    by_id = {r["id"]: r for r in rows}
    assert by_id[3]["name"] == "n3" and by_id[3]["score"] == 1.5
    assert by_id[3][POSITION_COLUMN].endswith("/in/a.json")
    assert by_id[9][POSITION_COLUMN].endswith("/in/b.json")

    # a second run with the same checkpoint reads exactly the new file
    _write_json(src / "c.json", range(12, 15))
    rows, batches = _run_available_now(files_stream(spark, spec), out, checkpoint)
    assert batches == [3]
    assert sorted(r["id"] for r in rows) == list(range(15))


def test_parquet_and_csv_directories(spark: Any, tmp_path: Path) -> None:
    pq_dir, csv_dir = tmp_path / "pq", tmp_path / "csv"
    pq_dir.mkdir()
    csv_dir.mkdir()
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int32()),
                             "name": ["p1", "p2", "p3"]}), pq_dir / "part-0.parquet")
    (csv_dir / "one.csv").write_text("id,name\n10,c10\n11,c11\n")
    parquet = _spec(format="parquet", path=str(pq_dir))
    csv = _spec(format="csv", path=str(csv_dir))
    assert discover_files(spark, parquet).simpleString() == "struct<id:int,name:string>"
    # csv: header and inferSchema by default
    assert discover_files(spark, csv).simpleString() == "struct<id:int,name:string>"
    assert reader_options(_spec(format="csv", path="x", options={"HEADER": "false"})) == {
        "inferSchema": "true", "HEADER": "false"}
    # a given schema is used as is (csv columns by position)
    typed = _spec(format="csv", path=str(csv_dir), schema="id LONG, name STRING")
    assert discover_files(spark, typed).simpleString() == "struct<id:bigint,name:string>"

    both = files_stream(spark, parquet).unionByName(
        files_stream(spark, csv).selectExpr("CAST(id AS INT) AS id", "name", POSITION_COLUMN))
    assert both.isStreaming
    name = f"files_{uuid.uuid4().hex[:8]}"
    query = both.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120), "the query did not finish"
        assert query.exception() is None
        rows = {r["id"]: r for r in spark.table(name).collect()}
    finally:
        query.stop()
        spark.catalog.dropTempView(name)
    assert sorted(rows) == [1, 2, 3, 10, 11]
    assert rows[11]["name"] == "c11"
    assert rows[11][POSITION_COLUMN].endswith("/csv/one.csv")
    # parquet rows carry their row index in the file
    assert rows[3][POSITION_COLUMN].endswith("/pq/part-0.parquet#2")


def test_schema_errors_name_the_field(spark: Any, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".hidden").write_text("{}")
    with pytest.raises(ValueError, match=r"source\.schema: not given.*source\.path") as err:
        discover_files(spark, _spec(format="json", path=str(empty)))
    assert str(empty) in str(err.value)
    with pytest.raises(ValueError, match=r"source\.schema"):
        files_stream(spark, _spec(format="parquet", path=str(empty)))
    # with a schema an empty directory is fine: files may come later
    assert discover_files(spark, _spec(format="json", path=str(empty), schema="a INT")) \
        .fieldNames() == ["a"]
    with pytest.raises(ValueError, match=r"source\.path: the directory .* does not exist"):
        discover_files(spark, _spec(format="json", path=str(tmp_path / "missing"),
                                    schema="a INT"))
    with pytest.raises(ValueError, match=r"source\.path: .* is not a directory"):
        discover_files(spark, _spec(format="json", path=str(empty / ".hidden")))
    with pytest.raises(ValueError, match=r"source\.schema: not a valid Spark DDL schema"):
        discover_files(spark, _spec(format="json", path=str(empty), schema="a INT, b"))
