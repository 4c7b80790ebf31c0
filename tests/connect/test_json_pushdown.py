"""parse_json done in the eddy reader (json_columns): the same rows as Spark's from_json.

The reader's parse is only a hint: a value it does not take is null in its column,
and Spark parses that row. So the property is: for any value, the parse_json step
gives the same fields and the same error with the hint as without it.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.connect.batch import ERROR_COLUMN
from eddy.connect.reader.json_columns import PARSED_COLUMN, ValueParser, column_ddl, pushable_fields
from eddy.connect.transforms.compiler import parse_json
from eddy.connect.transforms.spec import ParseJson

SCHEMA = "a INT, b BIGINT, s STRING, d DOUBLE, t BOOLEAN"
FIELDS = ["a", "b", "s", "d", "t"]
STRUCT = json.dumps({"type": "struct", "fields": [
    {"name": n, "type": k, "nullable": True, "metadata": {}}
    for n, k in zip(FIELDS, ["integer", "long", "string", "double", "boolean"], strict=True)]})

TRICKY = [
    b'{"a":1,"b":2,"s":"x","d":1.5,"t":true}', b'{"a":3000000000}', b'{"a":1,"a":2}',
    b'{"s":"\xff\xfe"}', b'{"s":"\\ud800"}', b'{"s":5}', b'{"a":1.0}', b'{"a":1e3}',
    b'{"b":9223372036854775808}', b'{"d":NaN}', b'{"d":"NaN"}', b'{"a":007}', b'{"a":-0}',
    b'{"d":1}', b'{"d":1e400}', b'{"t":1}', b'{"s":null}', b"null", b"[1]", b'{"a":1} x',
    b'{"x":{"y":[1,2,{"z":null}]},"a":2}', b"{'a':1}", b'{"s":"a\\u0000b"}',
    b'{"s":"\xc3\xa9\\ud83d\\ude00"}', b'{"d":-1.5E-3}', b'{"d":.5}', b'{"A":1}',
    b'  {"a":1}  ', b"\t{}", b"{}", b"{} {}", b'{"a":1}{"a":2}', b'{"s":"x"', b"",
    b"   ", None, b'{"a":\n1}', b'{"s":"line\rbreak"}', b'{"d":4.9e-324}',
    b'{"b":-9223372036854775808}', b'{"s":"\\"quoted\\" \\\\ \\/ \\b\\f\\n\\r\\t"}',
    b"5", b'"text"', b'{"t":false,"t2":true}', b'{"a":2147483647,"d":123456789012345678901}',
]


def parse(values: list[bytes | None]) -> list[Any]:
    return ValueParser(STRUCT).parse(pa.array(values, pa.binary())).to_pylist()  # type: ignore[no-any-return]


def test_well_formed_objects_are_parsed() -> None:
    values = [json.dumps({"a": i, "b": -i * 10**12, "s": f"é{i}", "d": i / 7,
                          "t": i % 2 == 0}).encode() for i in range(1000)]
    got = parse(values)
    assert got == [json.loads(v) for v in values]


def test_what_is_not_a_plain_object_is_left_to_spark() -> None:
    got = parse([b"null", b"[1]", b"5", b"", b"   ", None, b'{"a":\n1}', b"{} {}",
                 b'{"s":5}', b'{"a":1,"a":2}', b'{"s":"\xff"}'])
    assert got == [None] * 11


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(
    st.fixed_dictionaries({}, optional={
        "a": st.integers(-2**31, 2**31 - 1), "b": st.integers(-2**63, 2**63 - 1),
        "s": st.text(), "d": st.floats(allow_nan=False, allow_infinity=False),
        "t": st.booleans(), "extra": st.recursive(st.none() | st.integers(),
                                                  lambda c: st.lists(c, max_size=3))}),
    st.sampled_from(TRICKY)), min_size=1, max_size=300))
def test_rows_stay_aligned_whatever_the_mix(rows: list[Any]) -> None:
    values = [json.dumps(r).encode() if isinstance(r, dict) else r for r in rows]
    got = parse(values)
    assert len(got) == len(values)
    for row, value, out in zip(rows, values, got, strict=True):
        if out is None:
            continue
        given = json.loads(value.decode()) if isinstance(row, bytes) else row  # type: ignore[union-attr]
        expected = {k: given.get(k) for k in FIELDS}
        if expected["d"] is not None:
            expected["d"] = float(expected["d"])  # a DOUBLE column: 1 reads as 1.0
        assert repr(out) == repr(expected)  # repr: NaN equals NaN


def test_long_runs_of_good_rows_around_bad_ones_are_still_parsed() -> None:
    values: list[bytes | None] = [b'{"a":%d}' % i for i in range(4000)]
    for bad in (0, 17, 1999, 3999):
        values[bad] = b"{broken"
    got = parse(values)
    parsed = sum(1 for g in got if g is not None)
    assert parsed >= 4000 - 4 * 32  # a bad line costs at most its block of MIN_BLOCK lines
    assert all(g is None or g["a"] == i for i, g in enumerate(got))


def test_only_flat_structs_of_exact_types_are_pushed() -> None:
    assert pushable_fields(json.loads(STRUCT)) == list(zip(
        FIELDS, ["integer", "long", "string", "double", "boolean"], strict=True))
    for kind in ("float", "timestamp", "date", "decimal(10,2)", "binary", "short"):
        assert pushable_fields({"type": "struct", "fields": [
            {"name": "x", "type": kind, "nullable": True, "metadata": {}}]}) is None
    nested = {"type": "struct", "fields": [{"name": "x", "nullable": True, "metadata": {},
                                            "type": json.loads(STRUCT)}]}
    assert pushable_fields(nested) is None
    assert column_ddl(STRUCT) == (f"`{PARSED_COLUMN}` STRUCT<`a`: INT, `b`: BIGINT, "
                                  "`s`: STRING, `d`: DOUBLE, `t`: BOOLEAN>")


@pytest.mark.parametrize("pushed", [False, True])
def test_spark_rows_match_with_and_without_the_reader_parse(spark: Any, pushed: bool) -> None:
    """The parse_json step over TRICKY values: with the reader's column the fields and
    the errors are exactly those Spark gives without it."""
    from pyspark.sql import functions as F

    hints = [parse([v])[0] for v in TRICKY]  # one by one: every row the reader would take
    assert any(h is not None for h in hints) and any(h is None for h in hints)
    rows = [(i, v, h) for i, (v, h) in enumerate(zip(TRICKY, hints, strict=True))]
    df = spark.createDataFrame(rows, f"i INT, value BINARY, {column_ddl(STRUCT)}")
    df = df.withColumn(ERROR_COLUMN, F.lit(None).cast("string"))
    if not pushed:
        df = df.drop(PARSED_COLUMN)
    step = parse_json(ParseJson.model_validate({"parse_json": {"schema": SCHEMA,
                                                               "keep": ["i"]}}),
                      SCHEMA, "transforms[0].parse_json")
    got = {r["i"]: r.asDict() for r in step.apply(df, []).collect()}
    baseline = spark.createDataFrame([(i, v) for i, v, _ in rows], "i INT, value BINARY")
    baseline = baseline.withColumn(ERROR_COLUMN, F.lit(None).cast("string"))
    want = {r["i"]: r.asDict() for r in step.apply(baseline, []).collect()}
    assert got.keys() == want.keys() == set(range(len(TRICKY)))
    for i in want:
        assert repr(got[i]) == repr(want[i]), TRICKY[i]
