"""The web console of a real `eddy serve` (admin listener), in a real browser: Debian's
Chromium, headless and offline, driven by Playwright. One node gets topics, records (one
Avro value through the node's own schema registry), a consumer group left with lag and two
transactions; every page then loads without console errors or failed requests, sends no
request off loopback, shows what was made, and updates without a reload when records
arrive. A screenshot of each page goes to tests/artifacts/ for a person to look at, at
laptop size and at a phone's (390x844: no page wider than the screen). A value framed by
confluent-kafka's JSONSerializer shows decoded. A failed refresh is shown in a banner (HTTP
status and the JSON error's message, or that the node cannot be reached) until refreshing
works again. The JSON endpoints are also asked hostile queries: 400/404 JSON naming the
parameter, and the node keeps serving."""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from conftest import EddyProcess
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Request,
    Route,
    expect,
    sync_playwright,
)

from eddy.connect.runtime.progress import Snapshot
from eddy.connect.runtime.status_reporter import StatusReporter

CHROMIUM = "/usr/bin/chromium"
OFFLINE_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
AVRO_SCHEMA = json.dumps({"type": "record", "name": "Payment", "fields": [
    {"name": "id", "type": "long"}, {"name": "payer", "type": "string"},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]})
JSON_SCHEMA = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#",
                          "title": "Shipment", "type": "object", "properties": {
                              "parcel": {"type": "string"}, "grams": {"type": "integer"}}})
#: the pages a phone is shown: name, path
PAGES = (("overview", "/"), ("raft", "/console/raft"), ("topics", "/console/topics"),
         ("topic", "/console/topics/orders"),
         ("messages", "/console/messages?topic=payments&partition=0&offset=0"),
         ("groups", "/console/groups"), ("transactions", "/console/transactions"),
         ("pipelines", "/console/pipelines"), ("metrics", "/console/metrics"))
#: committed offsets of the group "billing" on orders-0/1/2 (10 records each): lag 0+6+10
COMMITTED = {0: 10, 1: 4, 2: 0}


def _stdout_urls(proc: EddyProcess, names: tuple[str, ...], timeout: float = 15.0
                 ) -> dict[str, str]:
    """The URLs of the startup lines ``EDDY_<NAME> url=...`` following EDDY_READY."""
    stdout = proc.proc.stdout if proc.proc is not None else None
    assert stdout is not None
    found: dict[str, str] = {}

    def read() -> dict[str, str]:
        while len(found) < len(names) and (line := stdout.readline()):
            for name in names:
                prefix = f"EDDY_{name} url="
                if line.startswith(prefix):
                    found[name] = line.strip()[len(prefix):]
        return found

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        got = pool.submit(read).result(timeout)
    assert set(got) == set(names), proc.logs()
    return got


def _produce(bootstrap: str, topic: str, count: int, partition: int | None = None,
             start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for n in range(start, start + count):
        producer.produce(topic, key=b"key-%d" % n, value=b"order %d" % n,
                         partition=n % 3 if partition is None else partition,
                         headers=[("source", b"console-test")])
    assert producer.flush(20) == 0


def _seed(bootstrap: str, registry: str) -> Consumer:
    """Topics, records, an Avro value, transactions and a group left with lag; the group's
    consumer stays a member (closed by the caller)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("orders", 3, 1),
                                       NewTopic("payments", 1, 1)]).values():
        future.result(20)
    _produce(bootstrap, "orders", 30)
    client = SchemaRegistryClient({"url": registry})
    serializer = AvroSerializer(client, AVRO_SCHEMA)
    value = serializer({"id": 4242, "payer": "zoë", "tags": ["card", "eu"]},
                       SerializationContext("payments", MessageField.VALUE))
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("payments", key=b"p1", value=value)
    producer.produce("payments", key=b"p2", value=b"\x00\xff\xfe not avro")
    # a JSON Schema value (schema id 2) beside the Avro ones, framed as Confluent's
    # JSONSerializer frames it (its subject named by the record: "Shipment")
    shipments = JSONSerializer(JSON_SCHEMA, client, conf={
        "subject.name.strategy": record_subject_name_strategy})
    shipment = shipments({"parcel": "box-7", "grams": 1250},
                         SerializationContext("payments", MessageField.VALUE))
    assert shipment is not None and shipment[:5] == b"\x00\x00\x00\x00\x02"
    producer.produce("payments", key=b"p3", value=shipment)
    assert producer.flush(20) == 0
    for txn_id, commit in (("txn-done", True), ("txn-open", False)):
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
        txn.init_transactions(20)
        txn.begin_transaction()
        txn.produce("payments", key=txn_id.encode(), value=b"in a transaction")
        txn.flush(20)
        if commit:
            txn.commit_transaction(20)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing",
                         "client.id": "billing-app", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    deadline = time.monotonic() + 20
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert len(consumer.assignment()) == 3
    consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in COMMITTED.items()],
                    asynchronous=False)
    return consumer


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    proc = EddyProcess(tmp_path_factory.mktemp("console") / "data",
                       ["--set", "admin.listener=127.0.0.1:0",
                        "--set", "registry.listener=127.0.0.1:0"]).start()
    try:
        urls = _stdout_urls(proc, ("ADMIN", "REGISTRY"))
        consumer = _seed(proc.bootstrap, urls["REGISTRY"])
        try:
            yield {"proc": proc, "admin": urls["ADMIN"], "bootstrap": proc.bootstrap}
        finally:
            consumer.close()
    finally:
        proc.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=OFFLINE_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _get(url: str) -> tuple[int, str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read()
            kind = response.headers["Content-Type"]
            return response.status, kind, json.loads(body) if "json" in kind else body
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], json.loads(exc.read())


class Watch:
    """What a page did wrong: console errors, page errors, failed or refused requests,
    requests that would leave loopback."""

    def __init__(self, page: Page, base: str) -> None:
        self.problems: list[str] = []
        self.host = urllib.parse.urlsplit(base).hostname
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        page.on("requestfailed", lambda r: self.problems.append(
            f"request failed: {r.url} {r.failure}"))
        page.on("response", lambda r: r.status >= 400 and self.problems.append(
            f"HTTP {r.status}: {r.url}"))
        page.route("**/*", self._route)

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type in ("error", "warning"):
            self.problems.append(f"console {msg.type}: {msg.text}")

    def _route(self, route: Route, request: Request) -> None:
        parts = urllib.parse.urlsplit(request.url)
        if parts.scheme in ("data", "blob") or parts.hostname == self.host:
            route.continue_()
        else:
            self.problems.append(f"request off loopback: {request.url}")
            route.abort()


def _open(page: Page, base: str, path: str) -> None:
    page.goto(base + path, wait_until="load")
    if page.locator("section.live").count():  # a live page: wait for its first refresh
        expect(page.locator("body[data-updated]")).to_have_count(1, timeout=10_000)


def _visit(page: Page, base: str, path: str, shot: str) -> None:
    _open(page, base, path)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"console-{shot}.png"), full_page=True)


def test_console_pages_in_a_browser(node: dict[str, Any], browser: Browser) -> None:
    base = node["admin"]
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        watch = Watch(page, base)

        _visit(page, base, "/", "overview")
        expect(page.locator(".card .v[data-path=health]")).to_have_text("ready")
        expect(page.locator("table[data-rows=brokers] tbody tr")).to_have_count(1)
        expect(page.locator("table[data-rows=brokers] tbody")).to_contain_text("live")
        # this node's roles: its config's (a cluster of one) and the registry it runs
        expect(page.locator("table[data-rows=brokers] tbody td:nth-child(2)")).to_have_text(
            "broker, controller, registry")

        _visit(page, base, "/console/raft", "raft")
        expect(page.locator("table[data-rows=groups]")).to_contain_text("metadata")

        _visit(page, base, "/console/topics", "topics")
        orders = page.locator("table[data-rows=topics] tbody tr", has_text="orders")
        expect(orders.locator("td:nth-child(6)")).to_have_text("30")
        # numeric headers sit right-aligned over their numbers, text headers left
        align = page.evaluate("""() => Array.from(
            document.querySelectorAll('table[data-rows=topics] th'),
            th => th.dataset.t + ':' + getComputedStyle(th).textAlign).join(' ')""")
        assert align == ("link:left bool:left num:right num:right num:right num:right "
                         "bytes:right rate:right brate:right"), align
        page.evaluate("window.notReloaded = true")
        _produce(node["bootstrap"], "orders", 6, partition=1, start=30)
        expect(orders.locator("td:nth-child(6)")).to_have_text("36", timeout=10_000)
        assert page.evaluate("window.notReloaded") is True

        _visit(page, base, "/console/topics/orders", "topic")
        expect(page.locator("table[data-rows=partitions] tbody tr")).to_have_count(3)
        expect(page.locator("table[data-rows=configs]")).to_contain_text("retention.ms")

        _visit(page, base, "/console/groups", "groups")
        billing = page.locator("table[data-rows=groups] tbody tr", has_text="billing")
        expect(billing.locator("td:nth-child(6)")).to_have_text("22")  # 0 + 12 + 10
        expect(billing.locator("svg.spark polyline")).to_have_count(1)
        lag1 = page.locator("table[data-rows=partitions] tbody tr",
                            has_text="orders").nth(1)
        expect(lag1.locator("td:nth-child(6)")).to_have_text("12")
        expect(lag1.locator(".dot.behind")).to_have_count(1)
        expect(page.locator("table[data-rows=members]")).to_contain_text("billing-app")
        expect(page.locator("table[data-rows=members]")).to_contain_text("orders: ")
        page.evaluate("window.notReloaded = true")
        _produce(node["bootstrap"], "orders", 5, partition=1, start=40)
        expect(billing.locator("td:nth-child(6)")).to_have_text("27", timeout=10_000)
        expect(lag1.locator("td:nth-child(6)")).to_have_text("17")
        assert page.evaluate("window.notReloaded") is True

        _visit(page, base, "/console/messages?topic=payments&partition=0&offset=0",
               "messages")
        records = page.locator("table[data-rows=records] tbody")
        expect(records).to_contain_text("avro #1")
        expect(records).to_contain_text('"payer": "zoë"')
        expect(records).to_contain_text('"tags": ["card", "eu"]')
        expect(records).to_contain_text("hex")  # the value that only looks framed
        shipment = records.locator("tr", has_text="json #2")  # JSON Schema, decoded
        expect(shipment).to_contain_text('{"parcel": "box-7", "grams": 1250}')
        expect(records.locator("tr", has_text="txn-open")).to_contain_text("transactional")

        _visit(page, base, "/console/messages?topic=orders&partition=1", "messages-tail")
        expect(page.locator("table[data-rows=records] tbody")).to_contain_text("order 44")
        expect(page.locator("table[data-rows=records] tbody")).to_contain_text(
            "source=console-test")

        _visit(page, base, "/console/transactions", "transactions")
        txns = page.locator("table[data-rows=transactions] tbody")
        expect(txns.locator("tr", has_text="txn-open")).to_contain_text("Ongoing")
        expect(txns.locator("tr", has_text="txn-done")).to_contain_text("CompleteCommit")

        # a pipeline reports as `eddy connect run` does; the page follows it live
        clock = [time.time()]
        reporter = StatusReporter(node["bootstrap"], "orders-lake", clock=lambda: clock[0])
        reporter.report(Snapshot(0, 40, 0.0, 400.0, 100, {"orders/0": 5}, 40, 1))
        _visit(page, base, "/console/pipelines", "pipelines")
        report = page.locator("table[data-rows=reports] tbody tr", has_text="orders-lake")
        expect(report.locator("td:nth-child(5)")).to_have_text("40", timeout=10_000)
        expect(report.locator("td:nth-child(2)")).to_have_text("running")
        expect(report.locator("td:nth-child(6)")).to_contain_text("5")
        page.evaluate("window.notReloaded = true")
        clock[0] += 2
        reporter.report(Snapshot(1, 50, 0.0, 500.0, 100, {"orders/0": 0}, 90, 1))
        reporter.close("stopped")
        expect(report.locator("td:nth-child(5)")).to_have_text("90", timeout=10_000)
        expect(report.locator("td:nth-child(2)")).to_have_text("stopped")
        assert page.evaluate("window.notReloaded") is True

        _visit(page, base, "/console/metrics", "metrics")
        expect(page.locator("figure.chart")).to_have_count(3)
        line = page.locator("figure.chart polyline.s0").first
        expect(line).to_have_attribute("points", re.compile(r"\S+ \S+"), timeout=10_000)

        assert watch.problems == []
    finally:
        page.close()


def test_every_page_fits_a_phone(node: dict[str, Any], browser: Browser) -> None:
    """At 390x844 (a phone held upright) no page is wider than the screen: wide tables
    scroll inside their own box, the header and the cards wrap."""
    base = node["admin"]
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        watch = Watch(page, base)
        widths = {}
        for name, path in PAGES:
            _visit(page, base, path, f"{name}-phone")
            widths[name] = page.evaluate(
                "[document.documentElement.scrollWidth, window.innerWidth]")
            if name == "messages":  # its records table is wider: it scrolls in its box
                box = page.locator("div.scroll", has=page.locator("table[data-rows=records]"))
                assert box.evaluate("b => b.scrollWidth > b.clientWidth")
        assert {n: w for n, w in widths.items() if w[0] > w[1] or w[1] != 390} == {}, widths
        assert watch.problems == []
    finally:
        page.close()


def test_a_failed_refresh_is_shown_until_refreshing_works(
        tmp_path: Path, browser: Browser) -> None:
    """A node of its own: the page names a JSON error's status and message (the browsed
    topic deleted), that the node cannot be reached (stopped), and clears the banner once
    the node answers again (restarted on the same port)."""
    proc = EddyProcess(tmp_path / "data", ["--set", "admin.listener=127.0.0.1:0"]).start()
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    try:
        admin = _stdout_urls(proc, ("ADMIN",))["ADMIN"]
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        admin_client = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin_client.create_topics([NewTopic("brief", 1, 1)])["brief"].result(20)
        _produce(proc.bootstrap, "brief", 2, partition=0)
        banner = page.locator("#problem")

        _open(page, admin, "/console/messages?topic=brief&partition=0")
        expect(banner).to_be_hidden()
        admin_client.delete_topics(["brief"])["brief"].result(20)
        expect(banner).to_be_visible(timeout=10_000)
        expect(banner).to_contain_text("Live updates failed")
        expect(banner).to_contain_text("HTTP 404 Not Found from /console/api/messages?")
        expect(banner).to_contain_text("topic 'brief' does not exist")
        expect(page.locator("#live.off")).to_have_count(1)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "console-error-http.png"))

        _open(page, admin, "/console/topics")
        expect(banner).to_be_hidden()
        port = urllib.parse.urlsplit(admin).port
        proc.kill()  # the node goes away at once
        expect(banner).to_contain_text("cannot reach the node", timeout=10_000)
        page.screenshot(path=str(ARTIFACTS / "console-error-unreachable.png"))
        proc.extra_args = ["--set", f"admin.listener=127.0.0.1:{port}"]
        proc.start()
        expect(banner).to_be_hidden(timeout=15_000)
        expect(page.locator("#live.on")).to_have_count(1)
        assert errors == []
    finally:
        page.close()
        proc.kill()


def test_hostile_queries_answer_json_errors(node: dict[str, Any]) -> None:
    base = node["admin"] + "/console/api/"
    refused = {
        "messages?topic=orders&partition=abc": (400, "partition"),
        "messages?topic=orders&partition=-1": (400, "partition"),
        "messages?topic=orders&partition=1e3": (400, "partition"),
        "messages?topic=orders&offset=-5": (400, "offset"),
        "messages?topic=orders&offset=123456789012345678901234": (400, "offset"),
        "messages?topic=orders&limit=0": (400, "limit"),
        "messages?topic=orders&timestamp=1&offset=1": (400, "timestamp"),
        "messages?topic=" + "x" * 300: (400, "topic"),
        "messages?topic=..%2Fetc": (400, "topic"),
        "messages?topic=orders%0A": (400, "topic"),
        "messages?partition=0": (400, "topic"),
        "messages?topic=nope": (404, "topic"),
        "messages?topic=orders&partition=3": (404, "partition"),
        "topics/nope": (404, "topic"),
        "topics/bad%20name": (400, "name"),
    }
    for query, (status, parameter) in refused.items():
        got, kind, body = _get(base + query)
        assert (got, body.get("parameter")) == (status, parameter), (query, body)
        assert kind.startswith("application/json") and body["error"], query

    # clamped, not refused: an offset past the end reads nothing, a limit above 100 is 100
    status, _, body = _get(base + "messages?topic=orders&partition=0&offset=9223372036854775807")
    assert status == 200 and body["records"] == [] and body["from_offset"] == body[
        "high_watermark"]
    status, _, body = _get(base + "messages?topic=orders&partition=0&offset=0&limit=100000")
    assert status == 200 and body["limit"] == 100 and len(body["records"]) == 10
    assert [r["offset"] for r in body["records"]] == list(range(10))
    status, _, body = _get(base + "messages?topic=orders&partition=0&timestamp=0&limit=3")
    assert status == 200 and [r["offset"] for r in body["records"]] == [0, 1, 2]
    status, _, body = _get(base + "messages?topic=orders&partition=0&timestamp="
                           + str(int(time.time() * 1000) + 3_600_000))
    assert status == 200 and body["records"] == []

    for path in ("console/static/../../pyproject.toml", "console/static/evil.js",
                 "console/nothing-here"):
        status, kind, body = _get(node["admin"] + "/" + path)
        assert status == 404 and kind.startswith("application/json"), path

    assert _get(node["admin"] + "/health/live")[0] == 200
    status, _, overview = _get(base + "overview")
    assert status == 200 and overview["health"] == "ready"
    assert node["proc"].alive()


def test_assignment_and_schema_checks_bound_hostile_bytes() -> None:
    """The pieces that read bytes from clients: a consumer assignment whose counts lie is
    refused before anything is allocated; an Avro schema whose decoding a value could make
    unbounded (recursive, or arrays of items taking no bytes) is not decoded."""
    import struct

    import fastavro

    from eddy.observe.console.decode.avro import bounded as _bounded
    from eddy.observe.console.groups import decode_assignment

    good = struct.pack(">hi", 0, 1) + struct.pack(">h", 6) + b"orders" + struct.pack(
        ">iii", 2, 0, 2) + struct.pack(">i", -1)
    assert decode_assignment(good) == [("orders", [0, 2])]
    for bad in (b"", b"\x00", struct.pack(">hi", 0, 2**31 - 1),  # a topic count that lies
                struct.pack(">hi", 0, 1) + struct.pack(">h", 30000) + b"x",
                struct.pack(">hi", 0, 1) + struct.pack(">h", 1) + b"t" + struct.pack(
                    ">i", 2**30), good[:-9]):
        assert decode_assignment(bad) is None, bad

    def parsed(schema: object) -> object:
        return fastavro.parse_schema(schema)

    assert _bounded(parsed(json.loads(AVRO_SCHEMA)), {})
    assert not _bounded(parsed({"type": "array", "items": "null"}), {})
    assert not _bounded(parsed({"type": "record", "name": "R", "fields": [
        {"name": "xs", "type": {"type": "array", "items": {
            "type": "record", "name": "E", "fields": []}}}]}), {})
    assert not _bounded(parsed({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]}), {})

    # (framed values of every format: tests/unit/test_console_decode.py)
