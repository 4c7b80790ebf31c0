"""A cluster of one under a CPU hog (issue 28): `eddy serve` alone (the embedded default)
with a busy loop on every core beside it, started under it, creates topics and takes
acks=all records for a minute, stopped now and then (SIGSTOP) for longer than a broker
session, without ever fencing its own broker. Seen before: CreateTopics answered
INVALID_REPLICA_ASSIGNMENT "every replica ([1]) is fenced", and `fencing broker 1` in a new
user's first log."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from conftest import EddyProcess

#: how long topics are created and records produced under the hog
LOAD_S = 60.0
PARTITIONS = 3
RECORDS_PER_ROUND = 200
PAD = b"x" * 1000
#: the node is also stopped (SIGSTOP) this long, this often: longer than a broker session
PAUSE_S = 2.5
PAUSE_EVERY_S = 10.0
FENCE = re.compile(r"(?<!un)fencing broker")


def pause(node: EddyProcess, seconds: float) -> None:
    """The whole process stopped (SIGSTOP) for longer than a broker session, then let go:
    a stall of the node itself, which must not fence its own broker."""
    assert node.proc is not None
    node.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(seconds)  # the length of the stall is the fault itself
    finally:
        node.proc.send_signal(signal.SIGCONT)


@contextmanager
def cpu_hog() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A busy loop per core (killed on the way out)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()


def test_a_cluster_of_one_never_fences_itself_under_a_cpu_hog(tmp_path: Path) -> None:
    node = EddyProcess(tmp_path / "node", ["--node-id", "1"])
    failures: list[str] = []
    acked = 0

    def delivered(err: KafkaError | None, _msg: object) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failures.append(f"produce: {err}")

    sent = rounds = pauses = 0
    try:
        with cpu_hog():  # from the start, as on a busy machine: the start is work too
            node.start(timeout=120)
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            producer = Producer({"bootstrap.servers": node.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "linger.ms": 5})
            deadline = time.monotonic() + LOAD_S
            paused_at = time.monotonic()
            while time.monotonic() < deadline:
                if time.monotonic() - paused_at > PAUSE_EVERY_S:
                    pause(node, PAUSE_S)
                    pauses += 1
                    paused_at = time.monotonic()
                topic = f"load-{rounds}"
                futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)],
                                              request_timeout=60)
                try:
                    futures[topic].result(90)
                except KafkaException as exc:  # every refusal is a finding
                    failures.append(f"create {topic}: {exc}")
                    rounds += 1
                    continue
                for i in range(RECORDS_PER_ROUND):
                    producer.produce(topic, value=f"{rounds}:{i}:".encode() + PAD,
                                     partition=i % PARTITIONS, on_delivery=delivered)
                    producer.poll(0)
                sent += RECORDS_PER_ROUND
                assert producer.flush(120) == 0, "records still unacknowledged after 120 s"
                rounds += 1
            assert producer.flush(120) == 0
        logs = node.logs()
        assert failures == [], failures[:10]
        assert acked == sent > 0
        fences = [line for line in logs.splitlines() if FENCE.search(line)]
        assert fences == [], fences[:5]  # ("unfencing broker 1" after its registration is fine)
        assert "is fenced" not in logs
        assert pauses > 0
        print(f"{rounds} topics created and {acked} records acknowledged in {LOAD_S:.0f} s "
              f"beside a busy loop per core, the node stopped {pauses} times; no fencing")
    finally:
        node.kill()
