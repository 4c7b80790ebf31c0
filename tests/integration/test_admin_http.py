"""The HTTP admin listener of a real `eddy serve` (admin.listener): /metrics scraped over
HTTP and parsed with prometheus_client's parser after producing with confluent-kafka, the
OpenMetrics format when asked for, the health endpoints (ready and not ready), 404s, and
the listener off by default."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Producer
from conftest import free_port
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

ADMIN = "EDDY_ADMIN url="
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def admin_url(proc: Any, timeout: float = 10.0) -> str:
    """The admin URL from the process's stdout: the line after EDDY_READY (maybe already in
    the reader's buffer, so read in a thread rather than polled with select)."""
    stdout = proc.proc.stdout

    def read_until_admin() -> str:
        while line := stdout.readline():
            if line.startswith(ADMIN):
                return str(line.strip()[len(ADMIN):])
        raise AssertionError(f"stdout closed before {ADMIN}:\n{proc.logs()}")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            return pool.submit(read_until_admin).result(timeout)
        except concurrent.futures.TimeoutError:
            proc.kill()  # ends the reader too (its pipe closes)
            raise AssertionError(f"no {ADMIN} line:\n{proc.logs()}") from None


def get(url: str, accept: str | None = None) -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET, errors included."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for n in range(count):
        producer.produce(topic, key=b"k%d" % (n % 7), value=b"v" * (n % 50),
                         partition=n % 3, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


def sample_value(families: Any, family: str, sample: str, **labels: str) -> float:
    for fam in families:
        if fam.name != family:
            continue
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise AssertionError(f"no sample {sample}{labels}")


def test_metrics_count_what_was_produced_and_health_answers(eddy_factory: Any) -> None:
    proc = eddy_factory("--set", "admin.listener=127.0.0.1:0",
                        "--set", "num.partitions=3")
    url = admin_url(proc)
    assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
    assert f"admin on {url}" in proc.logs()
    produce(proc.bootstrap, "scraped", 500)
    produce(proc.bootstrap, "other", 20)

    status, content_type, body = get(f"{url}/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    families = list(text_string_to_metric_families(body.decode()))
    # the text parser names a counter's family without its _total suffix
    assert sample_value(families, "eddy_messages", "eddy_messages_total",
                        topic="scraped") == 500
    assert sample_value(families, "eddy_messages", "eddy_messages_total", topic="other") == 20
    assert sample_value(families, "eddy_bytes", "eddy_bytes_total", topic="scraped") > 0
    assert any(f.name == "process_resident_memory_bytes" for f in families)

    status, content_type, body = get(f"{url}/metrics",
                                     accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and content_type == OPENMETRICS
    text = body.decode()
    assert text.endswith("# EOF\n")
    om = list(openmetrics_families(text))  # type: ignore[no-untyped-call]
    assert sample_value(om, "eddy_messages", "eddy_messages_total", topic="scraped") == 500
    # Prometheus' own Accept header prefers OpenMetrics
    prometheus_accept = ("application/openmetrics-text;version=1.0.0;q=0.5,"
                         "text/plain;version=0.0.4;q=0.4,*/*;q=0.1")
    assert get(f"{url}/metrics", accept=prometheus_accept)[1] == OPENMETRICS

    status, content_type, body = get(f"{url}/health/live")
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == {"status": "live"}
    # the default node is a cluster of one: registered, metadata applied, before EDDY_READY
    status, _, body = get(f"{url}/health/ready")
    ready = json.loads(body)
    assert status == 200, ready
    assert ready["status"] == "ready"
    assert ready["checks"] == {"log_recovery": True, "registered": True, "metadata": True}

    for path in ("/metrics/x", "/health", "/no/such/path"):  # ("/": the web console)
        status, _, body = get(f"{url}{path}")
        assert status == 404, path
        assert json.loads(body)["error"] == "Not Found"
    post = urllib.request.Request(f"{url}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(post, timeout=10)
    assert info.value.code == 405
    # a clean stop closes the admin listener with the rest
    assert proc.stop() == 0
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{url}/health/live", timeout=5)


def free_udp_port() -> int:
    return free_port(kind=socket.SOCK_DGRAM)


def test_ready_is_503_naming_what_is_missing_without_a_quorum(eddy_factory: Any) -> None:
    # a voter of a quorum of two whose other voter never starts: no controller, so no
    # registration and no metadata leader
    mine, absent = free_udp_port(), free_udp_port()
    proc = eddy_factory(
        "--set", "admin.listener=127.0.0.1:0",
        "--set", f"controller.quorum.voters=1@127.0.0.1:{mine},2@127.0.0.1:{absent}",
        "--set", f"mesh.listener=127.0.0.1:{mine}")
    url = admin_url(proc)
    status, content_type, body = get(f"{url}/health/ready")
    assert (status, content_type) == (503, "application/json")
    answer = json.loads(body)
    assert answer["status"] == "not ready"
    assert set(answer["missing"]) == {"registered", "metadata"}
    assert answer["missing"]["registered"] == "not registered with the controller yet"
    assert answer["checks"] == {"log_recovery": True, "registered": False, "metadata": False}
    # the process serves: it is live, and its metrics answer
    assert get(f"{url}/health/live")[0] == 200
    assert get(f"{url}/metrics")[0] == 200
