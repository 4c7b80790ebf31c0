"""A gateway in front of two broker processes, all joined by the QUIC mesh on loopback.

Real clients (confluent-kafka, kafka-python, aiokafka, kcat) are given the gateway's
bootstrap only. Topics they create land on the broker rendezvous hashing picks; that is
checked by asking the brokers themselves (their own bootstraps). A broker killed with SIGKILL
makes produce to its topics fail retriably while the other broker's topics keep working; once
it is restarted on the same data dir, the gateway routes to it again and nothing is lost.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import EddyProcess
from mesh_cluster import free_udp_port, node_states, wait_for

from eddy.mesh.directory import rendezvous

GATEWAY_ID = 100
BROKERS = [1, 2]
PARTITIONS = 3
AUTO_PARTITIONS = 2  # num.partitions of the brokers: what auto-created topics get
#: fast liveness so a killed broker is declared dead within a couple of seconds
FAST_PINGS = ["--set", "mesh.ping.interval.ms=200", "--set", "mesh.ping.max.unacked=3"]

#: (partition, offset, key, value) of one record, as produced or as consumed
Rec = tuple[int, int, bytes | None, bytes]


@dataclass
class Cluster:
    gateway: EddyProcess
    brokers: dict[int, EddyProcess]

    @property
    def bootstrap(self) -> str:
        return self.gateway.bootstrap

    def states(self) -> dict[int, str]:
        """Kafka node id -> liveness, as the gateway sees the mesh."""
        return node_states(self.gateway)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("gwcluster")
    p1, p2, p0 = free_udp_port(), free_udp_port(), free_udp_port()
    common = [*FAST_PINGS, "--set", f"num.partitions={AUTO_PARTITIONS}"]
    brokers = {
        1: EddyProcess(root / "n1", ["--node-id", "1", "--set",
                                     f"mesh.listener=127.0.0.1:{p1}", *common]),
        2: EddyProcess(root / "n2", ["--node-id", "2", "--set",
                                     f"mesh.listener=127.0.0.1:{p2}", "--set",
                                     f"mesh.seeds=127.0.0.1:{p1}", *common]),
    }
    gateway = EddyProcess(root / "gw", [
        "--node-id", str(GATEWAY_ID), "--set", "process.roles=gateway",
        "--set", f"mesh.listener=127.0.0.1:{p0}", "--set", f"mesh.seeds=127.0.0.1:{p1}",
        *common])
    c = Cluster(gateway, brokers)
    try:
        for b in brokers.values():
            b.start()
        gateway.start()
        wait_for(lambda: all(c.states().get(n) == "alive" for n in BROKERS), 30,
                 "the gateway sees both brokers alive")
        yield c
    finally:
        gateway.kill()
        for b in brokers.values():
            b.kill()


# ---- helpers ------------------------------------------------------------------------------


def name_on(node: int, prefix: str) -> str:
    """A fresh topic name that rendezvous hashing places on `node`."""
    while True:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if rendezvous(name, BROKERS) == node:
            return name


def other(node: int) -> int:
    return 2 if node == 1 else 1


def topics_on(bootstrap: str) -> dict[str, int]:
    """Name -> partition count of the non-internal topics a node itself reports."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return {n: len(t.partitions) for n, t in md.topics.items() if not n.startswith("__")}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4().hex}"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        c.close()


def ends_of(recs: list[Rec], partitions: int) -> dict[int, int]:
    return {p: sum(1 for r in recs if r[0] == p) for p in range(partitions)}


def by_partition(recs: list[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {}
    for r in recs:
        out.setdefault(r[0], []).append(r)
    return out


def check_lives_on(cluster: Cluster, topic: str, partitions: int, records: int) -> None:
    """The topic is on the node rendezvous chose (and only there), holding `records`."""
    owner = rendezvous(topic, BROKERS)
    assert owner is not None
    on_owner = topics_on(cluster.brokers[owner].bootstrap)
    assert on_owner.get(topic) == partitions, f"{topic} on node {owner}: {on_owner}"
    assert topic not in topics_on(cluster.brokers[other(owner)].bootstrap)
    ends = end_offsets(cluster.brokers[owner].bootstrap, topic, partitions)
    assert sum(ends.values()) == records, ends


def check_consumed(produced: list[Rec], consumed: list[Rec]) -> None:
    """Every produced record consumed exactly once, in offset order within each partition."""
    want = {p: sorted(rs, key=lambda r: r[1]) for p, rs in by_partition(produced).items()}
    assert by_partition(consumed) == want


def keyed(tag: str, n: int, start: int = 0) -> list[tuple[bytes, bytes]]:
    return [(f"key-{i % 12}".encode(), f"{tag}-{i}".encode()) for i in range(start, start + n)]


# ---- confluent-kafka -----------------------------------------------------------------------


def ck_produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes]],
               timeout_ms: int = 20000) -> tuple[list[Rec], list[str]]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": timeout_ms})
    ok: list[Rec] = []
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err.name())
        else:
            ok.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for k, v in items:
        p.produce(topic, key=k, value=v, on_delivery=cb)
    p.flush(timeout_ms / 1000 + 10)
    return ok, errors


def ck_consume_group(bootstrap: str, topic: str, group: str, expected: int) -> list[Rec]:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "fetch.wait.max.ms": 100})
    got: list[Rec] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
            c.commit(message=msg, asynchronous=False)
    finally:
        c.close()
    return got


def ck_read_all(bootstrap: str, topic: str, partitions: int) -> list[Rec]:
    """Every record from offset 0 to the end, by assignment (no group)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    ends = end_offsets(bootstrap, topic, partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: list[Rec] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 20
        while len(got) < sum(ends.values()) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()
    return got


@pytest.mark.timeout(90)
def test_confluent_kafka_through_the_gateway(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    explicit, auto = name_on(1, "ck-explicit"), name_on(2, "ck-auto")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(explicit, PARTITIONS, 1)])[explicit].result(15)
    md = admin.list_topics(timeout=10)
    assert [b.id for b in md.brokers.values()] == [GATEWAY_ID]

    first, errors = ck_produce(cluster.bootstrap, explicit, keyed("ck", 30))
    assert not errors and len(first) == 30
    assert {r[0] for r in first} == set(range(PARTITIONS)), "keys spread over partitions"
    auto_recs, errors = ck_produce(cluster.bootstrap, auto, keyed("ck-auto", 4))
    assert not errors and len(auto_recs) == 4
    check_lives_on(cluster, explicit, PARTITIONS, 30)
    check_lives_on(cluster, auto, AUTO_PARTITIONS, 4)

    group = f"ck-group-{uuid.uuid4().hex[:6]}"
    check_consumed(first, ck_consume_group(cluster.bootstrap, explicit, group, 30))
    more, errors = ck_produce(cluster.bootstrap, explicit, keyed("ck", 9, start=30))
    assert not errors and len(more) == 9
    # a new member of the same group resumes at the committed offsets: the new records only
    check_consumed(more, ck_consume_group(cluster.bootstrap, explicit, group, 9))
    check_lives_on(cluster, explicit, PARTITIONS, 39)


# ---- kafka-python --------------------------------------------------------------------------


def kp_produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes]]) -> list[Rec]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [(k, v, p.send(topic, key=k, value=v)) for k, v in items]
        p.flush(30)
        out: list[Rec] = []
        for k, v, f in futures:
            md = f.get(10)
            out.append((md.partition, md.offset, k, v))
        return out
    finally:
        p.close(10)


def kp_consume_group(bootstrap: str, topic: str, group: str, expected: int) -> list[Rec]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      fetch_max_wait_ms=100)
    got: list[Rec] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500, max_records=expected - len(got)).values():
                got += [(r.partition, r.offset, r.key, r.value) for r in recs]
            c.commit()
    finally:
        c.close()
    return got


@pytest.mark.timeout(90)
def test_kafka_python_through_the_gateway(cluster: Cluster) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    explicit, auto = name_on(2, "kp-explicit"), name_on(1, "kp-auto")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic(explicit, PARTITIONS, 1)])
    finally:
        admin.close()
    first = kp_produce(cluster.bootstrap, explicit, keyed("kp", 24))
    assert {r[0] for r in first} == set(range(PARTITIONS)), "keys spread over partitions"
    assert len(kp_produce(cluster.bootstrap, auto, keyed("kp-auto", 3))) == 3
    check_lives_on(cluster, explicit, PARTITIONS, 24)
    check_lives_on(cluster, auto, AUTO_PARTITIONS, 3)

    group = f"kp-group-{uuid.uuid4().hex[:6]}"
    check_consumed(first, kp_consume_group(cluster.bootstrap, explicit, group, 24))
    more = kp_produce(cluster.bootstrap, explicit, keyed("kp", 8, start=24))
    check_consumed(more, kp_consume_group(cluster.bootstrap, explicit, group, 8))
    check_lives_on(cluster, explicit, PARTITIONS, 32)


# ---- aiokafka ------------------------------------------------------------------------------


async def aio_produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes]]
                      ) -> list[Rec]:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await p.start()
    try:
        futures = [await p.send(topic, key=k, value=v) for k, v in items]
        mds = await asyncio.gather(*futures)
    finally:
        await p.stop()
    return [(md.partition, md.offset, k, v) for (k, v), md in zip(items, mds, strict=True)]


async def aio_consume_group(bootstrap: str, topic: str, group: str, expected: int
                            ) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         fetch_max_wait_ms=100)
    await c.start()
    got: list[Rec] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=500, max_records=expected - len(got))
            for recs in batch.values():
                got += [(r.partition, r.offset, r.key, r.value or b"") for r in recs]
            await c.commit()
    finally:
        await c.stop()
    return got


@pytest.mark.timeout(90)
def test_aiokafka_through_the_gateway(cluster: Cluster) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    explicit, auto = name_on(1, "aio-explicit"), name_on(2, "aio-auto")
    group = f"aio-group-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(explicit, PARTITIONS, 1)])
        finally:
            await admin.close()
        first = await aio_produce(cluster.bootstrap, explicit, keyed("aio", 21))
        assert {r[0] for r in first} == set(range(PARTITIONS)), "keys spread over partitions"
        assert len(await aio_produce(cluster.bootstrap, auto, keyed("aio-auto", 2))) == 2
        check_lives_on(cluster, explicit, PARTITIONS, 21)
        check_lives_on(cluster, auto, AUTO_PARTITIONS, 2)
        check_consumed(first, await aio_consume_group(cluster.bootstrap, explicit, group, 21))
        more = await aio_produce(cluster.bootstrap, explicit, keyed("aio", 6, start=21))
        check_consumed(more, await aio_consume_group(cluster.bootstrap, explicit, group, 6))
        check_lives_on(cluster, explicit, PARTITIONS, 27)

    asyncio.run(scenario())


# ---- kcat ----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_kcat_lists_the_gateway_as_the_only_broker(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    on1, on2 = name_on(1, "kcat"), name_on(2, "kcat")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for name, fut in admin.create_topics([NewTopic(on1, 2, 1), NewTopic(on2, 4, 1)]).items():
        fut.result(15)
        assert name in topics_on(cluster.brokers[rendezvous(name, BROKERS) or 0].bootstrap)
    out = subprocess.run(["kcat", "-L", "-J", "-b", cluster.bootstrap, "-m", "10"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    md = json.loads(out.stdout)
    assert [(b["id"], b["name"]) for b in md["brokers"]] == [(GATEWAY_ID, cluster.bootstrap)]
    listed = {t["topic"]: t for t in md["topics"]}
    assert len(listed[on1]["partitions"]) == 2
    assert len(listed[on2]["partitions"]) == 4
    # every topic either broker holds is listed, each partition led by the gateway
    everything = {**topics_on(cluster.brokers[1].bootstrap),
                  **topics_on(cluster.brokers[2].bootstrap)}
    assert {n: len(listed[n]["partitions"]) for n in everything if n in listed} == everything
    for t in listed.values():
        assert not t.get("error"), t
        assert {p["leader"] for p in t["partitions"]} == {GATEWAY_ID}


# ---- a broker killed and restarted ---------------------------------------------------------


@pytest.mark.timeout(120)
def test_broker_killed_and_restarted_behind_the_gateway(cluster: Cluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    victim, survivor = name_on(2, "victim"), name_on(1, "survivor")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for fut in admin.create_topics([NewTopic(victim, PARTITIONS, 1),
                                    NewTopic(survivor, PARTITIONS, 1)]).values():
        fut.result(15)
    before, errors = ck_produce(cluster.bootstrap, victim, keyed("v", 20))
    assert not errors and len(before) == 20
    s_before, errors = ck_produce(cluster.bootstrap, survivor, keyed("s", 10))
    assert not errors and len(s_before) == 10
    check_lives_on(cluster, victim, PARTITIONS, 20)

    cluster.brokers[2].kill()
    # at once (the gateway may not know yet) and once node 2 is declared dead: the victim's
    # records are not accepted anywhere, the client sees retriable failures or a timeout
    lost, errors = ck_produce(cluster.bootstrap, victim, keyed("v-down", 3), timeout_ms=4000)
    assert lost == [] and len(errors) == 3, (lost, errors)
    wait_for(lambda: cluster.states().get(2) == "dead", 20, "the gateway sees node 2 dead")
    # what a producer asks after UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER: the victim's
    # metadata (auto-creation allowed). Its owner is down: that is no reason to create it
    # anew on the node that is up (Kafka lists it with LEADER_NOT_AVAILABLE partitions)
    md = Producer({"bootstrap.servers": cluster.bootstrap}).list_topics(victim, timeout=10)
    seen = md.topics[victim]
    assert seen.error is not None or len(seen.partitions) == PARTITIONS, seen.partitions
    assert victim not in topics_on(cluster.brokers[1].bootstrap), \
        "the gateway created a second copy of the dead node's topic on node 1"
    lost, errors = ck_produce(cluster.bootstrap, victim, keyed("v-dead", 3), timeout_ms=4000)
    assert lost == [] and len(errors) == 3, (lost, errors)
    assert cluster.gateway.alive()

    # the other broker's topics keep working through the gateway
    s_more, errors = ck_produce(cluster.bootstrap, survivor, keyed("s", 5, start=10))
    assert not errors and len(s_more) == 5
    check_consumed(s_before + s_more, ck_consume_group(
        cluster.bootstrap, survivor, f"s-{uuid.uuid4().hex[:6]}", 15))
    assert victim not in topics_on(cluster.brokers[1].bootstrap)

    cluster.brokers[2].start()  # same data dir, same NodeId, same Kafka port
    wait_for(lambda: cluster.states().get(2) == "alive", 30, "the gateway sees node 2 again")

    def routed_again() -> bool:
        try:
            return end_offsets(cluster.bootstrap, victim, PARTITIONS) == ends_of(
                before, PARTITIONS)
        except Exception:
            return False

    wait_for(routed_again, 30, "the gateway reports the victim's pre-kill end offsets", 0.5)
    check_consumed(before, ck_read_all(cluster.bootstrap, victim, PARTITIONS))
    after, errors = ck_produce(cluster.bootstrap, victim, keyed("v", 4, start=20))
    assert not errors and len(after) == 4
    check_lives_on(cluster, victim, PARTITIONS, 24)
