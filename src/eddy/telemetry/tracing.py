"""Spans around handlers, through the OpenTelemetry API: a no-op until an SDK is set up
(eddy.telemetry.otel_setup, when the standard OTEL_* environment asks for traces).

Group and admin handlers open their spans with `span`. Produce and fetch are the hot path:
their handlers test `enabled` (one module attribute read) and only then open a span with
`produce_span` / `fetch_span`; nothing else runs for them while tracing is off. A produce
span continues the producer's trace when the request's first record carries a W3C
`traceparent` header (eddy.telemetry.record_trace reads it); otherwise the SDK's sampler
(OTEL_TRACES_SAMPLER) decides whether a root span is recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from opentelemetry import trace

_tracer = trace.get_tracer("eddy")

#: True while an SDK is set up; produce and fetch open no span at all when it is False
enabled = False

PRODUCE_SPAN = "eddy.broker.produce"
FETCH_SPAN = "eddy.broker.fetch"


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    with _tracer.start_as_current_span(name, attributes=attributes or None) as s:
        yield s


def _first_partition(topic_data: Any) -> tuple[str, Any] | None:
    """(topic name, first partition entry) of a Produce request's first topic that has one."""
    for t in topic_data:
        for p in t.partition_data:
            return str(t.name), p
    return None


def produce_span(body: Any) -> AbstractContextManager[Any]:
    """The span of one Produce request, a child of the producer's span when the first
    record of the request carries a `traceparent` header. Only called when `enabled`."""
    from eddy.telemetry.record_trace import remote_parent  # only ever imported with the SDK

    first = _first_partition(body.topic_data)
    attributes: dict[str, Any] = {"acks": int(body.acks),
                                  "topics": len(body.topic_data)}
    parent = None
    if first is not None:
        attributes["topic"], pd = first[0], first[1]
        attributes["partition"] = int(pd.index)
        parent = remote_parent(pd.records)
    links = None
    if parent is not None:
        # a span already current (a gateway's op served over the mesh) is linked to: the
        # produce span itself continues the producer's trace
        here = trace.get_current_span().get_span_context()
        links = [trace.Link(here)] if here.is_valid else None
    return _tracer.start_as_current_span(PRODUCE_SPAN, context=parent, links=links,
                                         kind=trace.SpanKind.SERVER, attributes=attributes)


def fetch_span(body: Any, version: int) -> AbstractContextManager[Any]:
    """The span of one Fetch request (the sampler decides). Only called when `enabled`."""
    attributes: dict[str, Any] = {"topics": len(body.topics)}
    if body.topics and version < 13:  # from v13 topics are named by id
        attributes["topic"] = str(body.topics[0].topic)
    return _tracer.start_as_current_span(FETCH_SPAN, kind=trace.SpanKind.SERVER,
                                         attributes=attributes)
