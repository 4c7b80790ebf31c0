"""The gateway's Kafka handler table: same shape as eddy.broker.server.HANDLERS, served by
KafkaServer(gateway, handlers=GATEWAY_HANDLERS, versions=GATEWAY_VERSIONS).

Each handler runs ``acting_for`` its request: the ops it forwards carry the client's
principal to the brokers, which authorize them. SaslHandshake and SaslAuthenticate are the
broker's own handlers (the listener's SaslService does the work; a gateway's looks the
credentials up at a broker, eddy.security.remote_credentials)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from eddy.broker.handlers import sasl
from eddy.gateway.handlers import admin, data, groups, manage, partitions
from eddy.gateway.handlers import configs as cfg
from eddy.gateway.node import GATEWAY_VERSIONS, Gateway
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request
from eddy.security.acting import acting_for

__all__ = ["GATEWAY_HANDLERS", "GATEWAY_VERSIONS", "GatewayHandler"]

GatewayHandler = Callable[[Gateway, Request], Awaitable[Any]]


def _for_client(handler: GatewayHandler) -> GatewayHandler:
    async def run(gw: Gateway, req: Request) -> Any:
        with acting_for(req):
            return await handler(gw, req)

    run.__name__ = getattr(handler, "__name__", "handler")
    run.__doc__ = handler.__doc__
    return run


_HANDLERS: dict[ApiKey, GatewayHandler] = {
    ApiKey.API_VERSIONS: admin.api_versions,
    ApiKey.METADATA: admin.metadata,
    ApiKey.FIND_COORDINATOR: admin.find_coordinator,
    ApiKey.CREATE_TOPICS: admin.create_topics,
    ApiKey.INIT_PRODUCER_ID: admin.init_producer_id,
    ApiKey.PRODUCE: data.produce,
    ApiKey.FETCH: data.fetch,
    ApiKey.LIST_OFFSETS: data.list_offsets,
    ApiKey.JOIN_GROUP: groups.join_group,
    ApiKey.SYNC_GROUP: groups.sync_group,
    ApiKey.HEARTBEAT: groups.heartbeat,
    ApiKey.LEAVE_GROUP: groups.leave_group,
    ApiKey.OFFSET_COMMIT: groups.offset_commit,
    ApiKey.OFFSET_FETCH: groups.offset_fetch,
    ApiKey.LIST_GROUPS: groups.list_groups,
    ApiKey.DESCRIBE_GROUPS: groups.describe_groups,
    ApiKey.DELETE_TOPICS: manage.delete_topics,
    ApiKey.CREATE_PARTITIONS: manage.create_partitions,
    ApiKey.DESCRIBE_CONFIGS: cfg.describe_configs,
    ApiKey.ALTER_CONFIGS: cfg.alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: cfg.incremental_alter_configs,
    ApiKey.DELETE_RECORDS: manage.delete_records,
    ApiKey.DESCRIBE_CLUSTER: manage.describe_cluster,
    ApiKey.DELETE_GROUPS: manage.delete_groups,
    ApiKey.OFFSET_DELETE: manage.offset_delete,
    ApiKey.DESCRIBE_LOG_DIRS: manage.describe_log_dirs,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: partitions.offset_for_leader_epoch,
    ApiKey.ELECT_LEADERS: partitions.elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: partitions.alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: partitions.list_partition_reassignments,
    ApiKey.SASL_HANDSHAKE: sasl.sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl.sasl_authenticate,
}
GATEWAY_HANDLERS: dict[ApiKey, GatewayHandler] = {
    key: _for_client(handler) for key, handler in _HANDLERS.items()}

# SCRAM users and ACLs (APIs 29-31, 50, 51) are not served here: a gateway holds no metadata
# state, and GATEWAY_VERSIONS lists its keys one by one, so it does not advertise them.
assert set(GATEWAY_HANDLERS) == set(GATEWAY_VERSIONS), "every served API has a handler"
