"""``ClusterRaftAdmin``: what operators see of and do to a node's Raft groups over the mesh's
control RPCs (`eddy cluster status`, `eddy cluster transfer-leader|add-voter|remove-voter`).

A change is made by the group's leader; asked of another node, the answer names the leader
and the tool asks it instead."""

from __future__ import annotations

import asyncio

from eddy.cluster.multiraft import MultiRaft
from eddy.cluster.raft.driver import CONF_KINDS, WriteTimeout
from eddy.cluster.raft.ready import ConfChangeError, NotLeader, ProposalDropped
from eddy.mesh.control import RaftChangeRequest, RaftChangeResponse, RaftGroupInfo

TRANSFER = "transfer-leader"
ACTIONS = (TRANSFER, *CONF_KINDS)
#: how long a leadership transfer may take before the tool is told it did not happen
TRANSFER_WAIT_S = 5.0


class ClusterRaftAdmin:
    def __init__(self, multi: MultiRaft) -> None:
        self.multi = multi

    def status(self) -> list[RaftGroupInfo]:
        return [RaftGroupInfo(s.group, s.node_id, s.role, s.leader, s.term, s.commit_index,
                              s.applied_index, s.voters, s.learners,
                              tuple(sorted(s.lag.items())))
                for s in self.multi.status()]

    async def change(self, request: RaftChangeRequest) -> RaftChangeResponse:
        driver = self.multi.groups.get(request.group)
        if driver is None:
            return RaftChangeResponse(f"group: no Raft group {request.group!r} runs on node "
                                      f"{self.multi.node_id}", 0)
        if request.action not in ACTIONS:
            return RaftChangeResponse(f"action: {request.action!r} is not one of "
                                      f"{', '.join(ACTIONS)}", driver.leader)
        if request.node <= 0:
            return RaftChangeResponse(f"node: {request.node} is not a node id", driver.leader)
        status = driver.status()
        members = (*status.voters, *status.learners)
        if request.action == "remove" and request.node not in members:
            return RaftChangeResponse(f"node: {request.node} is not a member of "
                                      f"{request.group}", driver.leader)
        if request.action == "add-voter" and request.node not in status.learners:
            # a voter that is not caught up (or not running) would cost the group its
            # quorum: only a learner, which the leader has been replicating to, is promoted
            return RaftChangeResponse(
                f"node: {request.node} is not a learner of {request.group} (a broker joins "
                "as a learner when it registers; promote it once it has)", driver.leader)
        try:
            if request.action == TRANSFER:
                return await self._transfer(request.group, request.node)
            await driver.change_membership(CONF_KINDS[request.action], request.node)
        except NotLeader as exc:
            return RaftChangeResponse(f"node {self.multi.node_id} does not lead "
                                      f"{request.group}", exc.leader_hint)
        except (ConfChangeError, WriteTimeout, ProposalDropped) as exc:
            return RaftChangeResponse(str(exc), driver.leader)
        return RaftChangeResponse(None, driver.leader)

    async def _transfer(self, group: str, to_node: int) -> RaftChangeResponse:
        driver = self.multi.groups[group]
        if to_node not in driver.status().voters:
            return RaftChangeResponse(f"node: {to_node} is not a voter of {group}",
                                      driver.leader)
        if driver.leader == to_node:
            return RaftChangeResponse(None, to_node)
        driver.transfer_leadership(to_node)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TRANSFER_WAIT_S
        while loop.time() < deadline:
            if driver.leader == to_node:
                return RaftChangeResponse(None, to_node)
            await asyncio.sleep(0.02)
        return RaftChangeResponse(f"leadership of {group} did not move to node {to_node} "
                                  f"within {TRANSFER_WAIT_S:.0f} s (is it caught up?)",
                                  driver.leader)
