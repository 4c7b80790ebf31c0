"""The consumer-group phase (`python -m bench --groups`; `--phases groups` runs it alone).

Two numbers, both with librdkafka (confluent-kafka) consumers in a spawned worker process:

1. first record: a new group subscribes to a topic whose records are already there; the time
   from `subscribe()` to the first record `poll()` returns (FindCoordinator, JoinGroup (twice:
   MEMBER_ID_REQUIRED), SyncGroup, OffsetFetch, ListOffsets, Fetch). The consumer is created
   (and has its bootstrap connection under way) before the clock starts. Median of
   FIRST_JOIN_GROUPS new groups, one after the other.
2. rebalance with REBALANCE_MEMBERS members: that many consumers (threads of the worker, each
   its own librdkafka instance) in one group over a REBALANCE_PARTITIONS-partition topic;
   once their assignment is settled one more member joins. Eager protocol: each old member
   learns of the rebalance from a heartbeat, gets its revoke callback and then sends its
   JoinGroup, so the last revoke callback is the last rejoin. Reported: from the last rejoin
   to the moment every member has its new assignment (the last on_assign callback), and
   from the new member's subscribe() to that moment (this one includes the heartbeat that
   tells the old members, heartbeat.interval.ms=HEARTBEAT_MS). Median of REBALANCE_RUNS.

Targets (issue 3): first record < 500 ms with the embedded defaults; rebalance of 10 members
< 1 s after the last rejoin.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue as queue_mod
import statistics
import threading
import time
import traceback
import uuid
from typing import Any

FIRST_JOIN_GROUPS = 5
FIRST_JOIN_RECORDS = 400
FIRST_JOIN_PARTITIONS = 4
FIRST_JOIN_TIMEOUT_S = 60.0
REBALANCE_MEMBERS = 10
REBALANCE_PARTITIONS = 20
REBALANCE_RUNS = 3
REBALANCE_TIMEOUT_S = 90.0
HEARTBEAT_MS = 500
SESSION_MS = 10_000

_rows_registered = False


def register_rows() -> None:
    """Add this phase's rows (with targets) to the bench table; only when it runs, so the
    table of a run without --groups (and the smoke test's list of rows) is unchanged."""
    global _rows_registered
    if _rows_registered:
        return
    from bench import report

    report.ROWS.extend([
        report.Row("group: subscribe to first record (ms)", "groups.first_record_ms",
                   "{:,.0f}", target="< 500", meets=lambda v: v < 500),
        report.Row(f"group: rebalance {REBALANCE_MEMBERS}+1 members, last rejoin to "
                   "assigned (ms)", "groups.rebalance_ms", "{:,.0f}", target="< 1000",
                   meets=lambda v: v < 1000),
        report.Row(f"group: rebalance {REBALANCE_MEMBERS}+1 members, join to assigned (ms)",
                   "groups.rebalance_total_ms", "{:,.0f}"),
    ])
    _rows_registered = True


def notes() -> list[str]:
    return [
        f"groups: first record = subscribe() to first poll()ed record of a new group, "
        f"records already in the topic ({FIRST_JOIN_PARTITIONS} partitions), median of "
        f"{FIRST_JOIN_GROUPS} groups; rebalance = {REBALANCE_MEMBERS} members (threads, one "
        f"librdkafka instance each, eager range assignor, {REBALANCE_PARTITIONS} partitions, "
        f"heartbeat.interval.ms={HEARTBEAT_MS}) then one more joins: last revoke callback "
        f"(= last rejoin) to last on_assign callback, median of {REBALANCE_RUNS} runs.",
    ]


# ---- runner side ---------------------------------------------------------------------------


def run(broker: Any, opts: Any) -> dict[str, Any]:
    """Run both measurements against a started broker; returns the results (or "error")."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    params = {"bootstrap": broker.bootstrap, "run_id": uuid.uuid4().hex[:8]}
    proc = ctx.Process(target=_worker, args=(params, q), daemon=True)
    proc.start()
    limit = FIRST_JOIN_GROUPS * FIRST_JOIN_TIMEOUT_S + REBALANCE_RUNS * 2 * REBALANCE_TIMEOUT_S
    deadline = time.monotonic() + limit + 60
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
        return {"error": "groups worker produced no result (timed out or died)"}
    if "trace" in result:
        print(f"[bench] groups: {result['trace']}", flush=True)
    _say(broker.name, result)
    return result


def _say(name: str, r: dict[str, Any]) -> None:
    import sys

    def ms(v: Any) -> str:
        return f"{v:,.0f} ms" if isinstance(v, int | float) else "-"

    print(f"[bench] {name}: groups: first record {ms(r.get('first_record_ms'))} "
          f"(samples {r.get('first_record_samples_ms')}), rebalance {REBALANCE_MEMBERS}+1 "
          f"last rejoin to assigned {ms(r.get('rebalance_ms'))}, join to assigned "
          f"{ms(r.get('rebalance_total_ms'))} (samples {r.get('rebalance_samples_ms')})"
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

    bootstrap, run_id = params["bootstrap"], params["run_id"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    first_topic = f"bench-groups-first-{run_id}"
    reb_topic = f"bench-groups-rebalance-{run_id}"
    _create(admin, first_topic, FIRST_JOIN_PARTITIONS)
    _create(admin, reb_topic, REBALANCE_PARTITIONS)
    try:
        _produce(bootstrap, first_topic, FIRST_JOIN_PARTITIONS, FIRST_JOIN_RECORDS)
        samples = []
        for i in range(FIRST_JOIN_GROUPS):
            samples.append(_first_record_ms(bootstrap, first_topic,
                                            f"bench-first-{run_id}-{i}"))
        out["first_record_samples_ms"] = [round(s, 1) for s in samples]
        out["first_record_ms"] = statistics.median(samples)

        runs = []
        for i in range(REBALANCE_RUNS):
            runs.append(_rebalance(bootstrap, reb_topic, f"bench-rebalance-{run_id}-{i}"))
        out["rebalance_samples_ms"] = [round(r["rebalance_ms"], 1) for r in runs]
        out["rebalance_total_samples_ms"] = [round(r["total_ms"], 1) for r in runs]
        out["rebalance_ms"] = statistics.median(r["rebalance_ms"] for r in runs)
        out["rebalance_total_ms"] = statistics.median(r["total_ms"] for r in runs)
        out["rebalance_settle_s"] = [round(r["settle_s"], 2) for r in runs]
        out.update(members=REBALANCE_MEMBERS, partitions=REBALANCE_PARTITIONS,
                   heartbeat_interval_ms=HEARTBEAT_MS)
    finally:
        try:
            fs = admin.delete_topics([first_topic, reb_topic], operation_timeout=20,
                                     request_timeout=20)
            for f in fs.values():
                f.result(30)
        except Exception:
            pass  # best effort, as the other phases


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


def _produce(bootstrap: str, topic: str, partitions: int, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 30_000})
    failed: list[str] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    for i in range(n):
        p.produce(topic, value=b"x" * 100, partition=i % partitions, on_delivery=cb)
    if p.flush(60) != 0 or failed:
        raise RuntimeError(f"could not produce the records: {failed[:3]}")


def _first_record_ms(bootstrap: str, topic: str, group: str) -> float:
    from confluent_kafka import Consumer, KafkaException

    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": "eddy-bench-group",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "enable.partition.eof": False,
    })
    try:
        t0 = time.perf_counter()
        c.subscribe([topic])
        deadline = t0 + FIRST_JOIN_TIMEOUT_S
        while time.perf_counter() < deadline:
            m = c.poll(0.01)
            if m is None:
                continue
            if m.error():
                if m.error().fatal():
                    raise KafkaException(m.error())
                continue
            return (time.perf_counter() - t0) * 1e3
        raise TimeoutError(f"no record for group {group} in {FIRST_JOIN_TIMEOUT_S:g}s")
    finally:
        c.close()


class _Member:
    """One consumer in its own thread; records (time, kind, partitions) of its callbacks."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        from confluent_kafka import Consumer

        self.name = name
        self.topic = topic
        self.events: list[tuple[float, str, frozenset[int]]] = []
        self.assignment: frozenset[int] | None = None
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.subscribed_at: float | None = None
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "auto.offset.reset": "latest", "enable.auto.commit": False,
            "heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": SESSION_MS,
            "partition.assignment.strategy": "range",
            "error_cb": lambda err: self.errors.append(str(err)),
        })
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_assign(self, _c: Any, parts: list[Any]) -> None:
        now = time.perf_counter()
        got = frozenset(tp.partition for tp in parts)
        with self.lock:
            self.assignment = got
            self.events.append((now, "assign", got))

    def _on_revoke(self, _c: Any, parts: list[Any]) -> None:
        now = time.perf_counter()
        with self.lock:
            self.assignment = frozenset()
            self.events.append((now, "revoke", frozenset(tp.partition for tp in parts)))

    def start(self) -> None:
        self.subscribed_at = time.perf_counter()
        self.consumer.subscribe([self.topic], on_assign=self._on_assign,
                                on_revoke=self._on_revoke)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.consumer.close()


def _settled(ms: list[_Member], partitions: int, since: float | None = None) -> bool:
    """Every member holds a non-empty share, shares are disjoint and cover every partition
    (and, with since, every member got an assignment after it)."""
    sets = []
    for m in ms:
        with m.lock:
            a = m.assignment
            if since is not None and not any(t >= since and k == "assign"
                                             for t, k, _ in m.events):
                return False
        if not a:
            return False
        sets.append(a)
    union: frozenset[int] = frozenset().union(*sets)
    return sum(len(a) for a in sets) == partitions and union == frozenset(range(partitions))


def _rebalance(bootstrap: str, topic: str, group: str) -> dict[str, float]:
    ms = [_Member(bootstrap, topic, group, f"bench-member-{i}") for i in range(REBALANCE_MEMBERS)]
    extra: _Member | None = None
    try:
        t_start = time.perf_counter()
        for m in ms:
            m.start()
        deadline = time.perf_counter() + REBALANCE_TIMEOUT_S
        quiet_since = None
        last_count = -1
        while True:  # settled: a full split and no callback for a second
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{REBALANCE_MEMBERS} members did not settle in "
                                   f"{REBALANCE_TIMEOUT_S:g}s: {_state(ms)}")
            count = sum(len(m.events) for m in ms)
            if _settled(ms, REBALANCE_PARTITIONS) and count == last_count:
                if quiet_since is None:
                    quiet_since = time.perf_counter()
                elif time.perf_counter() - quiet_since >= 1.0:
                    break
            else:
                quiet_since = None
            last_count = count
            time.sleep(0.02)
        settle_s = time.perf_counter() - t_start

        extra = _Member(bootstrap, topic, group, f"bench-member-{REBALANCE_MEMBERS}")
        extra.start()
        t_join = extra.subscribed_at
        assert t_join is not None
        everyone = [*ms, extra]
        deadline = time.perf_counter() + REBALANCE_TIMEOUT_S
        while not _settled(everyone, REBALANCE_PARTITIONS, since=t_join):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"the rebalance to {REBALANCE_MEMBERS + 1} members did not "
                                   f"finish in {REBALANCE_TIMEOUT_S:g}s: {_state(everyone)}")
            time.sleep(0.005)
        time.sleep(0.2)  # a callback racing the check above lands now
        with_lock = []
        for m in everyone:
            with m.lock:
                with_lock.append(list(m.events))
        revokes = [t for evs in with_lock[:-1] for t, k, _ in evs if k == "revoke" and t >= t_join]
        assigns = [max(t for t, k, _ in evs if k == "assign" and t >= t_join) for evs in with_lock]
        last_rejoin = max([*revokes, t_join])
        done = max(assigns)
        return {"rebalance_ms": (done - last_rejoin) * 1e3, "total_ms": (done - t_join) * 1e3,
                "settle_s": settle_s}
    finally:
        for m in [*ms, *([extra] if extra else [])]:
            with contextlib.suppress(Exception):
                m.close()


def _state(ms: list[_Member]) -> str:
    return "; ".join(
        f"{m.name}: {sorted(m.assignment) if m.assignment is not None else None}"
        + (f" errors {m.errors[-2:]}" if m.errors else "") for m in ms)
