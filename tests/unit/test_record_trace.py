"""The producer's W3C traceparent read from the first record of a produce request (bounded,
safe on hostile bytes), the produce span made its child, and when the OTEL_* environment
turns traces on."""

from __future__ import annotations

import random
import secrets
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from batch_builder import GZIP, LZ4, NONE, SNAPPY, ZSTD, Rec, build_batch
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from eddy.telemetry import otel_setup, record_trace, tracing
from eddy.telemetry.record_trace import (
    first_record_header,
    parse_traceparent,
    remote_parent,
)

TRACE_ID = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
SPAN_ID = bytes.fromhex("b7ad6b7169203331")
TP = f"00-{TRACE_ID.hex()}-{SPAN_ID.hex()}-01".encode()


def _batch(codec: int = NONE, first_headers: tuple[tuple[str, bytes | None], ...] = (
        ("a", b"1"), ("traceparent", TP)), n: int = 3) -> bytes:
    recs = [Rec(b"v0", key=b"k", headers=first_headers)]
    recs += [Rec(f"v{i}".encode(), headers=(("traceparent", b"other"),)) for i in range(1, n)]
    return build_batch(recs, compression=codec)


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_the_first_records_traceparent_is_found_in_any_codec(codec: int) -> None:
    assert first_record_header(_batch(codec), b"traceparent") == TP
    assert first_record_header(_batch(codec), b"a") == b"1"
    assert first_record_header(_batch(codec), b"missing") is None


def test_only_the_first_record_is_read() -> None:
    # the second record has a traceparent header, the first none: nothing is found
    assert first_record_header(_batch(first_headers=()), b"traceparent") is None
    assert first_record_header(_batch(first_headers=(("traceparent", None),)),
                               b"traceparent") is None


def test_headers_after_the_scan_bound_are_not_looked_at() -> None:
    many = tuple((f"h{i}", b"x") for i in range(record_trace.MAX_HEADERS))
    assert first_record_header(_batch(first_headers=(*many, ("traceparent", TP))),
                               b"traceparent") is None
    assert first_record_header(_batch(first_headers=(*many[1:], ("traceparent", TP))),
                               b"traceparent") == TP


def test_hostile_bytes_give_none_never_an_error() -> None:
    rng = random.Random(17)
    for codec in (NONE, LZ4):
        good = _batch(codec)
        for cut in range(len(good)):  # every truncation
            assert first_record_header(good[:cut], b"traceparent") in (None, TP)
        for _ in range(3000):  # random byte flips anywhere (lengths, counts, varints)
            bad = bytearray(good)
            for _ in range(rng.randint(1, 4)):
                bad[rng.randrange(len(bad))] = rng.randrange(256)
            value = first_record_header(bytes(bad), b"traceparent")
            assert value is None or len(value) <= len(bad)
    for junk in (b"", b"\x00" * 61, b"\xff" * 200, None):
        assert first_record_header(junk, b"traceparent") is None


def test_a_lying_record_count_or_length_is_refused() -> None:
    one = build_batch([Rec(b"v", headers=(("a", b"1"),))])
    assert first_record_header(one, b"a") == b"1"
    huge = bytearray(one)
    huge[61] = 0x7E  # the record's length varint: 63, more than the batch holds
    assert first_record_header(bytes(huge), b"a") is None
    assert first_record_header(one[:-1], b"a") is None  # batch length past the bytes
    lying = bytearray(one)
    lying[-4] = 0x7E  # the header key's length: past the record
    assert first_record_header(bytes(lying), b"a") is None
    assert first_record_header(build_batch([Rec(b"v")], record_count=0), b"x") is None
    assert first_record_header(build_batch([Rec(b"v")], magic=1), b"x") is None


def test_a_large_compressed_batch_is_not_decompressed(monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    monkeypatch.setattr(record_trace, "MAX_COMPRESSED_BATCH", 16)
    assert first_record_header(_batch(ZSTD), b"traceparent") is None
    assert first_record_header(_batch(NONE), b"traceparent") == TP  # not compressed: read


@pytest.mark.parametrize(("value", "ok"), [
    (TP, True),
    (TP[:-2] + b"00", True),  # not sampled: still a parent
    (b"01-" + TP[3:] + b"-future", True),  # a later version may append fields
    (TP + b"-x", False),  # version 00 has exactly 55 characters
    (TP.upper(), False),
    (b"ff" + TP[2:], False),
    (f"00-{'0' * 32}-{SPAN_ID.hex()}-01".encode(), False),
    (f"00-{TRACE_ID.hex()}-{'0' * 16}-01".encode(), False),
    (TP.replace(b"-", b"_"), False),
    (TP[:-1], False),
    (TP[:10] + "é".encode() + TP[12:], False),
    (b"00-" + b"g" * 32 + TP[35:], False),
    (b"", False),
])
def test_traceparent_parsing(value: bytes, ok: bool) -> None:
    sc = parse_traceparent(value)
    assert (sc is not None) == ok
    if ok and sc is not None:
        assert sc.trace_id.to_bytes(16, "big") == TRACE_ID
        assert sc.span_id.to_bytes(8, "big") == SPAN_ID
        assert sc.is_remote


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """tracing's spans into memory (its tracer swapped; the global provider untouched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("eddy"))
    yield exporter
    provider.shutdown()


def _produce_body(records: bytes | None) -> Any:
    pd = SimpleNamespace(index=2, records=records)
    return SimpleNamespace(acks=-1, topic_data=[SimpleNamespace(name="t", partition_data=[pd])])


def test_the_produce_span_continues_the_producers_trace(spans: InMemorySpanExporter) -> None:
    with tracing.produce_span(_produce_body(_batch(LZ4))):
        pass
    with tracing.produce_span(_produce_body(_batch(first_headers=()))):
        pass
    child, root = spans.get_finished_spans()
    assert child.name == root.name == "eddy.broker.produce"
    assert child.context is not None and child.parent is not None
    assert child.context.trace_id == int.from_bytes(TRACE_ID, "big")
    assert child.parent.span_id == int.from_bytes(SPAN_ID, "big")
    assert child.attributes is not None
    assert dict(child.attributes) == {"acks": -1, "topics": 1, "topic": "t", "partition": 2}
    assert root.parent is None


def test_a_mesh_span_already_current_is_linked(spans: InMemorySpanExporter) -> None:
    here = trace.SpanContext(trace_id=0x42, span_id=0x43, is_remote=True,
                             trace_flags=trace.TraceFlags(1))
    with trace.use_span(trace.NonRecordingSpan(here)), \
            tracing.produce_span(_produce_body(_batch())):
        pass
    (s,) = spans.get_finished_spans()
    assert s.parent is not None and s.parent.span_id == int.from_bytes(SPAN_ID, "big")
    assert [link.context.span_id for link in s.links] == [0x43]


def test_remote_parent_is_none_without_a_traceparent() -> None:
    assert remote_parent(_batch(first_headers=(("traceparent", b"junk"),))) is None
    ctx = remote_parent(_batch())
    assert ctx is not None
    sc = trace.get_current_span(ctx).get_span_context()
    assert sc.span_id == int.from_bytes(SPAN_ID, "big") and sc.is_remote


@pytest.mark.parametrize(("env", "wanted"), [
    ({}, []),
    ({"OTEL_SERVICE_NAME": "x"}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://h:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ["otlp", "console"]),
    ({"OTEL_TRACES_EXPORTER": "zipkin"}, []),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"}, []),
    ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}, []),
    ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"}, ["otlp"]),
])
def test_the_environment_decides(env: dict[str, str], wanted: list[str]) -> None:
    assert otel_setup.exporters_wanted(env) == wanted


def test_no_traceparent_work_is_done_while_tracing_is_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from eddy.broker.handlers import produce

    called: list[Any] = []
    monkeypatch.setattr(tracing, "produce_span", lambda body: called.append(body))

    async def inner(broker: Any, req: Any) -> str:
        return "answer"

    monkeypatch.setattr(produce, "_handle", inner)
    assert tracing.enabled is False
    req = SimpleNamespace(body=_produce_body(secrets.token_bytes(100)))
    assert asyncio.run(produce.handle(None, req)) == "answer"  # type: ignore[arg-type]
    assert called == []
