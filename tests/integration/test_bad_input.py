"""Bad input over raw sockets: garbage, truncated, oversized and mutated frames. After each,
the broker is alive, a real client (confluent-kafka) still produces and consumes, and data
written before is intact."""

from __future__ import annotations

import socket
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import EddyProcess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka_helpers import (
    api_versions_ok,
    batch_builder,
    connect,
    consume_all,
    create_topic,
    parse_api_versions_v0,
    produce,
    read_response,
    send_then_eof,
    wait_closed_by_broker,
)

bb = batch_builder
MAX_REQUEST = 104_857_600  # socket.request.max.bytes default (100 MiB)
FUZZ = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _batch(values: list[bytes]) -> bytes:
    return bb.build_batch([bb.Rec(v) for v in values], base_timestamp=_now_ms())


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EddyProcess]:
    """One broker for the module's tests, each of which leaves it healthy for the next:
    a topic `keep` with known data, and a topic `fuzzed` (empty at first) that the bad
    produce requests aim at."""
    eddy = EddyProcess(tmp_path_factory.mktemp("bad-input") / "data").start()
    try:
        create_topic(eddy.bootstrap, "keep", 2)
        create_topic(eddy.bootstrap, "fuzzed", 1)
        produce(eddy.bootstrap, "keep", [f"keep-{i}".encode() for i in range(40)],
                keys=[f"k{i}".encode() for i in range(40)])
        eddy.keep = consume_all(eddy.bootstrap, "keep", 2)  # type: ignore[attr-defined]
        assert sum(len(v) for v in eddy.keep.values()) == 40  # type: ignore[attr-defined]
        yield eddy
    finally:
        eddy.kill()


def fuzzed(broker) -> list[tuple[int, Any, Any]]:  # type: ignore[no-untyped-def]
    """What `fuzzed` holds now (earlier tests on the module's broker may have added to
    it: a test that must write nothing compares it before and after)."""
    records: list[tuple[int, Any, Any]] = consume_all(broker.bootstrap, "fuzzed", 1)[0]
    return records


def assert_healthy(eddy) -> None:  # type: ignore[no-untyped-def]
    """Alive, answering, a real client can produce and consume, old data intact."""
    assert eddy.alive(), eddy.logs()[-3000:]
    assert api_versions_ok(eddy.port)
    topic = f"health-{uuid.uuid4().hex[:8]}"
    create_topic(eddy.bootstrap, topic, 1)
    values = [f"h{i}".encode() for i in range(20)]
    delivered = produce(eddy.bootstrap, topic, values, partition=0)
    assert [o for _p, o, _v in delivered] == list(range(20))
    got = consume_all(eddy.bootstrap, topic, 1)[0]
    assert [v for _o, _k, v in got] == values
    assert consume_all(eddy.bootstrap, "keep", 2) == eddy.keep


def assert_framed(data: bytes) -> list[bytes]:
    """Whatever the broker sent is a sequence of whole size-prefixed frames."""
    frames = []
    pos = 0
    while pos < len(data):
        assert len(data) - pos >= 4, "partial size prefix from the broker"
        (n,) = struct.unpack_from(">i", data, pos)
        assert 4 <= n <= len(data) - pos - 4, f"bad response frame size {n}"
        frames.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return frames


def _quick_check(eddy) -> None:  # type: ignore[no-untyped-def]
    assert eddy.alive(), eddy.logs()[-3000:]
    assert api_versions_ok(eddy.port)


# ---- random and malformed frames -----------------------------------------------------------


def test_random_byte_frames(broker) -> None:  # type: ignore[no-untyped-def]
    @FUZZ
    @given(payload=st.binary(max_size=400))
    def one(payload: bytes) -> None:
        received, closed = send_then_eof(broker.port, struct.pack(">i", len(payload)) + payload)
        assert closed, "the broker did not close a connection the client half-closed"
        assert_framed(received)
        _quick_check(broker)

    one()
    assert_healthy(broker)


def test_random_bytes_without_framing(broker) -> None:  # type: ignore[no-untyped-def]
    @FUZZ
    @given(data=st.binary(min_size=1, max_size=400))
    def one(data: bytes) -> None:
        received, closed = send_then_eof(broker.port, data)
        assert closed
        assert_framed(received)
        _quick_check(broker)

    one()
    assert_healthy(broker)


def _valid_frames() -> dict[str, bytes]:
    return {
        "api_versions_v0": bb.api_versions_request(1),
        "api_versions_v3": bb.api_versions_request_v3(2),
        "metadata_v4": bb.metadata_request(3, ["keep"]),
        "metadata_v12": bb.metadata_request_v12(4, ["keep"]),
        "produce_v3": bb.produce_request(5, "fuzzed", 0, _batch([b"t1", b"t2"])),
        "produce_v9": bb.produce_request_v9(6, "fuzzed", 0, _batch([b"t3"])),
    }


def test_truncated_frames_get_no_answer(broker) -> None:  # type: ignore[no-untyped-def]
    before = fuzzed(broker)
    for name, frame in _valid_frames().items():
        # the size prefix promises more than arrives before EOF
        for cut in sorted({1, 2, 3, 4, 5, 8, 12, len(frame) // 2, len(frame) - 1}):
            received, closed = send_then_eof(broker.port, frame[:cut])
            assert closed, (name, cut)
            assert received == b"", f"{name} cut at {cut} was answered"
        # a consistent size prefix around a truncated request body
        payload = frame[4:]
        for keep in sorted({0, 3, 8, 10, len(payload) // 2, len(payload) - 1}):
            body = payload[:keep]
            received, closed = send_then_eof(broker.port, struct.pack(">i", len(body)) + body)
            assert closed, (name, keep)
            assert_framed(received)
        _quick_check(broker)
    assert_healthy(broker)
    # none of the truncated produce requests wrote anything
    assert fuzzed(broker) == before


def test_partial_frame_does_not_block_others_and_completes(broker) -> None:  # type: ignore[no-untyped-def]
    frame = bb.metadata_request(77, ["keep"])
    s = connect(broker.port)
    try:
        s.sendall(frame[:2])
        assert_healthy(broker)  # other connections are served meanwhile
        s.sendall(frame[2:9])
        _quick_check(broker)
        for i in range(9, len(frame)):  # the rest one byte at a time
            s.sendall(frame[i : i + 1])
        resp = read_response(s)
        assert resp is not None and resp[0] == 77
        # the same connection keeps working
        s.sendall(bb.api_versions_request(78))
        resp = read_response(s)
        assert resp is not None and resp[0] == 78
        assert parse_api_versions_v0(resp[1])[0] == 0
    finally:
        s.close()


def _closed_without_answer(port: int, data: bytes) -> bool:
    """Send data and keep the connection open: the broker must close it, answering nothing."""
    s = connect(port)
    try:
        s.sendall(data)
        received, closed = wait_closed_by_broker(s)
    finally:
        s.close()
    return closed and received == b""


def test_frame_above_socket_request_max_bytes_closes_connection(broker) -> None:  # type: ignore[no-untyped-def]
    for size in (MAX_REQUEST + 1, 2**31 - 1, 200 * 1024 * 1024):
        data = struct.pack(">i", size) + b"\x00\x03\x00\x04\x00\x00\x00\x01"
        assert _closed_without_answer(broker.port, data), (
            f"the broker kept reading a {size}-byte frame above socket.request.max.bytes")
        _quick_check(broker)
    assert_healthy(broker)


def test_configured_socket_request_max_bytes(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "socket.request.max.bytes=4096")
    create_topic(eddy.bootstrap, "small", 1)
    ok = bb.produce_request(1, "small", 0, _batch([b"x" * 3000]))
    assert len(ok) <= 4096 + 4
    s = connect(eddy.port)
    try:
        s.sendall(ok)
        resp = read_response(s)
        assert resp is not None and resp[0] == 1
        too_big = bb.produce_request(2, "small", 0, _batch([b"y" * 5000]))
        s.sendall(too_big[:64])  # the size prefix alone must be enough to refuse it
        received, closed = wait_closed_by_broker(s)
        assert closed and received == b""
    finally:
        s.close()
    assert eddy.alive()
    got = consume_all(eddy.bootstrap, "small", 1)[0]
    assert [v for _o, _k, v in got] == [b"x" * 3000]


def test_negative_size_closes_connection(broker) -> None:  # type: ignore[no-untyped-def]
    for size in (-1, -2, -(2**31), -100_000):
        data = struct.pack(">i", size) + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff"
        assert _closed_without_answer(broker.port, data), size
        _quick_check(broker)
    assert_healthy(broker)


def test_unknown_api_key_closes_connection(broker) -> None:  # type: ignore[no-untyped-def]
    for api_key in (9999, 32767, -1, -32768, 500):
        frame = bb.request(api_key, 0, 11, b"\x00\x00\x00\x00")
        assert _closed_without_answer(broker.port, frame), (
            f"a request with unknown API key {api_key} must close the connection")
        _quick_check(broker)
    assert_healthy(broker)


def test_unsupported_version_of_a_known_api_closes_connection(broker) -> None:  # type: ignore[no-untyped-def]
    for api_key, version in ((3, 99), (0, 99), (0, 2), (1, 32767), (3, -1)):
        frame = bb.request(api_key, version, 12, b"\x00\x00\x00\x00")
        assert _closed_without_answer(broker.port, frame), (api_key, version)
        _quick_check(broker)
    assert_healthy(broker)


# ---- ApiVersions and acks=0 ----------------------------------------------------------------


def test_api_versions_too_new_gets_v0_unsupported_version(broker) -> None:  # type: ignore[no-untyped-def]
    for version in (4, 99, 32767):
        _check_api_versions_too_new(broker, version)


def _check_api_versions_too_new(broker, version: int) -> None:  # type: ignore[no-untyped-def]
    s = connect(broker.port)
    try:
        s.sendall(bb.api_versions_request_v3(321, version=version))
        resp = read_response(s)
        assert resp is not None, "connection closed instead of an ApiVersions answer"
        corr, body = resp
        assert corr == 321
        # response header v0 (no tagged fields) and a v0 body: error_code, api_keys
        code, keys = parse_api_versions_v0(body)
        assert code == 35  # UNSUPPORTED_VERSION
        assert keys, "the supported ranges must be listed so the client can retry lower"
        assert 18 in keys and keys[18][0] == 0 and keys[18][1] >= 3
        assert 0 in keys and 1 in keys and 3 in keys  # Produce, Fetch, Metadata
        assert all(lo <= hi for lo, hi in keys.values())
        # the client retries on the same connection with a version it now knows
        s.sendall(bb.api_versions_request_v3(322, version=keys[18][1]))
        resp = read_response(s)
        assert resp is not None and resp[0] == 322
        assert struct.unpack_from(">h", resp[1], 0)[0] == 0
    finally:
        s.close()
    _quick_check(broker)


def test_produce_acks_0_gets_no_response(broker) -> None:  # type: ignore[no-untyped-def]
    create_topic(broker.bootstrap, "acks0", 1)
    s = connect(broker.port)
    try:
        s.sendall(bb.produce_request(7, "acks0", 0, _batch([b"a", b"b"]), acks=0))
        s.sendall(bb.produce_request_v9(8, "acks0", 0, _batch([b"c"]), acks=0))
        s.sendall(bb.api_versions_request(9))
        resp = read_response(s)
        assert resp is not None
        assert resp[0] == 9, f"got a response for correlation id {resp[0]}"
        # acks=1 on the same connection is answered, in order
        s.sendall(bb.produce_request(10, "acks0", 0, _batch([b"d"]), acks=1))
        s.sendall(bb.api_versions_request(11))
        first, second = read_response(s), read_response(s)
        assert first is not None and first[0] == 10
        assert second is not None and second[0] == 11
    finally:
        s.close()
    got = consume_all(broker.bootstrap, "acks0", 1)[0]
    assert [(o, v) for o, _k, v in got] == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


def test_produce_acks_0_with_bad_batch_never_answers(broker) -> None:  # type: ignore[no-untyped-def]
    bad = bytearray(_batch([b"zzz"]))
    bad[-1] ^= 0xFF  # CRC mismatch
    before = fuzzed(broker)
    s = connect(broker.port)
    try:
        s.sendall(bb.produce_request(20, "fuzzed", 0, bytes(bad), acks=0))
        s.sendall(bb.api_versions_request(21))
        resp = read_response(s)
        # Kafka closes the connection after a failed acks=0 produce; either way there is
        # never a Produce response
        assert resp is None or resp[0] == 21
    finally:
        s.close()
    assert fuzzed(broker) == before
    _quick_check(broker)


# ---- mutations of valid requests -----------------------------------------------------------

_ops = st.lists(
    st.tuples(st.sampled_from(["flip", "insert", "delete", "set"]),
              st.integers(0, 1 << 16), st.integers(0, 255)),
    min_size=1, max_size=4,
)


def _mutate(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    b = bytearray(data)
    for op, pos, val in ops:
        if op == "insert":
            b.insert(pos % (len(b) + 1), val)
        elif not b:
            continue
        elif op == "flip":
            b[pos % len(b)] ^= val or 0x80
        elif op == "set":
            b[pos % len(b)] = val
        else:
            del b[pos % len(b)]
    return bytes(b)


def _fuzz_mutations(broker, bases: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    @FUZZ
    @given(which=st.integers(0, len(bases) - 1), ops=_ops, reframe=st.booleans())
    def one(which: int, ops: list[tuple[str, int, int]], reframe: bool) -> None:
        frame = bases[which]
        if reframe:  # mutate the request, keep a consistent size prefix
            body = _mutate(frame[4:], ops)
            data = struct.pack(">i", len(body)) + body
        else:  # mutate the bytes on the wire, size prefix included
            data = _mutate(frame, ops)
        received, closed = send_then_eof(broker.port, data)
        assert closed
        assert_framed(received)
        _quick_check(broker)

    one()


def test_mutated_metadata_requests(broker) -> None:  # type: ignore[no-untyped-def]
    _fuzz_mutations(broker, [
        bb.metadata_request(31, ["keep", "fuzzed"]),
        bb.metadata_request(32, None),
        bb.metadata_request_v12(33, ["keep"]),
    ])
    assert_healthy(broker)


def test_mutated_produce_requests(broker) -> None:  # type: ignore[no-untyped-def]
    before = fuzzed(broker)
    _fuzz_mutations(broker, [
        bb.produce_request(41, "fuzzed", 0, _batch([b"m1", b"m2", b"m3"])),
        bb.produce_request_v9(42, "fuzzed", 0, _batch([b"m4"])),
        bb.produce_request(43, "fuzzed", 0, _batch([b"m5"]), acks=1),
    ])
    assert_healthy(broker)
    # whatever the fuzzing appended to `fuzzed` is whole, valid batches
    got = fuzzed(broker)
    assert got[:len(before)] == before
    assert [o for o, _k, _v in got] == list(range(len(got)))
    assert all(v is not None and v.startswith(b"m") for _o, _k, v in got[len(before):])


def test_connection_survives_error_responses(broker) -> None:  # type: ignore[no-untyped-def]
    """Request-level errors get an error code on a connection that stays open."""
    bad = bytearray(_batch([b"q"]))
    bad[-1] ^= 1
    before = fuzzed(broker)
    s = connect(broker.port)
    try:
        s.sendall(bb.produce_request(51, "fuzzed", 0, bytes(bad)))  # CORRUPT_MESSAGE
        s.sendall(bb.produce_request(52, "no-such-topic", 0, _batch([b"q"])))
        s.sendall(bb.produce_request(53, "fuzzed", 9, _batch([b"q"])))  # no partition 9
        s.sendall(bb.api_versions_request(54))
        for corr in (51, 52, 53, 54):
            resp = read_response(s)
            assert resp is not None and resp[0] == corr
    finally:
        s.close()
    assert fuzzed(broker) == before
    _quick_check(broker)


def test_many_garbage_connections_at_once(broker) -> None:  # type: ignore[no-untyped-def]
    socks = []
    try:
        for i in range(50):
            s = connect(broker.port)
            s.sendall(struct.pack(">i", 1000) + bytes([i]) * 10)  # stalls mid-frame
            socks.append(s)
        assert_healthy(broker)
        for s in socks:
            s.shutdown(socket.SHUT_WR)
        for s in socks:
            received, closed = wait_closed_by_broker(s)
            assert closed and received == b""
    finally:
        for s in socks:
            s.close()
    _quick_check(broker)


# ---- unknown tagged fields (KIP-482: a receiver skips tags it does not know) ---------------

_UNKNOWN_TAGS = bb.uvarint(2) + bb.uvarint(90) + bb.uvarint(3) + b"abc" + bb.uvarint(
    1000) + bb.uvarint(0)


def _flex(api_key: int, version: int, corr: int, body: bytes, header_tags: bytes) -> bytes:
    payload = struct.pack(">hhi", api_key, version, corr) + struct.pack(">h", 4) + b"test"
    payload += header_tags + body
    return struct.pack(">i", len(payload)) + payload


def test_unknown_header_tagged_fields_are_ignored(broker) -> None:  # type: ignore[no-untyped-def]
    """Flexible versions let a newer client add tagged fields; Kafka skips unknown tags
    (readUnknownTaggedField) and answers the request as if they were absent. Eddy skips
    them in the request header; unknown tags inside a request body are a known limit of
    the kio decoder (the request is refused and the connection closed)."""
    failures = [
        f"{api} with unknown tags in the {where}"
        for api in ("api_versions_v3", "metadata_v12")
        for where in ("header",)
        if not _answered_with_unknown_tags(broker, api, where)
    ]
    assert not failures, f"connection closed instead of an answer: {failures}"
    assert_healthy(broker)


def _answered_with_unknown_tags(broker, api: str, where: str) -> bool:  # type: ignore[no-untyped-def]
    header_tags = _UNKNOWN_TAGS if where == "header" else bb.uvarint(0)
    body_tags = _UNKNOWN_TAGS if where == "body" else bb.uvarint(0)
    if api == "api_versions_v3":
        frame = _flex(18, 3, 61, bb._cstr("eddy-test") + bb._cstr("1.0") + body_tags,
                      header_tags)
    else:  # all topics, no auto-creation, no authorized operations
        frame = _flex(3, 12, 61, bb.uvarint(0) + b"\x00\x00" + body_tags, header_tags)
    s = connect(broker.port)
    try:
        s.sendall(frame)
        resp = read_response(s)
    finally:
        s.close()
    _quick_check(broker)
    if resp is None:
        return False
    assert resp[0] == 61
    if api == "api_versions_v3":
        assert struct.unpack_from(">h", resp[1], 0)[0] == 0
    return True


# ---- lengths and counts checked before anything is allocated (issue 11) -------------------

#: ListOffsets v7 whose topics compact-array length is the varint ff ff ff ff 2d: before the
#: bounds pass, kio's native reader tried to allocate ~98 GB and aborted the whole process
ISSUE_11_FRAME = bytes.fromhex(
    "0000003b0002000700000004000772646b61666b6100ffffffff01ffffffff2d6d61696e2d63356332"
    "3237020000000100000000fffffffffffffffe000000"
)


def _flex_request(api_key: int, version: int, body: bytes) -> bytes:
    """A size-prefixed frame with a v2 (flexible) header: client id, no header tags."""
    payload = struct.pack(">hhih", api_key, version, 99, 4) + b"test" + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


_P3_HEAD = (struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 6)
            + b"fuzzed" + struct.pack(">i", 1) + struct.pack(">i", 0))
_HB4 = b"\x02g" + struct.pack(">i", 1) + b"\x02m" + b"\x00"

#: one hostile frame per class of bounds check: (what it breaks, frame, the field the
#: broker's log must name)
HOSTILE = {
    "legacy array count": (
        bb.request(3, 4, 5, struct.pack(">i", 2**31 - 1) + b"\x00" * 16), "topics"),
    "compact array count": (ISSUE_11_FRAME, "ListOffsetsRequest.topics"),
    "legacy string length": (
        bb.request(10, 1, 5, struct.pack(">h", 32767) + b"group\x00"), "key"),
    "compact string length": (
        _flex_request(10, 3, b"\xff\xff\xff\x7fgroup\x00\x00"), "key"),
    "legacy bytes length": (
        bb.request(0, 3, 5, _P3_HEAD + struct.pack(">i", 2**30) + b"records"), "records"),
    "negative bytes length": (
        bb.request(0, 3, 5, _P3_HEAD + struct.pack(">i", -7) + b"records"), "records"),
    "compact bytes length": (
        _flex_request(0, 9, b"\x00" + struct.pack(">hi", 1, 1000) + b"\x02\x07fuzzed\x02"
                      + struct.pack(">i", 0) + b"\x80\x80\x80\x80\x04records"), "records"),
    "overlong varint": (_flex_request(10, 3, b"\x80" * 9 + b"\x01\x00"), "varint"),
    "tagged field count": (
        _flex_request(12, 4, _HB4 + b"\xff\xff\xff\xff\x0f"), "tagged fields"),
    "tagged field size": (_flex_request(12, 4, _HB4 + b"\x01\x09\xff\xff\x03xyz"), "tag 9"),
    # found by bench.fuzz: a null array where the field is not nullable reached the
    # handlers as None ("'NoneType' object is not iterable", a traceback per frame)
    "null non-nullable array": (bytes.fromhex(
        "0000002500140004006e2b23000772646b61666b610080000000000000003265366166340000ea6000"),
        "topic_names: null"),
    "null non-nullable legacy array": (
        bb.request(42, 1, 5, struct.pack(">i", -1)), "groups_names: null"),
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_hostile_lengths_close_only_that_connection(broker, what: str) -> None:  # type: ignore[no-untyped-def]
    frame, field = HOSTILE[what]
    logged = len(broker.logs().splitlines())  # the module's broker: earlier tests' lines
    other = connect(broker.port)  # an established connection that must not notice
    try:
        other.sendall(bb.api_versions_request(1))
        assert read_response(other) is not None
        assert _closed_without_answer(broker.port, frame), what
        other.sendall(bb.api_versions_request(2))
        resp = read_response(other)
        assert resp is not None and resp[0] == 2, "the other connection was disturbed"
    finally:
        other.close()
    assert broker.alive(), broker.logs()[-3000:]
    closing = [line for line in broker.logs().splitlines()[logged:]
               if "closing connection" in line]
    assert closing and field in closing[-1], closing[-1:]
    _quick_check(broker)


def test_issue_11_frame_many_times_then_healthy(broker) -> None:  # type: ignore[no-untyped-def]
    for _ in range(50):
        assert _closed_without_answer(broker.port, ISSUE_11_FRAME)
    assert_healthy(broker)
