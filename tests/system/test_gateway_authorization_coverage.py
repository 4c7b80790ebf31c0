"""No API is left open through a gateway either: the authorization coverage check
(tests/integration/authz_requests.py, the tables of authz_expectations.py) run against a
gateway in front of a secured broker.

Two `eddy serve` processes joined by the QUIC mesh on loopback: a broker (a cluster of one,
SASL_PLAINTEXT, sasl.bootstrap.user admin, super.users=User:admin, StandardAuthorizer) and a
gateway (process.roles=gateway, a SASL_PLAINTEXT listener, no users or ACLs of its own). The
admin sets up the topic, group, transaction and users on the broker; then a user without
rights sends, through the gateway, one request of every API key the gateway advertises and
gets the broker's answers: refusals where the gateway forwards (the broker judges the
client's principal) and where it answers itself (Metadata, FindCoordinator, its BROKER
config resource, DescribeLogDirs: decided with the broker's ACLs over the mesh, tag 0x0A),
nothing shown of what the user may not see. An ACL granted on the broker then takes effect
on the gateway's own answers within a second or so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from integration.authz_requests import (
    GROUP,
    SOMEBODY,
    TOPIC,
    ZERO_ID,
    Ctx,
    advertised,
    coverage_failures,
    login,
    setup_as_admin,
)
from integration.raw_client import RawClient
from integration.security_nodes import ADMIN, SecureNode
from mesh_cluster import free_udp_port, wait_for

from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import build, request_module

pytestmark = pytest.mark.timeout(240)
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
QUIET = {
    "connection.failed.authentication.delay.ms": "0",
    "sasl.failed.logins.per.ip.per.minute": "100000",
    "registry.listener": "", "admin.listener": "",
}
LITERAL, ALLOW, DESCRIBE = 3, 3, 8  # ACL wire values


def _port(node: SecureNode) -> int:
    return int(node.addr["SASL_PLAINTEXT"].rsplit(":", 1)[1])


@dataclass
class Setup:
    broker: SecureNode
    gateway: SecureNode
    ctx: Ctx  # the gateway's versions, the ids the broker gave

    @property
    def gateway_port(self) -> int:
        return _port(self.gateway)

    @property
    def broker_port(self) -> int:
        return _port(self.broker)


def _logs_in(port: int, user: tuple[str, str]) -> bool:
    try:
        login(port, user).close()
    except (AssertionError, OSError):
        return False
    return True


def _metadata(client: RawClient, ctx: Ctx, names: tuple[str, ...] | None) -> Any:
    m = request_module(ApiKey.METADATA, ctx.versions[ApiKey.METADATA])
    topics = None if names is None else tuple(
        build(m.MetadataRequestTopic, name=n, topic_id=ZERO_ID) for n in names)
    return client.call(build(m.MetadataRequest, topics=topics, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=True))


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root: Path = tmp_path_factory.mktemp("gwauthz")
    broker_mesh = free_udp_port()
    broker = SecureNode(root / "broker", {
        "node.id": "1",
        "process.roles": "broker,controller",
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
    try:
        broker.start(timeout=30)
        gateway.start(timeout=30)
        admin = login(_port(broker), ADMIN)
        on_broker = Ctx(advertised(admin))
        setup_as_admin(admin, on_broker)  # the topic, group, transaction, users
        admin.close()
        gw_port = _port(gateway)
        wait_for(lambda: _logs_in(gw_port, ADMIN), 40, "admin logs in through the gateway")
        wait_for(lambda: _logs_in(gw_port, SOMEBODY), 20, "somebody logs in (gateway)")
        admin = login(gw_port, ADMIN)
        ctx = Ctx(advertised(admin), topic_id=on_broker.topic_id,
                  producer_id=on_broker.producer_id, producer_epoch=on_broker.producer_epoch)
        # the gateway routes the topic once the broker announced it on the mesh
        wait_for(lambda: [t.name for t in _metadata(admin, ctx, None).topics] == [TOPIC], 30,
                 "the topic is routed by the gateway")
        admin.close()
        yield Setup(broker, gateway, ctx)
    finally:
        gateway.kill()
        broker.kill()


def test_every_api_the_gateway_advertises_is_authorized(setup: Setup) -> None:
    assert ApiKey.METADATA in setup.ctx.versions
    assert ApiKey.CREATE_ACLS not in setup.ctx.versions  # not served through a gateway
    failures = coverage_failures(setup.gateway_port, setup.ctx)
    assert setup.gateway.alive() and setup.broker.alive()
    assert failures == [], "\n".join(failures)


def test_acls_granted_on_the_broker_apply_to_the_gateways_own_answers(setup: Setup) -> None:
    ctx = setup.ctx
    somebody = login(setup.gateway_port, SOMEBODY)
    admin = login(setup.gateway_port, ADMIN)
    (denied,) = _metadata(somebody, ctx, (TOPIC,)).topics
    assert (denied.name, int(denied.error_code), denied.partitions) == (TOPIC, 29, ())
    assert _metadata(somebody, ctx, None).topics == ()
    fc = request_module(ApiKey.FIND_COORDINATOR, ctx.versions[ApiKey.FIND_COORDINATOR])
    find = build(fc.FindCoordinatorRequest, key=GROUP, key_type=0, coordinator_keys=(GROUP,))
    (refused,) = somebody.call(find).coordinators
    assert int(refused.error_code) == 30

    # the admin may do everything: every operation of the topic and the cluster
    (mine,) = _metadata(admin, ctx, (TOPIC,)).topics
    assert mine.topic_authorized_operations == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10,
                                                                      11))
    dc = request_module(ApiKey.DESCRIBE_CLUSTER, ctx.versions[ApiKey.DESCRIBE_CLUSTER])
    ops = admin.call(build(dc.DescribeClusterRequest, include_cluster_authorized_operations=True,
                           endpoint_type=1)).cluster_authorized_operations
    assert ops == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

    # ACLs created on the broker: DESCRIBE on the topic and the group for somebody
    broker_admin = login(setup.broker_port, ADMIN)
    ca = request_module(ApiKey.CREATE_ACLS, 3)
    grant = {"resource_pattern_type": LITERAL, "principal": f"User:{SOMEBODY[0]}",
             "host": "*", "operation": DESCRIBE, "permission_type": ALLOW}
    made = broker_admin.call(ca.CreateAclsRequest(creations=(
        build(ca.AclCreation, resource_type=2, resource_name=TOPIC, **grant),
        build(ca.AclCreation, resource_type=3, resource_name=GROUP, **grant))))
    assert [int(r.error_code) for r in made.results] == [0, 0], made
    broker_admin.close()

    def sees_the_topic() -> bool:
        return [t.name for t in _metadata(somebody, ctx, None).topics] == [TOPIC]

    wait_for(sees_the_topic, 15, "somebody sees the topic through the gateway")
    (shown,) = _metadata(somebody, ctx, (TOPIC,)).topics
    assert int(shown.error_code) == 0 and len(shown.partitions) == 1
    assert shown.topic_authorized_operations == 1 << DESCRIBE
    wait_for(lambda: int(somebody.call(find).coordinators[0].error_code) == 0, 15,
             "somebody finds the group's coordinator through the gateway")
    somebody.close()
    admin.close()


def test_partition_leadership_apis_reach_the_broker_through_the_gateway(setup: Setup) -> None:
    """The admin's OffsetForLeaderEpoch, ElectLeaders and reassignments through the gateway:
    forwarded as the admin over the mesh, answered by the broker (its controller for the
    elections and reassignments)."""
    ctx = setup.ctx
    admin = login(setup.gateway_port, ADMIN)
    try:
        epochs = admin.call(ctx.request(ApiKey.OFFSET_FOR_LEADER_EPOCH))
        assert [(t.topic, [int(p.error_code) for p in t.partitions])
                for t in epochs.topics] == [(TOPIC, [0])], epochs
        elected = admin.call(ctx.request(ApiKey.ELECT_LEADERS))
        assert int(getattr(elected, "error_code", 0)) == 0
        # a cluster of one: its only replica leads already
        assert [(r.topic, [int(p.error_code) for p in r.partition_result])
                for r in elected.replica_election_results] == [(TOPIC, [84])], elected
        moved = admin.call(ctx.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS))
        assert int(moved.error_code) == 0, moved
        assert [(t.name, [int(p.error_code) for p in t.partitions])
                for t in moved.responses] == [(TOPIC, [0])], moved
        listed = admin.call(ctx.request(ApiKey.LIST_PARTITION_REASSIGNMENTS))
        assert (int(listed.error_code), listed.topics) == (0, ()), listed
    finally:
        admin.close()
