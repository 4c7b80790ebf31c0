"""Connection limits and memory bounds of the Kafka listener, against a real `eddy serve`:
thousands of connections announcing 100 MB requests leave the broker small and serving;
a small queued.max.request.bytes makes reading wait, not fail; max.connections and
max.connections.per.ip close connections over the limit at once; idle connections and
requests that trickle in are dropped; a client leaving mid-response is not an error."""

from __future__ import annotations

import contextlib
import resource
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_helpers import (
    api_versions_ok,
    batch_builder,
    connect,
    consume_all,
    create_topic,
    produce,
    read_response,
    wait_closed_by_broker,
)

bb = batch_builder
MiB = 1 << 20
MAX_REQUEST = 104_857_600  # socket.request.max.bytes default


# ---- helpers -------------------------------------------------------------------------------


def memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["VmRSS"], fields["VmHWM"]


def unread_bytes(port: int) -> int:
    """Bytes sent to the broker on port that it has not read yet: in its sockets' receive
    queues and its clients' send queues (loopback, so all on this machine)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            tx, rx = (int(q, 16) for q in cols[4].split(":"))
            if int(cols[1].rsplit(":", 1)[1], 16) == port:
                total += rx
            elif int(cols[2].rsplit(":", 1)[1], 16) == port:
                total += tx
    return total


def wait_until_read(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while unread_bytes(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert unread_bytes(port) == 0, "the broker did not read what its clients sent"


def announce(port: int, size: int, sent: int) -> socket.socket:
    """A connection announcing a request of `size` bytes and sending `sent` of them (as
    much as the socket takes without blocking)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setblocking(False)
    data = struct.pack(">i", size) + b"\x00" * sent
    with contextlib.suppress(BlockingIOError):
        s.send(data)
    return s


def send_stalled(socks: list[socket.socket], size: int, sent: int) -> int:
    """Each socket announces a request of `size` bytes, then sends `sent` of them as far
    as the broker reads them (bounded rounds); returns the bytes that went out."""
    data = struct.pack(">i", size) + b"\x00" * sent
    pos = [0] * len(socks)
    for _ in range(200):
        moved = 0
        for i, s in enumerate(socks):
            if pos[i] < len(data):
                try:
                    n = s.send(data[pos[i] :])
                except BlockingIOError:
                    continue
                pos[i] += n
                moved += n
        if all(p == len(data) for p in pos):
            break
        if not moved:
            time.sleep(0.05)
    return sum(pos)


@pytest.fixture
def nofile() -> Iterator[int]:
    """Raise this process's soft RLIMIT_NOFILE to the hard limit (a broker started from
    here inherits it); yields the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    yield hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def healthy_round_trip(bootstrap: str, records: int, size: int = 100) -> None:
    """A real client produces records and reads every one of them back."""
    topic = f"healthy-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 2)
    values = [f"{i:08d}".encode() * (size // 8) for i in range(records)]
    produce(bootstrap, topic, values)
    got = consume_all(bootstrap, topic, 2)
    assert sorted(v for recs in got.values() for _o, _k, v in recs) == sorted(values)


def fetch_v4(correlation_id: int, topic: str, max_wait_ms: int) -> bytes:
    """Fetch v4 of partition 0 from offset 0, waiting up to max_wait_ms for data."""
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, MiB, 0)
    body += struct.pack(">i", 1) + struct.pack(">h", len(topic)) + topic.encode()
    body += struct.pack(">i", 1) + struct.pack(">iqi", 0, 0, MiB)
    return bb.request(1, 4, correlation_id, body)


def problems(log: str) -> list[str]:
    return [line for line in log.splitlines()
            if " ERROR " in line or "Traceback" in line or "internal error" in line]


# ---- memory --------------------------------------------------------------------------------


def test_thousands_of_announced_100mb_requests_keep_the_broker_small(
        eddy_factory, nofile: int) -> None:  # type: ignore[no-untyped-def]
    count = min(2000, (nofile - 300) // 2)  # this process and the broker hold one fd each
    eddy = eddy_factory()
    create_topic(eddy.bootstrap, "warm-up", 1)
    socks = [announce(eddy.port, MAX_REQUEST, 48 * 1024) for _ in range(count)]
    try:
        wait_until_read(eddy.port)
        rss, peak = memory(eddy.proc.pid)
        assert peak < 1 << 30, f"RSS {rss / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB"
        healthy_round_trip(eddy.bootstrap, 500)
        assert eddy.alive()
        assert memory(eddy.proc.pid)[1] < 1 << 30
        assert count >= 2000 or nofile < 4300, f"only {count} connections"
    finally:
        for s in socks:
            s.close()
    assert not problems(eddy.logs()), eddy.logs()[-3000:]


def test_small_request_pool_bounds_memory_and_large_requests_still_complete(
        eddy_factory) -> None:  # type: ignore[no-untyped-def]
    """The pool has room for one 2 MiB request. 100 connections send half of a 2 MiB
    request each and stall: the broker reads little more than the pool holds and leaves
    the rest in the sockets, while small requests go on being served. Then producers of
    600 KB records, far more at once than the pool holds, deliver every record."""
    eddy = eddy_factory(
        "--set", "socket.request.max.bytes=2097152",
        "--set", "queued.max.request.bytes=2097152",
    )
    topic = "big-values"
    create_topic(eddy.bootstrap, topic, 3)
    before = memory(eddy.proc.pid)[0]
    stalled = [socket.create_connection(("127.0.0.1", eddy.port)) for _ in range(100)]
    for s in stalled:
        s.setblocking(False)
    try:
        assert send_stalled(stalled, 2 * MiB, MiB) > 100 * MiB
        unread = [unread_bytes(eddy.port)]
        for _ in range(100):  # until the broker has stopped reading
            time.sleep(0.2)
            unread.append(unread_bytes(eddy.port))
            if len(unread) > 3 and len(set(unread[-3:])) == 1:
                break
        assert unread[-1] > 60 * MiB, "the broker read what it should have left unread"
        grown = memory(eddy.proc.pid)[0] - before
        # without the pool: 100 x 1 MiB; with it: 2 MiB, and 128 KiB per connection
        assert grown < 60 * MiB, f"grew {grown / MiB:.0f} MiB"
        healthy_round_trip(eddy.bootstrap, 200)  # small requests flow meanwhile
    finally:
        for s in stalled:
            s.close()
    delivered: list[list[tuple[int, int, bytes]]] = []
    errors: list[BaseException] = []

    def producer(n: int) -> None:
        values = [bytes([n, i]) * 300_000 for i in range(6)]
        try:
            delivered.append(produce(eddy.bootstrap, topic, values, partition=n))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    got = consume_all(eddy.bootstrap, topic, 3)
    for n in range(3):
        assert [v for _o, _k, v in got[n]] == [bytes([n, i]) * 300_000 for i in range(6)]
    assert memory(eddy.proc.pid)[1] - before < 200 * MiB
    assert not problems(eddy.logs()), eddy.logs()[-3000:]


# ---- connection limits ---------------------------------------------------------------------


def _served(s: socket.socket, correlation_id: int) -> bool:
    try:
        s.sendall(bb.api_versions_request(correlation_id))
        resp = read_response(s)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return resp is not None and resp[0] == correlation_id


def test_max_connections_per_ip_closes_the_next_at_once(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "max.connections.per.ip=3")
    held = [connect(eddy.port) for _ in range(3)]
    try:
        assert all(_served(s, i) for i, s in enumerate(held))
        extra = connect(eddy.port)
        assert wait_closed_by_broker(extra, 5) == (b"", True)
        extra.close()
        held.pop().close()
        time.sleep(0.2)  # the broker sees the close
        again = connect(eddy.port)
        held.append(again)
        assert _served(again, 99)
        flood = [connect(eddy.port) for _ in range(200)]  # all refused, a few log lines
        for s in flood:
            assert wait_closed_by_broker(s, 5)[1]
            s.close()
    finally:
        for s in held:
            s.close()
    refusals = [line for line in eddy.logs().splitlines() if "refusing a connection" in line]
    assert 1 <= len(refusals) <= 2, refusals
    assert "max.connections.per.ip=3" in refusals[0]


def test_max_connections_counts_every_address(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "max.connections=2",
                        "--set", "max.connections.per.ip.overrides=127.0.0.1:100")
    held = [connect(eddy.port) for _ in range(2)]
    try:
        assert all(_served(s, i) for i, s in enumerate(held))
        extra = connect(eddy.port)
        assert wait_closed_by_broker(extra, 5) == (b"", True)
        extra.close()
    finally:
        for s in held:
            s.close()
    assert "max.connections=2 reached" in eddy.logs()


# ---- idle connections and slow requests ----------------------------------------------------


def test_idle_connections_are_closed_and_busy_ones_kept(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "connections.max.idle.ms=1000")
    idle = connect(eddy.port)
    busy = connect(eddy.port)
    try:
        assert _served(idle, 1)
        for i in range(10):  # 3 s of a request every 300 ms
            assert _served(busy, 100 + i), f"request {i} of the busy connection"
            time.sleep(0.3)
        assert wait_closed_by_broker(idle, 10) == (b"", True)
    finally:
        idle.close()
        busy.close()
    assert api_versions_ok(eddy.port)


def test_a_request_trickling_in_is_dropped_and_a_quick_one_in_pieces_is_served(
        eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "socket.request.read.timeout.ms=1500")
    frame = bb.metadata_request(7, None)
    slow = connect(eddy.port)
    quick = connect(eddy.port)
    try:
        slow.sendall(frame[: len(frame) // 2])  # and nothing more
        for piece in (frame[:3], frame[3:10], frame[10:]):
            quick.sendall(piece)
            time.sleep(0.2)
        resp = read_response(quick)
        assert resp is not None and resp[0] == 7
        received, closed = wait_closed_by_broker(slow, 10)
        assert (received, closed) == (b"", True)
    finally:
        slow.close()
        quick.close()
    assert "request still incomplete" in eddy.logs()


# ---- ordinary disconnects ------------------------------------------------------------------


def test_client_leaving_mid_response_is_not_an_error(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    """Fetches wait for data; their clients reset the connection before the answer."""
    eddy = eddy_factory("--set", "log.level=DEBUG")
    create_topic(eddy.bootstrap, "quiet", 1)
    for i in range(20):
        s = connect(eddy.port)
        s.sendall(fetch_v4(i, "quiet", 300))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # RST: the broker's transport is closed when the fetch answers
    time.sleep(1.0)  # every fetch has answered into a closed connection
    assert api_versions_ok(eddy.port)
    log = eddy.logs()
    assert not problems(log), log[-3000:]
    assert "closed by the client" in log
