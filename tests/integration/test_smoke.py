"""A first end-to-end check with librdkafka: create, produce, consume."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def test_produce_consume_roundtrip(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("smoke", 3, 1)])["smoke"].result(10)
    p = Producer({"bootstrap.servers": eddy.bootstrap, "linger.ms": 5})
    sent = {(str(i % 5), f"value-{i}") for i in range(300)}
    for k, v in sent:
        p.produce("smoke", key=k, value=v)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": eddy.bootstrap, "group.id": "smoke",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("smoke", i, 0) for i in range(3)])
    got = set()
    deadline = time.monotonic() + 15
    while len(got) < len(sent) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got.add((m.key().decode(), m.value().decode()))
    c.close()
    assert got == sent
