"""A restarted broker and its stale metadata (chaos harness, round chaos-6: acknowledged
acks=all writes lost).

Nodes 2 and 3 of three were killed; node 1, the controller alone, moved chaos-6-0's
leadership from 2 to itself (epoch 1) and shrank the ISRs, uncommitted for want of a quorum.
Node 2 restarted, replayed its local metadata log (leader 2, epoch 0) and led the partition
at once: it took the producer's writes in epoch 0 and acknowledged some; when its return gave
node 1 a quorum, node 1's changes committed and node 2 truncated them away. Kafka's rule: a
restarted broker leads and follows nothing until it registered in this process and its
metadata caught up with the controller's; a leader counts only fetches of its own epoch; a
follower never applies an answer of an epoch it no longer follows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from eddy.broker.broker import Broker
from eddy.broker.cluster_sync import ReplicaSync
from eddy.clock import ManualClock
from eddy.cluster.controller.client import BrokerAgent
from eddy.cluster.controller.rpc import (
    ControllerReply,
    ControllerRequest,
    RegisterRequest,
    reply,
)
from eddy.cluster.replication.manager import ReplicaManager
from eddy.config import load_config
from eddy.metadata import MetadataCommand, MetadataState
from eddy.metadata.commands import (
    ChangePartitionLeader,
    CreateTopic,
    RegisterBroker,
    UnfenceBroker,
)
from eddy.metadata.records import PartitionRecord
from eddy.protocol.errors import ErrorCode
from eddy.protocol.record_batch import validate_batches
from eddy.protocol.records import build_batch

NOW = 1_700_000_000_000
WAIT_S = 10.0
TOPIC_ID = bytes(range(1, 17))


def _apply(state: MetadataState, *commands: MetadataCommand) -> None:
    for command in commands:
        result = state.apply(command)
        assert result.ok, (command, result.message)


def _register(node: int, epoch: int) -> RegisterBroker:
    # nothing listens at its Kafka address: a fetcher of this test connects nowhere
    return RegisterBroker(node, bytes([node]) * 32, None, "127.0.0.1:1",
                          f"10.0.0.{node}:7000", epoch)


def _node(tmp_path: Path, node_id: int) -> Broker:
    config = load_config(env={}, overrides={"data_dir": str(tmp_path / f"n{node_id}"),
                                            "node_id": node_id})
    broker = Broker(config, ManualClock(NOW))
    broker.load()
    return broker


@pytest.fixture
def node2(tmp_path: Path) -> Iterator[Broker]:
    broker = _node(tmp_path, 2)
    yield broker
    broker.logs.close(clean=True)


class StubCluster:
    def __init__(self, state: MetadataState) -> None:
        self.state = state


class Controller:
    """Takes node 2's registration (epoch 2); answers heartbeats."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()

    async def call(self, request: ControllerRequest, timeout_s: float) -> ControllerReply:
        self.changed.set()
        if isinstance(request, RegisterRequest):
            return reply(controller=1, value=2)
        return reply(controller=1, value=2)


async def _until(check: Callable[[], bool], event: asyncio.Event) -> None:
    async with asyncio.timeout(WAIT_S):
        while not check():
            event.clear()
            await event.wait()


def _stale_replay() -> MetadataState:
    """Node 2's replica of the metadata as its restart replays it: chaos-6-0 led by node 2
    in epoch 0, every broker in its first registration."""
    state = MetadataState()
    for node in (1, 2, 3):
        _apply(state, _register(node, 1), UnfenceBroker(node, 1))
    _apply(state, CreateTopic("chaos-6", TOPIC_ID, ((2, 1, 3),), ()))
    part = state.partition("chaos-6", 0)
    assert part is not None and part.leader == 2 and part.leader_epoch == 0
    return state


def test_a_restarted_broker_leads_nothing_from_its_replayed_metadata(node2: Broker) -> None:
    state = _stale_replay()

    async def run() -> None:
        manager = ReplicaManager(node2, cast(Any, StubCluster(state)))
        node2.replication = manager
        controller = Controller()
        agent = BrokerAgent(controller, 2, None, "k:2", "m:2", 60_000,  # type: ignore[arg-type]
                            lambda: (), lambda ids: None)
        sync = ReplicaSync(node2, state, ready=lambda: agent.caught_up(state))
        node2.cluster, node2.led = cast(Any, StubCluster(state)), set()
        try:
            sync.sync()  # the replay at start: the partition exists here, nothing more
            assert node2.logs.partition("chaos-6", 0) is not None
            assert not node2.led and not manager.led and not manager.following
            assert node2.partition_error("chaos-6", 0) == ErrorCode.not_leader_or_follower

            agent.start()  # registered (epoch 2) with the controller, node 1...
            await _until(lambda: agent.epoch == 2, controller.changed)
            sync.sync()  # ...but the replica has not caught up: still nothing
            assert not node2.led and not manager.led and not manager.following

            # node 1's changes commit (its quorum is back), then node 2's registration
            _apply(state, ChangePartitionLeader("chaos-6", 0, 1, 1, (1, 2)))
            sync.sync()
            assert not manager.led and not manager.following
            _apply(state, _register(2, 2))
            sync.sync()
            assert not node2.led and not manager.led
            follow = manager.following[("chaos-6", 0)]
            assert (follow.leader, follow.leader_epoch) == (1, 1)
            assert node2.partition_error("chaos-6", 0) == ErrorCode.not_leader_or_follower
        finally:
            await agent.stop()
            await manager.stop()

    asyncio.run(run())


def test_the_gate_stays_open_once_caught_up() -> None:
    state = _stale_replay()
    agent = BrokerAgent(cast(Any, None), 2, None, "k:2", "m:2", 1000, lambda: (),
                        lambda ids: None)
    assert not agent.caught_up(state)  # not registered in this process
    agent.epoch = 2
    assert not agent.caught_up(state)  # registered; the replica still at epoch 1
    _apply(state, _register(2, 2))
    assert agent.caught_up(state)
    agent.epoch = 0  # the registration lost later: partitions stay as they are
    assert agent.caught_up(state)


def _append(broker: Broker, n: int) -> None:
    plog = broker.logs.partition("t", 0)
    assert plog is not None
    data = build_batch([(None, b"v")] * n, NOW)
    plog.append(data, validate_batches(data, max_batch_bytes=1 << 20), NOW)


def _leader_state() -> MetadataState:
    state = MetadataState()
    for node in (1, 2):
        _apply(state, _register(node, 1), UnfenceBroker(node, 1))
    return state


def test_the_leader_counts_only_fetches_of_its_own_epoch(node2: Broker) -> None:
    node2.logs.create_topic("t", 1, {}, NOW)
    plog = node2.logs.partition("t", 0)
    assert plog is not None
    plog.sole_replica = False  # (the replication manager says so when it applies)
    _append(node2, 10)

    async def run() -> None:
        manager = ReplicaManager(node2, cast(Any, StubCluster(_leader_state())))
        try:
            manager.apply({("t", 0): (plog, PartitionRecord((2, 1), 2, 1, (2, 1), 1))})
            assert manager.leads(plog) is not None and plog.high_watermark == 0
            # node 1 still following in epoch 0 (a fetch sent before the change)
            assert manager.follower_fetched(plog, 1, 10, 0) == ErrorCode.fenced_leader_epoch
            assert manager.follower_fetched(plog, 1, 10, 2) == ErrorCode.unknown_leader_epoch
            assert plog.high_watermark == 0
            assert manager.follower_fetched(plog, 1, 10, 1) == ErrorCode.none
            assert plog.high_watermark == 10
        finally:
            await manager.stop()

    asyncio.run(run())


class FakeLink:
    """A leader's Kafka listener as the fetcher sees it: records each request."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.changed = asyncio.Event()

    async def call(self, request: Any, timeout_s: float) -> Any:
        self.requests.append(request)
        self.changed.set()
        await asyncio.Event().wait()  # never answered: the test looks at what was asked
        raise AssertionError("unreachable")

    async def close(self) -> None:
        pass


class GatedFlusher:
    """Holds every flush until released."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def flush(self, plog: Any) -> None:
        self.started.set()
        await self.release.wait()


def test_a_partition_led_meanwhile_is_not_fetched_in_its_old_epoch(tmp_path: Path) -> None:
    # node 1 follows t-0 from node 2 in epoch 0 and flushes what it appended before its next
    # fetch; meanwhile it becomes the leader (epoch 1): that fetch must not carry t-0 (its
    # offset would count at node 2, still leading epoch 0, as node 1's progress there)
    node1 = _node(tmp_path, 1)
    node1.logs.create_topic("t", 2, {}, NOW)
    t0, t1 = node1.logs.partition("t", 0), node1.logs.partition("t", 1)
    assert t0 is not None and t1 is not None

    async def run() -> None:
        manager = ReplicaManager(node1, cast(Any, StubCluster(_leader_state())))
        flusher = GatedFlusher()
        node1.flusher = cast(Any, flusher)
        link = FakeLink()
        try:
            manager.apply({("t", 0): (t0, PartitionRecord((2, 1), 2, 0, (2, 1), 0)),
                           ("t", 1): (t1, PartitionRecord((2, 1), 2, 0, (2, 1), 0))})
            fetcher = manager.fetchers[2]
            fetcher._link = cast(Any, link)
            for follow in fetcher.follows.values():
                follow.truncated = True  # as after OffsetForLeaderEpoch
            # t-0 has records not yet flushed: the next fetch waits for their fsync
            data = build_batch([(None, b"v")] * 5, NOW)
            checked = validate_batches(data, max_batch_bytes=1 << 20)
            t0.append_replica(data, checked.headers, checked.positions, NOW)
            assert t0.flushed_offset < t0.log_end_offset
            async with asyncio.timeout(WAIT_S):
                await flusher.started.wait()
            manager.apply({("t", 0): (t0, PartitionRecord((2, 1), 1, 1, (1, 2), 1)),
                           ("t", 1): (t1, PartitionRecord((2, 1), 2, 0, (2, 1), 0))})
            assert manager.leads(t0) is not None
            flusher.release.set()
            await _until(lambda: bool(link.requests), link.changed)
            asked = {(str(t.topic), int(p.partition)) for t in link.requests[0].topics
                     for p in t.partitions}
            assert asked == {("t", 1)}
        finally:
            await manager.stop()
            node1.logs.close(clean=True)

    asyncio.run(run())
