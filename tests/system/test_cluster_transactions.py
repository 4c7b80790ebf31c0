"""Transactions across a cluster of three `eddy serve` processes: the transaction
coordinator runs on the leader of the `offsets` Raft group and keeps its state there; the
markers of a transaction reach every partition's leader, wherever it is. A transactional
producer writes to partitions led by all three nodes and commits its consumer's offsets in
the transaction: read_committed consumers see what was committed, never what was aborted.
Then the coordinator is killed with SIGKILL: another node takes over with the state, a new
producer with the same transactional id fences the old one and commits."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from conftest import EddyProcess
from mesh_cluster import wait_for
from test_metadata_cluster import (
    IDS,
    admin,
    committed,
    controller_of,
    coordinator_of,
    create,
    describe,
    eddy_cli,
    nodes,
)

TXN_ID = "shipper"


def txn_producer(node: EddyProcess) -> Producer:
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": TXN_ID,
                  "transaction.timeout.ms": 30000})
    p.init_transactions(30)
    return p


def read_committed(node: EddyProcess, topic: str, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"reader-{time.time()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        # read past ``expect`` for a while: what should not be seen has time to show up
        quiet_until = None
        while time.monotonic() < deadline:
            m: Any = c.poll(0.3)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) >= expect:
                quiet_until = quiet_until or time.monotonic() + 2
                if time.monotonic() > quiet_until:
                    break
    finally:
        c.close()
    return got


def test_transactions_span_the_cluster_and_survive_their_coordinator(tmp_path: Path) -> None:
    cluster = nodes(tmp_path)
    try:
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(controller_of(n) in IDS for n in cluster.values()), 30,
                 "a controller every node names")
        wait_for(lambda: all(len(admin(n).list_topics(timeout=10).brokers) == 3
                             for n in cluster.values()), 30, "every node lists 3 brokers")
        create(cluster[1], "out", 3, 3)
        leaders = {leader for leader, _, _ in describe(cluster[1], "out").values()}
        assert leaders == set(IDS)  # the transaction's markers go to all three nodes

        coordinator = coordinator_of(cluster[2], TXN_ID)
        assert coordinator in IDS
        p = txn_producer(cluster[2])
        p.begin_transaction()
        for i in range(30):
            p.produce("out", key=str(i).encode(), value=f"committed:{i}".encode(),
                      partition=i % 3)
        # a consumer's position committed in the same transaction (read-process-write)
        group = Consumer({"bootstrap.servers": cluster[3].bootstrap, "group.id": "proc",
                          "enable.auto.commit": False})
        p.send_offsets_to_transaction([TopicPartition("out", 0, 17)],
                                      group.consumer_group_metadata(), 30)
        p.commit_transaction(30)

        p.begin_transaction()
        for i in range(30):
            p.produce("out", value=f"aborted:{i}".encode(), partition=i % 3)
        p.flush(30)
        p.abort_transaction(30)

        got = read_committed(cluster[1], "out", 30)
        assert sorted(got) == sorted(f"committed:{i}".encode() for i in range(30))
        # the CLI finds the transaction through any node (asking every broker, then the
        # coordinator FindCoordinator names)
        elsewhere = next(n for i, n in cluster.items() if i != coordinator)
        listed = eddy_cli("txn", "list", "-b", elsewhere.bootstrap)
        assert [t["transactional_id"] for t in listed] == [TXN_ID]
        (described,) = eddy_cli("txn", "describe", TXN_ID, "-b", elsewhere.bootstrap)
        assert described["state"] == "CompleteAbort"
        assert committed(cluster[1], "proc", "out") == {0: 17}

        # a transaction left open when its coordinator dies: the new coordinator has the
        # state, and a new producer with the same id aborts it and fences the old one
        p.begin_transaction()
        p.produce("out", value=b"orphan", partition=0)
        p.flush(30)
        cluster[coordinator].kill()
        survivors = [n for i, n in cluster.items() if i != coordinator]
        wait_for(lambda: coordinator_of(survivors[0], TXN_ID) not in (-1, coordinator), 30,
                 "a new transaction coordinator")
        p2 = txn_producer(survivors[0])
        with pytest.raises(KafkaException):
            p.commit_transaction(15)  # fenced: its epoch is not the current one
        p2.begin_transaction()
        p2.produce("out", value=b"after-failover", partition=1)
        p2.commit_transaction(30)

        got = read_committed(survivors[1], "out", 31)
        assert b"after-failover" in got and b"orphan" not in got
        assert not any(v.startswith(b"aborted") for v in got)
        assert committed(survivors[0], "proc", "out") == {0: 17}
        group.close()
    finally:
        for n in cluster.values():
            if n.alive():
                n.kill()
