"""KafkaOps (eddy.gateway.ops): postcard round trips of every op struct, the owner's
OpExecutor against a real in-process Broker, pick_node, and the gateway's mapping of
forwarding failures to Kafka error codes."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from batch_builder import build_batch, parse_batches, values_in
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest as FindV3
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v5.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

from eddy import postcard
from eddy.broker.broker import Broker
from eddy.clock import ManualClock
from eddy.config import BrokerConfig
from eddy.gateway import ops
from eddy.gateway.executor import OpExecutor
from eddy.gateway.handlers.table import GATEWAY_HANDLERS
from eddy.gateway.node import Gateway
from eddy.gateway.routes import TopicRoute, pick_node
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request
from eddy.protocol.errors import ErrorCode

# ---- postcard round trips ----------------------------------------------------------------


def _sample(tp: Any, seed: int, present: bool) -> Any:
    """A value of a postcard-annotated type; `present` picks Some over None."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, marker = typing.get_args(tp)[:2]
        if base is int:
            bits, signed = marker.bits, marker.signed
            if signed:
                return -(1 << (bits - 1)) + seed if seed % 2 else (1 << (bits - 1)) - 1 - seed
            return (1 << bits) - 1 - seed
        return bytes([seed % 256]) * marker.size
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _sample(args[0], seed, present) if present else None
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_sample(args[0], seed + i, present) for i in range(2))
        return tuple(_sample(a, seed + i, present) for i, a in enumerate(args))
    if tp is bool:
        return seed % 2 == 0
    if tp is str:
        return f"s{seed}-ü"
    if tp is bytes:
        return bytes(range(seed % 7, seed % 7 + 5))
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp, include_extras=True)
        return tp(**{f.name: _sample(hints[f.name], seed + i, present)
                     for i, f in enumerate(dataclasses.fields(tp))})
    raise AssertionError(f"type {tp!r} is not a postcard type")


STRUCTS = sorted({cls for pair in ops.OPS.values() for cls in pair}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("present", [True, False])
def test_every_op_struct_round_trips_through_postcard(cls: type, present: bool) -> None:
    value = _sample(cls, 3, present)
    data = postcard.encode(value)
    assert postcard.decode(cls, data) == value


def test_op_constants_are_seed_003s_and_distinct() -> None:
    assert (ops.KAFKA_OP_PRODUCE, ops.KAFKA_OP_JOIN_GROUP, ops.KAFKA_OP_SYNC_GROUP,
            ops.KAFKA_OP_HEARTBEAT, ops.KAFKA_OP_LEAVE_GROUP, ops.KAFKA_OP_OFFSET_COMMIT,
            ops.KAFKA_OP_OFFSET_FETCH) == (0x02, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B)
    assert set(ops.OPS) == set(range(0x02, 0x0F)) | set(range(0x20, 0x2D))
    assert [f.name for f in dataclasses.fields(ops.JoinGroupOp)][:5] == [
        "group_id", "member_id", "protocol_type", "session_timeout_ms", "protocols"]


# ---- pick_node ---------------------------------------------------------------------------


def test_pick_node_is_deterministic_spreads_and_moves_only_a_removed_nodes_topics() -> None:
    names = [f"topic-{i}" for i in range(300)]
    three = {n: pick_node(n, [1, 2, 3]) for n in names}
    assert three == {n: pick_node(n, [3, 1, 2]) for n in names}  # order does not matter
    counts = {node: list(three.values()).count(node) for node in (1, 2, 3)}
    assert all(c > 50 for c in counts.values()), counts
    two = {n: pick_node(n, [1, 2]) for n in names}
    assert all(two[n] == three[n] for n in names if three[n] != 3)
    assert pick_node("x", []) is None


# ---- the executor against a real broker --------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = BrokerConfig(node_id=1, listen="127.0.0.1:0", data_dir=str(tmp_path / "data"),
                       num_partitions=2)
    b = Broker(cfg, ManualClock())
    b.load()
    yield b
    asyncio.run(b.stop())


def test_executor_create_produce_fetch_list_offsets(broker: Broker) -> None:
    ex = OpExecutor(broker)

    async def scenario() -> None:
        created = await ex.run(ops.KAFKA_OP_CREATE_TOPICS, ops.CreateTopicsOp(
            (ops.CreateTopic("t", 3, 1, (("cleanup.policy", "delete"),)),
             ops.CreateTopic("d", -1, -1, ())), 5000, False, 7))
        assert [(r.name, r.error_code, r.num_partitions) for r in created.topics] == [
            ("t", 0, 3), ("d", 0, 2)]
        assert created.topics[0].topic_id == broker.logs.get("t").topic_id.bytes
        again = await ex.run(ops.KAFKA_OP_CREATE_TOPICS, ops.CreateTopicsOp(
            (ops.CreateTopic("t", 3, 1, ()),), 5000, False, 7))
        assert again.topics[0].error_code == ErrorCode.topic_already_exists

        batch = bytes(build_batch([b"a", b"b", b"c"]))
        produced = await ex.run(ops.KAFKA_OP_PRODUCE, ops.ProduceOp(-1, 5000, (
            ops.ProduceTopic("t", (ops.ProducePartition(1, batch),
                                   ops.ProducePartition(1, batch),
                                   ops.ProducePartition(7, batch))),
            ops.ProduceTopic("nope", (ops.ProducePartition(0, batch),))), None, 9))
        [t, nope] = produced.topics
        assert [(p.index, p.error_code, p.base_offset) for p in t.partitions] == [
            (1, 0, 0), (1, 0, 3), (7, ErrorCode.unknown_topic_or_partition, -1)]
        assert nope.partitions[0].error_code == ErrorCode.unknown_topic_or_partition
        assert broker.logs.get("t").partitions[1].high_watermark == 6

        fetched = await ex.run(ops.KAFKA_OP_FETCH, ops.FetchOp(0, 1, 1 << 20, 0, (
            ops.FetchTopicReq("t", (ops.FetchPartitionReq(1, 2, 1 << 20, -1, -1),
                                    ops.FetchPartitionReq(0, 0, 1 << 20, -1, -1))),)))
        [ft] = fetched.topics
        p1, p0 = ft.partitions
        assert (p1.partition, p1.error_code, p1.high_watermark, p1.log_start_offset) == (
            1, 0, 6, 0)
        # whole batches from the log, base offsets patched, records untouched
        batches = parse_batches(p1.records or b"")
        assert [b.base_offset for b in batches] == [0, 3]
        assert values_in(p1.records or b"") == list(enumerate([b"a", b"b", b"c"] * 2))
        assert p0.records in (b"", None) and p0.high_watermark == 0
        assert p1.aborted is None  # read_uncommitted

        listed = await ex.run(ops.KAFKA_OP_LIST_OFFSETS, ops.ListOffsetsOp(0, (
            ops.ListOffsetsTopicReq("t", (ops.ListOffsetsPartitionReq(1, -1, -1),
                                          ops.ListOffsetsPartitionReq(1, -2, -1),
                                          ops.ListOffsetsPartitionReq(9, -1, -1))),), 7))
        assert [(p.error_code, p.offset) for p in listed.topics[0].partitions] == [
            (0, 6), (0, 0), (ErrorCode.unknown_topic_or_partition, -1)]

        pid = await ex.run(ops.KAFKA_OP_INIT_PRODUCER_ID,
                           ops.InitProducerIdOp(None, 60000, -1, -1))
        assert pid.error_code == 0 and pid.producer_id >= 0 and pid.producer_epoch == 0

    asyncio.run(scenario())


def test_executor_runs_a_group_whose_topics_live_elsewhere(broker: Broker) -> None:
    ex = OpExecutor(broker)
    protocols = (("range", b"\x00\x01meta"),)

    async def scenario() -> None:
        first = await ex.run(ops.KAFKA_OP_JOIN_GROUP, ops.JoinGroupOp(
            "g", "", "consumer", 10000, protocols, 10000, None, None, "cli", "/1.2.3.4", 9))
        assert first.error_code == ErrorCode.member_id_required  # v4+: ask for an id
        member = first.member_id
        assert member.startswith("cli-")
        joined = await ex.run(ops.KAFKA_OP_JOIN_GROUP, ops.JoinGroupOp(
            "g", member, "consumer", 10000, protocols, 10000, None, None, "cli", "/1.2.3.4",
            9))
        assert (joined.error_code, joined.leader_id, joined.member_id) == (0, member, member)
        assert joined.has_protocol_name and joined.protocol_name == "range"
        assert joined.members == ((member, b"\x00\x01meta"),)
        gen = joined.generation_id
        synced = await ex.run(ops.KAFKA_OP_SYNC_GROUP, ops.SyncGroupOp(
            "g", member, gen, ((member, b"assign"),), None, "consumer", "range", 5))
        assert (synced.error_code, synced.assignment) == (0, b"assign")
        beat = await ex.run(ops.KAFKA_OP_HEARTBEAT,
                            ops.HeartbeatOp("g", member, gen, None, 4))
        assert beat.error_code == 0
        stale = await ex.run(ops.KAFKA_OP_HEARTBEAT,
                             ops.HeartbeatOp("g", member, gen + 5, None, 4))
        assert stale.error_code == ErrorCode.illegal_generation
        # "elsewhere" is on another node: the owner stores offsets without holding it
        committed = await ex.run(ops.KAFKA_OP_OFFSET_COMMIT, ops.OffsetCommitOp(
            "g", (("elsewhere", 0, 42, "m"), ("elsewhere", 1, 7, None)), gen, member, None,
            -1, (3, -1), 9))
        assert committed.results == (("elsewhere", 0, 0), ("elsewhere", 1, 0))
        fetched = await ex.run(ops.KAFKA_OP_OFFSET_FETCH, ops.OffsetFetchOp(
            "g", (("elsewhere", 0), ("elsewhere", 1), ("elsewhere", 2)), False, 7))
        assert fetched.error_code == 0
        assert [o[:4] for o in fetched.offsets] == [
            ("elsewhere", 0, 42, "m"), ("elsewhere", 1, 7, ""), ("elsewhere", 2, -1, "")]
        assert fetched.leader_epochs[0] == 3
        every = await ex.run(ops.KAFKA_OP_OFFSET_FETCH, ops.OffsetFetchOp("g", (), False, 9))
        assert {(o[0], o[1], o[2]) for o in every.offsets} == {
            ("elsewhere", 0, 42), ("elsewhere", 1, 7)}
        listed = await ex.run(ops.KAFKA_OP_LIST_GROUPS, ops.ListGroupsOp((), ()))
        assert [g.group_id for g in listed.groups] == ["g"]
        described = await ex.run(ops.KAFKA_OP_DESCRIBE_GROUPS, ops.DescribeGroupsOp(("g",)))
        [dg] = described.groups
        assert dg.group_state == "Stable" and dg.members[0].client_host == "/1.2.3.4"
        left = await ex.run(ops.KAFKA_OP_LEAVE_GROUP,
                            ops.LeaveGroupOp("g", member, (), 0))
        assert left.error_code == 0 and left.members[0][0] == member

    asyncio.run(scenario())


def test_join_group_v3_gets_no_member_id_required(broker: Broker) -> None:
    """The client's version travels with the op: a v3 client never sees error 79."""
    ex = OpExecutor(broker)
    op = ops.JoinGroupOp("old", "", "consumer", 10000, (("range", b""),), -1, None, None,
                         "c", "", 3)
    joined = asyncio.run(ex.run(ops.KAFKA_OP_JOIN_GROUP, op))
    assert joined.error_code == 0 and joined.member_id and joined.generation_id == 1


def test_executor_bytes_path_and_bad_input(broker: Broker) -> None:
    ex = OpExecutor(broker)
    op = ops.CreateTopicsOp((ops.CreateTopic("bytes", 1, 1, ()),), 1000, False, 7)
    answer = asyncio.run(ex.execute(ops.KAFKA_OP_CREATE_TOPICS, postcard.encode(op)))
    resp = postcard.decode(ops.CreateTopicsOpResp, answer)
    assert resp.topics[0].error_code == 0 and broker.logs.get("bytes") is not None
    with pytest.raises(ops.UnknownOp, match="unknown op 0x7f"):
        asyncio.run(ex.execute(0x7F, b""))
    with pytest.raises(ops.BadOp, match="CreateTopicsOp"):
        asyncio.run(ex.execute(ops.KAFKA_OP_CREATE_TOPICS, b"\xff\xff\xff\xff\xff\xff"))


# ---- gateway handlers with a scripted forwarder ------------------------------------------


class Routes:
    def __init__(self) -> None:
        self.known = {"t": TopicRoute(2, 2)}
        self.noted: dict[str, TopicRoute] = {}

    def topic(self, name: str) -> TopicRoute | None:
        return self.known.get(name)

    def topics(self) -> dict[str, TopicRoute]:
        return dict(self.known)

    def group_owner(self, group_id: str) -> int | None:
        return 2

    def broker_nodes(self) -> list[int]:
        return [2, 3]

    def note_topic(self, name: str, route: TopicRoute) -> None:
        self.noted[name] = route
        self.known[name] = route


class Failing:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls: list[tuple[int, int, int]] = []

    async def call(self, node_id: int, op: int, body: bytes, timeout_ms: int) -> bytes:
        self.calls.append((node_id, op, timeout_ms))
        raise self.exc


def _gateway(forwarder: Any) -> Gateway:
    cfg = BrokerConfig(node_id=9, listen="127.0.0.1:0", advertised="gw.example:19092",
                       process_roles="gateway")
    return Gateway(cfg, Routes(), forwarder, cluster_id="cid")


def _handle(gw: Gateway, key: ApiKey, version: int, body: Any) -> Any:
    return asyncio.run(GATEWAY_HANDLERS[key](gw, Request(key, version, 1, "c", body)))


def _produce_request() -> Any:
    batch = bytes(build_batch([b"x"]))
    return ProduceRequest(transactional_id=None, acks=-1,
                          timeout=datetime.timedelta(seconds=5),
                          topic_data=(TopicProduceData(name="t", partition_data=(
                              PartitionProduceData(index=0, records=batch),)),
                                      TopicProduceData(name="unknown", partition_data=(
                                          PartitionProduceData(index=0, records=batch),))))


@pytest.mark.parametrize(("exc", "code"), [
    (ops.OpUnavailable("down"), ErrorCode.not_leader_or_follower),
    (ops.OpTimeout("slow"), ErrorCode.request_timed_out),
    (ops.OpFailed("broken"), ErrorCode.unknown_server_error),
])
def test_produce_forwarding_failures_become_retriable_codes(exc: Exception,
                                                           code: ErrorCode) -> None:
    fwd = Failing(exc)
    resp = _handle(_gateway(fwd), ApiKey.PRODUCE, 9, _produce_request())
    [t, unknown] = resp.responses
    assert t.partition_responses[0].error_code == code
    assert unknown.partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
    assert [(n, op) for n, op, _ in fwd.calls] == [(2, ops.KAFKA_OP_PRODUCE)]


@pytest.mark.parametrize(("exc", "code"), [
    (ops.OpUnavailable("down"), ErrorCode.coordinator_not_available),
    (ops.OpTimeout("slow"), ErrorCode.request_timed_out),
])
def test_join_group_forwarding_failures(exc: Exception, code: ErrorCode) -> None:
    fwd = Failing(exc)
    body = JoinGroupRequest(group_id="g", session_timeout=datetime.timedelta(seconds=10),
                            rebalance_timeout=datetime.timedelta(seconds=60), member_id="",
                            group_instance_id=None, protocol_type="consumer",
                            protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),))
    resp = _handle(_gateway(fwd), ApiKey.JOIN_GROUP, 5, body)
    assert resp.error_code == code
    # the join may wait a whole rebalance: the forward's timeout covers it
    assert fwd.calls[0][2] >= 60_000


def test_metadata_find_coordinator_and_transactions_are_answered_by_the_gateway() -> None:
    fwd = Failing(ops.OpUnavailable("must not be called"))
    gw = _gateway(fwd)
    md = _handle(gw, ApiKey.METADATA, 9, MetadataRequest(
        topics=(MetadataRequestTopic(name="t"), MetadataRequestTopic(name="bad/name")),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False))
    assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(9, "gw.example", 19092)]
    assert md.cluster_id == "cid" and md.controller_id == 9
    t, bad = md.topics
    assert [(p.partition_index, p.leader_id, p.leader_epoch) for p in t.partitions] == [
        (0, 9, 0), (1, 9, 0)]
    assert bad.error_code == ErrorCode.invalid_topic_exception
    fc = _handle(gw, ApiKey.FIND_COORDINATOR, 3, FindV3(key="g", key_type=0))
    assert (fc.error_code, fc.node_id, fc.host, fc.port) == (0, 9, "gw.example", 19092)
    txn = _handle(gw, ApiKey.FIND_COORDINATOR, 3, FindV3(key="tx", key_type=1))
    assert txn.error_code == ErrorCode.transactional_id_authorization_failed
    pid = _handle(gw, ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(
        transactional_id="tx", transaction_timeout=datetime.timedelta(seconds=60),
        producer_id=-1, producer_epoch=-1))
    assert pid.error_code == ErrorCode.transactional_id_authorization_failed
    assert fwd.calls == []
