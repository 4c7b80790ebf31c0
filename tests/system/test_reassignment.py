"""Partition reassignment across three `eddy serve` processes (every one a broker and a
voter): a replication-factor-2 partition on brokers {a, b} holding records is moved to
{b, c} with `eddy topic reassign` while a producer keeps writing to it. The new replica
catches up (its log files end byte-identical to the other replica's), the removed broker
deletes its copy, and a consumer reads every acknowledged record exactly once. The Kafka
APIs answer Kafka's error codes; `eddy cluster rebalance --dry-run` and `eddy cluster
status` see the cluster."""

from __future__ import annotations

import datetime
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta
from mesh_cluster import wait_for
from test_metadata_cluster import (
    _ADMINS,
    IDS,
    admin,
    controller_of,
    create,
    eddy_cli,
    nodes,
)

from eddy.client.raw import RawClient

TOPIC = "moving"
TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=10))


def replicas_of(node: Any, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
    md = admin(node).list_topics(topic, timeout=10)
    p = md.topics[topic].partitions[partition]
    return p.leader, list(p.replicas), list(p.isrs)


def log_bytes(data_dir: Path, topic: str, partition: int) -> bytes | None:
    """Every segment of the partition's log, in offset order (None: no directory)."""
    pdir = data_dir / "topics" / topic / f"partition-{partition}"
    if not pdir.is_dir():
        return None
    segments = sorted(pdir.glob("*.log"), key=lambda f: int(f.stem))
    return b"".join(f.read_bytes() for f in segments)


def raw_alter(node: Any, topic: str, partition: int,
              replicas: tuple[int, ...] | None) -> ErrorCode:
    with RawClient("127.0.0.1", node.port) as raw:
        answer = raw.call(AlterPartitionReassignmentsRequest(timeout=TIMEOUT, topics=(
            ReassignableTopic(name=topic, partitions=(ReassignablePartition(
                partition_index=i32(partition),
                replicas=None if replicas is None else tuple(i32(r) for r in replicas)),)),)))
    assert answer.error_code == ErrorCode.none
    return ErrorCode(answer.responses[0].partitions[0].error_code)


class BackgroundProducer:
    """Keyed acks=all idempotent records to one partition until stopped."""

    def __init__(self, bootstrap: str, partition: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
        self.partition = partition
        self.acked: list[bytes] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed += 1

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.producer.produce(TOPIC, value=f"during:{i}".encode(), key=str(i).encode(),
                                  partition=self.partition, on_delivery=self._delivered)
            self.producer.poll(0)
            i += 1
            time.sleep(0.002)
        self.producer.flush(30)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def consume_partition(node: Any, partition: int, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "reassign-check",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(TOPIC, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expect and time.monotonic() < deadline:
            m: Any = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_reassign_moves_a_replica_while_producing(tmp_path: Path) -> None:
    cluster = nodes(tmp_path)
    try:
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(controller_of(n) in IDS for n in cluster.values()), 30,
                 "a controller every node names")
        wait_for(lambda: all(len(admin(n).list_topics(timeout=10).brokers) == 3
                             for n in cluster.values()), 30, "every node lists 3 brokers")
        create(cluster[1], TOPIC, 2, 2)
        wait_for(lambda: len(replicas_of(cluster[1], TOPIC, 0)[2]) == 2, 20, "ISR of 2")
        _, (a, b), _ = replicas_of(cluster[1], TOPIC, 0)
        (c,) = [i for i in IDS if i not in (a, b)]

        before = Producer({"bootstrap.servers": cluster[b].bootstrap, "acks": "all",
                           "enable.idempotence": True})
        acked: list[bytes] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.append(msg.value())

        for i in range(3000):
            before.produce(TOPIC, value=f"before:{i}".encode() + b"x" * 200, partition=0,
                           on_delivery=delivered)
        before.flush(30)
        assert len(acked) == 3000
        assert log_bytes(cluster[a].data_dir, TOPIC, 0)

        # the APIs' refusals, as Kafka answers them
        assert raw_alter(cluster[c], TOPIC, 0, None) == ErrorCode.no_reassignment_in_progress
        assert raw_alter(cluster[c], TOPIC, 0, (b, 9)) == ErrorCode.invalid_replica_assignment
        assert raw_alter(cluster[c], TOPIC, 0, (b, b)) == ErrorCode.invalid_replica_assignment
        assert raw_alter(cluster[c], TOPIC, 0, ()) == ErrorCode.invalid_replica_assignment
        assert raw_alter(cluster[c], TOPIC, 7, (b, c)) == ErrorCode.unknown_topic_or_partition
        assert raw_alter(cluster[c], "nope", 0, (b, c)) == ErrorCode.unknown_topic_or_partition

        plan = eddy_cli("cluster", "rebalance", "--dry-run", "-b", cluster[1].bootstrap)
        assert plan["dry_run"] and plan["brokers"] == list(IDS)
        assert all(m["result"] == "planned" for m in plan["moves"])

        with BackgroundProducer(cluster[c].bootstrap, 0) as bg:
            wait_for(lambda: len(bg.acked) >= 200, 30, "records acknowledged before the move")
            result = eddy_cli("topic", "reassign", TOPIC, "--partition", "0", "--replicas",
                              f"{b},{c}", "--wait", "--timeout", "90", "-b",
                              cluster[a].bootstrap)
            assert [r["result"] for r in result] == ["ok"]
            mark = len(bg.acked)
            wait_for(lambda: len(bg.acked) >= mark + 200, 30,
                     "records acknowledged after the move")
        assert bg.failed == 0
        leader, replicas, isr = replicas_of(cluster[c], TOPIC, 0)
        assert replicas == [b, c] and sorted(isr) == sorted([b, c]) and leader in (b, c)
        assert eddy_cli("topic", "reassignments", "-b", cluster[b].bootstrap) == []
        desc = eddy_cli("topic", "describe", TOPIC, "-b", cluster[c].bootstrap)
        assert desc["partitions"][0]["replicas"] == [b, c]
        assert desc["partitions"][0]["offline"] == []

        # node a's copy of partition 0 is gone (the directory, or every byte of it)
        wait_for(lambda: not log_bytes(cluster[a].data_dir, TOPIC, 0), 30,
                 f"node {a} deleted its copy")
        # the new replica converged: byte-identical log files
        wait_for(lambda: log_bytes(cluster[b].data_dir, TOPIC, 0)
                 == log_bytes(cluster[c].data_dir, TOPIC, 0), 30,
                 "the two replicas' logs are identical")

        expected = acked + bg.acked
        got = consume_partition(cluster[a], 0, len(expected))
        assert len(got) == len(expected) and set(got) == set(expected)
        assert got[:3000] == acked  # in order

        status = eddy_cli("cluster", "status", "-b", cluster[1].bootstrap)
        assert status["partitions"]["offline"] == 0 and status["reassigning"] == 0
        wait_for(lambda: eddy_cli("cluster", "status", "-b", cluster[1].bootstrap)
                 ["partitions"]["under_replicated"] == 0, 30, "nothing under-replicated")

        # growth: CreatePartitions places the new partitions across the nodes
        create(cluster[1], "grown", 1, 1)
        admin(cluster[1]).create_partitions([NewPartitions("grown", 6)])["grown"].result(20)
        wait_for(lambda: len(admin(cluster[2]).list_topics("grown", timeout=10)
                             .topics["grown"].partitions) == 6, 20, "6 partitions")
        grown = admin(cluster[2]).list_topics("grown", timeout=10).topics["grown"].partitions
        assert {p.replicas[0] for p in grown.values()} == set(IDS)

        # a node down: the partitions it holds alone are offline, its replicas too
        cluster[a].kill()
        wait_for(lambda: eddy_cli("cluster", "status", "-b", cluster[b].bootstrap)
                 ["partitions"]["offline"] >= 1, 60, f"node {a}'s partitions offline")
        desc = eddy_cli("topic", "describe", "grown", "-b", cluster[b].bootstrap)
        gone = [p for p in desc["partitions"] if p["replicas"] == [a]]
        assert gone and all(p["offline"] == [a] and p["leader"] == -1 for p in gone)
        plain = subprocess.run([sys.executable, "-m", "eddy", "topic", "describe", "grown",
                                "-b", cluster[b].bootstrap, "-o", "plain"],
                               capture_output=True, text=True, timeout=60)
        assert plain.returncode == 0, plain.stderr
        assert f"Replicas: {a}\tIsr: {a}\tOffline: {a}\t" in plain.stdout

        # a move that cannot finish (the partition's only replica is down, so the new one
        # has nothing to copy from): describe shows the replicas being added and removed,
        # as kafka-topics does, until it is cancelled
        stuck = gone[0]["partition"]
        assert raw_alter(cluster[b], "grown", stuck, (b,)) == ErrorCode.none
        desc = eddy_cli("topic", "describe", "grown", "-b", cluster[b].bootstrap)
        moving = {p["partition"]: p for p in desc["partitions"]}
        assert moving[stuck]["replicas"] == [b, a]
        assert (moving[stuck]["adding"], moving[stuck]["removing"]) == ([b], [a])
        assert all(p["adding"] == [] == p["removing"] for i, p in moving.items() if i != stuck)
        plain = subprocess.run([sys.executable, "-m", "eddy", "topic", "describe", "grown",
                                "-b", cluster[b].bootstrap, "-o", "plain"],
                               capture_output=True, text=True, timeout=60)
        assert plain.returncode == 0, plain.stderr
        assert (f"\tPartition: {stuck}\tLeader: -1\tReplicas: {b},{a}\tIsr: {a}\t"
                f"Adding Replicas: {b}\tRemoving Replicas: {a}\t") in plain.stdout
        assert plain.stdout.count("Adding Replicas") == 1
        assert raw_alter(cluster[b], "grown", stuck, None) == ErrorCode.none
        desc = eddy_cli("topic", "describe", "grown", "-b", cluster[b].bootstrap)
        back = {p["partition"]: p for p in desc["partitions"]}[stuck]
        assert back["replicas"] == [a] and back["adding"] == [] == back["removing"]
    finally:
        _ADMINS.clear()
        for n in cluster.values():
            n.kill()
