"""CreateAcls, DescribeAcls and DeleteAcls, as Apache Kafka's brokers and controller answer
them with its StandardAuthorizer.

ACLs are cluster metadata (``state.acls``). Any node takes a CreateAcls: each creation is
checked with Kafka's codes and messages, and each valid binding becomes a ``CreateAcl``
command the controller applies; the answer comes once this node's replica of the metadata
shows it. A DeleteAcls filter selects the bindings it matches from the replica (Kafka's
filter semantics: ``eddy.security.acl_filters``), each becomes a ``DeleteAcl`` command, and
the filter's answer lists them with each one's outcome. DescribeAcls answers from the
replica, grouped by resource. DescribeAcls needs DESCRIBE on the cluster, the other two
ALTER (CLUSTER_AUTHORIZATION_FAILED otherwise).

With no authorizer (``authorizer.class.name`` empty) Kafka answers SECURITY_DISABLED: every
creation and every delete filter gets the error, a describe gets it at the top level, and
nothing is stored. Eddy answers exactly so.

Bounds: at most ``MAX_IN_FLIGHT`` proposals of one request at once, at most ``MAX_CHANGES``
bindings changed by one request (Kafka's limit per operation), a budget of bindings
examined by one request's filters, and the event loop is yielded between chunks of work.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from eddy.broker.handlers.proposals import OK, Change, Outcome, make_all
from eddy.metadata import MetadataState
from eddy.metadata.commands import CreateAcl, DeleteAcl
from eddy.metadata.records import AclBinding
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, PatternType
from eddy.security.acl_filters import (
    AclFilter,
    AclIndex,
    creation_problem,
    filter_problem,
    group_by_resource,
    select,
)
from eddy.security.checks import cluster_allowed

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.cluster.service import ClusterService

_NO_TIME = datetime.timedelta(0)
DISABLED = ErrorCode.security_disabled
#: Kafka's messages (its AclApis): per result for create and delete, top level for describe
NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
NOT_AUTHORIZED = "Cluster authorization failed."

#: proposals of one request in flight at once
#: bindings one request may create or delete (Kafka's MAX_RECORDS_PER_USER_OP)
MAX_CHANGES = 10_000
#: bindings one request's filters may examine, and matches it may report, in all
MAX_EXAMINED = 1_000_000
MAX_REPORTED = 100_000
#: items handled between two yields to the event loop
_CHUNK = 2048

TOO_MANY_CREATED = f"Cannot create more than {MAX_CHANGES} acls in a single create operation."
TOO_MANY_DELETED = f"Cannot remove more than {MAX_CHANGES} acls in a single delete operation."
TOO_MUCH_WORK = ("This request's filters examine or match too many ACLs; send fewer filters "
                 "per request")

def _create_change(acl: AclBinding) -> Change:
    return Change(CreateAcl(acl), lambda s: acl in s.acls)


def _delete_change(acl: AclBinding) -> Change:
    return Change(DeleteAcl(acl), lambda s: acl not in s.acls)


async def _pause(i: int) -> None:
    if i and i % _CHUNK == 0:
        await asyncio.sleep(0)


def _enabled(broker: Broker) -> ClusterService | None:
    """The cluster to keep ACLs in, or None when Kafka would say SECURITY_DISABLED."""
    if broker.authorizer is None:
        return None
    return broker.cluster


# ---- CreateAcls ---------------------------------------------------------------------------


def binding_of(creation: Any, api_version: int) -> AclBinding:
    """The binding a creation asks for (v0 creations are LITERAL: the field is v1+)."""
    pattern = (PatternType.LITERAL if api_version == 0
               else creation.resource_pattern_type)
    return AclBinding(int(creation.resource_type), creation.resource_name or "",
                      int(pattern), creation.principal or "", creation.host or "",
                      int(creation.operation), int(creation.permission_type))


async def plan_creations(bindings: Sequence[AclBinding]
                         ) -> tuple[list[Outcome | None], dict[AclBinding, list[int]]]:
    """Kafka's checks of each creation: the refusals by position (None: valid) and the
    distinct valid bindings with their positions (a binding asked twice is made once and
    both succeed, as Kafka)."""
    outcomes: list[Outcome | None] = [None] * len(bindings)
    wanted: dict[AclBinding, list[int]] = {}
    for i, acl in enumerate(bindings):
        await _pause(i)
        problem = creation_problem(acl)
        if problem is not None:
            outcomes[i] = (ErrorCode.invalid_request, problem)
        elif acl in wanted or len(wanted) < MAX_CHANGES:
            wanted.setdefault(acl, []).append(i)
        else:
            outcomes[i] = (ErrorCode.invalid_request, TOO_MANY_CREATED)
    return outcomes, wanted


async def create_acls(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.CREATE_ACLS, req.api_version)
    creations = req.body.creations
    cluster = _enabled(broker)
    outcomes: list[Outcome | None]
    if cluster is None:
        outcomes = [(DISABLED, NO_AUTHORIZER)] * len(creations)
    elif not cluster_allowed(broker, req, AclOperation.ALTER):
        outcomes = [(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)] * len(creations)
    else:
        bindings = [binding_of(c, req.api_version) for c in creations]
        outcomes, wanted = await plan_creations(bindings)
        made = await make_all(cluster, [_create_change(acl) for acl in wanted])
        for positions, outcome in zip(wanted.values(), made, strict=True):
            for i in positions:
                outcomes[i] = outcome
    results = tuple(build(mod.AclCreationResult, error_code=(o or OK)[0],
                          error_message=(o or OK)[1]) for o in outcomes)
    return build(mod.CreateAclsResponse, throttle_time=_NO_TIME, results=results)


# ---- DescribeAcls -------------------------------------------------------------------------


def filter_of(body: Any) -> AclFilter:
    """The filter of a DescribeAcls request or a DeleteAcls filter (same field names)."""
    return AclFilter.of(body.resource_type_filter, body.resource_name_filter,
                        body.pattern_type_filter, body.principal_filter, body.host_filter,
                        body.operation, body.permission_type)


def describe(state: MetadataState, f: AclFilter) -> list[tuple[tuple[int, str, int],
                                                              list[AclBinding]]]:
    """The bindings ``f`` selects from ``state``, grouped by resource."""
    return group_by_resource(AclIndex(state.acls).select(f)[0])


async def describe_acls(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_ACLS, req.api_version)

    def refused(code: ErrorCode, message: str) -> Any:
        return build(mod.DescribeAclsResponse, throttle_time=_NO_TIME, error_code=code,
                     error_message=message, resources=())

    cluster = _enabled(broker)
    if cluster is None:
        return refused(DISABLED, NO_AUTHORIZER_DESCRIBE)
    if not cluster_allowed(broker, req, AclOperation.DESCRIBE):
        return refused(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)
    f = filter_of(req.body)
    problem = filter_problem(f)
    if problem is not None:
        return refused(ErrorCode.invalid_request, problem)
    resources = tuple(
        build(mod.DescribeAclsResource, resource_type=rtype, resource_name=name,
              pattern_type=ptype,
              acls=tuple(build(mod.AclDescription, principal=a.principal, host=a.host,
                               operation=a.operation, permission_type=a.permission_type)
                         for a in acls))
        for (rtype, name, ptype), acls in describe(cluster.state, f))
    return build(mod.DescribeAclsResponse, throttle_time=_NO_TIME, error_code=ErrorCode.none,
                 error_message=None, resources=resources)


# ---- DeleteAcls ---------------------------------------------------------------------------


async def plan_deletions(state: MetadataState, filters: Sequence[AclFilter]
                         ) -> tuple[list[Outcome | list[AclBinding]], dict[AclBinding, None]]:
    """Per filter its refusal or the bindings it selects, and the distinct bindings to
    delete (a binding several filters select is deleted once and listed by each)."""
    index = AclIndex(state.acls)
    doomed: dict[AclBinding, None] = {}
    per_filter: list[Outcome | list[AclBinding]] = []
    examined = reported = 0
    for i, f in enumerate(filters):
        await _pause(i)
        problem = filter_problem(f)
        if problem is not None:
            per_filter.append((ErrorCode.invalid_request, problem))
            continue
        pool = index.candidates(f)
        examined += len(pool)
        if examined > MAX_EXAMINED:
            per_filter.append((ErrorCode.invalid_request, TOO_MUCH_WORK))
            continue
        selected = select(f, pool)
        fresh = [acl for acl in selected if acl not in doomed]
        if len(doomed) + len(fresh) > MAX_CHANGES:
            per_filter.append((ErrorCode.invalid_request, TOO_MANY_DELETED))
            continue
        reported += len(selected)
        if reported > MAX_REPORTED:
            per_filter.append((ErrorCode.invalid_request, TOO_MUCH_WORK))
            continue
        doomed.update(dict.fromkeys(fresh))
        per_filter.append(selected)
    return per_filter, doomed


async def delete_acls(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DELETE_ACLS, req.api_version)
    raw_filters = req.body.filters
    cluster = _enabled(broker)

    def refused(code: ErrorCode, message: str | None) -> Any:
        return build(mod.DeleteAclsFilterResult, error_code=code, error_message=message,
                     matching_acls=())

    if cluster is None:
        results = tuple(refused(DISABLED, NO_AUTHORIZER) for _ in raw_filters)
    elif not cluster_allowed(broker, req, AclOperation.ALTER):
        results = tuple(refused(ErrorCode.cluster_authorization_failed, NOT_AUTHORIZED)
                        for _ in raw_filters)
    else:
        filters = [filter_of(f) for f in raw_filters]
        per_filter, doomed = await plan_deletions(cluster.state, filters)
        made = await make_all(cluster, [_delete_change(acl) for acl in doomed])
        outcome_of = dict(zip(doomed, made, strict=True))

        def matching(acl: AclBinding) -> Any:
            code, message = outcome_of[acl]
            return build(mod.DeleteAclsMatchingAcl, error_code=code, error_message=message,
                         resource_type=acl.resource_type, resource_name=acl.resource_name,
                         pattern_type=acl.pattern_type, principal=acl.principal,
                         host=acl.host, operation=acl.operation,
                         permission_type=acl.permission_type)

        results = tuple(
            build(mod.DeleteAclsFilterResult, error_code=ErrorCode.none, error_message=None,
                  matching_acls=tuple(matching(acl) for acl in entry))
            if isinstance(entry, list) else refused(*entry)
            for entry in per_filter)
    return build(mod.DeleteAclsResponse, throttle_time=_NO_TIME, filter_results=results)
