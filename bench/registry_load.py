"""The schema registry bench's load generator: worker processes, each driving its share of
the keep-alive connections over raw non-blocking sockets (one `selectors` loop, requests
pre-built as bytes, one request in flight per connection, as a registry client has).

A worker connects its sockets, says it is ready, waits for the go, then sends until the end
time; responses completed inside [measure_from, end_at) are counted, each with its latency
(send to last byte). A response is an error when its status is not 200, when its body is not
the one expected (``expect``, where the caller knows it), or when the connection drops (the
worker reconnects and goes on). Only this module's and the standard library's imports are
needed in a worker (spawn start method: nothing heavy is re-imported).
"""

from __future__ import annotations

import array
import contextlib
import itertools
import re
import selectors
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: the Accept header confluent-kafka's SchemaRegistryClient sends
ACCEPT = ("application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, "
          "application/json")
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
#: a response head larger than this is refused (no registry answer comes near it)
MAX_HEAD = 16 * 1024
MAX_BODY = 16 * 1024 * 1024
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)[ \t]*(?:\r\n|$)", re.IGNORECASE)


def get_request(host: str, port: int, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: {ACCEPT}\r\n"
            "Confluent-Client-Version: python/bench\r\n\r\n").encode()


def post_request(host: str, port: int, path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: {ACCEPT}\r\n"
            f"Content-Type: {CONTENT_TYPE}\r\nContent-Length: {len(body)}\r\n"
            "Confluent-Client-Version: python/bench\r\n\r\n").encode() + body


@dataclass
class Spec:
    """What one worker sends. ``requests`` are sent in turn (connection i starts at the i-th
    of them); with ``fresh`` set, each request is ``fresh(n)`` for a counter n instead
    (different every time, e.g. a new schema under a new subject). ``expect[i]``, when
    given, is the body that must come back for ``requests[i]``."""

    host: str
    port: int
    connections: int
    requests: list[bytes] = field(default_factory=list)
    expect: list[bytes] | None = None
    fresh: Callable[[int], bytes] | None = None


@dataclass(frozen=True)
class FreshPost:
    """``fresh`` for a Spec: POST ``path`` with ``body`` where ``{tag}`` in either becomes a
    tag unique to the worker, the run and n (a new subject and schema each call)."""

    host: str
    port: int
    path: str
    body: str
    run: str
    worker: int

    def __call__(self, n: int) -> bytes:
        tag = f"{self.run}w{self.worker}n{n}"
        return post_request(self.host, self.port, self.path.replace("{tag}", tag),
                            self.body.replace("{tag}", tag).encode())


class HttpError(Exception):
    pass


def parse_head(buf: bytes | bytearray, end: int) -> tuple[int, int]:
    """(status, content length) of the response head ``buf[:end]``; HttpError when it is not
    a response this bench understands (no Content-Length, chunked, garbage)."""
    head = bytes(buf[:end])
    if not head.startswith(b"HTTP/1.") or len(head) < 12:
        raise HttpError(f"not an HTTP response: {head[:40]!r}")
    try:
        status = int(head[9:12])
    except ValueError:
        raise HttpError(f"bad status line: {head[:40]!r}") from None
    found = _CONTENT_LENGTH.search(head)
    length = int(found.group(1)) if found is not None and len(found.group(1)) <= 10 else -1
    if not 0 <= length <= MAX_BODY:
        raise HttpError(f"missing or out-of-range Content-Length ({length})")
    return status, length


class Conn:
    """One keep-alive connection with its receive buffer and the request in flight."""

    def __init__(self, spec: Spec, index: int) -> None:
        self.spec = spec
        self.sock = socket.create_connection((spec.host, spec.port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.buf = bytearray()
        self.sent_at = 0.0
        self.index = index  # which of spec.requests is in flight

    def send(self, request: bytes) -> None:
        self.sent_at = time.monotonic()
        view = memoryview(request)
        while view:  # requests are small: the socket buffer takes them whole in practice
            try:
                n = self.sock.send(view)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            view = view[n:]

    def take_response(self) -> tuple[int, bytes] | None:
        """(status, body) of a complete response at the front of the buffer, or None."""
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                raise HttpError(f"response head over {MAX_HEAD} bytes")
            return None
        status, length = parse_head(self.buf, end)
        total = end + 4 + length
        if len(self.buf) < total:
            return None
        body = bytes(self.buf[end + 4:total])
        del self.buf[:total]
        return status, body

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass
class Tally:
    ok: int = 0
    errors: int = 0
    samples: list[str] = field(default_factory=list)  # the first few error messages
    latencies: array.array[float] = field(default_factory=lambda: array.array("d"))

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.samples) < 5:
            self.samples.append(what)


def run_worker(spec: Spec, worker: int, ready: Any, go: Any, times: Any, out: Any) -> None:
    """Process entry: connect, report ready, wait for the go, run, put the tally on ``out``."""
    try:
        tally = _run(spec, worker, ready, go, times)
        out.put({"worker": worker, "ok": tally.ok, "errors": tally.errors,
                 "error_samples": tally.samples, "latencies": tally.latencies})
    except Exception as exc:
        ready.put(worker)  # the bench stops waiting for this one (its result says why)
        out.put({"worker": worker, "error": f"{type(exc).__name__}: {exc}",
                 "trace": traceback.format_exc()})


def _requests(spec: Spec, worker: int) -> Iterator[tuple[int, bytes]]:
    """(index into spec.requests or -1, request bytes), endlessly."""
    if spec.fresh is not None:
        for n in itertools.count():
            yield -1, spec.fresh(n)
    count = len(spec.requests)
    for n in itertools.count(worker * spec.connections):
        yield n % count, spec.requests[n % count]


def _run(spec: Spec, worker: int, ready: Any, go: Any, times: Any) -> Tally:
    conns = [Conn(spec, 0) for _ in range(spec.connections)]
    ready.put(worker)
    if not go.wait(120):
        raise TimeoutError("no go from the bench within 120 s")
    measure_from, end_at = float(times[0]), float(times[1])
    sel = selectors.DefaultSelector()
    source = _requests(spec, worker)
    tally = Tally()

    def start(conn: Conn) -> None:
        conn.index, request = next(source)
        conn.send(request)

    for conn in conns:
        sel.register(conn.sock, selectors.EVENT_READ, conn)
        start(conn)
    now = time.monotonic()
    while now < end_at:
        for key, _ in sel.select(min(0.5, end_at - now)):
            conn = key.data
            try:
                data = conn.sock.recv(262144)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                data, why = b"", f"{type(exc).__name__}: {exc}"
            else:
                why = "connection closed by the server"
            if not data:
                now = time.monotonic()
                if now >= measure_from:
                    tally.error(why)
                sel.unregister(conn.sock)
                conn.close()
                fresh = Conn(spec, 0)
                sel.register(fresh.sock, selectors.EVENT_READ, fresh)
                start(fresh)
                continue
            conn.buf += data
            answer = conn.take_response()
            if answer is None:
                continue
            now = time.monotonic()
            if now >= measure_from and conn.sent_at < end_at:
                status, body = answer
                if status != 200:
                    tally.error(f"HTTP {status}: {body[:200]!r}")
                elif spec.expect is not None and conn.index >= 0 and \
                        body != spec.expect[conn.index]:
                    tally.error(f"unexpected body: {body[:200]!r}")
                else:
                    tally.ok += 1
                    tally.latencies.append(now - conn.sent_at)
            if conn.buf:
                raise HttpError(f"{len(conn.buf)} bytes after a response nothing asked for")
            start(conn)
        now = time.monotonic()
    for key in list(sel.get_map().values()):
        key.data.close()
    sel.close()
    return tally


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, nearest rank."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]
