"""How a process's log lines look: ``log.format=text`` (the default: time, level, logger,
message) or ``json``, one JSON object per line for log collectors, with the trace and span
ids of the span current when the line was logged (OpenTelemetry's, when tracing is on).

A JSON line has ``ts`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger``,
``message``, then ``trace_id`` / ``span_id`` (32 / 16 lower-case hex digits, as in a W3C
``traceparent``) when a valid span is current, and ``exception`` (the formatted traceback)
when one was logged. Nothing a peer sends reaches a key: peers' bytes only ever appear in
``message``, escaped by ``json.dumps``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Literal

from opentelemetry import trace

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, with the current span's trace context."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            line["trace_id"] = format(ctx.trace_id, "032x")
            line["span_id"] = format(ctx.span_id, "016x")
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _iso_utc(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def formatter(fmt: LogFormat) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


def configure(level: str | int, fmt: LogFormat) -> None:
    """The root logger writes to stderr at ``level`` in ``fmt`` (replacing any handler a
    library set up before)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
