"""Kafka's ACL admin APIs, `eddy acl` and `eddy role` against a real `eddy serve` with
Kafka's StandardAuthorizer settings: a SASL_PLAINTEXT listener, the bootstrap user ``admin``
as the one super user. confluent-kafka's AdminClient creates, describes (literal, prefixed,
ANY and MATCH filters) and deletes ACLs as admin; a user without ALTER on the cluster gets
CLUSTER_AUTHORIZATION_FAILED; bad creations get Kafka's codes. The CLI runs as
`python -m eddy` subprocesses logged in as admin."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
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
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import ClusterAuthorizationFailedError
from security_nodes import ADMIN, SecureNode

pytestmark = pytest.mark.timeout(120)
TIMEOUT = 15
LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
ANY_PATTERN, MATCH = ResourcePatternType.ANY, ResourcePatternType.MATCH
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
BOB = ("bob", "bob-secret")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    n = SecureNode(tmp_path_factory.mktemp("acls") / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN[0]}",
        "connection.failed.authentication.delay.ms": "0",
        "registry.listener": "", "admin.listener": "",
    }).start()
    yield n
    n.kill()


def client(node: SecureNode, user: tuple[str, str] = ADMIN) -> AdminClient:
    return AdminClient({"bootstrap.servers": node.addr["SASL_PLAINTEXT"],
                        "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user[0],
                        "sasl.password": user[1], "log_level": 0})


@pytest.fixture(scope="module")
def admin(node: SecureNode) -> AdminClient:
    return client(node)


def error_of(future: Future[Any]) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=TIMEOUT)
    err: KafkaError = info.value.args[0]
    return err


def binding(name: str, pattern: ResourcePatternType = LIT,
            rtype: ResourceType = ResourceType.TOPIC, principal: str = "User:alice",
            op: AclOperation = AclOperation.READ, permission: AclPermissionType = ALLOW,
            host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def acl_filter(name: str | None, pattern: ResourcePatternType,
               rtype: ResourceType = ResourceType.TOPIC, principal: str | None = None
               ) -> AclBindingFilter:
    return AclBindingFilter(rtype, name, pattern, principal, None, AclOperation.ANY,
                            AclPermissionType.ANY)


def describe(admin: AdminClient, f: AclBindingFilter) -> set[AclBinding]:
    return set(admin.describe_acls(f).result(timeout=TIMEOUT))


def test_create_describe_delete(admin: AdminClient) -> None:
    orders = binding("orders")
    prefix = binding("ord", PRE, op=AclOperation.WRITE)
    wildcard = binding("*", principal="User:bob", op=AclOperation.DESCRIBE)
    group = binding("orders", rtype=ResourceType.GROUP)
    idem = binding("kafka-cluster", rtype=ResourceType.BROKER, op=AclOperation.IDEMPOTENT_WRITE)
    deny = binding("orders", principal="User:mallory", permission=DENY, host="10.9.9.9")
    made = [orders, prefix, wildcard, group, idem, deny]
    for future in admin.create_acls(made).values():
        assert future.result(timeout=TIMEOUT) is None
    # creating again is no error, and makes nothing new (Kafka's idempotent CreateAcls)
    assert admin.create_acls([orders])[orders].result(timeout=TIMEOUT) is None

    everything = AclBindingFilter(ResourceType.ANY, None, ANY_PATTERN, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    assert set(made) <= describe(admin, everything)
    assert describe(admin, acl_filter("orders", LIT)) == {orders, deny}
    assert describe(admin, acl_filter("ord", PRE)) == {prefix}
    assert describe(admin, acl_filter("orders", ANY_PATTERN)) == {orders, deny}
    assert describe(admin, acl_filter("orders", MATCH)) == {orders, deny, prefix, wildcard}
    assert describe(admin, acl_filter("payments", MATCH)) == {wildcard}
    assert describe(admin, acl_filter(None, ANY_PATTERN, ResourceType.GROUP)) == {group}
    assert describe(admin, acl_filter(None, PRE)) == {prefix}
    assert describe(admin, acl_filter("orders", MATCH, principal="User:mallory")) == {deny}

    # delete: a MATCH filter for alice's ACLs on topic orders (literal and the prefix), and
    # a filter matching nothing
    alices = acl_filter("orders", MATCH, principal="User:alice")
    nothing = acl_filter("nope", LIT)
    results = admin.delete_acls([alices, nothing])
    assert set(results[alices].result(timeout=TIMEOUT)) == {orders, prefix}
    assert results[nothing].result(timeout=TIMEOUT) == []
    assert describe(admin, acl_filter("orders", MATCH)) == {deny, wildcard}
    rest = [acl_filter("*", LIT), acl_filter("orders", LIT, ResourceType.GROUP),
            acl_filter("kafka-cluster", LIT, ResourceType.BROKER), acl_filter("orders", LIT)]
    deleted: set[AclBinding] = set()
    for future in admin.delete_acls(rest).values():
        deleted |= set(future.result(timeout=TIMEOUT))
    assert deleted == {wildcard, group, idem, deny}
    assert not set(made) & describe(admin, everything)


def test_bad_creations_get_kafkas_codes(admin: AdminClient) -> None:
    bad_cluster = binding("my-cluster", rtype=ResourceType.BROKER, op=AclOperation.ALTER)
    no_colon = binding("t1", principal="alice")
    empty = binding("", principal="User:alice")
    good = binding("t-good")
    results = admin.create_acls([bad_cluster, no_colon, empty, good])
    err = error_of(results[bad_cluster])
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in err.str()
    err = error_of(results[no_colon])
    assert err.code() == KafkaError.INVALID_REQUEST and "Could not parse principal" in err.str()
    assert error_of(results[empty]).code() == KafkaError.INVALID_REQUEST
    assert results[good].result(timeout=TIMEOUT) is None  # one bad creation spoils no other
    assert describe(admin, acl_filter("t-good", LIT)) == {good}
    admin.delete_acls([acl_filter("t-good", LIT)])[acl_filter("t-good", LIT)].result(
        timeout=TIMEOUT)


def test_user_without_cluster_alter_is_refused(node: SecureNode, admin: AdminClient) -> None:
    upsert = UserScramCredentialUpsertion(
        BOB[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), BOB[1].encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=TIMEOUT)
    bob = client(node, BOB)
    b = binding("orders", principal="User:bob")
    err = error_of(bob.create_acls([b])[b])
    assert err.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    f = acl_filter(None, ANY_PATTERN, ResourceType.ANY)
    # librdkafka drops DescribeAcls' top-level error (against Kafka too): an empty listing
    assert bob.describe_acls(f).result(timeout=TIMEOUT) == []
    # kafka-python reads it
    kp = KafkaAdminClient(bootstrap_servers=node.addr["SASL_PLAINTEXT"],
                          security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                          sasl_plain_username=BOB[0], sasl_plain_password=BOB[1])
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            kp.describe_acls(ACLFilter(
                principal=None, host=None, operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                       ACLResourcePatternType.ANY)))
    finally:
        kp.close()
    assert error_of(bob.delete_acls([f])[f]).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert describe(admin, acl_filter("orders", LIT, principal="User:bob")) == set()
    # DESCRIBE on the cluster lets bob list ACLs, and still not change them
    can_describe = binding("kafka-cluster", rtype=ResourceType.BROKER, principal="User:bob",
                           op=AclOperation.DESCRIBE)
    admin.create_acls([can_describe])[can_describe].result(timeout=TIMEOUT)
    assert can_describe in set(bob.describe_acls(f).result(timeout=TIMEOUT))
    assert error_of(bob.create_acls([b])[b]).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    only = acl_filter("kafka-cluster", LIT, ResourceType.BROKER, principal="User:bob")
    admin.delete_acls([only])[only].result(timeout=TIMEOUT)


# ---- the CLI ------------------------------------------------------------------------------

AUTH = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
        "-X", f"sasl.username={ADMIN[0]}", "-X", f"sasl.password={ADMIN[1]}"]


def eddy(node: SecureNode, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eddy", *args, "-b", node.addr["SASL_PLAINTEXT"], *AUTH],
        capture_output=True, text=True, timeout=60, env={**os.environ})


def rows(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.splitlines()[1:]]


def test_cli_acl_add_list_remove(node: SecureNode, admin: AdminClient) -> None:
    added = eddy(node, "acl", "add", "--allow-principal", "User:carol", "--operation", "read",
                 "--operation", "describe", "--topic", "cli.", "--resource-pattern-type",
                 "prefixed", "-o", "plain")
    assert added.returncode == 0, added.stderr
    assert len(rows(added.stdout)) == 2
    listed = eddy(node, "acl", "list", "--topic", "cli.events", "--resource-pattern-type",
                  "match", "-o", "plain")
    assert listed.returncode == 0, listed.stderr
    assert sorted(rows(listed.stdout)) == [
        ["User:carol", "allow", "describe", "*", "topic", "cli.", "prefixed"],
        ["User:carol", "allow", "read", "*", "topic", "cli.", "prefixed"]]
    removed = eddy(node, "acl", "remove", "--topic", "cli.", "--resource-pattern-type",
                   "prefixed", "--allow-principal", "carol", "--operation", "read",
                   "-o", "plain")
    assert removed.returncode == 0, removed.stderr
    assert rows(removed.stdout) == [
        ["User:carol", "allow", "read", "*", "topic", "cli.", "prefixed"]]
    left = describe(admin, acl_filter(None, ANY_PATTERN, principal="User:carol"))
    assert left == {binding("cli.", PRE, principal="User:carol", op=AclOperation.DESCRIBE)}
    # kafka-acls' check of operations per resource type: a usage error, nothing sent
    bad = eddy(node, "acl", "add", "--allow-principal", "carol", "--operation", "write",
               "--group", "g")
    assert bad.returncode == 2 and "group has no operation write" in bad.stderr
    gone = eddy(node, "acl", "remove", "--topic", "cli.", "--resource-pattern-type",
                "prefixed")
    assert gone.returncode == 0, gone.stderr
    assert describe(admin, acl_filter(None, ANY_PATTERN, principal="User:carol")) == set()


def test_cli_roles(node: SecureNode, admin: AdminClient) -> None:
    granted = eddy(node, "role", "grant", "producer", "dave", "--prefix", "pay.")
    assert granted.returncode == 0, granted.stderr
    granted = eddy(node, "role", "grant", "consumer", "dave", "--prefix", "pay.",
                   "--group-prefix", "billing-")
    assert granted.returncode == 0, granted.stderr
    listed = eddy(node, "role", "list", "--principal", "dave", "-o", "plain")
    assert listed.returncode == 0, listed.stderr
    assert sorted(rows(listed.stdout)) == [
        ["consumer", "User:dave", "*", "pay.*", "billing-*", "-"],
        ["producer", "User:dave", "*", "pay.*", "-", "pay.*"]]
    revoked = eddy(node, "role", "revoke", "producer", "dave", "--prefix", "pay.")
    assert revoked.returncode == 0, revoked.stderr
    listed = eddy(node, "role", "list", "--principal", "dave", "-o", "plain")
    assert rows(listed.stdout) == [["consumer", "User:dave", "*", "pay.*", "billing-*", "-"]]
    # the consumer keeps DESCRIBE on the topics, which the producer shared with it
    describe_kept = binding("pay.", PRE, principal="User:dave", op=AclOperation.DESCRIBE)
    assert describe_kept in describe(admin, acl_filter("pay.", PRE, principal="User:dave"))
    again = eddy(node, "role", "revoke", "producer", "dave", "--prefix", "pay.")
    assert again.returncode == 1 and "is not producer" in again.stderr
    unknown = eddy(node, "role", "grant", "king", "dave", "--topic", "b")
    assert unknown.returncode == 2 and "not one of producer" in unknown.stderr
    done = eddy(node, "role", "revoke", "consumer", "dave", "--prefix", "pay.",
                "--group-prefix", "billing-")
    assert done.returncode == 0, done.stderr
    assert describe(admin, acl_filter(None, ANY_PATTERN, ResourceType.ANY,
                                      principal="User:dave")) == set()
