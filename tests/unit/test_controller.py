"""The controller with the metadata state: every command it produces is applied (through
its encoded bytes, as Raft would carry it) and the resulting state is checked. Virtual
time throughout."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from eddy.cluster.controller import Controller, ControllerConfig, ControllerError
from eddy.cluster.placement import HashRing
from eddy.metadata import NO_LEADER, MetadataState, encode_command
from eddy.metadata.commands import (
    AllocateProducerIds,
    ChangeIsr,
    ChangePartitionLeader,
    CreateTopic,
    FenceBroker,
    MetadataCommand,
    RegisterBroker,
    UnfenceBroker,
)
from eddy.metadata.records import PartitionRecord
from eddy.protocol.errors import ErrorCode

E = ErrorCode
HB = 250
SESSION = 1500


def key(node: int) -> bytes:
    return bytes([node]) * 32


class Cluster:
    """A state, a controller on it, and brokers heartbeating in virtual time."""

    def __init__(self, nodes: Sequence[int] = (1, 2, 3, 4, 5),
                 racks: dict[int, str] | None = None, **config: int | bool) -> None:
        self.state = MetadataState()
        self.config = ControllerConfig(**config)  # type: ignore[arg-type]
        ids = itertools.count(1)
        self.controller = Controller(self.state, self.config, HashRing(),
                                     id_source=lambda: next(ids).to_bytes(16, "big"))
        self.now = 0
        self.epochs: dict[int, int] = {}
        for node in nodes:
            self.register(node, (racks or {}).get(node))
        self.controller.start(self.now)
        self.heartbeat(*nodes)

    def register(self, node: int, rack: str | None = None) -> None:
        epoch = self.epochs.get(node, 0) + 1
        self.epochs[node] = epoch
        self.apply([RegisterBroker(node, key(node), rack, f"10.0.0.{node}:9092",
                                   f"10.0.0.{node}:7000", epoch)])

    def apply(self, commands: Sequence[MetadataCommand]) -> None:
        for command in commands:
            result = self.state.apply_bytes(encode_command(command))
            assert result.ok, (command, result)

    def heartbeat(self, *nodes: int) -> list[MetadataCommand]:
        out: list[MetadataCommand] = []
        for node in nodes:
            commands = self.controller.on_heartbeat(node, self.epochs[node], self.now)
            self.apply(commands)
            out.extend(commands)
        return out

    def tick(self) -> list[MetadataCommand]:
        commands = self.controller.tick(self.now)
        self.apply(commands)
        return commands

    def run(self, until: int, alive: Sequence[int], step: int = 10) -> list[MetadataCommand]:
        """Advance to ``until``: ``alive`` heartbeat every HB ms, the controller ticks every
        ``step`` ms."""
        out: list[MetadataCommand] = []
        while self.now < until:
            self.now = min(until, self.now + step)
            if self.now % HB == 0:
                out.extend(self.heartbeat(*alive))
            out.extend(self.tick())
        return out

    def create(self, name: str, partitions: int, rf: int,
               configs: dict[str, str] | None = None) -> CreateTopic:
        command = self.controller.create_topic(name, partitions, rf, configs, self.now)
        self.apply([command])
        return command

    def parts(self, name: str) -> list[PartitionRecord]:
        topic = self.state.topic(name)
        assert topic is not None
        return list(topic.partitions)


def fenced(commands: Sequence[MetadataCommand]) -> list[int]:
    return [c.node_id for c in commands if isinstance(c, FenceBroker)]


# -- config ------------------------------------------------------------------------------------
def test_default_timings_allow_failover_within_two_seconds() -> None:
    config = ControllerConfig()
    assert config.heartbeat_interval_ms == 250
    assert config.session_timeout_ms == 1500
    assert config.session_timeout_ms // config.heartbeat_interval_ms == 6
    # a kill just after a heartbeat: fenced one session later, plus one tick at most
    assert config.session_timeout_ms + config.heartbeat_interval_ms < 2000
    # the metadata leader killed too: an election (~0.6 s at worst) plus the suspect grace
    assert 600 + config.suspect_grace_ms + config.heartbeat_interval_ms < 2000


def test_config_checks_and_kafka_properties() -> None:
    with pytest.raises(ValueError, match="session_timeout_ms"):
        ControllerConfig(heartbeat_interval_ms=500, session_timeout_ms=500)
    with pytest.raises(ValueError, match="default_partitions"):
        ControllerConfig(default_partitions=0)
    config = ControllerConfig.from_properties({
        "broker.session.timeout.ms": "3000", "unclean.leader.election.enable": "TRUE",
        "leader.imbalance.check.interval.seconds": "5", "num.partitions": "3",
        "something.else": "ignored",
    })
    assert config.session_timeout_ms == 3000
    assert config.unclean_leader_election is True
    assert config.leader_imbalance_check_interval_ms == 5000
    assert config.default_partitions == 3
    with pytest.raises(ValueError, match=r"broker\.session\.timeout\.ms"):
        ControllerConfig.from_properties({"broker.session.timeout.ms": "soon"})
    with pytest.raises(ValueError, match=r"auto\.leader\.rebalance\.enable"):
        ControllerConfig.from_properties({"auto.leader.rebalance.enable": "yes"})


# -- sessions ----------------------------------------------------------------------------------
def test_first_heartbeat_unfences_a_registered_broker() -> None:
    c = Cluster(nodes=(1, 2))
    assert [b.node_id for b in c.state.live_brokers()] == [1, 2]
    c.register(3)
    assert c.state.broker(3) is not None and c.state.broker(3).fenced  # type: ignore[union-attr]
    assert c.heartbeat(3) == [UnfenceBroker(3, 1)]
    assert c.state.is_live(3)
    assert c.heartbeat(3) == []  # a renewal proposes nothing


def test_heartbeat_errors() -> None:
    c = Cluster(nodes=(1,))
    with pytest.raises(ControllerError) as err:
        c.controller.on_heartbeat(9, 1, c.now)
    assert err.value.code == E.broker_id_not_registered
    with pytest.raises(ControllerError) as err:
        c.controller.on_heartbeat(1, 2, c.now)
    assert err.value.code == E.stale_broker_epoch
    c.controller.stop()
    with pytest.raises(ControllerError) as err:
        c.controller.on_heartbeat(1, 1, c.now)
    assert err.value.code == E.not_controller
    with pytest.raises(ControllerError):
        c.controller.tick(c.now)


def test_broker_is_fenced_exactly_after_the_session_timeout() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.run(1000, alive=(1, 2, 3))  # last heartbeat of broker 3 at t=1000
    assert fenced(c.run(1000 + SESSION - 10, alive=(1, 2))) == []
    assert c.state.is_live(3)
    c.now = 1000 + SESSION - 1
    assert fenced(c.tick()) == []
    c.now = 1000 + SESSION
    assert fenced(c.tick()) == [3]
    assert not c.state.is_live(3)
    assert [b.node_id for b in c.state.live_brokers()] == [1, 2]


def test_fencing_moves_leaders_within_the_isr_and_shrinks_isrs() -> None:
    c = Cluster(nodes=(1, 2, 3, 4, 5))
    c.create("orders", 12, 3)
    before = c.parts("orders")
    victim = 2
    assert any(p.leader == victim for p in before)
    c.run(5000, alive=(1, 3, 4, 5))
    assert not c.state.is_live(victim)
    for old, new in zip(before, c.parts("orders"), strict=True):
        assert victim not in new.isr
        assert new.isr == tuple(n for n in old.isr if n != victim)
        if old.leader == victim:
            assert new.leader in old.isr and new.leader != victim
            # the first live ISR member in assignment order
            assert new.leader == next(n for n in old.replicas if n in new.isr)
            assert new.leader_epoch == old.leader_epoch + 1
        else:
            assert new.leader == old.leader
            assert new.leader_epoch == old.leader_epoch
        assert new.partition_epoch == old.partition_epoch + (victim in old.isr)


def test_whole_isr_fenced_goes_offline_and_returns_with_a_member() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 1, 2)
    (part,) = c.parts("t")
    first, second = part.replicas
    third = ({1, 2, 3} - {first, second}).pop()
    c.run(2000, alive=(second, third))  # first dies
    (part,) = c.parts("t")
    assert (part.leader, part.isr) == (second, (second,))
    c.run(4000, alive=(third,))  # then second dies: offline, ISR keeps its last member
    (part,) = c.parts("t")
    assert (part.leader, part.isr, part.leader_epoch) == (NO_LEADER, (second,), 2)
    # the first comes back: not in the ISR, so no clean election
    commands = c.heartbeat(first)
    assert commands == [UnfenceBroker(first, 1)]
    (part,) = c.parts("t")
    assert part.leader == NO_LEADER
    # the last ISR member comes back: it leads again, in the same step as its unfence
    commands = c.heartbeat(second)
    assert commands[0] == UnfenceBroker(second, 1)
    assert commands[1:] == [ChangePartitionLeader("t", 0, second, 3, (second,))]
    (part,) = c.parts("t")
    assert (part.leader, part.isr, part.leader_epoch) == (second, (second,), 3)


def test_unclean_election_when_enabled() -> None:
    c = Cluster(nodes=(1, 2, 3), unclean_leader_election=True)
    c.create("t", 1, 2)
    (part,) = c.parts("t")
    first, second = part.replicas
    third = ({1, 2, 3} - {first, second}).pop()
    c.run(2000, alive=(second, third))
    c.run(4000, alive=(third,))
    assert c.parts("t")[0].leader == NO_LEADER
    c.heartbeat(first)  # not in the ISR, but unclean election is on: it leads
    (part,) = c.parts("t")
    assert (part.leader, part.isr) == (first, (first,))


def test_unclean_election_per_topic_override() -> None:
    c = Cluster(nodes=(1, 2))
    c.create("dirty", 1, 2, {"unclean.leader.election.enable": "true"})
    c.create("clean", 1, 2)
    dirty_first = c.parts("dirty")[0].replicas[0]
    other = 3 - dirty_first
    c.run(2000, alive=(other,))
    c.run(4000, alive=())
    assert c.parts("dirty")[0].leader == NO_LEADER
    c.heartbeat(dirty_first)
    dirty = c.parts("dirty")[0]
    clean = c.parts("clean")[0]
    assert dirty.leader == dirty_first
    # the clean topic's last ISR member is the other broker: still offline
    assert clean.leader == NO_LEADER and dirty_first not in clean.isr


def test_controller_failover_gives_every_broker_a_fresh_session() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 3, 3)
    c.run(60_000, alive=(1, 2, 3))
    # the old controller vanishes; a new one starts on the same (replicated) state
    ids = itertools.count(100)
    new = Controller(c.state, ControllerConfig(), HashRing(),
                     id_source=lambda: next(ids).to_bytes(16, "big"))
    c.controller = new
    c.now = 70_000  # nobody heartbeated for 10 s: the old sessions would all be expired
    new.start(c.now)
    assert c.tick() == []
    c.run(70_000 + SESSION - 10, alive=(1, 2))
    assert len(c.state.live_brokers()) == 3
    commands = c.run(70_000 + SESSION + 10, alive=(1, 2))
    assert fenced(commands) == [3]  # only the silent one, one session after the start


def test_controller_failover_suspects_get_a_short_grace() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.controller.stop()
    c.controller.start(10_000, suspects=[3])
    c.now = 10_000
    commands = c.run(10_000 + c.config.suspect_grace_ms, alive=(1, 2))
    assert fenced(commands) == [3]
    assert c.now - 10_000 == c.config.suspect_grace_ms


def test_restarted_broker_with_a_new_epoch() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 6, 3)
    led = [i for i, p in enumerate(c.parts("t")) if p.leader == 1]
    assert led
    c.register(1)  # it restarted: registered again, fenced by the registration itself
    c.tick()
    for i in led:
        assert c.parts("t")[i].leader != 1
    with pytest.raises(ControllerError):
        c.controller.on_heartbeat(1, 1, c.now)  # the old incarnation
    assert c.heartbeat(1)[0] == UnfenceBroker(1, 2)


def test_in_flight_commands_are_not_repeated_until_retry() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 3, 3)
    c.run(1000, alive=(1, 2, 3))
    c.run(1000 + SESSION - 10, alive=(1, 2))
    c.now = 1000 + SESSION
    first = c.controller.tick(c.now)  # not applied: still in flight
    assert fenced(first) == [3]
    assert any(isinstance(cmd, ChangePartitionLeader) for cmd in first)
    c.now += 10
    assert c.controller.tick(c.now) == []
    c.now += c.config.command_retry_ms
    assert c.heartbeat(1, 2) == []
    again = c.controller.tick(c.now)
    assert fenced(again) == [3]
    assert any(isinstance(cmd, ChangePartitionLeader) for cmd in again)
    c.apply(again)
    assert c.tick() == []


# -- preferred leaders -------------------------------------------------------------------------
def _expand_isrs(c: Cluster, name: str) -> None:
    """What partition leaders do when followers catch up (AlterPartition)."""
    for i, part in enumerate(c.parts(name)):
        live = tuple(n for n in part.replicas if c.state.is_live(n))
        if part.leader != NO_LEADER and set(live) != set(part.isr):
            c.apply([ChangeIsr(name, i, live, part.partition_epoch)])


def test_preferred_leader_rebalance() -> None:
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False)
    c.create("t", 9, 3)
    preferred = [p.replicas[0] for p in c.parts("t")]
    assert [p.leader for p in c.parts("t")] == preferred
    c.run(3000, alive=(2, 3))
    moved = [i for i, p in enumerate(c.parts("t")) if preferred[i] == 1]
    assert moved and all(c.parts("t")[i].leader != 1 for i in moved)
    c.heartbeat(1)
    c.run(4000, alive=(1, 2, 3))
    assert all(c.parts("t")[i].leader != 1 for i in moved)  # not moved back by itself
    assert c.controller.rebalance_preferred_leaders(c.now) == []  # 1 is not in the ISRs
    _expand_isrs(c, "t")
    epochs = [p.leader_epoch for p in c.parts("t")]
    commands = c.controller.rebalance_preferred_leaders(c.now)
    assert sorted(cmd.partition for cmd in commands  # type: ignore[union-attr]
                  ) == moved
    c.apply(commands)
    parts = c.parts("t")
    assert [p.leader for p in parts] == preferred
    for i in moved:
        assert parts[i].leader_epoch == epochs[i] + 1


def test_preferred_leader_rebalance_on_schedule_and_threshold() -> None:
    c = Cluster(nodes=(1, 2, 3), leader_imbalance_check_interval_ms=10_000)
    c.create("t", 30, 3)
    c.run(3000, alive=(2, 3))
    c.heartbeat(1)
    c.run(4000, alive=(1, 2, 3))
    _expand_isrs(c, "t")
    assert any(p.leader != p.replicas[0] for p in c.parts("t"))
    commands = c.run(10_000, alive=(1, 2, 3))  # the check runs at t=10 s
    assert any(isinstance(cmd, ChangePartitionLeader) for cmd in commands)
    assert all(p.leader == p.replicas[0] for p in c.parts("t"))
    # one partition of 1's ten off its preferred leader is 10 %: not above the threshold
    parts = c.parts("t")
    i = next(i for i, p in enumerate(parts) if p.replicas[0] == 1)
    other = parts[i].replicas[1]
    c.apply([ChangePartitionLeader("t", i, other, parts[i].leader_epoch + 1, parts[i].isr)])
    assert c.controller.rebalance_preferred_leaders(c.now) == []


# -- topics ------------------------------------------------------------------------------------
def test_create_topic_places_replicas_on_live_brokers_only() -> None:
    c = Cluster(nodes=(1, 2, 3, 4, 5), racks={1: "a", 2: "a", 3: "b", 4: "b", 5: "c"})
    c.run(1000, alive=(1, 2, 3, 4, 5))
    c.run(1000 + SESSION, alive=(1, 2, 3, 4))  # 5 is fenced
    c.run(3990, alive=(1, 2, 3))  # 4's last heartbeat was at 2500
    c.now = 2500 + SESSION  # its session has expired, the controller has not ticked yet
    assert c.state.is_live(4)
    command = c.create("t", 20, 3)
    assert command.topic_id == (1).to_bytes(16, "big")
    for part in c.parts("t"):
        assert set(part.replicas) <= {1, 2, 3}
        assert part.leader == part.replicas[0] and part.isr == part.replicas
        racks = {c.state.broker(n).rack for n in part.replicas}  # type: ignore[union-attr]
        assert racks == {"a", "b"}
    with pytest.raises(ControllerError) as err:
        c.controller.create_topic("big", 1, 4, None, c.now)
    assert err.value.code == E.invalid_replication_factor


def test_create_topic_defaults_and_errors() -> None:
    c = Cluster(nodes=(1, 2, 3), default_partitions=4, default_replication_factor=2)
    c.create("a", -1, -1)  # type: ignore[arg-type]
    parts = c.parts("a")
    assert len(parts) == 4 and all(len(p.replicas) == 2 for p in parts)
    cases: list[tuple[str, int | None, int | None, dict[str, str] | None, ErrorCode]] = [
        ("a", 1, 1, None, E.topic_already_exists),
        ("bad name", 1, 1, None, E.invalid_topic_exception),
        ("x", 0, 1, None, E.invalid_partitions),
        ("x", 1, 0, None, E.invalid_replication_factor),
        ("x", 1, 1, {"retention.ms": "soon"}, E.invalid_config),
        ("x", 1, 1, {"no.such.config": "1"}, E.invalid_config),
    ]
    for name, partitions, rf, configs, code in cases:
        with pytest.raises(ControllerError) as err:
            c.controller.create_topic(name, partitions, rf, configs, c.now)
        assert err.value.code == code, name
    c.create("my.topic", 1, 1)
    with pytest.raises(ControllerError) as err:
        c.controller.create_topic("my_topic", 1, 1, None, c.now)
    assert err.value.code == E.invalid_topic_exception


def test_topic_id_source_collisions_are_skipped() -> None:
    state = MetadataState()
    ids = iter([bytes(16), (1).to_bytes(16, "big"), (1).to_bytes(16, "big"),
                (2).to_bytes(16, "big")])
    controller = Controller(state, ControllerConfig(), HashRing(), id_source=lambda: next(ids))
    state.apply(RegisterBroker(1, key(1), None, "h:1", "h:2", 1))
    controller.start(0)
    state.apply(controller.on_heartbeat(1, 1, 0)[0])
    first = controller.create_topic("a", 1, 1, None, 0)
    assert first.topic_id == (1).to_bytes(16, "big")  # the all-zero id was skipped
    assert state.apply(first).ok
    assert controller.create_topic("b", 1, 1, None, 0).topic_id == (2).to_bytes(16, "big")


def test_create_partitions_and_delete_topic() -> None:
    c = Cluster(nodes=(1, 2, 3, 4))
    c.create("t", 2, 2)
    c.run(3000, alive=(1, 2, 3))
    command = c.controller.create_partitions("t", 6, c.now)
    assert len(command.new_assignments) == 4
    c.apply([command])
    parts = c.parts("t")
    assert len(parts) == 6
    for part in parts[2:]:
        assert len(part.replicas) == 2 and 4 not in part.replicas
    for name, total, code in [("t", 6, E.invalid_partitions),
                              ("nope", 9, E.unknown_topic_or_partition)]:
        with pytest.raises(ControllerError) as err:
            c.controller.create_partitions(name, total, c.now)
        assert err.value.code == code
    topic = c.state.topic("t")
    assert topic is not None
    with pytest.raises(ControllerError) as err:
        c.controller.delete_topic("t", bytes(range(16)))
    assert err.value.code == E.unknown_topic_id
    c.apply([c.controller.delete_topic("t", topic.topic_id)])
    assert c.state.topic("t") is None


# -- producer ids ------------------------------------------------------------------------------
def test_allocate_producer_ids() -> None:
    c = Cluster(nodes=(1, 2))
    first = c.state.apply(c.controller.allocate_producer_ids(1))
    second = c.state.apply(c.controller.allocate_producer_ids(2, 10))
    assert (first.value, second.value) == (0, 1000)
    assert c.controller.allocate_producer_ids(1) == AllocateProducerIds(1, 1000)
    with pytest.raises(ControllerError) as err:
        c.controller.allocate_producer_ids(7)
    assert err.value.code == E.broker_id_not_registered
    with pytest.raises(ControllerError) as err:
        c.controller.allocate_producer_ids(1, 0)
    assert err.value.code == E.invalid_request
