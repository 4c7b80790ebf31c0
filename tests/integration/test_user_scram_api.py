"""SCRAM users and ACLs through confluent-kafka's AdminClient.

On a cluster of one (``process.roles=broker,controller``, started in this process so the
test can read its metadata state) users are created, described, updated and deleted the
way ``kafka-configs --entity-type users`` does it; the state keeps the StoredKey and
ServerKey derived from the salted password and never the salted password itself, neither
in memory nor in any file of the data dir. Kafka's refusals come back with its codes. The
ACL APIs answer SECURITY_DISABLED, as Kafka with no authorizer does. A node on its own
(``process.roles=broker``, no voters) refuses user changes: users live in a cluster's
metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
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
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from inprocess_node import InProcessNode
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import SecurityDisabledError

from eddy.broker.handlers.users import describe
from eddy.metadata.records import ScramCredential
from eddy.security.scram import derive_keys, mechanism, salted_password

TIMEOUT = 20
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


class ScramNode(InProcessNode):
    """A node in this process whose replica of the metadata the test reads."""

    def describe(self, users: list[str] | None) -> Any:
        """The DescribeUserScramCredentials answer from this node's replica."""
        async def read() -> Any:
            assert self.node is not None and self.node.cluster is not None
            return describe(self.node.cluster.state, users)
        return self.run(read())

    def credentials(self) -> list[ScramCredential]:
        """The SCRAM credentials in this node's replica of the metadata state."""
        async def read() -> list[ScramCredential]:
            assert self.node is not None and self.node.cluster is not None
            return self.node.cluster.state.scram_credentials()
        result: list[ScramCredential] = self.run(read())
        return result


@pytest.fixture
def cluster_of_one(tmp_path: Path) -> Iterator[ScramNode]:
    node = ScramNode(tmp_path / "alone", "broker,controller").start()
    try:
        yield node
    finally:
        node.stop()


def upsert(user: str, mech: ScramMechanism, iterations: int, password: bytes,
           salt: bytes) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iterations),
                                        password, salt)


def error_of(future: Future[Any]) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(TIMEOUT)
    err: KafkaError = caught.value.args[0]
    return err


def infos(admin: AdminClient, user: str) -> list[tuple[ScramMechanism, int]]:
    desc = admin.describe_user_scram_credentials([user])[user].result(TIMEOUT)
    return sorted(((i.mechanism, i.iterations) for i in desc.scram_credential_infos),
                  key=lambda x: int(x[0].value))


def expected(user: str, mech_type: int, password: bytes, salt: bytes,
             iterations: int) -> tuple[ScramCredential, bytes]:
    """The credential Kafka's broker keeps for this password, and the salted password."""
    mech = mechanism(mech_type)
    salted = salted_password(mech, password, salt, iterations)
    keys = derive_keys(mech, salted)
    return ScramCredential(user, mech_type, salt, keys.stored_key, keys.server_key,
                           iterations), salted


def file_bytes(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in root.rglob("*") if p.is_file()]


def test_users_are_created_described_updated_and_deleted(
        cluster_of_one: ScramNode) -> None:
    node = cluster_of_one
    admin = AdminClient({"bootstrap.servers": node.bootstrap})

    # two users, one of each mechanism
    done = admin.alter_user_scram_credentials([
        upsert("alice", SHA256, 8192, b"alice-secret", b"salt-of-alice"),
        upsert("bob", SHA512, 4096, b"bob-secret", b"salt-of-bob"),
    ])
    for f in done.values():
        f.result(TIMEOUT)
    everyone = admin.describe_user_scram_credentials().result(TIMEOUT)
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos]
            for u, d in everyone.items()} == {"alice": [(SHA256, 8192)], "bob": [(SHA512, 4096)]}

    # the state holds the derived keys, never the salted password
    alice, alice_salted = expected("alice", 1, b"alice-secret", b"salt-of-alice", 8192)
    bob, bob_salted = expected("bob", 2, b"bob-secret", b"salt-of-bob", 4096)
    assert node.credentials() == [alice, bob]
    for cred in node.credentials():
        for field in (cred.salt, cred.stored_key, cred.server_key):
            assert alice_salted not in field and bob_salted not in field

    # update: alice gets a new password and iterations, and a SHA-512 credential too
    done = admin.alter_user_scram_credentials([
        upsert("alice", SHA256, 16384, b"alice-new", b"new-salt")])
    done["alice"].result(TIMEOUT)
    done = admin.alter_user_scram_credentials([
        upsert("alice", SHA512, 10000, b"alice-new", b"new-salt")])
    done["alice"].result(TIMEOUT)
    assert infos(admin, "alice") == [(SHA256, 16384), (SHA512, 10000)]
    new_alice, new_salted = expected("alice", 1, b"alice-new", b"new-salt", 16384)
    assert new_alice in node.credentials()

    # delete: bob's only credential goes, and so does bob
    done = admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", SHA512)])
    done["bob"].result(TIMEOUT)
    err = error_of(admin.describe_user_scram_credentials(["bob"])["bob"])
    assert err.code() == KafkaError.RESOURCE_NOT_FOUND
    assert "bob" in err.str()
    assert set(admin.describe_user_scram_credentials().result(TIMEOUT)) == {"alice"}
    assert [c.user for c in node.credentials()] == ["alice", "alice"]

    # deleting it again: nothing to delete
    done = admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", SHA512)])
    err = error_of(done["bob"])
    assert err.code() == KafkaError.RESOURCE_NOT_FOUND

    # no salted password was ever written anywhere (the Raft log, snapshots...)
    for data in file_bytes(Path(node.config.data_dir)):
        for salted in (alice_salted, bob_salted, new_salted):
            assert salted not in data


def test_refusals_have_kafkas_codes(cluster_of_one: ScramNode) -> None:
    admin = AdminClient({"bootstrap.servers": cluster_of_one.bootstrap})

    for iterations, word in ((100, "few"), (20000, "many")):
        done = admin.alter_user_scram_credentials([
            upsert("carol", SHA256, iterations, b"pw", b"salt")])
        err = error_of(done["carol"])
        assert err.code() == KafkaError.UNACCEPTABLE_CREDENTIAL
        assert word in err.str()
    assert cluster_of_one.credentials() == []

    # one request may change a user once (nothing is done for it); another user in it is
    admin.alter_user_scram_credentials([
        upsert("dave", SHA256, 4096, b"pw", b"salt")])["dave"].result(TIMEOUT)
    done = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("dave", SHA256),
        upsert("dave", SHA512, 4096, b"pw", b"salt"),
        upsert("erin", SHA256, 4096, b"pw", b"salt"),
    ])
    err = error_of(done["dave"])
    assert err.code() == KafkaError.DUPLICATE_RESOURCE and "twice" in err.str()
    done["erin"].result(TIMEOUT)
    assert [(c.user, c.mechanism) for c in cluster_of_one.credentials()] == [
        ("dave", 1), ("erin", 1)]

    err = error_of(admin.describe_user_scram_credentials(["nobody"])["nobody"])
    assert err.code() == KafkaError.RESOURCE_NOT_FOUND

    # a user named twice in a describe (confluent-kafka refuses to send it: Kafka's answer)
    rows = cluster_of_one.describe(["erin", "erin", "dave"])
    assert [(user, int(code), infos) for user, (code, _), infos in rows] == [
        ("erin", KafkaError.DUPLICATE_RESOURCE, []), ("dave", 0, [(1, 4096)])]


def test_acl_apis_answer_security_disabled(cluster_of_one: ScramNode) -> None:
    admin = AdminClient({"bootstrap.servers": cluster_of_one.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                         "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    err = error_of(admin.create_acls([binding])[binding])
    assert err.code() == KafkaError.SECURITY_DISABLED
    assert "No Authorizer" in err.str()

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    # librdkafka drops DescribeAcls' top-level error (against Kafka too): an empty listing
    assert admin.describe_acls(everything).result(TIMEOUT) == []
    # kafka-python reads it
    client = KafkaAdminClient(bootstrap_servers=cluster_of_one.bootstrap)
    try:
        with pytest.raises(SecurityDisabledError, match="No Authorizer"):
            client.describe_acls(ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                       ACLResourcePatternType.ANY)))
    finally:
        client.close()

    err = error_of(admin.delete_acls([everything])[everything])
    assert err.code() == KafkaError.SECURITY_DISABLED


def test_a_node_on_its_own_keeps_no_users(eddy_factory: Any) -> None:
    eddy = eddy_factory("--set", "process.roles=broker")
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    done = admin.alter_user_scram_credentials([upsert("alice", SHA256, 8192, b"pw", b"s")])
    err = error_of(done["alice"])
    assert err.code() == KafkaError.SECURITY_DISABLED
    assert "cluster of one" in err.str() and "process.roles unset" in err.str()

    err = error_of(admin.describe_user_scram_credentials())
    assert err.code() == KafkaError.SECURITY_DISABLED
    err = error_of(admin.describe_user_scram_credentials(["alice"])["alice"])
    assert err.code() == KafkaError.SECURITY_DISABLED
