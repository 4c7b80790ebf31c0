"""The controller's answer to ``AlterReassignmentsRequest`` (run by ``ControllerService`` on
the metadata leader): the sans-IO ``Controller`` checks each partition, the accepted ones
are proposed through Raft as ``AlterReassignment`` commands, and the reply is built once
they are applied, with each partition's outcome (a command the state then refuses, because
the partition moved on meanwhile, is answered with the refusal's code)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from eddy.cluster.controller import Controller
from eddy.cluster.controller.reassign import ReassignOutcome
from eddy.cluster.controller_rpc import (
    AlterReassignmentsRequest,
    ControllerReply,
    PartitionOutcome,
    TopicOutcome,
    reply,
)
from eddy.cluster.metadata import ApplyResult, MetadataCommand

__all__ = ["ReassignRpcs"]

log = logging.getLogger(__name__)

ProposeAll = Callable[[Sequence[MetadataCommand]], Awaitable[list[ApplyResult]]]


class ReassignRpcs:
    def __init__(self, controller: Controller, propose_all: ProposeAll, node_id: int) -> None:
        self.controller = controller
        self.propose_all = propose_all
        self.node_id = node_id

    async def alter(self, request: AlterReassignmentsRequest) -> ControllerReply:
        asked = [(t.topic, [(p.partition, p.replicas) for p in t.partitions])
                 for t in request.topics]
        planned = self.controller.alter_reassignments(asked)
        commands = [o.command for _, outcomes in planned for o in outcomes
                    if o.command is not None]
        results = iter(await self.propose_all(commands) if commands else [])
        for command in commands:
            log.info("reassigning %s-%d: %s", command.topic, command.partition,
                     "cancelled" if command.target is None else list(command.target))

        def answer(o: ReassignOutcome) -> PartitionOutcome:
            if o.command is not None:
                result = next(results)
                if not result.ok:
                    return PartitionOutcome(o.partition, int(result.code),
                                            result.message or None)
            return PartitionOutcome(o.partition, int(o.code), o.message)

        topics = tuple(TopicOutcome(name, tuple(answer(o) for o in outcomes))
                       for name, outcomes in planned)
        return reply(controller=self.node_id, outcomes=topics)
