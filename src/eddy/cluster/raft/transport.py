"""How Raft messages travel between nodes: the ``RaftTransport`` protocol, its mesh
implementation (one-way QUIC uni streams under TAG_RAFT) and an in-memory one for tests.

A transport carries opaque, already encoded ``RaftMessage`` bytes. ``send`` is fire and
forget; its optional ``on_done(ok)`` tells the sender whether the bytes were handed to a
connection (False: the peer is unknown, unreachable or its queue is full; the driver calls
the core's ``report_unreachable`` / ``report_snapshot``). Inbound bytes go to the receiver
with the node id the transport vouches for (the mesh: the sending peer's verified key,
mapped to its Kafka node id); ``decode_inbound`` then refuses anything malformed or claiming
another sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from eddy.cluster.raft.messages import RaftMessage, RaftMessageError, decode_message
from eddy.config_parse import parse_host_port
from eddy.mesh.frames import TAG_RAFT, Frame
from eddy.mesh.quic.transport import MeshError
from eddy.mesh.service import MeshService
from eddy.postcard import PostcardError

log = logging.getLogger(__name__)

#: ``on_done(ok)``: were the bytes handed to a connection to the peer?
SendDone = Callable[[bool], None]
#: ``receiver(from_node, msg_bytes)``
Receiver = Callable[[int, bytes], None]

#: messages held for one peer while its connection is being made (Raft resends anyway)
MAX_QUEUED_PER_PEER = 128
#: after a failed dial, messages to that peer fail at once for this long
DIAL_BACKOFF_S = 0.5


class RaftTransport(Protocol):
    def send(self, to_node: int, msg_bytes: bytes, on_done: SendDone | None = None) -> None:
        """Fire and forget; ``on_done`` (if given) is called once, maybe later."""
        ...

    def set_receiver(self, receiver: Receiver) -> None:
        """Where inbound messages go (one receiver per node: the MultiRaft dispatcher)."""
        ...


def decode_inbound(from_node: int, data: bytes, local_node: int) -> RaftMessage | None:
    """Decode a peer's bytes; None (with a log line) when malformed, not addressed to this
    node or claiming a sender other than the peer the transport vouches for."""
    try:
        msg = decode_message(data)
    except (PostcardError, RaftMessageError) as exc:
        log.info("dropped a raft message from node %d: %s", from_node, exc)
        return None
    if msg.src != from_node:
        log.info("dropped a raft %s from node %d claiming src %d", type(msg).__name__,
                 from_node, msg.src)
        return None
    if msg.dst != local_node:
        log.info("dropped a raft %s from node %d for node %d (this is node %d)",
                 type(msg).__name__, from_node, msg.dst, local_node)
        return None
    return msg


# -- the mesh ------------------------------------------------------------------------------


class MeshRaftTransport:
    """Raft over the mesh: each message is one TAG_RAFT frame on its own uni stream. A peer is
    found by Kafka node id in the mesh directory, or (``controller.quorum.voters``) by
    dialling the address given with ``set_voter_address``."""

    def __init__(self, mesh: MeshService, node_id: int) -> None:
        self.mesh = mesh
        self.node_id = node_id
        self._receiver: Receiver | None = None
        self._voter_addrs: dict[int, str] = {}
        self._dialled: dict[int, bytes] = {}  # node id -> key learned by dialling its address
        self._queued: dict[int, list[tuple[bytes, SendDone | None]]] = {}
        self._backoff_until: dict[int, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.dropped = 0
        mesh.on_one_way(TAG_RAFT, self._on_frame)

    def set_receiver(self, receiver: Receiver) -> None:
        self._receiver = receiver

    def set_voter_address(self, node_id: int, address: str) -> None:
        """``controller.quorum.voters``' ``id@host:port``: where node ``node_id``'s mesh
        listens (checked now, dialled when the directory does not know the node)."""
        parse_host_port(address, f"controller.quorum.voters ({node_id})")
        self._voter_addrs[node_id] = address

    def _key_of(self, node_id: int) -> bytes | None:
        return self.mesh.directory.key_of(node_id) or self._dialled.get(node_id)

    def _node_of(self, key: bytes) -> int | None:
        member = self.mesh.directory.members.get(key)
        if member is not None:
            return member.info.kafka_node_id
        for node_id, k in self._dialled.items():
            if k == key:
                return node_id
        return None

    # -- inbound ---------------------------------------------------------------------------
    def _on_frame(self, peer: bytes, frame: Frame) -> None:
        node = self._node_of(peer)
        if node is None:
            self.dropped += 1
            log.debug("dropped a raft message from unknown mesh peer %s", peer.hex()[:12])
            return
        if self._receiver is not None:
            self._receiver(node, frame.payload)

    # -- outbound --------------------------------------------------------------------------
    def send(self, to_node: int, msg_bytes: bytes, on_done: SendDone | None = None) -> None:
        t = self.mesh.transport
        key = self._key_of(to_node)
        if t is not None and key is not None and key in t.peers():
            self._send_now(key, msg_bytes, on_done)
            return
        loop = asyncio.get_running_loop()
        if t is None or loop.time() < self._backoff_until.get(to_node, 0.0):
            _done(on_done, False)
            return
        queued = self._queued.get(to_node)
        if queued is not None:  # a dial is under way
            if len(queued) < MAX_QUEUED_PER_PEER:
                queued.append((msg_bytes, on_done))
            else:
                _done(on_done, False)
            return
        addr = self._address_of(to_node, key)
        if addr is None:
            _done(on_done, False)
            return
        self._queued[to_node] = [(msg_bytes, on_done)]
        self._spawn(self._dial(to_node, key, addr))

    def _send_now(self, key: bytes, data: bytes, on_done: SendDone | None) -> None:
        t = self.mesh.transport
        assert t is not None
        try:
            t.send(key, self.mesh.rpc.frame(TAG_RAFT, data))
        except MeshError as exc:
            log.debug("raft send to %s failed: %s", key.hex()[:12], exc)
            _done(on_done, False)
            return
        _done(on_done, True)

    def _address_of(self, node_id: int, key: bytes | None) -> str | None:
        if key is not None:
            member = self.mesh.directory.members.get(key)
            if member is not None and member.info.mesh_addr:
                return member.info.mesh_addr
        return self._voter_addrs.get(node_id)

    async def _dial(self, node_id: int, key: bytes | None, addr: str) -> None:
        t = self.mesh.transport
        assert t is not None
        ok = False
        try:
            got = await t.connect(parse_host_port(addr, "raft peer address"), expected=key)
            if key is None:
                self._dialled[node_id] = got
            key, ok = got, True
        except Exception as exc:  # refused, timed out, another key: the peer is unreachable
            log.debug("raft: cannot reach node %d at %s: %s", node_id, addr, exc)
            self._backoff_until[node_id] = asyncio.get_running_loop().time() + DIAL_BACKOFF_S
        queued = self._queued.pop(node_id, [])
        for data, on_done in queued:
            if ok and key is not None:
                self._send_now(key, data, on_done)
            else:
                _done(on_done, False)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _done(on_done: SendDone | None, ok: bool) -> None:
    if on_done is not None:
        on_done(ok)


# -- in memory (tests) -----------------------------------------------------------------------


class InMemoryRaftNetwork:
    """Nodes in one event loop. Delivery is asynchronous (``call_soon``), optionally lossy
    (``drop_rate``); ``cut(a, b)`` blocks one direction, ``isolate(n)`` every link of ``n``,
    ``heal()`` undoes both. Sends to a node that is down or cut off report failure."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random(0)
        self.drop_rate = 0.0
        self.receivers: dict[int, Receiver] = {}
        self.blocked: set[tuple[int, int]] = set()
        self.isolated: set[int] = set()
        self.sent = 0

    def transport(self, node_id: int) -> InMemoryRaftTransport:
        return InMemoryRaftTransport(self, node_id)

    def down(self, node_id: int) -> None:
        """The node is gone: its receiver is forgotten."""
        self.receivers.pop(node_id, None)

    def cut(self, src: int, dst: int) -> None:
        self.blocked.add((src, dst))

    def isolate(self, node_id: int) -> None:
        self.isolated.add(node_id)

    def heal(self) -> None:
        self.blocked.clear()
        self.isolated.clear()

    def _link_up(self, src: int, dst: int) -> bool:
        return ((src, dst) not in self.blocked and src not in self.isolated
                and dst not in self.isolated and dst in self.receivers)

    def deliver(self, src: int, dst: int, data: bytes, on_done: SendDone | None) -> None:
        self.sent += 1
        if not self._link_up(src, dst):
            _done(on_done, False)
            return
        _done(on_done, True)
        if self.drop_rate and self.rng.random() < self.drop_rate:
            return
        asyncio.get_running_loop().call_soon(self._arrive, src, dst, data)

    def _arrive(self, src: int, dst: int, data: bytes) -> None:
        receiver = self.receivers.get(dst)
        if receiver is not None and self._link_up(src, dst):
            receiver(src, data)


class InMemoryRaftTransport:
    def __init__(self, network: InMemoryRaftNetwork, node_id: int) -> None:
        self.network = network
        self.node_id = node_id

    def send(self, to_node: int, msg_bytes: bytes, on_done: SendDone | None = None) -> None:
        self.network.deliver(self.node_id, to_node, msg_bytes, on_done)

    def set_receiver(self, receiver: Receiver) -> None:
        self.network.receivers[self.node_id] = receiver

    async def close(self) -> None:
        with contextlib.suppress(KeyError):
            del self.network.receivers[self.node_id]
