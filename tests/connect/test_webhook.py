"""Webhook sink: batched JSON POSTs to a real HTTP server, retries, dead letters on a broker."""

from __future__ import annotations

import base64
import datetime as dt
import json
import socket
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from eddy.connect.batch import POSITION_COLUMN, BatchInfo
from eddy.connect.datasources.json_rows import json_converter, row_converter
from eddy.connect.datasources.webhook import (
    MAX_BACKOFF_MS,
    WebhookClient,
    WebhookDataSource,
    WebhookOptions,
)
from eddy.connect.deadletter import HEADER_ERROR, HEADER_PIPELINE, HEADER_SOURCE, HEADER_STAGE
from eddy.connect.sinks.webhook import WebhookBatchSink, WebhookSink


class Recorder(ThreadingHTTPServer):
    """Records the JSON bodies it accepts; answers `fail_status` to the next `fail_times`
    requests (always, when `fail_times` is None); sleeps `delay_s` before answering."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.bodies: list[list[dict[str, Any]]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.attempts = 0
        self.fail_status = 503
        self.fail_times: int | None = 0
        self.delay_s = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook?x=1"

    def rows(self) -> list[dict[str, Any]]:
        return [row for body in self.bodies for row in body]


class Handler(BaseHTTPRequestHandler):
    server: Recorder
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server = self.server
        if server.delay_s:
            time.sleep(server.delay_s)
        with server.lock:
            server.attempts += 1
            fail = server.fail_times is None or server.fail_times > 0
            if fail and server.fail_times is not None:
                server.fail_times -= 1
            if not fail:
                assert self.path == "/hook?x=1"
                server.bodies.append(json.loads(body))
                server.headers_seen.append(dict(self.headers))
        answer = b"nope" if fail else b""
        self.send_response(server.fail_status if fail else 200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def server() -> Iterator[Recorder]:
    srv = Recorder()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield srv
    srv.shutdown()
    thread.join(5)
    srv.server_close()


@pytest.fixture
def webhook_spark(spark: Any) -> Any:
    spark.dataSource.register(WebhookDataSource)
    return spark


def frame(spark: Any, count: int, partitions: int = 2, position: bool = False) -> Any:
    cols = [
        "id",
        "CAST(concat('v', id) AS BINARY) AS text",
        "CASE WHEN id = 0 THEN X'FF00' END AS raw",
        "TIMESTAMP '2024-05-01 12:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts",
    ]
    if position:
        cols.append(f"concat('orders/0@', id) AS {POSITION_COLUMN}")
    return spark.range(0, count, 1, partitions).selectExpr(*cols)


def consume(bootstrap: str, topic: str, count: int, timeout_s: float = 30.0) -> list[Any]:
    """Up to `count` records of `topic` from the start (assigned partitions, no group)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t",
                         "enable.auto.commit": False})
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
    finally:
        consumer.close()
    return out


def test_rows_arrive_once_in_batches_through_retries(webhook_spark: Any, server: Recorder) -> None:
    server.fail_times = 3
    spec = WebhookSink.model_validate({
        "type": "webhook", "url": server.url, "batch_size": 5, "max_retries": 4,
        "backoff_ms": 1, "headers": {"Authorization": "Bearer t0k"},
    })
    sink = WebhookBatchSink(spec, "sink[0]:webhook", "p1", None)
    sink.write(frame(webhook_spark, 23), BatchInfo(0, "run"))
    rows = server.rows()
    assert sorted(r["id"] for r in rows) == list(range(23))
    assert server.attempts == len(server.bodies) + 3
    assert all(1 <= len(b) <= 5 for b in server.bodies)
    assert len(server.bodies) == 6  # 2 tasks: 12 rows -> 5+5+2, 11 rows -> 5+5+1
    first = next(r for r in rows if r["id"] == 0)
    assert first == {"id": 0, "text": "v0", "raw": base64.b64encode(b"\xff\x00").decode(),
                     "ts": "2024-05-01T12:00:00Z"}
    assert next(r for r in rows if r["id"] == 7)["ts"] == "2024-05-01T12:00:07Z"
    for seen in server.headers_seen:
        assert seen["Content-Type"] == "application/json"
        assert seen["Authorization"] == "Bearer t0k"


@pytest.mark.parametrize(("status", "attempts_per_request"), [(500, 3), (400, 1)])
def test_failed_batches_go_to_the_dead_letter_topic(
    webhook_spark: Any, server: Recorder, eddy: Any, status: int, attempts_per_request: int
) -> None:
    server.fail_times = None
    server.fail_status = status
    (
        frame(webhook_spark, 6, partitions=1, position=True).write.format("eddy-webhook")
        .option("url", server.url).option("batch_size", "4").option("max_retries", "2")
        .option("backoff_ms", "1").option("pipeline", "orders-hook")
        .option("stage", "sink[1]:webhook")
        .option("dead_letter_bootstrap", eddy.bootstrap)
        .option("dead_letter_topic", "orders-hook.dead-letter")
        .mode("append").save()
    )
    assert server.bodies == []
    assert server.attempts == 2 * attempts_per_request  # two requests: 4 rows, 2 rows
    msgs = consume(eddy.bootstrap, "orders-hook.dead-letter", 6)
    assert len(msgs) == 6, [(m.value(), m.headers()) for m in msgs]
    by_id = {json.loads(m.value())["id"]: m for m in msgs}
    assert sorted(by_id) == list(range(6))
    for i, msg in by_id.items():
        value = json.loads(msg.value())
        assert POSITION_COLUMN not in value and value["text"] == f"v{i}"
        hdrs = {k: v.decode() for k, v in msg.headers()}
        assert f"HTTP {status}" in hdrs[HEADER_ERROR] and server.url in hdrs[HEADER_ERROR]
        assert hdrs[HEADER_SOURCE] == f"orders/0@{i}"
        assert hdrs[HEADER_PIPELINE] == "orders-hook"
        assert hdrs[HEADER_STAGE] == "sink[1]:webhook"
        assert msg.key() is None


def test_without_dead_letter_target_the_write_fails(
    webhook_spark: Any, server: Recorder
) -> None:
    server.fail_times = None
    server.fail_status = 502
    with pytest.raises(Exception, match="HTTP 502"):
        (
            frame(webhook_spark, 3, partitions=1).write.format("eddy-webhook")
            .option("url", server.url).option("max_retries", "1").option("backoff_ms", "1")
            .mode("append").save()
        )
    assert server.attempts == 2


# ---- the HTTP client, without Spark --------------------------------------------------------


def client(url: str, **kw: Any) -> tuple[WebhookClient, list[float]]:
    sleeps: list[float] = []
    return WebhookClient(WebhookOptions(url=url, **kw), sleep=sleeps.append), sleeps


def test_backoff_doubles_and_is_capped(server: Recorder) -> None:
    server.fail_times = None
    server.fail_status = 429
    c, sleeps = client(server.url, max_retries=6, backoff_ms=5000)
    error = c.post(b"[]")
    assert error is not None and "HTTP 429" in error and "7 attempts" in error
    assert sleeps == [5.0, 10.0, 20.0, 30.0, 30.0, 30.0]
    assert MAX_BACKOFF_MS == 30_000
    assert server.attempts == 7


def test_connection_errors_and_timeouts_are_retried(server: Recorder) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    c, sleeps = client(f"http://127.0.0.1:{closed_port}/", max_retries=2, backoff_ms=10)
    error = c.post(b"[]")
    assert error is not None and "ConnectionRefusedError" in error and sleeps == [0.01, 0.02]

    server.delay_s = 0.3
    c, sleeps = client(server.url, max_retries=1, backoff_ms=1, timeout_ms=50)
    error = c.post(b"[]")
    assert error is not None and "timed out" in error and len(sleeps) == 1

    server.delay_s = 0
    c, _ = client(server.url)
    assert c.post(b'[{"a":1}]') is None and c.post(b'[{"a":2}]') is None
    assert server.rows()[-2:] == [{"a": 1}, {"a": 2}]
    c.close()


def test_options_are_checked() -> None:
    assert WebhookOptions.parse({"url": "http://h:1/x", "headers": '{"A": "b"}',
                                 "batch_size": "7"}).headers == (("A", "b"),)
    for bad, match in [
        ({"url": "ftp://h/"}, "option url"),
        ({"url": "http://h/", "batch_size": "0"}, "batch_size"),
        ({"url": "http://h/", "max_retries": "x"}, "max_retries"),
        ({"url": "http://h/", "headers": "[1]"}, "headers"),
        ({"url": "http://h/", "dead_letter_topic": "t"}, "go together"),
    ]:
        with pytest.raises(ValueError, match=match):
            WebhookOptions.parse(bad)


def test_json_conversion_of_spark_values() -> None:
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("b", T.BinaryType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("ntz", T.TimestampNTZType()),
        T.StructField("d", T.DateType()),
        T.StructField("dec", T.DecimalType(10, 2)),
        T.StructField("big", T.DecimalType(38, 6)),
        T.StructField("f", T.DoubleType()),
        T.StructField("m", T.MapType(T.IntegerType(), T.BinaryType())),
        T.StructField("a", T.ArrayType(T.StructType([T.StructField("k", T.StringType()),
                                                     T.StructField("v", T.BinaryType())]))),
        T.StructField(POSITION_COLUMN, T.StringType()),
    ])
    naive_local = dt.datetime(2024, 1, 2, 3, 4, 5, 6000, tzinfo=dt.UTC).astimezone().replace(
        tzinfo=None
    )
    row = (b"caf\xc3\xa9", naive_local, dt.datetime(2024, 1, 2, 3, 4, 5), dt.date(2024, 1, 2),
           Decimal("12.50"), Decimal("123456789012345678901234.000001"), float("nan"),
           {1: b"\x80"}, [("h", b"x"), ("g", None)], "t/0@1")
    out = row_converter(schema, exclude=[POSITION_COLUMN])(row)
    assert out == {
        "b": "café", "ts": "2024-01-02T03:04:05.006000Z", "ntz": "2024-01-02T03:04:05",
        "d": "2024-01-02", "dec": 12.5, "big": "123456789012345678901234.000001", "f": "NaN",
        "m": {"1": "gA=="}, "a": [{"k": "h", "v": "x"}, {"k": "g", "v": None}],
    }
    assert json_converter(T.BinaryType())(None) is None
