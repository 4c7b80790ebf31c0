"""Produce: validate batches without decoding records, append, acknowledge per acks.

With an authorizer, as Kafka's KafkaApis: a request carrying transactional batches needs
WRITE on its transactional id (else every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
and each topic WRITE (else its partitions are TOPIC_AUTHORIZATION_FAILED, whether or not the
topic exists). One cached decision per topic per request, none per record."""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kio.schema.types import BrokerId
from kio.static.primitive import i32

from eddy.broker.broker import Broker
from eddy.broker.handlers.leader_hints import endpoints, leader_hint
from eddy.log.partition import PartitionLog
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import CloseConnection, ErrorCode, KafkaError
from eddy.protocol.record_batch import (
    LOG_OVERHEAD,
    TRANSACTIONAL_BIT,
    ValidatedBatches,
    validate_batches,
)
from eddy.protocol.records import CorruptRecordError, batch_payload, iter_records
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed
from eddy.telemetry import tracing

log = logging.getLogger(__name__)

#: per-record errors listed in a Produce response (the count in the message is the total)
MAX_RECORD_ERRORS = 1000

ZSTD = 4
_ATTRIBUTES = 21  # where a v2 batch's attributes (i16) start
_MAGIC = 16
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _append(broker: Broker, plog: PartitionLog, records: bytes | None, version: int
            ) -> tuple[int, int, int]:
    """Validate and append one partition's records; returns (base offset, append time,
    the offset past the last record)."""
    if records is None:
        raise KafkaError(ErrorCode.invalid_record, "produce request without records")
    data = bytearray(records)
    batches = validate_batches(data, max_batch_bytes=plog.config.max_message_bytes)
    if version < 7 and any(h.compression == ZSTD for h in batches.headers):
        raise KafkaError(
            ErrorCode.unsupported_compression_type, "zstd needs Produce v7 or later"
        )
    if plog.config.compact:
        _check_keys(plog, data, batches)
    duplicate = broker.producers.check(plog, batches)
    if duplicate is not None:
        # a retry of a batch already written: answer with where it went, write nothing
        return duplicate.first_offset, -1, duplicate.last_offset + 1
    now = broker.clock.now_ms()
    result = plog.append(data, batches, now)
    broker.metrics.counts.appended_records(plog.topic, batches.record_count, len(data))
    broker.producers.appended(plog, batches, result.base_offset, now)
    if broker.replication is not None:
        broker.replication.leader_appended(plog)
    broker.notifier.notify((plog.topic, plog.partition))
    return result.base_offset, result.log_append_time, result.last_offset + 1


def _check_keys(plog: PartitionLog, data: bytearray, batches: ValidatedBatches) -> None:
    """A compacted topic needs a key on every record: the one produce path that has to
    look inside batches (decompressing them)."""
    total = 0
    listed: list[int] = []
    for h, pos in zip(batches.headers, batches.positions, strict=True):
        try:
            _, payload = batch_payload(memoryview(data)[pos : pos + h.size])
            n, first = _keyless(payload, h.record_count, MAX_RECORD_ERRORS)
        except CorruptRecordError as exc:
            raise KafkaError(ErrorCode.corrupt_message, f"cannot read records: {exc}") from None
        total += n
        listed += first[: MAX_RECORD_ERRORS - len(listed)]
    if total:
        message = ("Compacted topic cannot accept message without key in topic partition "
                   f"{plog.topic}-{plog.partition}.")
        shown = ", ".join([message] * min(3, total))
        raise KafkaError(
            ErrorCode.invalid_record,
            f"One or more records have been rejected due to {total} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
            # per-record errors in the response, bounded whatever the batch holds
            [(i, message) for i in listed],
        )


def _keyless_python(payload: Any, count: int, max_listed: int = 1 << 31
                    ) -> tuple[int, list[int]]:
    keyless = [i for i, rec in enumerate(iter_records(payload, count)) if rec.key is None]
    return len(keyless), keyless[:max_listed]


try:  # compiled by `pip install -e .`; the Python decoder is ~40x slower per record
    from eddy.protocol.record_scan import keyless_records as _keyless
except ImportError:  # a checkout whose extension was not rebuilt
    _keyless = _keyless_python


def has_transactional_batches(records: bytes | None) -> bool:
    """Whether any v2 batch of a partition's records has the transactional bit (Kafka's
    hasTransactionalRecords), from the batch headers alone; the walk stops at the first
    header that does not fit (validation rejects such records later)."""
    if not records:
        return False
    view = memoryview(records)
    pos, total = 0, len(view)
    while pos + _ATTRIBUTES + 2 <= total:
        length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        if length <= 0 or view[pos + _MAGIC] != 2:
            return False
        if view[pos + _ATTRIBUTES + 1] & TRANSACTIONAL_BIT:  # the low byte of attributes
            return True
        pos += LOG_OVERHEAD + length
    return False


def transactional_refusal(broker: Broker, req: Request) -> str | None:
    """Why a produce with transactional batches may not write (None: it may): it needs
    WRITE on its transactional id."""
    body = req.body
    if not any(has_transactional_batches(pd.records)
               for td in body.topic_data for pd in td.partition_data):
        return None
    txn_id = getattr(body, "transactional_id", None)
    if txn_id is None:
        return "transactional records without a transactional id"
    if allowed(broker, req, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        return None
    return f"not authorized to WRITE transactional id {txn_id}"


def _fail_partition(results: list[tuple[str, list[tuple[int, ErrorCode, int, int, str | None,
                                                        int]]]],
                    plog: PartitionLog, exc: KafkaError) -> None:
    for name, parts in results:
        if name == plog.topic:
            parts[:] = [(p[0], exc.code, -1, -1, exc.message, -1) if p[0] == plog.partition
                        else p for p in parts]


def _leader_hints(broker: Broker, results: list[tuple[str, list[tuple[
        int, ErrorCode, int, int, str | None, int]]]]) -> dict[tuple[str, int], tuple[int, int]]:
    """KIP-951: the leader and epoch of each partition refused as not this node's."""
    hints: dict[tuple[str, int], tuple[int, int]] = {}
    for name, parts in results:
        for p in parts:
            hint = leader_hint(broker, name, p[0], p[1])
            if hint is not None:
                hints[(name, p[0])] = hint
    return hints


def _current_leader(mod: Any, hint: tuple[int, int] | None) -> Any:
    if not hasattr(mod, "LeaderIdAndEpoch"):
        return None  # before v10: no such field (``build`` leaves it out)
    if hint is None:
        return mod.LeaderIdAndEpoch()  # the default: not written
    return mod.LeaderIdAndEpoch(leader_id=BrokerId(hint[0]), leader_epoch=i32(hint[1]))


def _endpoints(broker: Broker, mod: Any, leaders: set[int]) -> tuple[Any, ...]:
    if not leaders or not hasattr(mod, "NodeEndpoint"):
        return ()
    return tuple(mod.NodeEndpoint(node_id=BrokerId(node), host=host, port=i32(port), rack=rack)
                 for node, host, port, rack in endpoints(broker, leaders))


def _isr_short(broker: Broker, plog: PartitionLog) -> str | None:
    """Why an acks=all produce is refused before it is appended (None: it is not): fewer
    in-sync replicas than ``min.insync.replicas``."""
    needed = plog.config.min_insync_replicas
    if needed <= 1:
        return None
    replication = broker.replication
    isr = 1 if replication is None or plog.sole_replica else replication.isr_size(plog)
    if isr >= needed:
        return None
    return (f"The size of the current ISR {isr} is insufficient to satisfy the min.isr "
            f"requirement of {needed} for partition {plog.topic}-{plog.partition}")


async def _flush_all(broker: Broker, plogs: list[PartitionLog]
                     ) -> list[tuple[PartitionLog, KafkaError]]:
    """fsync each (group commit; the partitions' fsyncs run side by side in the executor);
    the ones whose fsync failed, with why."""
    if not plogs:
        return []
    outcomes = await asyncio.gather(*(broker.flusher.flush(p) for p in plogs),
                                    return_exceptions=True)
    failed: list[tuple[PartitionLog, KafkaError]] = []
    for plog, outcome in zip(plogs, outcomes, strict=True):
        if isinstance(outcome, KafkaError):  # the fsync failed: appended, not acknowledged
            failed.append((plog, outcome))
        elif isinstance(outcome, BaseException):
            raise outcome
    return failed


async def _replicated(broker: Broker, plog: PartitionLog, end: int, timeout_s: float
                      ) -> tuple[PartitionLog, KafkaError] | None:
    """acks=all on a replicated partition: wait until the ISR has ``end``."""
    replication = broker.replication
    if replication is None or plog.sole_replica:
        return None
    code = await replication.wait_replicated(plog, end, plog.config.min_insync_replicas,
                                             timeout_s)
    if code == ErrorCode.none:
        return None
    messages = {
        ErrorCode.not_enough_replicas_after_append:
            f"the ISR of {plog.topic}-{plog.partition} shrank below min.insync.replicas="
            f"{plog.config.min_insync_replicas} before the records were replicated",
        ErrorCode.request_timed_out:
            f"the records were not replicated to the ISR of {plog.topic}-{plog.partition} "
            "within the request's timeout",
    }
    return plog, KafkaError(code, messages.get(
        code, f"node {broker.node_id} no longer leads {plog.topic}-{plog.partition}"))


async def handle(broker: Broker, req: Request) -> Any:
    if not tracing.enabled:  # the hot path: no span work at all
        return await _handle(broker, req)
    with tracing.produce_span(req.body):
        return await _handle(broker, req)


async def _handle(broker: Broker, req: Request) -> Any:
    body = req.body
    version = req.api_version
    acks = body.acks
    logs = broker.logs
    results: list[tuple[str, list[tuple[int, ErrorCode, int, int, str | None, int]]]] = []
    to_flush: list[PartitionLog] = []
    waits: list[tuple[PartitionLog, int]] = []  # acks=all: each partition's end offset
    record_errors: dict[tuple[str, int], list[tuple[int, str]]] = {}
    counts = broker.metrics.counts
    authorizing = broker.authorizer is not None
    txn_refused = transactional_refusal(broker, req) if authorizing else None
    for topic_data in body.topic_data:
        name = topic_data.name
        topic = logs.get(name)
        parts: list[tuple[int, ErrorCode, int, int, str | None, int]] = []
        denied = authorizing and txn_refused is None and not allowed(
            broker, req, AclOperation.WRITE, ResourceType.TOPIC, name)
        for pd in topic_data.partition_data:
            if txn_refused is not None:
                parts.append((pd.index, ErrorCode.transactional_id_authorization_failed, -1,
                              -1, txn_refused, -1))
                continue
            if denied:  # before the topic is looked up: its existence is not revealed
                parts.append((pd.index, ErrorCode.topic_authorization_failed, -1, -1,
                              f"not authorized to WRITE topic {name}", -1))
                continue
            plog = topic.partitions[pd.index] if topic and 0 <= pd.index < len(
                topic.partitions) else None
            if acks not in (-1, 0, 1):
                parts.append((pd.index, ErrorCode.invalid_required_acks, -1, -1, None, -1))
                continue
            if plog is None:
                parts.append((pd.index, ErrorCode.unknown_topic_or_partition, -1, -1,
                              f"unknown topic or partition {name}-{pd.index}", -1))
                continue
            if (refused := broker.partition_error(name, pd.index)) is not None:
                parts.append((pd.index, refused, -1, -1,
                              f"node {broker.node_id} does not lead {name}-{pd.index}", -1))
                continue
            if topic is not None and topic.is_internal:
                parts.append((pd.index, ErrorCode.invalid_topic_exception, -1, -1,
                              f"cannot append to internal topic {name}", -1))
                continue
            if acks == -1 and (short := _isr_short(broker, plog)) is not None:
                parts.append((pd.index, ErrorCode.not_enough_replicas, -1, -1, short, -1))
                continue
            counts.produce_received(name, len(pd.records or b""))
            try:
                base, append_time, end = _append(broker, plog, pd.records, version)
            except OSError as exc:  # reading the log (producer state) failed: no fd, I/O
                parts.append((pd.index, ErrorCode.kafka_storage_error, -1, -1,
                              f"storage error on {name}-{pd.index}: {exc}", -1))
                continue
            except KafkaError as exc:
                log.debug("produce to %s-%d rejected: %s", name, pd.index, exc.message)
                parts.append((pd.index, exc.code, -1, -1, exc.message, plog.log_start_offset))
                record_errors[(name, pd.index)] = exc.record_errors
                continue
            if acks == -1:
                waits.append((plog, end))
                if not plog.config.write_caching:
                    to_flush.append(plog)  # acks=all: on disk here before it counts
            elif acks != 0 and plog.flush_due(broker.clock.now_ms()):
                to_flush.append(plog)
            parts.append((pd.index, ErrorCode.none, base, append_time, None,
                          plog.log_start_offset))
        results.append((name, parts))
    if waits and broker.replication is not None:
        timeout_s = body.timeout.total_seconds()
        flushed, replicated = await asyncio.gather(
            _flush_all(broker, to_flush),
            asyncio.gather(*(_replicated(broker, p, end, timeout_s) for p, end in waits)))
        failures = flushed + [f for f in replicated if f is not None]
    else:
        failures = await _flush_all(broker, to_flush)
    for failed_log, error in failures:
        _fail_partition(results, failed_log, error)
    if acks == 0:
        failed = [f"{name}-{p[0]}: {p[1].name}" for name, parts in results for p in parts
                  if p[1] != ErrorCode.none]
        if failed:
            # no response to carry the errors: Kafka closes the connection instead
            raise CloseConnection(f"acks=0 produce failed: {', '.join(failed)}")
        return None
    mod = response_module(ApiKey.PRODUCE, version)
    hints = _leader_hints(broker, results) if version >= 10 else {}
    endpoints = _endpoints(broker, mod, {leader for leader, _ in hints.values()})
    return build(
        mod.ProduceResponse,
        node_endpoints=endpoints,
        responses=tuple(
            build(
                mod.TopicProduceResponse,
                name=name,
                partition_responses=tuple(
                    build(
                        mod.PartitionProduceResponse,
                        index=index,
                        error_code=code,
                        base_offset=base,
                        log_append_time=(
                            _EPOCH + datetime.timedelta(milliseconds=at) if at >= 0 else None
                        ),
                        log_start_offset=start,
                        record_errors=tuple(
                            build(mod.BatchIndexAndErrorMessage, batch_index=i,
                                  batch_index_error_message=m)
                            for i, m in record_errors.get((name, index), ())
                        ) if hasattr(mod, "BatchIndexAndErrorMessage") else (),
                        error_message=msg,
                        current_leader=_current_leader(mod, hints.get((name, index))),
                    )
                    for index, code, base, at, msg, start in parts
                ),
            )
            for name, parts in results
        ),
        throttle_time=datetime.timedelta(0),
    )
