"""SASL on a gateway, and the client's principal carried to the broker that authorizes it.

Two `eddy serve` processes joined by the QUIC mesh on loopback: a broker (a cluster of one,
a SASL_PLAINTEXT listener, sasl.bootstrap.user admin, super.users=User:admin, the authorizer
on) and a gateway in front of it (process.roles=gateway, a SASL_PLAINTEXT listener, no
users of its own: it asks the broker over the mesh). confluent-kafka clients are given the
gateway's address only, except where an operator changes users and ACLs on the broker:
admin logs in through the gateway and produces and consumes; a wrong password fails
cleanly with the gateway serving on; bob, created on the broker, logs in through the
gateway, is refused TOPIC_AUTHORIZATION_FAILED on produce (the broker's code, through the
gateway unchanged) and produces once an ACL grants him WRITE.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from integration.security_nodes import ADMIN, SecureNode
from mesh_cluster import free_udp_port, wait_for

pytestmark = pytest.mark.timeout(180)
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
QUIET = {  # failed logins are the point of some checks: neither delayed nor rate limited
    "connection.failed.authentication.delay.ms": "0",
    "sasl.failed.logins.per.ip.per.minute": "100000",
    "registry.listener": "", "admin.listener": "",
}


@dataclass
class Nodes:
    broker: SecureNode
    gateway: SecureNode

    @property
    def gateway_addr(self) -> str:
        return self.gateway.addr["SASL_PLAINTEXT"]

    @property
    def broker_addr(self) -> str:
        return self.broker.addr["SASL_PLAINTEXT"]


def sasl(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256"
         ) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "log_level": 0}


def logs_in(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-256"
            ) -> bool:
    try:
        AdminClient(sasl(bootstrap, user, password, mechanism)).list_topics(timeout=3)
    except KafkaException:
        return False
    return True


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    root: Path = tmp_path_factory.mktemp("gwsec")
    broker_mesh = free_udp_port()
    broker = SecureNode(root / "broker", {
        "node.id": "1",
        "process.roles": "broker,controller",  # a cluster of one, with a mesh listener
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": MECHANISMS,
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "super.users": f"User:{ADMIN[0]}",
        "authorizer.class.name": STANDARD,
        "mesh.listener": f"127.0.0.1:{broker_mesh}",
        "mesh.ping.interval.ms": "200",
        **QUIET,
    })
    gateway = SecureNode(root / "gateway", {
        "node.id": "100",
        "process.roles": "gateway",
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": MECHANISMS,
        "mesh.listener": f"127.0.0.1:{free_udp_port()}",
        "mesh.seeds": f"127.0.0.1:{broker_mesh}",
        "mesh.ping.interval.ms": "200",
        **QUIET,
    })
    n = Nodes(broker, gateway)
    try:
        broker.start(timeout=30)
        gateway.start(timeout=30)
        # the gateway knows no user until it reaches the broker over the mesh
        wait_for(lambda: logs_in(n.gateway_addr, *ADMIN), 40,
                 "admin logs in through the gateway")
        yield n
    finally:
        gateway.kill()
        broker.kill()


def produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> tuple[int, list[str]]:
    """(records delivered, delivery error names)."""
    p = Producer({**conf, "acks": "all", "linger.ms": 5, "message.timeout.ms": 15000})
    ok: list[int] = []
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err.name())
        else:
            ok.append(msg.offset())

    for v in values:
        p.produce(topic, value=v, on_delivery=cb)
    p.flush(30)
    return len(ok), errors


def create_topic(conf: dict[str, Any], topic: str, partitions: int = 2) -> None:
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def test_admin_produces_and_consumes_through_the_gateway(nodes: Nodes) -> None:
    topic = f"gwsec-{uuid.uuid4().hex[:8]}"
    conf = sasl(nodes.gateway_addr, *ADMIN)
    create_topic(conf, topic)
    values = [f"v-{i}".encode() for i in range(20)]
    assert produce(conf, topic, values[:10]) == (10, [])
    # PLAIN and SCRAM-SHA-512 are checked against the broker's credentials as well
    assert produce(sasl(nodes.gateway_addr, *ADMIN, "PLAIN"), topic, values[10:15]) == (5, [])
    assert produce(sasl(nodes.gateway_addr, *ADMIN, "SCRAM-SHA-512"), topic,
                   values[15:]) == (5, [])
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 40
        while len(got) < len(values) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            got.append(msg.value())
            c.commit(message=msg, asynchronous=False)  # OffsetCommit as admin, authorized
    finally:
        c.close()
    assert sorted(got) == sorted(values)


def test_wrong_password_fails_cleanly(nodes: Nodes) -> None:
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        admin = AdminClient(sasl(nodes.gateway_addr, ADMIN[0], "wrong", mechanism))
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=5)
        assert not logs_in(nodes.gateway_addr, f"nobody-{uuid.uuid4().hex[:6]}", "x",
                           mechanism)
    assert nodes.gateway.alive()
    assert logs_in(nodes.gateway_addr, *ADMIN)  # serving on


def test_user_created_on_the_broker_is_authorized_by_it(nodes: Nodes) -> None:
    broker_admin = AdminClient(sasl(nodes.broker_addr, *ADMIN))
    user, password = f"bob-{uuid.uuid4().hex[:6]}", "bob-" + uuid.uuid4().hex
    topic = f"bobs-{uuid.uuid4().hex[:8]}"
    create_topic(sasl(nodes.gateway_addr, *ADMIN), topic)
    assert not logs_in(nodes.gateway_addr, user, password)
    broker_admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
        password.encode())])[user].result(30)
    # the gateway keeps a "no such user" answer for a second at most
    wait_for(lambda: logs_in(nodes.gateway_addr, user, password), 15,
             f"{user} logs in through the gateway")

    bob = sasl(nodes.gateway_addr, user, password)
    delivered, errors = produce(bob, topic, [b"refused"])
    assert delivered == 0 and errors and set(errors) == {"TOPIC_AUTHORIZATION_FAILED"}, errors

    grant = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                       f"User:{user}", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    broker_admin.create_acls([grant], request_timeout=20)[grant].result(30)
    # the gateway keeps a decision up to a second (ACL changes apply within one)
    wait_for(lambda: produce(bob, topic, [b"allowed-1"]) == (1, []), 15,
             "bob produces once the gateway sees the grant")
    assert produce(bob, topic, [b"allowed-2"]) == (1, [])
