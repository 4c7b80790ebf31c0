"""The pipeline reader's registry client (eddy.connect.formats.registry_client) against a stub
HTTP server on loopback: answers, Confluent's error bodies, a body over the limit, a dead
first URL, and the id cache."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from eddy.connect.formats.registry_client import RegistryClient, RegistryError


class Stub(BaseHTTPRequestHandler):
    answers: ClassVar[dict[str, tuple[int, bytes]]] = {}
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.seen.append(self.path)
        status, body = self.answers.get(self.path, (404, b'{"error_code": 40401, '
                                                          b'"message": "Subject not found"}'))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Stub.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_answers_errors_limits_and_cache(stub: str) -> None:
    Stub.answers = {
        "/schemas/ids/1": (200, json.dumps({"schema": '"string"'}).encode()),
        "/schemas/ids/2": (200, json.dumps({"schema": "{}", "schemaType": "JSON",
                                            "references": [{"name": "a", "subject": "s",
                                                            "version": 1}]}).encode()),
        "/schemas/ids/3": (200, b"x" * 2000),
        "/schemas/ids/4": (200, b"not json"),
        "/schemas/ids/5": (500, b'{"error_code": 50001, "message": "store down"}'),
        "/subjects/a%2Fb/versions/latest": (200, json.dumps(
            {"subject": "a/b", "version": 3, "id": 1, "schema": '"string"'}).encode()),
    }
    dead = f"http://127.0.0.1:{free_port()}"
    client = RegistryClient(f"{dead},{stub}", timeout_s=5, max_body=1000)
    one = client.schema_by_id(1)
    assert (one.schema, one.schema_type, one.id) == ('"string"', "AVRO", 1)
    two = client.schema_by_id(2)
    assert two.schema_type == "JSON" and two.references[0].subject == "s"
    with pytest.raises(RegistryError, match="larger than 1000 bytes"):
        client.schema_by_id(3)
    with pytest.raises(RegistryError, match="not JSON"):
        client.schema_by_id(4)
    with pytest.raises(RegistryError, match="store down") as info:
        client.schema_by_id(5)
    assert info.value.code == 50001 and not info.value.not_found
    with pytest.raises(RegistryError, match="unknown schema id 6") as info:
        client.schema_by_id(6)
    assert info.value.not_found
    latest = client.version("a/b")
    assert (latest.subject, latest.version, latest.id) == ("a/b", 3, 1)
    with pytest.raises(RegistryError, match="has no version 7"):
        client.version("nope", 7)
    # ids (found or not) are asked once; errors that may pass are asked again
    before = list(Stub.seen)
    client.schema_by_id(1)
    with pytest.raises(RegistryError):
        client.schema_by_id(6)
    with pytest.raises(RegistryError):
        client.schema_by_id(5)
    assert Stub.seen[len(before):] == ["/schemas/ids/5"]


def test_unreachable_registry() -> None:
    client = RegistryClient(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(RegistryError) as info:
        client.schema_by_id(1)
    assert info.value.code is None
    with pytest.raises(ValueError, match="http"):
        RegistryClient("ftp://x")


def test_an_unknown_schema_is_cached_without_the_frames_of_its_callers(stub: str) -> None:
    """A poison record's unknown id is asked once; every later lookup raises a new error
    whose traceback is its own: the cached error holds no frames (a pipeline's batches were
    kept alive through the traceback of a cached error raised again and again)."""
    Stub.answers = {"/schemas/ids/9": (404, b'{"error_code": 40403, "message": "nope"}')}
    client = RegistryClient(stub)

    def lookup(batch: bytearray) -> RegistryError:
        with pytest.raises(RegistryError) as caught:
            client.schema_by_id(9)
        return caught.value

    raised = [lookup(bytearray(1 << 20)) for _ in range(5)]
    assert Stub.seen == ["/schemas/ids/9"]  # asked once, the miss cached
    assert len({id(e) for e in raised}) == 5 and all(e.not_found for e in raised)
    cached = client._by_id[9]
    assert isinstance(cached, RegistryError) and cached.__traceback__ is None

    def depth(e: BaseException) -> int:
        tb, n = e.__traceback__, 0
        while tb is not None:
            tb, n = tb.tb_next, n + 1
        return n

    assert depth(raised[-1]) == depth(raised[1])  # no traceback grows with each raise
