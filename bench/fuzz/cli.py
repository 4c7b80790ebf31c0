"""`python -m bench.fuzz`: the fuzz campaign against a real `eddy serve`.

For each seed: start `eddy serve --listen 127.0.0.1:0 --data-dir <tmp>`, a healthy
confluent-kafka producer and consumer (other processes), then send --frames mutated
frames (bench.fuzz.mutate) over --connections parallel connections (bench.fuzz.campaign).
At the end: the broker must be alive and answer Metadata, every acknowledged healthy
record must have been consumed, and the broker's peak RSS must stay under --max-rss-mb.
A table per seed goes to stdout. Exit status: 0 when every check held, 1 when a healthy
record was lost or a check failed, 2 when the broker died (the last frames sent and the
broker's log tail are printed). Nothing is restarted: a dead broker ends the run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.brokers import EddyBroker, metadata_ok
from bench.fuzz import healthy
from bench.fuzz.campaign import Sender, SendStats
from bench.fuzz.corpus_files import load_corpus
from bench.fuzz.findings import Finding, InternalErrors
from bench.fuzz.mutate import Mutator
from bench.procstat import peak_rss_bytes, rss_bytes

_LEVEL = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([A-Z]+) ")
SMOKE_FRAMES = 5000


@dataclass
class RunResult:
    seed: int
    seconds: float = 0.0
    stats: SendStats = field(default_factory=SendStats)
    broker_alive: bool = True
    stalled: str | None = None  # the broker stopped answering, or outgrew --max-rss-mb
    broker_exit: int | None = None
    rss_peak: int = 0
    rss_end: int = 0
    healthy_produced: int = 0
    healthy_acked: int = 0
    healthy_consumed: int = 0
    healthy_lost: int = 0
    healthy_errors: list[str] = field(default_factory=list)
    log_levels: Counter[str] = field(default_factory=Counter)
    close_reasons: Counter[str] = field(default_factory=Counter)
    internal_errors: list[Finding] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def frames_per_s(self) -> float:
        return self.stats.frames_sent / self.seconds if self.seconds else 0.0


def _create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, healthy.HEALTHY_PARTITIONS, 1)])[topic].result(15)


def _scan_log(path: Path, result: RunResult) -> None:
    """Log lines by level, and the reasons the broker gave for closing connections."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        m = _LEVEL.match(line)
        if m:
            result.log_levels[m.group(1)] += 1
        if "closing connection from" in line:
            reason = line.split(": ", 2)[-1]
            reason = re.sub(r"\d+", "N", reason)[:90]
            result.close_reasons[reason] += 1
        elif "Traceback" in line:
            result.log_levels["traceback"] += 1


async def _watchdog(sender: Sender, broker: EddyBroker, result: RunResult) -> None:
    """A Metadata round trip every 2 s: three failed in a row (5 s each) is a stall."""
    failed = 0
    while not sender.stopped.is_set():
        await asyncio.sleep(2)
        ok = await asyncio.to_thread(metadata_ok, "127.0.0.1", broker.port, 5.0)
        failed = 0 if ok else failed + 1
        if failed >= 3 and broker.alive():
            result.stalled = "the broker answered no Metadata request for 20 s"
            sender.stop()


async def _fuzz(sender: Sender, broker: EddyBroker, result: RunResult,
                errors: InternalErrors, max_rss: int, progress: bool) -> None:
    task = asyncio.create_task(sender.run())
    watch = asyncio.create_task(_watchdog(sender, broker, result))
    t0 = time.monotonic()
    last = t0
    while not task.done():
        await asyncio.sleep(0.25)
        errors.poll()
        rss = rss_bytes(broker.pid) or 0
        result.rss_peak = max(result.rss_peak, rss)
        if not broker.alive():
            result.broker_alive = False
            sender.stop()
            break
        if rss > max_rss:
            result.stalled = f"broker RSS {rss / 2**20:.0f} MiB > --max-rss-mb"
            sender.stop()
        if progress and time.monotonic() - last >= 10:
            last = time.monotonic()
            s = sender.stats
            print(f"  {last - t0:6.0f}s {s.frames_sent:>10,} frames "
                  f"{s.frames_sent / (last - t0):8,.0f}/s closed {s.closed_by_broker:,} "
                  f"rss {rss / 2**20:.0f} MiB", file=sys.stderr)
    sender.stop()
    await task
    await watch


def run_seed(seed: int, args: argparse.Namespace, mutator: Mutator) -> RunResult:
    result = RunResult(seed)
    broker = EddyBroker([a for kv in args.set for a in ("--set", kv)], root=args.tmp)
    broker.start()
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    topic = f"fuzz-healthy-{uuid.uuid4().hex[:8]}"
    prod_rx, prod_tx = ctx.Pipe(duplex=False)
    cons_rx, cons_tx = ctx.Pipe(duplex=False)
    exp_rx, exp_tx = ctx.Pipe(duplex=False)
    procs: list[Any] = []
    try:
        _create_topic(broker.bootstrap, topic)
        procs = [
            ctx.Process(target=healthy.produce, daemon=True, args=(
                broker.bootstrap, topic, seed, args.healthy_rate, stop, prod_tx)),
            ctx.Process(target=healthy.consume, daemon=True, args=(
                broker.bootstrap, topic, f"fuzz-healthy-{seed}", stop, exp_rx, cons_tx)),
        ]
        for p in procs:
            p.start()
        internal = InternalErrors(broker.log_path)
        sender = Sender(broker.port, mutator, seed, args.frames,
                        connections=args.connections, batch_size=args.batch,
                        batch_timeout=args.batch_timeout, on_closed=internal.closed,
                        guard=not args.no_guard)
        t0 = time.monotonic()
        asyncio.run(_fuzz(sender, broker, result, internal, args.max_rss_mb * 2**20,
                          not args.quiet))
        result.seconds = time.monotonic() - t0
        result.stats = sender.stats
        if result.stalled:
            result.failures.append(f"broker stalled: {result.stalled}")
            print(stall_report(result, broker), file=sys.stderr)
            return result
        if result.broker_alive and not (broker.alive() and metadata_ok("127.0.0.1", broker.port,
                                                                       timeout=10)):
            result.broker_alive = broker.alive()
            if result.broker_alive:
                result.failures.append("broker alive but did not answer Metadata in 10 s")
        if not result.broker_alive:
            result.broker_exit = broker.proc.poll() if broker.proc else None
            result.failures.append(f"broker died (exit status {result.broker_exit})")
            return result
        internal.poll(final=True)
        internal.reproduce(broker.port)
        result.internal_errors = sorted(internal.findings.values(), key=lambda f: -f.count)
        stop.set()
        if prod_rx.poll(120):
            acked, errors, produced = prod_rx.recv()
        else:
            acked, errors, produced = [], ["healthy producer did not report in 120 s"], 0
        exp_tx.send(acked)
        seen, cerrors = cons_rx.recv() if cons_rx.poll(120) else (set(), ["no consumer report"])
        result.healthy_produced, result.healthy_acked = produced, len(acked)
        result.healthy_consumed = len(seen & set(acked))
        result.healthy_lost = len(set(acked) - seen)
        result.healthy_errors = [*errors, *cerrors]
        if result.healthy_lost:
            result.failures.append(f"{result.healthy_lost} acknowledged healthy records "
                                   "were never consumed")
        if errors:
            result.failures.append(f"healthy producer errors: {errors[:3]}")
        if not acked:
            result.failures.append("the healthy producer had no record acknowledged")
        result.rss_end = rss_bytes(broker.pid) or 0
        result.rss_peak = max(result.rss_peak, peak_rss_bytes(broker.pid) or 0)
        if result.rss_peak > args.max_rss_mb * 2**20:
            result.failures.append(f"broker peak RSS {result.rss_peak / 2**20:.0f} MiB > "
                                   f"--max-rss-mb {args.max_rss_mb}")
        code, _ = broker.stop()
        result.broker_exit = code
        if code != 0:
            result.failures.append(f"broker exited with {code} on SIGTERM")
        return result
    finally:
        stop.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
        _scan_log(broker.log_path, result)
        if not result.broker_alive:
            print(dead_broker_report(result, broker), file=sys.stderr)
        failed = not result.broker_alive or result.stalled is not None
        broker.cleanup(keep_logs=True)
        if failed:  # keep the log to read, not a data dir that may hold millions of files
            shutil.rmtree(broker.data_dir, ignore_errors=True)
            print(f"broker log kept: {broker.log_path}", file=sys.stderr)
        elif not args.keep_logs:
            shutil.rmtree(broker.workdir, ignore_errors=True)


def stall_report(result: RunResult, broker: EddyBroker) -> str:
    """What the stalled broker is doing (py-spy, when installed), then the last frames."""
    stack = "py-spy not installed: no stack"
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if Path(spy).exists():
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            stack = subprocess.run([spy, "dump", "--pid", str(broker.pid)], text=True,
                                   capture_output=True, timeout=30).stdout
    return (f"BROKER STALLED during seed {result.seed}: {result.stalled}\n"
            f"its main thread:\n{stack[:3000]}\n" + dead_broker_report(result, broker))


def dead_broker_report(result: RunResult, broker: EddyBroker) -> str:
    what = (f"BROKER DIED during seed {result.seed} (exit status {result.broker_exit})"
            if not result.broker_alive else f"seed {result.seed}")
    lines = [f"{what} after {result.stats.frames_sent:,} frames; last frames sent "
             "(connection, correlation id, source, mutations, frame hex):"]
    for f in result.stats.last_frames:
        m = f.mutated
        lines.append(f"  conn {f.connection} corr {f.correlation_id} {m.source.client} "
                     f"api {m.source.api_key} v{m.source.version} {'+'.join(m.ops)}"
                     f"{' bad-size' if m.bad_size else ''}\n    {m.frame.hex()}")
    lines.append(f"broker log tail ({broker.log_path}):\n{broker.log_tail(40)}")
    return "\n".join(lines)


def render(r: RunResult) -> str:
    s = r.stats
    rows = [
        ("seed", f"{r.seed}"),
        ("frames sent", f"{s.frames_sent:,} ({s.bytes_sent / 2**20:.1f} MiB, "
                        f"{s.bad_size_frames:,} with a wrong size prefix)"),
        ("frames held back", f"{s.held_back:,} (known broker-stalling class, --no-guard "
                             "sends them)"),
        ("frames/s", f"{r.frames_per_s:,.0f} over {r.seconds:.1f} s"),
        ("frames processed", f"{s.frames_processed:,} (answered, or before an answer)"),
        ("responses received", f"{s.responses:,}"),
        ("connections opened", f"{s.connections_opened:,}"),
        ("closed by the broker", f"{s.closed_by_broker:,} (and {s.ended_after_half_close:,} "
                                 "after our half-close following a bad-size frame)"),
        ("closed by us (timeout)", f"{s.closed_on_timeout:,}"),
        ("broker alive", ("yes" if not r.stalled else f"STALLED: {r.stalled}")
         if r.broker_alive else f"NO (exit {r.broker_exit})"),
        ("broker RSS peak", f"{r.rss_peak / 2**20:.0f} MiB (at the end "
                            f"{r.rss_end / 2**20:.0f} MiB)"),
        ("healthy produced", f"{r.healthy_produced:,} ({r.healthy_acked:,} acknowledged)"),
        ("healthy consumed", f"{r.healthy_consumed:,} of the acknowledged, "
                             f"{r.healthy_lost:,} lost"),
        ("broker log lines", ", ".join(f"{k} {v:,}" for k, v in sorted(r.log_levels.items()))
         or "-"),
    ]
    width = max(len(k) for k, _ in rows)
    out = [f"{k:<{width}}  {v}" for k, v in rows]
    if r.close_reasons:
        out.append("top reasons the broker gave for closing:")
        out += [f"  {n:>8,}  {reason}" for reason, n in r.close_reasons.most_common(8)]
    if r.internal_errors:
        out.append("internal errors the broker logged (connection closed, broker up), "
                   "with a reproducer frame when replaying found one:")
        for f in r.internal_errors:
            out.append(f"  {f.count:>8,}  {f.signature}")
            m = f.reproducer
            if m is not None:
                key, version = struct.unpack_from(">hh", m.frame, 4)
                out.append(f"            api {key} v{version} (from {m.source.client} "
                           f"api {m.source.api_key} v{m.source.version}, "
                           f"{'+'.join(m.ops)}): {m.frame.hex()}")
    out.append("result: " + ("OK" if not r.failures else "FAILED: " + "; ".join(r.failures)))
    return "\n".join(out)


def to_json(r: RunResult) -> dict[str, Any]:
    s = r.stats
    return {
        "seed": r.seed, "seconds": r.seconds, "frames_sent": s.frames_sent,
        "frames_per_s": r.frames_per_s, "frames_processed": s.frames_processed,
        "responses": s.responses, "connections_opened": s.connections_opened,
        "closed_by_broker": s.closed_by_broker,
        "ended_after_half_close": s.ended_after_half_close,
        "closed_on_timeout": s.closed_on_timeout,
        "broker_alive": r.broker_alive, "stalled": r.stalled,
        "held_back": s.held_back, "rss_peak_bytes": r.rss_peak,
        "healthy_acked": r.healthy_acked, "healthy_consumed": r.healthy_consumed,
        "healthy_lost": r.healthy_lost, "log_levels": dict(r.log_levels),
        "close_reasons": dict(r.close_reasons.most_common(20)), "failures": r.failures,
        "internal_errors": [
            {"signature": f.signature, "count": f.count,
             "reproducer": f.reproducer.frame.hex() if f.reproducer else None}
            for f in r.internal_errors],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=1_000_000, help="frames per seed")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated seeds, one run each")
    ap.add_argument("--smoke", action="store_true",
                    help=f"CI mode: {SMOKE_FRAMES:,} frames, one seed (unless --seeds)")
    ap.add_argument("--connections", type=int, default=48, help="parallel connections")
    ap.add_argument("--batch", type=int, default=3, help="frames pipelined per batch")
    ap.add_argument("--batch-timeout", type=float, default=2.0,
                    help="seconds to wait for a batch's answers before closing")
    ap.add_argument("--healthy-rate", type=float, default=200.0,
                    help="healthy records produced per second")
    ap.add_argument("--max-rss-mb", type=int, default=1024, help="broker peak RSS bound")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="broker setting passed to eddy serve --set (repeatable)")
    ap.add_argument("--no-guard", action="store_true",
                    help="also send frames of known broker-stalling classes (bench.fuzz.guard)")
    ap.add_argument("--tmp", default=None, help="parent dir of the broker's data dir")
    ap.add_argument("--keep-logs", action="store_true", help="keep the broker's dir")
    ap.add_argument("--json", type=Path, default=None, help="write results as JSON here")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)
    if args.smoke:
        args.frames = SMOKE_FRAMES
        if "--seeds" not in " ".join(argv or sys.argv):
            args.seeds = "1"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so no broker is left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    corpus = load_corpus()
    mutator = Mutator(corpus)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    print(f"corpus: {len(corpus)} frames; {args.frames:,} frames per seed, seeds {seeds}",
          file=sys.stderr)
    results: list[RunResult] = []
    status = 0
    for seed in seeds:
        r = run_seed(seed, args, mutator)
        results.append(r)
        print(render(r), flush=True)
        print(flush=True)
        if not r.broker_alive or r.stalled:
            status = 2
            break
        if r.failures:
            status = 1
    if args.json:
        args.json.write_text(json.dumps([to_json(r) for r in results], indent=2))
    return status
