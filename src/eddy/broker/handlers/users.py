"""SCRAM users (KIP-554): DescribeUserScramCredentials and AlterUserScramCredentials.

Users are cluster metadata: any node takes an alteration, derives the keys the server keeps
(``eddy.security.scram``: StoredKey and ServerKey, never the salted password), has the
controller apply an ``UpsertScramUser`` / ``DeleteScramUser`` command, and answers once its
own replica of the metadata shows the change. Any node describes users from its replica.
Requests are checked as Apache Kafka's controller checks them, with its codes and messages:
altering needs ALTER on the cluster, describing DESCRIBE on the cluster (else
CLUSTER_AUTHORIZATION_FAILED for each user named).
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from eddy.broker.handlers.proposals import OK, Change, Outcome, make_all
from eddy.broker.handlers.topic_results import CLUSTER_DENIED
from eddy.metadata import MetadataState
from eddy.metadata.commands import DeleteScramUser, UpsertScramUser
from eddy.metadata.records import ScramCredential
from eddy.metadata.security import MAX_ITERATIONS, MAX_NAME, MAX_SALT, MIN_ITERATIONS
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation
from eddy.security.checks import cluster_allowed
from eddy.security.scram import MECHANISMS, derive_keys

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

_NO_TIME = datetime.timedelta(0)

# Kafka's messages (its ScramControlManager and ScramImage)
TWICE = "A user credential cannot be altered twice in the same request"
EMPTY_NAME = "Username must not be empty"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"
TOO_FEW = "Too few iterations"
TOO_MANY = "Too many iterations"
NO_SUCH_CREDENTIAL = "Attempt to delete a user credential that does not exist"
DESCRIBE_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "

# A node on its own (no metadata quorum) has nowhere to keep users. SECURITY_DISABLED is
# the code a Kafka user reads best here: it is what Kafka answers when a security feature
# (ACLs without an authorizer) is not set up on the broker, clients treat it as final (no
# retries until a timeout, as NOT_CONTROLLER would cause), and it cannot be taken for a
# problem with the request or the client's version (INVALID_REQUEST, UNSUPPORTED_VERSION).
NOT_CLUSTERED = ErrorCode.security_disabled
NOT_CLUSTERED_MESSAGE = (
    "SCRAM users live in a cluster's metadata and this node runs on its own "
    "(process.roles=broker and no controller.quorum.voters): run it as a cluster of one "
    "(leave process.roles unset, the default) or as part of a cluster")

#: one user of a describe: its name, outcome and credentials as (mechanism, iterations)
Row = tuple[str, Outcome, list[tuple[int, int]]]


def _check_name_and_mechanism(name: str, mechanism: int) -> Outcome | None:
    if not name:
        return ErrorCode.unacceptable_credential, EMPTY_NAME
    if len(name) > MAX_NAME:
        return ErrorCode.unacceptable_credential, f"Username longer than {MAX_NAME} characters"
    if mechanism not in MECHANISMS:
        return ErrorCode.unsupported_sasl_mechanism, UNKNOWN_MECHANISM
    return None


def check_deletion(state: MetadataState, name: str, mechanism: int) -> Outcome | None:
    """Why Kafka refuses to delete ``name``'s ``mechanism`` credential (None: it does not)."""
    refused = _check_name_and_mechanism(name, mechanism)
    if refused is not None:
        return refused
    if state.scram_credential(name, mechanism) is None:
        return ErrorCode.resource_not_found, NO_SUCH_CREDENTIAL
    return None


def check_upsertion(up: Any) -> Outcome | None:
    """Why Kafka refuses an upsertion (None: it does not). Beyond Kafka's checks, the salt
    and the salted password must have sizes a SCRAM client can send (Kafka fails an empty
    salted password with UNKNOWN_SERVER_ERROR, and the metadata keeps salts up to 1 KiB)."""
    refused = _check_name_and_mechanism(up.name, up.mechanism)
    if refused is not None:
        return refused
    if up.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, TOO_FEW
    if up.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, TOO_MANY
    mech = MECHANISMS[up.mechanism]
    if not 1 <= len(up.salt) <= MAX_SALT:
        return ErrorCode.unacceptable_credential, f"The salt must be 1 to {MAX_SALT} bytes"
    if len(up.salted_password) != mech.key_length:
        return (ErrorCode.unacceptable_credential,
                f"A {mech.name} salted password is {mech.key_length} bytes, not "
                f"{len(up.salted_password)}")
    return None


def _upsert_change(up: Any) -> Change:
    mech = MECHANISMS[up.mechanism]
    keys = derive_keys(mech, up.salted_password)
    want = ScramCredential(up.name, up.mechanism, up.salt, keys.stored_key, keys.server_key,
                           up.iterations)
    command = UpsertScramUser(up.name, up.mechanism, up.salt, keys.stored_key,
                              keys.server_key, up.iterations)
    return Change(command,
                  lambda s: s.scram_credential(want.user, want.mechanism) == want)


def _delete_change(name: str, mechanism: int) -> Change:
    return Change(DeleteScramUser(name, mechanism),
                  lambda s: s.scram_credential(name, mechanism) is None)


def plan(state: MetadataState, deletions: Iterable[Any], upsertions: Iterable[Any]
         ) -> tuple[list[str], dict[str, Change], dict[str, Outcome]]:
    """Kafka's reading of one AlterUserScramCredentials request: the users in the order
    they first appear, the changes to make, and the users refused (a user named twice in
    the request, deletions first, is DUPLICATE_RESOURCE and nothing is done for it)."""
    order: list[str] = []
    changes: dict[str, Change] = {}
    errors: dict[str, Outcome] = {}

    def seen(name: str) -> bool:
        if name in errors:
            return True
        if name in changes:
            del changes[name]
            errors[name] = (ErrorCode.duplicate_resource, TWICE)
            return True
        order.append(name)
        return False

    for d in deletions:
        if not seen(d.name):
            refused = check_deletion(state, d.name, d.mechanism)
            if refused is not None:
                errors[d.name] = refused
            else:
                changes[d.name] = _delete_change(d.name, d.mechanism)
    for up in upsertions:
        if not seen(up.name):
            refused = check_upsertion(up)
            if refused is not None:
                errors[up.name] = refused
            else:
                changes[up.name] = _upsert_change(up)
    return order, changes, errors


def _distinct(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


async def alter_user_scram_credentials(broker: Broker, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, req.api_version)
    cluster = broker.cluster
    outcomes: dict[str, Outcome]
    if not cluster_allowed(broker, req, AclOperation.ALTER):
        # Kafka's error response: each user named, sorted, refused
        order = sorted({d.name for d in body.deletions} | {u.name for u in body.upsertions})
        outcomes = {name: (ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
                    for name in order}
    elif cluster is None:
        names = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
        order = _distinct(names)
        outcomes = {name: (NOT_CLUSTERED, NOT_CLUSTERED_MESSAGE) for name in order}
    else:
        order, changes, outcomes = plan(cluster.state, body.deletions, body.upsertions)
        made = await make_all(cluster, list(changes.values()))
        outcomes.update(zip(changes, made, strict=True))
    results = tuple(build(mod.AlterUserScramCredentialsResult, user=name,
                          error_code=outcomes[name][0], error_message=outcomes[name][1])
                    for name in order)
    return build(mod.AlterUserScramCredentialsResponse, throttle_time=_NO_TIME,
                 results=results)


def credential_infos(state: MetadataState, user: str) -> list[tuple[int, int]]:
    """``user``'s credentials as (mechanism, iterations), by mechanism."""
    out = []
    for mechanism in sorted(MECHANISMS):
        cred = state.scram_credential(user, mechanism)
        if cred is not None:
            out.append((mechanism, cred.iterations))
    return out


def describe(state: MetadataState, users: list[str] | None) -> list[Row]:
    """Kafka's answer to a DescribeUserScramCredentials of ``users`` (None or empty: every
    user with a credential): per user its outcome and credentials."""
    if not users:
        everyone = _distinct(c.user for c in state.scram_credentials())
        return [(user, OK, credential_infos(state, user)) for user in everyone]
    counts = Counter(users)
    out: list[Row] = []
    for user in _distinct(users):
        if counts[user] > 1:
            out.append((user, (ErrorCode.duplicate_resource, DESCRIBE_TWICE + user), []))
            continue
        infos = credential_infos(state, user)
        if infos:
            out.append((user, OK, infos))
        else:
            out.append((user, (ErrorCode.resource_not_found, DESCRIBE_MISSING + user), []))
    return out


async def describe_user_scram_credentials(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, req.api_version)
    names = None if req.body.users is None else [u.name for u in req.body.users]
    cluster = broker.cluster
    rows: list[Row]
    if not cluster_allowed(broker, req, AclOperation.DESCRIBE):
        # per user (one row without a name when every user was asked for), never at the
        # top level: see below
        refused = (ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
        rows = [(name, refused, []) for name in _distinct(names or ("",))]
    elif cluster is None:
        # Per user only, never in the top-level error: librdkafka 2.16 (confluent-kafka)
        # frees a bad pointer and crashes the client process on a DescribeUserScramCredentials
        # response with a top-level error. Asked for every user, one row with no name
        # carries the refusal (an empty answer would read as "no users").
        refused = (NOT_CLUSTERED, NOT_CLUSTERED_MESSAGE)
        rows = [(name, refused, []) for name in _distinct(names or ("",))]
    else:
        rows = describe(cluster.state, names)
    results = tuple(
        build(mod.DescribeUserScramCredentialsResult, user=user, error_code=code,
              error_message=message,
              credential_infos=tuple(build(mod.CredentialInfo, mechanism=m, iterations=i)
                                     for m, i in infos))
        for user, (code, message), infos in rows)
    return build(mod.DescribeUserScramCredentialsResponse, throttle_time=_NO_TIME,
                 error_code=ErrorCode.none, error_message=None, results=results)
