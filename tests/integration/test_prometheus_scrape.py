"""A real Prometheus (Debian's `prometheus` package; scripts/test installs it) scrapes a
real `eddy serve` every second on loopback, and its HTTP API answers the series Eddy
exposes: records and bytes appended per topic, a consumer group's lag in records, open
connections, and the target's `up`. Without the binary the test fails (it never skips):
CI installs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from conftest import free_port
from prometheus_client.parser import text_string_to_metric_families

PROMETHEUS = "/usr/bin/prometheus"
TOPIC = "scraped"
GROUP = "readers"
FIRST, LATER = 120, 25  # records produced before and after the group consumed and committed


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


class PrometheusServer:
    """`prometheus` scraping ``target`` (host:port, path /metrics) every second."""

    def __init__(self, root: Path, target: str) -> None:
        binary = shutil.which("prometheus") or PROMETHEUS
        if not Path(binary).exists():
            pytest.fail(f"{PROMETHEUS} not found: install Debian's prometheus package "
                        "(apt-get install -y prometheus; scripts/test does)")
        root.mkdir()
        config = root / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: eddy\n    metrics_path: /metrics\n"
            f"    static_configs:\n      - targets: ['{target}']\n")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log_path = root / "prometheus.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}",
             "--storage.tsdb.retention.time=1h"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=root)

    def logs(self) -> str:
        return self.log_path.read_text()[-4000:]

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n"
                                     f"{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {timeout} s:\n{self.logs()}")

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """The instant vector ``promql`` evaluates to: (labels, value) per series."""
        answer = http_json(f"{self.url}/api/v1/query?"
                           + urllib.parse.urlencode({"query": promql}))
        assert answer["status"] == "success", answer
        assert answer["data"]["resultType"] == "vector", answer
        return [(r["metric"], float(r["value"][1])) for r in answer["data"]["result"]]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def eddy_admin(eddy_factory: Any) -> tuple[Any, str]:
    proc = eddy_factory("--set", "admin.listener=127.0.0.1:0", "--set", "num.partitions=2")
    found = re.search(r"admin on (http://\S+)", proc.logs())
    assert found, f"no admin URL logged:\n{proc.logs()}"
    return proc, found[1]


@pytest.fixture
def prometheus(tmp_path: Path, eddy_admin: tuple[Any, str]) -> Iterator[PrometheusServer]:
    server = PrometheusServer(tmp_path / "prometheus", eddy_admin[1].removeprefix("http://"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def produce(producer: Producer, count: int, start: int) -> None:
    errors: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for n in range(start, start + count):
        producer.produce(TOPIC, key=b"k%d" % n, value=b"value-%d" % n, partition=n % 2,
                         on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []


def consume_and_commit(bootstrap: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == count, f"consumed {seen} of {count}"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def eventually(check: Callable[[], object], what: str, timeout: float = 20.0) -> Any:
    """Poll until ``check()`` answers something truthy (Prometheus scrapes every second)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout} s: {what} (last answer: {last!r})")


def scrape_direct(admin: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{admin}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): float(s.value)
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_prometheus_scrapes_eddy_and_answers_its_series(
        eddy_admin: tuple[Any, str], prometheus: PrometheusServer) -> None:
    proc, admin = eddy_admin
    producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
    produce(producer, FIRST, 0)
    consume_and_commit(proc.bootstrap, FIRST)
    produce(producer, LATER, FIRST)  # the group is LATER records behind now
    # the producer stays connected while Prometheus scrapes (eddy_connections_active)

    up = eventually(lambda: prometheus.query('up{job="eddy"} == 1'), "the target is up")
    instance = up[0][0]["instance"]
    assert admin.endswith(instance)

    total = FIRST + LATER
    messages = eventually(
        lambda: [v for _, v in prometheus.query(f'eddy_messages_total{{topic="{TOPIC}"}}')
                 if v == total],
        f"eddy_messages_total{{topic={TOPIC}}} reaches {total}")
    assert messages == [total]
    # the same numbers as Eddy's own /metrics (Prometheus stored what Eddy exposed)
    direct = scrape_direct(admin)
    appended = direct[("eddy_bytes_total", (("topic", TOPIC),))]
    assert appended > total * len(b"value-0")  # batches: records plus their headers
    stored_bytes = prometheus.query(f'eddy_bytes_total{{topic="{TOPIC}"}}')
    assert [v for _, v in stored_bytes] == [appended]
    assert stored_bytes[0][0]["job"] == "eddy"

    lag = eventually(
        lambda: [v for _, v in prometheus.query(
            f'sum(eddy_consumer_lag_records{{group="{GROUP}",topic="{TOPIC}"}})')
                 if v == LATER],
        f"the group's lag in records reaches {LATER}")
    assert lag == [LATER]
    per_partition = prometheus.query(f'eddy_consumer_lag_records{{group="{GROUP}"}}')
    assert sorted(s["partition"] for s, _ in per_partition) == ["0", "1"]

    connections = eventually(
        lambda: [v for _, v in prometheus.query("eddy_connections_active") if v >= 1],
        "eddy_connections_active counts the open producer")
    assert connections
    requests = prometheus.query('eddy_requests_total{api="produce"}')
    assert requests and requests[0][1] >= 1
    producer.flush(5)
    del producer
