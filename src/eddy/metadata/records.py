"""What the metadata state holds, as postcard records: the snapshot is these records in a
canonical (sorted) order, and queries hand them out (they are frozen)."""

from __future__ import annotations

from dataclasses import dataclass

from eddy.postcard import I8, I32, I64, U8

#: the snapshot format this code writes and reads
SNAPSHOT_VERSION = 2  # 2: cluster_id
#: ``PartitionRecord.leader`` when the partition has no leader (offline)
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class BrokerRecord:
    """A registered broker. ``epoch`` is its incarnation (each restart registers with a
    higher one); a fenced broker leads nothing and may not join an ISR."""

    node_id: I32
    node_key: bytes  # its mesh identity: the Ed25519 public key (32 bytes)
    rack: str | None
    kafka_addr: str
    mesh_addr: str
    epoch: I64
    fenced: bool
    last_heartbeat_ms: I64


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """``leader_epoch`` grows on every leader change; ``partition_epoch`` on every change
    of leader or ISR (the version an ISR change must name)."""

    replicas: tuple[I32, ...]
    leader: I32
    leader_epoch: I32
    isr: tuple[I32, ...]
    partition_epoch: I32


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: bytes  # 16 bytes (a UUID)
    partitions: tuple[PartitionRecord, ...]
    configs: tuple[ConfigEntry, ...]  # overrides only, sorted by name


@dataclass(frozen=True, slots=True)
class BrokerConfigRecord:
    """Dynamic broker configs of one node, or (``node_id`` None) the cluster-wide
    ``<default>``."""

    node_id: I32 | None
    configs: tuple[ConfigEntry, ...]


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """Only the salted keys (RFC 5802): never a password."""

    user: str
    mechanism: U8  # 1: SCRAM-SHA-256, 2: SCRAM-SHA-512 (Kafka's ScramMechanism)
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: I32


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL as Kafka's CreateAcls carries it (the numeric enums are Kafka's)."""

    resource_type: I8
    resource_name: str
    pattern_type: I8
    principal: str
    host: str
    operation: I8
    permission_type: I8


@dataclass(frozen=True, slots=True)
class PipelineRecord:
    name: str
    spec: bytes
    version: I64  # 1 when first registered, +1 on every replacement


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    version: U8
    brokers: tuple[BrokerRecord, ...]
    topics: tuple[TopicRecord, ...]
    broker_configs: tuple[BrokerConfigRecord, ...]
    next_producer_id: I64
    scram_users: tuple[ScramCredential, ...]
    acls: tuple[AclBinding, ...]
    pipelines: tuple[PipelineRecord, ...]
    cluster_id: str
