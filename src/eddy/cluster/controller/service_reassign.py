"""The controller's answer to ``AlterReassignmentsRequest`` (run by ``ControllerService`` on
the metadata leader): the sans-IO ``Controller`` checks each partition, the accepted ones
are proposed through Raft as ``AlterReassignment`` commands, and the reply is built once
they are applied, with each partition's outcome (a command the state then refuses, because
the partition moved on meanwhile, is answered with the refusal's code)."""

from __future__ import annotations

import logging

from eddy.cluster.controller import Controller
from eddy.cluster.controller.outcomes import ProposeAll, propose_planned
from eddy.cluster.controller.rpc import (
    AlterReassignmentsRequest,
    ControllerReply,
    reply,
)
from eddy.metadata.commands import AlterReassignment

__all__ = ["ReassignRpcs"]

log = logging.getLogger(__name__)



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
