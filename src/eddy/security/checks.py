"""What request handlers ask of the authorizer: may this request's principal do this?

``node.authorizer`` is None when ``authorizer.class.name`` is empty; then every check
allows and ``operations`` reports every operation of the resource type, as Kafka does
without an authorizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eddy.security.acl import CLUSTER_NAME, OPERATIONS_OF, AclOperation, ResourceType
from eddy.security.authorizer import Authorizer, parse_super_users
from eddy.security.session import ANONYMOUS

if TYPE_CHECKING:
    from eddy.broker.settings import BrokerSettings
    from eddy.cluster.service import ClusterService
    from eddy.protocol.codec import Request

__all__ = ["allowed", "allowed_any", "cluster_allowed", "cluster_authorizer", "operations",
           "who"]


def cluster_authorizer(config: BrokerSettings, cluster: ClusterService) -> Authorizer:
    """The authorizer of a node in a cluster: the ACLs of its replica of the metadata."""

    def source() -> tuple[object, int, Any]:
        state = cluster.state
        return state, state.acls_version, state.acls

    return Authorizer(source, parse_super_users(config.super_users),
                      config.allow_everyone_if_no_acl_found)


def who(req: Request) -> tuple[str, str]:
    """(principal, host) of the request's connection."""
    session = req.session
    if session is None:
        return ANONYMOUS, req.client_host
    return session.principal, session.peer_ip or req.client_host


def allowed(node: Any, req: Request, op: AclOperation, rtype: ResourceType, name: str) -> bool:
    authorizer: Authorizer | None = getattr(node, "authorizer", None)
    if authorizer is None:
        return True
    principal, host = who(req)
    return authorizer.authorize(principal, host, op, rtype, name)


def cluster_allowed(node: Any, req: Request, op: AclOperation) -> bool:
    return allowed(node, req, op, ResourceType.CLUSTER, CLUSTER_NAME)


def allowed_any(node: Any, req: Request, op: AclOperation, rtype: ResourceType) -> bool:
    """Whether some resource of ``rtype`` allows ``op`` (Kafka's authorizeByResourceType)."""
    authorizer: Authorizer | None = getattr(node, "authorizer", None)
    if authorizer is None:
        return True
    principal, host = who(req)
    return authorizer.authorize_any(principal, host, op, rtype)


def operations(node: Any, req: Request, rtype: ResourceType, name: str) -> int:
    """``authorized_operations`` for a resource (every operation of its type when there is
    no authorizer, as Kafka)."""
    authorizer: Authorizer | None = getattr(node, "authorizer", None)
    if authorizer is None:
        bits = 0
        for op in OPERATIONS_OF.get(rtype, ()):
            bits |= 1 << op
        return bits
    principal, host = who(req)
    return authorizer.authorized_operations(principal, host, rtype, name)
