"""This node on the mesh: the asyncio adapter around the sans-IO gossip core.

It owns the QUIC transport, feeds every gossip message to GossipNode and carries out what
the core asks (send to a node, dial a seed address, connect), ticks it, keeps the member
directory (Hello frames, announcements, liveness) and broadcasts this node's announcement
whenever what it hosts changes (and every `announce_interval_ms` so late joiners learn it).
Handlers for tags 0x01 (pointer pulls), 0x04 (operator control RPCs) and 0x10 (Ping/Pong/
Hello) live here; the runtime registers 0x11 (KafkaOp) when the node has the broker role.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

from eddy import __version__, postcard
from eddy.clock import Clock
from eddy.config_parse import parse_host_port, split_list
from eddy.mesh.announce import (
    ANNOUNCE_TOPIC,
    Announcement,
    AnnouncementPointer,
    GossipPayload,
    PayloadCache,
    SignedAnnouncement,
    sign,
    verify,
)
from eddy.mesh.control_server import ControlServer, RaftAdmin
from eddy.mesh.directory import ALIVE, DEAD, SUSPECT, Directory, NodeInfo
from eddy.mesh.frames import (
    POINTER_THRESHOLD,
    TAG_CONTROL_RPC,
    TAG_GOSSIP,
    TAG_PING,
    TAG_POINTER_PULL,
    Frame,
    Hello,
    Ping,
    PingFrame,
    Pointer,
    Pong,
    PullRequest,
    PullResponse,
    pointer_hash,
)
from eddy.mesh.gossip.messages import (
    Connect,
    Delivered,
    GossipMessage,
    GossipMessageError,
    IdentityMismatch,
    PeerDead,
    PeerRef,
)
from eddy.mesh.gossip.node import GossipConfig, GossipNode
from eddy.mesh.gossip.peers import PeerConfig
from eddy.mesh.identity import NodeIdentity, parse_node_id
from eddy.mesh.mdns import MdnsDiscovery
from eddy.mesh.membership import load_admission
from eddy.mesh.quic.transport import MeshError, MeshTransport
from eddy.mesh.rpc import MeshRpc
from eddy.mesh.settings import MeshNode

log = logging.getLogger(__name__)

TICK_S = 0.05
#: the tick while gossip has no broadcast in flight (``GossipNode.busy``): the PING rounds
#: (``mesh.ping.interval.ms``), seed probes, the hosted-topics check and the directory's
#: states need no more; a message that leaves gossip busy wakes the loop at once
IDLE_TICK_S = 0.25
#: ops and answers up to this size travel on the mesh (bulk data rides the Kafka listener)
MAX_FRAME_BYTES = 64 << 20
#: sends queued for one node while its connection is being made; beyond it they are dropped
#: (gossip is best effort and repairs itself)
MAX_PENDING_PER_PEER = 256

#: how often what this node hosts is compared with what it last announced
HOSTED_CHECK_MS = 250
#: topics and groups this node hosts, asked for before each announcement
HostedFn = Callable[[], tuple[dict[str, int], frozenset[str]]]


def _host(addr: tuple[str, int]) -> str:
    host, port = addr
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class MeshService:
    def __init__(self, config: MeshNode, identity: NodeIdentity, clock: Clock,
                 kafka_addr: tuple[str, int], rng: random.Random | None = None) -> None:
        self.config = config
        self.identity = identity
        self.clock = clock
        self.key = identity.node_id
        self.rng = rng or random.Random()
        self.kafka_addr = kafka_addr
        self.rpc = MeshRpc(MAX_FRAME_BYTES)
        self.cache = PayloadCache()
        self.hosted: HostedFn | None = None
        self.transport: MeshTransport | None = None
        self.gossip: GossipNode | None = None
        self.directory = Directory(self._local_info(""))
        self.mesh_addr = ""
        self.announce_interval_ms = 5_000
        self._announced: tuple[dict[str, int], frozenset[str]] | None = None
        self._last_announce_ms = 0
        self._last_hosted_check_ms = 0
        self._version = itertools.count(clock.now_ms() * 1000)
        self._pending: dict[bytes, list[bytes]] = {}
        self._connecting: set[bytes] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        self._nonces = itertools.count(1)
        self.control = ControlServer(self)
        #: the node's Raft groups, for operators' status and change requests (set by the
        #: cluster service when the node runs them)
        self.raft_admin: RaftAdmin | None = None
        self.mdns: MdnsDiscovery | None = None
        self._one_way: dict[int, Callable[[bytes, Frame], None]] = {}
        self._kick = asyncio.Event()  # wakes the tick loop (gossip became busy)

    def set_kafka_address(self, addr: tuple[str, int]) -> None:
        """The Kafka address clients are told (known once the listener is bound)."""
        self.kafka_addr = addr
        self.directory.replace_local(kafka_addr=_host(addr))

    def _local_info(self, mesh_addr: str) -> NodeInfo:
        cfg = self.config
        return NodeInfo(key=self.key, kafka_node_id=cfg.node_id,
                        roles=tuple(sorted(cfg.roles)), mesh_addr=mesh_addr,
                        kafka_addr=_host(self.kafka_addr), rack=cfg.broker_rack,
                        version=__version__)

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        cfg = self.config
        host, port = cfg.mesh_address
        allowed = frozenset(parse_node_id(n) for n in split_list(cfg.mesh_allowed_nodes))
        cluster_key, membership = load_admission(
            cfg.mesh_cluster_public_key, cfg.mesh_membership_file, cfg.data_dir, self.key,
            time.time())
        self.transport = MeshTransport(
            self.identity, host, port, allowed=allowed or None, cluster_key=cluster_key,
            membership=membership,
            on_request=self._on_request, on_message=self._on_message,
            on_peer_up=self._on_peer_up, on_peer_down=self._on_peer_down,
            max_stream_bytes=MAX_FRAME_BYTES,
        )
        bound = await self.transport.start()
        advertised = (parse_host_port(cfg.mesh_advertised, "mesh.advertised.listener")
                      if cfg.mesh_advertised else bound)
        self.mesh_addr = _host(advertised)
        self.directory.replace_local(mesh_addr=self.mesh_addr)
        self.rpc.transport = self.transport
        self.rpc.handle(TAG_PING, self._on_ping)
        self.rpc.handle(TAG_POINTER_PULL, self._on_pull)
        self.rpc.handle(TAG_CONTROL_RPC, self.control.handle)
        peers = PeerConfig(ping_interval_ms=cfg.mesh_ping_interval_ms,
                           max_ping_unacked=cfg.mesh_ping_max_unacked)
        seeds = [_host(a) for a in cfg.mesh_seed_addresses]
        seeds = [s for s in seeds if s != self.mesh_addr]
        self.gossip = GossipNode(PeerRef(self.key, self.mesh_addr), seeds, self.rng,
                                 GossipConfig(peers=peers))
        if cfg.mesh_mdns_enable:
            # a node on a loopback address is reachable there only: announce it there only
            loopback = advertised[0].startswith("127.") or advertised[0] == "::1"
            self.mdns = MdnsDiscovery(self.key, advertised, cfg.node_id, self._on_mdns_found,
                                      interfaces=[advertised[0]] if loopback else None,
                                      cluster=cfg.mesh_mdns_cluster)
            await self.mdns.start()
        self._runner = asyncio.get_running_loop().create_task(self._run())
        return bound

    def _on_mdns_found(self, key: bytes, addr: str) -> None:
        """A node on the LAN (mDNS proves no identity: the connection checks the key)."""
        if self.gossip is None:
            return
        now = self.clock.now_ms()
        self.gossip.discovered(PeerRef(key, addr), now)
        self._pump(now)

    async def stop(self) -> None:
        if self.mdns is not None:
            await self.mdns.close()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.transport is not None:
            await self.transport.close()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:
        assert self.gossip is not None
        while True:
            now = self.clock.now_ms()
            try:
                self.gossip.tick(now)
                self._maybe_announce(now)
                self._pump(now)
                self._sync_states(now)
            except Exception:  # one bad step must not stop the mesh
                log.exception("mesh tick failed")
            self._kick.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S if self.gossip.busy() else IDLE_TICK_S):
                    await self._kick.wait()

    # ---- gossip in and out ---------------------------------------------------------------

    def on_one_way(self, tag: int, handler: Callable[[bytes, Frame], None]) -> None:
        """Route one-way frames (uni streams) under ``tag`` to ``handler(peer, frame)``
        (gossip's tag is the service's own)."""
        if tag == TAG_GOSSIP:
            raise ValueError("the gossip tag is handled by the mesh service")
        self._one_way[tag] = handler

    def _heard(self, peer: bytes) -> None:
        """Any message proves its sender alive: no gossip PING needed for it this round
        (Raft heartbeats and controller RPCs already say so several times a second)."""
        if self.gossip is not None:
            self.gossip.heard_from(peer, self.clock.now_ms())

    async def _on_request(self, peer: bytes, data: bytes) -> bytes | None:
        self._heard(peer)
        return await self.rpc.on_request(peer, data)

    def _on_message(self, peer: bytes, data: bytes) -> None:
        frame = self.rpc.on_message(peer, data)
        if frame is None:
            return
        if frame.tag != TAG_GOSSIP:  # gossip's own messages count in the gossip node
            self._heard(peer)
        handler = self._one_way.get(frame.tag)
        if handler is not None:
            try:
                handler(peer, frame)
            except Exception:  # one bad message must not stop the mesh
                log.exception("one-way handler for tag %#04x failed", frame.tag)
            return
        if self.gossip is None:
            return
        if frame.tag != TAG_GOSSIP:
            self.rpc.note_unsupported(peer, frame.tag)
            return
        try:
            msg = postcard.decode(GossipMessage, frame.payload)  # type: ignore[arg-type]
            now = self.clock.now_ms()
            self.gossip.receive(peer, msg, now)
        except (postcard.PostcardError, GossipMessageError) as exc:
            log.info("dropped a gossip message from %s: %s", peer.hex()[:12], exc)
            return
        self._pump(now)

    def _pump(self, now: int) -> None:
        g = self.gossip
        assert g is not None
        if g.busy():  # something in flight: the tick loop runs its fast tick from now
            self._kick.set()
        for intent in g.take_intents():
            if isinstance(intent, Connect):
                self._ensure_connected(intent.node_id, intent.addr)
        for node_id, msg in g.take_outbox():
            self._send(node_id, self.rpc.frame(TAG_GOSSIP, postcard.encode(msg)))
        for addr, msg in g.take_dials():
            self._spawn(self._dial(addr, self.rpc.frame(TAG_GOSSIP, postcard.encode(msg))))
        for event in g.take_events():
            self._on_event(event, now)

    def _send(self, node_id: bytes, data: bytes) -> None:
        t = self.transport
        assert t is not None
        if node_id in t.peers():
            try:
                t.send(node_id, data)
            except MeshError as exc:
                log.debug("gossip send to %s failed: %s", node_id.hex()[:12], exc)
            return
        pending = self._pending.setdefault(node_id, [])
        if len(pending) < MAX_PENDING_PER_PEER:
            pending.append(data)
        addr = self._address_of(node_id)
        if addr is not None:
            self._ensure_connected(node_id, addr)

    def _address_of(self, node_id: bytes) -> str | None:
        member = self.directory.members.get(node_id)
        if member is not None and member.info.mesh_addr:
            return member.info.mesh_addr
        if self.gossip is not None:
            return self.gossip.hv.address_of(node_id) or self.gossip.peers.address_of(node_id)
        return None

    def _ensure_connected(self, node_id: bytes, addr: str) -> None:
        t = self.transport
        assert t is not None
        if node_id in t.peers() or node_id in self._connecting:
            return
        self._connecting.add(node_id)
        self._spawn(self._connect(node_id, addr))

    async def _connect(self, node_id: bytes, addr: str) -> None:
        t = self.transport
        assert t is not None
        try:
            await t.connect(parse_host_port(addr, "peer address"), expected=node_id)
        except Exception as exc:  # unreachable, refused, wrong key: gossip learns it failed
            log.debug("cannot connect to %s at %s: %s", node_id.hex()[:12], addr, exc)
            self._pending.pop(node_id, None)
            if self.gossip is not None:
                self.gossip.peer_failed(node_id, self.clock.now_ms())
                self._pump(self.clock.now_ms())
        finally:
            self._connecting.discard(node_id)
        self._flush(node_id)

    def _flush(self, node_id: bytes) -> None:
        t = self.transport
        if t is None or node_id not in t.peers():
            return
        for data in self._pending.pop(node_id, []):
            with contextlib.suppress(MeshError):
                t.send(node_id, data)

    async def _dial(self, addr: str, data: bytes) -> None:
        """A message for an address whose key we learn by connecting (a seed)."""
        t = self.transport
        assert t is not None
        try:
            peer = await t.connect(parse_host_port(addr, "seed address"), expected=None)
        except Exception as exc:
            log.debug("seed %s unreachable: %s", addr, exc)
            return
        with contextlib.suppress(MeshError):
            t.send(peer, data)

    def _on_event(self, event: object, now: int) -> None:
        if isinstance(event, Delivered):
            if event.topic == ANNOUNCE_TOPIC:
                self._spawn(self._on_announcement(event.payload))
        elif isinstance(event, PeerDead):
            self.directory.set_state(event.node_id, DEAD)
            log.info("mesh peer %s is dead", event.node_id.hex()[:12])
        elif isinstance(event, IdentityMismatch):
            log.warning("refused %s at %s: the node there was %s", event.got.hex()[:12],
                        event.addr, event.expected.hex()[:12])
        else:  # a peer answered (seed, discovered, revived), a neighbour came or went
            self._last_announce_ms = min(self._last_announce_ms,
                                         now - self.announce_interval_ms + 1_000)

    def _sync_states(self, now: int) -> None:
        """Directory liveness from the ping table: what `eddy cluster status` shows."""
        assert self.gossip is not None
        states = {s.node_id: s.state for s in self.gossip.status()}
        for key, member in self.directory.members.items():
            if key == self.key:
                continue
            state = states.get(key)
            if state is None and member.state != DEAD and member.info.mesh_addr:
                # every known node is pinged, not only gossip neighbours: that is what
                # tells `eddy cluster status` (and the routes) a node died
                self.gossip.peers.track(PeerRef(key, member.info.mesh_addr), now)
            if state == "alive":
                self.directory.set_state(key, ALIVE, now)
            elif state in ("suspect", "unchecked") and member.state != DEAD:
                self.directory.set_state(key, SUSPECT)
            elif state == "dead":
                self.directory.set_state(key, DEAD)

    # ---- transport callbacks -------------------------------------------------------------

    def _on_peer_up(self, peer: bytes, addr: tuple[str, int]) -> None:
        self._flush(peer)
        self._spawn(self._exchange_hello(peer))

    def _on_peer_down(self, peer: bytes) -> None:
        if self.gossip is not None:
            now = self.clock.now_ms()
            self.gossip.peer_failed(peer, now)
            self._pump(now)

    # ---- Ping/Pong/Hello (tag 0x10) -------------------------------------------------------

    def hello(self) -> Hello:
        info = self.directory.local
        return Hello(node_id=self.key, kafka_node_id=info.kafka_node_id, roles=info.roles,
                     addresses=(info.mesh_addr, f"kafka={info.kafka_addr}"), rack=info.rack,
                     version=info.version)

    def _apply_hello(self, h: Hello) -> None:
        mesh = h.addresses[0] if h.addresses else ""
        kafka = next((a.removeprefix("kafka=") for a in h.addresses
                      if a.startswith("kafka=")), "")
        self.directory.hello(NodeInfo(key=h.node_id, kafka_node_id=h.kafka_node_id,
                                      roles=h.roles, mesh_addr=mesh, kafka_addr=kafka,
                                      rack=h.rack, version=h.version), self.clock.now_ms())

    async def _exchange_hello(self, peer: bytes) -> None:
        started = time.perf_counter()
        try:
            payload = await self.rpc.call(peer, TAG_PING, postcard.encode(self.hello()), 10.0)
            answer = postcard.decode(PingFrame, payload)  # type: ignore[arg-type]
        except Exception as exc:
            log.debug("no Hello from %s: %s", peer.hex()[:12], exc)
            return
        if isinstance(answer, Hello) and answer.node_id == peer:
            self._apply_hello(answer)
            rtt_ms = (time.perf_counter() - started) * 1000
            self.directory.seen(peer, self.clock.now_ms(), rtt_ms)

    async def _on_ping(self, peer: bytes, frame: Frame) -> bytes | None:
        msg = postcard.decode(PingFrame, frame.payload)  # type: ignore[arg-type]
        if isinstance(msg, Hello):
            if msg.node_id != peer:
                log.warning("Hello from %s names another node id: dropped", peer.hex()[:12])
                return None
            self._apply_hello(msg)
            return postcard.encode(self.hello())
        if isinstance(msg, Ping):
            return postcard.encode(Pong(nonce=msg.nonce, sent_ms=msg.sent_ms, peers=()))
        return None

    async def ping(self, peer: bytes, timeout_s: float = 5.0) -> float:
        """One Ping/Pong round trip to a peer over the mesh, in seconds."""
        addr = self._address_of(peer)
        t = self.transport
        assert t is not None
        if peer not in t.peers() and addr is not None:
            await t.connect(parse_host_port(addr, "peer address"), expected=peer)
        nonce = next(self._nonces)
        started = time.perf_counter()
        payload = await self.rpc.call(
            peer, TAG_PING, postcard.encode(Ping(nonce=nonce, sent_ms=self.clock.now_ms())),
            timeout_s)
        rtt = time.perf_counter() - started
        answer = postcard.decode(PingFrame, payload)  # type: ignore[arg-type]
        if not isinstance(answer, Pong) or answer.nonce != nonce:
            raise MeshError("the answer to a Ping was not its Pong")
        self.directory.seen(peer, self.clock.now_ms(), rtt * 1000)
        return rtt

    # ---- announcements and pointer gossip ------------------------------------------------

    def _maybe_announce(self, now: int) -> None:
        due = now - self._last_announce_ms >= self.announce_interval_ms
        if not due and now - self._last_hosted_check_ms < HOSTED_CHECK_MS:
            return
        self._last_hosted_check_ms = now
        hosted = self.hosted() if self.hosted is not None else ({}, frozenset())
        changed = hosted != self._announced
        if not changed and now - self._last_announce_ms < self.announce_interval_ms:
            return
        topics, groups = dict(hosted[0]), hosted[1]
        self._announced = (topics, groups)  # a copy: the caller may change its dict
        self._last_announce_ms = now
        self.directory.routes_update(self.key, next(self._version), topics, groups)
        info = self.directory.local
        ann = Announcement(node=self.key, version=self.directory.members[self.key]
                           .routes_version, kafka_node_id=info.kafka_node_id,
                           roles=info.roles, mesh_addr=info.mesh_addr,
                           kafka_addr=info.kafka_addr, rack=info.rack, software=info.version,
                           topics=tuple(sorted(topics.items())), groups=tuple(sorted(groups)))
        payload = sign(self.identity, ann)
        if len(payload) > POINTER_THRESHOLD:
            digest = self.cache.put(payload)
            payload = postcard.encode(AnnouncementPointer(
                Pointer(hash=digest, size=len(payload), source=self.key)))
        assert self.gossip is not None
        self.gossip.broadcast(payload, ANNOUNCE_TOPIC, now)

    async def _on_announcement(self, payload: bytes) -> None:
        try:
            msg = postcard.decode(GossipPayload, payload)  # type: ignore[arg-type]
            if isinstance(msg, AnnouncementPointer):
                payload = await self._pull(msg.pointer)
                msg = postcard.decode(SignedAnnouncement, payload)
            if not isinstance(msg, SignedAnnouncement):
                return
            msg = verify(msg)
        except Exception as exc:
            log.info("dropped an announcement: %s", exc)
            return
        if msg.node == self.key:
            return
        info = NodeInfo(key=msg.node, kafka_node_id=msg.kafka_node_id, roles=msg.roles,
                        mesh_addr=msg.mesh_addr, kafka_addr=msg.kafka_addr, rack=msg.rack,
                        version=msg.software)
        now = self.clock.now_ms()
        member = self.directory.members.get(msg.node)
        if member is None or member.info != info:
            self.directory.hello(info, now)
        self.directory.routes_update(msg.node, msg.version, dict(msg.topics),
                                     frozenset(msg.groups))
        if self.gossip is not None and not self.gossip.peers.address_of(msg.node):
            self.gossip.peers.track(PeerRef(msg.node, msg.mesh_addr), now)

    async def _pull(self, pointer: Pointer) -> bytes:
        cached = self.cache.get(pointer.hash)
        if cached is not None:
            return cached
        if pointer.size > MAX_FRAME_BYTES:
            raise MeshError(f"pointer to {pointer.size} bytes exceeds {MAX_FRAME_BYTES}")
        addr = self._address_of(pointer.source)
        t = self.transport
        assert t is not None
        if pointer.source not in t.peers():
            if addr is None:
                raise MeshError("pointer source has no known address")
            await t.connect(parse_host_port(addr, "pointer source"), expected=pointer.source)
        answer = await self.rpc.call(pointer.source, TAG_POINTER_PULL,
                                     postcard.encode(PullRequest(hash=pointer.hash)), 10.0)
        resp = postcard.decode(PullResponse, answer)
        if resp.payload is None:
            raise MeshError("the source no longer has the payload")
        if pointer_hash(resp.payload) != pointer.hash or len(resp.payload) != pointer.size:
            raise MeshError("pulled payload does not match its pointer")
        self.cache.put(resp.payload)
        return resp.payload

    async def _on_pull(self, peer: bytes, frame: Frame) -> bytes | None:
        req = postcard.decode(PullRequest, frame.payload)
        return postcard.encode(PullResponse(hash=req.hash, payload=self.cache.get(req.hash)))
