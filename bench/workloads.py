"""Client workloads; each runs in its own process (multiprocessing, spawn) so that the
Python-side cost of one client never shares a GIL with another or with the runner.

Every loop here is bounded both in count and in time.
"""

from __future__ import annotations

import os
import struct
import time
import traceback
from typing import Any

from bench.procstat import self_cpu_seconds

NS = 1_000_000_000


def _wait_for_topic(client: Any, topic: str, partitions: int, timeout: float) -> None:
    """Until metadata lists every partition of `topic` with a leader (bounded)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            md = client.list_topics(topic, timeout=max(0.1, deadline - time.monotonic()))
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) >= partitions and all(
                p.leader >= 0 for p in t.partitions.values()
            ):
                return
        except Exception as exc:  # KafkaException while the broker settles
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"topic {topic} not ready in {timeout}s ({last})")


def producer_conf(bootstrap: str, acks: str, linger_ms: float,
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """``extra``: client settings on top (security.protocol, SASL, TLS...)."""
    return {
        "bootstrap.servers": bootstrap,
        "client.id": "eddy-bench-producer",
        "acks": acks,
        "linger.ms": linger_ms,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 64 * 1024,  # enough in flight for loopback
        "compression.type": "none",
        "enable.idempotence": False,
        "message.timeout.ms": 60_000,
        # callback-free hot path: librdkafka reports only failed deliveries to Python
        "delivery.report.only.error": True,
        **(extra or {}),
    }


def consumer_conf(bootstrap: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": "eddy-bench-consumer",
        "group.id": "eddy-bench",  # required by the client; no group APIs are used (assign)
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.max.bytes": 50 * 1024 * 1024,
        "max.partition.fetch.bytes": 10 * 1024 * 1024,
        "receive.message.max.bytes": 100 * 1024 * 1024,
        "queued.max.messages.kbytes": 256 * 1024,
        "queued.min.messages": 1_000_000,
        "fetch.wait.max.ms": 100,
        "fetch.error.backoff.ms": 50,
        **(extra or {}),
    }


def _guard(fn: Any, queue: Any, *args: Any) -> None:
    try:
        queue.put(fn(*args))
    except BaseException as exc:
        queue.put({"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()})


# ----------------------------------------------------------------------------- produce


def produce_worker(p: dict[str, Any], barrier: Any, queue: Any) -> None:
    _guard(_produce, queue, p, barrier)


def _produce(p: dict[str, Any], barrier: Any) -> dict[str, Any]:
    from confluent_kafka import Producer

    errors = [0]
    first_error: list[str] = []

    def on_error(err: Any, _msg: Any) -> None:  # called only for failures
        if err is not None:
            errors[0] += 1
            if not first_error:
                first_error.append(str(err))

    conf = producer_conf(p["bootstrap"], p["acks"], p["linger_ms"], p.get("client_conf"))
    conf["on_delivery"] = on_error
    prod = Producer(conf)
    _wait_for_topic(prod, p["topic"], p["partitions"], 20)
    payload = os.urandom(p["size"])
    topic = p["topic"]
    records = int(p["records"])
    produce = prod.produce
    poll = prod.poll
    barrier.wait(timeout=60)
    cpu0 = self_cpu_seconds()
    t0 = time.monotonic_ns()
    deadline = t0 + int(p["seconds"] * NS)
    hard_deadline = t0 + int((p["seconds"] + 30) * NS)
    sent = 0
    while sent < records:
        try:
            produce(topic, payload)
        except BufferError:  # local queue full: let librdkafka drain it
            poll(0.001)
            if time.monotonic_ns() > hard_deadline:
                break
            continue
        sent += 1
        if not sent & 1023:
            poll(0)
            if time.monotonic_ns() >= deadline:
                break
    unacked = prod.flush(p["flush_timeout"])
    t1 = time.monotonic_ns()
    cpu1 = self_cpu_seconds()
    acked = sent - errors[0] - unacked
    return {
        "t0_ns": t0, "t1_ns": t1, "sent": sent, "acked": acked, "failed": errors[0],
        "unacked": unacked, "first_error": first_error[0] if first_error else None,
        "client_cpu_s": cpu1 - cpu0, "size": p["size"],
    }


# ----------------------------------------------------------------------------- consume


def consume_worker(p: dict[str, Any], barrier: Any, total: Any, queue: Any) -> None:
    _guard(_consume, queue, p, barrier, total)


def _consume(p: dict[str, Any], barrier: Any, total: Any) -> dict[str, Any]:
    """Read assigned partitions from offset 0 until all consumer processes together have
    read `expected` records (the shared `total`), or the time limit."""
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer(consumer_conf(p["bootstrap"], p.get("client_conf")))
    try:
        _wait_for_topic(cons, p["topic"], p["partitions_total"], 20)
        expected = int(p["expected"])
        tps = [TopicPartition(p["topic"], i, 0) for i in p["partitions"]]
        barrier.wait(timeout=60)
        cpu0 = self_cpu_seconds()
        t0 = time.monotonic_ns()
        deadline = t0 + int(p["timeout"] * NS)
        cons.assign(tps)
        n = 0
        nbytes = 0
        errors = 0
        first_error = None
        t_first = None
        consume = cons.consume
        remaining = expected
        while remaining > 0 and time.monotonic_ns() < deadline:
            msgs = consume(min(10_000, remaining), 0.1)
            if msgs and t_first is None:
                t_first = time.monotonic_ns()
            got = 0
            for m in msgs:
                if m.error() is None:
                    got += 1
                    nbytes += len(m)
                else:
                    errors += 1
                    first_error = first_error or str(m.error())
            n += got
            with total.get_lock():
                total.value += got
                remaining = expected - total.value
        t1 = time.monotonic_ns()
        cpu1 = self_cpu_seconds()
    finally:
        cons.close()
    return {
        "t0_ns": t0, "t1_ns": t1, "t_first_ns": t_first, "consumed": n, "bytes": nbytes,
        "errors": errors, "first_error": first_error, "client_cpu_s": cpu1 - cpu0,
    }


# ----------------------------------------------------------------------------- latency

_TS = struct.Struct(">q")


def latency_producer(p: dict[str, Any], consumer_ready: Any, shared: Any, queue: Any) -> None:
    _guard(_latency_produce, queue, p, consumer_ready, shared)


def _latency_produce(p: dict[str, Any], consumer_ready: Any, shared: Any) -> dict[str, Any]:
    """Produce `size`-byte records at a fixed rate; the payload starts with the send time
    (CLOCK_MONOTONIC, which is system-wide on Linux, so the consumer process can compare)."""
    from confluent_kafka import Producer

    errors = [0]

    def on_error(err: Any, _msg: Any) -> None:
        if err is not None:
            errors[0] += 1

    conf = producer_conf(p["bootstrap"], p["acks"], p["linger_ms"], p.get("client_conf"))
    conf["on_delivery"] = on_error
    prod = Producer(conf)
    _wait_for_topic(prod, p["topic"], p["partitions"], 20)
    if not consumer_ready.wait(timeout=60):
        raise TimeoutError("latency consumer never became ready")
    size = p["size"]
    pad = os.urandom(size - _TS.size)
    rate = p["rate_bytes"] / size  # records per second
    topic = p["topic"]
    produce = prod.produce
    poll = prod.poll
    pack = _TS.pack
    now_ns = time.monotonic_ns
    duration = int(p["seconds"] * NS)
    t0 = now_ns()
    shared["t0_ns"].value = t0
    sent = 0
    buffer_full = 0
    max_burst = max(1, int(rate / 100))  # never more than 10 ms worth at once
    while True:
        now = now_ns()
        elapsed = now - t0
        if elapsed >= duration:
            break
        due = min(int(elapsed * rate / NS) + 1, sent + max_burst)
        while sent < due:
            try:
                produce(topic, pack(now_ns()) + pad)
            except BufferError:
                buffer_full += 1
                break
            sent += 1
        poll(0)
        # sleep until the next record is due (sub-millisecond granularity)
        wait = (sent / rate) - (now_ns() - t0) / NS
        if wait > 0:
            time.sleep(min(wait, 0.001))
    t1 = now_ns()
    unacked = prod.flush(15)
    shared["sent"].value = sent
    shared["done"].set()
    return {
        "role": "producer", "sent": sent, "failed": errors[0], "unacked": unacked,
        "t0_ns": t0, "t1_ns": t1, "buffer_full": buffer_full, "target_rate": rate,
    }


def latency_consumer(p: dict[str, Any], consumer_ready: Any, shared: Any, queue: Any) -> None:
    _guard(_latency_consume, queue, p, consumer_ready, shared)


def _latency_consume(p: dict[str, Any], consumer_ready: Any, shared: Any) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    conf = consumer_conf(p["bootstrap"], p.get("client_conf"))
    conf["fetch.wait.max.ms"] = p.get("fetch_wait_max_ms", 100)
    cons = Consumer(conf)
    lat_us: list[int] = []
    received = 0
    try:
        _wait_for_topic(cons, p["topic"], p["partitions"], 20)
        cons.assign([TopicPartition(p["topic"], i, 0) for i in range(p["partitions"])])
        cons.poll(0.5)  # the topic is fresh and empty: this only lets fetching start
        consumer_ready.set()
        now_ns = time.monotonic_ns
        unpack = _TS.unpack_from
        poll = cons.poll
        hard_deadline = now_ns() + int((p["seconds"] + 60) * NS)
        drain_deadline = None
        warmup_ns = int(p["warmup"] * NS)
        while now_ns() < hard_deadline:
            m = poll(0.05)
            if m is not None and m.error() is None:
                recv = now_ns()
                ts = unpack(m.value())[0]
                received += 1
                if ts - shared["t0_ns"].value >= warmup_ns:
                    lat_us.append((recv - ts) // 1000)
                continue
            if shared["done"].is_set():
                if received >= shared["sent"].value:
                    break
                if drain_deadline is None:
                    drain_deadline = now_ns() + 5 * NS
                elif now_ns() > drain_deadline:
                    break
    finally:
        cons.close()
    lat_us.sort()
    return {"role": "consumer", "received": received, "latencies_us": _summary(lat_us)}


def _summary(sorted_us: list[int]) -> dict[str, Any]:
    if not sorted_us:
        return {"count": 0}

    def pct(q: float) -> float:
        i = min(len(sorted_us) - 1, max(0, round(q * (len(sorted_us) - 1))))
        return sorted_us[i] / 1000.0

    return {
        "count": len(sorted_us),
        "p50_ms": pct(0.50), "p90_ms": pct(0.90), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
        "max_ms": sorted_us[-1] / 1000.0, "min_ms": sorted_us[0] / 1000.0,
        "mean_ms": sum(sorted_us) / len(sorted_us) / 1000.0,
    }
