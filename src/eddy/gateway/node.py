"""The gateway node the Kafka listener serves: config, its advertised address, the cluster's
routes and the forwarder ops go through."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eddy import postcard
from eddy.broker.settings import BrokerSettings
from eddy.gateway.ops import OPS, OpFailed, OpTimeout, OpUnavailable
from eddy.gateway.routes import Forwarder, Routes
from eddy.protocol.apis import SUPPORTED, ApiKey, VersionRange
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.security.remote_authorizer import Decisions

#: cluster id when neither the caller nor the config names one
DEFAULT_CLUSTER_ID = "eddy-gateway-cluster"


class Gateway:
    """Holds no partitions and no groups: every client-visible broker and coordinator is this
    node, every operation is forwarded to its owner."""

    def __init__(self, config: BrokerSettings, routes: Routes, forwarder: Forwarder,
                 cluster_id: str | None = None) -> None:
        self.config = config
        self.routes = routes
        self.forwarder = forwarder
        self.node_id = config.node_id
        self.host, self.port = config.advertised_address
        configured = getattr(config, "cluster_id", None)
        self.cluster_id: str = cluster_id or (configured if isinstance(configured, str)
                                              else None) or DEFAULT_CLUSTER_ID
        #: the cluster's ACL decisions for what the gateway answers itself (eddy.gateway.
        #: authz; None: no authorizer, everything allowed)
        self.authorizer: Decisions | None = None

    def set_advertised_port(self, port: int) -> None:
        """When listening on port 0, clients must be told the port the OS picked."""
        if self.config.advertised is None:
            self.port = port

    @property
    def request_timeout_ms(self) -> int:
        return self.config.mesh_request_timeout_ms

    async def call(self, node_id: int, op: int, request: Any, timeout_ms: int) -> Any:
        """Forward an op struct; returns the owner's response struct. Raises OpUnavailable,
        OpTimeout or OpFailed (also for an answer that does not decode)."""
        resp_cls = OPS[op][1]
        payload = await self.forwarder.call(node_id, op, postcard.encode(request), timeout_ms)
        try:
            return postcard.decode(resp_cls, payload)
        except postcard.PostcardError as exc:
            raise OpFailed(f"node {node_id} answered op 0x{op:02x} with an undecodable "
                           f"{resp_cls.__name__}: {exc}") from None


def as_code(value: int) -> ErrorCode:
    """An error code a peer sent, as ErrorCode (one this build does not know: unknown server
    error, rather than a crash)."""
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.unknown_server_error


def failure_code(exc: Exception, unavailable: ErrorCode) -> ErrorCode:
    """The Kafka code a forwarding failure becomes (OpFailed: UNKNOWN_SERVER_ERROR)."""
    if isinstance(exc, OpUnavailable):
        return unavailable
    if isinstance(exc, OpTimeout):
        return ErrorCode.request_timed_out
    return ErrorCode.unknown_server_error


def _served() -> dict[ApiKey, VersionRange]:
    served = {key: SUPPORTED[key] for key in (
        ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.CREATE_TOPICS,
        ApiKey.PRODUCE, ApiKey.LIST_OFFSETS, ApiKey.INIT_PRODUCER_ID,
        ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.LIST_GROUPS, ApiKey.DESCRIBE_GROUPS,
        # cluster management (handlers_manage)
        ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CONFIGS,
        ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DELETE_RECORDS,
        ApiKey.DESCRIBE_CLUSTER, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE,
        ApiKey.DESCRIBE_LOG_DIRS,
        # partition leadership (handlers_partitions)
        ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS,
        # SASL listeners (the exchange is the listener's; credentials from a broker)
        ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
    )}
    # Fetch v13+ names topics by id; the gateway knows names only (no metadata service yet)
    served[ApiKey.FETCH] = VersionRange(SUPPORTED[ApiKey.FETCH].min, 12)
    return served


#: what the gateway advertises in ApiVersions, and all it answers
GATEWAY_VERSIONS: dict[ApiKey, VersionRange] = _served()
