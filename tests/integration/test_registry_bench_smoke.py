"""The schema registry bench (bench.registry): a CI smoke run end to end against a real
`eddy serve` (timings are never asserted: every phase answered, without an error), and its
load generator's checks against a stub HTTP server on loopback (a wrong status, a wrong
body, a dropped connection and a response it cannot frame all count as errors)."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.registry_load import HttpError, Spec, Tally, _run, get_request, parse_head


def test_smoke_run_answers_every_phase_without_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.registry", "--smoke",
                          "--results-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "lookups/s:" in out.stdout
    (saved,) = tmp_path.glob("*-registry-smoke.json")
    results = json.loads(saved.read_text())["results"]
    assert results["setup"]["schemas"] == 10
    assert results["setup"]["last_id"] > results["setup"]["first_id"]
    for phase in ("lookups", "reregisters", "new_registers"):
        r = results[phase]
        assert r["errors"] == 0, r
        assert r["ok"] > 0 and r["requests_s"] > 0, r
        assert 0 < r["p50_ms"] <= r["p99_ms"] <= r["max_ms"], r
        assert r["connections"] == 32 and r["clients"] == 2, r


# -- the load generator against a stub server ---------------------------------------------------


class Stub:
    """A loopback server answering every request with ``answer`` (read up to the blank line:
    the bench's GETs carry no body); ``close_after`` requests, then the connection closes."""

    def __init__(self, answer: bytes, close_after: int = 0) -> None:
        self.answer, self.close_after = answer, close_after
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        served, buf = 0, b""
        with conn:
            while not self.stopped:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while b"\r\n\r\n" in buf:
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    conn.sendall(self.answer)
                    served += 1
                    if self.close_after and served >= self.close_after:
                        return

    def close(self) -> None:
        self.stopped = True
        self.sock.close()


@pytest.fixture
def stubs() -> Iterator[list[Stub]]:
    made: list[Stub] = []
    yield made
    for s in made:
        s.close()


def drive(stub: Stub, expect: bytes, seconds: float = 0.3) -> Tally:
    spec = Spec("127.0.0.1", stub.port, 2, [get_request("127.0.0.1", stub.port, "/x")],
                [expect])
    go = threading.Event()
    now = time.monotonic()
    go.set()
    return _run(spec, 0, queue.Queue(), go, [now, now + seconds])


def response(status: int, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def test_expected_answers_count_as_ok(stubs: list[Stub]) -> None:
    stubs.append(Stub(response(200, b'{"schema":"x"}')))
    tally = drive(stubs[0], b'{"schema":"x"}')
    assert tally.errors == 0 and tally.ok > 0
    assert len(tally.latencies) == tally.ok and min(tally.latencies) > 0


@pytest.mark.parametrize(("answer", "close_after", "why"), [
    (response(500, b'{"error_code":500}'), 0, ("HTTP 500",)),
    (response(200, b'{"schema":"y"}'), 0, ("unexpected body",)),
    # the stub closes with the next request unread or not yet arrived: the client sees a
    # reset or an end of stream, as the two race (a reset, once, on a loaded machine)
    (response(200, b'{"schema":"x"}'), 1, ("connection closed", "Connection reset")),
], ids=["status", "body", "dropped"])
def test_bad_answers_count_as_errors(stubs: list[Stub], answer: bytes, close_after: int,
                                     why: tuple[str, ...]) -> None:
    stubs.append(Stub(answer, close_after))
    tally = drive(stubs[0], b'{"schema":"x"}')
    assert tally.errors > 0
    assert any(w in s for s in tally.samples for w in why), tally.samples
    if close_after == 0:
        assert tally.ok == 0


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked",  # no Content-Length
    b"HTTP/1.1 200 OK\r\nContent-Length: -1",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999",
    b"HTTP/1.1 2x0 OK\r\nContent-Length: 1",
    b"SSH-2.0-OpenSSH",
], ids=["chunked", "negative", "huge", "status", "not-http"])
def test_unframeable_heads_are_refused(head: bytes) -> None:
    with pytest.raises(HttpError):
        parse_head(head, len(head))


def test_head_is_read_case_insensitively() -> None:
    head = b"HTTP/1.1 404 Not Found\r\ncontent-LENGTH:  12"
    assert parse_head(head, len(head)) == (404, 12)
