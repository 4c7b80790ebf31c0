"""SCRAM users and ACLs are cluster metadata: a change made through one node takes effect on
every node. Three `eddy serve` processes (each a broker and a voter) with an INTERNAL
PLAINTEXT listener (inter-broker; User:ANONYMOUS is a super user so replication works), an
EXTERNAL SASL_PLAINTEXT listener and Kafka's StandardAuthorizer. A user created through
node 1 (AlterUserScramCredentials) logs in on nodes 2 and 3; an ACL created through node 1
(CreateAcls) is listed by DescribeAcls on nodes 2 and 3. The delays are printed (the figure
to watch, ~1 s at most, is measured by `python -m bench.security`); only a generous
deadline is asserted."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from conftest import EddyProcess, free_port
from mesh_cluster import free_udp_port, wait_for

from bench.security_wire import login_ok

pytestmark = pytest.mark.timeout(240)
IDS = (1, 2, 3)
ADMIN = ("admin", "admin-secret")
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
DEADLINE_S = 10.0


def _free_tcp_port() -> int:
    return free_port()


class SaslNode(EddyProcess):
    """A node whose first listener (INTERNAL, what EDDY_READY names) is PLAINTEXT and whose
    EXTERNAL listener, on a port picked here, is SASL_PLAINTEXT."""

    def __init__(self, node_id: int, data_dir: Path, voters: str) -> None:
        self.external = f"127.0.0.1:{_free_tcp_port()}"
        sets = {
            "process.roles": "broker,controller", "controller.quorum.voters": voters,
            "mesh.ping.interval.ms": "200",
            "listeners": f"INTERNAL://127.0.0.1:{_free_tcp_port()},EXTERNAL://{self.external}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "authorizer.class.name": STANDARD,
            "super.users": f"User:ANONYMOUS;User:{ADMIN[0]}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
            # the polls below fail logins on purpose until the user arrives
            "sasl.failed.logins.per.ip.per.minute": "100000",
            "connection.failed.authentication.delay.ms": "0",
        }
        args = ["--node-id", str(node_id)]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        super().__init__(data_dir, args)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[int, SaslNode]]:
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    nodes = {i: SaslNode(i, tmp_path / f"n{i}", voters) for i in IDS}
    try:
        for n in nodes.values():
            n.start(timeout=30)
        admins = {i: AdminClient({"bootstrap.servers": n.bootstrap}) for i, n in nodes.items()}
        wait_for(lambda: all(len(a.list_topics(timeout=10).brokers) == 3
                             for a in admins.values()), 40, "every node lists 3 brokers")
        yield nodes
    finally:
        for n in nodes.values():
            n.kill()


def first_seen(checks: dict[int, Callable[[], bool]], t0: float) -> dict[int, float]:
    """node -> seconds from ``t0`` until its check first held; fails after DEADLINE_S."""
    seen: dict[int, float] = {}
    while len(seen) < len(checks) and time.monotonic() - t0 < DEADLINE_S:
        for node, check in checks.items():
            if node not in seen and check():
                seen[node] = time.monotonic() - t0
        time.sleep(0.005)
    assert len(seen) == len(checks), f"not on nodes {sorted(set(checks) - set(seen))} " \
                                     f"within {DEADLINE_S} s (seen: {seen})"
    return seen


def sasl_admin(node: SaslNode, user: str, password: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.external, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                        "sasl.password": password, "log_level": 0})


def listed(admin: AdminClient, topic: str) -> list[Any]:
    found = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
        None, None,  # type: ignore[arg-type]  # any principal, any host
        AclOperation.ANY, AclPermissionType.ANY), request_timeout=5).result(10)
    return [b for b in found if b.name == topic]


def test_users_and_acls_created_through_one_node_take_effect_on_every_node(
        cluster: dict[int, SaslNode]) -> None:
    one, others = cluster[1], {i: n for i, n in cluster.items() if i != 1}
    admin1 = sasl_admin(one, *ADMIN)
    user, password = f"u-{uuid.uuid4().hex[:8]}", "p-" + uuid.uuid4().hex
    for n in others.values():  # nobody knows the user yet
        host, port = n.external.rsplit(":", 1)
        assert not login_ok(host, int(port), user, password)

    t0 = time.monotonic()
    fs = admin1.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())])
    fs[user].result(30)
    answered = time.monotonic() - t0

    def logs_in(n: SaslNode) -> Callable[[], bool]:
        host, port = n.external.rsplit(":", 1)
        return lambda: login_ok(host, int(port), user, password)

    seen = first_seen({i: logs_in(n) for i, n in others.items()}, t0)
    print(f"\nSCRAM user: node 1 answered in {answered * 1e3:.0f} ms; logs in on "
          + ", ".join(f"node {i} after {s * 1e3:.0f} ms" for i, s in sorted(seen.items())))
    for n in others.values():  # a real client logs in with it too, and a wrong password fails
        md = sasl_admin(n, user, password).list_topics(timeout=10)
        assert len(md.brokers) == 3
        host, port = n.external.rsplit(":", 1)
        assert not login_ok(host, int(port), user, password + "x")

    topic = f"acl-{uuid.uuid4().hex[:8]}"
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                         f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW)
    admins = {i: sasl_admin(n, *ADMIN) for i, n in others.items()}
    for a in admins.values():
        assert listed(a, topic) == []
    t0 = time.monotonic()
    admin1.create_acls([binding], request_timeout=20)[binding].result(30)
    answered = time.monotonic() - t0

    def lists(a: AdminClient) -> Callable[[], bool]:
        return lambda: bool(listed(a, topic))

    seen = first_seen({i: lists(a) for i, a in admins.items()}, t0)
    print(f"ACL: node 1 answered in {answered * 1e3:.0f} ms; listed on "
          + ", ".join(f"node {i} after {s * 1e3:.0f} ms" for i, s in sorted(seen.items())))
    for a in admins.values():
        (got,) = listed(a, topic)
        assert (got.principal, got.host, got.operation, got.permission_type) == (
            f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW)
