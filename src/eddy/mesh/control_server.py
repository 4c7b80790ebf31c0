"""A node's answers to operator control RPCs (tag 0x04): status and ping."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from eddy import postcard
from eddy.mesh.control import (
    ControlRequest,
    NodeStatus,
    PingRequest,
    PingResponse,
    RaftChangeRequest,
    RaftChangeResponse,
    RaftGroupInfo,
    StatusRequest,
    StatusResponse,
)
from eddy.mesh.frames import Frame
from eddy.mesh.identity import parse_node_id

if TYPE_CHECKING:  # the service owns this server; only its type is needed here
    from eddy.mesh.service import MeshService

#: the most pings one request may ask for, and the longest pause between them
MAX_PINGS = 1000
MAX_INTERVAL_MS = 10_000


class RaftAdmin(Protocol):
    """What a node running Raft groups offers operators (the cluster service)."""

    def status(self) -> list[RaftGroupInfo]: ...

    async def change(self, request: RaftChangeRequest) -> RaftChangeResponse: ...


class ControlServer:
    def __init__(self, service: MeshService) -> None:
        self.service = service

    async def handle(self, peer: bytes, frame: Frame) -> bytes | None:
        req = postcard.decode(ControlRequest, frame.payload)  # type: ignore[arg-type]
        if isinstance(req, StatusRequest):
            return postcard.encode(self.status())
        if isinstance(req, PingRequest):
            return postcard.encode(await self.ping(req))
        if isinstance(req, RaftChangeRequest):
            admin = self.service.raft_admin
            if admin is None:
                answer = RaftChangeResponse("this node runs no Raft group", 0)
            else:
                answer = await admin.change(req)
            return postcard.encode(answer)
        return None

    def status(self) -> StatusResponse:
        s = self.service
        now = s.clock.now_ms()
        nodes = []
        for key, m in sorted(s.directory.members.items(),
                             key=lambda kv: (kv[1].info.kafka_node_id, kv[0])):
            i = m.info
            nodes.append(NodeStatus(
                node_key=key, kafka_node_id=i.kafka_node_id, roles=i.roles,
                kafka_addr=i.kafka_addr, mesh_addr=i.mesh_addr, rack=i.rack,
                state="alive" if key == s.key else m.state,
                last_seen_ms_ago=0 if key == s.key else max(0, now - m.last_seen_ms),
                rtt_us=None if m.rtt_ms is None else int(m.rtt_ms * 1000),
                topics=len(m.topics), groups=len(m.groups)))
        active: tuple[bytes, ...] = ()
        passive: tuple[bytes, ...] = ()
        if s.gossip is not None:
            active = tuple(sorted(s.gossip.hv.active))
            passive = tuple(sorted(s.gossip.hv.passive))
        return StatusResponse(
            local=s.key, nodes=tuple(nodes), active_view=active, passive_view=passive,
            frames_in=tuple(sorted(s.rpc.frames_in.items())),
            frames_out=tuple(sorted(s.rpc.frames_out.items())),
            bytes_in=s.rpc.bytes_in, bytes_out=s.rpc.bytes_out,
            raft=() if s.raft_admin is None else tuple(s.raft_admin.status()))

    def resolve(self, target: str) -> bytes | None:
        """A node named by Kafka node.id or by NodeId (hex or base32)."""
        d = self.service.directory
        if target.isdigit():
            return d.key_of(int(target))
        try:
            key = parse_node_id(target)
        except ValueError:
            return None
        return key if key in d.members else None

    async def ping(self, req: PingRequest) -> PingResponse:
        key = self.resolve(req.target)
        if key is None:
            return PingResponse(target=bytes(32), rtts_us=(),
                                error=f"no node {req.target!r} is known to this node")
        rtts: list[int] = []
        count = min(max(req.count, 1), MAX_PINGS)
        try:
            for i in range(count):
                if i:
                    await asyncio.sleep(min(req.interval_ms, MAX_INTERVAL_MS) / 1000)
                rtts.append(int(await self.service.ping(key) * 1e6))
        except Exception as exc:
            return PingResponse(target=key, rtts_us=tuple(rtts),
                                error=f"{type(exc).__name__}: {exc}")
        return PingResponse(target=key, rtts_us=tuple(rtts), error=None)
