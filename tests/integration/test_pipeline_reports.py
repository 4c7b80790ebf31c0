"""A pipeline's status reports (eddy.connect.runtime.status_reporter, as `eddy connect run` sends
them) reach the broker's metrics through the topic _eddy_pipelines; a record there that is
not a report is skipped and the rest still read."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families
from test_admin_http import admin_url, get

from eddy.connect.runtime.progress import Snapshot
from eddy.connect.runtime.status_reporter import StatusReporter
from eddy.telemetry.pipeline_status import STATUS_TOPIC


def pipeline_samples(url: str) -> dict[tuple[str, str], float]:
    status, _, body = get(f"{url}/metrics")
    assert status == 200
    return {(s.name, s.labels["pipeline"]): s.value
            for f in text_string_to_metric_families(body.decode())
            if f.name.startswith("eddy_pipeline_") for s in f.samples}


def wait_for(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_reports_reach_the_metrics(eddy_factory: Callable[..., Any]) -> None:
    proc = eddy_factory("--set", "admin.listener=127.0.0.1:0")
    url = admin_url(proc)
    clock = [1000.0]
    reporter = StatusReporter(proc.bootstrap, "orders-lake", clock=lambda: clock[0])
    assert reporter.active
    reporter.report(Snapshot(batch_id=0, rows=40, input_rate=0.0, process_rate=400.0,
                             duration_ms=100, lag={"orders/0": 5, "orders/1": 3},
                             total_rows=40, dead_letters=1))
    reporter._producer.flush(10)  # type: ignore[union-attr]
    # the broker's clock is the wall clock: the report (at t=1000 s) is stale there
    running = wait_for(lambda: pipeline_samples(url).get(
        ("eddy_pipeline_rows_total", "orders-lake")) == 40 and pipeline_samples(url),
        "the running report in /metrics")
    assert running[("eddy_pipeline_rows_per_second", "orders-lake")] == 400.0
    assert running[("eddy_pipeline_lag_records", "orders-lake")] == 8
    assert running[("eddy_pipeline_dead_letters_total", "orders-lake")] == 1
    assert running[("eddy_pipeline_up", "orders-lake")] == 0  # stale

    # hostile records in the topic: skipped, the broker serves on
    junk = Producer({"bootstrap.servers": proc.bootstrap})
    failed: list[object] = []
    for key, value in ((b"orders-lake", b"\xff not json"), (b"y", b"{}"),
                       (b"x", b'{"name":"y"}')):  # keyed: the topic is compacted
        junk.produce(STATUS_TOPIC, key=key, value=value,
                     on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert junk.flush(10) == 0 and not failed, failed

    clock[0] = time.time()
    reporter.report(Snapshot(batch_id=1, rows=60, input_rate=0.0, process_rate=600.0,
                             duration_ms=100, lag={}, total_rows=100, dead_letters=1))
    reporter._producer.flush(10)  # type: ignore[union-attr]
    fresh = wait_for(lambda: pipeline_samples(url).get(
        ("eddy_pipeline_rows_total", "orders-lake")) == 100 and pipeline_samples(url),
        "the second report")
    assert fresh[("eddy_pipeline_up", "orders-lake")] == 1
    assert fresh[("eddy_pipeline_lag_records", "orders-lake")] == 0

    reporter.close("stopped")
    stopped = wait_for(lambda: (s := pipeline_samples(url)).get(
        ("eddy_pipeline_up", "orders-lake")) == 0 and s, "the stopped report")
    assert stopped[("eddy_pipeline_rows_per_second", "orders-lake")] == 0
    assert {name for _, name in stopped} == {"orders-lake"}
    wait_for(lambda: "a record skipped (2 so far)" in proc.logs(), "the skipped records logged")


def test_an_unreachable_broker_costs_a_warning_only() -> None:
    reporter = StatusReporter("127.0.0.1:1", "nowhere", timeout_s=1.0)
    assert not reporter.active
    reporter.report(Snapshot(0, 1, 0.0, 1.0, 1, {}, 1, 0))
    reporter.close("stopped")
