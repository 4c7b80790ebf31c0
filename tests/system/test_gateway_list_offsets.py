"""ListOffsets through a gateway carries the owning broker's leader epoch, as the broker
answers it itself (-1 where no offset is found), and a confluent-kafka consumer reading
through the gateway from such a position works.

The broker is a node on its own behind the gateway (the mesh): its partition's epoch is
what its disk says, so the test gives the partition epoch 5 while the broker is stopped."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from conftest import EddyProcess
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.static.primitive import i8, i32, i64
from mesh_cluster import free_udp_port, mesh_nodes, wait_for

from eddy.client.raw import RawClient

pytestmark = pytest.mark.timeout(120)
EPOCH = 5
LATEST, EARLIEST = -1, -2
TOPIC = f"epochs-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EddyProcess,
                                                                      EddyProcess]]:
    root: Path = tmp_path_factory.mktemp("gwepoch")
    p1, p0 = free_udp_port(), free_udp_port()
    broker = EddyProcess(root / "n1", ["--node-id", "1", "--set",
                                       f"mesh.listener=127.0.0.1:{p1}"])
    gateway = EddyProcess(root / "gw", [
        "--node-id", "100", "--set", "process.roles=gateway",
        "--set", f"mesh.listener=127.0.0.1:{p0}", "--set", f"mesh.seeds=127.0.0.1:{p1}"])
    try:
        broker.start()
        conf = {"bootstrap.servers": broker.bootstrap}
        admin = AdminClient(conf)  # kept: its futures need it alive
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(15)
        producer = Producer(conf)
        for i in range(3):
            producer.produce(TOPIC, f"v{i}".encode(), partition=0, timestamp=1000 + i)
        assert producer.flush(15) == 0
        broker.stop()
        (part,) = (broker.data_dir).rglob(f"{TOPIC}/partition-0")
        (part / "leader-epoch").write_text(f"{EPOCH}\n")
        broker.start()
        gateway.start()
        # alive first, its topics announced after (gossip): the tests need both
        wait_for(lambda: any(n.kafka_node_id == 1 and n.state == "alive" and n.topics >= 1
                             for n in mesh_nodes(gateway)), 30,
                 "the gateway sees the broker alive, holding its topic")
        yield broker, gateway
    finally:
        gateway.kill()
        broker.kill()


def list_offsets(port: int, timestamps: list[int]) -> list[tuple[int, int, int]]:
    """(error code, offset, leader epoch) of partition 0 for each timestamp."""
    out = []
    with RawClient("127.0.0.1", port, 10.0) as raw:
        for ts in timestamps:
            resp: Any = raw.call(ListOffsetsRequest(
                replica_id=i32(-1), isolation_level=i8(0), topics=(ListOffsetsTopic(
                    name=TOPIC, partitions=(ListOffsetsPartition(
                        partition_index=i32(0), current_leader_epoch=i32(-1),
                        timestamp=i64(ts)),)),)))
            p = resp.topics[0].partitions[0]
            out.append((int(p.error_code), int(p.offset), int(p.leader_epoch)))
    return out


def test_list_offsets_carries_the_leaders_epoch(nodes: tuple[EddyProcess, EddyProcess]
                                                ) -> None:
    broker, gateway = nodes
    asked = [LATEST, EARLIEST, 1001, 99_999]
    direct = list_offsets(broker.port, asked)
    assert direct == [(0, 3, EPOCH), (0, 0, EPOCH), (0, 1, EPOCH), (0, -1, -1)]
    assert list_offsets(gateway.port, asked) == direct


def test_a_consumer_through_the_gateway_reads_from_a_listed_offset(
        nodes: tuple[EddyProcess, EddyProcess]) -> None:
    _, gateway = nodes
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap,
                         "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        (tp,) = consumer.offsets_for_times([TopicPartition(TOPIC, 0, 1001)], timeout=10)
        assert tp.offset == 1 and tp.leader_epoch == EPOCH
        consumer.assign([tp])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"v1", b"v2"]
    finally:
        consumer.close()
