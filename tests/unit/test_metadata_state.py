"""The metadata state machine: each command's happy path and rejections, snapshots, and
determinism over random command logs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.cluster.placement import HashRing
from eddy.log.config import TOPIC_CONFIGS
from eddy.metadata import (
    NO_LEADER,
    ApplyResult,
    MetadataSnapshotError,
    MetadataState,
    decode_command,
    encode_command,
)
from eddy.metadata.commands import (
    AllocateProducerIds,
    AlterBrokerConfigs,
    AlterTopicConfigs,
    BrokerHeartbeat,
    ChangeIsr,
    ChangePartitionLeader,
    CreateAcl,
    CreatePartitions,
    CreateTopic,
    DeleteAcl,
    DeletePipeline,
    DeleteScramUser,
    DeleteTopic,
    FenceBroker,
    MetadataCommand,
    RegisterBroker,
    RegisterPipeline,
    SetClusterId,
    UnfenceBroker,
    UnregisterBroker,
    UpsertScramUser,
)
from eddy.metadata.configs import DYNAMIC_BROKER_CONFIGS
from eddy.metadata.records import AclBinding, ConfigEntry
from eddy.protocol.errors import ErrorCode

E = ErrorCode


def key(node: int) -> bytes:
    return bytes([node % 256]) * 32


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def register(node: int, epoch: int = 1, rack: str | None = None) -> RegisterBroker:
    return RegisterBroker(node, key(node), rack, f"10.0.0.{node}:9092", f"10.0.0.{node}:7000",
                          epoch)


def ok(state: MetadataState, cmd: MetadataCommand) -> ApplyResult:
    result = state.apply(cmd)
    assert result.ok, result
    return result


def rejected(state: MetadataState, cmd: MetadataCommand, code: ErrorCode) -> ApplyResult:
    before = state.snapshot()
    result = state.apply(cmd)
    assert result.code == code, result
    assert result.message
    assert state.snapshot() == before  # a rejection changes nothing
    return result


def cluster(nodes: int = 3) -> MetadataState:
    state = MetadataState()
    for n in range(1, nodes + 1):
        ok(state, register(n))
        ok(state, UnfenceBroker(n, 1))
    return state


def with_topic(nodes: int = 3, rf: int = 3, partitions: int = 2) -> MetadataState:
    state = cluster(nodes)
    plan = HashRing().place("orders", partitions, rf, state.placement_nodes())
    ok(state, CreateTopic("orders", tid(1), tuple(tuple(p) for p in plan), ()))
    return state


# -- brokers ---------------------------------------------------------------------------------
def test_register_starts_fenced_and_unfence_makes_it_live() -> None:
    state = MetadataState()
    assert ok(state, register(1, rack="r1")).value == 1
    broker = state.broker(1)
    assert broker is not None and broker.fenced and broker.rack == "r1"
    assert state.live_brokers() == []
    assert ok(state, UnfenceBroker(1, 1)).value == 1
    assert ok(state, UnfenceBroker(1, 1)).value == 0  # already unfenced: no change
    assert [b.node_id for b in state.live_brokers()] == [1]
    assert state.placement_nodes() == {1: "r1"}
    assert ok(state, FenceBroker(1, 1)).value == 1
    assert [b.node_id for b in state.fenced_brokers()] == [1]


def test_register_rejections() -> None:
    state = cluster(2)
    rejected(state, register(1, epoch=1), E.stale_broker_epoch)
    rejected(state, RegisterBroker(1, key(9), None, "a:1", "a:2", 5),
             E.duplicate_broker_registration)
    rejected(state, RegisterBroker(7, key(1), None, "a:1", "a:2", 1),
             E.duplicate_broker_registration)
    rejected(state, RegisterBroker(7, b"short", None, "a:1", "a:2", 1), E.invalid_request)
    rejected(state, RegisterBroker(-1, key(7), None, "a:1", "a:2", 1), E.invalid_request)
    rejected(state, RegisterBroker(7, key(7), None, "", "a:2", 1), E.invalid_request)
    rejected(state, RegisterBroker(7, key(7), "", "a:1", "a:2", 1), E.invalid_request)
    rejected(state, RegisterBroker(7, key(7), None, "a:1", "a:2", 0), E.invalid_request)


def test_reregistration_with_a_higher_epoch_fences_again() -> None:
    state = cluster(1)
    ok(state, BrokerHeartbeat(1, 1, 500))
    ok(state, register(1, epoch=2))
    broker = state.broker(1)
    assert broker is not None and broker.fenced and broker.epoch == 2
    assert broker.last_heartbeat_ms == 500
    rejected(state, UnfenceBroker(1, 1), E.stale_broker_epoch)
    ok(state, UnfenceBroker(1, 2))


def test_heartbeat_records_time_and_never_goes_back() -> None:
    state = cluster(1)
    ok(state, BrokerHeartbeat(1, 1, 1000))
    ok(state, BrokerHeartbeat(1, 1, 900))
    broker = state.broker(1)
    assert broker is not None and broker.last_heartbeat_ms == 1000
    rejected(state, BrokerHeartbeat(1, 2, 2000), E.stale_broker_epoch)
    rejected(state, BrokerHeartbeat(5, 1, 2000), E.broker_id_not_registered)
    rejected(state, FenceBroker(5, 1), E.broker_id_not_registered)
    rejected(state, FenceBroker(1, 3), E.stale_broker_epoch)


def test_unregister() -> None:
    state = cluster(2)
    ok(state, UnregisterBroker(2))
    assert state.broker(2) is None
    rejected(state, UnregisterBroker(2), E.broker_id_not_registered)
    ok(state, register(2, epoch=1))  # may come back, as a new registration


# -- producer ids ----------------------------------------------------------------------------
def test_producer_id_blocks_never_overlap() -> None:
    state = cluster(3)
    blocks = []
    for node, count in [(1, 1000), (2, 1), (3, 500), (1, 1000), (2, 7)]:
        first = ok(state, AllocateProducerIds(node, count)).value
        assert first is not None
        blocks.append(range(first, first + count))
    ids = [i for b in blocks for i in b]
    assert len(ids) == len(set(ids))
    assert state.next_producer_id == sum(len(b) for b in blocks)
    rejected(state, AllocateProducerIds(9, 10), E.broker_id_not_registered)
    rejected(state, AllocateProducerIds(1, 0), E.invalid_request)
    rejected(state, AllocateProducerIds(1, (1 << 20) + 1), E.invalid_request)


# -- topics ----------------------------------------------------------------------------------
def test_create_topic_elects_first_live_replica() -> None:
    state = cluster(3)
    ok(state, FenceBroker(2, 1))
    ok(state, CreateTopic("t", tid(7), ((2, 1, 3), (3, 2, 1)),
                          (ConfigEntry("retention.ms", "1000"),)))
    p0, p1 = state.partition("t", 0), state.partition("t", 1)
    assert p0 is not None and p1 is not None
    assert (p0.leader, p0.isr, p0.leader_epoch, p0.partition_epoch) == (1, (1, 3), 0, 0)
    assert (p1.leader, p1.isr) == (3, (3, 1))
    assert state.topic_overrides("t") == {"retention.ms": "1000"}
    rec = state.topic_by_id(tid(7))
    assert rec is not None and rec.name == "t"
    assert state.topic_names() == ["t"]
    assert [(t, i) for t, i, _ in state.partitions_of(2)] == [("t", 0), ("t", 1)]


def test_create_topic_rejections() -> None:
    state = with_topic()
    parts = ((1, 2),)
    rejected(state, CreateTopic("orders", tid(2), parts, ()), E.topic_already_exists)
    rejected(state, CreateTopic("bad name", tid(2), parts, ()), E.invalid_topic_exception)
    rejected(state, CreateTopic("", tid(2), parts, ()), E.invalid_topic_exception)
    ok(state, CreateTopic("a.b", tid(3), parts, ()))
    rejected(state, CreateTopic("a_b", tid(2), parts, ()), E.invalid_topic_exception)
    rejected(state, CreateTopic("x", tid(1), parts, ()), E.inconsistent_topic_id)
    rejected(state, CreateTopic("x", bytes(16), parts, ()), E.invalid_request)
    rejected(state, CreateTopic("x", b"\x01" * 15, parts, ()), E.invalid_request)
    rejected(state, CreateTopic("x", tid(2), (), ()), E.invalid_partitions)
    rejected(state, CreateTopic("x", tid(2), ((),), ()), E.invalid_replica_assignment)
    rejected(state, CreateTopic("x", tid(2), ((1, 1),), ()), E.invalid_replica_assignment)
    rejected(state, CreateTopic("x", tid(2), ((1, 9),), ()), E.invalid_replica_assignment)
    rejected(state, CreateTopic("x", tid(2), ((1, 2), (1,)), ()),
             E.invalid_replica_assignment)
    rejected(state, CreateTopic("x", tid(2), parts, (ConfigEntry("retention.ms", "x"),)),
             E.invalid_config)
    rejected(state, CreateTopic("x", tid(2), parts, (ConfigEntry("no.such", "1"),)),
             E.invalid_config)
    rejected(state, CreateTopic("x", tid(2), parts, (ConfigEntry("retention.ms", "1"),
                                                      ConfigEntry("retention.ms", "2"))),
             E.invalid_request)
    ok(state, FenceBroker(1, 1))
    ok(state, FenceBroker(2, 1))
    rejected(state, CreateTopic("x", tid(2), parts, ()), E.invalid_replica_assignment)


def test_delete_topic() -> None:
    state = with_topic()
    rejected(state, DeleteTopic("orders", tid(99)), E.unknown_topic_id)
    rejected(state, DeleteTopic("nope", None), E.unknown_topic_or_partition)
    ok(state, DeleteTopic("orders", tid(1)))
    assert state.topic("orders") is None and state.topic_by_id(tid(1)) is None
    ok(state, CreateTopic("orders", tid(1), ((1,),), ()))  # name and id are free again
    ok(state, CreateTopic("__consumer_offsets", tid(5), ((1,),), ()))
    rejected(state, DeleteTopic("__consumer_offsets", None), E.invalid_request)


def test_create_partitions_appends_and_keeps_old_ones() -> None:
    state = with_topic(rf=2, partitions=2)
    before = state.topic("orders")
    assert before is not None
    ok(state, CreatePartitions("orders", ((3, 1), (2, 3))))
    after = state.topic("orders")
    assert after is not None and len(after.partitions) == 4
    assert after.partitions[:2] == before.partitions
    assert after.partitions[2].replicas == (3, 1) and after.partitions[2].leader == 3
    rejected(state, CreatePartitions("orders", ((1, 2, 3),)), E.invalid_replica_assignment)
    rejected(state, CreatePartitions("orders", ()), E.invalid_partitions)
    rejected(state, CreatePartitions("orders", ((1, 8),)), E.invalid_replica_assignment)
    rejected(state, CreatePartitions("nope", ((1, 2),)), E.unknown_topic_or_partition)


# -- configs ---------------------------------------------------------------------------------
def test_alter_topic_configs() -> None:
    state = with_topic()
    ok(state, AlterTopicConfigs("orders", (ConfigEntry("retention.ms", "5"),
                                           ConfigEntry("cleanup.policy", "compact")), ()))
    ok(state, AlterTopicConfigs("orders", (), ("cleanup.policy",)))
    assert state.topic_overrides("orders") == {"retention.ms": "5"}
    rejected(state, AlterTopicConfigs("orders", (ConfigEntry("retention.ms", "-5"),), ()),
             E.invalid_config)
    rejected(state, AlterTopicConfigs("orders", (), ("no.such",)), E.invalid_config)
    rejected(state, AlterTopicConfigs("orders", (ConfigEntry("retention.ms", "1"),),
                                      ("retention.ms",)), E.invalid_request)
    rejected(state, AlterTopicConfigs("nope", (), ()), E.unknown_topic_or_partition)


def test_broker_configs_and_resolved_topic_defaults() -> None:
    state = with_topic()
    ok(state, AlterBrokerConfigs(None, (ConfigEntry("log.retention.ms", "100"),
                                        ConfigEntry("log.segment.bytes", "2048")), ()))
    ok(state, AlterBrokerConfigs(2, (ConfigEntry("log.segment.bytes", "4096"),), ()))
    assert state.broker_config(None) == {"log.retention.ms": "100", "log.segment.bytes": "2048"}
    cfg = state.topic_config("orders", static={"retention.ms": "7", "flush.ms": "9"})
    assert cfg is not None
    assert (cfg.retention_ms, cfg.segment_bytes, cfg.flush_ms) == (100, 2048, 9)
    cfg2 = state.topic_config("orders", node_id=2)
    assert cfg2 is not None and cfg2.segment_bytes == 4096
    ok(state, AlterTopicConfigs("orders", (ConfigEntry("retention.ms", "5"),), ()))
    cfg3 = state.topic_config("orders")
    assert cfg3 is not None and cfg3.retention_ms == 5
    ok(state, AlterBrokerConfigs(2, (), ("log.segment.bytes",)))
    assert state.broker_config(2) == {}
    rejected(state, AlterBrokerConfigs(None, (ConfigEntry("broker.id", "3"),), ()),
             E.invalid_config)
    rejected(state, AlterBrokerConfigs(None, (ConfigEntry("log.retention.ms", "x"),), ()),
             E.invalid_config)
    rejected(state, AlterBrokerConfigs(None, (), ("nope",)), E.invalid_config)
    rejected(state, AlterBrokerConfigs(-3, (), ()), E.invalid_request)


def test_dynamic_broker_configs_name_real_topic_configs() -> None:
    from eddy.config import TOPIC_DEFAULT_FIELDS, kafka_name

    assert set(DYNAMIC_BROKER_CONFIGS.values()) <= set(TOPIC_CONFIGS)
    for topic_name, field in TOPIC_DEFAULT_FIELDS.items():
        assert DYNAMIC_BROKER_CONFIGS[kafka_name(field)] == topic_name


# -- partitions ------------------------------------------------------------------------------
def test_leader_change_bumps_the_leader_epoch() -> None:
    state = with_topic(rf=3, partitions=1)
    p = state.partition("orders", 0)
    assert p is not None
    other = next(n for n in p.replicas if n != p.leader)
    assert ok(state, ChangePartitionLeader("orders", 0, other, 1, p.isr)).value == 1
    q = state.partition("orders", 0)
    assert q is not None
    assert (q.leader, q.leader_epoch, q.partition_epoch) == (other, 1, 1)
    # same leader, smaller ISR: the leader epoch stays, the partition epoch moves
    isr = (other,)
    ok(state, ChangePartitionLeader("orders", 0, other, 1, isr))
    r = state.partition("orders", 0)
    assert r is not None and (r.leader_epoch, r.partition_epoch, r.isr) == (1, 2, isr)
    assert ok(state, ChangePartitionLeader("orders", 0, other, 1, isr)).value == 0
    ok(state, ChangePartitionLeader("orders", 0, NO_LEADER, 2, isr))
    s = state.partition("orders", 0)
    assert s is not None and (s.leader, s.leader_epoch) == (NO_LEADER, 2)


def test_leader_change_rejections() -> None:
    state = with_topic(nodes=4, rf=3, partitions=1)
    p = state.partition("orders", 0)
    assert p is not None
    outsider = next(n for n in (1, 2, 3, 4) if n not in p.replicas)
    other = next(n for n in p.replicas if n != p.leader)
    cpl = ChangePartitionLeader
    rejected(state, cpl("orders", 0, other, 0, p.isr), E.fenced_leader_epoch)
    rejected(state, cpl("orders", 0, other, 5, p.isr), E.unknown_leader_epoch)
    rejected(state, cpl("orders", 0, p.leader, 1, p.isr), E.unknown_leader_epoch)
    rejected(state, cpl("orders", 1, other, 1, p.isr), E.unknown_topic_or_partition)
    rejected(state, cpl("orders", -1, other, 1, p.isr), E.unknown_topic_or_partition)
    rejected(state, cpl("nope", 0, other, 1, p.isr), E.unknown_topic_or_partition)
    rejected(state, cpl("orders", 0, other, 1, ()), E.invalid_request)
    rejected(state, cpl("orders", 0, other, 1, (other, other)), E.invalid_request)
    rejected(state, cpl("orders", 0, other, 1, (other, outsider)), E.invalid_request)
    rejected(state, cpl("orders", 0, other, 1, (p.leader,)), E.invalid_request)
    ok(state, ChangeIsr("orders", 0, (p.leader,), p.partition_epoch))
    ok(state, FenceBroker(other, 1))
    rejected(state, cpl("orders", 0, other, 1, (p.leader, other)), E.ineligible_replica)
    ok(state, UnregisterBroker(other))
    rejected(state, cpl("orders", 0, p.leader, 0, (p.leader, other)), E.ineligible_replica)


def test_isr_change_is_versioned_by_partition_epoch() -> None:
    state = with_topic(rf=3, partitions=1)
    p = state.partition("orders", 0)
    assert p is not None
    shrunk = (p.leader,)
    ok(state, ChangeIsr("orders", 0, shrunk, 0))
    q = state.partition("orders", 0)
    assert q is not None and (q.isr, q.partition_epoch, q.leader_epoch) == (shrunk, 1, 0)
    rejected(state, ChangeIsr("orders", 0, p.isr, 0), E.invalid_update_version)
    follower = next(n for n in p.replicas if n != p.leader)
    rejected(state, ChangeIsr("orders", 0, (follower,), 1), E.invalid_request)
    rejected(state, ChangeIsr("orders", 0, (p.leader, 9), 1), E.invalid_request)
    ok(state, FenceBroker(follower, 1))
    rejected(state, ChangeIsr("orders", 0, (p.leader, follower), 1), E.ineligible_replica)
    ok(state, UnfenceBroker(follower, 1))
    ok(state, ChangeIsr("orders", 0, (p.leader, follower), 1))
    ok(state, ChangePartitionLeader("orders", 0, NO_LEADER, 1, (p.leader, follower)))
    rejected(state, ChangeIsr("orders", 0, (p.leader,), 3), E.invalid_request)


# -- security and pipelines ------------------------------------------------------------------
def test_scram_users() -> None:
    state = MetadataState()
    good = UpsertScramUser("alice", 1, b"salt", b"s" * 32, b"k" * 32, 4096)
    ok(state, good)
    ok(state, UpsertScramUser("alice", 2, b"salt", b"s" * 64, b"k" * 64, 8192))
    cred = state.scram_credential("alice", 1)
    assert cred is not None and cred.stored_key == b"s" * 32
    assert [(c.user, c.mechanism) for c in state.scram_credentials()] == [("alice", 1),
                                                                           ("alice", 2)]
    rejected(state, UpsertScramUser("bob", 3, b"s", b"s" * 32, b"k" * 32, 4096),
             E.unsupported_sasl_mechanism)
    rejected(state, UpsertScramUser("bob", 1, b"s", b"s" * 32, b"k" * 32, 100),
             E.unacceptable_credential)
    rejected(state, UpsertScramUser("bob", 1, b"s", b"s" * 31, b"k" * 32, 4096),
             E.unacceptable_credential)
    rejected(state, UpsertScramUser("bob", 1, b"", b"s" * 32, b"k" * 32, 4096),
             E.unacceptable_credential)
    rejected(state, UpsertScramUser("", 1, b"s", b"s" * 32, b"k" * 32, 4096),
             E.unacceptable_credential)
    ok(state, DeleteScramUser("alice", 1))
    assert state.scram_credential("alice", 1) is None
    rejected(state, DeleteScramUser("alice", 1), E.resource_not_found)


ACL = AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)


def test_acls_are_plain_records() -> None:
    state = MetadataState()
    assert ok(state, CreateAcl(ACL)).value == 1
    assert ok(state, CreateAcl(ACL)).value == 0  # idempotent, as Kafka's CreateAcls
    assert state.acl_bindings() == [ACL]
    assert ok(state, DeleteAcl(ACL)).value == 1
    assert ok(state, DeleteAcl(ACL)).value == 0
    for bad in (
        AclBinding(1, "orders", 3, "User:alice", "*", 3, 3),  # ANY is a filter, not a binding
        AclBinding(2, "orders", 2, "User:alice", "*", 3, 3),
        AclBinding(2, "orders", 3, "alice", "*", 3, 3),
        AclBinding(2, "orders", 3, "User:alice", "*", 1, 3),
        AclBinding(2, "orders", 3, "User:alice", "*", 3, 1),
        AclBinding(2, "", 3, "User:alice", "*", 3, 3),
        AclBinding(2, "orders", 3, "User:alice", "", 3, 3),
        AclBinding(4, "orders", 3, "User:alice", "*", 3, 3),
    ):
        rejected(state, CreateAcl(bad), E.invalid_request)
    ok(state, CreateAcl(AclBinding(4, "kafka-cluster", 3, "User:alice", "*", 9, 3)))


def test_pipelines() -> None:
    state = MetadataState()
    assert ok(state, RegisterPipeline("p1", b"{}")).value == 1
    assert ok(state, RegisterPipeline("p1", b'{"a":1}')).value == 2
    pipe = state.pipeline("p1")
    assert pipe is not None and pipe.spec == b'{"a":1}'
    rejected(state, RegisterPipeline("bad name", b"{}"), E.invalid_request)
    rejected(state, RegisterPipeline("p2", b""), E.invalid_request)
    rejected(state, RegisterPipeline("p2", b"x" * ((1 << 20) + 1)), E.invalid_request)
    ok(state, DeletePipeline("p1"))
    assert state.pipeline_list() == []
    rejected(state, DeletePipeline("p1"), E.resource_not_found)


# -- bytes, snapshots, determinism -----------------------------------------------------------
def test_undecodable_entries_are_rejected_without_change() -> None:
    state = with_topic()
    before = state.snapshot()
    for data in (b"", b"\xff", b"\x05\x03abc", encode_command(register(9)) + b"\x00"):
        result = state.apply_bytes(data)
        assert result.code == E.invalid_request and "undecodable" in result.message
    assert state.snapshot() == before
    assert state.apply_bytes(encode_command(register(9))).ok


def test_restore_refuses_bad_snapshots_and_keeps_state() -> None:
    state = with_topic()
    before = state.snapshot()
    for data in (b"", b"\x09" + before[1:], before[:-1], before + b"\x00"):
        with pytest.raises(MetadataSnapshotError):
            state.restore(data)
    assert state.snapshot() == before


def test_cluster_id_is_set_once_and_kept_in_snapshots() -> None:
    state = with_topic()
    assert state.cluster_id == ""
    rejected(state, SetClusterId(""), E.invalid_request)
    rejected(state, SetClusterId("x" * 65), E.invalid_request)
    ok(state, SetClusterId("abc"))
    ok(state, SetClusterId("abc"))  # the same again: nothing changes
    rejected(state, SetClusterId("other"), E.invalid_request)
    copy = MetadataState()
    copy.restore(state.snapshot())
    assert copy.cluster_id == "abc" and copy.snapshot() == state.snapshot()


# random command logs over a small universe, so many commands apply and many are refused
nodes_st = st.integers(0, 4)
topics_st = st.sampled_from(["a", "b", "c.d", "c_d"])
isr_st = st.lists(nodes_st, min_size=0, max_size=4).map(tuple)
configs_st = st.lists(
    st.builds(ConfigEntry, st.sampled_from(["retention.ms", "segment.bytes", "bogus"]),
              st.sampled_from(["1", "100000", "-5", "x"])), max_size=2).map(tuple)
commands_st: st.SearchStrategy[MetadataCommand] = st.one_of(
    st.builds(register, nodes_st, st.integers(1, 3), st.sampled_from([None, "r1", "r2"])),
    st.builds(UnregisterBroker, nodes_st),
    st.builds(BrokerHeartbeat, nodes_st, st.integers(1, 3), st.integers(0, 10_000)),
    st.builds(FenceBroker, nodes_st, st.integers(1, 3)),
    st.builds(UnfenceBroker, nodes_st, st.integers(1, 3)),
    st.builds(CreateTopic, topics_st, st.integers(1, 4).map(tid),
              st.lists(isr_st, min_size=0, max_size=3).map(tuple), configs_st),
    st.builds(DeleteTopic, topics_st, st.none()),
    st.builds(CreatePartitions, topics_st, st.lists(isr_st, max_size=2).map(tuple)),
    st.builds(AlterTopicConfigs, topics_st, configs_st,
              st.lists(st.sampled_from(["retention.ms", "nope"]), max_size=1).map(tuple)),
    st.builds(AlterBrokerConfigs, st.none() | nodes_st,
              st.lists(st.builds(ConfigEntry, st.just("log.retention.ms"),
                                 st.sampled_from(["5", "x"])), max_size=1).map(tuple),
              st.just(())),
    st.builds(ChangePartitionLeader, topics_st, st.integers(0, 2),
              st.integers(-1, 4), st.integers(0, 3), isr_st),
    st.builds(ChangeIsr, topics_st, st.integers(0, 2), isr_st, st.integers(0, 3)),
    st.builds(AllocateProducerIds, nodes_st, st.integers(0, 2000)),
    st.builds(UpsertScramUser, st.sampled_from(["u", "v"]), st.integers(1, 3), st.just(b"s"),
              st.just(b"k" * 32), st.just(b"k" * 32), st.sampled_from([4096, 10])),
    st.builds(DeleteScramUser, st.sampled_from(["u", "v"]), st.integers(1, 2)),
    st.builds(CreateAcl, st.just(ACL)),
    st.builds(DeleteAcl, st.just(ACL)),
    st.builds(RegisterPipeline, st.sampled_from(["p", "q"]), st.binary(min_size=0, max_size=4)),
    st.builds(DeletePipeline, st.sampled_from(["p", "q"])),
)


def _informed(data: st.DataObject, state: MetadataState) -> MetadataCommand:
    """A command built from the current state (so most of them apply), or a random one."""
    kind = data.draw(st.integers(0, 9))
    names = state.topic_names()
    if kind == 0 or not names:
        return data.draw(commands_st)
    name = data.draw(st.sampled_from(names))
    topic = state.topic(name)
    assert topic is not None
    index = data.draw(st.integers(0, len(topic.partitions) - 1))
    part = topic.partitions[index]
    live = [n for n in part.replicas if state.is_live(n)]
    if kind <= 3 and live:
        leader = data.draw(st.sampled_from(live))
        extra = data.draw(st.lists(st.sampled_from(live), unique=True))
        isr = tuple(dict.fromkeys([leader, *extra]))
        epoch = part.leader_epoch + (leader != part.leader)
        return ChangePartitionLeader(name, index, leader, epoch, isr)
    if kind <= 5 and part.leader != NO_LEADER:
        keep = data.draw(st.lists(st.sampled_from(part.replicas), unique=True))
        isr = tuple(dict.fromkeys([part.leader, *keep]))
        return ChangeIsr(name, index, isr, part.partition_epoch)
    if kind == 6:
        brokers = state.all_brokers()
        if brokers:
            b = data.draw(st.sampled_from(brokers))
            choices: list[MetadataCommand] = [
                FenceBroker(b.node_id, b.epoch), UnfenceBroker(b.node_id, b.epoch),
                BrokerHeartbeat(b.node_id, b.epoch, 5), AllocateProducerIds(b.node_id, 10),
                register(b.node_id, b.epoch + 1, b.rack),
            ]
            return data.draw(st.sampled_from(choices))
    if kind == 7 and state.placement_nodes():
        nodes = state.placement_nodes()
        rf = data.draw(st.integers(1, len(nodes)))
        new_name = data.draw(st.sampled_from(["e", "f", "g"]))
        plan = HashRing().place(new_name, 2, rf, nodes)
        return CreateTopic(new_name, tid(data.draw(st.integers(5, 9))),
                           tuple(tuple(p) for p in plan), ())
    if kind == 8 and state.placement_nodes():
        nodes = state.placement_nodes()
        rf = len(part.replicas)
        if rf <= len(nodes):
            existing = [list(p.replicas) for p in topic.partitions]
            plan = HashRing().reassign_for_new_partitions(existing, name, len(existing) + 1,
                                                          nodes)
            return CreatePartitions(name, tuple(tuple(p) for p in plan))
    return data.draw(commands_st)


def _prelude() -> list[MetadataCommand]:
    cmds: list[MetadataCommand] = []
    for n in (1, 2, 3, 4):
        cmds += [register(n, 1, f"r{n % 2}"), UnfenceBroker(n, 1)]
    cmds.append(CreateTopic("a", tid(1), ((1, 2, 3), (2, 3, 4), (4, 1, 2)), ()))
    return cmds


@settings(max_examples=200, deadline=None)
@given(st.data(), st.booleans())
def test_random_logs_snapshot_restore_and_replay_identically(
    data: st.DataObject, prelude: bool,
) -> None:
    one, two = MetadataState(), MetadataState()
    log: list[MetadataCommand] = _prelude() if prelude else []
    for _ in range(data.draw(st.integers(0, 40))):
        log.append(_informed(data, one) if data.draw(st.booleans()) else
                   data.draw(commands_st))
        one.apply(log[-1])
    one = MetadataState()
    for cmd in log:
        before = one.snapshot()
        result = one.apply(cmd)
        if not result.ok:
            assert one.snapshot() == before
        # the second replica reads the command from the Raft log's bytes
        data_bytes = encode_command(cmd)
        assert decode_command(data_bytes) == cmd
        assert two.apply_bytes(data_bytes) == result
        assert two.snapshot() == one.snapshot()
        # every record the state hands out keeps its invariants
        for name in one.topic_names():
            topic = one.topic(name)
            assert topic is not None
            for p in topic.partitions:
                assert set(p.isr) <= set(p.replicas) and p.isr
                assert p.leader == NO_LEADER or p.leader in p.isr
    snap = one.snapshot()
    restored = MetadataState()
    restored.restore(snap)
    assert restored.snapshot() == snap
    assert restored.to_snapshot() == one.to_snapshot()
    # and the restored state goes on exactly like the original
    for cmd in log:
        assert restored.apply(cmd) == one.apply(cmd)
    assert restored.snapshot() == one.snapshot()


def test_snapshot_is_canonical_whatever_the_order() -> None:
    one, two = MetadataState(), MetadataState()
    for n in (1, 2, 3):
        ok(one, register(n))
    for n in (3, 1, 2):
        ok(two, register(n))
    acl2 = AclBinding(3, "g", 3, "User:bob", "*", 3, 3)
    for state, order in ((one, (ACL, acl2)), (two, (acl2, ACL))):
        for acl in order:
            ok(state, CreateAcl(acl))
    for state, names in ((one, ("x", "y")), (two, ("y", "x"))):
        for name in names:
            ok(state, RegisterPipeline(name, b"s"))
        ok(state, AlterBrokerConfigs(2, (ConfigEntry("log.retention.ms", "1"),), ()))
        ok(state, AlterBrokerConfigs(None, (ConfigEntry("log.retention.ms", "1"),), ()))
    assert one.snapshot() == two.snapshot()
