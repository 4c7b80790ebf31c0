"""Runs every phase against one broker and returns a plain dict of results."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import queue as queue_mod
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import workloads
from bench.brokers import BrokerProcess
from bench.procstat import cpu_seconds, peak_rss_bytes, rss_bytes

MIB = 1024 * 1024
NS = 1_000_000_000

#: Run in this order: (produce phase key, record size, acks, consume phase key or None).
#: A consume phase reads back the topic its produce phase just wrote; every topic is deleted
#: once done with, so page-cache writeback (eddy) and memory (tansu) do not pile up.
PHASES = [
    ("1k_acks1", 1024, "1", "1k"),
    ("1k_acksall", 1024, "all", None),
    ("100b_acks1", 100, "1", "100b"),
    ("100b_acksall", 100, "all", None),
]


@dataclass
class Options:
    records: int = 2_000_000
    seconds: float = 5.0
    partitions: int = 4
    producers: int = 1
    consumers: int = 2
    linger_ms: float = 5.0
    latency_seconds: float = 5.0
    latency_warmup: float = 0.5
    latency_rate_mib: float = 20.0
    latency_linger_ms: float = 1.0
    latency_acks: str = "1"
    latency_fetch_wait_ms: int = 100
    idle_settle: float = 1.0
    repeat: int = 1
    keep_topics: bool = False
    profile_dir: Path | None = None
    phases: set[str] = field(default_factory=lambda: {"produce", "consume", "latency"})
    #: client settings on top of the bench's (security.protocol, SASL, TLS: bench.security)
    client_conf: dict[str, Any] = field(default_factory=dict)


def say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


class Profiler:
    """py-spy record against the broker for one phase (eddy only; optional)."""

    def __init__(self, opts: Options, broker: BrokerProcess, phase: str, seconds: float):
        self.proc: subprocess.Popen[bytes] | None = None
        if opts.profile_dir is None or broker.name != "eddy":
            return
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(exe).exists():
            say("py-spy not found: no profile")
            return
        opts.profile_dir.mkdir(parents=True, exist_ok=True)
        out = opts.profile_dir / f"{broker.name}-{phase}.txt"
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(broker.pid), "-d", str(max(1, round(seconds))),
             "-f", "raw", "-r", "100", "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def finish(self) -> None:
        """Stop sampling at the end of the phase (py-spy writes its output on SIGINT)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _ctx() -> Any:
    return mp.get_context("spawn")


def _collect(q: Any, n: int, timeout: float, procs: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        try:
            out.append(q.get(timeout=0.5))
        except queue_mod.Empty:
            if all(not p.is_alive() for p in procs) and q.empty():
                break
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.terminate()
            p.join(5)
    while len(out) < n:
        out.append({"error": "worker produced no result (timed out or died)"})
    return out


def _errors(results: list[dict[str, Any]]) -> str | None:
    errs = [r["error"] for r in results if "error" in r]
    for r in results:
        if "trace" in r:
            say(r["trace"])
    return "; ".join(errs) if errs else None


class Session:
    def __init__(self, broker: BrokerProcess, opts: Options) -> None:
        from confluent_kafka.admin import AdminClient

        self.broker = broker
        self.opts = opts
        self.admin = AdminClient({"bootstrap.servers": broker.bootstrap, **opts.client_conf})
        self.run_id = uuid.uuid4().hex[:8]

    def close(self) -> None:
        self.admin = None

    def create_topic(self, phase: str) -> str:
        from confluent_kafka.admin import NewTopic

        name = f"bench-{phase}-{self.run_id}"
        fs = self.admin.create_topics(
            [NewTopic(name, num_partitions=self.opts.partitions, replication_factor=1)],
            operation_timeout=20, request_timeout=20,
        )
        fs[name].result(30)
        return name

    def delete_topic(self, topic: str) -> None:
        """Best effort: a broker that cannot delete topics just keeps the data."""
        if self.opts.keep_topics:
            return
        try:
            fs = self.admin.delete_topics([topic], operation_timeout=20, request_timeout=20)
            fs[topic].result(30)
        except Exception as exc:
            say(f"{self.broker.name}: could not delete {topic}: {exc}")

    def _window(self) -> tuple[float | None, int]:
        return cpu_seconds(self.broker.pid), time.monotonic_ns()

    # --------------------------------------------------------------------- produce
    def produce(self, phase: str, size: int, acks: str) -> dict[str, Any]:
        o = self.opts
        topic = self.create_topic(phase)
        ctx = _ctx()
        n = o.producers
        barrier = ctx.Barrier(n + 1)
        q = ctx.Queue()
        params = {
            "bootstrap": self.broker.bootstrap, "client_conf": self.opts.client_conf,
            "topic": topic, "partitions": o.partitions,
            "size": size, "acks": acks, "linger_ms": o.linger_ms,
            "records": max(1, o.records // n), "seconds": o.seconds, "flush_timeout": 60,
        }
        procs = [ctx.Process(target=workloads.produce_worker, args=(params, barrier, q),
                             daemon=True) for _ in range(n)]
        for p in procs:
            p.start()
        try:
            barrier.wait(timeout=90)
        except threading.BrokenBarrierError:
            return {"error": _errors(_collect(q, n, 5, procs)) or "producers never started",
                    "topic": topic}
        prof = Profiler(o, self.broker, f"produce-{phase}", o.seconds + 60)
        cpu0, w0 = self._window()
        results = _collect(q, n, o.seconds + 120, procs)
        cpu1, w1 = self._window()
        prof.finish()
        err = _errors(results)
        if err:
            return {"error": err, "topic": topic}
        t0 = min(r["t0_ns"] for r in results)
        t1 = max(r["t1_ns"] for r in results)
        secs = (t1 - t0) / NS
        acked = sum(r["acked"] for r in results)
        out = {
            "topic": topic, "size": size, "acks": acks, "producers": n,
            "sent": sum(r["sent"] for r in results), "acked": acked,
            "failed": sum(r["failed"] for r in results),
            "unacked": sum(r["unacked"] for r in results),
            "first_error": next((r["first_error"] for r in results if r["first_error"]), None),
            "seconds": secs,
            "msgs_s": acked / secs if secs > 0 else 0.0,
            "mib_s": acked * size / MIB / secs if secs > 0 else 0.0,
            "client_cores": sum(r["client_cpu_s"] for r in results) / secs if secs else None,
            "broker_cores": _cores(cpu0, cpu1, w0, w1),
        }
        return out

    # --------------------------------------------------------------------- consume
    def consume(self, phase: str, topic: str, expected: int) -> dict[str, Any]:
        """Read back the `expected` (= acknowledged) records of a produce phase's topic."""
        from confluent_kafka import Consumer, TopicPartition

        o = self.opts
        wm = Consumer(workloads.consumer_conf(self.broker.bootstrap, self.opts.client_conf))
        try:  # informative only: a broker's ListOffsets answer is not trusted for the count
            watermarks = sum(
                hi - lo for lo, hi in (
                    wm.get_watermark_offsets(TopicPartition(topic, i), timeout=10)
                    for i in range(o.partitions)
                )
            )
        except Exception:
            watermarks = None
        finally:
            wm.close()
        n = max(1, min(o.consumers, o.partitions))
        ctx = _ctx()
        barrier = ctx.Barrier(n + 1)
        total = ctx.Value("q", 0)
        q = ctx.Queue()
        timeout = max(30.0, o.seconds * 8)
        procs = []
        for k in range(n):
            params = {
                "bootstrap": self.broker.bootstrap, "client_conf": self.opts.client_conf,
                "topic": topic,
                "partitions": list(range(k, o.partitions, n)),
                "partitions_total": o.partitions, "expected": expected, "timeout": timeout,
            }
            procs.append(ctx.Process(target=workloads.consume_worker,
                                     args=(params, barrier, total, q), daemon=True))
        for p in procs:
            p.start()
        try:
            barrier.wait(timeout=90)
        except threading.BrokenBarrierError:
            return {"error": _errors(_collect(q, n, 5, procs)) or "consumers never started"}
        prof = Profiler(o, self.broker, f"consume-{phase}", timeout)
        cpu0, w0 = self._window()
        results = _collect(q, n, timeout + 60, procs)
        cpu1, w1 = self._window()
        prof.finish()
        err = _errors(results)
        if err:
            return {"error": err}
        t0 = min(r["t0_ns"] for r in results)
        t1 = max(r["t1_ns"] for r in results)
        secs = (t1 - t0) / NS
        consumed = sum(r["consumed"] for r in results)
        nbytes = sum(r["bytes"] for r in results)
        out = {
            "topic": topic, "consumers": n, "expected": expected, "consumed": consumed,
            "watermark_records": watermarks,
            "bytes": nbytes, "seconds": secs,
            "msgs_s": consumed / secs if secs > 0 else 0.0,
            "mib_s": nbytes / MIB / secs if secs > 0 else 0.0,
            "client_cores": sum(r["client_cpu_s"] for r in results) / secs if secs else None,
            "broker_cores": _cores(cpu0, cpu1, w0, w1),
            "fetch_errors": sum(r["errors"] for r in results),
        }
        if consumed < expected:
            out["error"] = f"read {consumed} of {expected} records before the time limit"
        return out

    # --------------------------------------------------------------------- latency
    def latency(self) -> dict[str, Any]:
        o = self.opts
        topic = self.create_topic("latency")
        ctx = _ctx()
        ready = ctx.Event()
        shared = {"t0_ns": ctx.Value("q", 0), "sent": ctx.Value("q", 0), "done": ctx.Event()}
        q = ctx.Queue()
        size = 1024
        base = {"bootstrap": self.broker.bootstrap, "client_conf": self.opts.client_conf,
                "topic": topic, "partitions": o.partitions, "seconds": o.latency_seconds}
        cparams = {**base, "warmup": o.latency_warmup,
                   "fetch_wait_max_ms": o.latency_fetch_wait_ms}
        pparams = {**base, "size": size, "acks": o.latency_acks,
                   "linger_ms": o.latency_linger_ms, "rate_bytes": o.latency_rate_mib * MIB}
        procs = [
            ctx.Process(target=workloads.latency_consumer, args=(cparams, ready, shared, q),
                        daemon=True),
            ctx.Process(target=workloads.latency_producer, args=(pparams, ready, shared, q),
                        daemon=True),
        ]
        for p in procs:
            p.start()
        ready.wait(60)
        prof = Profiler(o, self.broker, "latency", o.latency_seconds)
        cpu0, w0 = self._window()
        results = _collect(q, 2, o.latency_seconds + 150, procs)
        cpu1, w1 = self._window()
        prof.finish()
        err = _errors(results)
        if err:
            return {"error": err}
        prod = next(r for r in results if r.get("role") == "producer")
        cons = next(r for r in results if r.get("role") == "consumer")
        secs = (prod["t1_ns"] - prod["t0_ns"]) / NS
        lat = cons["latencies_us"]
        out = {
            "topic": topic, "size": size, "target_mib_s": o.latency_rate_mib,
            "linger_ms": o.latency_linger_ms, "acks": o.latency_acks,
            "fetch_wait_max_ms": o.latency_fetch_wait_ms,
            "sent": prod["sent"], "received": cons["received"], "failed": prod["failed"],
            "achieved_mib_s": prod["sent"] * size / MIB / secs if secs > 0 else 0.0,
            "seconds": secs, "warmup_s": o.latency_warmup, "buffer_full": prod["buffer_full"],
            "broker_cores": _cores(cpu0, cpu1, w0, w1), **lat,
        }
        if lat.get("count", 0) == 0:
            out["error"] = "no latency samples"
        elif cons["received"] < prod["sent"]:
            out["error"] = f"received {cons['received']} of {prod['sent']} records"
        return out


def _cores(cpu0: float | None, cpu1: float | None, w0: int, w1: int) -> float | None:
    if cpu0 is None or cpu1 is None or w1 <= w0:
        return None
    return (cpu1 - cpu0) / ((w1 - w0) / NS)


def _mib(b: int | None) -> float | None:
    return None if b is None else b / MIB


def run_broker(broker: BrokerProcess, opts: Options) -> dict[str, Any]:
    """Start `broker`, run every phase, stop it; failures are recorded, never raised."""
    res: dict[str, Any] = {"broker": broker.name, "storage": broker.storage, "errors": {},
                           "produce": {}, "consume": {}}
    say(f"{broker.name}: starting")
    try:
        broker.start()
    except Exception as exc:
        res["errors"]["startup"] = str(exc)
        say(f"{broker.name}: failed to start: {exc}")
        broker.cleanup(keep_logs=True)
        return res
    session: Session | None = None
    try:
        res["pid"] = broker.pid
        res["startup"] = {
            "ready_line_ms": None if broker.ready_line_s is None else broker.ready_line_s * 1e3,
            "first_metadata_ms": broker.first_metadata_s * 1e3
            if broker.first_metadata_s is not None else None,
        }
        time.sleep(opts.idle_settle)
        res["rss"] = {"idle_mib": _mib(rss_bytes(broker.pid))}
        say(f"{broker.name}: up on {broker.bootstrap} in "
            f"{res['startup']['first_metadata_ms']:.0f} ms, idle RSS "
            f"{res['rss']['idle_mib'] or 0:.1f} MiB")
        session = Session(broker, opts)
        _throughput_phases(res, broker, session, opts)
        if "latency" in opts.phases:
            r = _phase(res, "latency", session.latency)
            res["latency"] = r
            if "topic" in r:
                session.delete_topic(r["topic"])
            if "p99_ms" in r:
                say(f"{broker.name}: latency p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms "
                    f"max {r['max_ms']:.2f} ms at {r['achieved_mib_s']:.1f} MiB/s")
        if "groups" in opts.phases:  # python -m bench --groups: see bench/groups.py
            from bench import groups as bench_groups

            res["groups"] = _phase(res, "groups", lambda: bench_groups.run(broker, opts))
        if "txn" in opts.phases:  # python -m bench --txn: see bench/txn.py
            from bench import txn as bench_txn

            res["txn"] = _phase(res, "txn", lambda: bench_txn.run(broker, opts))
        res["rss"]["after_mib"] = _mib(rss_bytes(broker.pid))
        res["rss"]["peak_mib"] = _mib(peak_rss_bytes(broker.pid))
    except Exception as exc:
        res["errors"]["run"] = f"{type(exc).__name__}: {exc}"
        say(f"{broker.name}: {res['errors']['run']}")
    finally:
        # destroy the runner's admin client before the broker goes, so that librdkafka
        # does not log reconnect failures
        if session is not None:
            session.close()
        gc.collect()
        if broker.alive():
            code, took = broker.stop()
            res["shutdown"] = {"exit_code": code, "seconds": took}
            if code != 0:
                res["errors"]["shutdown"] = f"exit code {code} after SIGTERM"
        else:
            code = broker.proc.returncode if broker.proc else None
            res["errors"]["crash"] = f"broker exited with {code}: {broker.log_tail()}"
        with contextlib.suppress(Exception):
            broker.cleanup(keep_logs=bool(res["errors"]))
        if res["errors"]:
            res["log"] = str(broker.log_path)
    return res


def _throughput_phases(res: dict[str, Any], broker: BrokerProcess, session: Session,
                       opts: Options) -> None:
    """Every produce (and read-back consume) phase, `opts.repeat` times; the run with the
    median MiB/s is reported, with every run's MiB/s under "samples"."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rep in range(max(1, opts.repeat)):
        tag = f" (run {rep + 1}/{opts.repeat})" if opts.repeat > 1 else ""
        for phase, size, acks, read_back in PHASES:
            if "produce" not in opts.phases and not ("consume" in opts.phases and read_back):
                continue
            r = _phase(res, f"produce {phase}", lambda p=phase, s=size, a=acks:
                       session.produce(p, s, a))
            runs.setdefault(("produce", phase), []).append(r)
            _report(broker.name, f"produce {phase}{tag}", r)
            if not broker.alive():
                raise RuntimeError(f"{broker.name} died: {broker.log_tail()}")
            if read_back and "consume" in opts.phases:
                if r.get("acked") and "topic" in r:
                    c = _phase(res, f"consume {read_back}", lambda p=read_back, t=r["topic"],
                               n=r["acked"]: session.consume(p, t, n))
                else:
                    c = {"error": f"no data: produce {phase} failed"}
                    res["errors"][f"consume {read_back}"] = c["error"]
                runs.setdefault(("consume", read_back), []).append(c)
                _report(broker.name, f"consume {read_back}{tag}", c)
                if not broker.alive():
                    raise RuntimeError(f"{broker.name} died: {broker.log_tail()}")
            if "topic" in r:
                session.delete_topic(r["topic"])
    for (kind, phase), rs in runs.items():
        ok = sorted((r for r in rs if "mib_s" in r and "error" not in r),
                    key=lambda r: r["mib_s"])
        pick = ok[len(ok) // 2] if ok else rs[-1]
        if len(rs) > 1:
            pick = {**pick, "samples_mib_s": [r.get("mib_s") for r in rs]}
        res[kind][phase] = pick


def _phase(res: dict[str, Any], name: str, fn: Any) -> dict[str, Any]:
    try:
        r = fn()
    except Exception as exc:
        r = {"error": f"{type(exc).__name__}: {exc}"}
    if "error" in r:
        res["errors"][name] = r["error"]
    return dict(r)


def _report(name: str, phase: str, r: dict[str, Any]) -> None:
    if "error" in r and "mib_s" not in r:
        say(f"{name}: {phase}: ERROR {r['error']}")
        return
    bc = r.get("broker_cores")
    cc = r.get("client_cores")
    say(f"{name}: {phase}: {r['msgs_s']:,.0f} msgs/s {r['mib_s']:.1f} MiB/s over "
        f"{r['seconds']:.2f}s (broker {bc or 0:.2f} cores, client {cc or 0:.2f} cores)"
        + (f" ERROR {r['error']}" if "error" in r else ""))
