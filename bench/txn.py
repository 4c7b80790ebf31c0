"""The exactly-once phase (`python -m bench --txn`; `--phases txn` runs it alone).

Two measurements, both with librdkafka (confluent-kafka) producers in a spawned worker
process, each on a fresh PARTITIONS-partition topic deleted afterwards:

1. transactions: one transactional producer runs transactions back to back, each
   begin_transaction(), TXN_RECORDS records of TXN_RECORD_SIZE bytes round-robin over the
   partitions, commit_transaction(); for `--seconds` (at most TXN_MAX transactions) after
   TXN_WARMUP uncounted ones. Reported: commits/s, records/s and MiB/s, and the latency of
   a whole transaction (begin to commit returned), p50 and p99.
2. the cost of idempotence: the bench's produce workload (1 KiB records, acks=all, the
   producer settings of the produce phases, `--linger-ms`) with enable.idempotence false
   and then true, up to `--records` records or `--seconds` seconds each; IDEM_RUNS runs of
   each (or --repeat, if more; 1 with --smoke), alternating which goes first;
   cost = 1 - median(idempotent msgs/s) / median(plain msgs/s).

   What idempotence costs with librdkafka is mostly on the client: its idempotent producer
   counts in-flight *messages* against its limit of 5 in-flight requests, so with batches
   of more than a few records it has one ProduceRequest in flight per partition (4 here,
   up to dozens for the plain producer), and while it waits for a response with the next
   batch ready its broker thread busy-polls (poll() with a zero timeout, tens of thousands
   a second). Broker and client share this machine's 2 cores, so that polling takes CPU
   from the broker and from the producing thread: it is part of the cost as measured
   here, and left as is (same settings otherwise; see the client CPU row).

Broker and client CPU (cores used) are reported per measurement, and so is the CPU that
other processes used on the machine meanwhile (another job's load makes runs noisy; runs
where it is well above 0 say little).

Targets (issue 6): at least 200 transactions/s; idempotence costs under 10% of produce
throughput.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import statistics
import sys
import time
import traceback
import uuid
from typing import Any

PARTITIONS = 4
TXN_RECORDS = 100
TXN_RECORD_SIZE = 1024
TXN_WARMUP = 20
TXN_MAX = 1_000_000
IDEM_RUNS = 3
IDEM_RECORD_SIZE = 1024
MIB = 1024 * 1024

_rows_registered = False


def register_rows() -> None:
    """Add this phase's rows (with targets) to the bench table; only when it runs."""
    global _rows_registered
    if _rows_registered:
        return
    from bench import report

    report.ROWS.extend([
        report.Row(f"txn: commits/s ({TXN_RECORDS} x 1 KiB records each)",
                   "txn.txn_per_s", "{:,.0f}", target=">= 200", meets=lambda v: v >= 200),
        report.Row("txn: records/s in transactions", "txn.txn_records_per_s", "{:,.0f}"),
        report.Row("txn: transaction latency p50|p99 (ms)",
                   "txn.txn_p50_ms|txn.txn_p99_ms", "{:,.2f}"),
        report.Row("produce 1 KiB acks=all, plain|idempotent (msgs/s)",
                   "txn.plain_msgs_s|txn.idempotent_msgs_s", "{:,.0f}"),
        report.Row("idempotence cost (% of produce msgs/s)", "txn.idempotence_cost_pct",
                   "{:,.1f}", target="< 10", meets=lambda v: v < 10),
        report.Row("CPU broker, produce plain|idempotent (cores)",
                   "txn.plain_broker_cores|txn.idempotent_broker_cores", "{:.2f}"),
        report.Row("CPU client, produce plain|idempotent (cores)",
                   "txn.plain_client_cores|txn.idempotent_client_cores", "{:.2f}"),
        report.Row("CPU of other processes, plain|idempotent runs (cores)",
                   "txn.plain_other_cores|txn.idempotent_other_cores", "{:.2f}"),
    ])
    _rows_registered = True


def notes(opts: Any) -> list[str]:
    runs = idem_runs(opts)
    return [
        f"txn: one transactional producer, {TXN_RECORDS} records of {TXN_RECORD_SIZE} B per "
        f"transaction over {PARTITIONS} partitions, begin/produce/commit back to back for "
        f"{opts.seconds:g} s after {TXN_WARMUP} warm-up transactions; latency = begin to "
        f"commit_transaction() returned.",
        f"idempotence cost: 1 KiB records, acks=all, linger.ms={opts.linger_ms:g}, "
        f"enable.idempotence false vs true, same settings otherwise, median of {runs} "
        "alternating run(s) each; cost = 1 - idempotent/plain msgs/s. librdkafka's "
        "idempotent producer keeps one request in flight per partition and busy-polls while "
        "it waits, on the cores the broker uses too (the client CPU row).",
    ]


# ---- runner side ---------------------------------------------------------------------------


def idem_runs(opts: Any) -> int:
    """IDEM_RUNS (or --repeat, if more); a single run for tiny runs (--smoke: 1 s phases)."""
    return max(IDEM_RUNS, opts.repeat) if opts.seconds >= 2 else 1


def run(broker: Any, opts: Any) -> dict[str, Any]:
    """Run both measurements against a started broker; returns the results (or "error")."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    params = {
        "bootstrap": broker.bootstrap, "broker_pid": broker.pid,
        "run_id": uuid.uuid4().hex[:8], "seconds": float(opts.seconds),
        "records": int(opts.records), "linger_ms": float(opts.linger_ms),
        "idem_runs": idem_runs(opts),
    }
    proc = ctx.Process(target=_worker, args=(params, q), daemon=True)
    proc.start()
    limit = (2 * params["idem_runs"] + 1) * (params["seconds"] + 60) + 120
    deadline = time.monotonic() + limit
    result: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        try:
            result = q.get(timeout=0.5)
            break
        except queue_mod.Empty:
            if not proc.is_alive() and q.empty():
                break
    proc.join(10)
    if proc.is_alive():
        proc.terminate()
        proc.join(5)
    if result is None:
        return {"error": "txn worker produced no result (timed out or died)"}
    if "trace" in result:
        print(f"[bench] txn: {result['trace']}", file=sys.stderr, flush=True)
    _say(broker.name, result)
    return result


def _say(name: str, r: dict[str, Any]) -> None:
    def num(key: str, fmt: str = "{:,.0f}") -> str:
        v = r.get(key)
        return fmt.format(v) if isinstance(v, int | float) else "-"

    print(f"[bench] {name}: txn: {num('txn_per_s')} commits/s of {TXN_RECORDS} x 1 KiB "
          f"(p50 {num('txn_p50_ms', '{:.2f}')} ms, p99 {num('txn_p99_ms', '{:.2f}')} ms); "
          f"produce plain {num('plain_msgs_s')} msgs/s, idempotent "
          f"{num('idempotent_msgs_s')} msgs/s: idempotence costs "
          f"{num('idempotence_cost_pct', '{:.1f}')}% (plain {r.get('plain_samples')}, "
          f"idempotent {r.get('idempotent_samples')}); client CPU "
          f"{num('plain_client_cores', '{:.2f}')}|{num('idempotent_client_cores', '{:.2f}')}, "
          f"other processes {num('plain_other_cores', '{:.2f}')}|"
          f"{num('idempotent_other_cores', '{:.2f}')} cores"
          + (f" ERROR {r['error']}" if "error" in r else ""), file=sys.stderr, flush=True)


# ---- worker side (a spawned process) -------------------------------------------------------


def _worker(params: dict[str, Any], q: Any) -> None:
    out: dict[str, Any] = {}
    try:
        _measure(params, out)
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["trace"] = traceback.format_exc()
    q.put(out)


def _measure(params: dict[str, Any], out: dict[str, Any]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": params["bootstrap"]})
    topics: list[str] = []
    made = [0]

    def fresh(name: str) -> str:
        made[0] += 1
        topic = f"bench-txn-{name}-{params['run_id']}-{made[0]}"
        _create(admin, topic, PARTITIONS)
        topics.append(topic)
        return topic

    try:
        out.update(_transactions(params, fresh("txn")))
        _drop(admin, topics)
        samples: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for i in range(params["idem_runs"]):
            for idem in ((False, True) if i % 2 == 0 else (True, False)):
                samples[idem].append(_produce(params, fresh("idem" if idem else "plain"),
                                              idem))
                _drop(admin, topics)
        plain = statistics.median(s["msgs_s"] for s in samples[False])
        idem_ = statistics.median(s["msgs_s"] for s in samples[True])
        out.update(
            plain_msgs_s=plain, idempotent_msgs_s=idem_,
            plain_mib_s=plain * IDEM_RECORD_SIZE / MIB,
            idempotent_mib_s=idem_ * IDEM_RECORD_SIZE / MIB,
            idempotence_cost_pct=(1 - idem_ / plain) * 100 if plain > 0 else None,
            plain_samples=[round(s["msgs_s"]) for s in samples[False]],
            idempotent_samples=[round(s["msgs_s"]) for s in samples[True]],
            plain_broker_cores=statistics.median(
                s["broker_cores"] or 0 for s in samples[False]),
            idempotent_broker_cores=statistics.median(
                s["broker_cores"] or 0 for s in samples[True]),
            plain_client_cores=statistics.median(
                s["client_cores"] or 0 for s in samples[False]),
            idempotent_client_cores=statistics.median(
                s["client_cores"] or 0 for s in samples[True]),
            plain_other_cores=_median_or_none(s["other_cores"] for s in samples[False]),
            idempotent_other_cores=_median_or_none(s["other_cores"] for s in samples[True]),
        )
        errs = [s["error"] for s in samples[False] + samples[True] if "error" in s]
        if errs:
            out["error"] = errs[0]
    finally:
        _drop(admin, topics)


def _median_or_none(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _broker_cpu(params: dict[str, Any]) -> float | None:
    from bench.procstat import cpu_seconds

    try:
        return cpu_seconds(int(params["broker_pid"]))
    except Exception:
        return None


def _cores(cpu0: float | None, cpu1: float | None, secs: float) -> float | None:
    if cpu0 is None or cpu1 is None or secs <= 0:
        return None
    return (cpu1 - cpu0) / secs


def _transactions(params: dict[str, Any], topic: str) -> dict[str, Any]:
    from confluent_kafka import Producer

    failed: list[str] = []

    def on_error(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    p = Producer({
        "bootstrap.servers": params["bootstrap"],
        "client.id": "eddy-bench-txn",
        "transactional.id": f"eddy-bench-txn-{params['run_id']}",
        "linger.ms": params["linger_ms"],
        "batch.size": 1_000_000,
        "compression.type": "none",
        "message.timeout.ms": 60_000,
        "transaction.timeout.ms": 60_000,
        "delivery.report.only.error": True,
        "on_delivery": on_error,
    })
    payload = os.urandom(TXN_RECORD_SIZE)
    p.init_transactions(30)

    def one() -> None:
        p.begin_transaction()
        for i in range(TXN_RECORDS):
            p.produce(topic, payload, partition=i % PARTITIONS)
        p.commit_transaction(30)

    for _ in range(TXN_WARMUP):
        one()
    latencies: list[float] = []
    cpu0 = _broker_cpu(params)
    t0 = time.perf_counter()
    deadline = t0 + params["seconds"]
    while len(latencies) < TXN_MAX:
        ts = time.perf_counter()
        one()
        latencies.append(time.perf_counter() - ts)
        if ts >= deadline:
            break
    secs = time.perf_counter() - t0
    cpu1 = _broker_cpu(params)
    p.flush(10)
    if failed:
        raise RuntimeError(f"{len(failed)} transactional records failed: {failed[0]}")
    n = len(latencies)
    latencies.sort()
    return {
        "txn_count": n, "txn_seconds": secs, "txn_per_s": n / secs,
        "txn_records_per_s": n * TXN_RECORDS / secs,
        "txn_mib_s": n * TXN_RECORDS * TXN_RECORD_SIZE / MIB / secs,
        "txn_p50_ms": latencies[n // 2] * 1e3,
        "txn_p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1e3,
        "txn_broker_cores": _cores(cpu0, cpu1, secs),
    }


def _produce(params: dict[str, Any], topic: str, idempotent: bool) -> dict[str, Any]:
    from confluent_kafka import Producer

    from bench.procstat import machine_busy_seconds, self_cpu_seconds
    from bench.workloads import producer_conf

    errors = [0]
    first_error: list[str] = []

    def on_error(err: Any, _msg: Any) -> None:
        if err is not None:
            errors[0] += 1
            if not first_error:
                first_error.append(str(err))

    conf = producer_conf(params["bootstrap"], "all", params["linger_ms"])
    conf["enable.idempotence"] = idempotent
    conf["on_delivery"] = on_error
    p = Producer(conf)
    payload = os.urandom(IDEM_RECORD_SIZE)
    records = params["records"]
    # connect, learn the partition leaders (and get a producer id) before the clock starts
    p.list_topics(topic, timeout=10)
    for i in range(PARTITIONS):
        p.produce(topic, payload, partition=i)
    if p.flush(30) != 0 or errors[0]:
        return {"error": f"warm-up produce failed: {first_error[:1]}", "msgs_s": 0.0,
                "broker_cores": None, "client_cores": None, "other_cores": None}
    produce, poll = p.produce, p.poll
    cpu0 = _broker_cpu(params)
    self0 = self_cpu_seconds()
    busy0 = machine_busy_seconds()
    t0 = time.perf_counter()
    deadline = t0 + params["seconds"]
    hard_deadline = deadline + 30
    sent = 0
    while sent < records:
        try:
            produce(topic, payload)
        except BufferError:
            poll(0.001)
            if time.perf_counter() > hard_deadline:
                break
            continue
        sent += 1
        if not sent & 1023:
            poll(0)
            if time.perf_counter() >= deadline:
                break
    unacked = p.flush(60)
    secs = time.perf_counter() - t0
    cpu1 = _broker_cpu(params)
    self1 = self_cpu_seconds()
    busy1 = machine_busy_seconds()
    acked = sent - errors[0] - unacked
    broker_cores = _cores(cpu0, cpu1, secs)
    client_cores = _cores(self0, self1, secs)
    machine_cores = _cores(busy0, busy1, secs)
    other_cores = (None if machine_cores is None or broker_cores is None or client_cores is None
                   else max(0.0, machine_cores - broker_cores - client_cores))
    out: dict[str, Any] = {"sent": sent, "acked": acked, "seconds": secs,
                           "msgs_s": acked / secs, "broker_cores": broker_cores,
                           "client_cores": client_cores, "other_cores": other_cores}
    if errors[0] or unacked:
        out["error"] = (f"{'idempotent' if idempotent else 'plain'} produce: {errors[0]} "
                        f"failed, {unacked} unacknowledged ({first_error[:1]})")
    return out


def _create(admin: Any, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    fs = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                             operation_timeout=20, request_timeout=20)
    fs[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # every partition has a leader
        md = admin.list_topics(name, timeout=10)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.05)
    raise TimeoutError(f"topic {name} not ready")


def _drop(admin: Any, topics: list[str]) -> None:
    """Delete the topics made so far (best effort, as the other phases)."""
    if not topics:
        return
    try:
        fs = admin.delete_topics(list(topics), operation_timeout=20, request_timeout=20)
        for f in fs.values():
            f.result(30)
    except Exception:
        pass
    topics.clear()
