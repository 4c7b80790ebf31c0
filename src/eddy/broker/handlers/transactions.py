"""AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit."""

from __future__ import annotations

import datetime
from typing import Any

from eddy.broker.broker import Broker
from eddy.observe.tracing import span
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode

_NO_TIME = datetime.timedelta(0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _at(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


async def add_partitions_to_txn(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, req.api_version)
    parts = [(t.name, p) for t in b.v3_and_below_topics for p in t.partitions]
    with span("eddy.broker.txn.add-partitions", transactional_id=b.v3_and_below_transactional_id):
        codes = await broker.transactions.add_partitions(
            b.v3_and_below_transactional_id, b.v3_and_below_producer_id,
            b.v3_and_below_producer_epoch, parts)
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
    code = await broker.transactions.add_offsets(b.transactional_id, b.producer_id,
                                                 b.producer_epoch, b.group_id)
    return build(mod.AddOffsetsToTxnResponse, throttle_time=_NO_TIME, error_code=code)


async def end_txn(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.END_TXN, req.api_version)
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
    for t in b.topics:
        count = broker.partition_count(t.name) or 0
        for p in t.partitions:
            if not 0 <= p.partition_index < count:
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
        for index in t.partition_indexes:
            plog = broker.logs.partition(t.name, index)
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
        out.append(build(mod.TransactionState, transactional_id=txn_id,
                         producer_id=meta.producer_id, transaction_state=meta.state))
    return build(mod.ListTransactionsResponse, throttle_time=_NO_TIME, error_code=ErrorCode.none,
                 unknown_state_filters=tuple(s for s in b.state_filters if s not in KNOWN_STATES),
                 transaction_states=tuple(out))
