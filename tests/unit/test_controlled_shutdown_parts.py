"""The broker side of a controlled shutdown: the agent stops heartbeating and asks the
controller again while partitions still move, within its deadline; and the Raft groups a
stopping node leads are handed to the most caught-up live voter."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from eddy.cluster.controller.client import BrokerAgent, ControllerUnavailable
from eddy.cluster.controller.rpc import (
    ControlledShutdownRequest,
    ControllerReply,
    ControllerRequest,
    HeartbeatRequest,
    reply,
)
from eddy.cluster.raft.handover import hand_over_raft
from eddy.protocol.errors import ErrorCode


class ScriptedClient:
    """Answers each request with the next scripted reply (an exception is raised)."""

    def __init__(self, answers: list[ControllerReply | Exception]) -> None:
        self.answers = answers
        self.asked: list[ControllerRequest] = []

    async def call(self, request: ControllerRequest, timeout_s: float) -> ControllerReply:
        self.asked.append(request)
        if isinstance(request, HeartbeatRequest):
            return reply()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _agent(client: ScriptedClient, epoch: int = 4) -> BrokerAgent:
    agent = BrokerAgent(client, 2, None, "k:1", "m:1", 50, lambda: (), lambda ids: None)  # type: ignore[arg-type]
    agent.epoch = epoch
    return agent


def test_agent_asks_again_while_partitions_still_move() -> None:
    client = ScriptedClient([reply(value=3), reply(value=1), reply(value=1)])

    async def run() -> int | None:
        agent = _agent(client)
        agent.start()
        await asyncio.sleep(0.12)  # heartbeats go out meanwhile
        left = await agent.controlled_shutdown(5.0)
        beats = sum(isinstance(r, HeartbeatRequest) for r in client.asked)
        await asyncio.sleep(0.15)  # and none after the shutdown began
        assert sum(isinstance(r, HeartbeatRequest) for r in client.asked) == beats
        return left

    assert asyncio.run(run()) == 1  # 3, then 1, then 1 again: no progress, stop asking
    shutdowns = [r for r in client.asked if isinstance(r, ControlledShutdownRequest)]
    assert shutdowns == [ControlledShutdownRequest(2, 4)] * 3


def test_agent_gives_up_on_a_refusal_or_an_unregistered_broker() -> None:
    client = ScriptedClient([reply(ErrorCode.stale_broker_epoch, "stale")])
    assert asyncio.run(_agent(client).controlled_shutdown(1.0)) is None
    idle = ScriptedClient([])
    assert asyncio.run(_agent(idle, epoch=0).controlled_shutdown(1.0)) is None
    assert idle.asked == []
    down = ScriptedClient([ControllerUnavailable("nobody")])
    try:
        asyncio.run(_agent(down).controlled_shutdown(1.0))
    except ControllerUnavailable:
        pass
    else:
        raise AssertionError("ControllerUnavailable expected")


@dataclass
class _Progress:
    match: int


@dataclass
class _Node:
    voters: frozenset[int]
    matches: dict[int, int]

    def progress(self, peer: int) -> _Progress | None:
        return _Progress(self.matches[peer]) if peer in self.matches else None


@dataclass
class _Driver:
    node: _Node | None
    is_leader: bool
    asked: list[int] = field(default_factory=list)

    def transfer_leadership(self, to_node: int) -> None:
        self.asked.append(to_node)


class _Multi:
    def __init__(self, groups: dict[str, Any]) -> None:
        self.groups = groups


def test_raft_groups_go_to_the_most_caught_up_live_voter() -> None:
    metadata = _Driver(_Node(frozenset({1, 2, 3, 4}), {2: 90, 3: 100, 4: 120}), True)
    offsets = _Driver(_Node(frozenset({1, 2, 3}), {2: 5, 3: 5}), True)
    follower = _Driver(_Node(frozenset({1, 2, 3}), {}), False)
    alone = _Driver(_Node(frozenset({1}), {}), True)

    async def run() -> list[str]:
        async def lose_leadership() -> None:
            await asyncio.sleep(0.05)
            metadata.is_leader = False  # offsets never moves
        task = asyncio.ensure_future(lose_leadership())
        kept = await hand_over_raft(
            _Multi({"metadata": metadata, "offsets": offsets, "f": follower, "a": alone}),
            1, lambda n: n != 4, 0.3)  # type: ignore[arg-type]
        await task
        return kept

    assert asyncio.run(run()) == ["offsets"]
    assert metadata.asked == [3]  # 4 is further ahead but not live
    assert offsets.asked == [2]  # a tie: the lowest id
    assert follower.asked == [] and alone.asked == []


def test_a_controlled_shutdown_has_nothing_to_move_once_no_other_replica_can_lead() -> None:
    """The last nodes of a cluster stopping: what they lead has no other in-sync replica
    that is still there, and they follow no live leader from inside an ISR. The
    controller has nothing to do then (and may have left with the quorum: the last node
    waited 5 s for it)."""
    from types import SimpleNamespace

    from eddy.cluster.shutdown import to_move

    def part(leader: int, isr: tuple[int, ...]) -> Any:
        return SimpleNamespace(leader=leader, isr=isr)

    parts = [("a", 0, part(1, (1, 2, 3))), ("a", 1, part(2, (2, 1))), ("a", 2, part(1, (1,))),
             ("b", 0, part(3, (3, 2))), ("b", 1, part(-1, (1,)))]
    state = SimpleNamespace(partitions_of=lambda me: parts)
    everyone = {1, 2, 3}
    # all there: a-0 moves (2 or 3 can lead), a-1 (node 1 leaves 2's ISR); a-2 has nobody
    # else in its ISR, node 1 is not in b-0's ISR, b-1 has no leader
    assert to_move(state, 1, everyone.__contains__) == [("a", 0), ("a", 1)]  # type: ignore[arg-type]
    # node 2 gone (stopped, not fenced yet): only a-0 can still move (to 3)
    assert to_move(state, 1, {1, 3}.__contains__) == [("a", 0)]  # type: ignore[arg-type]
    # the last one: nothing
    assert to_move(state, 1, {1}.__contains__) == []  # type: ignore[arg-type]
