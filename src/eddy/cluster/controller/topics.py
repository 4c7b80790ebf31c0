"""Topic creation and partition growth: checks and replica placement, producing the
``CreateTopic`` / ``CreatePartitions`` commands (the state checks them again on apply:
two creations of one name racing through Raft end with one TOPIC_ALREADY_EXISTS)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from eddy.cluster.controller.config import ControllerError
from eddy.cluster.placement import HashRing, PlacementError
from eddy.log.manager import validate_topic_name
from eddy.metadata.commands import CreatePartitions, CreateTopic, DeleteTopic
from eddy.metadata.configs import check_topic_overrides, dict_to_entries
from eddy.metadata.result import Rejected
from eddy.metadata.state import MetadataState
from eddy.metadata.topics import MAX_PARTITIONS, TOPIC_ID_BYTES, collision_key
from eddy.protocol.errors import ErrorCode, KafkaError

__all__ = ["plan_create_partitions", "plan_create_topic", "plan_delete_topic"]

#: attempts at a fresh topic id before giving up (a 128-bit source never needs a second)
_ID_ATTEMPTS = 8


def _resolve(value: int | None, default: int) -> int:
    """Kafka's CreateTopics: -1 (or absent) means the broker default."""
    return default if value is None or value == -1 else value


def _new_topic_id(state: MetadataState, id_source: Callable[[], bytes]) -> bytes:
    for _ in range(_ID_ATTEMPTS):
        topic_id = id_source()
        if len(topic_id) != TOPIC_ID_BYTES:
            raise ValueError(f"the topic id source gave {len(topic_id)} bytes, not 16")
        if any(topic_id) and topic_id not in state.topic_ids:
            return topic_id
    raise ControllerError(ErrorCode.unknown_server_error, "no unused topic id was found")


def plan_create_topic(
    state: MetadataState, ring: HashRing, nodes: Mapping[int, str | None], name: str,
    partitions: int | None, replication_factor: int | None, configs: Mapping[str, str],
    defaults: tuple[int, int], id_source: Callable[[], bytes],
) -> CreateTopic:
    """``nodes``: the live brokers and their racks; ``defaults``: (partitions, rf)."""
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        raise ControllerError(exc.code, f"name: {exc.message}") from None
    if name in state.topics:
        raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    other = state.topic_collisions.get(collision_key(name))
    if other is not None:
        raise ControllerError(ErrorCode.invalid_topic_exception,
                              f"Topic '{name}' collides with existing topic: {other}")
    count = _resolve(partitions, defaults[0])
    if not 1 <= count <= MAX_PARTITIONS:
        raise ControllerError(ErrorCode.invalid_partitions,
                              f"partitions: {count} is not between 1 and {MAX_PARTITIONS}")
    rf = _resolve(replication_factor, defaults[1])
    entries = dict_to_entries(configs)
    try:
        check_topic_overrides(entries)
    except Rejected as exc:
        raise ControllerError(exc.code, f"configs: {exc.message}") from None
    try:
        placed = ring.place(name, count, rf, nodes)
    except PlacementError as exc:
        raise ControllerError(exc.code, exc.message) from None
    return CreateTopic(name, _new_topic_id(state, id_source),
                       tuple(tuple(r) for r in placed), entries)


def plan_create_partitions(state: MetadataState, ring: HashRing,
                           nodes: Mapping[int, str | None], name: str,
                           total: int) -> CreatePartitions:
    """Grow ``name`` to ``total`` partitions; the new ones are placed on ``nodes`` with the
    topic's replication factor."""
    topic = state.topics.get(name)
    if topic is None:
        raise ControllerError(ErrorCode.unknown_topic_or_partition,
                              f"Topic '{name}' does not exist.")
    if total > MAX_PARTITIONS:
        raise ControllerError(ErrorCode.invalid_partitions,
                              f"count: {total} is above {MAX_PARTITIONS}")
    existing = [part.replicas for part in topic.partitions]
    try:
        placed = ring.reassign_for_new_partitions(existing, name, total, nodes)
    except PlacementError as exc:
        raise ControllerError(exc.code, exc.message) from None
    return CreatePartitions(name, tuple(tuple(r) for r in placed))


def plan_delete_topic(state: MetadataState, name: str, topic_id: bytes | None) -> DeleteTopic:
    topic = state.topics.get(name)
    if topic is None:
        raise ControllerError(ErrorCode.unknown_topic_or_partition,
                              f"Topic '{name}' does not exist.")
    if topic_id is not None and topic_id != topic.topic_id:
        raise ControllerError(ErrorCode.unknown_topic_id,
                              f"topic_id: topic '{name}' has another topic id")
    return DeleteTopic(name, topic_id)
