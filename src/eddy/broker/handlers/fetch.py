"""Fetch: byte ranges straight from segment files, with long-polling on min_bytes.

With an authorizer, as Kafka's KafkaApis: a consumer needs READ on each topic (else its
partitions are TOPIC_AUTHORIZATION_FAILED, whether or not the topic exists; an unknown topic
id stays UNKNOWN_TOPIC_ID, ids not being secret); a follower (replica id >= 0) needs
CLUSTER_ACTION on the cluster, else every partition is TOPIC_AUTHORIZATION_FAILED. The
refused partitions are answered like any other failed one; the rest keep the zero-copy
path."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers.leader_hints import endpoints, leader_hint
from eddy.log.partition import FetchSlice, PartitionLog
from eddy.protocol.codec import Encoded, Request
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.fetch_codec import (
    FetchPartition,
    FetchTopic,
    NodeEndpoint,
    encode_fetch_response,
)
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed, cluster_allowed
from eddy.telemetry import tracing

READ_COMMITTED = 1


@dataclass(slots=True)
class _Wanted:
    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    offset: int
    max_bytes: int
    leader_epoch: int
    plog: PartitionLog | None
    error: ErrorCode


def _resolve(broker: Broker, body: Any, version: int) -> list[list[_Wanted]]:
    logs = broker.logs
    topics: list[list[_Wanted]] = []
    for ft in body.topics:
        if version >= 13:
            t = logs.by_id.get(ft.topic_id)
            missing = ErrorCode.unknown_topic_id
            name, tid = (t.name if t else None), ft.topic_id
        else:
            t = logs.get(ft.topic)
            missing = ErrorCode.unknown_topic_or_partition
            name, tid = ft.topic, None
        row: list[_Wanted] = []
        for fp in ft.partitions:
            plog = t.partitions[fp.partition] if t and 0 <= fp.partition < len(
                t.partitions) else None
            if t is not None and plog is None:
                err = ErrorCode.unknown_topic_or_partition
            else:
                err = ErrorCode.none if plog is not None else missing
            if plog is not None and (refused := broker.partition_error(plog.topic, fp.partition)):
                err, plog = refused, None
            row.append(_Wanted(name, tid, fp.partition, fp.fetch_offset, fp.partition_max_bytes,
                               getattr(fp, "current_leader_epoch", -1), plog, err))
        topics.append(row)
    return topics


def _authorize(broker: Broker, req: Request, topics: list[list[_Wanted]], replica: int
               ) -> None:
    """Refuse what the principal may not fetch: one decision per topic (or one for a
    follower's whole request)."""
    if replica >= 0:
        if cluster_allowed(broker, req, AclOperation.CLUSTER_ACTION):
            return
        for row in topics:
            for w in row:
                w.error, w.plog = ErrorCode.topic_authorization_failed, None
        return
    for row in topics:
        name = row[0].topic if row else None
        if name is None:  # an empty topic entry, or an unknown id: nothing to reveal
            continue
        if not allowed(broker, req, AclOperation.READ, ResourceType.TOPIC, name):
            for w in row:
                w.error, w.plog = ErrorCode.topic_authorization_failed, None


def replica_id_of(body: Any, version: int) -> int:
    """The follower a Fetch comes from (-1: a consumer): ``replica_id`` up to v14, the
    ``replica_state`` tagged field from v15 (KIP-903)."""
    if version >= 15:
        state = getattr(body, "replica_state", None)
        return int(getattr(state, "replica_id", -1)) if state is not None else -1
    return int(getattr(body, "replica_id", -1))


def _follower_fetched(broker: Broker, topics: list[list[_Wanted]], replica: int) -> None:
    """A follower's fetch offsets are its log ends: the leader records them first (the high
    watermark may move), and refuses the partitions it does not lead for that follower."""
    replication = broker.replication
    for row in topics:
        for w in row:
            if w.plog is None or w.error != ErrorCode.none:
                continue
            if replication is None:
                w.error, w.plog = ErrorCode.not_leader_or_follower, None
                continue
            if w.leader_epoch >= 0 and w.leader_epoch != w.plog.leader_epoch:
                continue  # answered FENCED/UNKNOWN_LEADER_EPOCH by the read
            code = replication.follower_fetched(w.plog, replica, w.offset, w.leader_epoch)
            if code != ErrorCode.none:
                w.error, w.plog = code, None


def _read_all(
    broker: Broker, topics: list[list[_Wanted]], max_bytes: int, read_committed: bool,
    replica: bool = False,
) -> tuple[list[list[tuple[_Wanted, ErrorCode, FetchSlice | bytes]]], int]:
    budget = max_bytes
    total = 0
    first = True
    out: list[list[tuple[_Wanted, ErrorCode, FetchSlice | bytes]]] = []
    for row in topics:
        res_row: list[tuple[_Wanted, ErrorCode, FetchSlice | bytes]] = []
        for w in row:
            plog = w.plog
            if w.error != ErrorCode.none or plog is None:
                res_row.append((w, w.error, b""))
                continue
            if w.leader_epoch >= 0 and w.leader_epoch != plog.leader_epoch:
                code = (ErrorCode.fenced_leader_epoch if w.leader_epoch < plog.leader_epoch
                        else ErrorCode.unknown_leader_epoch)
                res_row.append((w, code, b""))
                continue
            if replica:  # a follower copies the whole log, not only what is committed
                limit = plog.log_end_offset
            elif read_committed:
                limit = broker.producers.last_stable_offset(plog)
            else:
                limit = plog.high_watermark
            try:
                sl = plog.read(w.offset, min(w.max_bytes, budget), limit, min_one=first)
            except KafkaError as exc:
                res_row.append((w, exc.code, b""))
                continue
            data: FetchSlice | bytes = sl if sl is not None else b""
            if len(data):
                first = False
                budget = max(budget - len(data), 0)
                total += len(data)
            res_row.append((w, ErrorCode.none, data))
        out.append(res_row)
    return out, total


async def handle(broker: Broker, req: Request) -> Any:
    if not tracing.enabled or replica_id_of(req.body, req.api_version) >= 0:
        return await _handle(broker, req)  # the hot path (and followers): no span
    with tracing.fetch_span(req.body, req.api_version):
        return await _handle(broker, req)


async def _handle(broker: Broker, req: Request) -> Any:
    body = req.body
    version = req.api_version
    replica = replica_id_of(body, version)
    read_committed = replica < 0 and getattr(body, "isolation_level", 0) == READ_COMMITTED
    topics = _resolve(broker, body, version)
    if broker.authorizer is not None:
        _authorize(broker, req, topics, replica)
    if replica >= 0:
        _follower_fetched(broker, topics, replica)
    results, total = _read_all(broker, topics, body.max_bytes, read_committed, replica >= 0)
    wait_s = body.max_wait.total_seconds()
    # Kafka answers at once when any partition failed (errorReadingData)
    failed = any(code != ErrorCode.none for row in results for _, code, _ in row)
    if total < body.min_bytes and wait_s > 0 and not failed:
        keys = [(w.plog.topic, w.plog.partition) for row in topics for w in row if w.plog]
        deadline = broker.clock.now_ms() + wait_s * 1000
        # each wake-up re-reads; bounded by the deadline and by a round count
        for _ in range(10_000):
            remaining = (deadline - broker.clock.now_ms()) / 1000
            if remaining <= 0 or not keys:
                break
            if not await broker.notifier.wait_any(keys, remaining):
                break
            results, total = _read_all(broker, topics, body.max_bytes, read_committed,
                                       replica >= 0)
            if total >= body.min_bytes:
                break
    topics_out = []
    hinted: set[int] = set()
    counts = broker.metrics.counts
    for ft, row in zip(body.topics, results, strict=True):
        partitions = []
        sent = 0
        for w, code, data in row:
            sent += len(data)
            plog = w.plog
            hwm = plog.high_watermark if plog is not None else -1
            lso = broker.producers.last_stable_offset(plog) if plog is not None else -1
            aborted = None
            if read_committed:
                aborted = []
                if plog is not None and len(data):
                    # every aborted transaction overlapping the bytes returned
                    aborted = broker.producers.of(plog).aborted_in(w.offset, lso)
            hint = leader_hint(broker, w.topic, w.partition, code) if version >= 12 else None
            if hint is not None:
                hinted.add(hint[0])
            partitions.append(
                FetchPartition(
                    index=w.partition,
                    error_code=code,
                    high_watermark=hwm,
                    last_stable_offset=lso,
                    log_start_offset=plog.log_start_offset if plog is not None else -1,
                    aborted=aborted,
                    records=data,
                    current_leader=hint,
                )
            )
        if sent and row[0][0].topic is not None:
            counts.fetch_sent(row[0][0].topic, sent)
        topics_out.append(
            FetchTopic(getattr(ft, "topic", None), getattr(ft, "topic_id", None), partitions)
        )
    return Encoded(encode_fetch_response(version, req.correlation_id, topics_out,
                                         node_endpoints=[NodeEndpoint(*e) for e in
                                                         endpoints(broker, hinted)]))

