"""HTTP webhook sink: rows POSTed as JSON arrays, as the Spark data source `eddy-webhook`.

`df.write.format("eddy-webhook").option("url", ...).mode("append").save()` runs on
the executors: each task POSTs its rows as JSON arrays of `batch_size` objects
(Content-Type application/json) over one keep-alive connection (http.client: no
proxies, no redirects followed). Values become JSON as in `json_converter`
(eddy.connect.datasources.json_rows): binary as UTF-8 text when it decodes, else base64;
timestamps ISO 8601 in UTC.

A request is retried on connection errors, timeouts, 408, 429 and 5xx with
exponential backoff (`backoff_ms`, doubled each time, at most MAX_BACKOFF_MS, or
the server's Retry-After if longer), up to `max_retries` times; other statuses
(3xx, 4xx) are not retried. Rows of a request that still failed go to the
dead-letter topic (`dead_letter_bootstrap`, `dead_letter_topic`) with the error,
source position (`_eddy_position` column, when present), pipeline and stage in
their headers and the row's JSON as value. Without a dead-letter target the task
raises, so the write fails. Delivery is at-least-once: a failed task that Spark
runs again POSTs its rows again.

Options: url (required), batch_size (500), max_retries (3), backoff_ms (200),
timeout_ms (10000), headers (a JSON object), pipeline, stage (`webhook`),
dead_letter_bootstrap, dead_letter_topic.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage

from eddy.connect import deadletter
from eddy.connect.batch import INTERNAL_COLUMNS, POSITION_COLUMN
from eddy.connect.datasources.json_rows import dumps, row_converter
from eddy.connect.options import int_option

log = logging.getLogger(__name__)

FORMAT = "eddy-webhook"
#: longest wait between two attempts of one request
MAX_BACKOFF_MS = 30_000
#: dead letters a task buffers before producing them
DEAD_LETTER_FLUSH = 5_000
#: bytes of an error response kept for the dead-letter reason
ERROR_BODY_CHARS = 200
_READ_LIMIT = 1 << 16
_RETRY_STATUSES = frozenset({408, 429})

# ---- options ----------------------------------------------------------------------------------


def _int_option(options: Mapping[str, str], name: str, default: int, low: int) -> int:
    value = int_option(options, name, default, low, label=f"{FORMAT}: ")
    assert value is not None
    return value


@dataclass(frozen=True)
class WebhookOptions:
    """The `eddy-webhook` options, checked."""

    url: str
    batch_size: int = 500
    max_retries: int = 3
    backoff_ms: int = 200
    timeout_ms: int = 10_000
    headers: tuple[tuple[str, str], ...] = ()
    pipeline: str = ""
    stage: str = "webhook"
    dead_letter_bootstrap: str | None = None
    dead_letter_topic: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WebhookOptions:
        opts = {k.lower(): v for k, v in options.items()}
        url = opts.get("url") or ""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{FORMAT}: option url: expected an http(s):// URL, got {url!r}")
        raw_headers = opts.get("headers") or "{}"
        try:
            hdrs = json.loads(raw_headers)
        except ValueError as exc:
            raise ValueError(f"{FORMAT}: option headers: not valid JSON: {exc}") from None
        if not isinstance(hdrs, dict) or not all(isinstance(v, str) for v in hdrs.values()):
            raise ValueError(f"{FORMAT}: option headers: expected a JSON object of strings")
        bootstrap = opts.get("dead_letter_bootstrap") or None
        topic = opts.get("dead_letter_topic") or None
        if (bootstrap is None) != (topic is None):
            raise ValueError(
                f"{FORMAT}: options dead_letter_bootstrap and dead_letter_topic go together"
            )
        return cls(
            url=url,
            batch_size=_int_option(opts, "batch_size", 500, 1),
            max_retries=_int_option(opts, "max_retries", 3, 0),
            backoff_ms=_int_option(opts, "backoff_ms", 200, 0),
            timeout_ms=_int_option(opts, "timeout_ms", 10_000, 1),
            headers=tuple((str(k), v) for k, v in hdrs.items()),
            pipeline=opts.get("pipeline", ""),
            stage=opts.get("stage") or "webhook",
            dead_letter_bootstrap=bootstrap,
            dead_letter_topic=topic,
        )


# ---- HTTP -------------------------------------------------------------------------------------


@dataclass
class _Outcome:
    ok: bool
    retry: bool
    error: str
    retry_after_ms: int = 0


class WebhookClient:
    """POSTs JSON bodies to one URL over a keep-alive connection, with retries."""

    def __init__(self, options: WebhookOptions,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.options = options
        parts = urlsplit(options.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = {"Content-Type": "application/json", "Accept": "*/*"}
        self._headers.update(dict(options.headers))
        self._conn: http.client.HTTPConnection | None = None
        self._sleep = sleep
        self.requests = 0
        self.retries = 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            timeout = self.options.timeout_ms / 1000
            if self._https:
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        return self._conn

    def _attempt(self, body: bytes) -> _Outcome:
        url = self.options.url
        for _ in range(2):  # once more on a fresh connection if a kept-alive one was stale
            reused = self._conn is not None
            conn = self._connection()
            self.requests += 1
            try:
                conn.request("POST", self._target, body=body, headers=self._headers)
                resp = conn.getresponse()
                text = resp.read(_READ_LIMIT)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                self.close()
                if reused:
                    continue
                return _Outcome(False, True, f"POST {url}: {type(exc).__name__}: {exc}")
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                what = "timed out" if isinstance(exc, TimeoutError) else (
                    f"{type(exc).__name__}: {exc}"
                )
                return _Outcome(False, True, f"POST {url}: {what}")
            if resp.will_close or not resp.isclosed():
                self.close()
            status = resp.status
            if 200 <= status < 300:
                return _Outcome(True, False, "")
            snippet = text[:ERROR_BODY_CHARS].decode("utf-8", "replace").strip()
            error = f"POST {url}: HTTP {status} {resp.reason}" + (f": {snippet}" if snippet else "")
            retry = status >= 500 or status in _RETRY_STATUSES
            return _Outcome(False, retry, error, _retry_after_ms(resp.getheader("Retry-After")))
        return _Outcome(False, True, f"POST {url}: connection closed by the server")

    def post(self, body: bytes) -> str | None:
        """POST with retries; None when delivered, else the last error."""
        delay = self.options.backoff_ms
        attempts = self.options.max_retries + 1
        for attempt in range(1, attempts + 1):
            outcome = self._attempt(body)
            if outcome.ok:
                return None
            if not outcome.retry or attempt == attempts:
                tries = f"{attempt} attempt" + ("s" if attempt > 1 else "")
                return f"{outcome.error} (gave up after {tries})"
            self.retries += 1
            wait = min(max(delay, outcome.retry_after_ms), MAX_BACKOFF_MS)
            if wait:
                self._sleep(wait / 1000)
            delay = min(delay * 2, MAX_BACKOFF_MS)
        raise AssertionError("unreachable")


def _retry_after_ms(raw: str | None) -> int:
    if raw and raw.strip().isdigit():
        return int(raw.strip()) * 1000
    return 0


# ---- the data source --------------------------------------------------------------------------


@dataclass
class WebhookCommit(WriterCommitMessage):
    rows: int
    requests: int
    retries: int
    dead_letters: int


class WebhookDataSource(DataSource):
    """`format("eddy-webhook")`: batch writes POSTing rows as JSON arrays."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def writer(self, schema: Any, overwrite: bool) -> WebhookWriter:
        return WebhookWriter(WebhookOptions.parse(self.options), schema)


class WebhookWriter(DataSourceWriter):
    """Runs in each task: POSTs its rows, dead-letters what cannot be delivered."""

    def __init__(self, options: WebhookOptions, schema: Any) -> None:
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WebhookCommit:
        opts = self.options
        convert = row_converter(self.schema, exclude=INTERNAL_COLUMNS)
        names = self.schema.fieldNames()
        pos_index = names.index(POSITION_COLUMN) if POSITION_COLUMN in names else None
        client = WebhookClient(opts)
        dead: list[deadletter.Record] = []
        rows = dead_count = 0
        chunk: list[str] = []
        positions: list[str | None] = []

        def flush_dead() -> None:
            nonlocal dead_count
            if dead:
                assert opts.dead_letter_bootstrap and opts.dead_letter_topic
                deadletter.produce(opts.dead_letter_bootstrap, opts.dead_letter_topic, dead)
                dead_count += len(dead)
                dead.clear()

        def send() -> None:
            body = ("[" + ",".join(chunk) + "]").encode()
            error = client.post(body)
            if error is not None:
                if opts.dead_letter_topic is None:
                    raise RuntimeError(f"{FORMAT}: {error}")
                for text, position in zip(chunk, positions, strict=True):
                    hdrs = deadletter.headers(error, position, opts.pipeline, opts.stage)
                    dead.append((None, text.encode(), hdrs))
                if len(dead) >= DEAD_LETTER_FLUSH:
                    flush_dead()
            chunk.clear()
            positions.clear()

        try:
            for row in iterator:
                rows += 1
                chunk.append(dumps(convert(row)))
                positions.append(None if pos_index is None else row[pos_index])
                if len(chunk) >= opts.batch_size:
                    send()
            if chunk:
                send()
            flush_dead()
        finally:
            client.close()
        return WebhookCommit(rows, client.requests, client.retries, dead_count)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, WebhookCommit)]
        log.info(
            "%s %s: %d rows, %d requests, %d retries, %d dead letters", FORMAT,
            self.options.url, sum(m.rows for m in done), sum(m.requests for m in done),
            sum(m.retries for m in done), sum(m.dead_letters for m in done),
        )
