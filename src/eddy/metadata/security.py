"""SCRAM credentials, ACLs and registered pipelines."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from eddy.metadata.records import AclBinding, PipelineRecord, ScramCredential
from eddy.metadata.result import Rejected
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.metadata.commands import (
        CreateAcl,
        DeleteAcl,
        DeletePipeline,
        DeleteScramUser,
        RegisterPipeline,
        UpsertScramUser,
    )
    from eddy.metadata.state import MetadataState

#: Kafka's ScramMechanism -> (name, key length of its hash)
SCRAM_MECHANISMS: dict[int, tuple[str, int]] = {1: ("SCRAM-SHA-256", 32), 2: ("SCRAM-SHA-512", 64)}
MIN_ITERATIONS = 4096  # Kafka's bounds for AlterUserScramCredentials
MAX_ITERATIONS = 16384
MAX_SALT = 1024
MAX_NAME = 1024

# Kafka's ACL enums (resource type, pattern type, operation, permission type)
RESOURCE_TYPES = frozenset(range(2, 8))  # TOPIC GROUP CLUSTER TRANSACTIONAL_ID TOKEN USER
RESOURCE_CLUSTER = 4
PATTERN_TYPES = frozenset({3, 4})  # LITERAL PREFIXED
OPERATIONS = frozenset(range(2, 15))  # ALL .. DESCRIBE_TOKENS
PERMISSIONS = frozenset({2, 3})  # DENY ALLOW
CLUSTER_NAME = "kafka-cluster"

PIPELINE_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
MAX_PIPELINE_SPEC = 1 << 20


def upsert_scram_user(state: MetadataState, cmd: UpsertScramUser) -> None:
    if not cmd.user or len(cmd.user) > MAX_NAME:
        raise Rejected(ErrorCode.unacceptable_credential,
                       f"user name must be 1 to {MAX_NAME} characters")
    mechanism = SCRAM_MECHANISMS.get(cmd.mechanism)
    if mechanism is None:
        raise Rejected(ErrorCode.unsupported_sasl_mechanism,
                       f"unknown SCRAM mechanism {cmd.mechanism}")
    name, key_len = mechanism
    if not MIN_ITERATIONS <= cmd.iterations <= MAX_ITERATIONS:
        raise Rejected(
            ErrorCode.unacceptable_credential,
            f"{name}: {cmd.iterations} iterations; must be {MIN_ITERATIONS} to {MAX_ITERATIONS}",
        )
    if not 1 <= len(cmd.salt) <= MAX_SALT:
        raise Rejected(ErrorCode.unacceptable_credential,
                       f"{name}: the salt must be 1 to {MAX_SALT} bytes")
    for what, key in (("stored_key", cmd.stored_key), ("server_key", cmd.server_key)):
        if len(key) != key_len:
            raise Rejected(ErrorCode.unacceptable_credential,
                           f"{name}: {what} is {len(key)} bytes, expected {key_len}")
    state.scram_users[(cmd.user, cmd.mechanism)] = ScramCredential(
        cmd.user, cmd.mechanism, cmd.salt, cmd.stored_key, cmd.server_key, cmd.iterations
    )


def delete_scram_user(state: MetadataState, cmd: DeleteScramUser) -> None:
    if state.scram_users.pop((cmd.user, cmd.mechanism), None) is None:
        raise Rejected(ErrorCode.resource_not_found,
                       f"no credential of mechanism {cmd.mechanism} for user {cmd.user!r}")


def check_acl(acl: AclBinding) -> None:
    if acl.resource_type not in RESOURCE_TYPES:
        raise Rejected(ErrorCode.invalid_request, f"resource type {acl.resource_type}")
    if acl.pattern_type not in PATTERN_TYPES:
        raise Rejected(ErrorCode.invalid_request, f"pattern type {acl.pattern_type}")
    if acl.operation not in OPERATIONS:
        raise Rejected(ErrorCode.invalid_request, f"operation {acl.operation}")
    if acl.permission_type not in PERMISSIONS:
        raise Rejected(ErrorCode.invalid_request, f"permission type {acl.permission_type}")
    if not acl.resource_name or len(acl.resource_name) > MAX_NAME:
        raise Rejected(ErrorCode.invalid_request,
                       f"resource name must be 1 to {MAX_NAME} characters")
    if acl.resource_type == RESOURCE_CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise Rejected(ErrorCode.invalid_request,
                       f"the cluster resource is named {CLUSTER_NAME!r}")
    kind, sep, who = acl.principal.partition(":")
    if not sep or not kind or not who or len(acl.principal) > MAX_NAME:
        raise Rejected(ErrorCode.invalid_request,
                       f"principal {acl.principal[:64]!r} is not TYPE:NAME")
    if not acl.host or len(acl.host) > MAX_NAME:
        raise Rejected(ErrorCode.invalid_request, "host must be 1 to 1024 characters")


def create_acl(state: MetadataState, cmd: CreateAcl) -> int:
    """1 if added, 0 if it was there already."""
    check_acl(cmd.acl)
    if cmd.acl in state.acls:
        return 0
    state.acls.add(cmd.acl)
    state.acls_version += 1
    return 1


def delete_acl(state: MetadataState, cmd: DeleteAcl) -> int:
    check_acl(cmd.acl)
    if cmd.acl not in state.acls:
        return 0
    state.acls.remove(cmd.acl)
    state.acls_version += 1
    return 1


def register_pipeline(state: MetadataState, cmd: RegisterPipeline) -> int:
    if not PIPELINE_NAME_RE.match(cmd.name):
        raise Rejected(ErrorCode.invalid_request,
                       "pipeline name must be 1 to 249 of ASCII letters, digits, '.', '_', '-'")
    if not 1 <= len(cmd.spec) <= MAX_PIPELINE_SPEC:
        raise Rejected(ErrorCode.invalid_request,
                       f"pipeline spec must be 1 to {MAX_PIPELINE_SPEC} bytes")
    current = state.pipelines.get(cmd.name)
    version = 1 if current is None else current.version + 1
    state.pipelines[cmd.name] = PipelineRecord(cmd.name, cmd.spec, version)
    return version


def delete_pipeline(state: MetadataState, cmd: DeletePipeline) -> None:
    if state.pipelines.pop(cmd.name, None) is None:
        raise Rejected(ErrorCode.resource_not_found, f"no pipeline named {cmd.name!r}")
