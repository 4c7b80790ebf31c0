"""Mesh stream frames (eddy.mesh.frames): framing, trace context, substrate messages."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.trace import SpanContext, TraceFlags

from eddy import postcard
from eddy.mesh.frames import (
    POINTER_THRESHOLD,
    TAG_CONTROL_RPC,
    TAG_GOSSIP,
    TAG_KAFKA_OP,
    TAG_PING,
    TAG_POINTER_PULL,
    Frame,
    FrameError,
    FrameReader,
    Hello,
    KafkaOpRequest,
    KafkaOpResponse,
    PeerInfo,
    Ping,
    PingFrame,
    Pointer,
    Pong,
    PullRequest,
    PullResponse,
    TraceContext,
    current_trace_context,
    encode_frame,
    from_span_context,
    parse_frame,
    pointer_hash,
    remote_context,
    tag_class,
    to_span_context,
)

TC = TraceContext(trace_id=bytes(range(1, 17)), span_id=bytes(range(0xA1, 0xA9)), flags=1)

traces = st.none() | st.builds(
    TraceContext,
    trace_id=st.binary(min_size=16, max_size=16).filter(any),
    span_id=st.binary(min_size=8, max_size=8).filter(any),
    flags=st.integers(0, 255),
)


def _feed_all(reader: FrameReader, data: bytes, cuts: list[int]) -> None:
    prev = 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        reader.feed(data[prev:cut])
        prev = cut
    reader.feed(data[prev:])


# -- framing -----------------------------------------------------------------------------------
def test_ping_frame_vector() -> None:
    payload = postcard.encode(Ping(nonce=1, sent_ms=300))
    # PingFrame enum: Ping is variant 0 -> 00; nonce u64 1 -> 01; sent_ms u64 300 -> AC 02
    assert payload == b"\x00\x01\xac\x02"
    wire = (b"\x10"            # TAG_PING
            + bytes(32)        # no trace context: 32 zero bytes
            + b"\x04"          # payload length 4 (LEB128)
            + b"\x00\x01\xac\x02")
    assert encode_frame(TAG_PING, payload) == wire
    assert parse_frame(wire, 1024) == Frame(TAG_PING, None, payload)
    assert postcard.decode(PingFrame, payload) == Ping(1, 300)  # type: ignore[arg-type]


def test_trace_header_vector() -> None:
    wire = encode_frame(TAG_GOSSIP, b"", TC)
    assert wire == (b"\x03"                        # TAG_GOSSIP
                    + b"\x00"                      # trace context version 0
                    + bytes(range(1, 17))          # trace_id
                    + bytes(range(0xA1, 0xA9))     # span_id
                    + b"\x01"                      # flags: sampled
                    + bytes(6)                     # reserved
                    + b"\x00")                     # length 0, empty payload
    assert parse_frame(wire, 0) == Frame(TAG_GOSSIP, TC, b"")


@given(st.integers(1, 255), st.binary(max_size=300), traces,
       st.lists(st.integers(0, 400), max_size=6))
def test_frame_round_trip(tag: int, payload: bytes, tc: TraceContext | None,
                          cuts: list[int]) -> None:
    wire = encode_frame(tag, payload, tc)
    assert parse_frame(wire, len(payload)) == Frame(tag, tc, payload)
    reader = FrameReader(len(payload))
    _feed_all(reader, wire, cuts)  # any split into chunks gives the same frame
    assert reader.finish() == Frame(tag, tc, payload)


@given(st.binary(max_size=200), traces)
def test_every_truncation_fails_at_finish(payload: bytes, tc: TraceContext | None) -> None:
    wire = encode_frame(TAG_KAFKA_OP, payload, tc)
    for n in range(len(wire)):
        reader = FrameReader(1024)
        reader.feed(wire[:n])
        with pytest.raises(FrameError) as info:
            reader.finish()
        assert info.value.reason == "truncated"


def test_oversized_rejected_after_the_header_alone() -> None:
    wire = encode_frame(TAG_KAFKA_OP, bytes(5000), TC)
    header = wire[:35]  # tag, trace, 2-byte length varint (5000 = 88 27)
    assert header[33:] == b"\x88\x27"
    reader = FrameReader(max_payload=4096)
    reader.feed(header[:34])  # the varint is not complete yet
    with pytest.raises(FrameError) as info:
        reader.feed(header[34:])
    assert info.value.reason == "oversized"
    assert reader.buffered <= 35
    with pytest.raises(FrameError):  # the reader stays failed
        reader.finish()


def test_announced_huge_length_rejected_before_payload() -> None:
    reader = FrameReader(1 << 20)
    with pytest.raises(FrameError) as info:
        reader.feed(b"\x11" + bytes(32) + b"\xff\xff\xff\xff\x0f")  # length 2^32-1
    assert info.value.reason == "oversized"


def test_trailing_bytes_rejected_when_fed() -> None:
    wire = encode_frame(TAG_PING, b"abc")
    reader = FrameReader(16)
    reader.feed(wire)
    with pytest.raises(FrameError) as info:
        reader.feed(b"x")
    assert info.value.reason == "trailing_bytes"
    with pytest.raises(FrameError) as info:
        parse_frame(wire + b"x", 16)
    assert info.value.reason == "trailing_bytes"
    assert FrameReader(16).buffered == 0


def test_reserved_tag_rejected_on_first_byte() -> None:
    reader = FrameReader(16)
    with pytest.raises(FrameError) as info:
        reader.feed(b"\x00")
    assert info.value.reason == "reserved_tag"
    with pytest.raises(ValueError, match="reserved"):
        encode_frame(0, b"")


def test_unknown_tag_parses() -> None:
    frame = parse_frame(encode_frame(0x95, b"\x01\x02"), 16)
    assert frame == Frame(0x95, None, b"\x01\x02")
    assert tag_class(frame.tag) == "extension"


@pytest.mark.parametrize(("length", "reason"), [
    (b"\x80\x00", "bad_length"),                    # 0 in two bytes: not minimal
    (b"\x80\x80\x80\x80\x80\x01", "bad_length"),    # a 6-byte varint
    (b"\xff\xff\xff\xff\x1f", "bad_length"),        # > 2^32-1
])
def test_bad_length(length: bytes, reason: str) -> None:
    with pytest.raises(FrameError) as info:
        parse_frame(b"\x10" + bytes(32) + length + bytes(8), 1 << 30)
    assert info.value.reason == reason


@pytest.mark.parametrize("trace_bytes", [
    b"\x01" + bytes(range(1, 17)) + bytes(range(1, 9)) + bytes(7),  # version 1
    b"\x00" + bytes(16) + bytes(range(1, 9)) + bytes(7),            # zero trace_id
    b"\x00" + bytes(range(1, 17)) + bytes(8) + bytes(7),            # zero span_id
    b"\x00" + bytes(range(1, 17)) + bytes(range(1, 9)) + bytes(6) + b"\x01",  # reserved set
    b"\x00" * 25 + b"\x01" + bytes(6),                               # flags but no ids
])
def test_bad_trace(trace_bytes: bytes) -> None:
    assert len(trace_bytes) == 32
    with pytest.raises(FrameError) as info:
        FrameReader(16).feed(b"\x10" + trace_bytes)  # no length byte needed
    assert info.value.reason == "bad_trace"


def test_tag_table() -> None:
    assert (TAG_POINTER_PULL, TAG_GOSSIP, TAG_CONTROL_RPC, TAG_PING, TAG_KAFKA_OP) == (
        0x01, 0x03, 0x04, 0x10, 0x11)
    assert [tag_class(t) for t in (0x00, 0x01, 0x0F, 0x10, 0x7F, 0x80, 0xFF)] == [
        "reserved", "control", "control", "data", "data", "extension", "extension"]


# -- trace context and OpenTelemetry -----------------------------------------------------------
@given(traces)
def test_trace_context_pack_round_trip(tc: TraceContext | None) -> None:
    packed = tc.pack() if tc else bytes(32)
    assert len(packed) == 32
    assert TraceContext.unpack(packed) == tc


def test_span_context_round_trip() -> None:
    sc = to_span_context(TC)
    assert sc.trace_id == int.from_bytes(TC.trace_id, "big")
    assert sc.span_id == int.from_bytes(TC.span_id, "big")
    assert sc.trace_flags == TraceFlags(1) and sc.trace_flags.sampled and sc.is_remote
    assert from_span_context(sc) == TC
    assert from_span_context(SpanContext(0, 0, False)) is None


def test_receiver_continues_the_senders_trace() -> None:
    assert current_trace_context() is None  # no span: nothing to send
    ctx = remote_context(TC)
    sc = trace.get_current_span(ctx).get_span_context()
    assert (sc.trace_id, sc.span_id, int(sc.trace_flags), sc.is_remote) == (
        int.from_bytes(TC.trace_id, "big"), int.from_bytes(TC.span_id, "big"), 1, True)
    # inside that context, an outgoing frame carries the same trace context
    span = trace.NonRecordingSpan(sc)
    with trace.use_span(span):
        assert current_trace_context() == TC


# -- messages ----------------------------------------------------------------------------------
node_ids = st.binary(min_size=32, max_size=32)
short = st.text(max_size=30)
i32s = st.integers(-(2**31), 2**31 - 1)
u64s = st.integers(0, 2**64 - 1)
peer_infos = st.builds(PeerInfo, node_id=node_ids, kafka_node_id=i32s, mesh_addr=short,
                       kafka_addr=short, roles=st.lists(short, max_size=3).map(tuple),
                       rack=st.none() | short)
ping_frames = st.one_of(
    st.builds(Ping, nonce=u64s, sent_ms=u64s),
    st.builds(Pong, nonce=u64s, sent_ms=u64s, peers=st.lists(peer_infos, max_size=4).map(tuple)),
    st.builds(Hello, node_id=node_ids, kafka_node_id=i32s,
              roles=st.lists(short, max_size=3).map(tuple),
              addresses=st.lists(short, max_size=3).map(tuple), rack=st.none() | short,
              version=short),
)


@given(ping_frames, traces)
def test_ping_frame_messages_round_trip(msg: Ping | Pong | Hello, tc: TraceContext | None) -> None:
    wire = encode_frame(TAG_PING, postcard.encode(msg), tc)
    frame = parse_frame(wire, 1 << 16)
    assert frame.trace == tc
    assert postcard.decode(PingFrame, frame.payload) == msg  # type: ignore[arg-type]
    assert postcard.decode(type(msg), frame.payload) == msg


@given(st.builds(KafkaOpRequest, correlation_id=u64s, op=st.integers(0, 255), org_id=u64s,
                 timeout_ms=st.integers(0, 2**32 - 1), body=st.binary(max_size=100)),
       st.builds(KafkaOpResponse, correlation_id=u64s, op=st.integers(0, 255),
                 status=st.integers(0, 4), body=st.binary(max_size=100), message=short))
def test_kafka_op_round_trip(req: KafkaOpRequest, resp: KafkaOpResponse) -> None:
    assert postcard.decode(KafkaOpRequest, postcard.encode(req)) == req
    assert postcard.decode(KafkaOpResponse, postcard.encode(resp)) == resp


def test_pointer_messages() -> None:
    payload = b"x" * (POINTER_THRESHOLD + 1)
    digest = pointer_hash(payload)
    assert digest == hashlib.blake2b(payload, digest_size=32).digest()
    ptr = Pointer(hash=digest, size=len(payload), source=bytes(range(32)))
    assert postcard.decode(Pointer, postcard.encode(ptr)) == ptr
    assert postcard.decode(PullRequest, postcard.encode(PullRequest(digest))) == PullRequest(digest)
    for resp in (PullResponse(digest, payload), PullResponse(digest, None)):
        assert postcard.decode(PullResponse, postcard.encode(resp)) == resp
    # PullResponse(None): hash, then Option tag 00
    assert postcard.encode(PullResponse(digest, None)) == digest + b"\x00"
