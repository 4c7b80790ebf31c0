"""Three `eddy serve` processes on loopback, every one a broker and a voter of the metadata
quorum (controller.quorum.voters). Kafka clients see one cluster through any node: a topic of
replication factor 3 created through one node is placed on all three and every node answers
Metadata alike; records produced through one node are consumed through another. The
controller is killed with SIGKILL: a new one takes over, fences it and moves its
leaderships; then every node is killed at once and restarted, and nothing committed is
lost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import EddyProcess
from mesh_cluster import free_udp_port, wait_for

IDS = (1, 2, 3)


def nodes(tmp: Path) -> dict[int, EddyProcess]:
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return {i: EddyProcess(tmp / f"n{i}", [
        "--node-id", str(i), "--set", "process.roles=broker,controller",
        "--set", f"controller.quorum.voters={voters}",
        "--set", "mesh.ping.interval.ms=200"]) for i in IDS}


_ADMINS: dict[str, AdminClient] = {}


def admin(node: EddyProcess) -> AdminClient:
    """One client per node, kept: a future outlives a client that is garbage-collected."""
    if node.bootstrap not in _ADMINS:
        _ADMINS[node.bootstrap] = AdminClient({"bootstrap.servers": node.bootstrap})
    return _ADMINS[node.bootstrap]


def describe(node: EddyProcess, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    md = admin(node).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        raise KafkaException(t.error)
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs))
            for p in t.partitions.values()}


def topic_ids(node: EddyProcess, names: list[str]) -> dict[str, str]:
    futures = admin(node).describe_topics(TopicCollection(names), request_timeout=10)
    return {name: str(f.result(15).topic_id) for name, f in futures.items()}


def controller_of(node: EddyProcess) -> int:
    """The controller DescribeCluster names (-1: none yet)."""
    try:
        cluster = admin(node).describe_cluster(request_timeout=10).result(15)
    except KafkaException:
        return -1
    controller = cluster.controller
    return -1 if controller is None else int(controller.id)


def create(node: EddyProcess, name: str, partitions: int, rf: int, timeout: float = 15) -> None:
    futures = admin(node).create_topics([NewTopic(name, partitions, rf)],
                                        request_timeout=timeout)
    futures[name].result(timeout + 5)


def produce(node: EddyProcess, topic: str, count: int, tag: str) -> int:
    delivered = []
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all",
                  "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, key=f"{tag}-{i}".encode(), value=f"{tag}:{i}".encode(),
                  on_delivery=lambda err, msg: delivered.append(err is None))
    p.flush(30)
    return sum(delivered)


def consume_all(node: EddyProcess, topic: str, group: str, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
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


def test_three_nodes_one_cluster_controller_failover_and_full_restart(tmp_path: Path) -> None:
    cluster = nodes(tmp_path)
    try:
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(controller_of(n) in IDS for n in cluster.values()), 30,
                 "a controller every node names")
        wait_for(lambda: all(len(admin(n).list_topics(timeout=10).brokers) == 3
                             for n in cluster.values()), 30, "every node lists 3 brokers")

        create(cluster[2], "orders", 6, 3)
        views = [describe(n, "orders") for n in cluster.values()]
        assert views[0] == views[1] == views[2], views
        assert all(replicas == [1, 2, 3] and isr == [1, 2, 3]
                   for _, replicas, isr in views[0].values())
        assert {leader for leader, _, _ in views[0].values()} == set(IDS)

        assert produce(cluster[3], "orders", 300, "a") == 300
        got = consume_all(cluster[1], "orders", "g1", 300)
        assert sorted(got) == sorted(f"a:{i}".encode() for i in range(300))

        # kill -9 the controller: another node takes over and fences it
        dead = controller_of(cluster[1])
        led = {p for p, (leader, _, _) in views[0].items() if leader == dead}
        survivors = [n for i, n in cluster.items() if i != dead]
        cluster[dead].kill()
        killed_at = time.monotonic()
        wait_for(lambda: all(leader != dead and dead not in isr
                             for leader, _, isr in describe(survivors[1], "orders").values()),
                 30, "the dead node's partitions have new leaders", interval=0.05)
        moved_s = time.monotonic() - killed_at
        create(survivors[0], "after-kill", 2, 2, timeout=30)
        created_s = time.monotonic() - killed_at
        print(f"controller {dead} killed: its {len(led)} partitions led elsewhere after "
              f"{moved_s:.2f} s, CreateTopics through another node done after "
              f"{created_s:.2f} s")
        new_controller = controller_of(survivors[0])
        assert new_controller in IDS and new_controller != dead
        assert all(len(admin(n).list_topics(timeout=10).brokers) == 2 for n in survivors)
        assert produce(survivors[1], "after-kill", 50, "b") == 50

        # the dead node comes back: registered and unfenced again, back in every ISR
        cluster[dead].start()
        wait_for(lambda: len(admin(survivors[0]).list_topics(timeout=10).brokers) == 3, 30,
                 "the restarted node listed again")

        # every node killed at once and restarted: nothing committed is lost
        before = {t: describe(cluster[1], t) for t in ("orders", "after-kill")}
        ids_before = topic_ids(cluster[1], ["orders", "after-kill"])
        for n in cluster.values():
            n.kill()
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(len(admin(n).list_topics(timeout=10).brokers) == 3
                             for n in cluster.values()), 30, "all three back")
        assert topic_ids(cluster[3], ["orders", "after-kill"]) == ids_before
        for t, view in before.items():
            after = describe(cluster[2], t)
            assert {p: r for p, (_, r, _) in after.items()} == \
                {p: r for p, (_, r, _) in view.items()}
        assert produce(cluster[1], "after-kill", 10, "c") == 10
    finally:
        _ADMINS.clear()
        for n in cluster.values():
            n.kill()
