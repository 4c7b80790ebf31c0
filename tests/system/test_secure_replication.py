"""Replication over authenticated inter-broker traffic. Three `eddy serve` processes (each a
broker and a voter) whose ONLY listener is SASL_PLAINTEXT (then SASL_SSL): followers log in
to their leaders as the bootstrap user (sasl.inter.broker.user defaults to
sasl.bootstrap.user, a super user) under Kafka's StandardAuthorizer, which refuses replica
Fetch/OffsetForLeaderEpoch without CLUSTER_ACTION. A topic of replication factor 3 gets
records with acks=all through SASL clients, every ISR is full, the records read back, and
after the leader of a partition is SIGKILLed they are all still there from the new leader.
Each node's schema registry, a Kafka client of the same listener, reads `_schemas`."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from conftest import EddyProcess, free_port
from integration.security_nodes import make_certs
from mesh_cluster import free_udp_port
from replication_cluster import wait_for

pytestmark = pytest.mark.timeout(300)
IDS = (1, 2, 3)
ADMIN = ("admin", "admin-secret")
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PARTITIONS = 3
RECORDS = 300


def _free_tcp_port() -> int:
    return free_port()


class SecureNode(EddyProcess):
    """A node with one listener, SECURE, of ``protocol`` (inter-broker too)."""

    def __init__(self, node_id: int, data_dir: Path, voters: str, protocol: str,
                 tls: dict[str, str]) -> None:
        self.node_id = node_id
        sets = {
            "process.roles": "broker,controller", "controller.quorum.voters": voters,
            "mesh.ping.interval.ms": "200",
            "listeners": f"SECURE://127.0.0.1:{_free_tcp_port()}",
            "listener.security.protocol.map": f"SECURE:{protocol}",
            "registry.listener": f"127.0.0.1:{_free_tcp_port()}",
            "authorizer.class.name": STANDARD,
            "super.users": f"User:{ADMIN[0]}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
            # logins fail until the bootstrap user reaches every node: no lockout meanwhile
            "sasl.failed.logins.per.ip.per.minute": "100000",
            "connection.failed.authentication.delay.ms": "0",
            **tls,
        }
        args = ["--node-id", str(node_id)]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        super().__init__(data_dir, args)


class SecureCluster:
    def __init__(self, root: Path, protocol: str) -> None:
        self.protocol = protocol
        tls: dict[str, str] = {}
        self.client_tls: dict[str, str] = {}
        if protocol == "SASL_SSL":
            certs = make_certs(root / "certs")
            # no trust store: the nodes trust the CA of their own keystore chain
            tls = {"ssl.keystore.certificate.chain": str(certs.server_chain),
                   "ssl.keystore.key": str(certs.server_key)}
            self.client_tls = {"ssl.ca.location": str(certs.ca)}
        voters = ",".join(f"{i}@127.0.0.1:{free_udp_port()}" for i in IDS)
        self.nodes = {i: SecureNode(i, root / f"n{i}", voters, protocol, tls) for i in IDS}

    def conf(self, nodes: list[SecureNode] | None = None) -> dict[str, Any]:
        live = nodes if nodes is not None else self.live()
        return {"bootstrap.servers": ",".join(n.bootstrap for n in live),
                "security.protocol": self.protocol, "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": ADMIN[0], "sasl.password": ADMIN[1], "log_level": 0,
                **self.client_tls}

    def live(self) -> list[SecureNode]:
        return [n for n in self.nodes.values() if n.alive()]

    def brokers(self, node: SecureNode) -> int:
        try:
            return len(AdminClient(self.conf([node])).list_topics(timeout=5).brokers)
        except KafkaException:
            return 0

    def describe(self, topic: str) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, sorted ISR) as the live nodes' AdminClient sees it."""
        admin = AdminClient(self.conf())
        try:
            (desc,) = admin.describe_topics(TopicCollection([topic]),
                                            request_timeout=5).values()
            got = desc.result(10)
        except KafkaException:
            return {}
        return {p.id: (p.leader.id if p.leader is not None else -1,
                       sorted(r.id for r in p.isr)) for p in got.partitions}


@pytest.fixture(params=["SASL_PLAINTEXT", "SASL_SSL"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SecureCluster]:
    cluster = SecureCluster(tmp_path, request.param)
    try:
        for n in cluster.nodes.values():
            n.start(timeout=30)
        # the bootstrap user is created through the controller: SASL logins work when it
        # has reached each node
        wait_for(lambda: all(cluster.brokers(n) == 3 for n in cluster.nodes.values()), 60,
                 "every node lists 3 brokers to a SASL client")
        yield cluster
    finally:
        for n in cluster.nodes.values():
            n.kill()


def full_isr(cluster: SecureCluster, topic: str, replicas: int = 3) -> bool:
    view = cluster.describe(topic)
    return len(view) == PARTITIONS and all(
        leader in IDS and len(isr) == replicas for leader, isr in view.values())


def read_all(cluster: SecureCluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**cluster.conf(), "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        def more() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(bytes(msg.value() or b""))
            return len(values) >= count

        wait_for(more, 60, f"{count} records read back", interval=0)
    finally:
        consumer.close()
    return values


def registry_ready(node: SecureNode) -> bool:
    return "schema registry ready on" in node.logs()


def test_replication_over_sasl_listeners(cluster: SecureCluster) -> None:
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(cluster.conf())
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)], request_timeout=20)[topic].result(30)
    wait_for(lambda: full_isr(cluster, topic), 60, f"{topic}: every ISR full",
             detail=lambda: cluster.describe(topic))

    producer = Producer({**cluster.conf(), "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    expected = [f"r{i}".encode() for i in range(RECORDS)]
    for i, value in enumerate(expected):
        producer.produce(topic, value, partition=i % PARTITIONS,
                         on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(60) == 0 and errors == []
    # the followers fetched everything (a follower behind would have left the ISR)
    wait_for(lambda: full_isr(cluster, topic), 30, f"{topic}: every ISR still full",
             detail=lambda: cluster.describe(topic))
    assert sorted(read_all(cluster, topic, RECORDS)) == sorted(expected)

    # the registries' own clients (on the same SASL listener) have read _schemas
    wait_for(lambda: all(registry_ready(n) for n in cluster.nodes.values()), 60,
             "every node's schema registry ready")

    leader = cluster.describe(topic)[0][0]
    victim = cluster.nodes[leader]
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    victim.proc = None

    def moved() -> bool:
        view = cluster.describe(topic)
        return len(view) == PARTITIONS and all(
            lead in IDS and lead != leader for lead, _ in view.values())

    wait_for(moved, 60, f"{topic}: new leaders after node {leader} was killed",
             detail=lambda: cluster.describe(topic))
    assert sorted(read_all(cluster, topic, RECORDS)) == sorted(expected)
    for n in cluster.live():
        assert "not in super.users" not in n.logs()
