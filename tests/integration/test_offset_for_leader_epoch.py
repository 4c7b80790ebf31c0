"""OffsetForLeaderEpoch (API 23, KIP-101/279/320) on a cluster of one started in this process.

Records are produced with confluent-kafka; the answers are read with a raw client at every
served version (v2, v3 with a replica id, v4 flexible): the current epoch ends at the log
end, an older one where the next starts, one above the latest is undefined; a stale or
future current epoch is fenced as Kafka fences it; unknown partitions are named. librdkafka,
which starts validating positions with this API once it is advertised, still produces,
consumes and resumes a group from its committed offsets.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from inprocess_node import InProcessNode
from kafka_helpers import create_topic, produce
from kio.index import load_request_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from eddy.client.raw import RawClient
from eddy.log.partition import PartitionLog

API = 23
NONE, UNKNOWN_TOPIC_OR_PARTITION = 0, 3
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH = 74, 75


@pytest.fixture(scope="module", params=["broker,controller", "broker"])
def node(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         ) -> Iterator[InProcessNode]:
    """A cluster of one, and a broker on its own (no metadata quorum: it leads every
    partition and no one ever gives it an epoch)."""
    n = InProcessNode(tmp_path_factory.mktemp("ofle"), roles=request.param).start()
    try:
        yield n
    finally:
        n.stop()


def plog_of(node: InProcessNode, topic: str, partition: int = 0) -> PartitionLog:
    async def get() -> PartitionLog:
        assert node.node is not None and node.node.broker is not None
        local = node.node.broker.logs.get(topic)
        assert local is not None
        return local.partitions[partition]
    plog: PartitionLog = node.run(get())
    return plog


def on_loop(node: InProcessNode, fn: Any) -> Any:
    async def call() -> Any:
        return fn()
    return node.run(call())


def ask(node: InProcessNode, version: int, topic: str, partition: int, leader_epoch: int,
        current_leader_epoch: int = -1, replica_id: int = -1) -> tuple[int, int, int]:
    """(error code, epoch, end offset) of one partition."""
    req_cls = load_request_schema(API, version)
    mod = sys.modules[req_cls.__module__]
    fields: dict[str, Any] = {"topics": (mod.OffsetForLeaderTopic(topic=topic, partitions=(
        mod.OffsetForLeaderPartition(partition=partition, leader_epoch=leader_epoch,
                                     current_leader_epoch=current_leader_epoch),)),)}
    if version >= 3:
        fields["replica_id"] = replica_id
    host, port = node.bootstrap.split(":")
    with RawClient(host, int(port)) as client:
        resp = client.call(req_cls(**fields))
    (t,) = resp.topics
    (p,) = t.partitions
    assert (t.topic, p.partition) == (topic, partition)
    return int(p.error_code), int(p.leader_epoch), int(p.end_offset)


def test_advertised_in_api_versions(node: InProcessNode) -> None:
    host, port = node.bootstrap.split(":")
    with RawClient(host, int(port)) as client:
        resp = client.call(ApiVersionsRequest(client_software_name="t",
                                              client_software_version="1"))
    served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    assert served[API] == (2, 4)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_epoch_end_offsets_and_fencing(node: InProcessNode, version: int) -> None:
    topic = f"epochs-v{version}"
    create_topic(node.bootstrap, topic, partitions=1)
    deadline = time.monotonic() + 15
    while ask(node, version, topic, 0, 0)[0] != NONE:  # the cluster creates it meanwhile
        assert time.monotonic() < deadline, "the new partition never became available"
        time.sleep(0.05)
    plog = plog_of(node, topic)
    cur = on_loop(node, lambda: plog.leader_epoch)
    assert ask(node, version, topic, 0, cur, cur) == (NONE, cur, 0)
    produce(node.bootstrap, topic, [b"first-%d" % i for i in range(10)], partition=0)
    assert ask(node, version, topic, 0, cur, cur) == (NONE, cur, 10)
    assert on_loop(node, plog.epochs.latest_epoch) == cur  # the leader's own epoch is known

    # a leader change (two epochs later, as after an election this node took no part in):
    # the batches written from now on carry the new epoch
    new = cur + 2

    def change() -> None:
        plog.set_leader_epoch(new)
        plog.epochs.assign(new, plog.log_end_offset)
    on_loop(node, change)
    produce(node.bootstrap, topic, [b"second-%d" % i for i in range(5)], partition=0)
    assert on_loop(node, lambda: plog.log_end_offset) == 15

    for replica in (-1, 1):  # a consumer and a follower get the same answers
        def q(epoch: int, current: int = -1, r: int = replica) -> tuple[int, int, int]:
            return ask(node, version, topic, 0, epoch, current, r)
        assert q(new, new) == (NONE, new, 15)              # the current epoch: the log end
        assert q(new) == (NONE, new, 15)                   # no current epoch: no fencing
        assert q(cur, new) == (NONE, cur, 10)              # an older epoch: where new starts
        assert q(cur + 1) == (NONE, cur, 10)               # never led: named by the one below
        assert q(new + 1) == (NONE, -1, -1)                # above the latest: undefined
        assert q(-1) == (NONE, -1, -1)
        assert q(new, cur) == (FENCED_LEADER_EPOCH, -1, -1)      # the caller is behind
        assert q(new, new + 3) == (UNKNOWN_LEADER_EPOCH, -1, -1)  # the caller is ahead
    assert ask(node, version, topic, 5, new)[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert ask(node, version, f"no-such-{uuid.uuid4()}", 0, 0)[0] == UNKNOWN_TOPIC_OR_PARTITION


def test_many_partitions_in_one_request(node: InProcessNode) -> None:
    topic = "epochs-many"
    create_topic(node.bootstrap, topic, partitions=3)
    for p in range(3):
        produce(node.bootstrap, topic, [b"x"] * (p + 1), partition=p)
    plogs = [plog_of(node, topic, p) for p in range(3)]
    epochs = [on_loop(node, lambda pl=pl: pl.leader_epoch) for pl in plogs]
    req_cls = load_request_schema(API, 4)
    mod = sys.modules[req_cls.__module__]
    parts = tuple(mod.OffsetForLeaderPartition(partition=p, leader_epoch=epochs[p % 3])
                  for p in (0, 1, 2, 9))
    host, port = node.bootstrap.split(":")
    with RawClient(host, int(port)) as client:
        resp = client.call(req_cls(replica_id=-1, topics=(
            mod.OffsetForLeaderTopic(topic=topic, partitions=parts),)))
    got = [(int(p.partition), int(p.error_code), int(p.end_offset))
           for p in resp.topics[0].partitions]
    assert got == [(0, NONE, 1), (1, NONE, 2), (2, NONE, 3), (9, UNKNOWN_TOPIC_OR_PARTITION, -1)]


def _consume(node: InProcessNode, topic: str, group: str, want: int,
             ) -> tuple[list[bytes], int, int]:
    """want values from the group's position, committed after; returns them, the committed
    offset and its leader epoch."""
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 50, "topic.metadata.refresh.interval.ms": 1000})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append(m.value())
        c.commit(asynchronous=False)
        # the committed offset carries the leader epoch of the last record consumed
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        c.close()
    return got, tp.offset, tp.leader_epoch


def test_librdkafka_resumes_a_group_with_leader_epochs(node: InProcessNode) -> None:
    topic, group = "epochs-librdkafka", f"g-{uuid.uuid4()}"
    create_topic(node.bootstrap, topic, partitions=1)
    produce(node.bootstrap, topic, [b"a%d" % i for i in range(20)], partition=0)
    plog = plog_of(node, topic)
    epoch = on_loop(node, lambda: plog.leader_epoch)
    assert _consume(node, topic, group, 20) == ([b"a%d" % i for i in range(20)], 20, epoch)
    produce(node.bootstrap, topic, [b"b%d" % i for i in range(7)], partition=0)
    # a second member of the group starts from the committed offset and its epoch: no
    # reset to the beginning, no record lost
    assert _consume(node, topic, group, 7) == ([b"b%d" % i for i in range(7)], 27, epoch)
    assert on_loop(node, lambda: plog.log_end_offset) == 27


def served(node: InProcessNode) -> int:
    """OffsetForLeaderEpoch requests the node has answered."""
    async def count() -> int:
        assert node.node is not None and node.node.broker is not None
        return int(node.node.broker.metrics.counts.requests[API])
    n: int = node.run(count())
    return n


def test_librdkafka_validates_positions_with_leader_epochs(node: InProcessNode) -> None:
    """librdkafka checks a position that carries a leader epoch (an assignment, a seek)
    with OffsetForLeaderEpoch before fetching (KIP-320): the answer must let it go on from
    there, not reset it as if the log had been truncated."""
    topic = "epochs-validate"
    create_topic(node.bootstrap, topic, partitions=1)
    produce(node.bootstrap, topic, [b"v%d" % i for i in range(10)], partition=0)
    plog = plog_of(node, topic)
    epoch = on_loop(node, lambda: plog.leader_epoch)
    before = served(node)
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "enable.auto.commit": False, "auto.offset.reset": "latest",
                  "fetch.wait.max.ms": 50})

    def poll(n: int) -> list[tuple[int, bytes]]:
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            got.append((m.offset(), m.value()))
        return got

    try:
        c.assign([TopicPartition(topic, 0, 5, leader_epoch=epoch)])
        assert poll(5) == [(i, b"v%d" % i) for i in range(5, 10)]
        c.seek(TopicPartition(topic, 0, 2, leader_epoch=epoch))
        assert poll(3) == [(i, b"v%d" % i) for i in range(2, 5)]
    finally:
        c.close()
    assert served(node) >= before + 2


def _frame(version: int, body: bytes) -> bytes:
    """A size-prefixed OffsetForLeaderEpoch frame (header v2 from v4 on, else v1)."""
    head = struct.pack(">hhih", API, version, 7, 4) + b"test"
    if version >= 4:
        head += b"\x00"  # no header tagged fields
    payload = head + body
    return struct.pack(">i", len(payload)) + payload


_WELL_FORMED = {
    2: struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iiii", 1, 0, -1, 0),
    4: struct.pack(">i", -1) + b"\x02\x02t\x02" + struct.pack(">iii", 0, -1, 0) + b"\x00\x00\x00",
}


@pytest.mark.parametrize(("version", "body"), [
    # topics: a legacy array announcing 2^31-1 entries in 16 bytes
    (2, struct.pack(">i", 2**31 - 1) + b"\x00" * 16),
    # topics: a compact array announcing ~2^32 entries
    (4, struct.pack(">i", -1) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 8),
    # partitions: a compact array announcing 2^28 entries after a real topic name
    (4, struct.pack(">i", -1) + b"\x02\x02t" + b"\x80\x80\x80\x80\x01" + b"\x00" * 8),
])
def test_hostile_counts_close_only_that_connection(node: InProcessNode, version: int,
                                                  body: bytes) -> None:
    host, port = node.bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(_frame(version, _WELL_FORMED[version]))  # the same framing is answered
        (size,) = struct.unpack(">i", s.recv(4))
        assert 0 < size < 1000 and struct.unpack(">i", s.recv(4))[0] == 7
        s.recv(size - 4)
        s.sendall(_frame(version, body))
        assert s.recv(1024) == b""  # closed, no answer
    # the node is unharmed and answers the next one
    assert ask(node, version, "no-such-topic", 0, 0)[0] == UNKNOWN_TOPIC_OR_PARTITION
