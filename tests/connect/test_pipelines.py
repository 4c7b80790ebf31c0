"""Pipelines end to end: a real broker, the shared local Spark session, runtime.run with
trigger available-now, and every output checked record by record against what the test
computes in Python."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from eddy.connect.deadletter import HEADER_ERROR, HEADER_PIPELINE, HEADER_SOURCE, HEADER_STAGE

from .pipeline_helpers import (
    create_topic,
    murmur2_partitions,
    parquet_rows,
    partition_count,
    produce,
    read_topic,
    run_text,
    topics,
)


@pytest.fixture(scope="module")
def eddy(module_eddy: Any) -> Any:
    """The module's one broker: every test here works on topics of its own."""
    return module_eddy


SALT = "s3cr3t-salt"


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def keep_last(text: str, n: int = 4) -> str:
    return "*" * max(len(text) - n, 0) + text[-n:]


# ---- topic -> transforms -> parquet ---------------------------------------------------------


def order(i: int) -> dict[str, Any]:
    """Test record i: every field a transform below touches, with some nulls."""
    return {
        "id": i,
        "email": f"user{i}@example.com",
        "card": f"4111-0000-{i:04d}-{(i * 7919) % 10000:04d}",
        "ssn": None if i % 9 == 0 else f"{i:03d}-45-6789",
        "amount": f"{i * 3 % 500}.{i % 100:02d}",
        "created": f"2024-03-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:05",
        "country": ["FR", "DE", "US", "JP"][i % 4],
    }


def expected_order(i: int) -> dict[str, Any]:
    o = order(i)
    local = datetime.strptime(o["created"], "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=ZoneInfo("Europe/Paris"))
    return {
        "id": i,
        "email": sha256_hex(SALT + o["email"]),
        "card": keep_last(o["card"]),
        "ssn": None if o["ssn"] is None else "[redacted]",
        "amount": Decimal(o["amount"]).quantize(Decimal("0.01")),
        "created": o["created"],
        "country_code": o["country"],
        "created_utc": local.astimezone(ZoneInfo("UTC")).strftime("%Y-%m-%dT%H:%M:%S"),
    }


def test_topic_transforms_parquet_row_by_row(eddy: Any, spark: Any, tmp_path: Path) -> None:
    create_topic(eddy.bootstrap, "orders", 2)
    n = 300
    produce(eddy.bootstrap, "orders",
            [(f"k{i}".encode(), json.dumps(order(i)).encode()) for i in range(n)])
    out = tmp_path / "out"
    run_text(spark, f"""
name: orders-lake
source:
  type: eddy
  bootstrap: {eddy.bootstrap}
  topic: orders
transforms:
  - parse_json:
      schema: >-
        id INT, email STRING, card STRING, ssn STRING, amount STRING,
        created STRING, country STRING
  - mask: {{field: email, method: hash, salt: {SALT}}}
  - mask: {{field: ssn, method: redact, replacement: "[redacted]"}}
  - mask: {{field: card, method: keep_last, keep: 4}}
  - rename: {{country: country_code}}
  - cast: {{amount: "DECIMAL(10,2)"}}
  - timestamp:
      {{field: created, format: "yyyy-MM-dd HH:mm:ss", zone: Europe/Paris, to: created_utc}}
  - filter: "country_code <> 'US' AND id % 5 <> 3"
sinks:
  - type: files
    format: parquet
    path: {out}
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    df = spark.read.parquet(str(out))
    assert dict(df.dtypes) == {
        "id": "int", "email": "string", "card": "string", "ssn": "string",
        "amount": "decimal(10,2)", "created": "string", "country_code": "string",
        "created_utc": "timestamp",
    }
    got = [r.asDict() for r in df.selectExpr(
        "*", "date_format(created_utc, \"yyyy-MM-dd'T'HH:mm:ss\") AS created_text",
    ).orderBy("id").collect()]
    for row in got:
        row["created_utc"] = row.pop("created_text")
    expected = [expected_order(i) for i in range(n)
                if order(i)["country"] != "US" and i % 5 != 3]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g == e
    # nothing was bad: no dead-letter topic was written
    assert "orders-lake.dead-letter" not in topics(eddy.bootstrap)


def test_parse_json_infers_the_schema(eddy: Any, spark: Any, tmp_path: Path) -> None:
    rows = [{"id": i, "name": f"n{i}", "score": i / 4, "tags": ["a", str(i)],
             "active": i % 2 == 0} for i in range(40)]
    produce(eddy.bootstrap, "people", [(None, json.dumps(r).encode()) for r in rows])
    out = tmp_path / "out"
    prepared = run_text(spark, f"""
name: people
source: {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: people}}
transforms:
  - parse_json: {{sample: 10}}
sinks:
  - {{type: files, format: parquet, path: "{out}"}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    inferred = prepared.json_schemas[0]
    assert inferred == ("`active` boolean, `id` bigint, `name` string, `score` double, "
                        "`tags` array<string>")
    # kept in the checkpoint, so a restart parses the same way
    state = json.loads((tmp_path / "ck" / "pipeline.json").read_text())
    assert state["json_schemas"] == {"0": inferred}
    assert parquet_rows(spark, out) == rows


# ---- route -> several topics ----------------------------------------------------------------


def test_route_to_several_topics(eddy: Any, spark: Any, tmp_path: Path) -> None:
    kinds = ["click", "view", "buy", "refund", "mystery"]
    create_topic(eddy.bootstrap, "events", 2)
    for name in ("events-clicks", "events-views", "events-money"):
        create_topic(eddy.bootstrap, name, 3)
    n = 250
    src = produce(eddy.bootstrap, "events", [
        (f"user-{i % 17}".encode(),
         json.dumps({"id": i, "kind": kinds[i % len(kinds)], "n": i * 2}).encode())
        for i in range(n)])
    run_text(spark, f"""
name: router
source: {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: events}}
transforms:
  - parse_json: {{schema: "id INT, kind STRING, n INT", keep: [key]}}
  - route:
      expr: >-
        CASE WHEN kind = 'click' THEN 'events-clicks'
             WHEN kind = 'view' THEN 'events-views'
             WHEN kind IN ('buy', 'refund') THEN 'events-money' END
sinks:
  - type: eddy
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    targets = {"click": "events-clicks", "view": "events-views", "buy": "events-money",
               "refund": "events-money"}
    expected: dict[str, Counter[tuple[bytes | None, str]]] = {t: Counter() for t in
                                                              set(targets.values())}
    for r in src:
        doc = r.json()
        if doc["kind"] in targets:
            value = json.dumps(doc, separators=(",", ":"))
            expected[targets[doc["kind"]]][(r.key, value)] += 1
    keys = sorted({r.key for r in src if r.key is not None})
    murmur2 = murmur2_partitions(eddy.bootstrap, keys, 3)
    assert len(set(murmur2.values())) > 1  # the keys do spread over partitions
    for topic, want in expected.items():
        got = read_topic(eddy.bootstrap, topic)
        assert Counter((r.key, r.value.decode()) for r in got if r.value) == want, topic
        assert len(got) == sum(want.values())
        for r in got:  # murmur2 key partitioning, as librdkafka (and Java) does it
            assert r.key is not None
            assert r.partition == murmur2[r.key], (topic, r.key, r.partition)
    # the `mystery` events matched no topic: dead letters, not lost and not in a topic
    dead = read_topic(eddy.bootstrap, "router.dead-letter")
    mystery = [r for r in src if r.json()["kind"] == "mystery"]
    assert sorted((r.key, r.value) for r in dead) == sorted((r.key, r.value) for r in mystery)
    by_position = {r.position: r for r in mystery}
    for d in dead:
        assert d.headers[HEADER_ERROR].decode() == (
            "transforms[1].route: the route expression gave no topic")
        original = by_position[d.headers[HEADER_SOURCE].decode()]
        assert (original.key, original.value) == (d.key, d.value)


# ---- datagen -> topic -----------------------------------------------------------------------


def test_datagen_to_topic(eddy: Any, spark: Any, tmp_path: Path) -> None:
    n = 5000
    run_text(spark, f"""
name: gen
source: {{type: datagen, count: {n}, rate: 10000000, seed: 7}}
sinks:
  - {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: generated}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    records = read_topic(eddy.bootstrap, "generated")
    assert len(records) == n
    docs = [r.json() for r in records]
    assert sorted(d["id"] for d in docs) == list(range(n))
    assert all(set(d) == {"id", "name", "amount", "ts"} for d in docs)
    assert all(isinstance(d["name"], str) and isinstance(d["amount"], float) for d in docs)
    # seeded: the same rows as a batch read with the same seed
    again = spark.read.format("eddy-datagen").options(
        count=str(n), seed="7", rate="10000000").load()
    expect = {r["id"]: r["name"] for r in again.select("id", "name").collect()}
    assert {d["id"]: d["name"] for d in docs} == expect


# ---- poison records -------------------------------------------------------------------------


def poison_inputs() -> list[tuple[bytes, bytes, str | None]]:
    """(key, value, the transform that rejects it or None) in production order."""
    out: list[tuple[bytes, bytes, str | None]] = []
    for i in range(60):
        key = f"k{i}".encode()
        if i % 10 == 3:
            out.append((key, b'{"id": %d, "amount": ' % i, "transforms[0].parse_json"))
        elif i % 10 == 5:
            out.append((key, b"not json at all \xff\xfe", "transforms[0].parse_json"))
        elif i % 10 == 7:
            out.append((key, json.dumps({"id": i, "amount": "12,50"}).encode(),
                        "transforms[1].cast"))
        elif i == 18:
            out.append((key, json.dumps({"id": "eighteen", "amount": "1"}).encode(),
                        "transforms[0].parse_json"))
        else:
            out.append((key, json.dumps({"id": i, "amount": f"{i}.25"}).encode(), None))
    return out


def test_poison_records_go_to_the_dead_letter_topic(
        eddy: Any, spark: Any, tmp_path: Path) -> None:
    create_topic(eddy.bootstrap, "payments", 2)
    inputs = poison_inputs()
    delivered = produce(eddy.bootstrap, "payments", [(k, v) for k, v, _ in inputs])
    out = tmp_path / "out"
    prepared = run_text(spark, f"""
name: payments
source: {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: payments}}
transforms:
  - parse_json: {{schema: "id INT, amount STRING"}}
  - cast: {{amount: DOUBLE}}
sinks:
  - {{type: files, format: parquet, path: "{out}"}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    # the pipeline completed; the good rows are in the sink
    good = [json.loads(v) for _, v, why in inputs if why is None]
    assert parquet_rows(spark, out) == [
        {"id": d["id"], "amount": float(d["amount"])} for d in good]

    # every bad record is in `<name>.dead-letter`, once, as it was produced
    dead = read_topic(eddy.bootstrap, "payments.dead-letter")
    bad = {rec.position: (rec, why) for rec, (_, _, why) in zip(delivered, inputs, strict=True)
           if why is not None}
    assert len(bad) == 19
    assert sorted(d.headers[HEADER_SOURCE].decode() for d in dead) == sorted(bad)
    for d in dead:
        original, why = bad[d.headers[HEADER_SOURCE].decode()]
        assert d.value == original.value  # the original bytes, not a re-encoding
        assert d.key == original.key
        error = d.headers[HEADER_ERROR].decode()
        assert error.startswith(why + ": "), error
        assert d.headers[HEADER_PIPELINE] == b"payments"
        assert d.headers[HEADER_STAGE] == b"transform"
    cast_errors = [d.headers[HEADER_ERROR].decode() for d in dead
                   if d.headers[HEADER_ERROR].startswith(b"transforms[1]")]
    assert len(cast_errors) == 6
    assert all(e == "transforms[1].cast: `amount` value '12,50' is not a valid DOUBLE"
               for e in cast_errors)
    assert sum(b.dead_letters for b in prepared.batches) == len(bad)


def test_null_value_dead_letter_keeps_the_null(eddy: Any, spark: Any, tmp_path: Path) -> None:
    """A record with a null value (a tombstone) that parse_json rejects must reach the
    dead-letter topic with its value null: the original bytes, not `{}`."""
    from eddy.connect.deadletter import KafkaDeadLetters
    from eddy.connect.runtime import runner, source_frames
    from eddy.connect.runtime.spec import load_pipeline_text

    delivered = produce(eddy.bootstrap, "accounts", [(b"gone", None), (b"ok", b'{"id": 1}')])
    pipeline = load_pipeline_text(f"""
name: accounts
source: {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: accounts}}
transforms:
  - parse_json: {{schema: "id INT"}}
sinks:
  - {{type: files, format: parquet, path: "{tmp_path / 'out'}"}}
checkpoint: {tmp_path / "ck"}
""")
    prepared = runner.prepare(spark, pipeline)
    # one micro-batch's worth, run through the runtime's batch step directly
    batch = source_frames.sample(spark, pipeline, 100)
    stats = runner.process_batch(prepared, [], KafkaDeadLetters(
        eddy.bootstrap, "accounts.dead-letter", "accounts"), batch, 0)
    assert stats.dead_letters == 1
    (dead,) = read_topic(eddy.bootstrap, "accounts.dead-letter")
    assert dead.headers[HEADER_SOURCE].decode() == delivered[0].position
    assert dead.headers[HEADER_ERROR] == b"transforms[0].parse_json: `value` is null"
    assert dead.key == b"gone"
    assert dead.value is None, f"the dead letter of a null value carries {dead.value!r}"


def test_sql_transform_after_a_bad_record(eddy: Any, spark: Any, tmp_path: Path) -> None:
    inputs: list[tuple[bytes | None, bytes]] = [
        (b"a", b'{"id": 1, "email": "ann@example.com"}'),
        (b"b", b'{"id": 2, "email": '),
        (b"c", b'{"id": 3, "email": "bob@example.com"}'),
        (b"d", b'{"id": 4, "email": "cy@example.org"}'),
    ]
    delivered = produce(eddy.bootstrap, "users", inputs)
    out = tmp_path / "out"
    run_text(spark, f"""
name: users
source: {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: users}}
transforms:
  - parse_json: {{schema: "id INT, email STRING"}}
  - sql: SELECT id, upper(email) AS email FROM input WHERE id <> 4
sinks:
  - {{type: files, format: parquet, path: "{out}"}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
dead_letter: users-bad
""")
    assert parquet_rows(spark, out) == [{"id": 1, "email": "ANN@EXAMPLE.COM"},
                                        {"id": 3, "email": "BOB@EXAMPLE.COM"}]
    (dead,) = read_topic(eddy.bootstrap, "users-bad")
    assert (dead.key, dead.value) == (b"b", b'{"id": 2, "email": ')
    assert dead.headers[HEADER_SOURCE].decode() == delivered[1].position
    assert dead.headers[HEADER_ERROR].startswith(b"transforms[0].parse_json: malformed JSON")


# ---- files -> stdout ------------------------------------------------------------------------


def test_files_to_stdout(spark: Any, tmp_path: Path, capsys: Any) -> None:
    src = tmp_path / "in"
    src.mkdir()
    docs = [{"id": i, "city": c} for i, c in enumerate(["Lyon", "Oslo", "Lima", "Pune", "Kobe"])]
    (src / "a.json").write_text("".join(json.dumps(d) + "\n" for d in docs[:3]))
    (src / "b.json").write_text("".join(json.dumps(d) + "\n" for d in docs[3:]))
    run_text(spark, f"""
name: files-out
source: {{type: files, format: json, path: "{src}"}}
transforms:
  - filter: "id <> 2"
  - sql: SELECT id, upper(city) AS city FROM input
sinks:
  - {{type: stdout}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert sorted(lines, key=lambda d: d["id"]) == [
        {"id": d["id"], "city": d["city"].upper()} for d in docs if d["id"] != 2]


# ---- a second run with the same checkpoint --------------------------------------------------


def test_second_run_processes_only_new_records(eddy: Any, spark: Any, tmp_path: Path) -> None:
    create_topic(eddy.bootstrap, "ticks", 2)
    out = tmp_path / "out"
    text = f"""
name: ticks
source: {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: ticks}}
transforms:
  - parse_json: {{schema: "id INT"}}
sinks:
  - {{type: files, format: parquet, path: "{out}"}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
"""
    produce(eddy.bootstrap, "ticks",
            [(str(i).encode(), json.dumps({"id": i}).encode()) for i in range(100)])
    first = run_text(spark, text)
    assert [r["id"] for r in parquet_rows(spark, out)] == list(range(100))
    files_after_first = sorted(p.name for p in out.glob("*.parquet"))

    produce(eddy.bootstrap, "ticks",
            [(str(i).encode(), json.dumps({"id": i}).encode()) for i in range(100, 160)])
    second = run_text(spark, text)
    assert second.run_id == first.run_id
    assert [r["id"] for r in parquet_rows(spark, out)] == list(range(160))
    # the first run's files are untouched; the second run only added files
    assert set(files_after_first) <= {p.name for p in out.glob("*.parquet")}
    new_ids = [r["id"] for r in spark.read.parquet(*[
        str(p) for p in out.glob("*.parquet") if p.name not in files_after_first
    ]).collect()]
    assert sorted(new_ids) == list(range(100, 160))

    third = run_text(spark, text)  # nothing new: nothing written
    assert third.run_id == first.run_id
    assert [r["id"] for r in parquet_rows(spark, out)] == list(range(160))
    assert partition_count(eddy.bootstrap, "ticks") == 2
