"""A cluster of one: `eddy serve --set process.roles=broker,controller` with no voter list
runs the metadata service with this node its only voter. A data dir written by a node of
its own (topics, committed offsets, an open transaction) starts under it with everything
intact; topics, groups and transactions then work as on any cluster, and survive a
kill -9 and restart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import EddyProcess
from mesh_cluster import wait_for
from test_metadata_cluster import (
    _ADMINS,
    commit,
    committed,
    consume_all,
    create,
    describe,
    describe_quorum,
    produce,
    topic_ids,
)

ALONE = ["--set", "process.roles=broker,controller"]


def read_committed(node: EddyProcess, topic: str, until: bytes) -> list[bytes]:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"rc-{time.time()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while until not in seen and time.monotonic() < deadline:
            m: Any = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
    finally:
        c.close()
    return seen


def test_a_single_nodes_data_dir_becomes_a_cluster_of_one(tmp_path: Path) -> None:
    data = tmp_path / "node"
    solo = EddyProcess(data, ["--node-id", "1"]).start()  # as the previous release ran
    try:
        create(solo, "legacy", 2, 1)
        assert produce(solo, "legacy", 20, "old") == 20
        ids = topic_ids(solo, ["legacy"])
        commit(solo, "old-group", "legacy", {0: 3, 1: 4})
        p = Producer({"bootstrap.servers": solo.bootstrap, "transactional.id": "t-open"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("legacy", value=b"open", partition=0)
        p.flush(30)
        solo.kill()  # the transaction stays open in the data dir
    finally:
        _ADMINS.clear()
        if solo.alive():
            solo.stop()

    node = EddyProcess(data, ["--node-id", "1", *ALONE]).start()
    try:
        quorum = describe_quorum(node).topics[0].partitions[0]
        assert quorum.leader_id == 1 and [v.replica_id for v in quorum.current_voters] == [1]
        assert topic_ids(node, ["legacy"]) == ids
        assert describe(node, "legacy") == {0: (1, [1], [1]), 1: (1, [1], [1])}
        got = consume_all(node, "legacy", "g-read", 20, tag=b"old:")
        assert sorted(got) == sorted(f"old:{i}".encode() for i in range(20))
        wait_for(lambda: committed(node, "old-group", "legacy") == {0: 3, 1: 4}, 30,
                 "the node's own committed offsets, now in the offsets group")
        # the open transaction came along: a new producer with its id aborts it
        p2 = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "t-open"})
        p2.init_transactions(30)
        p2.begin_transaction()
        p2.produce("legacy", value=b"closed", partition=0)
        p2.commit_transaction(30)
        seen = read_committed(node, "legacy", b"closed")
        assert b"closed" in seen and b"open" not in seen

        create(node, "fresh", 3, 1)
        assert produce(node, "fresh", 30, "new") == 30
        commit(node, "new-group", "fresh", {0: 5, 2: 7})

        node.kill()
        node.start()
        assert topic_ids(node, ["legacy"]) == ids
        assert produce(node, "fresh", 5, "after") == 5  # led again, right after the restart
        wait_for(lambda: committed(node, "new-group", "fresh") == {0: 5, 2: 7}, 30,
                 "committed offsets after kill -9")
        got = consume_all(node, "fresh", "g-fresh", 35)
        assert len(got) == 35
    finally:
        _ADMINS.clear()
        if node.alive():
            node.kill()
