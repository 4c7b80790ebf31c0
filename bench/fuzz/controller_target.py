"""The controller's RPC handler under fuzzing: decoded ``ControllerRequest`` bytes answered
by an active controller (one registered broker, one topic) whose Raft group is a stand-in
that applies each proposal at once. Every outcome must be a ``ControllerReply``; an
exception escaping ``answer`` is a finding."""

from __future__ import annotations

import asyncio
from typing import Any

from eddy.clock import ManualClock
from eddy.cluster.controller.rpc import ControllerReply, decode_request
from eddy.cluster.controller.service import ControllerService
from eddy.cluster.machine import MetadataMachine
from eddy.cluster.service import controller_config
from eddy.config import load_config
from eddy.metadata import ApplyResult, encode_command
from eddy.metadata.commands import CreateTopic, RegisterBroker, UnfenceBroker
from eddy.postcard import PostcardError

BROKER_KEY = bytes(range(32))


class InstantGroup:
    """What ControllerService uses of a RaftDriver: proposals applied at once, leading."""

    def __init__(self, machine: MetadataMachine) -> None:
        self.machine = machine
        self.on_soft_state: Any = None
        self.is_leader = True
        self.leader = 1
        self.node = None  # no Raft core: quorum status and learner changes are refused
        self._index = 0

    async def propose(self, data: bytes) -> ApplyResult:
        self._index += 1
        return self.machine.apply(self._index, data)

    async def read_barrier(self) -> int:
        return self._index


async def _answer(data: bytes) -> ControllerReply | None:
    try:
        request = decode_request(data)
    except PostcardError:
        return None
    machine = MetadataMachine()
    group = InstantGroup(machine)
    for command in (RegisterBroker(1, BROKER_KEY, None, "127.0.0.1:9092", "127.0.0.1:7946", 1),
                    UnfenceBroker(1, 1),
                    CreateTopic("t", bytes(range(1, 17)), ((1,),), ())):
        assert machine.apply(0, encode_command(command)).ok
    clock = ManualClock(1_000_000)
    config = controller_config(load_config(env={}, overrides={}))
    service = ControllerService(1, group, machine, config, clock,  # type: ignore[arg-type]
                                "fuzz-cluster")
    service.controller.start(clock.now_ms())
    return await service.answer(BROKER_KEY, request)


def answer_bytes(data: bytes) -> ControllerReply | None:
    """The reply to ``data`` if it decodes as a request (None if it does not)."""
    return asyncio.run(_answer(data))

