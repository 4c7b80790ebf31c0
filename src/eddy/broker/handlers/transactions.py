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


async def add_partitions_to_txn(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, req.api_version)
    parts = [(t.name, p) for t in b.v3_and_below_topics for p in t.partitions]
    with span("eddy.broker.txn.add-partitions", transactional_id=b.v3_and_below_transactional_id):
        codes = broker.transactions.add_partitions(
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
    code = broker.transactions.add_offsets(b.transactional_id, b.producer_id, b.producer_epoch,
                                           b.group_id)
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
    logs = broker.logs
    codes: dict[tuple[str, int], ErrorCode] = {}
    offsets = []
    for t in b.topics:
        for p in t.partitions:
            if logs.partition(t.name, p.partition_index) is None:
                codes[(t.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                offsets.append((t.name, p.partition_index, p.committed_offset,
                                getattr(p, "committed_leader_epoch", -1), p.committed_metadata))
    code = ErrorCode.none
    if offsets:
        code = broker.transactions.txn_offset_commit(
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
