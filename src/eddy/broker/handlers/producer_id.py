"""InitProducerId: ids for idempotent producers (transactional ids: the txn coordinator).

With an authorizer, as Kafka: a transactional id needs WRITE on it (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer needs IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (else CLUSTER_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from eddy.broker.broker import Broker
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed, allowed_any, cluster_allowed

log = logging.getLogger(__name__)


def refusal(broker: Broker, req: Request) -> ErrorCode | None:
    """Kafka's authorization of an InitProducerId (None: allowed)."""
    txn_id = req.body.transactional_id
    if txn_id is not None:
        if allowed(broker, req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if (cluster_allowed(broker, req, AclOperation.IDEMPOTENT_WRITE)
            or allowed_any(broker, req, AclOperation.WRITE, ResourceType.TOPIC)):
        return None
    return ErrorCode.cluster_authorization_failed


async def init_producer_id(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.INIT_PRODUCER_ID, req.api_version)
    refused = refusal(broker, req) if broker.authorizer is not None else None
    if refused is not None:
        return build(mod.InitProducerIdResponse, throttle_time=datetime.timedelta(0),
                     error_code=refused, producer_id=-1, producer_epoch=-1)
    try:
        await broker.producer_ids.ensure()  # a cluster's block, from the controller
    except KafkaError as exc:
        log.info("InitProducerId: %s", exc.message)
        return build(mod.InitProducerIdResponse, throttle_time=datetime.timedelta(0),
                     error_code=exc.code, producer_id=-1, producer_epoch=-1)
    if b.transactional_id is not None:
        code, pid, epoch = await broker.transactions.init_producer_id(
            b.transactional_id,
            int(b.transaction_timeout.total_seconds() * 1000),
            getattr(b, "producer_id", -1),
            getattr(b, "producer_epoch", -1),
        )
    else:
        # an idempotent producer (re)initialising always gets a fresh id, as in Kafka
        try:
            code, pid, epoch = ErrorCode.none, broker.producer_ids.allocate(), 0
        except (OSError, KafkaError) as exc:  # no block: not saved (disk full), none given
            log.warning("InitProducerId: %s", exc)
            code, pid, epoch = ErrorCode.coordinator_not_available, -1, -1
    return build(mod.InitProducerIdResponse, throttle_time=datetime.timedelta(0),
                 error_code=code, producer_id=pid, producer_epoch=epoch)
