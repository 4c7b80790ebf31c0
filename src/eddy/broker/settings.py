"""The broker's settings model: the node's identity and roles, its Kafka listeners, the log
and topic defaults, groups and transactions, with the settings of the areas below it that the
broker works with (security, telemetry, mesh, cluster) inherited. ``eddy.config`` adds the
settings of the node's other parts (registry, admin listener) and loads them all."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from eddy.cluster.settings import ClusterSettings, parse_quorum_voters
from eddy.config_parse import parse_host_port, split_list
from eddy.log.config import LONG_MAX, TOPIC_CONFIGS, InvalidConfig
from eddy.mesh.settings import MeshSettings
from eddy.security.config_fields import SecuritySettings
from eddy.security.listeners import ListenerSpec, resolve_listeners
from eddy.telemetry.settings import TelemetrySettings

__all__ = ["ROLES", "TOPIC_DEFAULT_FIELDS", "BrokerSettings", "kafka_name",
           "parse_connection_overrides"]


#: the roles a node can have (seed 000's broker, gateway and registry, seed 004's controller:
#: a voter of the metadata quorum); connect is a command (`eddy connect run`), not a role
ROLES = frozenset({"broker", "controller", "gateway", "registry"})


def parse_connection_overrides(value: str) -> dict[str, int]:
    """Kafka's max.connections.per.ip.overrides: 'host:count,host:count' (IPv6 hosts
    in brackets or bare; the count is after the last colon)."""
    out: dict[str, int] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"expected HOST:COUNT items separated by commas, got {item!r}")
        out[host.strip().strip("[]")] = int(count)
    return out


class BrokerSettings(SecuritySettings, TelemetrySettings, MeshSettings, ClusterSettings):
    """The settings of a node's Kafka side: who the node is and its roles, its listeners, the
    log and topic defaults, groups, transactions, and the mesh, cluster, security and
    telemetry settings the broker works with. Kafka's dotted names are accepted as
    aliases."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    node_id: int = Field(1, ge=0, description="this node's id (Kafka's node.id)")
    listen: str = Field("127.0.0.1:9092", description="Kafka listener HOST:PORT")
    advertised: str | None = Field(
        None, description="HOST:PORT clients are told to connect to (default: listen)"
    )
    data_dir: str = Field("./eddy-data", description="where logs and metadata live")
    auto_create_topics_enable: bool = Field(
        True, alias="auto.create.topics.enable", description="create topics on Metadata"
    )
    num_partitions: int = Field(
        1, ge=1, alias="num.partitions", description="partitions of auto-created topics"
    )
    default_replication_factor: int = Field(1, ge=1, alias="default.replication.factor")
    socket_request_max_bytes: int = Field(
        104857600, ge=1024, alias="socket.request.max.bytes",
        description="largest request frame accepted",
    )
    queued_max_request_bytes: int = Field(
        268435456, ge=-1, alias="queued.max.request.bytes",
        description="request bytes all connections together may hold in memory before "
        "reading pauses (-1: no bound, Kafka's default). Eddy bounds it by default so no "
        "client can make it allocate without limit: 256 MiB, room for two requests of "
        "socket.request.max.bytes besides many small ones; must be at least that size",
    )
    max_connections: int = Field(
        2147483647, ge=0, alias="max.connections",
        description="connections the listener accepts; more are closed at once",
    )
    max_connections_per_ip: int = Field(
        2147483647, ge=0, alias="max.connections.per.ip",
        description="connections accepted from one client address; more are closed at once",
    )
    max_connections_per_ip_overrides: str = Field(
        "", alias="max.connections.per.ip.overrides",
        description="per-address limits, e.g. 'hostA:100,127.0.0.1:200'",
    )
    connections_max_idle_ms: int = Field(
        600000, ge=1, alias="connections.max.idle.ms",
        description="close connections with no traffic for this long",
    )
    socket_request_read_timeout_ms: int = Field(
        30000, ge=1, alias="socket.request.read.timeout.ms",
        description="close a connection whose request is still incomplete this long after "
        "its first bytes came (Eddy's; 30 s, as a Java client's request.timeout.ms, after "
        "which the client has given up on the request anyway)",
    )
    log_flush_interval_messages: int = Field(
        LONG_MAX, ge=1, alias="log.flush.interval.messages",
        description="fsync after this many messages (default: leave it to the OS)",
    )
    log_flush_interval_ms: int = Field(
        LONG_MAX, ge=0, alias="log.flush.interval.ms", description="fsync at least this often"
    )
    log_write_caching: bool = Field(
        False, alias="log.write.caching",
        description="acks=all is acknowledged once every in-sync replica has the bytes in "
        "memory, as Kafka does, instead of after each has fsynced them (Eddy's default: an "
        "acknowledged record survives a power cut); topic config write.caching",
    )
    min_insync_replicas: int = Field(
        1, ge=1, alias="min.insync.replicas",
        description="in-sync replicas an acks=all produce needs (topic default)",
    )
    log_segment_bytes: int = Field(1073741824, ge=14, alias="log.segment.bytes")
    log_roll_ms: int = Field(604800000, ge=1, alias="log.roll.ms")
    log_retention_ms: int = Field(604800000, ge=-1, alias="log.retention.ms")
    log_retention_bytes: int = Field(-1, alias="log.retention.bytes")
    log_retention_check_interval_ms: int = Field(
        300000, ge=1, alias="log.retention.check.interval.ms"
    )
    message_max_bytes: int = Field(1048588, ge=0, alias="message.max.bytes")
    log_index_interval_bytes: int = Field(4096, ge=0, alias="log.index.interval.bytes")
    log_message_timestamp_type: str = Field("CreateTime", alias="log.message.timestamp.type")
    log_cleanup_policy: str = Field("delete", alias="log.cleanup.policy")
    offsets_topic_num_partitions: int = Field(
        50, ge=1, alias="offsets.topic.num.partitions",
        description="partitions of __consumer_offsets (fixed once created)",
    )
    offsets_topic_segment_bytes: int = Field(
        104857600, ge=1024, alias="offsets.topic.segment.bytes"
    )
    offsets_retention_minutes: int = Field(10080, ge=1, alias="offsets.retention.minutes")
    offset_metadata_max_bytes: int = Field(4096, ge=0, alias="offset.metadata.max.bytes")
    group_initial_rebalance_delay_ms: int = Field(
        0, ge=0, alias="group.initial.rebalance.delay.ms",
        description="wait this long for more members before a new group's first rebalance",
    )
    group_min_session_timeout_ms: int = Field(6000, ge=1, alias="group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = Field(
        1800000, ge=1, alias="group.max.session.timeout.ms"
    )
    producer_id_expiration_ms: int = Field(
        86400000, ge=1, alias="producer.id.expiration.ms",
        description="forget an idempotent producer idle this long",
    )
    transaction_max_timeout_ms: int = Field(
        900000, ge=1, alias="transaction.max.timeout.ms",
        description="the largest transaction.timeout.ms a producer may ask for",
    )
    transactional_id_expiration_ms: int = Field(
        604800000, ge=1, alias="transactional.id.expiration.ms"
    )
    transaction_state_num_partitions: int = Field(
        50, ge=1, alias="transaction.state.log.num.partitions"
    )
    log_cleaner_backoff_ms: int = Field(
        15000, ge=1, alias="log.cleaner.backoff.ms",
        description="how often compacted topics are checked for cleaning",
    )
    sendfile: bool = Field(True, description="send fetched log ranges with os.sendfile")
    storage_max_open_files: int = Field(
        0, ge=0, alias="storage.max.open.files",
        description="Eddy's own: segment and index files kept open at once, the least "
        "recently used closed beyond it (0: half the open-files limit, RLIMIT_NOFILE)",
    )
    process_roles: str | None = Field(
        None, alias="process.roles",
        description="comma-separated roles: broker (holds partitions and groups), controller "
        "(a voter of the metadata quorum), gateway (holds nothing: clients bootstrap to it and "
        "it forwards every operation to the owning node over the mesh; with broker too, "
        "local operations run in-process), registry (the schema registry's REST API on "
        "registry.listener; needs broker on the same node; implied when registry.listener "
        "is set). Unset: broker,controller,registry (a cluster of one, or a voter of "
        "controller.quorum.voters), except broker,registry for a node named in no voter "
        "list or one on a mesh without voters (mesh.listener, mesh.seeds, mDNS); "
        "process.roles=broker alone with no voters is a node outside any cluster",
    )
    broker_rack: str | None = Field(None, alias="broker.rack", description="rack of this node")

    @field_validator("listen", "advertised")
    @classmethod
    def _host_port(cls, v: str | None, info: Any) -> str | None:
        if v is not None:
            parse_host_port(v, info.field_name)
        return v

    @field_validator("process_roles")
    @classmethod
    def _roles(cls, v: str | None) -> str | None:
        if v is None:
            return None  # decided with the voters and the mesh settings (_default_roles)
        roles = split_list(v)
        unknown = sorted(set(roles) - ROLES)
        if unknown or not roles:
            raise ValueError(f"roles must be a comma-separated subset of {sorted(ROLES)}, "
                             f"got {v!r}")
        return ",".join(roles)

    @model_validator(mode="after")
    def _controller_role_matches_voters(self) -> BrokerSettings:
        if self.process_roles is None:
            # a validator may settle a frozen model's field before anyone reads it
            object.__setattr__(self, "process_roles", self._default_roles())
        voters = self.quorum_voters
        if "controller" in self.roles and self.node_id not in voters:  # named, not it
            raise ValueError(f"process.roles has controller but node.id {self.node_id} is not "
                             f"in controller.quorum.voters ({self.controller_quorum_voters!r})")
        if self.node_id in voters and "controller" not in self.roles:
            raise ValueError(f"node.id {self.node_id} is in controller.quorum.voters: add "
                             "controller to process.roles")
        if voters and "gateway" in self.roles:
            raise ValueError("process.roles gateway with controller.quorum.voters: gateways "
                             "route by the mesh's announcements and do not follow a "
                             "cluster's metadata yet; clients can bootstrap to any broker")
        if not self.roles & {"broker", "gateway"}:
            raise ValueError("process.roles needs broker or gateway (every node serves Kafka "
                             "clients; a controller-only node is not built yet)")
        return self

    @field_validator("max_connections_per_ip_overrides")
    @classmethod
    def _overrides(cls, v: str) -> str:
        parse_connection_overrides(v)
        return v

    @model_validator(mode="after")
    def _request_pool_holds_a_request(self) -> BrokerSettings:
        queued, largest = self.queued_max_request_bytes, self.socket_request_max_bytes
        if queued != -1 and queued < largest:
            raise ValueError(
                f"queued.max.request.bytes={queued} must be -1 or at least "
                f"socket.request.max.bytes={largest}, or a request of that size never fits"
            )
        return self

    @model_validator(mode="after")
    def _topic_defaults_valid(self) -> BrokerSettings:
        self.topic_defaults()  # raises InvalidConfig (a ValueError) naming the setting
        return self

    @property
    def connection_overrides(self) -> dict[str, int]:
        """max.connections.per.ip.overrides as host -> limit."""
        return parse_connection_overrides(self.max_connections_per_ip_overrides)

    def _default_roles(self) -> str:
        """process.roles when unset: every role a lone node needs (a cluster of one), a
        voter's if this node is one, a broker's on a cluster or mesh that others run."""
        named = parse_quorum_voters(self.controller_quorum_voters)
        if named:
            return "broker,controller,registry" if self.node_id in named else "broker,registry"
        if self.mesh_listener or self.mesh_seeds or self.mesh_mdns_enable:
            return "broker,registry"  # a mesh of nodes of their own (a gateway routes)
        return "broker,controller,registry"

    @property
    def roles(self) -> frozenset[str]:
        return frozenset(split_list(self.process_roles or self._default_roles()))

    @property
    def quorum_voters(self) -> dict[int, str]:
        """controller.quorum.voters as node id -> mesh HOST:PORT (empty: no cluster); the
        controller role with no voters named is a cluster of one, this node."""
        voters = parse_quorum_voters(self.controller_quorum_voters)
        if not voters and "controller" in self.roles:
            return {self.node_id: self.mesh_listener or "127.0.0.1:0"}
        return voters

    @property
    def clustered(self) -> bool:
        """Metadata in Raft (a quorum of voters, maybe this node alone)."""
        return bool(self.quorum_voters)

    @property
    def mesh_enabled(self) -> bool:
        return bool(self.mesh_listener or self.mesh_seeds or "gateway" in self.roles
                    or self.clustered)

    @property
    def mesh_address(self) -> tuple[str, int]:
        """Where the mesh listens: mesh.listener, else a voter's address in
        controller.quorum.voters, else any free port on loopback."""
        own = self.quorum_voters.get(self.node_id) if self.clustered else None
        return parse_host_port(self.mesh_listener or own or "127.0.0.1:0", "mesh.listener")

    @property
    def mesh_seed_addresses(self) -> list[tuple[str, int]]:
        """mesh.seeds, then the other voters of controller.quorum.voters (a cluster's nodes
        find each other through its quorum without a seed list)."""
        seeds = [parse_host_port(s, "mesh.seeds") for s in split_list(self.mesh_seeds)]
        for node, addr in sorted(self.quorum_voters.items()):
            voter = parse_host_port(addr, "controller.quorum.voters")
            if node != self.node_id and voter not in seeds:
                seeds.append(voter)
        return seeds

    def http_address(self, value: str | None, default_port: int, field: str
                     ) -> tuple[str, int] | None:
        """Where an HTTP listener set to ``value`` listens: unset, next to the Kafka
        listener on ``default_port``; empty, nowhere (None)."""
        if value is None:  # unset: next to the Kafka listener, on the usual port
            return self.listen_address[0], default_port
        return parse_host_port(value, field) if value else None

    @property
    def listen_address(self) -> tuple[str, int]:
        """Where the (inter-broker) Kafka listener binds."""
        if self.listeners is not None:
            first = self.listener_specs[0]
            return first.host or "0.0.0.0", first.port
        return parse_host_port(self.listen, "listen")

    @property
    def advertised_address(self) -> tuple[str, int]:
        """What the (inter-broker) listener tells clients and other nodes."""
        if self.listeners is not None:
            first = self.listener_specs[0]
            return first.advertised_host, (first.advertised_port if first.advertised_port
                                           is not None else first.port)
        if self.advertised:
            return parse_host_port(self.advertised, "advertised")
        host, port = self.listen_address
        return ("127.0.0.1" if host in ("0.0.0.0", "::", "") else host), port

    @property
    def listener_specs(self) -> list[ListenerSpec]:
        """The Kafka listeners, the inter-broker one first (unset listeners: one
        PLAINTEXT listener on listen, telling clients advertised)."""
        if self.listeners is None:
            host, port = parse_host_port(self.listen, "listen")
            adv_host, adv_port = self.advertised_address
            fixed = self.advertised is not None or port != 0
            return [ListenerSpec("PLAINTEXT", host, port, "PLAINTEXT", adv_host,
                                 adv_port if fixed else None)]
        return resolve_listeners(self.listeners, self.advertised_listeners,
                                 self.listener_security_protocol_map,
                                 self.inter_broker_listener_name)

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults for topic configs, under the topic configs' names."""
        out: dict[str, str] = {}
        for topic_name, field in TOPIC_DEFAULT_FIELDS.items():
            value = getattr(self, field)
            raw = str(value).lower() if isinstance(value, bool) else str(value)
            try:
                TOPIC_CONFIGS[topic_name].parse(raw)
            except InvalidConfig as exc:
                alias = type(self).model_fields[field].alias or field
                raise InvalidConfig(f"{alias}: {exc}") from None
            out[topic_name] = raw
        return out


#: topic config name -> the BrokerSettings field holding its broker-wide default
TOPIC_DEFAULT_FIELDS: dict[str, str] = {
    "flush.messages": "log_flush_interval_messages",
    "flush.ms": "log_flush_interval_ms",
    "segment.bytes": "log_segment_bytes",
    "segment.ms": "log_roll_ms",
    "retention.ms": "log_retention_ms",
    "retention.bytes": "log_retention_bytes",
    "max.message.bytes": "message_max_bytes",
    "index.interval.bytes": "log_index_interval_bytes",
    "message.timestamp.type": "log_message_timestamp_type",
    "cleanup.policy": "log_cleanup_policy",
    "write.caching": "log_write_caching",
    "min.insync.replicas": "min_insync_replicas",
}


def kafka_name(field: str) -> str:
    """The name a Kafka user knows a broker setting by (its alias, else dotted)."""
    alias = BrokerSettings.model_fields[field].alias
    return alias or field.replace("_", ".")
