"""The controller's answers to its batch requests, run by ``ControllerService`` on the
metadata leader: ``ElectLeadersRequest`` and ``ControlledShutdownRequest`` (``ElectionRpcs``),
``AlterReassignmentsRequest`` (``ReassignRpcs``). The sans-IO ``Controller`` plans the
changes (checking each partition), they are proposed through Raft, and the reply is built
once they are applied, with each partition's outcome (a planned change the state then
refuses, because the partition moved on meanwhile, is answered with the refusal's code)."""

from __future__ import annotations

import logging

from eddy.cluster.controller import Controller
from eddy.cluster.controller.elections import still_led
from eddy.cluster.controller.outcomes import ProposeAll, propose_planned
from eddy.cluster.controller.rpc import (
    AlterReassignmentsRequest,
    ControlledShutdownRequest,
    ControllerReply,
    ElectLeadersRequest,
    PartitionOutcome,
    TopicOutcome,
    reply,
)
from eddy.metadata.commands import AlterReassignment
from eddy.protocol.errors import ErrorCode

__all__ = ["STAYS_MESSAGE", "ElectionRpcs", "ReassignRpcs"]

log = logging.getLogger(__name__)

STAYS_MESSAGE = "no other live in-sync replica: it stays with the stopping broker"


class ElectionRpcs:
    def __init__(self, controller: Controller, propose_all: ProposeAll, node_id: int) -> None:
        self.controller = controller
        self.propose_all = propose_all
        self.node_id = node_id

    async def elect_leaders(self, request: ElectLeadersRequest, now_ms: int) -> ControllerReply:
        """Each partition's answer; a planned change the state then refuses (the partition
        moved on meanwhile) is answered with the refusal's code."""
        targets = None if request.topics is None else [(t.topic, t.partitions)
                                                       for t in request.topics]
        planned = self.controller.elect_leaders(request.election_type, targets, now_ms)
        topics, commands = await propose_planned(self.propose_all, planned)
        if commands:
            log.info("ElectLeaders (%s): moving the leader of %d partitions",
                     "unclean" if request.election_type else "preferred", len(commands))
        return reply(controller=self.node_id, outcomes=topics)

    async def controlled_shutdown(self, request: ControlledShutdownRequest,
                                  now_ms: int) -> ControllerReply:
        """Propose the moves, wait for them, then name what the broker still leads."""
        commands = self.controller.controlled_shutdown(request.node_id, request.epoch, now_ms)
        if commands:
            results = await self.propose_all(commands)
            refused = sum(not r.ok for r in results)
            log.info("controlled shutdown of broker %d: %d leader/ISR changes (%d refused)",
                     request.node_id, len(commands), refused)
        left = still_led(self.controller.state, request.node_id)
        by_topic: dict[str, list[PartitionOutcome]] = {}
        for name, index in left:
            by_topic.setdefault(name, []).append(PartitionOutcome(
                index, int(ErrorCode.eligible_leaders_not_available), STAYS_MESSAGE))
        if left:
            log.info("controlled shutdown of broker %d: %d partitions stay with it (%s)",
                     request.node_id, len(left),
                     ", ".join(f"{n}-{i}" for n, i in left[:10]))
        return reply(controller=self.node_id, value=len(left),
                     outcomes=tuple(TopicOutcome(n, tuple(p)) for n, p in by_topic.items()))


class ReassignRpcs:
    def __init__(self, controller: Controller, propose_all: ProposeAll, node_id: int) -> None:
        self.controller = controller
        self.propose_all = propose_all
        self.node_id = node_id

    async def alter(self, request: AlterReassignmentsRequest) -> ControllerReply:
        asked = [(t.topic, [(p.partition, p.replicas) for p in t.partitions])
                 for t in request.topics]
        planned = self.controller.alter_reassignments(asked)
        topics, commands = await propose_planned(self.propose_all, planned)
        for command in commands:
            assert isinstance(command, AlterReassignment)
            log.info("reassigning %s-%d: %s", command.topic, command.partition,
                     "cancelled" if command.target is None else list(command.target))
        return reply(controller=self.node_id, outcomes=topics)
