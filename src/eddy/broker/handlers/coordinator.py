"""FindCoordinator: on a single node this node coordinates every group and transaction; in a
cluster, both are coordinated by the leader of the ``offsets`` Raft group, where their
records live (the consumer groups' offsets and the transactions' state).

With an authorizer, as Kafka: finding a group's coordinator needs DESCRIBE on the group
(else GROUP_AUTHORIZATION_FAILED), a transaction's DESCRIBE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); from v4 each key is answered on its own. Each request
runs in an `eddy.broker.kafka.find-coordinator` span (its key_type an attribute, as the
gateway's `eddy.gateway.kafka.find-coordinator`)."""

from __future__ import annotations

import datetime
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers.cluster_metadata import live_brokers
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed
from eddy.telemetry.tracing import span

GROUP = 0
TRANSACTION = 1


def _answer(broker: Broker, req: Request, key: str, key_type: int
            ) -> tuple[ErrorCode, str | None]:
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"
    if broker.authorizer is not None:
        if key_type == GROUP and not allowed(broker, req, AclOperation.DESCRIBE,
                                             ResourceType.GROUP, key):
            return (ErrorCode.group_authorization_failed,
                    f"not authorized to DESCRIBE group {key}")
        if key_type == TRANSACTION and not allowed(broker, req, AclOperation.DESCRIBE,
                                                   ResourceType.TRANSACTIONAL_ID, key):
            return (ErrorCode.transactional_id_authorization_failed,
                    f"not authorized to DESCRIBE transactional id {key}")
    if key_type == GROUP and not key:
        return ErrorCode.invalid_request, "group id is empty"
    if key_type == TRANSACTION and not key:
        return ErrorCode.invalid_request, "transactional id is empty"
    return ErrorCode.none, None


def coordinator_of(broker: Broker, key: str, key_type: int = GROUP) -> tuple[int, str, int]:
    """(node id, host, port) of the broker coordinating ``key`` (-1 when none is live):
    the leader of the offsets Raft group, for groups and transactions alike."""
    if broker.cluster is None:
        return broker.node_id, broker.host, broker.port
    live = {n: (h, p) for n, h, p, _ in live_brokers(broker.cluster.state,
                                                     getattr(broker, "listener_name", None))}
    leader = broker.cluster.offsets_leader()
    chosen: int | None = leader if leader in live or leader == broker.node_id else None
    if chosen is None:
        return -1, "", -1
    if chosen == broker.node_id:
        return chosen, broker.host, broker.port
    return chosen, *live[chosen]


def _found(broker: Broker, req: Request, key: str, key_type: int
           ) -> tuple[ErrorCode, str | None, int, str, int]:
    code, message = _answer(broker, req, key, key_type)
    if code != ErrorCode.none:
        return code, message, -1, "", -1
    node, host, port = coordinator_of(broker, key, key_type)
    if node < 0:
        return ErrorCode.coordinator_not_available, "no live broker", -1, "", -1
    return code, message, node, host, port


async def find_coordinator(broker: Broker, req: Request) -> Any:
    body = req.body
    key_type = getattr(body, "key_type", GROUP)
    with span("eddy.broker.kafka.find-coordinator", key_type=key_type):
        return _find_coordinator(broker, req, key_type)


def _find_coordinator(broker: Broker, req: Request, key_type: int) -> Any:
    body = req.body
    mod = response_module(ApiKey.FIND_COORDINATOR, req.api_version)
    if req.api_version >= 4:
        coordinators = []
        for key in body.coordinator_keys:
            code, message, node, host, port = _found(broker, req, key, key_type)
            coordinators.append(
                build(mod.Coordinator, key=key, node_id=node, host=host, port=port,
                      error_code=code, error_message=message)
            )
        return build(mod.FindCoordinatorResponse, throttle_time=datetime.timedelta(0),
                     coordinators=tuple(coordinators))
    code, message, node, host, port = _found(broker, req, body.key, key_type)
    return build(mod.FindCoordinatorResponse, throttle_time=datetime.timedelta(0),
                 error_code=code, error_message=message, node_id=node, host=host, port=port)
