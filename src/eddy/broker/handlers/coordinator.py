"""FindCoordinator: on a single node this node coordinates every group and transaction."""

from __future__ import annotations

import datetime
from typing import Any

from eddy.broker.broker import Broker
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode

GROUP = 0
TRANSACTION = 1


def _answer(broker: Broker, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"
    if key_type == GROUP and not key:
        return ErrorCode.invalid_request, "group id is empty"
    if key_type == TRANSACTION and not key:
        return ErrorCode.invalid_request, "transactional id is empty"
    return ErrorCode.none, None


async def find_coordinator(broker: Broker, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.FIND_COORDINATOR, req.api_version)
    key_type = getattr(body, "key_type", GROUP)
    if req.api_version >= 4:
        coordinators = []
        for key in body.coordinator_keys:
            code, message = _answer(broker, key, key_type)
            ok = code == ErrorCode.none
            coordinators.append(
                build(mod.Coordinator, key=key, node_id=broker.node_id if ok else -1,
                      host=broker.host if ok else "", port=broker.port if ok else -1,
                      error_code=code, error_message=message)
            )
        return build(mod.FindCoordinatorResponse, throttle_time=datetime.timedelta(0),
                     coordinators=tuple(coordinators))
    code, message = _answer(broker, body.key, key_type)
    ok = code == ErrorCode.none
    return build(
        mod.FindCoordinatorResponse,
        throttle_time=datetime.timedelta(0),
        error_code=code,
        error_message=message,
        node_id=broker.node_id if ok else -1,
        host=broker.host if ok else "",
        port=broker.port if ok else -1,
    )
