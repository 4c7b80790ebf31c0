"""The healthy clients of a fuzz campaign, each in its own process: a confluent-kafka
producer (acks=all, idempotent) writing a numbered sequence of records, and a group
consumer reading them. At the end the parent checks every acknowledged record was
consumed."""

from __future__ import annotations

import time
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event
from typing import Any

HEALTHY_PARTITIONS = 2


def value_of(seed: int, n: int) -> bytes:
    return b"healthy-%d-%09d" % (seed, n)


def produce(bootstrap: str, topic: str, seed: int, rate: float, stop: Event,
            out: Connection) -> None:
    """Produce value_of(seed, n) for n = 0, 1, ... at `rate` records/s until `stop`;
    sends (acknowledged values, delivery errors) to `out`."""
    from confluent_kafka import Producer

    acked: list[bytes] = []
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append(msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 60000, "log_level": 3})
    n = 0
    t0 = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - t0) * rate)
        while n < due:
            p.produce(topic, value=value_of(seed, n), key=b"%d" % n, on_delivery=on_delivery)
            n += 1
        p.poll(0.02)
    left = p.flush(60)
    if left:
        errors.append(f"{left} records still unacknowledged after 60 s")
    out.send((acked, errors, n))


def consume(bootstrap: str, topic: str, group: str, stop: Event, expected: Connection,
            out: Connection) -> None:
    """Consume from the start until `stop`; then receive the acknowledged values on
    `expected` and keep polling (at most 60 s) until each was seen. Sends (values seen,
    consumer errors) to `out`."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": True,
                  "fetch.wait.max.ms": 100, "log_level": 3})
    c.subscribe([topic])
    seen: set[bytes] = set()
    errors: list[str] = []

    def poll() -> None:
        m = c.poll(0.2)
        if m is None:
            return
        if m.error():
            errors.append(str(m.error()))
        elif (value := m.value()) is not None:
            seen.add(value)

    while not stop.is_set():
        poll()
    want: set[bytes] = set(expected.recv())
    deadline = time.monotonic() + 60
    while not want <= seen and time.monotonic() < deadline:
        poll()
    c.close()
    out.send((seen, errors[:20]))
