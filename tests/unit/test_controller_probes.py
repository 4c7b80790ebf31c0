"""Probes of silent nodes: the controller tries the Kafka listener of a broker whose
heartbeats are late, and a refused connection moves its leaderships at once; a Raft
follower does the same for a silent group leader and campaigns. Virtual time for the
sans-IO controller; real sockets for the probes."""

from __future__ import annotations

import asyncio
import socket

from eddy.cluster.controller import Controller, ControllerConfig
from eddy.cluster.leader_watch import RaftLeaderWatch
from eddy.cluster.liveness_probe import refuses
from eddy.cluster.placement import HashRing
from eddy.metadata import MetadataState, encode_command
from eddy.metadata.commands import (
    ChangePartitionLeader,
    FenceBroker,
    MetadataCommand,
    RegisterBroker,
)

HB = 250


class Cluster:
    def __init__(self, nodes: tuple[int, ...] = (1, 2, 3), **config: int) -> None:
        self.state = MetadataState()
        self.config = ControllerConfig(**config)
        ids = iter(range(1, 1000))
        self.controller = Controller(self.state, self.config, HashRing(),
                                     id_source=lambda: next(ids).to_bytes(16, "big"))
        for node in nodes:
            self.apply([RegisterBroker(node, bytes([node]) * 32, None, f"10.0.0.{node}:9092",
                                       f"10.0.0.{node}:7000", 1)])
        self.controller.start(0)
        for node in nodes:
            self.apply(self.controller.on_heartbeat(node, 1, 0))

    def apply(self, commands: list[MetadataCommand]) -> None:
        for command in commands:
            assert self.state.apply_bytes(encode_command(command)).ok, command

    def probes(self, now: int, alive: tuple[int, ...]) -> list[int]:
        """Heartbeats of ``alive`` every HB ms up to ``now`` (already done before), then the
        brokers due for a probe at ``now``."""
        for node in alive:
            if now % HB == 0:
                self.apply(self.controller.on_heartbeat(node, 1, now))
        self.apply(self.controller.tick(now))
        return [b.node_id for b in self.controller.to_probe(now)]


def test_a_silent_broker_is_probed_a_heartbeat_late_and_again_while_silent() -> None:
    c = Cluster(probe_after_ms=300)
    due: dict[int, list[int]] = {}
    for now in range(10, 1001, 10):
        for node in c.probes(now, alive=(1, 2) if now > 500 else (1, 2, 3)):
            due.setdefault(node, []).append(now)
    # broker 3's last heartbeat was at 500: probed from 800, every 100 ms while silent
    assert due == {3: [800, 900, 1000]}
    assert c.controller.next_wakeup(1000) == 1100  # the next probe, before its deadline


def test_a_refused_probe_moves_leaders_at_once_and_fences_later() -> None:
    c = Cluster(probe_after_ms=300)
    create = c.controller.create_topic("t", 3, 3, None, 0)
    c.apply([create])
    topic = c.state.topic("t")
    assert topic is not None
    led = [i for i, p in enumerate(topic.partitions) if p.leader == 3]
    assert led
    for now in range(10, 801, 10):
        c.probes(now, alive=(1, 2) if now > 500 else (1, 2, 3))
    commands = c.controller.on_unreachable(3, 1, 800)
    # as in a controlled shutdown: every ISR loses it, what it led moves; no fence yet
    assert not any(isinstance(x, FenceBroker) for x in commands)
    assert {x.partition for x in commands if isinstance(x, ChangePartitionLeader)} == {0, 1, 2}
    c.apply(commands)
    after = c.state.topic("t")
    assert after is not None
    parts = after.partitions
    assert all(3 not in p.isr for p in parts)
    assert all(parts[i].leader in (1, 2) for i in led)
    assert c.state.is_live(3) and c.controller.in_controlled_shutdown(3)
    # asked again: nothing more to do; and it is not probed any more
    assert c.controller.on_unreachable(3, 1, 810) == []
    assert c.controller.to_probe(900) == []
    # its session (last heartbeat at 500) would end at 2000; it is held a session timeout
    # past the move (800 + 1500), so clients see the move before the broker leaves
    for now in range(810, 2291, 10):
        c.probes(now, alive=(1, 2))
    assert c.state.is_live(3)
    c.probes(2300, alive=(1, 2))
    assert not c.state.is_live(3)


def test_a_refusal_for_an_old_epoch_or_a_heartbeating_broker_is_ignored() -> None:
    c = Cluster(probe_after_ms=300)
    assert c.controller.on_unreachable(3, 0, 100) == []  # not its epoch
    c.apply([RegisterBroker(3, bytes([3]) * 32, None, "10.0.0.3:9092", "10.0.0.3:7000", 2)])
    assert c.controller.on_unreachable(3, 1, 100) == []  # that incarnation is gone
    # a broker that heartbeats is never due for a probe
    for now in range(10, 3001, 10):
        assert 1 not in c.probes(now, alive=(1,))


def test_probes_off_and_the_new_controllers_suspect_is_probed_at_once() -> None:
    off = Cluster(probe_after_ms=0)
    assert all(off.probes(now, alive=(1, 2)) == [] for now in range(10, 1401, 10))
    c = Cluster(probe_after_ms=300)
    c.controller.stop()
    c.controller.start(5000, suspects=[2])
    assert [b.node_id for b in c.controller.to_probe(5000)] == [2]
    assert [b.node_id for b in c.controller.to_probe(5300)] == [1, 2, 3]


def test_refuses_only_when_nothing_listens() -> None:
    async def main() -> tuple[bool, bool, bool]:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        listening = await refuses(f"127.0.0.1:{port}", 1.0)
        server.close()
        await server.wait_closed()
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        gone = await refuses(f"127.0.0.1:{closed}", 1.0)
        garbage = await refuses("no-port-here", 1.0)
        return listening, gone, garbage

    assert asyncio.run(main()) == (False, True, False)


class FakeDriver:
    def __init__(self, group: str, silence: tuple[int, int] | None) -> None:
        self.group = group
        self.silence = silence
        self.gone: list[int] = []

    def leader_silence(self) -> tuple[int, int] | None:
        return self.silence

    def leader_gone(self, leader: int) -> None:
        self.gone.append(leader)
        self.silence = None


def test_raft_leader_watch_hints_only_groups_whose_silent_leader_is_gone() -> None:
    async def main() -> tuple[list[int], list[int], list[int], list[int]]:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        live = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"127.0.0.1:{s.getsockname()[1]}"
        addrs = {2: dead, 3: live}
        metadata = FakeDriver("metadata", (2, 400))  # silent leader 2: gone
        offsets = FakeDriver("offsets", (2, 100))  # same leader, not silent long enough
        other = FakeDriver("other", (3, 400))  # silent leader 3: still listening
        now = [10_000]
        watch = RaftLeaderWatch(1, lambda: [metadata, offsets, other], addrs.get, 300,
                                lambda: now[0])
        first = await watch.check()
        again = await watch.check()  # 3 was probed just now: not again
        server.close()
        await server.wait_closed()
        return first, again, metadata.gone + offsets.gone, other.gone

    first, again, hinted, other = asyncio.run(main())
    # every group led by the gone node is told, whatever its own silence
    assert first == [2] and again == [] and hinted == [2, 2] and other == []


def test_raft_leader_watch_sleeps_until_a_leader_can_first_be_silent_enough() -> None:
    """The watch looked at its groups every 50 ms, idle or not (issue 28: an idle node
    busy with timers); it sleeps now until the first moment a leader heard here could have
    been silent for the probe threshold: as soon as that, never later."""
    now = [10_000]
    metadata = FakeDriver("metadata", None)
    offsets = FakeDriver("offsets", None)
    watch = RaftLeaderWatch(1, lambda: [metadata, offsets], {2: "127.0.0.1:1"}.get, 300,
                            lambda: now[0])
    assert watch.next_check_s() == 0.3  # no leader heard: a leader found later is silent
    # for 300 ms at the earliest
    metadata.silence = (2, 100)  # heard 100 ms ago: silent enough 200 ms from now
    offsets.silence = (1, 5_000)  # this node's own leadership: never probed
    assert watch.next_check_s() == 0.2
    offsets.silence = (3, 260)  # another leader, silent enough 40 ms from now: the floor
    assert watch.next_check_s() == 0.05
    offsets.silence = None
    metadata.silence = (2, 400)  # silent already and never probed: look at once (floor)
    assert watch.next_check_s() == 0.05
    watch._probed[2] = now[0]  # probed just now, found listening: again in 100 ms
    metadata.silence = (2, 400)
    assert watch.next_check_s() == 0.1


def test_a_broker_found_gone_that_heartbeats_again_leads_again() -> None:
    c = Cluster(probe_after_ms=300)
    c.apply([c.controller.create_topic("t", 3, 3, None, 0)])
    c.apply(c.controller.on_unreachable(3, 1, 100))  # a firewall refused the probe
    topic = c.state.topic("t")
    assert topic is not None and all(3 not in p.isr for p in topic.partitions)
    assert c.controller.in_controlled_shutdown(3)
    c.apply(c.controller.on_heartbeat(3, 1, 200))  # yet it is alive
    assert not c.controller.in_controlled_shutdown(3)
    # its ISR places come back through the leaders (AlterPartition), which the controller
    # no longer refuses; a controlled shutdown it asks for is a real one
    c.controller.check_isr_joiners("t", 0, (1, 2, 3))
    c.controller.controlled_shutdown(3, 1, 300)
    c.controller.on_heartbeat(3, 1, 400)
    assert c.controller.in_controlled_shutdown(3)
