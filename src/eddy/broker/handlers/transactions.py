"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit; DescribeProducers,
DescribeTransactions and ListTransactions.

With an authorizer each checks what Kafka's KafkaApis checks first: WRITE on the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn WRITE on each
topic (a refused or unknown partition fails the request: the others are
OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn and TxnOffsetCommit READ on the group
(GROUP_AUTHORIZATION_FAILED), TxnOffsetCommit READ on each topic too. DescribeProducers needs
READ per topic; DescribeTransactions DESCRIBE per transactional id (its topics are shown only
where the principal may DESCRIBE them); ListTransactions lists only the ids it may DESCRIBE.
"""

from __future__ import annotations

import datetime
from typing import Any

from eddy.broker.broker import Broker
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed
from eddy.telemetry.tracing import span

_NO_TIME = datetime.timedelta(0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _at(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _may(broker: Broker, req: Request, op: AclOperation, rtype: ResourceType, name: str
         ) -> bool:
    return broker.authorizer is None or allowed(broker, req, op, rtype, name)


def _txn_refusal(broker: Broker, req: Request, txn_id: str, group_id: str | None = None
                 ) -> ErrorCode | None:
    """WRITE on the transactional id, then READ on the group (None: both allowed)."""
    if not _may(broker, req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return ErrorCode.transactional_id_authorization_failed
    if group_id is not None and not _may(broker, req, AclOperation.READ, ResourceType.GROUP,
                                         group_id):
        return ErrorCode.group_authorization_failed
    return None


def _partition_refusals(broker: Broker, req: Request, parts: list[tuple[str, int]]
                        ) -> dict[tuple[str, int], ErrorCode] | None:
    """AddPartitionsToTxn's topic checks (None: every partition may be added): WRITE per
    topic, then the partition must exist; any failure fails the whole request."""
    if broker.authorizer is None:
        return None
    denied = {name for name in {n for n, _ in parts}
              if not allowed(broker, req, AclOperation.WRITE, ResourceType.TOPIC, name)}
    if not denied:
        return None  # the coordinator checks the partitions exist
    out: dict[tuple[str, int], ErrorCode] = {}
    for name, index in parts:
        count = None if name in denied else broker.partition_count(name)
        out[(name, index)] = (
            ErrorCode.topic_authorization_failed if name in denied
            else ErrorCode.unknown_topic_or_partition if count is None or not 0 <= index < count
            else ErrorCode.operation_not_attempted)
    return out


async def add_partitions_to_txn(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, req.api_version)
    parts = [(t.name, p) for t in b.v3_and_below_topics for p in t.partitions]
    txn_id = b.v3_and_below_transactional_id
    refused = _txn_refusal(broker, req, txn_id)
    codes = (dict.fromkeys(parts, refused) if refused is not None
             else _partition_refusals(broker, req, parts))
    if codes is None:
        with span("eddy.broker.txn.add-partitions", transactional_id=txn_id):
            codes = await broker.transactions.add_partitions(
                txn_id, b.v3_and_below_producer_id, b.v3_and_below_producer_epoch, parts)
    return build(
        mod.AddPartitionsToTxnResponse,
        throttle_time=_NO_TIME,
        results_by_topic_v3_and_below=tuple(
            build(mod.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
                build(mod.AddPartitionsToTxnPartitionResult, partition_index=p,
                      partition_error_code=codes[(t.name, p)])
                for p in t.partitions))
            for t in b.v3_and_below_topics
        ),
    )


async def add_offsets_to_txn(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.ADD_OFFSETS_TO_TXN, req.api_version)
    code = _txn_refusal(broker, req, b.transactional_id, b.group_id)
    if code is None:
        code = await broker.transactions.add_offsets(b.transactional_id, b.producer_id,
                                                     b.producer_epoch, b.group_id)
    return build(mod.AddOffsetsToTxnResponse, throttle_time=_NO_TIME, error_code=code)


async def end_txn(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.END_TXN, req.api_version)
    refused = _txn_refusal(broker, req, b.transactional_id)
    if refused is not None:
        return build(mod.EndTxnResponse, throttle_time=_NO_TIME, error_code=refused)
    with span("eddy.broker.txn.end", transactional_id=b.transactional_id,
              committed=b.committed):
        code = await broker.transactions.end_txn(b.transactional_id, b.producer_id,
                                                 b.producer_epoch, b.committed)
    return build(mod.EndTxnResponse, throttle_time=_NO_TIME, error_code=code)


async def txn_offset_commit(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.TXN_OFFSET_COMMIT, req.api_version)
    codes: dict[tuple[str, int], ErrorCode] = {}
    offsets = []
    refused = _txn_refusal(broker, req, b.transactional_id, b.group_id)
    for t in b.topics:
        if refused is None and not _may(broker, req, AclOperation.READ, ResourceType.TOPIC,
                                        t.name):
            codes.update({(t.name, p.partition_index): ErrorCode.topic_authorization_failed
                          for p in t.partitions})
            continue
        count = broker.partition_count(t.name) or 0
        for p in t.partitions:
            if refused is not None:
                codes[(t.name, p.partition_index)] = refused
            elif not 0 <= p.partition_index < count:
                codes[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                offsets.append((t.name, p.partition_index, p.committed_offset,
                                getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    code = ErrorCode.none
    if offsets:
        code = await broker.transactions.txn_offset_commit(
            b.transactional_id, b.producer_id, b.producer_epoch, b.group_id, offsets)
    return build(
        mod.TxnOffsetCommitResponse,
        throttle_time=_NO_TIME,
        topics=tuple(
            build(mod.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(mod.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=codes.get((t.name, p.partition_index), code))
                for p in t.partitions))
            for t in b.topics
        ),
    )


async def describe_producers(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_PRODUCERS, req.api_version)
    topics = []
    for t in req.body.topics:
        parts = []
        denied = not _may(broker, req, AclOperation.READ, ResourceType.TOPIC, t.name)
        for index in t.partition_indexes:
            plog = None if denied else broker.logs.partition(t.name, index)
            if denied:
                parts.append(build(mod.PartitionResponse, partition_index=index,
                                   error_code=ErrorCode.topic_authorization_failed,
                                   error_message=None, active_producers=()))
                continue
            if plog is None:
                parts.append(build(mod.PartitionResponse, partition_index=index,
                                   error_code=ErrorCode.unknown_topic_or_partition,
                                   error_message=None, active_producers=()))
                continue
            state = broker.producers.of(plog)
            parts.append(build(
                mod.PartitionResponse, partition_index=index, error_code=ErrorCode.none,
                error_message=None,
                active_producers=tuple(
                    build(mod.ProducerState, producer_id=e.producer_id,
                          producer_epoch=e.epoch, last_sequence=e.last_seq,
                          last_timestamp=e.last_timestamp, coordinator_epoch=-1,
                          current_txn_start_offset=e.txn_first_offset)
                    for e in state.producers.values()
                ),
            ))
        topics.append(build(mod.TopicResponse, name=t.name, partitions=tuple(parts)))
    return build(mod.DescribeProducersResponse, throttle_time=_NO_TIME, topics=tuple(topics))


async def describe_transactions(broker: Broker, req: Request) -> Any:
    mod = response_module(ApiKey.DESCRIBE_TRANSACTIONS, req.api_version)
    txns = broker.transactions.coordinator.txns
    states = []
    for txn_id in req.body.transactional_ids:
        if not _may(broker, req, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            states.append(build(mod.TransactionState,
                                error_code=ErrorCode.transactional_id_authorization_failed,
                                transactional_id=txn_id, transaction_state="",
                                transaction_timeout=datetime.timedelta(0),
                                transaction_start_time=_at(-1), producer_id=-1, producer_epoch=-1,
                                topics=()))
            continue
        meta = txns.get(txn_id) if broker.transactions.serving else None
        if meta is None:
            missing = (ErrorCode.transactional_id_not_found if broker.transactions.serving
                       else ErrorCode.not_coordinator)  # in a cluster: ask the coordinator
            states.append(build(mod.TransactionState, error_code=missing,
                                transactional_id=txn_id, transaction_state="",
                                transaction_timeout=datetime.timedelta(0),
                                transaction_start_time=_at(-1), producer_id=-1, producer_epoch=-1,
                                topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        for name, index in sorted(meta.partitions):
            if _may(broker, req, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                by_topic.setdefault(name, []).append(index)
        states.append(build(
            mod.TransactionState, error_code=ErrorCode.none, transactional_id=txn_id,
            transaction_state=meta.state,
            transaction_timeout=datetime.timedelta(milliseconds=meta.timeout_ms),
            transaction_start_time=_at(meta.start_ms), producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            topics=tuple(build(mod.TopicData, topic=n, partitions=tuple(p))
                         for n, p in by_topic.items()),
        ))
    return build(mod.DescribeTransactionsResponse, throttle_time=_NO_TIME,
                 transaction_states=tuple(states))


KNOWN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                "CompleteAbort", "PrepareEpochFence", "Dead")


async def list_transactions(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.LIST_TRANSACTIONS, req.api_version)
    states = set(b.state_filters)
    pids = set(b.producer_id_filters)
    min_duration = int(getattr(b, "duration_filter", -1))
    now = broker.clock.now_ms()
    out = []
    # in a cluster only the coordinator answers with transactions (clients ask every broker)
    served = broker.transactions.coordinator.txns if broker.transactions.serving else {}
    for txn_id, meta in sorted(served.items()):
        if states and meta.state not in states:
            continue
        if pids and meta.producer_id not in pids:
            continue
        if min_duration >= 0 and (meta.state != "Ongoing" or now - meta.start_ms < min_duration):
            continue
        if not _may(broker, req, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            continue
        out.append(build(mod.TransactionState, transactional_id=txn_id,
                         producer_id=meta.producer_id, transaction_state=meta.state))
    return build(mod.ListTransactionsResponse, throttle_time=_NO_TIME, error_code=ErrorCode.none,
                 unknown_state_filters=tuple(s for s in b.state_filters if s not in KNOWN_STATES),
                 transaction_states=tuple(out))
