"""An operator's tool on the mesh: dial a node with a throwaway identity and ask it a
control RPC (tag 0x04). A node limited by `mesh.allowed.nodes` or `mesh.cluster.public.key`
refuses such tools unless they present a listed key or a membership token signed by the
cluster key (`identity_dir`/node.key and `identity_dir`/node.membership)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eddy import postcard
from eddy.mesh.control import ControlRequest, ControlResponse
from eddy.mesh.frames import TAG_CONTROL_RPC
from eddy.mesh.identity import NodeIdentity
from eddy.mesh.membership import MEMBERSHIP_FILE, load_own_token
from eddy.mesh.quic.transport import MeshTransport
from eddy.mesh.rpc import MeshRpc

MAX_ANSWER_BYTES = 16 << 20


async def _no_requests(peer: bytes, data: bytes) -> bytes | None:
    return None  # a tool serves nothing


def _no_messages(peer: bytes, data: bytes) -> None:
    return None


async def control_call(addr: tuple[str, int], request: ControlRequest, timeout_s: float,
                       identity_dir: Path | None = None) -> ControlResponse:
    """Connect to a node's mesh listener and return its answer to one control request.
    The tool's key is `identity_dir`/node.key (made on first use), else a throwaway one; its
    membership token `identity_dir`/node.membership when there is one."""
    identity = (NodeIdentity.load_or_create(identity_dir) if identity_dir is not None
                else NodeIdentity.generate())
    membership = (load_own_token(identity_dir / MEMBERSHIP_FILE, identity.node_id, None,
                                 explicit=False) if identity_dir is not None else None)
    rpc = MeshRpc(MAX_ANSWER_BYTES)
    transport = MeshTransport(identity, "0.0.0.0" if addr[0] != "127.0.0.1" else "127.0.0.1",
                              0, allowed=None, membership=membership,
                              on_request=_no_requests,
                              on_message=_no_messages, on_peer_up=None, on_peer_down=None,
                              max_stream_bytes=MAX_ANSWER_BYTES)
    await transport.start()
    rpc.transport = transport
    try:
        peer = await asyncio.wait_for(transport.connect(addr, expected=None), timeout_s)
        payload = await rpc.call(peer, TAG_CONTROL_RPC, postcard.encode(request), timeout_s)
        answer: ControlResponse = postcard.decode(ControlResponse, payload)  # type: ignore[arg-type]
        return answer
    finally:
        await transport.close()
