"""`python -m bench.metrics [--rounds 3] [--smoke]`: what Eddy's Prometheus metrics cost
(issue 17).

1. Throughput with `metrics.enable=true` vs `false`: single-node produce (1 KiB records,
   acks=1, the main bench's librdkafka settings, bench.runner's produce phase) and the
   read-back consume of what was produced, on a fresh `eddy serve` per run. The two
   settings alternate (on, off, then off, on, ...) for `--rounds` rounds, so the machine's
   noise shows in the spread of each side's runs. Reported: every run's MiB/s and the
   broker's CPU time per record, each side's median, and the difference of the medians in %
   (positive: metrics on is slower / costs more CPU).
2. Scrape time of `/metrics` with `--scrape-partitions` partitions (1,000): a topic with
   that many partitions, one record produced to each and a group's offset 0 committed on
   each (so every partition also has a consumer lag series), then `--scrapes` GETs of
   /metrics over one keep-alive connection, in the text format and in OpenMetrics (what
   Prometheus asks for): median and max milliseconds, the body's size and sample count.

Prints a summary; writes bench/results/<stamp>-metrics[-smoke].json (unless --no-save).
Exits 1 when a phase failed; never on a timing.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import re
import statistics
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from bench.brokers import EddyBroker
from bench.runner import Options, Session, say

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RECORD_SIZE = 1024
OPENMETRICS = "application/openmetrics-text; version=1.0.0"


class AdminBroker(EddyBroker):
    """`eddy serve` with ``metrics.enable`` set and the admin listener on a free port."""

    def __init__(self, metrics: bool) -> None:
        super().__init__(["--set", f"metrics.enable={'true' if metrics else 'false'}",
                          "--set", "admin.listener=127.0.0.1:0"])
        self.metrics = metrics
        self.admin_url = ""

    def start(self, timeout: float = 30.0) -> None:
        super().start(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"admin on (http://\S+)",
                              self.log_path.read_text(errors="replace"))
            if found:
                self.admin_url = found[1]
                return
            time.sleep(0.05)
        raise RuntimeError(f"no admin startup line in the log:\n{self.log_tail()}")


def _stop(broker: EddyBroker, failed: bool) -> None:
    if broker.alive():
        broker.stop()
    broker.cleanup(keep_logs=failed)
    if failed:
        say(f"the broker's log is kept: {broker.log_path}")


# ---------------------------------------------------------------------------- throughput


def throughput_run(metrics: bool, opts: Options) -> dict[str, Any]:
    """One produce + read-back on a fresh broker with ``metrics.enable`` = ``metrics``."""
    broker = AdminBroker(metrics)
    out: dict[str, Any] = {"metrics": metrics}
    try:
        broker.start()
        session = Session(broker, opts)
        try:
            produced = session.produce("metrics", RECORD_SIZE, "1")
            out["produce"] = produced
            if "error" not in produced:
                out["consume"] = session.consume("metrics", produced["topic"],
                                                 produced["acked"])
                # the setting took: what /metrics counted of the run's records
                out["counted"] = counted(broker.admin_url)
                out["messages_counted"] = out["counted"]["messages"]
                if metrics and out["messages_counted"] < produced["acked"]:
                    out["error"] = (f"metrics on counted {out['messages_counted']} of "
                                    f"{produced['acked']} records")
                elif not metrics and out["messages_counted"]:
                    out["error"] = f"metrics off counted {out['messages_counted']} records"
            if "topic" in produced:
                session.delete_topic(produced["topic"])
        finally:
            session.close()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    for kind in ("produce", "consume"):
        r = out.get(kind)
        if r is not None and "error" in r and "error" not in out:
            out["error"] = f"{kind}: {r['error']}"
    _stop(broker, "error" in out)
    return out


def counted(admin_url: str) -> dict[str, int]:
    """What the broker's /metrics counted: records appended (``eddy_messages_total`` over
    every topic), Produce and Fetch requests (how many records a request carried on average
    tells what counting per request costs per record)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    out = {"messages": 0, "produce_requests": 0, "fetch_requests": 0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "eddy_messages_total":
                out["messages"] += int(s.value)
            elif s.name == "eddy_requests_total" and s.labels["api"] in ("produce", "fetch"):
                out[f"{s.labels['api']}_requests"] += int(s.value)
    return out


def _cpu_us_per_record(r: dict[str, Any]) -> float | None:
    cores, rate = r.get("broker_cores"), r.get("msgs_s")
    if cores is None or not rate:
        return None
    return float(cores) / float(rate) * 1e6


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase: each side's MiB/s and broker CPU us per record, medians, differences."""
    out: dict[str, Any] = {}
    for kind in ("produce", "consume"):
        side: dict[str, dict[str, list[float]]] = {}
        for run in runs:
            r = run.get(kind)
            if r is None or "error" in r:
                continue
            s = side.setdefault("on" if run["metrics"] else "off",
                                {"mib_s": [], "cpu_us_per_record": []})
            s["mib_s"].append(round(float(r["mib_s"]), 2))
            cpu = _cpu_us_per_record(r)
            if cpu is not None:
                s["cpu_us_per_record"].append(round(cpu, 3))
        phase: dict[str, Any] = {k: v for k, v in side.items()}
        for measure in ("mib_s", "cpu_us_per_record"):
            medians = {k: statistics.median(v[measure]) for k, v in side.items()
                       if v[measure]}
            for k, m in medians.items():
                phase[k][f"median_{measure}"] = round(m, 3)
            if "on" in medians and "off" in medians and medians["off"]:
                diff = (medians["on"] - medians["off"]) / medians["off"] * 100
                # throughput: positive = on is slower; CPU: positive = on costs more
                phase[f"{measure}_overhead_pct"] = round(-diff if measure == "mib_s" else diff,
                                                         2)
        out[kind] = phase
    return out


# -------------------------------------------------------------------------------- scrape


def _fill(broker: AdminBroker, partitions: int) -> None:
    """A topic of ``partitions`` partitions, one record in each, offset 0 committed by a
    group on each (every partition then has log, lag and lag-seconds samples)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = "scrape"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=60, request_timeout=60)[topic].result(90)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for p in range(partitions):
        producer.produce(topic, value=b"x" * 100, partition=p)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("records to the scrape topic not delivered in 60 s")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "scrape-bench",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in range(partitions)],
                        asynchronous=False)
    finally:
        consumer.close()


def _time_scrapes(url: str, count: int, accept: str | None) -> dict[str, Any]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    times: list[float] = []
    body = b""
    try:
        for _ in range(count):
            t0 = time.perf_counter()
            conn.request("GET", "/metrics", headers={"Accept": accept} if accept else {})
            answer = conn.getresponse()
            body = answer.read()
            times.append((time.perf_counter() - t0) * 1e3)
            if answer.status != 200:
                raise RuntimeError(f"GET /metrics: HTTP {answer.status}")
    finally:
        conn.close()
    samples = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
    return {"scrapes": count, "median_ms": round(statistics.median(times), 2),
            "max_ms": round(max(times), 2), "min_ms": round(min(times), 2),
            "all_ms": [round(t, 2) for t in times], "body_bytes": len(body),
            "samples": samples}


def scrape_phase(partitions: int, scrapes: int) -> dict[str, Any]:
    broker = AdminBroker(True)
    out: dict[str, Any] = {"partitions": partitions}
    try:
        broker.start()
        t0 = time.perf_counter()
        _fill(broker, partitions)
        out["fill_s"] = round(time.perf_counter() - t0, 2)
        out["text"] = _time_scrapes(broker.admin_url, scrapes, None)
        out["openmetrics"] = _time_scrapes(broker.admin_url, scrapes, OPENMETRICS)
        if out["text"]["samples"] < 3 * partitions:  # size, segments, lag per partition
            out["error"] = f"only {out['text']['samples']} samples for {partitions} partitions"
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    _stop(broker, "error" in out)
    return out


# ---------------------------------------------------------------------------------- main


def render(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for kind, phase in results.get("summary", {}).items():
        for side in ("on", "off"):
            s = phase.get(side)
            if s is None:
                lines.append(f"{kind} metrics {side}: no successful run")
                continue
            lines.append(f"{kind} metrics {side:3}: MiB/s {s['mib_s']} (median "
                         f"{s.get('median_mib_s', 0):.1f}); broker CPU us/record "
                         f"{s['cpu_us_per_record']} (median "
                         f"{s.get('median_cpu_us_per_record', 0):.2f})")
        if "mib_s_overhead_pct" in phase:
            lines.append(f"{kind} overhead of metrics on: throughput "
                         f"{phase['mib_s_overhead_pct']:+.2f} %, broker CPU per record "
                         f"{phase.get('cpu_us_per_record_overhead_pct', 0.0):+.2f} %")
    scrape = results.get("scrape", {})
    for fmt in ("text", "openmetrics"):
        s = scrape.get(fmt)
        if s is not None:
            lines.append(f"GET /metrics ({fmt}) with {scrape['partitions']} partitions: "
                         f"median {s['median_ms']:.1f} ms, max {s['max_ms']:.1f} ms over "
                         f"{s['scrapes']} scrapes, {s['body_bytes']:,} bytes, "
                         f"{s['samples']:,} samples")
    return lines


def problems(results: dict[str, Any]) -> list[str]:
    found = [f"round {i // 2 + 1} metrics {'on' if r['metrics'] else 'off'}: {r['error']}"
             for i, r in enumerate(results.get("runs", [])) if "error" in r]
    if "error" in results.get("scrape", {}):
        found.append(f"scrape: {results['scrape']['error']}")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.metrics",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, help="rounds of (on, off) runs (3; smoke 1)")
    ap.add_argument("--seconds", type=float, help="produce seconds per run (5; smoke 0.5)")
    ap.add_argument("--records", type=int,
                    help="at most this many records per run (2,000,000; smoke 2,000)")
    ap.add_argument("--scrape-partitions", type=int, help="partitions (1000; smoke 50)")
    ap.add_argument("--scrapes", type=int, help="GETs of /metrics per format (10; smoke 3)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes for CI")
    ap.add_argument("--no-save", action="store_true", help="do not write the JSON results")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    rounds = a.rounds or (1 if a.smoke else 3)
    opts = Options(records=a.records or (2_000 if a.smoke else 2_000_000),
                   seconds=a.seconds or (0.5 if a.smoke else 5.0), partitions=4,
                   producers=1, consumers=1 if a.smoke else 2)
    partitions = a.scrape_partitions or (50 if a.smoke else 1000)
    scrapes = a.scrapes or (3 if a.smoke else 10)
    started = time.time()
    runs: list[dict[str, Any]] = []
    for rnd in range(rounds):
        for metrics in ((True, False) if rnd % 2 == 0 else (False, True)):
            say(f"round {rnd + 1}/{rounds}: metrics.enable={str(metrics).lower()}")
            run = throughput_run(metrics, opts)
            runs.append(run)
            for kind in ("produce", "consume"):
                r = run.get(kind, {})
                if "mib_s" in r:
                    say(f"  {kind}: {r['mib_s']:.1f} MiB/s, broker "
                        f"{r.get('broker_cores') or 0:.2f} cores")
    say(f"scrape: {partitions} partitions, {scrapes} GETs per format")
    results: dict[str, Any] = {"runs": runs, "summary": summarize(runs),
                               "scrape": scrape_phase(partitions, scrapes)}
    print("Metrics cost benchmark" + (" (smoke: numbers are meaningless)" if a.smoke else ""))
    print("\n".join(render(results)))
    print(f"({rounds} rounds alternating metrics on/off, fresh broker per run; produce "
          f"{RECORD_SIZE} B records, acks=1, {opts.partitions} partitions, up to "
          f"{opts.seconds:g} s; consume: the read-back of that run)")
    found = problems(results)
    for p in found:
        say(p)
    if not a.no_save:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = a.results_dir / f"{stamp}-metrics{'-smoke' if a.smoke else ''}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "smoke": a.smoke, "rounds": rounds, "record_size": RECORD_SIZE,
            "options": {"records": opts.records, "seconds": opts.seconds,
                        "partitions": opts.partitions, "consumers": opts.consumers},
            "results": results}, indent=2))
        say(f"results: {path}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
