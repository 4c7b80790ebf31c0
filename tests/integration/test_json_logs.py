"""log.format=json on a real `eddy serve`: every line the node writes to stderr is one JSON
object (startup, a bad frame from a client, shutdown), and the text default is not JSON."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from confluent_kafka import Producer

pytestmark = pytest.mark.timeout(60)


def _send_garbage(bootstrap: str) -> None:
    """A frame whose length says 16 bytes, then a request header that is nonsense: the
    node closes this connection and logs why."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"\x00\x00\x00\x10" + b"\xff" * 16)
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except (ConnectionResetError, TimeoutError):
            pass


def test_every_line_is_a_json_object(eddy_factory: Any) -> None:
    node = eddy_factory("--set", "log.format=json", "--set", "registry.listener=127.0.0.1:0")
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0})
    p.produce("json-logs", b"v")
    assert p.flush(15) == 0
    _send_garbage(node.bootstrap)
    assert node.stop() == 0

    lines = [ln for ln in node.logs().splitlines() if ln.strip()]
    assert lines
    records = []
    for ln in lines:
        rec = json.loads(ln)  # raises on a line that is not JSON
        assert isinstance(rec, dict), ln
        assert {"ts", "level", "logger", "message"} <= rec.keys(), ln
        records.append(rec)
    messages = [r["message"] for r in records]
    assert any(" ready in " in m and "Kafka on" in m for m in messages), messages
    assert "stopped cleanly" in messages
    closed = [r for r in records if r["level"] == "WARNING"
              and r["message"].startswith("closing connection from 127.0.0.1")]
    assert len(closed) == 1, messages  # the bad frame's line names the peer
    assert closed[0]["logger"] == "eddy.broker.server"


def test_text_stays_the_default(eddy: Any) -> None:
    assert eddy.stop() == 0
    first = eddy.logs().splitlines()[0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)
