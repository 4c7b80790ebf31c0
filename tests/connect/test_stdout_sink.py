"""Stdout sink: JSON lines or a rich table per micro-batch."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

from eddy.connect.batch import BatchInfo
from eddy.connect.sinks.stdout import StdoutBatchSink, StdoutSink

TABLE = StdoutSink.model_validate({"type": "stdout", "format": "table"})


def frame(spark: Any, count: int) -> Any:
    return spark.range(0, count, 1, 3).selectExpr(
        "id",
        "CAST(concat('v', id) AS BINARY) AS value",
        "CASE WHEN id = 1 THEN X'C328' END AS raw",
        "TIMESTAMP '2024-05-01 12:00:00' AS ts",
        "named_struct('n', id, 'tags', array('a', 'b')) AS meta",
    )


def test_json_lines(spark: Any) -> None:
    out = io.StringIO()
    StdoutBatchSink(StdoutSink.model_validate({"type": "stdout"}), stream=out).write(
        frame(spark, 5), BatchInfo(0, "r")
    )
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[1] == {
        "id": 1, "value": "v1", "raw": base64.b64encode(b"\xc3\x28").decode(),
        "ts": "2024-05-01T12:00:00Z", "meta": {"n": 1, "tags": ["a", "b"]},
    }
    assert rows[0]["raw"] is None


def test_limit_caps_rows_per_batch(spark: Any) -> None:
    out = io.StringIO()
    StdoutBatchSink(StdoutSink.model_validate({"type": "stdout", "limit": 3}), stream=out).write(
        frame(spark, 50), BatchInfo(0, "r")
    )
    assert len(out.getvalue().splitlines()) == 3


def test_table(spark: Any, capsys: Any) -> None:
    sink = StdoutBatchSink(TABLE, name="sink[0]:stdout")
    sink.write(frame(spark, 2).drop("meta"), BatchInfo(7, "r"))
    text = capsys.readouterr().out
    assert "sink[0]:stdout · batch 7" in text
    for cell in ("id", "value", "ts", "v0", "v1", "null", "2024-05-01T12:00:00Z"):
        assert cell in text

    sink.write(frame(spark, 0), BatchInfo(8, "r"))
    assert "no rows" in capsys.readouterr().out


def test_table_counts_rows_beyond_what_it_shows(spark: Any, monkeypatch: Any) -> None:
    import eddy.connect.sinks.stdout as mod

    monkeypatch.setattr(mod, "TABLE_ROWS", 4)
    out = io.StringIO()
    StdoutBatchSink(TABLE, stream=out).write(
        spark.range(10), BatchInfo(0, "r")
    )
    assert "4 of 10 rows shown" in out.getvalue()
