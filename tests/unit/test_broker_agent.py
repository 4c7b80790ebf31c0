"""The broker agent's registration against a scripted controller: ``registered`` follows
what the controller knows of this broker (issue 28: a broker that logged its registration
refused every ISR change for minutes as "not registered yet")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from eddy.cluster.controller.client import BrokerAgent, ControllerUnavailable
from eddy.cluster.controller.rpc import (
    ControllerReply,
    ControllerRequest,
    HeartbeatRequest,
    RegisterRequest,
    reply,
)
from eddy.protocol.errors import ErrorCode

WAIT_S = 10.0

Answer = Callable[[ControllerRequest], ControllerReply]


class Controller:
    """Answers with ``answer(request)`` (an exception is raised); records the requests."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.asked: list[ControllerRequest] = []
        self.changed = asyncio.Event()

    async def call(self, request: ControllerRequest, timeout_s: float) -> ControllerReply:
        self.asked.append(request)
        self.changed.set()
        return self.answer(request)

    async def until(self, check: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not check():
                self.changed.clear()
                await self.changed.wait()


def _agent(controller: Controller, interval_ms: int) -> BrokerAgent:
    return BrokerAgent(controller, 2, None, "k:1", "m:1", interval_ms,  # type: ignore[arg-type]
                       lambda: (), lambda ids: None)


def _beats(controller: Controller) -> list[HeartbeatRequest]:
    return [r for r in controller.asked if isinstance(r, HeartbeatRequest)]


def test_a_heartbeat_answered_after_a_lost_one_sets_registered() -> None:
    # registered with one controller; the heartbeat right after finds none (it lost its
    # leadership meanwhile); the next controller answers every later heartbeat
    def answer(request: ControllerRequest) -> ControllerReply:
        if isinstance(request, RegisterRequest):
            return reply(controller=2, value=5)
        if len(_beats(controller)) == 1:
            raise ControllerUnavailable("no controller answered")
        return reply(controller=3, value=5)

    controller = Controller(answer)

    async def run() -> None:
        agent = _agent(controller, 20)
        agent.start()
        try:
            await controller.until(lambda: len(_beats(controller)) >= 3)
            async with asyncio.timeout(WAIT_S):
                await agent.registered.wait()
            assert agent.epoch == 5
        finally:
            await agent.stop()

    asyncio.run(run())


def test_a_registration_the_controller_lost_is_made_again_at_once() -> None:
    seen_registered: list[bool] = []
    epochs = iter((1, 2))
    agent: BrokerAgent | None = None

    def answer(request: ControllerRequest) -> ControllerReply:
        assert agent is not None
        if isinstance(request, RegisterRequest):
            seen_registered.append(agent.registered.is_set())
            return reply(controller=1, value=next(epochs))
        if request.epoch == 1 and len(_beats(controller)) == 2:
            # a new controller whose state has no such broker
            return reply(ErrorCode.broker_id_not_registered, "broker 2 is not registered",
                         controller=3)
        return reply(controller=3, value=request.epoch)

    controller = Controller(answer)

    async def run() -> None:
        nonlocal agent
        agent = _agent(controller, 20)
        agent.start()
        try:
            await controller.until(lambda: any(
                b.epoch == 2 for b in _beats(controller)))
            async with asyncio.timeout(WAIT_S):
                await agent.registered.wait()
            assert agent.epoch == 2
        finally:
            await agent.stop()

    asyncio.run(run())
    kinds = [type(r).__name__ for r in controller.asked]
    assert kinds[:5] == ["RegisterRequest", "HeartbeatRequest", "HeartbeatRequest",
                         "RegisterRequest", "HeartbeatRequest"]
    # while the controller did not know it, requests waited for the new registration
    assert seen_registered == [False, False]
