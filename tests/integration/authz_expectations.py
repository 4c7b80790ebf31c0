"""What Apache Kafka answers an authenticated principal with no ACLs, API by API: the
tables test_authorization_coverage.py checks against a secured `eddy serve`, and
tests/unit/test_authorization_table.py checks cover every API the broker serves.

Every API key Eddy advertises is in REFUSED (the request, naming a topic, group or
transactional id that exists, is refused with that code, Kafka's check in words), in OPEN
(any authenticated principal may send it; the answer shows only what it may see, with the
reason), or in both (Metadata: a named topic is refused, the whole list comes back empty).
A new API added to the broker without an entry here fails both tests: nothing is left open
by omission.
"""

from __future__ import annotations

from dataclasses import dataclass

from eddy.protocol.apis import ApiKey
from eddy.protocol.errors import ErrorCode

__all__ = ["OPEN", "REFUSED", "Refused", "covered"]

TOPIC = ErrorCode.topic_authorization_failed
GROUP = ErrorCode.group_authorization_failed
CLUSTER = ErrorCode.cluster_authorization_failed
TXN = ErrorCode.transactional_id_authorization_failed


@dataclass(frozen=True, slots=True)
class Refused:
    code: ErrorCode
    check: str  # what Kafka checks (KafkaApis / ControllerApis)


REFUSED: dict[ApiKey, Refused] = {
    ApiKey.PRODUCE: Refused(TOPIC, "WRITE on the topic"),
    ApiKey.FETCH: Refused(TOPIC, "READ on the topic (per partition)"),
    ApiKey.LIST_OFFSETS: Refused(TOPIC, "DESCRIBE on the topic"),
    ApiKey.METADATA: Refused(TOPIC, "DESCRIBE on a topic asked for by name"),
    ApiKey.OFFSET_COMMIT: Refused(GROUP, "READ on the group"),
    ApiKey.OFFSET_FETCH: Refused(GROUP, "DESCRIBE on the group"),
    ApiKey.FIND_COORDINATOR: Refused(GROUP, "DESCRIBE on the group (key type GROUP)"),
    ApiKey.JOIN_GROUP: Refused(GROUP, "READ on the group"),
    ApiKey.HEARTBEAT: Refused(GROUP, "READ on the group"),
    ApiKey.LEAVE_GROUP: Refused(GROUP, "READ on the group"),
    ApiKey.SYNC_GROUP: Refused(GROUP, "READ on the group"),
    ApiKey.DESCRIBE_GROUPS: Refused(GROUP, "DESCRIBE on the group"),
    ApiKey.CREATE_TOPICS: Refused(TOPIC, "CREATE on the cluster or the topic"),
    ApiKey.DELETE_TOPICS: Refused(TOPIC, "DESCRIBE and DELETE on the topic"),
    ApiKey.DELETE_RECORDS: Refused(TOPIC, "DELETE on the topic"),
    ApiKey.INIT_PRODUCER_ID: Refused(TXN, "WRITE on the transactional id"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Refused(TOPIC, "DESCRIBE on the topic"),
    ApiKey.ADD_PARTITIONS_TO_TXN: Refused(TXN, "WRITE on the transactional id"),
    ApiKey.ADD_OFFSETS_TO_TXN: Refused(TXN, "WRITE on the transactional id"),
    ApiKey.END_TXN: Refused(TXN, "WRITE on the transactional id"),
    ApiKey.TXN_OFFSET_COMMIT: Refused(TXN, "WRITE on the transactional id, then READ on "
                                           "the group"),
    ApiKey.DESCRIBE_ACLS: Refused(CLUSTER, "DESCRIBE on the cluster"),
    ApiKey.CREATE_ACLS: Refused(CLUSTER, "ALTER on the cluster"),
    ApiKey.DELETE_ACLS: Refused(CLUSTER, "ALTER on the cluster"),
    ApiKey.DESCRIBE_CONFIGS: Refused(TOPIC, "DESCRIBE_CONFIGS on the topic (the cluster "
                                            "for a broker)"),
    ApiKey.ALTER_CONFIGS: Refused(TOPIC, "ALTER_CONFIGS on the topic (the cluster for a "
                                         "broker)"),
    ApiKey.DESCRIBE_LOG_DIRS: Refused(CLUSTER, "DESCRIBE on the cluster"),
    ApiKey.CREATE_PARTITIONS: Refused(TOPIC, "ALTER on the topic"),
    ApiKey.DELETE_GROUPS: Refused(GROUP, "DELETE on the group"),
    ApiKey.ELECT_LEADERS: Refused(CLUSTER, "ALTER on the cluster"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Refused(TOPIC, "ALTER_CONFIGS on the topic (the "
                                                     "cluster for a broker)"),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: Refused(CLUSTER, "ALTER on the cluster"),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: Refused(CLUSTER, "DESCRIBE on the cluster"),
    ApiKey.OFFSET_DELETE: Refused(GROUP, "DELETE on the group, then READ on each topic"),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: Refused(CLUSTER, "DESCRIBE on the cluster"),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: Refused(CLUSTER, "ALTER on the cluster"),
    ApiKey.DESCRIBE_QUORUM: Refused(CLUSTER, "DESCRIBE on the cluster"),
    ApiKey.DESCRIBE_PRODUCERS: Refused(TOPIC, "READ on the topic"),
    ApiKey.DESCRIBE_TRANSACTIONS: Refused(TXN, "DESCRIBE on the transactional id"),
}

#: APIs any authenticated principal may send, and why the answer gives nothing away
OPEN: dict[ApiKey, str] = {
    ApiKey.API_VERSIONS: "what the broker serves, asked before authentication anyway",
    ApiKey.SASL_HANDSHAKE: "the login itself: it names the enabled mechanisms only",
    ApiKey.SASL_AUTHENTICATE: "the login itself: the principal proves who it is",
    ApiKey.METADATA: "all topics: only those the principal may DESCRIBE (none), the "
                     "brokers (needed to connect at all)",
    ApiKey.DESCRIBE_CLUSTER: "no check (Kafka's): the brokers and cluster id Metadata gives "
                             "too; authorized operations when asked: none",
    ApiKey.LIST_GROUPS: "filtered: the groups the principal may DESCRIBE (none) unless it "
                        "may DESCRIBE the cluster",
    ApiKey.LIST_TRANSACTIONS: "filtered: the transactional ids the principal may DESCRIBE "
                              "(none)",
}


def covered() -> set[ApiKey]:
    return set(REFUSED) | set(OPEN)
