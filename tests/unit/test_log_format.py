"""log.format: the JSON formatter's lines (keys, trace context, exceptions) and the text
default."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

from eddy.config import ConfigError, load_config
from eddy.telemetry.log_format import TEXT_FORMAT, JsonFormatter, formatter


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys
            exc_info = sys.exc_info()
    return logging.LogRecord("eddy.test", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_a_json_line_has_time_level_logger_message() -> None:
    line = json.loads(JsonFormatter().format(_record("peer %s sent %d bytes", "1.2.3.4", 7)))
    assert line["level"] == "WARNING"
    assert line["logger"] == "eddy.test"
    assert line["message"] == "peer 1.2.3.4 sent 7 bytes"
    assert line["ts"].endswith("Z") and "T" in line["ts"] and len(line["ts"]) == 24
    assert "trace_id" not in line and "exception" not in line


def test_peer_bytes_stay_inside_the_message() -> None:
    hostile = 'x"}\n{"level":"ERROR","logger":"forged"\u2028\x00'
    text = JsonFormatter().format(_record("bad frame from %s", hostile))
    assert "\n" not in text  # one line per record, whatever the message holds
    line = json.loads(text)
    assert line["message"] == f"bad frame from {hostile}"
    assert line["level"] == "WARNING" and line["logger"] == "eddy.test"


def test_the_current_span_gives_trace_and_span_ids() -> None:
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("work") as span:
        line = json.loads(JsonFormatter().format(_record("inside")))
        ctx = span.get_span_context()
    assert line["trace_id"] == f"{ctx.trace_id:032x}"
    assert line["span_id"] == f"{ctx.span_id:016x}"
    outside = json.loads(JsonFormatter().format(_record("outside")))
    assert "trace_id" not in outside


def test_an_exception_is_one_field() -> None:
    line = json.loads(JsonFormatter().format(_record("failed", exc=True)))
    assert line["exception"].startswith("Traceback")
    assert "ValueError: boom" in line["exception"]


def test_text_is_the_default_and_json_is_chosen_by_log_format() -> None:
    assert load_config(env={}).log_format == "text"
    assert formatter("text")._fmt == TEXT_FORMAT
    assert isinstance(formatter(load_config(env={}, overrides={"log.format": "json"}).log_format),
                      JsonFormatter)
    with pytest.raises(ConfigError, match=r"log\.format"):
        load_config(env={}, overrides={"log.format": "xml"})
