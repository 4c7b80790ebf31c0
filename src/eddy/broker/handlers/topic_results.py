"""What CreateTopics and CreatePartitions answers share, clustered or not."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from eddy.broker.handlers.broker_configs import topic_synonyms
from eddy.log.config import TOPIC_CONFIGS
from eddy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

#: the most partitions one CreateTopics or CreatePartitions request may add (Kafka 4.0)
MAX_PARTITIONS_PER_REQUEST = 10_000


def too_many_partitions(total: int) -> KafkaError | None:
    """Kafka (KAFKA-17870) fails a whole request that would create more than 10,000
    partitions: creating them one by one would hold the broker for minutes."""
    if total <= MAX_PARTITIONS_PER_REQUEST:
        return None
    return KafkaError(ErrorCode.policy_violation,
                      f"Excessively large number of partitions per request ({total}, at "
                      f"most {MAX_PARTITIONS_PER_REQUEST}).")


def created_configs(broker: Broker, mod: Any, overrides: dict[str, str]) -> tuple[Any, ...]:
    """CreateTopics v5+: every config of the new topic and where its value comes from."""
    if not hasattr(mod, "CreatableTopicConfigs"):
        return ()
    out = []
    for name in sorted(TOPIC_CONFIGS):
        _, value, source = topic_synonyms(broker, name, overrides)[0]
        out.append(mod.CreatableTopicConfigs(name=name, value=value, read_only=False,
                                             config_source=source, is_sensitive=False))
    return tuple(out)


def creation_partitions(body: Any, default: int) -> int:
    """How many partitions a CreateTopics request would create in all (-1: ``default``)."""
    return sum(len(t.assignments) if t.assignments
               else default if t.num_partitions == -1 else max(t.num_partitions, 0)
               for t in body.topics)


def deletion_targets(body: Any) -> list[tuple[str | None, uuid.UUID | None]]:
    """DeleteTopics' (name, id) pairs: names only before v6, either from v6."""
    if hasattr(body, "topic_names"):
        return [(n, None) for n in body.topic_names]
    return [(t.name, t.topic_id) for t in body.topics]
