"""Multi-Raft over the mesh: three MeshService instances in one process over real QUIC on
loopback, each running the ``metadata`` and ``offsets`` groups. Both elect, both take
writes, moving one group's leadership leaves the other alone, hostile Raft frames are
dropped."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

from eddy.clock import WallClock
from eddy.cluster.multiraft import MultiRaft, group_id
from eddy.cluster.raft.driver import RaftDriver
from eddy.cluster.raft.messages import Heartbeat, encode_message
from eddy.cluster.raft.ready import NotLeader, RaftConfig
from eddy.cluster.raft.transport import MeshRaftTransport
from eddy.config import load_config
from eddy.mesh.frames import TAG_RAFT
from eddy.mesh.identity import NodeIdentity
from eddy.mesh.service import MeshService

GROUPS = ("metadata", "offsets")
CFG = RaftConfig(heartbeat_ms=100, election_timeout_ms=300)


class KvMachine:
    def __init__(self) -> None:
        self.kv: dict[str, str] = {}

    def apply(self, index: int, data: bytes) -> str | None:
        k, v = data.decode().split("=", 1)
        old = self.kv.get(k)
        self.kv[k] = v
        return old

    def snapshot(self) -> bytes:
        return json.dumps(self.kv).encode()

    def restore(self, data: bytes) -> None:
        self.kv = json.loads(data)


def service(tmp: Path, i: int, seed: str) -> MeshService:
    cfg = load_config(env={}, overrides={
        "node_id": i, "data_dir": str(tmp / f"n{i}"), "mesh.listener": "127.0.0.1:0",
        "mesh.seeds": seed, "mesh.ping.interval.ms": 100, "mesh.ping.max.unacked": 3})
    return MeshService(cfg, NodeIdentity.generate(), WallClock(), ("127.0.0.1", 9000 + i),
                       random.Random(i))


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.02)


class Node:
    def __init__(self, mesh: MeshService, multi: MultiRaft,
                 machines: dict[str, KvMachine]) -> None:
        self.mesh, self.multi, self.machines = mesh, multi, machines


def leader_of(nodes: list[Node], group: str) -> RaftDriver | None:
    leaders = [n.multi.groups[group] for n in nodes if n.multi.groups[group].is_leader]
    return max(leaders, key=lambda d: d.status().term) if leaders else None


async def write(nodes: list[Node], group: str, data: bytes, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while True:
        d = leader_of(nodes, group)
        try:
            if d is not None:
                await d.propose(data)
                return
        except NotLeader:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{group}: no leader took {data!r}")
        await asyncio.sleep(0.05)


def test_two_groups_on_three_mesh_nodes(tmp_path: Path) -> None:
    async def go() -> None:
        a = service(tmp_path, 1, "")
        _, port = await a.start()
        meshes = [a, service(tmp_path, 2, f"127.0.0.1:{port}"),
                  service(tmp_path, 3, f"127.0.0.1:{port}")]
        for m in meshes[1:]:
            await m.start()
        nodes: list[Node] = []
        try:
            await until(lambda: all(m.directory.key_of(j) is not None
                                    for m in meshes for j in (1, 2, 3)), 20,
                        "every node knows every node id")
            for i, m in enumerate(meshes, start=1):
                multi = MultiRaft(i, str(tmp_path / f"n{i}"), MeshRaftTransport(m, i),
                                  config=CFG)
                machines = {g: KvMachine() for g in GROUPS}
                for g in GROUPS:
                    await multi.add_group(g, [1, 2, 3], machines[g])
                nodes.append(Node(m, multi, machines))
            await until(lambda: all(leader_of(nodes, g) is not None for g in GROUPS), 20,
                        "both groups elect a leader")
            for k in range(20):
                await asyncio.gather(write(nodes, "metadata", b"topic-%d=%d" % (k, k)),
                                     write(nodes, "offsets", b"group-%d=%d" % (k, k * 10)))
            await until(lambda: all(len(n.machines[g].kv) == 20 for n in nodes
                                    for g in GROUPS), 20, "every node applies both groups")
            assert all(n.machines["offsets"].kv["group-3"] == "30" for n in nodes)
            assert all("group-3" not in n.machines["metadata"].kv for n in nodes)

            # move offsets' leadership; metadata keeps its leader and term throughout
            meta = leader_of(nodes, "metadata")
            offs = leader_of(nodes, "offsets")
            assert meta is not None and offs is not None
            meta_term = meta.status().term
            target = next(i for i in (1, 2, 3) if i != offs.node_id)
            offs.transfer_leadership(target)
            await until(lambda: nodes[target - 1].multi.groups["offsets"].is_leader, 15,
                        f"offsets moves to node {target}")
            await write(nodes, "offsets", b"after-move=1")
            await write(nodes, "metadata", b"after-move=1")
            assert leader_of(nodes, "metadata") is meta and meta.status().term == meta_term
            assert meta.is_leader

            # hostile frames: garbage, a forged sender, an unknown group, an unknown tag
            src, dst = nodes[0], nodes[1]
            t = src.mesh.transport
            assert t is not None
            key = dst.mesh.key
            forged = Heartbeat(group_id("metadata"), 3, 2, 1, 0, b"")
            unknown = Heartbeat(group_id("nope"), 1, 2, 1, 0, b"")
            for payload in (b"\x07\xff\xff\xff\xff\xff", encode_message(forged),
                            encode_message(unknown)):
                t.send(key, src.mesh.rpc.frame(TAG_RAFT, payload))
            t.send(key, src.mesh.rpc.frame(0x0E, b"x"))  # a control tag nothing serves
            await until(lambda: dst.multi.dropped.get("bad_message", 0) >= 2
                        and dst.multi.dropped.get("unknown_group", 0) >= 1
                        and dst.mesh.rpc.dropped.get("unsupported_tag", 0) >= 1, 10,
                        "hostile frames dropped")
            await write(nodes, "metadata", b"still=ok")
            st = {s.group: s for s in nodes[0].multi.status()}
            assert set(st) == set(GROUPS)
            assert st["metadata"].voters == (1, 2, 3)
        finally:
            for n in nodes:
                await n.multi.stop()
            for m in meshes:
                await m.stop()

    asyncio.run(go())


def test_voters_found_by_address_without_gossip_seeds(tmp_path: Path) -> None:
    """controller.quorum.voters' id@host:port: nodes that share no seed reach each other by
    dialling the voters' mesh addresses, and the group elects and commits."""

    async def go() -> None:
        meshes = [service(tmp_path, i, "") for i in (1, 2, 3)]
        ports = {}
        for i, m in enumerate(meshes, start=1):
            ports[i] = (await m.start())[1]
        nodes: list[Node] = []
        try:
            for i, m in enumerate(meshes, start=1):
                transport = MeshRaftTransport(m, i)
                for j in (1, 2, 3):
                    if j != i:
                        transport.set_voter_address(j, f"127.0.0.1:{ports[j]}")
                multi = MultiRaft(i, str(tmp_path / f"n{i}"), transport, config=CFG)
                machine = KvMachine()
                await multi.add_group("metadata", [1, 2, 3], machine)
                nodes.append(Node(m, multi, {"metadata": machine}))
            await until(lambda: leader_of(nodes, "metadata") is not None, 30,
                        "the group elects over dialled addresses")
            for k in range(5):
                await write(nodes, "metadata", b"k%d=%d" % (k, k))
            await until(lambda: all(len(n.machines["metadata"].kv) == 5 for n in nodes), 20,
                        "every voter applies")
        finally:
            for n in nodes:
                await n.multi.stop()
            for m in meshes:
                await m.stop()

    asyncio.run(go())
