"""Gateway handlers for partition data: Produce, Fetch, ListOffsets. A request is split by
owning node, the parts are forwarded in parallel, the answers merged in request order."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any, TypeVar

from eddy.gateway import ops
from eddy.gateway.authz import unknown_topic_codes
from eddy.gateway.node import Gateway, as_code, failure_code
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Encoded, Request, build, response_module
from eddy.protocol.errors import CloseConnection, ErrorCode
from eddy.protocol.fetch_codec import FetchPartition, FetchTopic, encode_fetch_response
from eddy.security.acl import AclOperation

_NO_TIME = datetime.timedelta(0)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_FAILURES = (ops.OpUnavailable, ops.OpTimeout, ops.OpFailed)
T = TypeVar("T")


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def split_by_node(gw: Gateway, names: list[str]) -> tuple[dict[int, list[int]], list[int]]:
    """Indexes of `names` by owning node, and the indexes of unknown topics."""
    by_node: dict[int, list[int]] = {}
    unknown: list[int] = []
    for i, name in enumerate(names):
        route = gw.routes.topic(name)
        if route is None:
            unknown.append(i)
        else:
            by_node.setdefault(route.node_id, []).append(i)
    return by_node, unknown


# ---- Produce -----------------------------------------------------------------------------


def _produce_failed(index: int, code: ErrorCode, message: str | None
                    ) -> ops.ProducePartitionResp:
    return ops.ProducePartitionResp(index, int(code), -1, -1, -1, message, ())


async def produce(gw: Gateway, req: Request) -> Any:
    body = req.body
    topics = body.topic_data
    by_node, unknown = split_by_node(gw, [t.name for t in topics])
    codes = await unknown_topic_codes(gw, req, AclOperation.WRITE,
                                      (topics[i].name for i in unknown))
    results: dict[int, list[ops.ProducePartitionResp]] = {
        i: [_produce_failed(p.index, codes[topics[i].name],
                            f"unknown topic or partition {topics[i].name}-{p.index}"
                            if codes[topics[i].name] == ErrorCode.unknown_topic_or_partition
                            else None)
            for p in topics[i].partition_data]
        for i in unknown
    }
    timeout_ms = _ms(body.timeout)

    async def one(node: int, idx: list[int]) -> None:
        op = ops.ProduceOp(body.acks, timeout_ms, tuple(
            ops.ProduceTopic(topics[i].name, tuple(
                ops.ProducePartition(p.index, p.records) for p in topics[i].partition_data))
            for i in idx), body.transactional_id if req.api_version >= 3 else None,
            req.api_version)
        try:
            resp = await gw.call(node, ops.KAFKA_OP_PRODUCE, op,
                                 timeout_ms + gw.request_timeout_ms)
            answers = {t.name: {p.index: p for p in t.partitions} for t in resp.topics}
        except _FAILURES as exc:
            code = failure_code(exc, ErrorCode.not_leader_or_follower)
            for i in idx:
                results[i] = [_produce_failed(p.index, code, f"node {node}: {exc}")
                              for p in topics[i].partition_data]
            return
        for i in idx:
            got = answers.get(topics[i].name, {})
            results[i] = [got.get(p.index) or _produce_failed(
                p.index, ErrorCode.unknown_server_error, f"node {node} did not answer")
                for p in topics[i].partition_data]

    await asyncio.gather(*(one(node, idx) for node, idx in by_node.items()))
    if body.acks == 0:
        failed = [f"{topics[i].name}-{p.index}: {as_code(p.error_code).name}"
                  for i in range(len(topics)) for p in results[i]
                  if p.error_code != ErrorCode.none]
        if failed:
            # no response to carry the errors: Kafka closes the connection instead
            raise CloseConnection(f"acks=0 produce failed: {', '.join(failed)}")
        return None
    mod = response_module(ApiKey.PRODUCE, req.api_version)
    has_record_errors = hasattr(mod, "BatchIndexAndErrorMessage")
    return build(
        mod.ProduceResponse, throttle_time=_NO_TIME,
        responses=tuple(
            build(mod.TopicProduceResponse, name=t.name, partition_responses=tuple(
                build(
                    mod.PartitionProduceResponse, index=p.index,
                    error_code=as_code(p.error_code), base_offset=p.base_offset,
                    log_append_time=(_EPOCH + datetime.timedelta(
                        milliseconds=p.log_append_time_ms) if p.log_append_time_ms >= 0
                                     else None),
                    log_start_offset=p.log_start_offset, error_message=p.error_message,
                    record_errors=tuple(
                        build(mod.BatchIndexAndErrorMessage, batch_index=b,
                              batch_index_error_message=m) for b, m in p.record_errors
                    ) if has_record_errors else (),
                )
                for p in results[i]))
            for i, t in enumerate(topics)
        ),
    )


# ---- Fetch -------------------------------------------------------------------------------


def _fetch_failed(partition: int, code: ErrorCode) -> ops.FetchPartitionResp:
    return ops.FetchPartitionResp(partition, int(code), -1, -1, -1, None, None)


def _fetched_bytes(resp: ops.FetchOpResp) -> int:
    return sum(len(p.records or b"") for t in resp.topics for p in t.partitions)


async def _await_all(tasks: dict[int, asyncio.Task[T]]) -> dict[int, T | BaseException]:
    await asyncio.wait(tasks.values())
    out: dict[int, T | BaseException] = {}
    for node, task in tasks.items():
        exc = task.exception()
        out[node] = exc if exc is not None else task.result()
    return out


async def fetch(gw: Gateway, req: Request) -> Any:
    """No fetch sessions (session id 0: every request is a full one). Each node long-polls
    with the client's max_wait; once the answers in hand reach min_bytes, the nodes still
    waiting are asked again without waiting, so their partitions report fresh offsets."""
    body = req.body
    topics = body.topics
    by_node, unknown = split_by_node(gw, [t.topic for t in topics])
    max_wait_ms = _ms(body.max_wait)
    isolation = getattr(body, "isolation_level", 0)

    def op_for(idx: list[int], wait_ms: int, min_bytes: int) -> ops.FetchOp:
        return ops.FetchOp(wait_ms, min_bytes, body.max_bytes, isolation, tuple(
            ops.FetchTopicReq(topics[i].topic, tuple(
                # the epoch a client knows is the gateway's (0), not the owner's: unchecked
                ops.FetchPartitionReq(p.partition, p.fetch_offset, p.partition_max_bytes, -1,
                                      getattr(p, "log_start_offset", -1))
                for p in topics[i].partitions))
            for i in idx))

    def call(node: int, wait_ms: int, min_bytes: int) -> asyncio.Task[Any]:
        return asyncio.ensure_future(gw.call(
            node, ops.KAFKA_OP_FETCH, op_for(by_node[node], wait_ms, min_bytes),
            wait_ms + gw.request_timeout_ms))

    tasks = {node: call(node, max_wait_ms, body.min_bytes) for node in by_node}
    got = 0
    pending = set(tasks.values())
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is None:
                    got += _fetched_bytes(task.result())
            if pending and got >= max(body.min_bytes, 1):
                for node, task in list(tasks.items()):
                    if task in pending:
                        task.cancel()
                        tasks[node] = call(node, 0, 0)
                break
        answers = await _await_all(tasks)
    finally:
        for task in tasks.values():
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
    codes = await unknown_topic_codes(gw, req, AclOperation.READ,
                                      (topics[i].topic for i in unknown))
    by_topic: dict[int, list[ops.FetchPartitionResp]] = {
        i: [_fetch_failed(p.partition, codes[topics[i].topic])
            for p in topics[i].partitions] for i in unknown}
    for node, idx in by_node.items():
        answer = answers[node]
        if isinstance(answer, BaseException):
            code = (failure_code(answer, ErrorCode.not_leader_or_follower)
                    if isinstance(answer, Exception) else ErrorCode.unknown_server_error)
            for i in idx:
                by_topic[i] = [_fetch_failed(p.partition, code) for p in topics[i].partitions]
            continue
        parts = {t.topic: {p.partition: p for p in t.partitions} for t in answer.topics}
        for i in idx:
            got_parts = parts.get(topics[i].topic, {})
            by_topic[i] = [got_parts.get(p.partition) or _fetch_failed(
                p.partition, ErrorCode.unknown_server_error) for p in topics[i].partitions]
    out = [
        FetchTopic(t.topic, None, [
            FetchPartition(p.partition, p.error_code, p.high_watermark, p.last_stable_offset,
                           p.log_start_offset,
                           None if p.aborted is None else list(p.aborted),
                           p.records if p.records is not None else b"")
            for p in by_topic[i]])
        for i, t in enumerate(topics)
    ]
    return Encoded(encode_fetch_response(req.api_version, req.correlation_id, out))


# ---- ListOffsets -------------------------------------------------------------------------


async def list_offsets(gw: Gateway, req: Request) -> Any:
    body = req.body
    topics = body.topics
    by_node, unknown = split_by_node(gw, [t.name for t in topics])
    codes = await unknown_topic_codes(gw, req, AclOperation.DESCRIBE,
                                      (topics[i].name for i in unknown))
    results: dict[int, list[ops.ListOffsetsPartitionResp]] = {
        i: [ops.ListOffsetsPartitionResp(p.partition_index, int(codes[topics[i].name]),
                                         -1, -1, -1)
            for p in topics[i].partitions] for i in unknown}

    async def one(node: int, idx: list[int]) -> None:
        op = ops.ListOffsetsOp(getattr(body, "isolation_level", 0), tuple(
            ops.ListOffsetsTopicReq(topics[i].name, tuple(
                ops.ListOffsetsPartitionReq(p.partition_index, p.timestamp, -1)
                for p in topics[i].partitions))
            for i in idx), req.api_version)
        try:
            resp = await gw.call(node, ops.KAFKA_OP_LIST_OFFSETS, op, gw.request_timeout_ms)
            answers = {t.name: {p.partition: p for p in t.partitions} for t in resp.topics}
        except _FAILURES as exc:
            code = int(failure_code(exc, ErrorCode.not_leader_or_follower))
            for i in idx:
                results[i] = [ops.ListOffsetsPartitionResp(p.partition_index, code, -1, -1, -1)
                              for p in topics[i].partitions]
            return
        for i in idx:
            got = answers.get(topics[i].name, {})
            results[i] = [got.get(p.partition_index) or ops.ListOffsetsPartitionResp(
                p.partition_index, int(ErrorCode.unknown_server_error), -1, -1, -1)
                for p in topics[i].partitions]

    await asyncio.gather(*(one(node, idx) for node, idx in by_node.items()))
    mod = response_module(ApiKey.LIST_OFFSETS, req.api_version)
    return build(
        mod.ListOffsetsResponse, throttle_time=_NO_TIME,
        topics=tuple(
            build(mod.ListOffsetsTopicResponse, name=t.name, partitions=tuple(
                build(mod.ListOffsetsPartitionResponse, partition_index=p.partition,
                      error_code=as_code(p.error_code), timestamp=p.timestamp,
                      offset=p.offset,
                      # the owning broker's answer: its partition leader's epoch, -1
                      # where it found no offset (or could not be asked)
                      leader_epoch=p.leader_epoch if p.offset >= 0 else -1)
                for p in results[i]))
            for i, t in enumerate(topics)
        ),
    )
