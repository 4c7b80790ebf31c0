"""Leadership returns to preferred replicas by itself (Kafka's auto.leader.rebalance.enable,
leader.imbalance.check.interval.seconds, leader.imbalance.per.broker.percentage): soon after
a controller takes over or a broker comes back, never to a replica out of the ISR. Virtual
time, and the settings as a node's config passes them to its controller."""

from __future__ import annotations

import itertools

from test_controller import Cluster, _expand_isrs

from eddy.cluster.controller import Controller, ControllerConfig
from eddy.cluster.placement import HashRing
from eddy.cluster.service import controller_config
from eddy.config import load_config
from eddy.metadata.commands import ChangePartitionLeader, MetadataCommand

SOON = 60_000
STEP = 50


def moves(commands: list[MetadataCommand]) -> list[ChangePartitionLeader]:
    return [c for c in commands if isinstance(c, ChangePartitionLeader)]


def preferred(c: Cluster) -> bool:
    return all(p.leader == p.replicas[0] for p in c.parts("t"))


def _broker_1_away_and_back(c: Cluster) -> int:
    """Broker 1 is fenced (its leaderships move), then heartbeats again; the time it is
    back."""
    c.create("t", 9, 3)
    assert preferred(c)
    c.run(SOON + 1000, alive=(1, 2, 3), step=STEP)  # past the check after the start
    c.run(c.now + 3000, alive=(2, 3), step=STEP)
    assert not c.state.is_live(1) and not preferred(c)
    c.heartbeat(1)
    assert c.state.is_live(1)
    return c.now


def test_leaders_return_within_a_minute_of_a_broker_coming_back() -> None:
    c = Cluster(nodes=(1, 2, 3))
    assert c.config.leader_imbalance_check_interval_ms == 300_000  # Kafka's default
    back = _broker_1_away_and_back(c)
    _expand_isrs(c, "t")  # it caught up: in every ISR again
    c.run(back + SOON - STEP, alive=(1, 2, 3), step=STEP)
    assert not preferred(c)  # not before the check
    c.run(back + SOON, alive=(1, 2, 3), step=STEP)
    assert preferred(c)


def test_leaders_return_within_a_minute_of_a_controller_taking_over() -> None:
    c = Cluster(nodes=(1, 2, 3))
    c.create("t", 9, 3)
    _expand_isrs(c, "t")
    # another controller had moved leaders away from broker 1 (a rolling restart)
    for i, part in enumerate(c.parts("t")):
        if part.leader == 1:
            c.apply([ChangePartitionLeader("t", i, part.replicas[1], part.leader_epoch + 1,
                                           part.isr)])
    assert not preferred(c)
    ids = itertools.count(100)
    c.controller = Controller(c.state, ControllerConfig(), HashRing(),
                              id_source=lambda: next(ids).to_bytes(16, "big"))
    c.now += 1000
    started = c.now
    c.controller.start(started)
    c.run(started + SOON, alive=(1, 2, 3), step=STEP)
    assert preferred(c)


def test_no_election_for_a_preferred_replica_out_of_the_isr() -> None:
    c = Cluster(nodes=(1, 2, 3))
    back = _broker_1_away_and_back(c)
    before = [(p.leader, p.leader_epoch) for p in c.parts("t")]
    # broker 1 is back but has not caught up: out of every ISR; many checks go by
    commands = c.run(back + 2 * 300_000, alive=(1, 2, 3), step=200)
    assert moves(commands) == []
    assert [(p.leader, p.leader_epoch) for p in c.parts("t")] == before


def test_no_rebalance_when_disabled() -> None:
    c = Cluster(nodes=(1, 2, 3), auto_leader_rebalance=False,
                leader_imbalance_check_interval_ms=10_000)
    back = _broker_1_away_and_back(c)
    _expand_isrs(c, "t")
    assert moves(c.run(back + 5 * SOON, alive=(1, 2, 3), step=200)) == []
    assert not preferred(c)


def test_the_settings_reach_the_controller() -> None:
    default = controller_config(load_config(env={}, overrides={"node_id": 4}))
    assert default.auto_leader_rebalance is True
    assert default.leader_imbalance_check_interval_ms == 300_000
    assert default.leader_imbalance_per_broker_percentage == 10
    assert default.local_broker == 4  # a broker (the default role) beside its controller
    assert default.stall_limit_ms == 2 * default.heartbeat_interval_ms
    cfg = load_config(env={"EDDY_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE": "25"}, overrides={
        "auto.leader.rebalance.enable": "false", "leader.imbalance.check.interval.seconds": 30,
        "broker.heartbeat.interval.ms": 100})
    # a node running no broker (none is built yet: its settings as it would have them)
    config = controller_config(cfg.model_copy(update={"process_roles": "controller"}))
    assert config.auto_leader_rebalance is False
    assert config.leader_imbalance_check_interval_ms == 30_000
    assert config.leader_imbalance_per_broker_percentage == 25
    assert config.local_broker == -1  # a controller with no broker
    assert config.stall_limit_ms == 200
