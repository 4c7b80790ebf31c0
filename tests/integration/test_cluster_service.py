"""The metadata service in one process: three nodes over real QUIC on loopback, each a voter
of the ``metadata`` group (``controller.quorum.voters``) and a broker. Brokers register and
are unfenced, a topic of replication factor 3 created through any node is placed on all
three, a crashed controller is replaced and its broker fenced with its leaderships moved,
and requests that claim another node's identity are refused."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

from conftest import free_port

from eddy.clock import WallClock
from eddy.cluster.controller.rpc import (
    CreateTopicRequest,
    DeleteTopicRequest,
    HeartbeatRequest,
    ProposeRequest,
    QuorumRequest,
    RegisterRequest,
)
from eddy.cluster.raft.admin import TRANSFER, ClusterRaftAdmin
from eddy.cluster.service import ClusterService
from eddy.config import load_config
from eddy.mesh.control import RaftChangeRequest
from eddy.mesh.identity import NodeIdentity
from eddy.mesh.service import MeshService
from eddy.metadata import encode_command
from eddy.metadata.commands import AlterTopicConfigs, FenceBroker
from eddy.metadata.records import ConfigEntry
from eddy.protocol.errors import ErrorCode

IDS = (1, 2, 3)


def free_udp_port() -> int:
    return free_port(kind=socket.SOCK_DGRAM)


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


class Cluster:
    def __init__(self, tmp: Path) -> None:
        ports = {i: free_udp_port() for i in IDS}
        self.voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
        self.tmp = tmp
        self.meshes: dict[int, MeshService] = {}
        self.nodes: dict[int, ClusterService] = {}
        self.deleted: dict[int, list[bytes]] = {i: [] for i in (*IDS, 4)}

    async def start(self, i: int) -> ClusterService:
        cfg = load_config(env={}, overrides={
            "node_id": i, "data_dir": str(self.tmp / f"n{i}"),
            "process.roles": "broker,controller" if i in IDS else "broker",
            "controller.quorum.voters": self.voters,
            "mesh.ping.interval.ms": 100, "mesh.ping.max.unacked": 3})
        mesh = MeshService(cfg, NodeIdentity.load_or_create(cfg.data_dir), WallClock(),
                           ("127.0.0.1", 9000 + i), random.Random(i))
        await mesh.start()
        node = ClusterService(cfg, mesh, WallClock(), f"cluster-of-{i}")
        await node.start(f"127.0.0.1:{9000 + i}", hosted=lambda: (),
                         on_delete=self.deleted[i].extend)
        self.meshes[i], self.nodes[i] = mesh, node
        return node

    async def crash(self, i: int) -> None:
        node, mesh = self.nodes.pop(i), self.meshes.pop(i)
        assert node.agent is not None
        await node.agent.stop()
        if node.controller is not None:
            await node.controller.stop()
        for name in list(node.multi.groups):
            await node.multi.remove_group(name, abort=True)
        await mesh.stop()

    async def stop(self) -> None:
        for i in list(self.nodes):
            await self.nodes.pop(i).stop()
            await self.meshes.pop(i).stop()

    def controller(self) -> ClusterService | None:
        active = [n for n in self.nodes.values()
                  if n.controller is not None and n.controller.active]
        return active[0] if len(active) == 1 else None


def test_brokers_register_topics_place_and_the_controller_fails_over(tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path)
        try:
            for i in IDS:
                await c.start(i)
            await until(lambda: c.controller() is not None, 20, "one controller")
            await until(lambda: all(len(n.state.live_brokers()) == 3 for n in c.nodes.values()),
                        20, "every broker registered and unfenced, seen by every node")
            first = c.controller()
            assert first is not None
            await until(lambda: all(n.cluster_id == f"cluster-of-{first.node_id}"
                                    for n in c.nodes.values()), 10, "one cluster id")

            # a topic of replication factor 3 asked of a node that is not the controller
            ctl = c.controller()
            assert ctl is not None
            asker = next(n for n in c.nodes.values() if n is not ctl)
            answer = await asker.ask(CreateTopicRequest("orders", 6, 3, (), False), 10)
            assert answer.error_code == ErrorCode.none, answer
            assert answer.controller == ctl.node_id and answer.topic_id is not None
            await until(lambda: all(n.state.topic("orders") is not None
                                    for n in c.nodes.values()), 10, "topic on every node")
            topic = asker.state.topic("orders")
            assert topic is not None and topic.topic_id == answer.topic_id
            assert all(sorted(p.replicas) == [1, 2, 3] for p in topic.partitions)
            assert {p.leader for p in topic.partitions} == {1, 2, 3}

            again = await asker.ask(CreateTopicRequest("orders", 1, 1, (), False), 10)
            assert again.error_code == ErrorCode.topic_already_exists
            too_big = await asker.ask(CreateTopicRequest("big", 1, 4, (), False), 10)
            assert too_big.error_code == ErrorCode.invalid_replication_factor
            cfg = encode_command(AlterTopicConfigs(
                "orders", (ConfigEntry("retention.ms", "60000"),), ()))
            assert (await asker.ask(ProposeRequest(cfg), 10)).error_code == ErrorCode.none
            own = encode_command(FenceBroker(1, 1))
            refused = await asker.ask(ProposeRequest(own), 10)
            assert refused.error_code == ErrorCode.invalid_request

            # another node's identity: heartbeat or registration naming node 3 from node 1
            forged = await c.nodes[1].ask(HeartbeatRequest(3, 1, ()), 10)
            assert forged.error_code == ErrorCode.cluster_authorization_failed
            stolen = await c.nodes[1].ask(
                RegisterRequest(3, None, "127.0.0.1:1", "127.0.0.1:2"), 10)
            assert stolen.error_code == ErrorCode.duplicate_broker_registration

            # the controller crashes: another takes over, fences it, moves its leaderships
            dead = ctl.node_id
            led = [i for i, p in enumerate(topic.partitions) if p.leader == dead]
            await c.crash(dead)
            await until(lambda: c.controller() is not None, 10, "a new controller")
            new = c.controller()
            assert new is not None and new.node_id != dead
            await until(lambda: not new.state.is_live(dead), 10, "the dead broker fenced")
            await until(lambda: all(
                p.leader not in (dead, -1) and dead not in p.isr
                for p in (new.state.topic("orders") or topic).partitions), 10,
                "its partitions led by live brokers")
            after = new.state.topic("orders")
            assert after is not None
            assert all(after.partitions[p].leader_epoch > topic.partitions[p].leader_epoch
                       for p in led)

            # the deleted topic's data is ordered away from a node reporting it
            deleted = await c.nodes[new.node_id].ask(DeleteTopicRequest("orders", None), 10)
            assert deleted.error_code == ErrorCode.none
            await until(lambda: all(n.state.topic("orders") is None
                                    for n in c.nodes.values()), 10, "gone everywhere")

            # the crashed node comes back, registers again with a new epoch, is unfenced
            back = await c.start(dead)
            await until(lambda: new.state.is_live(dead), 15, "the restarted broker unfenced")
            assert back.agent is not None and back.agent.epoch >= 2
        finally:
            await c.stop()

    asyncio.run(go())


def test_a_broker_outside_the_quorum_joins_as_a_learner_and_operators_move_leadership(
        tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path)
        try:
            for i in IDS:
                await c.start(i)
            await until(lambda: c.controller() is not None, 20, "one controller")
            first = c.controller()
            assert first is not None
            await until(lambda: len(first.state.live_brokers()) == 3, 20, "3 brokers")
            created = await first.ask(CreateTopicRequest("early", 4, 1, (), False), 10)
            assert created.error_code == ErrorCode.none

            # node 4 is no voter: it registers, becomes a learner and replicates the state
            learner = await c.start(4)
            await until(lambda: learner.state.topic("early") is not None, 20,
                        "the learner has the topics created before it joined")
            await until(lambda: all(n.state.is_live(4) for n in c.nodes.values()), 20,
                        "node 4 registered and unfenced everywhere")
            status = {s.group: s for s in learner.raft_status()}["metadata"]
            assert status.role == "follower" and status.learners == (4,)
            assert status.voters == IDS
            # placed on the brokers the controller hears from now: on a loaded machine one
            # can be a heartbeat late (INVALID_REPLICATION_FACTOR, nothing created): again
            deadline = time.monotonic() + 15
            placed = await learner.ask(CreateTopicRequest("wide", 8, 4, (), False), 10)
            while (placed.error_code == ErrorCode.invalid_replication_factor
                   and time.monotonic() < deadline):
                await asyncio.sleep(0.1)
                placed = await learner.ask(CreateTopicRequest("wide", 8, 4, (), False), 10)
            assert placed.error_code == ErrorCode.none, placed
            await until(lambda: learner.state.topic("wide") is not None, 10, "wide here")
            wide = learner.state.topic("wide")
            assert wide is not None and all(len(p.replicas) == 4 for p in wide.partitions)

            # DescribeQuorum's source: the leader's view of every voter and the learner
            quorum = (await learner.ask(QuorumRequest(), 10)).quorum
            assert quorum is not None and quorum.leader == first.node_id
            assert [r.node_id for r in quorum.voters] == list(IDS)
            assert [r.node_id for r in quorum.observers] == [4]
            assert all(r.log_end > 0 for r in (*quorum.voters, *quorum.observers))

            # operators: transfer leadership; a follower names the leader; bad requests
            target = next(i for i in IDS if i != first.node_id)
            admin = ClusterRaftAdmin(c.nodes[target].multi)
            refused = await admin.change(RaftChangeRequest("metadata", TRANSFER, target))
            assert refused.error is not None and refused.leader == first.node_id
            assert (await admin.change(RaftChangeRequest("nope", TRANSFER, 1))).error
            leader_admin = ClusterRaftAdmin(first.multi)
            bad = await leader_admin.change(RaftChangeRequest("metadata", "explode", 2))
            assert bad.error is not None and "action" in bad.error
            moved = await leader_admin.change(RaftChangeRequest("metadata", TRANSFER, target))
            assert moved.error is None and moved.leader == target
            await until(lambda: c.controller() is c.nodes[target], 10,
                        "the controller follows the leadership")
            # clients are told of the same controller by every node, the learner too
            await until(lambda: {n.named_controller() for n in c.nodes.values()} == {target},
                        10, "every node names the new controller")
            leader_admin = ClusterRaftAdmin(c.nodes[target].multi)
            stranger = await leader_admin.change(RaftChangeRequest("metadata", "add-voter", 7))
            assert stranger.error is not None and "not a learner" in stranger.error
            gone = await leader_admin.change(RaftChangeRequest("metadata", "remove", 7))
            assert gone.error is not None and "not a member" in gone.error
            promoted = await leader_admin.change(RaftChangeRequest("metadata", "add-voter", 4))
            assert promoted.error is None
            await until(lambda: {s.group: s for s in learner.raft_status()}["metadata"].voters
                        == (1, 2, 3, 4), 10, "node 4 a voter, seen on node 4")
            removed = await leader_admin.change(RaftChangeRequest("metadata", "remove", 4))
            assert removed.error is None
            assert (await learner.ask(CreateTopicRequest("later", 1, 1, (), False), 10)
                    ).controller == target
        finally:
            await c.stop()

    asyncio.run(go())
