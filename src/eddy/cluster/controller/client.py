"""How a node reaches the controller: ``ControllerClient`` (one request, redirected on
NOT_CONTROLLER, retried on an unreachable node until a deadline) and ``BrokerAgent`` (the
broker's registration and heartbeats, seed 004's broker side).

The controller is wherever the ``metadata`` group's leader is: the client asks the node it
last heard is the controller, else the local Raft group's leader, else each voter of
``controller.quorum.voters`` in turn. A voter is dialled at its quorum address when the
mesh directory does not know it yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from eddy import postcard
from eddy.cluster.controller.rpc import (
    ControlledShutdownRequest,
    ControllerReply,
    ControllerRequest,
    HeartbeatRequest,
    RegisterRequest,
    decode_reply,
)
from eddy.config_parse import parse_host_port
from eddy.mesh.frames import TAG_CONTROLLER, FrameError
from eddy.mesh.quic.transport import MeshError
from eddy.mesh.service import MeshService
from eddy.metadata import MetadataState
from eddy.postcard import PostcardError
from eddy.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

RETRY_PAUSE_S = 0.05
#: pause before a controlled shutdown asks again for partitions it could not move
SHUTDOWN_RETRY_S = 0.2
#: the longest one attempt waits for a node: a controller answers in a few ms (one Raft
#: round and fsync); a node that died holds its QUIC connection until the idle timeout, so
#: waiting longer on it only delays finding the new controller
ATTEMPT_TIMEOUT_S = 2.0


class ControllerUnavailable(Exception):
    """No controller answered before the deadline."""


class LocalController(Protocol):
    async def answer(self, peer: bytes, request: ControllerRequest) -> ControllerReply: ...


class ControllerClient:
    def __init__(self, node_id: int, mesh: MeshService, voters: dict[int, str], *,
                 local: LocalController | None = None,
                 leader_hint: Callable[[], int] | None = None) -> None:
        self.node_id = node_id
        self.mesh = mesh
        self.voters = dict(voters)
        self.local = local
        self.leader_hint = leader_hint
        self.hint = 0
        self._order = sorted(voters)
        self._next = 0
        self._redirect = 0  # the node a NOT_CONTROLLER answer named, asked next
        self._dialled: dict[int, bytes] = {}

    def _target(self) -> int:
        # where the last answer sent us; else a voter's own Raft group knows the leader best
        # (it moves on at once after an election); then the last controller heard of; then
        # each voter in turn
        if self._redirect > 0:
            target, self._redirect = self._redirect, 0
            return target
        if self.leader_hint is not None and (leader := self.leader_hint()) > 0:
            return leader
        if self.hint > 0:
            return self.hint
        target = self._order[self._next % len(self._order)]
        self._next += 1
        return target

    async def _key_for(self, node_id: int, timeout_s: float) -> bytes:
        key = self.mesh.directory.key_of(node_id) or self._dialled.get(node_id)
        if key is not None:
            return key
        addr = self.voters.get(node_id)
        if addr is None or self.mesh.transport is None:
            raise MeshError(f"node {node_id} is not on the mesh yet")
        key = await self.mesh.transport.connect(parse_host_port(addr, "controller address"),
                                                timeout_s=timeout_s)
        self._dialled[node_id] = key
        return key

    async def _ask(self, target: int, request: ControllerRequest, timeout_s: float
                   ) -> ControllerReply:
        if target == self.node_id and self.local is not None:
            return await self.local.answer(self.mesh.key, request)
        key = await self._key_for(target, timeout_s)
        payload = await self.mesh.rpc.call(key, TAG_CONTROLLER, postcard.encode(request),
                                           timeout_s)
        return decode_reply(payload)

    async def call(self, request: ControllerRequest, timeout_s: float) -> ControllerReply:
        """The controller's answer to ``request``; NOT_CONTROLLER only if no controller was
        found in time (``ControllerUnavailable`` if none answered at all)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last: ControllerReply | None = None
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                if last is not None:
                    return last
                raise ControllerUnavailable(f"no controller answered within {timeout_s:.1f} s")
            target = self._target()
            try:
                answer = await self._ask(target, request, min(remaining, ATTEMPT_TIMEOUT_S))
            except (MeshError, TimeoutError, OSError, PostcardError, FrameError) as exc:
                log.debug("controller request to node %d failed: %s", target, exc)
                self.hint = 0
                self._dialled.pop(target, None)
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            if answer.error_code != ErrorCode.not_controller:
                self.hint = target
                return answer
            last = answer
            named = answer.controller if answer.controller not in (target, -1) else 0
            self.hint = self._redirect = named
            if named == 0:
                await asyncio.sleep(RETRY_PAUSE_S)  # an election is under way


class BrokerAgent:
    """Registers this broker, then heartbeats every ``interval_ms``. ``hosted()`` gives the
    topic ids held here; ``on_delete`` gets storage GC's orders.

    ``registered`` is set by every heartbeat the controller answers positively (the
    controller knows this broker in its epoch), whatever happened before it: a heartbeat
    that found no controller right after the registration (a controller change) must not
    leave it unset while later ones succeed. A heartbeat answered "unknown broker" or
    "stale epoch" (a controller whose state lost this registration) clears it, and the
    broker registers again at once, not a heartbeat interval later. A new metadata leader
    (``leader_changed``: a new controller) is sent the next heartbeat at once: it gives
    the previous controller's broker a short grace only (a suspect), which must not run out
    while that broker waits for its next interval.

    ``caught_up`` (KRaft's rule for a starting broker): this node's replica of the metadata
    has applied this process's registration record. It was committed after everything the
    controller had committed when it took the registration, so the replica has caught up
    with the controller as of this process's start; before that it may be a stale replay
    of the local log (changes the last controller could not commit while this node was
    down), on which the broker must neither lead nor follow a partition. Once true it
    stays true for this process (a later re-registration does not take partitions away).
    ``on_registered`` is called when a registration is accepted (the replica may already
    hold its record)."""

    def __init__(self, client: ControllerClient, node_id: int, rack: str | None,
                 kafka_addr: str, mesh_addr: str, interval_ms: int,
                 hosted: Callable[[], Iterable[bytes]],
                 on_delete: Callable[[list[bytes]], None]) -> None:
        self.client = client
        self.node_id = node_id
        self.rack = rack
        self.kafka_addr = kafka_addr
        self.mesh_addr = mesh_addr
        self.interval_s = interval_ms / 1000
        self.hosted = hosted
        self.on_delete = on_delete
        self.epoch = 0
        self.fenced = True
        self.offsets_leader = -1  # the group coordinator, as the controller last said
        self.registered = asyncio.Event()
        self.on_registered: Callable[[], None] | None = None
        self._caught_up = False
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._leader = 0  # the metadata leader last heard of (0: none yet)

    def wake(self) -> None:
        """Heartbeat (or register) now instead of at the end of the interval."""
        self._wake.set()

    def leader_changed(self, leader: int) -> None:
        """The metadata group's leader as this node's Raft group sees it (0: unknown): a
        new one is a new controller, heartbeated at once."""
        if leader and leader != self._leader:
            self._leader = leader
            self.wake()

    def caught_up(self, state: MetadataState) -> bool:
        """Whether ``state`` (this node's replica) holds this process's registration (see
        the class's docs); latched once true."""
        if self._caught_up:
            return True
        if self.epoch == 0:
            return False
        record = state.broker(self.node_id)
        if record is None or record.epoch < self.epoch:
            return False
        self._caught_up = True
        log.info("broker %d: metadata caught up with the controller (registration epoch "
                 "%d): leading and following partitions from now on", self.node_id,
                 self.epoch)
        return True

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-agent")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                if self.epoch == 0:
                    await self._register()
                elif not await self._heartbeat():
                    continue  # the controller lost this registration: register now
            except ControllerUnavailable as exc:
                log.debug("broker %d: %s", self.node_id, exc)
            except Exception:
                log.exception("broker %d: heartbeat failed; retrying", self.node_id)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s if self.epoch
                                           else RETRY_PAUSE_S * 4):
                    await self._wake.wait()
            self._wake.clear()

    async def controlled_shutdown(self, timeout_s: float) -> int | None:
        """Stop heartbeating and ask the controller to move this broker's leaderships away
        (ControlledShutdownRequest), again while that leaves fewer partitions here each
        time, within ``timeout_s``. The partitions still led here (None: not registered,
        or the controller refused). Raises ``ControllerUnavailable``."""
        await self.stop()  # a heartbeat must not unfence or renew this broker meanwhile
        if self.epoch == 0:
            return None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        left: int | None = None
        while True:
            answer = await self.client.call(ControlledShutdownRequest(self.node_id,
                                                                      self.epoch),
                                            max(deadline - loop.time(), 0.01))
            if answer.error_code != ErrorCode.none:
                log.warning("broker %d: controlled shutdown refused: %s", self.node_id,
                            answer.message)
                return None
            if answer.value == 0 or (left is not None and answer.value >= left) \
                    or loop.time() + SHUTDOWN_RETRY_S >= deadline:
                return answer.value
            left = answer.value
            await asyncio.sleep(SHUTDOWN_RETRY_S)

    async def _register(self) -> None:
        answer = await self.client.call(
            RegisterRequest(self.node_id, self.rack, self.kafka_addr, self.mesh_addr),
            self.interval_s * 4)
        if answer.error_code == ErrorCode.none:
            self.epoch = answer.value
            log.info("broker %d registered with controller %d, epoch %d", self.node_id,
                     answer.controller, self.epoch)
            if self.on_registered is not None:
                self.on_registered()
            await self._heartbeat()  # sets ``registered`` once the controller answers it
        elif answer.error_code != ErrorCode.not_controller:
            log.warning("broker %d: registration refused: %s", self.node_id, answer.message)

    async def _heartbeat(self) -> bool:
        """One heartbeat; False when the controller no longer knows this registration
        (``epoch`` is then 0 and ``registered`` cleared)."""
        hosted = tuple(self.hosted())
        answer = await self.client.call(HeartbeatRequest(self.node_id, self.epoch, hosted),
                                        self.interval_s * 4)
        if answer.error_code in (ErrorCode.stale_broker_epoch,
                                 ErrorCode.broker_id_not_registered):
            log.info("broker %d: %s; registering again", self.node_id, answer.message)
            self.epoch = 0
            self.registered.clear()
            return False
        if answer.error_code != ErrorCode.none:
            return True  # no controller yet (NOT_CONTROLLER): the next heartbeat tries again
        self.registered.set()
        self.fenced = answer.fenced
        self.offsets_leader = answer.offsets_leader
        if answer.delete_topics:
            self.on_delete(list(answer.delete_topics))
        return True
