"""A simulated run: 5 brokers, topics of replication factor 1 to 3, random heartbeat loss
and broker outages over virtual minutes, leaders growing their ISRs back (AlterPartition),
topics created as it goes, and a controller failover half way. Every command the controller
produces is applied through its bytes and must be accepted; after every step each partition
has a live leader in its ISR and no fenced ISR member, or is offline with no live ISR member
(no live replica at all with unclean election)."""

from __future__ import annotations

import random

import pytest

from eddy.cluster.controller import Controller, ControllerConfig, ControllerError
from eddy.cluster.placement import HashRing
from eddy.metadata import NO_LEADER, MetadataState, encode_command
from eddy.metadata.commands import ChangeIsr, MetadataCommand, RegisterBroker

NODES = (1, 2, 3, 4, 5)
STEP_MS = 50
MINUTES = 3
FAILOVER_AT = 90_000


def _apply(state: MetadataState, commands: list[MetadataCommand]) -> None:
    for command in commands:
        result = state.apply_bytes(encode_command(command))
        assert result.ok, (command, result)


def _check(state: MetadataState, controller: Controller, now: int, unclean: bool) -> int:
    """The invariant; returns the number of offline partitions."""
    live = {b.node_id for b in state.live_brokers()}
    assert live == set(controller.live_brokers(now))
    offline = 0
    for name in state.topic_names():
        topic = state.topic(name)
        assert topic is not None
        for index, part in enumerate(topic.partitions):
            where = f"{name}-{index} at {now} ms: {part}"
            assert part.isr, where
            if part.leader != NO_LEADER:
                assert part.leader in live and part.leader in part.isr, where
                assert all(n in live for n in part.isr), where
            else:
                offline += 1
                assert not any(n in live for n in part.isr), where
                if unclean:
                    assert not any(n in live for n in part.replicas), where
    return offline


@pytest.mark.parametrize(("seed", "unclean"), [(s, s % 3 == 2) for s in range(6)])
def test_random_heartbeat_loss_keeps_every_partition_led_or_offline(
    seed: int, unclean: bool
) -> None:
    rng = random.Random(seed)
    state = MetadataState()
    ids = iter(range(1, 1 << 30))
    config = ControllerConfig(unclean_leader_election=unclean,
                              leader_imbalance_check_interval_ms=20_000)
    controller = Controller(state, config, HashRing(),
                            id_source=lambda: next(ids).to_bytes(16, "big"))
    for node in NODES:
        _apply(state, [RegisterBroker(node, bytes([node]) * 32, None, f"h{node}:9092",
                                      f"h{node}:7000", 1)])
    controller.start(0)
    down_until = dict.fromkeys(NODES, 0)
    loss = {node: rng.choice([0.0, 0.2, 0.5]) for node in NODES}
    created = 0
    fences = offline_steps = elections = 0
    for now in range(0, MINUTES * 60_000, STEP_MS):
        if now == FAILOVER_AT:  # the metadata leader moves: a new controller, same state
            controller = Controller(state, config, HashRing(),
                                    id_source=lambda: next(ids).to_bytes(16, "big"))
            controller.start(now)
        for node in NODES:
            if now >= down_until[node] and rng.random() < 0.0015:
                down_until[node] = now + rng.randrange(500, 15_000)  # an outage
        if now % config.heartbeat_interval_ms == 0:
            for node in NODES:
                if now < down_until[node] or rng.random() < loss[node]:
                    continue
                _apply(state, controller.on_heartbeat(node, 1, now))
        commands = controller.tick(now)
        fences += sum(type(c).__name__ == "FenceBroker" for c in commands)
        elections += sum(type(c).__name__ == "ChangePartitionLeader" for c in commands)
        _apply(state, commands)
        if rng.random() < 0.01 and created < 12:
            try:
                create = controller.create_topic(f"t{created}", rng.randrange(1, 6),
                                                 rng.randrange(1, 4), None, now)
            except ControllerError:
                pass  # fewer live brokers than the replication factor
            else:
                _apply(state, [create])
                created += 1
        # leaders add caught-up live followers back to their ISR (AlterPartition)
        for name in state.topic_names():
            topic = state.topic(name)
            assert topic is not None
            for index, part in enumerate(topic.partitions):
                if part.leader == NO_LEADER or rng.random() > 0.05:
                    continue
                joining = [n for n in part.replicas if n not in part.isr and state.is_live(n)]
                if joining:
                    _apply(state, [ChangeIsr(name, index, (*part.isr, joining[0]),
                                             part.partition_epoch)])
        offline_steps += _check(state, controller, now, unclean) > 0
    # the run exercised what it claims to
    assert created >= 5
    assert fences >= 5 and elections >= 10
    assert offline_steps > 0 or unclean
