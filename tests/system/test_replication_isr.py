"""The ISR at work on three real nodes: followers that stop fetching leave the ISR (the
controller fences a paused node), acks=all keeps working while `min.insync.replicas` are
in sync and is refused with NOT_ENOUGH_REPLICAS below it (acks=1 still works); the paused
followers come back, catch up, rejoin the ISR, and every replica's log files end up
byte-identical to the leader's; the leader's /metrics counted the shrink and the expand.
A produce to a follower is answered NOT_LEADER_OR_FOLLOWER with the leader and its epoch
(KIP-951)."""

from __future__ import annotations

import datetime
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v4.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.produce.v10.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import BrokerId, TopicName
from replication_cluster import Cluster, Node, wait_for

from eddy.client.raw import RawClient
from eddy.protocol.records import build_batch

TOPIC = "isr"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, {"admin.listener": "127.0.0.1:0"})  # /metrics on each node
    try:
        c.start()
        yield c
    finally:
        c.stop()


def produce(node: Node, acks: int, values: list[bytes], topic: str = TOPIC) -> Any:
    """One Produce v10 request straight to ``node``: partition 0's answer."""
    batch = build_batch([(None, v) for v in values], int(time.time() * 1000))
    with RawClient(node.host, node.port, 30.0) as raw:
        answer = raw.call(ProduceRequest(
            transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10),
            topic_data=(TopicProduceData(name=topic, partition_data=(
                PartitionProduceData(index=0, records=bytes(batch)),)),)))
    (part,) = answer.responses[0].partition_responses
    return part


def log_bytes(node: Node, topic: str = TOPIC) -> bytes:
    d = node.data_dir / "topics" / topic / "partition-0"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def isr(cluster: Cluster, topic: str = TOPIC) -> list[int]:
    """The ISR as the partition's leader sees it (the node that enforces it)."""
    leader = cluster.leader(topic, 0)
    via = cluster.nodes.get(leader)
    if via is None:
        return []
    return cluster.describe(topic, via).get(0, (-1, []))[1]


def isr_changes(node: Node, topic: str = TOPIC) -> tuple[float, float]:
    """(eddy_isr_shrinks_total, eddy_isr_expands_total) of ``topic`` on ``node``'s /metrics."""
    found = re.search(r"admin on (http://\S+)", node.logs())
    assert found, f"node {node.node_id} logged no admin URL"
    with urllib.request.urlopen(f"{found[1]}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts = []
    for name in ("eddy_isr_shrinks_total", "eddy_isr_expands_total"):
        sample = re.search(rf'^{name}{{topic="{topic}"}} (\S+)$', text, re.MULTILINE)
        counts.append(float(sample[1]) if sample else 0.0)
    return counts[0], counts[1]


def test_isr_shrinks_and_grows_and_min_insync_is_enforced(cluster: Cluster) -> None:
    """Every node is a voter too: one node at a time may be paused (the metadata quorum,
    which changes ISRs, needs the other two). ``strict`` needs all three in sync."""
    cluster.create_topic(TOPIC, 1, {"min.insync.replicas": "2"})
    cluster.create_topic("strict", 1, {"min.insync.replicas": "3"})
    leader_id = cluster.leader(TOPIC, 0)
    leader = cluster.nodes[leader_id]
    wait_for(lambda: cluster.leader("strict", 0) != -1, 10, "strict has a leader")
    strict_leader = cluster.nodes[cluster.leader("strict", 0)]
    assert produce(leader, -1, [b"a%d" % i for i in range(50)]).error_code == 0
    assert produce(strict_leader, -1, [b"s"], "strict").error_code == 0
    paused = next(n for i, n in cluster.nodes.items()
                  if i != leader_id and i != strict_leader.node_id) \
        if leader_id != strict_leader.node_id else \
        next(n for i, n in cluster.nodes.items() if i != leader_id)

    paused.signal(signal.SIGSTOP)
    try:
        wait_for(lambda: len(isr(cluster)) == 2 and len(isr(cluster, "strict")) == 2, 20,
                 "the paused follower leaves both ISRs",
                 detail=lambda: (isr(cluster), isr(cluster, "strict")))
        assert paused.node_id not in isr(cluster)
        answer = produce(leader, -1, [b"b%d" % i for i in range(50)])
        assert answer.error_code == 0 and answer.base_offset == 50  # 2 in sync: enough
        refused = produce(strict_leader, -1, [b"refused"], "strict")
        assert refused.error_code == 19  # NOT_ENOUGH_REPLICAS: nothing appended
        assert "min.isr" in (refused.error_message or "")
        answer = produce(strict_leader, 1, [b"one"], "strict")
        assert answer.error_code == 0 and answer.base_offset == 1  # acks=1 still works
    finally:
        paused.signal(signal.SIGCONT)

    wait_for(lambda: len(isr(cluster)) == 3 and len(isr(cluster, "strict")) == 3, 30,
             "the follower is back in both ISRs",
             detail=lambda: (isr(cluster), isr(cluster, "strict")))
    # the leader counted both changes (controller or AlterIsr, as the metadata committed it)
    wait_for(lambda: all(n >= 1 for n in isr_changes(leader)), 10,
             "the leader counts an ISR shrink and an expand",
             detail=lambda: isr_changes(leader))
    assert produce(leader, -1, [b"d%d" % i for i in range(50)]).error_code == 0
    assert produce(strict_leader, -1, [b"t"], "strict").error_code == 0
    for topic, lead in ((TOPIC, leader), ("strict", strict_leader)):
        expected = log_bytes(lead, topic)
        assert expected
        wait_for(lambda t=topic, e=expected: all(  # type: ignore[misc]
            log_bytes(n, t) == e for n in cluster.nodes.values()), 20,
            f"{topic}: every replica's log is byte-identical to the leader's",
            detail=lambda t=topic: [len(log_bytes(n, t))  # type: ignore[misc]
                                    for n in cluster.nodes.values()])


def test_a_follower_answers_with_the_leader(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, 1, {})
    leader_id = cluster.leader(TOPIC, 0)
    follower = next(n for i, n in cluster.nodes.items() if i != leader_id)
    answer = produce(follower, -1, [b"x"])
    assert answer.error_code == 6  # NOT_LEADER_OR_FOLLOWER
    assert answer.current_leader.leader_id == leader_id
    assert answer.current_leader.leader_epoch >= 0
    with RawClient(follower.host, follower.port, 10.0) as raw:
        fetched = raw.call(FetchRequest(
            max_wait=datetime.timedelta(0), min_bytes=1, topics=(FetchTopic(
                topic=TOPIC, partitions=(FetchPartition(
                    partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=()))
    (part,) = fetched.responses[0].partitions
    assert part.error_code == 6
    assert part.current_leader.leader_id == leader_id
    # ListOffsets: a consumer's goes to the leader only; a debugging consumer's (-2) is
    # answered by any replica, with its log end
    assert produce(cluster.nodes[leader_id], -1, [b"y"]).error_code == 0
    assert list_offsets(follower, -1) == (6, -1)
    assert list_offsets(follower, -2) == (0, 1)
    assert list_offsets(cluster.nodes[leader_id], -1) == (0, 1)


def list_offsets(node: Node, replica_id: int) -> tuple[int, int]:
    """(error code, latest offset) of partition 0 as ``node`` answers ListOffsets v4."""
    with RawClient(node.host, node.port, 10.0) as raw:
        answer = raw.call(ListOffsetsRequest(
            replica_id=BrokerId(replica_id), isolation_level=0, topics=(ListOffsetsTopic(
                name=TopicName(TOPIC), partitions=(ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)))
    (part,) = answer.topics[0].partitions
    return int(part.error_code), int(part.offset)
