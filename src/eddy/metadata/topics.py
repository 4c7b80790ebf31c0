"""Topic commands: CreateTopic, DeleteTopic, CreatePartitions, and the checks of a replica
assignment they share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from eddy.log.manager import INTERNAL_TOPICS, validate_topic_name
from eddy.metadata.configs import check_topic_overrides, dict_to_entries
from eddy.metadata.records import PartitionRecord, TopicRecord
from eddy.metadata.result import Rejected
from eddy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from eddy.metadata.commands import CreatePartitions, CreateTopic, DeleteTopic
    from eddy.metadata.state import MetadataState

TOPIC_ID_BYTES = 16
#: the most partitions a topic may have (bounds one command's work and the state's size)
MAX_PARTITIONS = 100_000


@dataclass(slots=True)
class TopicState:
    """A topic as the state holds it (mutable; ``record()`` is its frozen form)."""

    name: str
    topic_id: bytes
    partitions: list[PartitionRecord]
    configs: dict[str, str]

    def record(self) -> TopicRecord:
        return TopicRecord(self.name, self.topic_id, tuple(self.partitions),
                           dict_to_entries(self.configs))

    @staticmethod
    def from_record(rec: TopicRecord) -> TopicState:
        return TopicState(rec.name, rec.topic_id, list(rec.partitions),
                          {e.name: e.value for e in rec.configs})


def collision_key(name: str) -> str:
    """Kafka refuses topics whose names differ only by '.' against '_' (metric names)."""
    return name.replace(".", "_")


def new_partitions(
    state: MetadataState, assignments: tuple[tuple[int, ...], ...], first_index: int,
    replication_factor: int | None,
) -> list[PartitionRecord]:
    """Partition records for ``assignments``: every replica a registered broker, distinct,
    the same count in each; the ISR is the unfenced replicas, the leader the first."""
    out: list[PartitionRecord] = []
    rf = replication_factor
    for offset, replicas in enumerate(assignments):
        index = first_index + offset
        if not replicas:
            raise Rejected(ErrorCode.invalid_replica_assignment,
                           f"partition {index} has no replicas")
        if rf is None:
            rf = len(replicas)
        elif len(replicas) != rf:
            raise Rejected(
                ErrorCode.invalid_replica_assignment,
                f"partition {index} has {len(replicas)} replicas; the others have {rf}",
            )
        if len(set(replicas)) != len(replicas):
            raise Rejected(ErrorCode.invalid_replica_assignment,
                           f"partition {index} names a replica twice: {list(replicas)}")
        live: list[int] = []
        for node in replicas:
            broker = state.brokers.get(node)
            if broker is None:
                raise Rejected(ErrorCode.invalid_replica_assignment,
                               f"partition {index}: broker {node} is not registered")
            if not broker.fenced:
                live.append(node)
        if not live:
            raise Rejected(
                ErrorCode.invalid_replica_assignment,
                f"partition {index}: every replica ({list(replicas)}) is fenced",
            )
        out.append(PartitionRecord(replicas=tuple(replicas), leader=live[0], leader_epoch=0,
                                   isr=tuple(live), partition_epoch=0))
    return out


def _check_count(count: int) -> None:
    if count > MAX_PARTITIONS:
        raise Rejected(ErrorCode.invalid_partitions,
                       f"a topic may have at most {MAX_PARTITIONS} partitions, not {count}")


def create_topic(state: MetadataState, cmd: CreateTopic) -> None:
    try:
        validate_topic_name(cmd.name)
    except KafkaError as exc:
        raise Rejected(exc.code, exc.message) from None
    if cmd.name in state.topics:
        raise Rejected(ErrorCode.topic_already_exists, f"Topic '{cmd.name}' already exists.")
    other = state.topic_collisions.get(collision_key(cmd.name))
    if other is not None:
        raise Rejected(
            ErrorCode.invalid_topic_exception,
            f"Topic '{cmd.name}' collides with existing topic: {other}",
        )
    if len(cmd.topic_id) != TOPIC_ID_BYTES or not any(cmd.topic_id):
        raise Rejected(ErrorCode.invalid_request,
                       "topic_id must be 16 bytes and not all zero")
    if cmd.topic_id in state.topic_ids:
        raise Rejected(ErrorCode.inconsistent_topic_id,
                       f"topic id is already used by {state.topic_ids[cmd.topic_id]}")
    if not cmd.partitions:
        raise Rejected(ErrorCode.invalid_partitions,
                       "Number of partitions must be larger than 0.")
    _check_count(len(cmd.partitions))
    configs = check_topic_overrides(cmd.configs)
    partitions = new_partitions(state, cmd.partitions, 0, None)
    state.add_topic(TopicState(cmd.name, cmd.topic_id, partitions, configs))


def delete_topic(state: MetadataState, cmd: DeleteTopic) -> None:
    topic = state.require_topic(cmd.name)
    if cmd.topic_id is not None and cmd.topic_id != topic.topic_id:
        raise Rejected(ErrorCode.unknown_topic_id,
                       f"topic '{cmd.name}' has another topic id")
    if cmd.name in INTERNAL_TOPICS:
        raise Rejected(ErrorCode.invalid_request,
                       f"internal topic '{cmd.name}' cannot be deleted")
    state.remove_topic(cmd.name)


def create_partitions(state: MetadataState, cmd: CreatePartitions) -> None:
    topic = state.require_topic(cmd.name)
    if not cmd.new_assignments:
        raise Rejected(
            ErrorCode.invalid_partitions,
            f"Topic currently has {len(topic.partitions)} partitions; no new ones were given.",
        )
    _check_count(len(topic.partitions) + len(cmd.new_assignments))
    rf = len(topic.partitions[0].replicas) if topic.partitions else None
    added = new_partitions(state, cmd.new_assignments, len(topic.partitions), rf)
    topic.partitions.extend(added)
