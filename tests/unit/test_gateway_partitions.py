"""The gateway's partition-leadership ops (eddy.gateway.ops_admin 0x29-0x2C, handlers in
eddy.gateway.handlers.partitions): hostile payloads, the owner's runners against a real
Broker (a broker on its own: the leader and only replica of all it holds), and the
gateway's splitting by owner and merging with a scripted forwarder (one node answering, one
unreachable, one too slow)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from batch_builder import build_batch
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.elect_leaders.v0.request import ElectLeadersRequest as ElectV0
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

from eddy import postcard
from eddy.broker.broker import Broker
from eddy.clock import ManualClock
from eddy.config import BrokerConfig
from eddy.gateway import ops
from eddy.gateway import ops_admin as oa
from eddy.gateway.executor import RUNNERS, OpExecutor
from eddy.gateway.handlers.table import GATEWAY_HANDLERS, GATEWAY_VERSIONS
from eddy.gateway.node import Gateway
from eddy.gateway.routes import TopicRoute
from eddy.protocol.apis import SUPPORTED, ApiKey
from eddy.protocol.codec import Request
from eddy.protocol.errors import ErrorCode

_S = datetime.timedelta(seconds=5)
KEYS = (ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.ELECT_LEADERS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS)
OPS = (oa.KAFKA_OP_OFFSET_FOR_LEADER_EPOCH, oa.KAFKA_OP_ELECT_LEADERS,
       oa.KAFKA_OP_ALTER_REASSIGNMENTS, oa.KAFKA_OP_LIST_REASSIGNMENTS)
NOT_NEEDED = ErrorCode.election_not_needed


def test_served_at_the_brokers_versions_with_an_op_and_runner_each() -> None:
    for key in KEYS:
        assert key in GATEWAY_HANDLERS and GATEWAY_VERSIONS[key] == SUPPORTED[key]
    assert OPS == (0x29, 0x2A, 0x2B, 0x2C)
    assert all(op in ops.OPS and op in RUNNERS for op in OPS)


@pytest.mark.parametrize(("cls", "payload", "field"), [
    # a Vec announcing 2^31 topics in a 6-byte payload
    (oa.OffsetForLeaderEpochOp, b"\x80\x80\x80\x80\x08\x00", "topics"),
    # election type, Some, then 2^31 topics
    (oa.ElectLeadersOp, b"\x00\x01\x80\x80\x80\x80\x08", "topics"),
    # one topic "t" with one partition whose target names 2^31 replicas
    (oa.AlterReassignmentsOp, b"\x01\x01t\x01\x00\x01\x80\x80\x80\x80\x08", "replicas"),
    (oa.ListReassignmentsOpResp, b"\x00\x00\x80\x80\x80\x80\x08", "topics"),
])
def test_a_hostile_count_is_refused_before_allocating(cls: type, payload: bytes,
                                                      field: str) -> None:
    with pytest.raises(postcard.PostcardError, match=field):
        postcard.decode(cls, payload)


def test_hostile_bytes_are_a_bad_op_at_the_owner(broker: Broker) -> None:
    ex = OpExecutor(broker)
    for op in OPS:
        with pytest.raises(ops.BadOp, match=ops.OPS[op][0].__name__):
            asyncio.run(ex.execute(op, b"\xff\xff\xff\xff\xff\xff\x01"))
    # decodable nonsense is the broker's to refuse, with a code, not a crash
    elect = asyncio.run(ex.run(oa.KAFKA_OP_ELECT_LEADERS, oa.ElectLeadersOp(
        -7, (oa.PartitionsOf("t", (-1,)),), -5)))
    assert elect.error_code == ErrorCode.invalid_request
    moved = asyncio.run(ex.run(oa.KAFKA_OP_ALTER_REASSIGNMENTS, oa.AlterReassignmentsOp(
        (oa.ReassignTopic("t", (oa.ReassignPartition(0, (1, 1)),
                                oa.ReassignPartition(-3, ()))),), 0)))
    assert [p.error_code for p in moved.topics[0].partitions] == [
        ErrorCode.invalid_replica_assignment, ErrorCode.unknown_topic_or_partition]


# ---- the owner's runners against a real broker -------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = BrokerConfig(node_id=1, listen="127.0.0.1:0", data_dir=str(tmp_path / "data"),
                       num_partitions=2)
    b = Broker(cfg, ManualClock())
    b.load()
    asyncio.run(OpExecutor(b).run(ops.KAFKA_OP_CREATE_TOPICS, ops.CreateTopicsOp(
        (ops.CreateTopic("t", 2, 1, ()),), 1000, False, 7)))
    yield b
    asyncio.run(b.stop())


def test_executor_runs_the_partition_ops(broker: Broker) -> None:
    ex = OpExecutor(broker)

    async def scenario() -> None:
        await ex.run(ops.KAFKA_OP_PRODUCE, ops.ProduceOp(-1, 1000, (
            ops.ProduceTopic("t", (ops.ProducePartition(0, bytes(build_batch(
                [b"a", b"b", b"c"]))),)),), None, 9))
        epoch = broker.logs.get("t").partitions[0].leader_epoch
        got = await ex.run(oa.KAFKA_OP_OFFSET_FOR_LEADER_EPOCH, oa.OffsetForLeaderEpochOp((
            oa.EpochTopicReq("t", (oa.EpochPartitionReq(0, -1, epoch),
                                   oa.EpochPartitionReq(1, epoch, epoch),
                                   oa.EpochPartitionReq(0, epoch + 1, epoch),
                                   oa.EpochPartitionReq(7, -1, epoch))),
            oa.EpochTopicReq("nope", (oa.EpochPartitionReq(0, -1, 0),)))))
        assert got == oa.OffsetForLeaderEpochOpResp((
            oa.EpochTopicResp("t", (
                oa.EpochEndOffset(0, 0, epoch, 3), oa.EpochEndOffset(1, 0, epoch, 0),
                oa.EpochEndOffset(0, int(ErrorCode.unknown_leader_epoch), -1, -1),
                oa.EpochEndOffset(7, int(ErrorCode.unknown_topic_or_partition), -1, -1))),
            oa.EpochTopicResp("nope", (
                oa.EpochEndOffset(0, int(ErrorCode.unknown_topic_or_partition), -1, -1),))))

        elected = await ex.run(oa.KAFKA_OP_ELECT_LEADERS, oa.ElectLeadersOp(
            0, (oa.PartitionsOf("t", (0, 5)), oa.PartitionsOf("nope", (0,))), 1000))
        assert elected.error_code == 0
        assert [(t.name, [(p.partition, p.error_code) for p in t.partitions])
                for t in elected.topics] == [
            ("t", [(0, NOT_NEEDED), (5, ErrorCode.unknown_topic_or_partition)]),
            ("nope", [(0, ErrorCode.unknown_topic_or_partition)])]
        assert all(p.error_message for t in elected.topics for p in t.partitions)
        every = await ex.run(oa.KAFKA_OP_ELECT_LEADERS, oa.ElectLeadersOp(0, None, 1000))
        assert every.error_code == 0 and oa.TopicOutcomes("t", ()) in every.topics

        moved = await ex.run(oa.KAFKA_OP_ALTER_REASSIGNMENTS, oa.AlterReassignmentsOp((
            oa.ReassignTopic("t", (oa.ReassignPartition(0, (1,)),
                                   oa.ReassignPartition(1, (2,)),
                                   oa.ReassignPartition(1, None))),), 1000))
        assert (moved.error_code, moved.error_message) == (0, None)
        assert [(p.partition, p.error_code) for p in moved.topics[0].partitions] == [
            (0, 0), (1, ErrorCode.invalid_replica_assignment),
            (1, ErrorCode.no_reassignment_in_progress)]
        listed = await ex.run(oa.KAFKA_OP_LIST_REASSIGNMENTS, oa.ListReassignmentsOp(
            (oa.PartitionsOf("t", (0, 1)),), 1000))
        assert listed == oa.ListReassignmentsOpResp(0, None, ())

    asyncio.run(scenario())


# ---- the gateway with a scripted forwarder -----------------------------------------------

GW = 9
TOPICS = {"a": TopicRoute(2, 2), "b": TopicRoute(3, 1), "c": TopicRoute(2, 1),
          "e": TopicRoute(5, 1), "d": TopicRoute(4, 1)}


class Routes:
    def __init__(self, nodes: list[int]) -> None:
        self.nodes = nodes

    def topic(self, name: str) -> TopicRoute | None:
        return TOPICS.get(name)

    def topics(self) -> dict[str, TopicRoute]:
        return dict(TOPICS)

    def group_owner(self, group_id: str) -> int | None:
        return None

    def broker_nodes(self) -> list[int]:
        return list(self.nodes)

    def note_topic(self, name: str, route: TopicRoute) -> None: ...

    def forget_topic(self, name: str) -> None: ...


class Scripted:
    """Nodes 2 and 5 answer with `answer(node, op, request)`, node 3 is unreachable, node 4
    too slow. Every op crosses postcard bytes, as over the mesh."""

    def __init__(self, answer: Callable[[int, int, Any], Any]) -> None:
        self.answer = answer
        self.calls: list[tuple[int, int, Any]] = []

    async def call(self, node_id: int, op: int, body: bytes, timeout_ms: int) -> bytes:
        request = postcard.decode(ops.OPS[op][0], body)
        self.calls.append((node_id, op, request))
        if node_id == 3:
            raise ops.OpUnavailable("node 3 is not on the mesh")
        if node_id == 4:
            raise ops.OpTimeout("node 4 did not answer in time")
        return postcard.encode(self.answer(node_id, op, request))


def _gateway(answer: Callable[[int, int, Any], Any], nodes: list[int] | None = None
             ) -> tuple[Gateway, Scripted]:
    cfg = BrokerConfig(node_id=GW, listen="127.0.0.1:0", advertised="gw.example:19092",
                       process_roles="gateway")
    fwd = Scripted(answer)
    routes = Routes([2, 3, 4] if nodes is None else nodes)
    return Gateway(cfg, routes, fwd, cluster_id="cid"), fwd


def _handle(gw: Gateway, key: ApiKey, version: int, body: Any) -> Any:
    return asyncio.run(GATEWAY_HANDLERS[key](gw, Request(key, version, 1, "c", body)))


def _rows(topics: Any, index: str = "partition_index", rows: str = "partitions",
          name: str = "name") -> list[tuple[str, list[tuple[int, int]]]]:
    return [(getattr(t, name), [(getattr(p, index), int(p.error_code))
                                for p in getattr(t, rows)]) for t in topics]


def test_offset_for_leader_epoch_goes_to_each_owner_unfenced() -> None:
    def answer(node: int, op: int, req: oa.OffsetForLeaderEpochOp) -> Any:
        return oa.OffsetForLeaderEpochOpResp(tuple(
            oa.EpochTopicResp(t.name, tuple(oa.EpochEndOffset(p.partition, 0, p.leader_epoch,
                                                              100 + p.partition)
                                            for p in t.partitions if p.partition != 1))
            for t in req.topics))

    gw, fwd = _gateway(answer)

    def part(p: int, epoch: int) -> OffsetForLeaderPartition:
        # the client's current epoch is the one the gateway's Metadata gave: 0
        return OffsetForLeaderPartition(partition=p, current_leader_epoch=0, leader_epoch=epoch)

    resp = _handle(gw, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, OffsetForLeaderEpochRequest(
        replica_id=-1, topics=(
            OffsetForLeaderTopic(topic="b", partitions=(part(0, 3),)),
            OffsetForLeaderTopic(topic="a", partitions=(part(0, 5), part(1, 5))),
            OffsetForLeaderTopic(topic="nope", partitions=(part(0, 1),)),
            OffsetForLeaderTopic(topic="c", partitions=(part(0, 2),)))))
    got = [(t.topic, [(p.partition, int(p.error_code), p.leader_epoch, p.end_offset)
                      for p in t.partitions]) for t in resp.topics]
    assert got == [
        ("b", [(0, ErrorCode.not_leader_or_follower, -1, -1)]),
        ("a", [(0, 0, 5, 100), (1, ErrorCode.unknown_server_error, -1, -1)]),
        ("nope", [(0, ErrorCode.unknown_topic_or_partition, -1, -1)]),
        ("c", [(0, 0, 2, 100)])]
    [two] = [r for n, _, r in fwd.calls if n == 2]
    assert two == oa.OffsetForLeaderEpochOp((
        oa.EpochTopicReq("a", (oa.EpochPartitionReq(0, -1, 5), oa.EpochPartitionReq(1, -1, 5))),
        oa.EpochTopicReq("c", (oa.EpochPartitionReq(0, -1, 2),))))


def _elect_answer(node: int, op: int, req: oa.ElectLeadersOp) -> oa.ElectLeadersOpResp:
    if req.topics is None:  # each node: its own topics, one partition elected on each
        mine = {2: [("a", (0, 0)), ("a", (1, int(NOT_NEEDED)))],
                5: [("a", (1, 0)), ("e", (0, 0))]}[node]
        out: dict[str, list[oa.PartitionOutcome]] = {}
        for name, (p, code) in mine:
            out.setdefault(name, []).append(oa.PartitionOutcome(p, code, None if code == 0
                                                                else "not needed"))
        return oa.ElectLeadersOpResp(0, tuple(oa.TopicOutcomes(n, tuple(ps))
                                              for n, ps in out.items()))
    return oa.ElectLeadersOpResp(0, tuple(
        oa.TopicOutcomes(t.name, tuple(oa.PartitionOutcome(p, 0 if p == 0 else int(NOT_NEEDED),
                                                           None if p == 0 else "no need")
                                       for p in t.partitions))
        for t in req.topics))


def test_elect_leaders_split_by_owner_and_merged_in_request_order() -> None:
    gw, fwd = _gateway(_elect_answer)
    resp = _handle(gw, ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(
        election_type=0, timeout=_S, topic_partitions=(
            TopicPartitions(topic="b", partitions=(0,)),
            TopicPartitions(topic="a", partitions=(1, 0, 1)),
            TopicPartitions(topic="nope", partitions=(0,)),
            TopicPartitions(topic="c", partitions=(0,)))))
    assert resp.error_code == 0
    assert _rows(resp.replica_election_results, "partition_id", "partition_result",
                 "topic") == [
        ("b", [(0, ErrorCode.not_controller)]),
        ("a", [(1, NOT_NEEDED), (0, 0)]),
        ("nope", [(0, ErrorCode.unknown_topic_or_partition)]),
        ("c", [(0, 0)])]
    messages = {(t.topic, p.partition_id): p.error_message
                for t in resp.replica_election_results for p in t.partition_result}
    assert messages[("a", 0)] is None and "node 3" in (messages[("b", 0)] or "")
    [two] = [r for n, _, r in fwd.calls if n == 2]
    assert two == oa.ElectLeadersOp(0, (oa.PartitionsOf("a", (1, 0)),
                                        oa.PartitionsOf("c", (0,))), 5000)
    # v0 has no top-level error: the partitions carry it
    v0 = _handle(gw, ApiKey.ELECT_LEADERS, 0, ElectV0(
        timeout=_S, topic_partitions=(TopicPartitions(topic="nope", partitions=(2,)),)))
    assert _rows(v0.replica_election_results, "partition_id", "partition_result",
                 "topic") == [("nope", [(2, ErrorCode.unknown_topic_or_partition)])]


def test_elect_leaders_of_every_partition_asks_every_broker_node() -> None:
    gw, fwd = _gateway(_elect_answer, nodes=[2, 5])
    resp = _handle(gw, ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(
        election_type=0, timeout=_S, topic_partitions=None))
    assert resp.error_code == 0
    # a-1 was not needed on node 2 but elected on node 5: the success is the answer
    assert _rows(resp.replica_election_results, "partition_id", "partition_result",
                 "topic") == [("a", [(0, 0), (1, 0)]), ("e", [(0, 0)])]
    assert sorted(n for n, _, _ in fwd.calls) == [2, 5]
    # a node that cannot be asked: its partitions cannot be named, the request fails
    gw, _ = _gateway(_elect_answer, nodes=[2, 3])
    down = _handle(gw, ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(
        election_type=0, timeout=_S, topic_partitions=None))
    assert down.error_code == ErrorCode.not_controller
    # no broker node at all: nothing to elect
    gw, _ = _gateway(_elect_answer, nodes=[])
    none = _handle(gw, ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(
        election_type=0, timeout=_S, topic_partitions=None))
    assert (none.error_code, none.replica_election_results) == (0, ())
    bad = _handle(gw, ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(
        election_type=9, timeout=_S, topic_partitions=()))
    assert bad.error_code == ErrorCode.invalid_request


def test_alter_reassignments_split_by_owner_with_owner_errors_on_top() -> None:
    def answer(node: int, op: int, req: oa.AlterReassignmentsOp) -> Any:
        if node == 5:
            return oa.AlterReassignmentsOpResp(
                int(ErrorCode.request_timed_out), "controller away",
                tuple(oa.TopicOutcomes(t.name, tuple(
                    oa.PartitionOutcome(p.partition, int(ErrorCode.request_timed_out), "away")
                    for p in t.partitions)) for t in req.topics))
        return oa.AlterReassignmentsOpResp(0, None, tuple(
            oa.TopicOutcomes(t.name, tuple(
                oa.PartitionOutcome(p.partition, 0 if p.replicas else
                                    int(ErrorCode.no_reassignment_in_progress), None)
                for p in t.partitions)) for t in req.topics))

    gw, fwd = _gateway(answer)

    def topic(name: str, *parts: tuple[int, tuple[int, ...] | None]) -> ReassignableTopic:
        return ReassignableTopic(name=name, partitions=tuple(
            ReassignablePartition(partition_index=p, replicas=r) for p, r in parts))

    resp = _handle(gw, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
                   AlterPartitionReassignmentsRequest(timeout=_S, topics=(
                       topic("a", (0, (2, 5)), (1, None)), topic("nope", (0, (1,))),
                       topic("b", (0, (3,))))))
    assert (resp.error_code, resp.error_message) == (0, None)
    assert _rows(resp.responses) == [
        ("a", [(0, 0), (1, ErrorCode.no_reassignment_in_progress)]),
        ("nope", [(0, ErrorCode.unknown_topic_or_partition)]),
        ("b", [(0, ErrorCode.not_controller)])]
    assert all(p.error_message for t in resp.responses[1:] for p in t.partitions)
    [two] = [r for n, _, r in fwd.calls if n == 2]
    assert two.topics == (oa.ReassignTopic("a", (oa.ReassignPartition(0, (2, 5)),
                                                 oa.ReassignPartition(1, None))),)
    away = _handle(gw, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
                   AlterPartitionReassignmentsRequest(timeout=_S, topics=(
                       topic("e", (0, (5,))),)))
    assert (away.error_code, away.error_message) == (ErrorCode.request_timed_out,
                                                     "controller away")


def test_list_reassignments_merges_every_node_and_fails_when_one_cannot_tell() -> None:
    def answer(node: int, op: int, req: oa.ListReassignmentsOp) -> Any:
        ongoing = {2: (oa.OngoingTopic("a", (oa.OngoingReassignment(1, (2, 5), (5,), ()),)),),
                   5: (oa.OngoingTopic("a", (oa.OngoingReassignment(1, (2, 5), (5,), ()),)),
                       oa.OngoingTopic("e", (oa.OngoingReassignment(0, (5, 2), (2,), (7,)),)))}
        return oa.ListReassignmentsOpResp(0, None, ongoing[node])

    gw, fwd = _gateway(answer, nodes=[2, 5])
    every = _handle(gw, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                    ListPartitionReassignmentsRequest(timeout=_S, topics=None))
    assert every.error_code == 0
    assert [(t.name, [(p.partition_index, p.replicas, p.adding_replicas, p.removing_replicas)
                      for p in t.partitions]) for t in every.topics] == [
        ("a", [(1, (2, 5), (5,), ())]), ("e", [(0, (5, 2), (2,), (7,))])]
    fwd.calls.clear()
    named = _handle(gw, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                    ListPartitionReassignmentsRequest(timeout=_S, topics=(
                        ListPartitionReassignmentsTopics(name="e", partition_indexes=(0,)),
                        ListPartitionReassignmentsTopics(name="nope",
                                                         partition_indexes=(0,)))))
    # asked of its owner only, and only its own answer counts
    assert [(n, r.topics) for n, _, r in fwd.calls] == [(5, (oa.PartitionsOf("e", (0,)),))]
    assert [t.name for t in named.topics] == ["e"]
    gw, _ = _gateway(answer, nodes=[2, 4])
    slow = _handle(gw, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                   ListPartitionReassignmentsRequest(timeout=_S, topics=None))
    assert (slow.error_code, slow.topics) == (ErrorCode.request_timed_out, ())
    assert "node 4" in (slow.error_message or "")
