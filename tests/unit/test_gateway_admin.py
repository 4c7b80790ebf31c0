"""Admin KafkaOps (eddy.gateway.ops_admin): postcard round trips and hostile payloads, the
owner's runners against a real Broker, the gateway's splitting and merging with a scripted
forwarder (one node answering, one unreachable, one too slow), and the member directory's
forget_topic."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import types
import typing
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.alter_configs.v2.request import AlterableConfig as AlterableV2
from kio.schema.alter_configs.v2.request import AlterConfigsRequest as AlterV2
from kio.schema.alter_configs.v2.request import AlterConfigsResource as AlterResV2
from kio.schema.create_partitions.v3.request import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_records.v2.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsV1
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest as DeleteTopicsV6
from kio.schema.delete_topics.v6.request import DeleteTopicState
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_configs.v4.request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from kio.schema.describe_log_dirs.v4.request import (
    DescribableLogDirTopic,
    DescribeLogDirsRequest,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig as IncConfig,
)
from kio.schema.incremental_alter_configs.v1.request import (
    AlterConfigsResource as IncResource,
)
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)

from eddy import postcard
from eddy.broker.broker import Broker
from eddy.broker.handlers import configs
from eddy.clock import ManualClock
from eddy.config import BrokerConfig
from eddy.gateway import ops
from eddy.gateway import ops_admin as oa
from eddy.gateway.executor import RUNNERS, OpExecutor
from eddy.gateway.handlers.table import GATEWAY_HANDLERS, GATEWAY_VERSIONS
from eddy.gateway.mesh_link import DirectoryRoutes
from eddy.gateway.node import Gateway
from eddy.gateway.routes import TopicRoute
from eddy.mesh.directory import Directory, NodeInfo, Route
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request
from eddy.protocol.errors import ErrorCode

_S = datetime.timedelta(seconds=5)

# ---- structs -----------------------------------------------------------------------------


def _sample(tp: Any, seed: int, present: bool) -> Any:
    """A value of a postcard-annotated type (extremes of each integer width); `present`
    picks Some over None."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        marker = typing.get_args(tp)[1]
        low, high = -(1 << (marker.bits - 1)), (1 << (marker.bits - 1)) - 1
        return low + seed if seed % 2 else high - seed
    if origin in (typing.Union, types.UnionType):
        [arg] = [a for a in typing.get_args(tp) if a is not type(None)]
        return _sample(arg, seed, present) if present else None
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_sample(args[0], seed + i, present) for i in range(3))
        return tuple(_sample(a, seed + i, present) for i, a in enumerate(args))
    if tp is bool:
        return seed % 2 == 1
    if tp is str:
        return f"n{seed}-é"
    if tp is bytes:
        return bytes(range(seed % 5, seed % 5 + 16))
    assert dataclasses.is_dataclass(tp), tp
    hints = typing.get_type_hints(tp, include_extras=True)
    return tp(**{f.name: _sample(hints[f.name], seed + i, present)
                 for i, f in enumerate(dataclasses.fields(tp))})


STRUCTS = sorted({c for pair in oa.ADMIN_OPS.values() for c in pair}, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("present", [True, False])
def test_every_admin_struct_round_trips_through_postcard(cls: type, present: bool) -> None:
    value = _sample(cls, 1, present)
    data = postcard.encode(value)
    assert postcard.decode(cls, data) == value
    if data:  # a cut-off payload is refused, never half-decoded
        with pytest.raises(postcard.PostcardError):
            postcard.decode(cls, data[:-1])


def test_admin_op_constants_are_one_block_from_0x20_registered_everywhere() -> None:
    codes = sorted(oa.ADMIN_OPS)
    assert codes == list(range(0x20, 0x20 + len(codes)))
    assert not set(codes) & {0x10, 0x11} and not set(codes) & set(range(0x02, 0x0F))
    assert all(ops.OPS[c] == oa.ADMIN_OPS[c] for c in codes)
    assert set(RUNNERS) == set(ops.OPS)
    managed = {ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.DESCRIBE_CONFIGS,
               ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.DELETE_RECORDS,
               ApiKey.DESCRIBE_CLUSTER, ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE,
               ApiKey.DESCRIBE_LOG_DIRS}
    assert managed <= set(GATEWAY_HANDLERS) and managed <= set(GATEWAY_VERSIONS)


def test_a_hostile_count_is_refused_before_allocating(broker: Broker) -> None:
    # DescribeLogDirsOp: Some, then a Vec announcing 2^31 topics in a 7-byte payload
    payload = b"\x01" + b"\x80\x80\x80\x80\x08" + b"\x00"
    with pytest.raises(postcard.PostcardError, match="topics"):
        postcard.decode(oa.DescribeLogDirsOp, payload)
    ex = OpExecutor(broker)
    with pytest.raises(ops.BadOp, match="DescribeLogDirsOp"):
        asyncio.run(ex.execute(oa.KAFKA_OP_DESCRIBE_LOG_DIRS, payload))
    # a peer asking for 2^31 assignments gets an error, not 2^31 objects
    asyncio.run(ex.run(ops.KAFKA_OP_CREATE_TOPICS, ops.CreateTopicsOp(
        (ops.CreateTopic("big", 1, 1, ()),), 1000, False, 7)))
    r = asyncio.run(ex.run(oa.KAFKA_OP_CREATE_PARTITIONS, oa.CreatePartitionsOp(
        (oa.NewPartitions("big", 3, 2**31 - 1),), 1000, False)))
    assert r.topics[0].error_code == ErrorCode.invalid_replica_assignment
    assert len(broker.logs.get("big").partitions) == 1


# ---- the owner's runners against a real broker -------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    cfg = BrokerConfig(node_id=1, listen="127.0.0.1:0", data_dir=str(tmp_path / "data"),
                       num_partitions=2)
    b = Broker(cfg, ManualClock())
    b.load()
    yield b
    asyncio.run(b.stop())


def test_executor_runs_every_admin_op(broker: Broker) -> None:
    ex = OpExecutor(broker)
    batch_values = [b"a", b"b", b"c"]

    async def scenario() -> None:
        from batch_builder import build_batch
        await ex.run(ops.KAFKA_OP_CREATE_TOPICS, ops.CreateTopicsOp(
            (ops.CreateTopic("t", 2, 1, ()), ops.CreateTopic("gone", 1, 1, ())), 1000,
            False, 7))
        topic_id = broker.logs.get("gone").topic_id.bytes
        deleted = await ex.run(oa.KAFKA_OP_DELETE_TOPICS,
                               oa.DeleteTopicsOp(("gone", "never"), 1000))
        assert [(t.name, t.error_code) for t in deleted.topics] == [
            ("gone", 0), ("never", ErrorCode.unknown_topic_or_partition)]
        assert deleted.topics[0].topic_id == topic_id and broker.logs.get("gone") is None

        grown = await ex.run(oa.KAFKA_OP_CREATE_PARTITIONS, oa.CreatePartitionsOp(
            (oa.NewPartitions("t", 4, 2), oa.NewPartitions("t2", 3, -1)), 1000, False))
        assert [(t.name, t.error_code) for t in grown.topics] == [
            ("t", 0), ("t2", ErrorCode.unknown_topic_or_partition)]
        assert len(broker.logs.get("t").partitions) == 4

        inc = await ex.run(oa.KAFKA_OP_INCREMENTAL_ALTER_CONFIGS, oa.IncrementalAlterConfigsOp(
            (oa.IncrementalResource(configs.TOPIC, "t", (
                oa.IncrementalConfig("retention.ms", configs.SET, "1234"),)),
             oa.IncrementalResource(configs.BROKER, "1", (
                 oa.IncrementalConfig("num.partitions", configs.SET, "3"),))), False))
        assert [(r.name, r.error_code) for r in inc.resources] == [
            ("t", 0), ("1", ErrorCode.invalid_request)]
        described = await ex.run(oa.KAFKA_OP_DESCRIBE_CONFIGS, oa.DescribeConfigsOp(
            (oa.ConfigResource(configs.TOPIC, "t", ("retention.ms",)),), True, True))
        [res] = described.resources
        [c] = res.configs
        assert (c.name, c.value, c.config_source) == (
            "retention.ms", "1234", configs.TOPIC_CONFIG)
        assert c.synonyms[0] == oa.ConfigSynonym("retention.ms", "1234", configs.TOPIC_CONFIG)
        assert c.documentation and c.config_type == configs.CONFIG_TYPES["long"]
        replaced = await ex.run(oa.KAFKA_OP_ALTER_CONFIGS, oa.AlterConfigsOp(
            (oa.AlterResource(configs.TOPIC, "t", (("cleanup.policy", "delete"),)),), False))
        assert replaced.resources[0].error_code == 0
        assert broker.logs.get("t").configs == {"cleanup.policy": "delete"}

        produced = await ex.run(ops.KAFKA_OP_PRODUCE, ops.ProduceOp(-1, 1000, (
            ops.ProduceTopic("t", (ops.ProducePartition(0, bytes(build_batch(batch_values))),)),
        ), None, 9))
        assert produced.topics[0].partitions[0].error_code == 0
        trimmed = await ex.run(oa.KAFKA_OP_DELETE_RECORDS, oa.DeleteRecordsOp(
            (oa.DeleteRecordsTopic("t", ((0, 2), (9, 0))),), 1000))
        assert trimmed.topics == (oa.DeleteRecordsTopicResp("t", (
            (0, 2, 0), (9, -1, ErrorCode.unknown_topic_or_partition))),)

        dirs = await ex.run(oa.KAFKA_OP_DESCRIBE_LOG_DIRS,
                            oa.DescribeLogDirsOp((oa.LogDirTopicReq("t", (0, 1)),)))
        [d] = dirs.dirs
        assert d.error_code == 0 and d.total_bytes > 0 and d.usable_bytes >= 0
        assert [(t.name, [p.partition for p in t.partitions]) for t in d.topics] == [
            ("t", [0, 1])]
        assert d.topics[0].partitions[0].size > 0

        await ex.run(ops.KAFKA_OP_OFFSET_COMMIT, ops.OffsetCommitOp(
            "g", (("t", 0, 5, None), ("t", 1, 6, None)), -1, "", None, -1, (), 9))
        removed = await ex.run(oa.KAFKA_OP_OFFSET_DELETE,
                               oa.OffsetDeleteOp("g", (("t", 0),)))
        assert (removed.error_code, removed.partitions) == (0, (("t", 0, 0),))
        gone = await ex.run(oa.KAFKA_OP_DELETE_GROUPS, oa.DeleteGroupsOp(("g", "nope")))
        assert gone.groups == (("g", 0), ("nope", ErrorCode.group_id_not_found))

    asyncio.run(scenario())


# ---- the gateway with a scripted forwarder -----------------------------------------------

GW = 9
TOPICS = {"a": TopicRoute(2, 2), "b": TopicRoute(3, 1), "c": TopicRoute(2, 1),
          "d": TopicRoute(4, 1)}
GROUP_OWNERS = {"g2": 2, "g3": 3, "g2b": 2}
SUBSCRIBED = int(ErrorCode.group_subscribed_to_topic)


class Routes:
    def __init__(self) -> None:
        self.known = dict(TOPICS)
        self.noted: dict[str, TopicRoute] = {}
        self.forgotten: list[str] = []

    def topic(self, name: str) -> TopicRoute | None:
        return self.known.get(name)

    def topics(self) -> dict[str, TopicRoute]:
        return dict(self.known)

    def group_owner(self, group_id: str) -> int | None:
        return GROUP_OWNERS.get(group_id)

    def broker_nodes(self) -> list[int]:
        return [2, 3, 4]

    def note_topic(self, name: str, route: TopicRoute) -> None:
        self.noted[name] = route
        self.known[name] = route

    def forget_topic(self, name: str) -> None:
        self.forgotten.append(name)
        self.known.pop(name, None)


class Scripted:
    """Node 2 answers with `answer(op, request)`, node 3 is unreachable, node 4 too slow.
    Every op crosses postcard bytes, as over the mesh."""

    def __init__(self, answer: Callable[[int, Any], Any]) -> None:
        self.answer = answer
        self.calls: list[tuple[int, int, Any]] = []

    async def call(self, node_id: int, op: int, body: bytes, timeout_ms: int) -> bytes:
        request = postcard.decode(ops.OPS[op][0], body)
        self.calls.append((node_id, op, request))
        if node_id == 3:
            raise ops.OpUnavailable("node 3 is not on the mesh")
        if node_id == 4:
            raise ops.OpTimeout("node 4 did not answer in time")
        return postcard.encode(self.answer(op, request))


def _gateway(answer: Callable[[int, Any], Any]) -> tuple[Gateway, Scripted, Routes]:
    cfg = BrokerConfig(node_id=GW, listen="127.0.0.1:0", advertised="gw.example:19092",
                       process_roles="gateway", log_retention_ms=7200000)
    fwd, routes = Scripted(answer), Routes()
    return Gateway(cfg, routes, fwd, cluster_id="cid"), fwd, routes


def _handle(gw: Gateway, key: ApiKey, version: int, body: Any) -> Any:
    return asyncio.run(GATEWAY_HANDLERS[key](gw, Request(key, version, 1, "c", body)))


def _node2(fwd: Scripted) -> list[Any]:
    return [req for node, _, req in fwd.calls if node == 2]


def test_delete_topics_split_by_node_merged_in_request_order() -> None:
    tid = uuid.uuid4()

    def answer(op: int, req: oa.DeleteTopicsOp) -> oa.DeleteTopicsOpResp:
        return oa.DeleteTopicsOpResp(tuple(
            oa.DeletedTopic(n, 0, None, tid.bytes) if n == "a" else
            oa.DeletedTopic(n, int(ErrorCode.invalid_request), "internal", bytes(16))
            for n in req.names))

    gw, fwd, routes = _gateway(answer)
    resp = _handle(gw, ApiKey.DELETE_TOPICS, 6, DeleteTopicsV6(topics=(
        DeleteTopicState(name="b", topic_id=uuid.UUID(int=0)),
        DeleteTopicState(name="a", topic_id=uuid.UUID(int=0)),
        DeleteTopicState(name="zz", topic_id=uuid.UUID(int=0)),
        DeleteTopicState(name=None, topic_id=uuid.UUID(int=5)),
        DeleteTopicState(name="c", topic_id=uuid.UUID(int=0))), timeout=_S))
    assert [(r.name, r.error_code) for r in resp.responses] == [
        ("b", ErrorCode.not_controller), ("a", ErrorCode.none),
        ("zz", ErrorCode.unknown_topic_or_partition), (None, ErrorCode.unknown_topic_id),
        ("c", ErrorCode.invalid_request)]
    assert resp.responses[1].topic_id == tid and "node 3" in resp.responses[0].error_message
    assert [r.names for r in _node2(fwd)] == [("a", "c")]  # one op per node
    assert sorted(n for n, _, _ in fwd.calls) == [2, 3]
    assert routes.forgotten == ["a"]  # Metadata drops it at once (only what was deleted)
    v1 = _handle(gw, ApiKey.DELETE_TOPICS, 1, DeleteTopicsV1(topic_names=("d",), timeout=_S))
    assert v1.responses[0].error_code == ErrorCode.request_timed_out


def test_create_partitions_notes_new_counts_and_refuses_foreign_assignments() -> None:
    def answer(op: int, req: oa.CreatePartitionsOp) -> oa.CreatePartitionsOpResp:
        return oa.CreatePartitionsOpResp(tuple(oa.TopicError(t.name, 0, None)
                                               for t in req.topics))

    gw, fwd, routes = _gateway(answer)
    resp = _handle(gw, ApiKey.CREATE_PARTITIONS, 3, CreatePartitionsRequest(topics=(
        CreatePartitionsTopic(name="a", count=5, assignments=(
            CreatePartitionsAssignment(broker_ids=(GW,)),) * 3),
        CreatePartitionsTopic(name="c", count=2, assignments=(
            CreatePartitionsAssignment(broker_ids=(1,)),)),
        CreatePartitionsTopic(name="b", count=4, assignments=None),
        CreatePartitionsTopic(name="x", count=4, assignments=None)),
        timeout=_S, validate_only=False))
    assert [(r.name, r.error_code) for r in resp.results] == [
        ("a", 0), ("c", ErrorCode.invalid_replica_assignment),
        ("b", ErrorCode.not_controller), ("x", ErrorCode.unknown_topic_or_partition)]
    [sent] = _node2(fwd)
    assert sent.topics == (oa.NewPartitions("a", 5, 3),)
    assert routes.noted == {"a": TopicRoute(2, 5)}


def test_describe_configs_forwards_topics_and_answers_for_itself() -> None:
    cfg_a = oa.DescribedConfig("retention.ms", "5", False, 1, False,
                               (oa.ConfigSynonym("retention.ms", "5", 1),), 5, "doc")

    def answer(op: int, req: oa.DescribeConfigsOp) -> oa.DescribeConfigsOpResp:
        assert req.include_synonyms and not req.include_documentation
        return oa.DescribeConfigsOpResp(tuple(
            oa.DescribedResource(r.resource_type, r.name, 0, None, (cfg_a,))
            for r in req.resources))

    gw, fwd, _ = _gateway(answer)
    resp = _handle(gw, ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(
        resources=(
            DescribeConfigsResource(resource_type=configs.BROKER, resource_name=str(GW),
                                    configuration_keys=("log.retention.ms", "node.id")),
            DescribeConfigsResource(resource_type=configs.TOPIC, resource_name="a",
                                    configuration_keys=None),
            DescribeConfigsResource(resource_type=configs.TOPIC, resource_name="b",
                                    configuration_keys=None),
            DescribeConfigsResource(resource_type=configs.TOPIC, resource_name="nope",
                                    configuration_keys=None),
            DescribeConfigsResource(resource_type=configs.BROKER, resource_name="1",
                                    configuration_keys=None),
            DescribeConfigsResource(resource_type=8, resource_name="x",
                                    configuration_keys=None)),
        include_synonyms=True, include_documentation=False))
    me, a, b, nope, other, logger = resp.results
    assert me.error_code == 0
    assert {c.name: (c.value, c.config_source, c.read_only) for c in me.configs} == {
        "log.retention.ms": ("7200000", configs.STATIC_BROKER_CONFIG, True),
        "node.id": (str(GW), configs.STATIC_BROKER_CONFIG, True)}
    # the same entries a broker gives for its own config
    mine = {e["name"]: e["value"] for e in configs.broker_config_entries(gw.config, GW, "")}
    assert mine["log.retention.ms"] == "7200000"
    assert a.error_code == 0 and [(c.name, c.value, c.synonyms[0].source)
                                  for c in a.configs] == [("retention.ms", "5", 1)]
    assert b.error_code == ErrorCode.leader_not_available and b.configs == ()
    assert nope.error_code == ErrorCode.unknown_topic_or_partition
    assert other.error_code == ErrorCode.invalid_request
    assert logger.error_code == ErrorCode.invalid_request
    assert [[r.name for r in req.resources] for req in _node2(fwd)] == [["a"]]


def test_alter_configs_both_kinds_split_and_refuse_broker_changes() -> None:
    def answer(op: int, req: Any) -> oa.AlterConfigsOpResp:
        return oa.AlterConfigsOpResp(tuple(
            oa.AlteredResource(r.resource_type, r.name, 0, None) for r in req.resources))

    gw, fwd, _ = _gateway(answer)
    inc = _handle(gw, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(
        resources=(
            IncResource(resource_type=configs.TOPIC, resource_name="c", configs=(
                IncConfig(name="retention.ms", config_operation=0, value="9"),)),
            IncResource(resource_type=configs.TOPIC, resource_name="d", configs=()),
            IncResource(resource_type=configs.BROKER, resource_name="", configs=())),
        validate_only=True))
    assert [(r.resource_name, r.error_code) for r in inc.responses] == [
        ("c", 0), ("d", ErrorCode.request_timed_out), ("", ErrorCode.invalid_request)]
    assert "static" in inc.responses[2].error_message
    [sent] = _node2(fwd)
    assert sent == oa.IncrementalAlterConfigsOp((oa.IncrementalResource(
        configs.TOPIC, "c", (oa.IncrementalConfig("retention.ms", 0, "9"),)),), True)
    full = _handle(gw, ApiKey.ALTER_CONFIGS, 2, AlterV2(resources=(
        AlterResV2(resource_type=configs.TOPIC, resource_name="ghost", configs=()),
        AlterResV2(resource_type=configs.TOPIC, resource_name="a", configs=(
            AlterableV2(name="cleanup.policy", value="compact"),))), validate_only=False))
    assert [(r.resource_name, r.error_code) for r in full.responses] == [
        ("ghost", ErrorCode.unknown_topic_or_partition), ("a", 0)]
    assert _node2(fwd)[1].resources == (oa.AlterResource(
        configs.TOPIC, "a", (("cleanup.policy", "compact"),)),)


def test_delete_records_per_partition_results_and_retriable_failures() -> None:
    def answer(op: int, req: oa.DeleteRecordsOp) -> oa.DeleteRecordsOpResp:
        return oa.DeleteRecordsOpResp(tuple(oa.DeleteRecordsTopicResp(
            t.name, tuple((p, o, 0) for p, o in t.partitions)) for t in req.topics))

    gw, _, _ = _gateway(answer)
    resp = _handle(gw, ApiKey.DELETE_RECORDS, 2, DeleteRecordsRequest(topics=(
        DeleteRecordsTopic(name="b", partitions=(
            DeleteRecordsPartition(partition_index=0, offset=3),)),
        DeleteRecordsTopic(name="a", partitions=(
            DeleteRecordsPartition(partition_index=1, offset=7),
            DeleteRecordsPartition(partition_index=0, offset=2))),
        DeleteRecordsTopic(name="nope", partitions=(
            DeleteRecordsPartition(partition_index=0, offset=1),))), timeout=_S))
    got = [(t.name, [(p.partition_index, p.low_watermark, p.error_code)
                     for p in t.partitions]) for t in resp.topics]
    assert got == [("b", [(0, -1, ErrorCode.not_leader_or_follower)]),
                   ("a", [(1, 7, 0), (0, 2, 0)]),
                   ("nope", [(0, -1, ErrorCode.unknown_topic_or_partition)])]


def test_a_short_answer_fails_its_topics_instead_of_misattributing() -> None:
    gw, _, _ = _gateway(lambda op, req: oa.DeleteTopicsOpResp(()))
    resp = _handle(gw, ApiKey.DELETE_TOPICS, 1, DeleteTopicsV1(topic_names=("a", "c"),
                                                               timeout=_S))
    assert [r.error_code for r in resp.responses] == [ErrorCode.unknown_server_error] * 2


def test_describe_cluster_is_the_gateway_alone() -> None:
    gw, fwd, _ = _gateway(lambda op, req: None)
    resp = _handle(gw, ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=1))
    assert (resp.error_code, resp.cluster_id, resp.controller_id) == (0, "cid", GW)
    assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [
        (GW, "gw.example", 19092)]
    ctl = _handle(gw, ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=2))
    assert ctl.error_code == ErrorCode.unsupported_endpoint_type
    assert fwd.calls == []


def test_delete_groups_and_offset_delete_go_to_each_groups_owner() -> None:
    def answer(op: int, req: Any) -> Any:
        if op == oa.KAFKA_OP_DELETE_GROUPS:
            return oa.DeleteGroupsOpResp(tuple(
                (g, 0 if g == "g2" else int(ErrorCode.non_empty_group)) for g in req.groups))
        return oa.OffsetDeleteOpResp(0, tuple((t, p, 0 if p == 0 else SUBSCRIBED)
                                              for t, p in req.partitions))

    gw, fwd, _ = _gateway(answer)
    resp = _handle(gw, ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(
        groups_names=("g3", "g2", "g2b", "g2", "orphan")))
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        ("g3", ErrorCode.coordinator_not_available), ("g2", 0),
        ("g2b", ErrorCode.non_empty_group), ("orphan", ErrorCode.coordinator_not_available)]
    assert [r.groups for r in _node2(fwd)] == [("g2", "g2b")]
    od = _handle(gw, ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="g2", topics=(
        OffsetDeleteRequestTopic(name="a", partitions=(
            OffsetDeleteRequestPartition(partition_index=0),
            OffsetDeleteRequestPartition(partition_index=1))),)))
    assert od.error_code == 0
    assert [(p.partition_index, p.error_code) for p in od.topics[0].partitions] == [
        (0, 0), (1, ErrorCode.group_subscribed_to_topic)]
    down = _handle(gw, ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="g3", topics=(
        OffsetDeleteRequestTopic(name="a", partitions=(
            OffsetDeleteRequestPartition(partition_index=0),)),)))
    assert (down.error_code, down.topics) == (ErrorCode.coordinator_not_available, ())


def test_describe_log_dirs_fans_out_and_merges() -> None:
    def answer(op: int, req: oa.DescribeLogDirsOp) -> oa.DescribeLogDirsOpResp:
        topics = tuple(oa.LogDirTopic(t.name, tuple(oa.LogDirPartition(p, 100, 0, False)
                                                     for p in t.partitions))
                       for t in req.topics or (oa.LogDirTopicReq("a", (0, 1)),))
        return oa.DescribeLogDirsOpResp(0, (oa.LogDir(0, "/data/topics", topics, 1000, 500),))

    gw, fwd, _ = _gateway(answer)
    resp = _handle(gw, ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=(
        DescribableLogDirTopic(topic="a", partitions=(1,)),
        DescribableLogDirTopic(topic="b", partitions=(0,)))))
    ok, three, four = resp.results
    assert (ok.error_code, ok.log_dir, ok.total_bytes) == (0, "/data/topics", 1000)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in ok.topics] == [
        ("a", [1])]
    assert three.error_code == four.error_code == ErrorCode.kafka_storage_error
    assert "node 3" in three.log_dir and "node 4" in four.log_dir
    # every node is asked, each for its own topics only
    assert {n: r.topics for n, _, r in fwd.calls} == {
        2: (oa.LogDirTopicReq("a", (1,)),), 3: (oa.LogDirTopicReq("b", (0,)),), 4: ()}


# ---- the directory's view after a delete -------------------------------------------------


def _info(node: int, roles: tuple[str, ...] = ("broker",)) -> NodeInfo:
    return NodeInfo(key=bytes([node]) * 32, kafka_node_id=node, roles=roles,
                    mesh_addr=f"127.0.0.1:{7000 + node}", kafka_addr=f"127.0.0.1:{9000 + node}",
                    rack=None, version="test")


def test_a_deleted_topic_stays_gone_until_its_owner_announces_without_it() -> None:
    d = Directory(_info(0, ("gateway",)))
    d.hello(_info(1), 0)
    d.hello(_info(2), 0)
    d.routes_update(_info(1).key, 1, {"t": 2, "u": 1}, frozenset())
    routes = DirectoryRoutes(d)
    routes.forget_topic("t")
    assert routes.topic("t") is None and set(routes.topics()) == {"u"}
    d.routes_update(_info(2).key, 1, {"other": 1}, frozenset())  # another node: no change
    assert routes.topic("t") is None
    d.routes_update(_info(1).key, 2, {"t": 2, "u": 1}, frozenset())  # sent before the delete
    assert routes.topic("t") is None
    d.routes_update(_info(1).key, 3, {"u": 1}, frozenset())
    d.routes_update(_info(1).key, 4, {"t": 5, "u": 1}, frozenset())  # made again there
    assert routes.topic("t") == TopicRoute(1, 5)
    # recreated through the gateway before the owner's next table: routed at once
    routes.forget_topic("u")
    routes.note_topic("u", TopicRoute(2, 3))
    assert routes.topic("u") == TopicRoute(2, 3)


def test_grown_partitions_show_before_the_owners_next_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    d = Directory(_info(0, ("gateway",)))
    d.hello(_info(1), 0)
    d.routes_update(_info(1).key, 1, {"t": 2}, frozenset())
    d.note_topic("t", Route(1, 6))
    assert d.topic("t") == Route(1, 6)
    d.routes_update(_info(1).key, 2, {"t": 6}, frozenset())
    assert d.topic("t") == Route(1, 6)
    import eddy.mesh.directory as directory
    monkeypatch.setattr(directory, "MAX_DELETED", 3)
    d.routes_update(_info(1).key, 3, {f"x{i}": 1 for i in range(5)}, frozenset())
    for i in range(5):
        d.forget_topic(f"x{i}")
    assert len(d._deleted) == 3  # bounded: the oldest are forgotten first
    assert set(d.topics()) == {"x0", "x1"}
