"""No API is left open: a secured `eddy serve` (SASL/SCRAM, StandardAuthorizer,
super.users=User:admin) is sent, by a user with no ACLs over a raw SCRAM-authenticated
socket, one small valid request of every API key its ApiVersions answer advertises, at the
highest version advertised. Each answer must carry the authorization error Apache Kafka
gives for that API (authz_expectations.REFUSED) or, for the few APIs anyone may call
(authz_expectations.OPEN), show nothing the user may not see, where the same request from
the admin shows the topic, group or transaction. A key in neither table fails the test.
Every key is tried and the failures are reported together."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from authz_expectations import OPEN, REFUSED
from authz_requests import (
    ACL_GRANT,
    BUILDERS,
    SCRAM_SHA_256,
    SOMEBODY,
    TOPIC,
    ZERO_ID,
    Ctx,
    advertised,
    coverage_failures,
    create_request,
    login,
    setup_as_admin,
    td,
)
from raw_client import RawClient
from security_nodes import ADMIN, SecureNode

from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import build, request_module

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    n = SecureNode(tmp_path_factory.mktemp("authz") / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "super.users": f"User:{ADMIN[0]}",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "connection.failed.authentication.delay.ms": "0",
        "registry.listener": "", "admin.listener": "",
    }).start()
    yield n
    n.kill()


def _port(node: SecureNode) -> int:
    return int(node.addr["SASL_PLAINTEXT"].rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def ctx(node: SecureNode) -> Ctx:
    """The admin's setup, once: the topic, group, transaction and users."""
    admin = login(_port(node), ADMIN)
    prepared = Ctx(advertised(admin))
    setup_as_admin(admin, prepared)
    admin.close()
    return prepared



def test_every_advertised_api_is_authorized(node: SecureNode, ctx: Ctx) -> None:
    failures = coverage_failures(_port(node), ctx)
    assert node.alive()
    assert failures == [], "\n".join(failures)


def test_the_tables_cover_what_is_advertised(node: SecureNode) -> None:
    admin = login(_port(node), ADMIN)
    keys = {ApiKey(k) for k in advertised(admin)}
    admin.close()
    assert keys - set(REFUSED) - set(OPEN) == set()
    assert keys - set(BUILDERS) - {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} == set()


def _module(key: ApiKey, ctx: Ctx) -> Any:
    return request_module(key, ctx.versions[key])


def test_admin_plane_details(node: SecureNode, ctx: Ctx) -> None:
    """The finer points of the admin APIs' checks, before and after ACLs grant some
    rights: names hidden, unknown ids, broker resources, old versions, users."""
    port = _port(node)
    admin = login(port, ADMIN)
    somebody = login(port, SOMEBODY)
    m = _module(ApiKey.METADATA, ctx)
    shown = admin.call(build(m.MetadataRequest, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False,
                             topics=(build(m.MetadataRequestTopic, name=TOPIC,
                                           topic_id=ZERO_ID),)))
    topic_id = shown.topics[0].topic_id
    dm = _module(ApiKey.DELETE_TOPICS, ctx)

    def delete_by_id(who: RawClient, tid: uuid.UUID) -> Any:
        (answer,) = who.call(build(dm.DeleteTopicsRequest, timeout=td(5000), topics=(
            build(dm.DeleteTopicState, name=None, topic_id=tid),))).responses
        return answer

    # no rights on topics at all: an id, known or not, is refused without a name
    for tid in (topic_id, uuid.uuid4()):
        answer = delete_by_id(somebody, tid)
        assert (answer.name, int(answer.error_code)) == (None, 29), answer
    # the broker's configs and log dirs, the users: the cluster's rights
    m = _module(ApiKey.DESCRIBE_CONFIGS, ctx)
    for name in ("", "1"):
        (r,) = somebody.call(build(m.DescribeConfigsRequest, include_synonyms=False,
                                 include_documentation=False, resources=(
            build(m.DescribeConfigsResource, resource_type=4, resource_name=name,
                  configuration_keys=None),))).results
        assert (int(r.error_code), r.configs) == (31, ()), r
    old = request_module(ApiKey.DESCRIBE_LOG_DIRS, 1)
    (result,) = somebody.call(old.DescribeLogDirsRequest(topics=None)).results
    assert (int(result.error_code), result.topics) == (31, ())
    m = _module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ctx)
    described = somebody.call(m.DescribeUserScramCredentialsRequest(users=None))
    assert [(r.user, int(r.error_code), r.credential_infos) for r in described.results] \
        == [("", 31, ())]
    m = _module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ctx)
    altered = somebody.call(m.AlterUserScramCredentialsRequest(upsertions=(), deletions=(
        build(m.ScramCredentialDeletion, name="zed", mechanism=SCRAM_SHA_256),
        build(m.ScramCredentialDeletion, name=ADMIN[0], mechanism=SCRAM_SHA_256))))
    assert [(r.user, int(r.error_code)) for r in altered.results] == [(ADMIN[0], 31),
                                                                     ("zed", 31)]
    # grants: CREATE on topics named mine-*, DESCRIBE on the test's topic
    m = _module(ApiKey.CREATE_ACLS, ctx)
    mine = {**ACL_GRANT, "principal": f"User:{SOMEBODY[0]}"}
    granted = admin.call(m.CreateAclsRequest(creations=(
        build(m.AclCreation, **{**mine, "resource_name": "mine-", "resource_pattern_type": 4,
                                "operation": 5}),
        build(m.AclCreation, **{**mine, "operation": 8}))))
    assert [int(r.error_code) for r in granted.results] == [0, 0], granted
    m = _module(ApiKey.CREATE_TOPICS, ctx)
    (made,) = somebody.call(create_request(m, "mine-1")).topics
    assert int(made.error_code) == 0, made
    # created, but its configs are not the creator's to see without DESCRIBE_CONFIGS
    assert (made.topic_config_error_code, made.configs, made.num_partitions) == (29, (), -1)
    (refused,) = somebody.call(create_request(m, "yours-1")).topics
    assert int(refused.error_code) == 29
    # describable but not deletable: the name is shown, the deletion refused
    answer = delete_by_id(somebody, topic_id)
    assert (answer.name, int(answer.error_code)) == (TOPIC, 29), answer
    # a principal with rights on some topic learns an id is unknown
    assert int(delete_by_id(somebody, uuid.uuid4()).error_code) == 100
    m = _module(ApiKey.DESCRIBE_CLUSTER, ctx)
    ops = admin.call(m.DescribeClusterRequest(include_cluster_authorized_operations=True,
                                              endpoint_type=1)).cluster_authorized_operations
    assert ops == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    (gone,) = admin.call(build(dm.DeleteTopicsRequest, timeout=td(5000), topics=(
        build(dm.DeleteTopicState, name="mine-1", topic_id=ZERO_ID),))).responses
    assert int(gone.error_code) == 0, gone
    somebody.close()
    admin.close()

