"""Spans around handlers, through the OpenTelemetry API: a no-op until an SDK is set up."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace

_tracer = trace.get_tracer("eddy")


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    with _tracer.start_as_current_span(name, attributes=attributes or None) as s:
        yield s
