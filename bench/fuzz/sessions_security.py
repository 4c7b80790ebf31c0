"""The security admin calls of the recording sessions (bench/fuzz/sessions.py): SCRAM users
(DescribeUserScramCredentials, AlterUserScramCredentials) and ACLs (CreateAcls,
DescribeAcls, DeleteAcls), made by librdkafka's and kafka-python's admin clients so that a
re-recording keeps their requests in the corpus. Answers do not matter (ACLs are refused
with SECURITY_DISABLED until an authorizer exists)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: sessions.py's ``attempt``: run one call, report a failure and go on
Attempt = Callable[[str, Callable[[], Any]], Any]
#: a made-up salted password per mechanism (32 and 64 bytes: SHA-256 and SHA-512)
SALTED = {256: b"\x11" * 32, 512: b"\x22" * 64}


def librdkafka_security(attempt: Attempt, admin: Any, wait: Callable[[Any], Any],
                        user: str) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    def soft(futs: Any) -> Any:  # refusals are answers too
        try:
            return wait(futs)
        except KafkaException as exc:
            return exc

    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"secret", b"salt")
    attempt("alter_user_scram_credentials",
            lambda: soft(admin.alter_user_scram_credentials([upsert])))
    attempt("describe_user_scram_credentials",
            lambda: soft(admin.describe_user_scram_credentials([user])))
    attempt("delete user scram credential", lambda: soft(admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)])))
    binding = AclBinding(ResourceType.TOPIC, "fuzz-acl", ResourcePatternType.LITERAL,
                         f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW)
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    attempt("create_acls", lambda: soft(admin.create_acls([binding])))
    attempt("describe_acls", lambda: admin.describe_acls(everything).result(15))
    attempt("delete_acls", lambda: soft(admin.delete_acls([everything])))


def kafka_python_security(attempt: Attempt, admin: Any, user: str) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    attempt("kp alter_user_scram_credentials", lambda: admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramMechanism.SCRAM_SHA_512, b"secret",
                                     iterations=4096)]))
    attempt("kp describe_user_scram_credentials",
            lambda: admin.describe_user_scram_credentials([user]))
    attempt("kp delete user scram credential", lambda: admin.alter_user_scram_credentials([
        UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)]))
    acl = ACL(f"User:{user}", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
              ResourcePattern(ResourceType.TOPIC, "fuzz-acl", ACLResourcePatternType.LITERAL))
    everything = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                           ResourcePatternFilter(ResourceType.ANY, None,
                                                 ACLResourcePatternType.ANY))
    attempt("kp create_acls", lambda: admin.create_acls([acl]))
    attempt("kp describe_acls", lambda: admin.describe_acls(everything))
    attempt("kp delete_acls", lambda: admin.delete_acls([everything]))
