"""The registry on a cluster: every write runs on the node leading ``_schemas`` partition 0,
so ids never collide; the other nodes forward theirs to it over the mesh (tag 0x08).

``ForwardingService`` is the ``RegistryService`` with its write operations (register,
deletes, config and mode changes) routed: run here when this node is the write leader (or
outside any cluster), else sent to the leader (``forward_wire``), which runs them through
its own service and answers the result or Confluent's error. Reads stay local. After a
forwarded write succeeds, the follower waits until its own reader has replayed up to the
leader's position, so a read on the same node right after the answer sees the write.

While no leader is known (none in the metadata, or the leader is fenced or refuses because
it no longer leads), a write is retried for up to ``LEADER_WAIT_S`` and then answered with
Confluent's 50004; a leader that cannot be reached is retried as well (the request was never
sent), one that fails after the request went out is answered 50003 (the write may have
happened: the client decides). A node that has just become the leader first waits until its
``_schemas`` replica has committed everything it holds (``ClusterRoute.settle``), then, as
every write does, replays the topic to its end before it picks an id.

``WriteHandler`` is the leader's side, the mesh handler of ``TAG_REGISTRY``: only a
registered broker may ask; a malformed request, a node that runs no registry, is still
starting or does not lead, get an error answer, never an exception. The route of a cluster
(the metadata's leader, the mesh) is ``cluster_route``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from eddy.mesh.frames import Frame
from eddy.registry import forward_wire as wire
from eddy.registry.contract import FORWARDING_ERROR, UNKNOWN_LEADER, RegistryError, SchemaLog
from eddy.registry.requests import SchemaRequest
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState

log = logging.getLogger("eddy.registry")

SCHEMAS_TOPIC = "_schemas"
#: how long a write waits for a leader to be known (then 50004)
LEADER_WAIT_S = 5.0
#: the pause between two looks for a leader
LEADER_POLL_S = 0.1
#: dialling the leader; waiting for its answer (a write waits up to the log's 10 s twice)
CONNECT_TIMEOUT_S = 2.0
CALL_TIMEOUT_S = 25.0
#: how long a new leader waits for its replica's high watermark before it writes
SETTLE_S = 10.0
#: how long a registry waits for the cluster's brokers before it creates _schemas
BROKERS_WAIT_S = 30.0


class LeaderUnreachable(Exception):
    """The leader could not be dialled: the request was not sent."""


class WriteRoute(Protocol):
    """Where writes go: this node's id, the leader's, and a way to ask the leader."""

    @property
    def me(self) -> int: ...

    def leader(self) -> int | None:
        """The write leader's node id; None when none is known."""
        ...

    def is_member(self, peer: bytes) -> bool:
        """Whether a mesh peer is a registered broker of the cluster."""
        ...

    async def settle(self) -> None:
        """Return once this node, as the leader, may write (raise ``RegistryError``)."""
        ...

    async def call(self, leader: int, payload: bytes) -> bytes:
        """The leader's answer to ``payload``: ``LeaderUnreachable`` when it cannot be
        dialled, ``RegistryError`` (50003) when the call fails once sent."""
        ...


def unknown_leader(message: str) -> RegistryError:
    return RegistryError(500, UNKNOWN_LEADER, message)


def forwarding_error(message: str) -> RegistryError:
    return RegistryError(500, FORWARDING_ERROR, message)


class ForwardingService(RegistryService):
    """The registry service with its writes run by the write leader."""

    def __init__(self, log: SchemaLog, state: SchemaState, route: WriteRoute | None,
                 applied_offset: Callable[[], int], **options: Any) -> None:
        super().__init__(log, state, **options)
        self.route = route
        #: the ``_schemas`` position this node's state has applied (the reader's)
        self.applied_offset = applied_offset
        self.forwarded = 0  # writes sent to the leader (tests, diagnostics)

    # -- the write operations --------------------------------------------------------------------

    async def register(self, subject: str, request: SchemaRequest, *,
                       normalize: bool = False) -> dict[str, Any]:
        def local() -> Awaitable[dict[str, Any]]:
            return RegistryService.register(self, subject, request, normalize=normalize)
        if self.route is None:
            return await local()
        op = wire.WriteRequest(wire.OP_REGISTER, subject, None, normalize, False, False,
                               wire.schema_request_json(request))
        result: dict[str, Any] = await self._write(op, local)
        return result

    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        def local() -> Awaitable[list[int]]:
            return RegistryService.delete_subject(self, subject, permanent)
        op = wire.WriteRequest(wire.OP_DELETE_SUBJECT, subject, None, False, permanent, False,
                               b"")
        result: list[int] = await self._write(op, local)
        return result

    async def delete_version(self, subject: str, version: str | int,
                             permanent: bool = False) -> int:
        def local() -> Awaitable[int]:
            return RegistryService.delete_version(self, subject, version, permanent)
        op = wire.WriteRequest(wire.OP_DELETE_VERSION, subject, str(version), False,
                               permanent, False, b"")
        result: int = await self._write(op, local)
        return result

    async def set_config(self, subject: str | None, body: object) -> dict[str, Any]:
        def local() -> Awaitable[dict[str, Any]]:
            return RegistryService.set_config(self, subject, body)
        if self.route is None:
            return await local()
        op = wire.WriteRequest(wire.OP_SET_CONFIG, subject, None, False, False, False,
                               _body_json(body))
        result: dict[str, Any] = await self._write(op, local)
        return result

    async def delete_config(self, subject: str | None = None) -> dict[str, Any]:
        def local() -> Awaitable[dict[str, Any]]:
            return RegistryService.delete_config(self, subject)
        op = wire.WriteRequest(wire.OP_DELETE_CONFIG, subject, None, False, False, False, b"")
        result: dict[str, Any] = await self._write(op, local)
        return result

    async def set_mode(self, subject: str | None, body: object,
                       force: bool = False) -> dict[str, Any]:
        def local() -> Awaitable[dict[str, Any]]:
            return RegistryService.set_mode(self, subject, body, force)
        if self.route is None:
            return await local()
        op = wire.WriteRequest(wire.OP_SET_MODE, subject, None, False, False, force,
                               _body_json(body))
        result: dict[str, Any] = await self._write(op, local)
        return result

    async def delete_mode(self, subject: str | None = None) -> dict[str, Any]:
        def local() -> Awaitable[dict[str, Any]]:
            return RegistryService.delete_mode(self, subject)
        op = wire.WriteRequest(wire.OP_DELETE_MODE, subject, None, False, False, False, b"")
        result: dict[str, Any] = await self._write(op, local)
        return result

    # -- routing ---------------------------------------------------------------------------------

    async def _write(self, request: wire.WriteRequest,
                     local: Callable[[], Awaitable[Any]]) -> Any:
        route = self.route
        if route is None:
            return await local()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADER_WAIT_S
        while True:
            leader = route.leader()
            if leader == route.me:
                await route.settle()
                return await local()
            if leader is None:
                failure = unknown_leader(f"Unknown leader: no node leads {SCHEMAS_TOPIC}")
            else:
                try:
                    return await self._forward(route, leader, request)
                except LeaderUnreachable as exc:
                    failure = forwarding_error(f"Error while forwarding the request to the "
                                               f"leader (node {leader}): {exc}")
                except RegistryError as exc:
                    if exc.code != UNKNOWN_LEADER:
                        raise
                    failure = exc  # the leader did not run it: look again
            if loop.time() >= deadline:
                raise failure
            await asyncio.sleep(LEADER_POLL_S)

    async def _forward(self, route: WriteRoute, leader: int,
                       request: wire.WriteRequest) -> Any:
        self.forwarded += 1
        data = await route.call(leader, wire.encode_request(request))
        try:
            answer = wire.decode_answer(data)
            if answer.error_code != 0:
                raise RegistryError(answer.status, answer.error_code, answer.message)
            result = wire.check_result(request.op,
                                       wire.load_json(answer.body, "WriteAnswer.body"))
        except wire.WireError as exc:
            raise forwarding_error(f"Error while forwarding the request to the leader (node "
                                   f"{leader}): {exc}") from None
        await self._catch_up(answer.offset)
        return result

    async def _catch_up(self, offset: int) -> None:
        """Wait (a few syncs at most) until this node's state has applied the records before
        ``offset``: the write succeeded, so a slow reader is logged, not reported."""
        for _ in range(3):
            if self.applied_offset() >= offset:
                return
            try:
                await self._log.sync()
            except RegistryError as exc:
                log.warning("registry: catching up with the leader's write: %s", exc.message)
                return

    async def run_local(self, request: wire.WriteRequest) -> Any:
        """A forwarded write, run here as if asked here (the body parsed again with the HTTP
        layer's rules). Raises ``RegistryError`` or ``wire.WireError``."""
        op, subject = request.op, request.subject
        if op == wire.OP_REGISTER:
            assert subject is not None  # decode_request checked it
            body = SchemaRequest.from_body(wire.load_json(request.body, "WriteRequest.body"))
            return await RegistryService.register(self, subject, body,
                                                  normalize=request.normalize)
        if op == wire.OP_DELETE_SUBJECT:
            assert subject is not None
            return await RegistryService.delete_subject(self, subject, request.permanent)
        if op == wire.OP_DELETE_VERSION:
            assert subject is not None and request.version is not None
            return await RegistryService.delete_version(self, subject, request.version,
                                                        request.permanent)
        if op == wire.OP_SET_CONFIG:
            return await RegistryService.set_config(
                self, subject, wire.load_json(request.body, "WriteRequest.body"))
        if op == wire.OP_DELETE_CONFIG:
            return await RegistryService.delete_config(self, subject)
        if op == wire.OP_SET_MODE:
            return await RegistryService.set_mode(
                self, subject, wire.load_json(request.body, "WriteRequest.body"), request.force)
        if op == wire.OP_DELETE_MODE:
            return await RegistryService.delete_mode(self, subject)
        raise wire.WireError(f"WriteRequest.op: unknown operation {op}")


def _body_json(body: object) -> bytes:
    try:
        return wire.dump_json(body)
    except wire.WireError as exc:
        raise RegistryError(400, 400, f"Cannot forward the request body: {exc}") from None


class WriteHandler:
    """The leader's side: the mesh handler of ``TAG_REGISTRY``."""

    def __init__(self, route: WriteRoute, service: ForwardingService | None,
                 ready: Callable[[], bool]) -> None:
        self.route = route
        self.service = service  # None: this node runs no registry
        self.ready = ready

    async def handle(self, peer: bytes, frame: Frame) -> bytes | None:
        try:
            return await self._answer(peer, frame.payload)
        except Exception:  # a bug must not take the node down: the asker gets a 500
            log.exception("registry: a forwarded write failed")
            return wire.error_answer(500, 500, "Internal Server Error")

    async def _answer(self, peer: bytes, payload: bytes) -> bytes:
        if not self.route.is_member(peer):
            return wire.error_answer(403, 40301, "Forwarded writes are taken from the "
                                     "cluster's registered brokers only")
        try:
            request = wire.decode_request(payload)
        except wire.WireError as exc:
            return wire.error_answer(400, FORWARDING_ERROR, f"Bad forwarded request: {exc}")
        service = self.service
        if service is None:
            return wire.error_answer(500, UNKNOWN_LEADER, f"Node {self.route.me} leads "
                                     f"{SCHEMAS_TOPIC} but runs no schema registry "
                                     "(registry.listener)")
        if not self.ready():
            return wire.error_answer(500, UNKNOWN_LEADER, "Schema registry is starting: the "
                                     f"{SCHEMAS_TOPIC} topic is not read yet")
        leader = self.route.leader()
        if leader != self.route.me:
            return wire.error_answer(500, UNKNOWN_LEADER, f"Node {self.route.me} is not the "
                                     f"leader: {SCHEMAS_TOPIC} is led by node {leader}")
        try:
            await self.route.settle()
            result = await service.run_local(request)
        except RegistryError as exc:
            return wire.error_answer(exc.status, exc.code, exc.message,
                                     service.applied_offset())
        except wire.WireError as exc:
            return wire.error_answer(400, FORWARDING_ERROR, f"Bad forwarded request: {exc}")
        return wire.ok_answer(result, service.applied_offset())
