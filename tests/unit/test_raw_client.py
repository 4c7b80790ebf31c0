"""Our own Kafka client (eddy.client.raw, used by `eddy txn` and the connect fast reader)
against a hostile broker: announced sizes, counts and lengths in responses are checked
against the bytes present before anything is allocated."""

from __future__ import annotations

import socket
import struct
import threading
import tracemalloc
from collections.abc import Iterator

import pytest
from kio.schema.api_versions.v0.request import ApiVersionsRequest

from eddy.client.raw import MalformedResponse, RawClient, decode_response


@pytest.fixture
def hostile() -> Iterator[tuple[int, list[bytes]]]:
    """A one-connection server on loopback that answers the first request with whatever
    bytes the test put in the list."""
    replies: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)

    def serve() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            try:
                (size,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
                conn.recv(size, socket.MSG_WAITALL)
                for reply in replies:
                    conn.sendall(reply)
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], replies
    server.close()
    thread.join(5)


def _call(port: int) -> None:
    with RawClient("127.0.0.1", port, timeout_s=5) as client:
        client.call(ApiVersionsRequest())


def test_announced_size_beyond_the_cap_is_refused_before_reading(hostile) -> None:  # type: ignore[no-untyped-def]
    port, replies = hostile
    replies.append(struct.pack(">i", 2**31 - 1) + b"\x00" * 64)
    tracemalloc.start()
    try:
        with pytest.raises(MalformedResponse, match="2147483647 bytes"):
            _call(port)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20


def test_negative_size_is_refused(hostile) -> None:  # type: ignore[no-untyped-def]
    port, replies = hostile
    replies.append(struct.pack(">i", -5))
    with pytest.raises(MalformedResponse, match="-5 bytes"):
        _call(port)


def test_huge_array_count_in_a_response_is_refused(hostile) -> None:  # type: ignore[no-untyped-def]
    port, replies = hostile
    # ApiVersions v0 response: correlation id 1, error 0, api_keys array of 2^31-1 entries
    body = struct.pack(">ihi", 1, 0, 2**31 - 1) + b"\x00" * 12
    replies.append(struct.pack(">i", len(body)) + body)
    with pytest.raises(MalformedResponse, match=r"ApiVersionsResponse\.api_keys"):
        _call(port)


def test_truncated_response_is_refused_and_large_ones_grow_with_the_bytes(hostile) -> None:  # type: ignore[no-untyped-def]
    port, replies = hostile
    # announces 64 MiB (under the cap) but sends 1 KiB and closes: the client must not
    # have allocated the announced size up front
    replies.append(struct.pack(">i", 64 << 20) + b"\x00" * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(ConnectionError):
            _call(port)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20


def test_decode_response_checks_the_header_too() -> None:
    with pytest.raises(MalformedResponse):
        decode_response(18, 0, 1, b"\x00\x00")
    good = struct.pack(">ihi", 1, 0, 1) + struct.pack(">hhh", 18, 0, 3)
    body = decode_response(18, 0, 1, good)
    assert [(k.api_key, k.max_version) for k in body.api_keys] == [(18, 3)]
