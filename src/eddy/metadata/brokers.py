"""Broker commands: registration, heartbeats, fencing, producer-id blocks."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from eddy.metadata.endpoints import check_endpoints
from eddy.metadata.records import BrokerRecord
from eddy.metadata.result import Rejected
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.metadata.commands import (
        AllocateProducerIds,
        BrokerHeartbeat,
        FenceBroker,
        RegisterBroker,
        UnfenceBroker,
        UnregisterBroker,
    )
    from eddy.metadata.state import MetadataState

NODE_KEY_BYTES = 32  # Ed25519 public key
MAX_ADDR = 255
MAX_KAFKA_ADDR = 1024  # every listener's endpoint (see endpoints.py)
MAX_RACK = 255
#: the largest producer-id block one command may take (Kafka hands out 1000 at a time)
MAX_PRODUCER_ID_BLOCK = 1 << 20
PRODUCER_ID_LIMIT = (1 << 63) - 1


def _check_node_id(node_id: int) -> None:
    if node_id < 0:
        raise Rejected(ErrorCode.invalid_request, f"broker id {node_id} is negative")


def _check_text(what: str, value: str, limit: int) -> None:
    if not value:
        raise Rejected(ErrorCode.invalid_request, f"{what} is empty")
    if len(value) > limit:
        raise Rejected(ErrorCode.invalid_request, f"{what} is longer than {limit} characters")


def register(state: MetadataState, cmd: RegisterBroker) -> int:
    _check_node_id(cmd.node_id)
    if len(cmd.node_key) != NODE_KEY_BYTES:
        raise Rejected(
            ErrorCode.invalid_request,
            f"node_key is {len(cmd.node_key)} bytes, expected {NODE_KEY_BYTES}",
        )
    _check_text("kafka_addr", cmd.kafka_addr, MAX_KAFKA_ADDR)
    malformed = check_endpoints(cmd.kafka_addr)
    if malformed is not None:
        raise Rejected(ErrorCode.invalid_request, malformed)
    _check_text("mesh_addr", cmd.mesh_addr, MAX_ADDR)
    if cmd.rack is not None:
        _check_text("rack", cmd.rack, MAX_RACK)
    if cmd.epoch < 1:
        raise Rejected(ErrorCode.invalid_request, f"broker epoch {cmd.epoch} is below 1")
    holder = state.key_owner(cmd.node_key)
    if holder is not None and holder != cmd.node_id:
        raise Rejected(
            ErrorCode.duplicate_broker_registration,
            f"node key already registered by broker {holder}",
        )
    current = state.brokers.get(cmd.node_id)
    last_heartbeat = 0
    if current is not None:
        if current.node_key != cmd.node_key:
            raise Rejected(
                ErrorCode.duplicate_broker_registration,
                f"broker {cmd.node_id} is registered with another node key",
            )
        if cmd.epoch <= current.epoch:
            raise Rejected(
                ErrorCode.stale_broker_epoch,
                f"broker {cmd.node_id} epoch {cmd.epoch} is not above {current.epoch}",
            )
        last_heartbeat = current.last_heartbeat_ms
    state.brokers[cmd.node_id] = BrokerRecord(
        node_id=cmd.node_id, node_key=cmd.node_key, rack=cmd.rack,
        kafka_addr=cmd.kafka_addr, mesh_addr=cmd.mesh_addr, epoch=cmd.epoch,
        fenced=True, last_heartbeat_ms=last_heartbeat,
    )
    return cmd.epoch


def require_broker(state: MetadataState, node_id: int, epoch: int | None) -> BrokerRecord:
    broker = state.brokers.get(node_id)
    if broker is None:
        raise Rejected(ErrorCode.broker_id_not_registered, f"broker {node_id} is not registered")
    if epoch is not None and epoch != broker.epoch:
        raise Rejected(
            ErrorCode.stale_broker_epoch,
            f"broker {node_id} epoch {epoch} is not its current {broker.epoch}",
        )
    return broker


def unregister(state: MetadataState, cmd: UnregisterBroker) -> None:
    require_broker(state, cmd.node_id, None)
    del state.brokers[cmd.node_id]


def heartbeat(state: MetadataState, cmd: BrokerHeartbeat) -> None:
    broker = require_broker(state, cmd.node_id, cmd.epoch)
    if cmd.now_ms > broker.last_heartbeat_ms:  # a late or duplicated one never goes back
        state.brokers[cmd.node_id] = dataclasses.replace(broker, last_heartbeat_ms=cmd.now_ms)


def set_fenced(state: MetadataState, cmd: FenceBroker | UnfenceBroker, fenced: bool) -> int:
    """1 if the broker changed, 0 if it already was so."""
    broker = require_broker(state, cmd.node_id, cmd.epoch)
    if broker.fenced == fenced:
        return 0
    state.brokers[cmd.node_id] = dataclasses.replace(broker, fenced=fenced)
    return 1


def allocate_producer_ids(state: MetadataState, cmd: AllocateProducerIds) -> int:
    require_broker(state, cmd.node_id, None)
    if not 1 <= cmd.count <= MAX_PRODUCER_ID_BLOCK:
        raise Rejected(
            ErrorCode.invalid_request,
            f"producer id block of {cmd.count}: must be 1 to {MAX_PRODUCER_ID_BLOCK}",
        )
    first = state.next_producer_id
    if first + cmd.count > PRODUCER_ID_LIMIT:
        raise Rejected(ErrorCode.unknown_server_error, "producer ids are exhausted")
    state.next_producer_id = first + cmd.count
    return first
