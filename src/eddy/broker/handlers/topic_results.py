"""What CreateTopics, DeleteTopics and CreatePartitions answers share, clustered or not,
and the authorization refusals the admin handlers share (Kafka's codes and messages)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from eddy.broker.handlers.broker_configs import topic_synonyms
from eddy.log.config import TOPIC_CONFIGS
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed, allowed_any

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.protocol.codec import Request

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


#: Kafka's messages for the authorization codes (Errors.*.message)
TOPIC_DENIED = "Topic authorization failed."
CLUSTER_DENIED = "Cluster authorization failed."
GROUP_DENIED = "Group authorization failed."


def topic_denied() -> KafkaError:
    return KafkaError(ErrorCode.topic_authorization_failed, TOPIC_DENIED)


def cluster_denied() -> KafkaError:
    return KafkaError(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)


def may_topic(node: Any, req: Request, op: AclOperation, name: str) -> bool:
    return allowed(node, req, op, ResourceType.TOPIC, name)


def unknown_topic_id(node: Any, req: Request, topic_id: uuid.UUID) -> KafkaError:
    """DeleteTopics of an id no topic has: UNKNOWN_TOPIC_ID to a principal that may describe
    some topic, TOPIC_AUTHORIZATION_FAILED to one with no rights on topics at all (it learns
    nothing about which ids exist)."""
    if allowed_any(node, req, AclOperation.DESCRIBE, ResourceType.TOPIC):
        return KafkaError(ErrorCode.unknown_topic_id, f"unknown topic id {topic_id}")
    return topic_denied()


def deletion_refused(node: Any, req: Request, name: str, by_id: bool, exists: bool
                     ) -> tuple[str | None, KafkaError] | None:
    """Kafka's authorization of one DeleteTopics entry (its ControllerApis): the name to
    answer with and the refusal, or None when the deletion may go on. A topic given by id
    that the principal may not DESCRIBE is answered without its name; one given by name is
    TOPIC_AUTHORIZATION_FAILED without DESCRIBE, UNKNOWN_TOPIC_OR_PARTITION (left to the
    caller) when it does not exist, and TOPIC_AUTHORIZATION_FAILED without DELETE."""
    if not may_topic(node, req, AclOperation.DESCRIBE, name):
        return (None if by_id else name), topic_denied()
    if not exists:
        return None
    if not may_topic(node, req, AclOperation.DELETE, name):
        return name, topic_denied()
    return None


def creation_refused(node: Any, req: Request, name: str, cluster_create: bool
                     ) -> KafkaError | None:
    """CreateTopics: CREATE on the cluster (``cluster_create``) or on the topic."""
    if cluster_create or may_topic(node, req, AclOperation.CREATE, name):
        return None
    return KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")


def configs_shown(node: Any, req: Request, name: str) -> bool:
    """Whether a created topic's configs (and its partition count and replication factor)
    go in the CreateTopics answer: DESCRIBE_CONFIGS on the topic, as Kafka (else
    TOPIC_AUTHORIZATION_FAILED in ``topic_config_error_code``)."""
    return may_topic(node, req, AclOperation.DESCRIBE_CONFIGS, name)
