"""The broker's authorization rules for the answers a gateway gives itself.

A gateway forwards most requests with its client's principal (TAG_KAFKA_OP_AS) and the
owning broker authorizes them. What it answers on its own (Metadata from the mesh
directory, FindCoordinator, DescribeCluster's operations, its BROKER config resource,
unknown topics, DescribeLogDirs' refusal) it decides with the cluster's ACLs, through
``gw.authorizer`` (eddy.security.remote_authorizer: a broker's decisions over the mesh, or
a co-located broker's own; None: no authorizer, everything allowed, every operation
reported as Kafka does).

``Gate`` is one request's view: the principal and address of its connection
(eddy.security.checks.who), decisions asked in batches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from eddy.protocol.codec import Request
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import CLUSTER_NAME, OPERATIONS_OF, AclOperation, ResourceType
from eddy.security.checks import who
from eddy.security.remote_authorizer import any_check, resource_check

if TYPE_CHECKING:
    from eddy.gateway.node import Gateway

__all__ = ["Gate", "unknown_topic_codes"]


class Gate:
    def __init__(self, gw: Gateway, req: Request) -> None:
        self.decisions = gw.authorizer
        self.principal, self.host = who(req)

    @property
    def on(self) -> bool:
        return self.decisions is not None

    async def names(self, op: AclOperation, rtype: ResourceType, names: Iterable[str]
                    ) -> set[str]:
        """The names ``op`` is allowed on, in one batch."""
        unique = list(dict.fromkeys(names))
        if self.decisions is None or not unique:
            return set(unique)
        got = await self.decisions.decide(self.principal, self.host,
                                          [resource_check(op, rtype, n) for n in unique])
        return {n for n, ok in zip(unique, got, strict=True) if ok}

    async def allowed(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        return name in await self.names(op, rtype, (name,))

    async def cluster(self, op: AclOperation) -> bool:
        return await self.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME)

    async def any(self, op: AclOperation, rtype: ResourceType) -> bool:
        """Whether some resource of ``rtype`` allows ``op`` (authorizeByResourceType)."""
        if self.decisions is None:
            return True
        (ok,) = await self.decisions.decide(self.principal, self.host, [any_check(op, rtype)])
        return ok

    async def operations(self, rtype: ResourceType, names: Iterable[str]) -> dict[str, int]:
        """Each name's authorized operations bit field, in one batch."""
        ops = OPERATIONS_OF.get(rtype, ())
        unique = list(dict.fromkeys(names))
        if self.decisions is None:
            every = sum(1 << op for op in ops)
            return dict.fromkeys(unique, every)
        checks = [resource_check(op, rtype, n) for n in unique for op in ops]
        got = iter(await self.decisions.decide(self.principal, self.host, checks)
                   if checks else ())
        out: dict[str, int] = {}
        for n in unique:
            out[n] = sum(1 << op for op in ops if next(got))
        return out

    async def cluster_operations(self) -> int:
        return (await self.operations(ResourceType.CLUSTER, (CLUSTER_NAME,)))[CLUSTER_NAME]


async def unknown_topic_codes(gw: Gateway, req: Request, op: AclOperation,
                              names: Iterable[str]) -> dict[str, ErrorCode]:
    """The code a topic the gateway does not know gets: TOPIC_AUTHORIZATION_FAILED when the
    principal may not ``op`` it (as a broker, whether or not it exists), else
    UNKNOWN_TOPIC_OR_PARTITION."""
    unique = list(dict.fromkeys(names))
    allowed = await Gate(gw, req).names(op, ResourceType.TOPIC, unique)
    return {n: ErrorCode.unknown_topic_or_partition if n in allowed
            else ErrorCode.topic_authorization_failed for n in unique}
