"""The gateway role end to end, in one process: two Brokers (nodes 1 and 2) and a gateway
KafkaServer in a background asyncio loop; the gateway's Forwarder runs each op on the owning
broker's OpExecutor after a postcard encode/decode (the bytes path a mesh would carry).
Real clients (confluent-kafka, kafka-python, aiokafka) talk to the gateway only: they create
topics (explicitly and by auto-creation) that land on both nodes, produce to several
partitions, consume in a group with commits, and resume from the committed offsets after a
restart. The records are then read back from the owning broker's log directly."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eddy.broker.broker import Broker
from eddy.broker.server import KafkaServer
from eddy.clock import WallClock
from eddy.config import BrokerConfig
from eddy.gateway.executor import OpExecutor
from eddy.gateway.handlers.table import GATEWAY_HANDLERS, GATEWAY_VERSIONS
from eddy.gateway.node import Gateway
from eddy.gateway.ops import OpError, OpFailed, OpTimeout, OpUnavailable
from eddy.gateway.routes import TopicRoute, pick_node

PARTITIONS = 3
GATEWAY_NODE = 7


class BrokerRoutes:
    """Routes read straight off the brokers' logs (what gossip would tell a gateway)."""

    def __init__(self, brokers: dict[int, Broker]) -> None:
        self.brokers = brokers
        self.noted: dict[str, TopicRoute] = {}

    def topic(self, name: str) -> TopicRoute | None:
        for node, b in sorted(self.brokers.items()):
            t = b.logs.get(name)
            if t is not None and not t.is_internal:
                return TopicRoute(node, len(t.partitions))
        return None

    def topics(self) -> dict[str, TopicRoute]:
        out: dict[str, TopicRoute] = {}
        for node, b in sorted(self.brokers.items()):
            for name, t in list(b.logs.topics.items()):
                if not t.is_internal and not name.startswith("__"):
                    out.setdefault(name, TopicRoute(node, len(t.partitions)))
        return out

    def group_owner(self, group_id: str) -> int | None:
        return pick_node(group_id, self.broker_nodes())

    def broker_nodes(self) -> list[int]:
        return sorted(self.brokers)

    def note_topic(self, name: str, route: TopicRoute) -> None:
        self.noted[name] = route

    def forget_topic(self, name: str) -> None:
        self.noted.pop(name, None)  # the brokers' logs are the truth here


class ExecutorForwarder:
    """Every op crosses postcard bytes both ways, as over the mesh."""

    def __init__(self, brokers: dict[int, Broker]) -> None:
        self.executors = {n: OpExecutor(b) for n, b in brokers.items()}
        self.calls: dict[tuple[int, int], int] = {}

    async def call(self, node_id: int, op: int, body: bytes, timeout_ms: int) -> bytes:
        ex = self.executors.get(node_id)
        if ex is None:
            raise OpUnavailable(f"no node {node_id}")
        self.calls[(node_id, op)] = self.calls.get((node_id, op), 0) + 1
        try:
            return bytes(await asyncio.wait_for(ex.execute(op, bytes(body)),
                                                timeout_ms / 1000))
        except TimeoutError:
            raise OpTimeout(f"node {node_id}: op 0x{op:02x} timed out") from None
        except OpError as exc:
            raise OpFailed(str(exc)) from None


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.brokers: dict[int, Broker] = {}
        self.server: KafkaServer | None = None
        self.forwarder: ExecutorForwarder | None = None
        self.bootstrap = ""

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        for node in (1, 2):
            cfg = BrokerConfig(node_id=node, listen="127.0.0.1:0",
                               data_dir=str(self.root / f"node{node}"), num_partitions=2)
            b = Broker(cfg, WallClock())
            b.load()
            b.start_maintenance()
            self.brokers[node] = b
        self.forwarder = ExecutorForwarder(self.brokers)
        gw_cfg = BrokerConfig(node_id=GATEWAY_NODE, listen="127.0.0.1:0",
                              data_dir=str(self.root / "gateway"),
                              process_roles="gateway", num_partitions=2)
        gw = Gateway(gw_cfg, BrokerRoutes(self.brokers), self.forwarder, cluster_id="gw-test")
        self.server = KafkaServer(gw, handlers=GATEWAY_HANDLERS, versions=GATEWAY_VERSIONS)
        port = await self.server.start()
        self.bootstrap = f"127.0.0.1:{port}"

    async def _stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
        for b in self.brokers.values():
            await b.stop()

    def start(self) -> None:
        self.thread.start()
        self.run(self._start())

    def stop(self) -> None:
        try:
            self.run(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def owner_logs(self, topic: str) -> dict[int, tuple[int, dict[int, int]]]:
        """Per node holding `topic`: (partition count, high watermark per partition)."""
        async def read() -> dict[int, tuple[int, dict[int, int]]]:
            out = {}
            for node, b in self.brokers.items():
                t = b.logs.get(topic)
                if t is not None:
                    out[node] = (len(t.partitions),
                                 {p: plog.high_watermark for p, plog in enumerate(t.partitions)})
            return out
        result: dict[int, tuple[int, dict[int, int]]] = self.run(read())
        return result


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("gateway"))
    c.start()
    yield c
    c.stop()


def name_on(node: int, prefix: str) -> str:
    """A fresh topic name that pick_node places on `node`."""
    while True:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if pick_node(name, [1, 2]) == node:
            return name


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def check_landed(cluster: Cluster, topic: str, node: int, partitions: int,
                 per_partition: dict[int, int]) -> None:
    logs = cluster.owner_logs(topic)
    assert set(logs) == {node}, f"{topic} should live on node {node} only, found {logs}"
    count, hwms = logs[node]
    assert count == partitions
    assert hwms == per_partition


def values_for(tag: str, n: int) -> list[tuple[int, bytes]]:
    return [(i % PARTITIONS, f"{tag}-{i}".encode()) for i in range(n)]


# ---- confluent-kafka ---------------------------------------------------------------------


def test_confluent_kafka_through_gateway(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    explicit = name_on(1, "ck-explicit")
    auto = name_on(2, "ck-auto")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(explicit, PARTITIONS, 1)])[explicit].result(15)
    md = admin.list_topics(timeout=10)
    assert [b.id for b in md.brokers.values()] == [GATEWAY_NODE]
    assert len(md.topics[explicit].partitions) == PARTITIONS
    assert all(p.leader == GATEWAY_NODE for p in md.topics[explicit].partitions.values())

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    errors: list[Any] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    sent = values_for("a", 30)
    for p, v in sent:
        producer.produce(explicit, value=v, partition=p, on_delivery=cb)
    producer.produce(auto, value=b"auto-0", on_delivery=cb)  # auto-created (2 partitions)
    assert producer.flush(30) == 0
    assert not errors, errors
    check_landed(cluster, explicit, 1, PARTITIONS, {0: 10, 1: 10, 2: 10})
    assert set(cluster.owner_logs(auto)) == {2}
    assert sum(cluster.owner_logs(auto)[2][1].values()) == 1

    group = f"ck-group-{uuid.uuid4().hex[:6]}"

    def consume(expected: int) -> list[bytes]:
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": 6000, "fetch.wait.max.ms": 100})
        got: list[bytes] = []
        try:
            c.subscribe([explicit])
            deadline = time.monotonic() + 30
            while len(got) < expected and time.monotonic() < deadline:
                msg = c.poll(0.5)
                if msg is None or msg.error():
                    continue
                got.append(msg.value())
                c.commit(msg, asynchronous=False)
        finally:
            c.close()
        return got

    first = consume(20)
    assert len(first) == 20
    # a new consumer in the same group resumes after the committed offsets
    rest = consume(10)
    assert sorted(first + rest) == sorted(v for _, v in sent)
    assert not set(first) & set(rest)


# ---- kafka-python ------------------------------------------------------------------------


def test_kafka_python_through_gateway(cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    explicit = name_on(2, "kp-explicit")
    auto = name_on(1, "kp-auto")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(explicit, PARTITIONS, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    sent = values_for("k", 24)
    futures = [producer.send(explicit, value=v, partition=p) for p, v in sent]
    futures.append(producer.send(auto, value=b"auto"))
    producer.flush(30)
    offsets = [f.get(10) for f in futures]
    producer.close()
    assert sorted(o.offset for o in offsets[:-1] if o.partition == 0) == list(range(8))
    check_landed(cluster, explicit, 2, PARTITIONS, {0: 8, 1: 8, 2: 8})
    assert set(cluster.owner_logs(auto)) == {1}

    group = f"kp-group-{uuid.uuid4().hex[:6]}"

    def consume(expected: int) -> list[bytes]:
        c = KafkaConsumer(explicit, bootstrap_servers=cluster.bootstrap, group_id=group,
                          auto_offset_reset="earliest", enable_auto_commit=False,
                          fetch_max_wait_ms=100)
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < expected and time.monotonic() < deadline:
                for recs in c.poll(timeout_ms=500, max_records=4).values():
                    got += [r.value for r in recs]
                c.commit()
        finally:
            c.close()
        return got

    first = consume(12)
    assert len(first) >= 12
    rest = consume(len(sent) - len(first))
    assert sorted(first + rest) == sorted(v for _, v in sent)


# ---- aiokafka ----------------------------------------------------------------------------


def test_aiokafka_through_gateway(cluster: Cluster) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    explicit = name_on(1, "aio-explicit")
    auto = name_on(2, "aio-auto")
    group = f"aio-group-{uuid.uuid4().hex[:6]}"
    sent = values_for("x", 18)

    async def consume(expected: int) -> list[bytes]:
        c = AIOKafkaConsumer(explicit, bootstrap_servers=cluster.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             fetch_max_wait_ms=100)
        await c.start()
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < expected and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=500, max_records=3)
                for recs in batch.values():
                    got += [r.value for r in recs if r.value is not None]
                await c.commit()
        finally:
            await c.stop()
        return got

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(explicit, PARTITIONS, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                    enable_idempotence=True)
        await producer.start()
        try:
            for p, v in sent:
                await producer.send_and_wait(explicit, v, partition=p)
            await producer.send_and_wait(auto, b"auto")
        finally:
            await producer.stop()
        first = await consume(9)
        rest = await consume(len(sent) - len(first))
        return first, rest

    first, rest = asyncio.run(scenario())
    assert len(first) >= 9
    assert sorted(first + rest) == sorted(v for _, v in sent)
    check_landed(cluster, explicit, 1, PARTITIONS, {0: 6, 1: 6, 2: 6})
    assert set(cluster.owner_logs(auto)) == {2}
    # the group lives on its owner: that node's coordinator has its committed offsets
    owner = pick_node(group, [1, 2])
    assert owner is not None

    async def committed() -> dict[tuple[str, int], int]:
        r = cluster.brokers[owner].groups.coordinator.fetch_offsets(group, None)
        return {(p.topic, p.partition): p.committed_offset for p in r.partitions}

    assert cluster.run(committed()) == {(explicit, p): 6 for p in range(PARTITIONS)}


def test_ops_reach_both_nodes(cluster: Cluster) -> None:
    """By now both nodes served produce, fetch and group ops through the gateway."""
    assert cluster.forwarder is not None
    calls = cluster.forwarder.calls
    for node in (1, 2):
        for op in (0x02, 0x03, 0x05):
            assert calls.get((node, op), 0) > 0, (node, op, calls)
    assert sum(n for (_, op), n in calls.items() if op == 0x06) > 0
