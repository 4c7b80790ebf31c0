"""Partition leadership through one gateway endpoint, in one process: two Brokers (nodes 1
and 2, each on its own: the leader and only replica of what it holds) behind a gateway
KafkaServer whose forwarder runs each op on the owning broker's OpExecutor over postcard
bytes (test_gateway_inprocess's harness). Real clients talk to the gateway only:
confluent-kafka's AdminClient runs preferred elections, kafka-python's KafkaAdminClient
alters and lists partition reassignments, a raw client and a librdkafka consumer ask
OffsetForLeaderEpoch, and each answer is the owning broker's."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema
from test_gateway_inprocess import Cluster, name_on

from eddy.client.raw import RawClient
from eddy.gateway import ops_admin as oa

TIMEOUT = 15
NONE, UNKNOWN_TOPIC_OR_PARTITION = 0, 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("gateway-partitions"))
    c.start()
    yield c
    c.stop()


def _create(cluster: Cluster, *names: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        f.result(TIMEOUT)


def _produce(cluster: Cluster, topic: str, partition: int, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=partition)
    assert p.flush(TIMEOUT) == 0


def _calls(cluster: Cluster, op: int) -> dict[int, int]:
    calls = cluster.forwarder.calls if cluster.forwarder is not None else {}
    return {node: n for (node, o), n in calls.items() if o == op}


def _leader_epoch(cluster: Cluster, node: int, topic: str, partition: int) -> int:
    async def read() -> int:
        return int(cluster.brokers[node].logs.get(topic).partitions[partition].leader_epoch)
    epoch: int = cluster.run(read())
    return epoch


def test_confluent_admin_elects_preferred_leaders_at_each_owner(cluster: Cluster) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    one, two = name_on(1, "elect-one"), name_on(2, "elect-two")
    _create(cluster, one, two)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    asked = [TopicPartition(one, 0), TopicPartition(one, 1), TopicPartition(two, 1),
             TopicPartition("elect-never-made", 0)]
    got = admin.elect_leaders(ElectionType.PREFERRED, asked).result(TIMEOUT)
    codes = {(tp.topic, tp.partition): None if err is None else err.code()
             for tp, err in got.items()}
    # each owner leads what it holds: no election needed, as a one-broker Kafka answers
    assert codes == {(one, 0): KafkaError.ELECTION_NOT_NEEDED,
                     (one, 1): KafkaError.ELECTION_NOT_NEEDED,
                     (two, 1): KafkaError.ELECTION_NOT_NEEDED,
                     ("elect-never-made", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert set(_calls(cluster, oa.KAFKA_OP_ELECT_LEADERS)) == {1, 2}
    # every partition: each node asked, nothing needed anywhere
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(TIMEOUT) == {}


def test_kafka_python_alters_and_lists_reassignments(cluster: Cluster) -> None:
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )

    one, two = name_on(1, "move-one"), name_on(2, "move-two")
    _create(cluster, one, two)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15000)
    try:
        got = admin.alter_partition_reassignments({
            TopicPartition(one, 0): [1],     # onto its owner alone: nothing to do
            TopicPartition(one, 1): [2],     # node 1 knows no broker 2
            TopicPartition(two, 0): None,    # nothing to cancel
            TopicPartition("move-never-made", 0): [1],
        }, timeout_ms=10000)
        assert got == {TopicPartition(one, 0): None,
                       TopicPartition(one, 1): InvalidReplicationAssignmentError,
                       TopicPartition(two, 0): NoReassignmentInProgressError,
                       TopicPartition("move-never-made", 0): UnknownTopicOrPartitionError}
        assert set(_calls(cluster, oa.KAFKA_OP_ALTER_REASSIGNMENTS)) == {1, 2}
        assert admin.list_partition_reassignments() == {}
        assert admin.list_partition_reassignments({one: [0, 1], two: [0]}) == {}
        assert set(_calls(cluster, oa.KAFKA_OP_LIST_REASSIGNMENTS)) == {1, 2}
        # kafka-python's ElectLeaders (v1+: a top-level error too)
        answer = admin.elect_leaders(0, {two: [0, 1]}, timeout_ms=10000)
        assert [(int(p.error_code)) for r in answer.replica_election_results
                for p in r.partition_result] == [84, 84]  # ELECTION_NOT_NEEDED
    finally:
        admin.close()


def _ask_epochs(cluster: Cluster, version: int, topic: str,
                parts: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """(partition, error, epoch, end offset) of each (partition, leader epoch) asked, with
    the current epoch a client of the gateway knows (its Metadata's: 0)."""
    req_cls = load_request_schema(23, version)
    mod = sys.modules[req_cls.__module__]
    fields: dict[str, Any] = {"topics": (mod.OffsetForLeaderTopic(topic=topic, partitions=tuple(
        mod.OffsetForLeaderPartition(partition=p, leader_epoch=e, current_leader_epoch=0)
        for p, e in parts)),)}
    if version >= 3:
        fields["replica_id"] = -1
    host, port = cluster.bootstrap.split(":")
    with RawClient(host, int(port)) as client:
        resp = client.call(req_cls(**fields))
    (t,) = resp.topics
    assert t.topic == topic
    return [(int(p.partition), int(p.error_code), int(p.leader_epoch), int(p.end_offset))
            for p in t.partitions]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_answers_the_owners_epoch_end(cluster: Cluster,
                                                             version: int) -> None:
    topic = name_on(2, f"epochs-v{version}")
    _create(cluster, topic)
    _produce(cluster, topic, 0, 6)
    epoch = _leader_epoch(cluster, 2, topic, 0)
    got = _ask_epochs(cluster, version, topic, [(0, epoch), (1, epoch), (0, epoch + 1),
                                                (9, epoch)])
    assert got == [(0, NONE, epoch, 6), (1, NONE, epoch, 0), (0, NONE, -1, -1),
                   (9, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
    assert _calls(cluster, oa.KAFKA_OP_OFFSET_FOR_LEADER_EPOCH).get(2)
    assert _ask_epochs(cluster, version, f"epochs-none-{uuid.uuid4().hex[:6]}", [(0, 0)]) == [
        (0, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


def test_a_consumer_validates_its_position_through_the_gateway(cluster: Cluster) -> None:
    """librdkafka asks OffsetForLeaderEpoch for a position with a leader epoch (a committed
    offset, a seek); the owner's answer lets it go on from there, losing nothing."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic, group = name_on(1, "epochs-consumer"), f"g-{uuid.uuid4().hex[:8]}"
    _create(cluster, topic, partitions=1)
    _produce(cluster, topic, 0, 10)
    epoch = _leader_epoch(cluster, 1, topic, 0)
    before = _calls(cluster, oa.KAFKA_OP_OFFSET_FOR_LEADER_EPOCH).get(1, 0)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "error",
                  "fetch.wait.max.ms": 50})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 4, leader_epoch=epoch)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 6 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append(m.value())
    finally:
        c.close()
    assert got == [f"v{i}".encode() for i in range(4, 10)]
    assert _calls(cluster, oa.KAFKA_OP_OFFSET_FOR_LEADER_EPOCH).get(1, 0) > before
