"""The gateway's two needs met by the mesh: routes from the member directory, and a
forwarder that carries ops as KafkaOp frames (tag 0x11) to their owner; plus the owner's
side of the carrier, which runs them through an OpExecutor.

An op forwarded for a client (eddy.security.acting) travels as a KafkaOpAs frame (tag 0x12):
the KafkaOpRequest wrapped with the client's principal and address. The owner runs it as
that client, and takes it only from a gateway: a live member of its mesh directory whose
Hello names the gateway role. The mesh's admission (mesh.allowed.nodes, or a membership
token signed with mesh.cluster.public.key) is the trust: an admitted gateway may speak for
any principal, as a broker trusts its own SASL listener.

A node that is a broker and a gateway runs its own ops in-process, without the mesh.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Protocol

from eddy import postcard
from eddy.gateway.executor import OpExecutor
from eddy.gateway.ops import OpError, OpFailed, OpTimeout, OpUnavailable, UnknownOp
from eddy.gateway.routes import TopicRoute
from eddy.mesh.directory import DEAD, Directory, Route
from eddy.mesh.frames import (
    KAFKA_OP_STATUS_FAILED,
    KAFKA_OP_STATUS_OK,
    KAFKA_OP_STATUS_TIMED_OUT,
    KAFKA_OP_STATUS_UNKNOWN_OP,
    TAG_KAFKA_OP,
    TAG_KAFKA_OP_AS,
    Frame,
    FrameError,
    KafkaOpAs,
    KafkaOpRequest,
    KafkaOpResponse,
)
from eddy.security.acting import ClientId, check_client, current_client, session_of
from eddy.security.session import Session
from eddy.telemetry.tracing import span

log = logging.getLogger(__name__)

#: extra time a caller waits beyond the op's own timeout, for the answer to travel back
_MARGIN_S = 2.0


class Caller(Protocol):
    async def call(self, peer: bytes, tag: int, payload: bytes, timeout_s: float) -> bytes: ...


class DirectoryRoutes:
    """gateway.routes.Routes over the mesh's member directory."""

    def __init__(self, directory: Directory) -> None:
        self.directory = directory

    def topic(self, name: str) -> TopicRoute | None:
        r = self.directory.topic(name)
        return None if r is None else TopicRoute(r.node_id, r.partitions, r.available)

    def topics(self) -> dict[str, TopicRoute]:
        return {n: TopicRoute(r.node_id, r.partitions, r.available)
                for n, r in self.directory.topics().items()}

    def group_owner(self, group_id: str) -> int | None:
        return self.directory.group_owner(group_id)

    def broker_nodes(self) -> list[int]:
        return self.directory.broker_nodes()

    def note_topic(self, name: str, route: TopicRoute) -> None:
        self.directory.note_topic(name, Route(route.node_id, route.partitions))

    def forget_topic(self, name: str) -> None:
        self.directory.forget_topic(name)


class MeshForwarder:
    """gateway.routes.Forwarder: an op to a node by Kafka node id, over the mesh (or
    in-process when the node is this one)."""

    def __init__(self, rpc: Caller, directory: Directory, local: OpExecutor | None,
                 timeout_errors: tuple[type[BaseException], ...],
                 unavailable_errors: tuple[type[BaseException], ...]) -> None:
        self.rpc = rpc
        self.directory = directory
        self.local = local
        self._timeouts = timeout_errors
        self._unavailable = unavailable_errors
        self._ids = itertools.count(1)

    async def call(self, node_id: int, op: int, body: bytes, timeout_ms: int) -> bytes:
        client = current_client()
        if self.local is not None and node_id == self.directory.local.kafka_node_id:
            run = (self.local.execute(op, body) if client is None
                   else self.local.execute(op, body, session_of(client)))
            try:
                return await asyncio.wait_for(run, timeout_ms / 1000)
            except TimeoutError:
                raise OpTimeout(f"op 0x{op:02x} on this node timed out") from None
            except OpError as exc:
                raise OpFailed(str(exc)) from None
        key = self.directory.key_of(node_id)
        if key is None:
            raise OpUnavailable(f"node {node_id} is not on the mesh")
        correlation = next(self._ids)
        request = KafkaOpRequest(correlation_id=correlation, op=op, org_id=0,
                                 timeout_ms=timeout_ms, body=body)
        tag, frame = TAG_KAFKA_OP, postcard.encode(request)
        if client is not None:
            tag, frame = TAG_KAFKA_OP_AS, postcard.encode(
                KafkaOpAs(client.principal, client.host, frame))
        try:
            # the frame carries this span's context: the owner's spans continue the trace
            with span("eddy.mesh.kafka-op.call", node_id=node_id, op=op):
                payload = await self.rpc.call(key, tag, frame, timeout_ms / 1000 + _MARGIN_S)
        except self._timeouts:
            raise OpTimeout(f"node {node_id} did not answer op 0x{op:02x} in time") from None
        except self._unavailable as exc:
            raise OpUnavailable(f"node {node_id}: {exc}") from None
        except (FrameError, postcard.PostcardError) as exc:
            raise OpFailed(f"node {node_id} answered op 0x{op:02x} malformed: {exc}") from None
        try:
            answer = postcard.decode(KafkaOpResponse, payload)
        except postcard.PostcardError as exc:
            raise OpFailed(f"node {node_id} answered op 0x{op:02x} malformed: {exc}") from None
        if answer.correlation_id != correlation or answer.op != op:
            raise OpFailed(f"node {node_id} answered another op ({answer.op:#04x}, "
                           f"correlation {answer.correlation_id})")
        if answer.status == KAFKA_OP_STATUS_OK:
            return answer.body
        if answer.status == KAFKA_OP_STATUS_TIMED_OUT:
            raise OpTimeout(f"node {node_id}: {answer.message}")
        raise OpFailed(f"node {node_id}: {answer.message or 'failed'}")


class KafkaOpServer:
    """The owner's side of the carrier: decode, run within the op's timeout, answer.
    ``handle`` serves TAG_KAFKA_OP (no client: the broker sees User:ANONYMOUS), and
    ``handle_as`` TAG_KAFKA_OP_AS (a gateway's client; needs ``directory``)."""

    def __init__(self, executor: OpExecutor | None, directory: Directory | None = None
                 ) -> None:
        self.executor = executor
        self.directory = directory
        self.served = 0
        self.refused = 0

    async def handle(self, peer: bytes, frame: Frame) -> bytes | None:
        return await self._serve(peer, frame.payload, None)

    def is_gateway(self, peer: bytes) -> bool:
        """A live mesh member (admitted by the transport, said Hello) with the gateway
        role."""
        member = None if self.directory is None else self.directory.members.get(peer)
        return (member is not None and member.state != DEAD
                and "gateway" in member.info.roles)

    async def handle_as(self, peer: bytes, frame: Frame) -> bytes | None:
        try:
            wrapped = postcard.decode(KafkaOpAs, frame.payload)
        except postcard.PostcardError as exc:
            log.info("dropped a KafkaOpAs from %s: %s", peer.hex()[:12], exc)
            return None
        refused = check_client(wrapped.principal, wrapped.host)
        if refused is None and not self.is_gateway(peer):
            refused = "the sender is not a gateway on this node's mesh"
        if refused is not None:
            self.refused += 1
            log.warning("refused a KafkaOpAs from %s: %s", peer.hex()[:12], refused)
        return await self._serve(peer, wrapped.request,
                                 session_of(ClientId(wrapped.principal, wrapped.host)),
                                 refused)

    async def _serve(self, peer: bytes, payload: bytes, session: Session | None,
                     refused: str | None = None) -> bytes | None:
        try:
            req = postcard.decode(KafkaOpRequest, payload)
        except postcard.PostcardError as exc:
            log.info("dropped a KafkaOp from %s: %s", peer.hex()[:12], exc)
            return None  # no correlation id to answer under: the stream is reset

        def answer(status: int, body: bytes = b"", message: str = "") -> bytes:
            return postcard.encode(KafkaOpResponse(
                correlation_id=req.correlation_id, op=req.op, status=status, body=body,
                message=message))

        if refused is not None:
            return answer(KAFKA_OP_STATUS_FAILED, message=f"refused: {refused}")
        if self.executor is None:
            return answer(KAFKA_OP_STATUS_FAILED, message="this node has no broker role")
        run = (self.executor.execute(req.op, req.body) if session is None
               else self.executor.execute(req.op, req.body, session))
        try:
            with span("eddy.mesh.kafka-op.serve", op=req.op, peer=peer.hex()[:12]):
                body = await asyncio.wait_for(run, max(req.timeout_ms, 1) / 1000)
        except TimeoutError:
            return answer(KAFKA_OP_STATUS_TIMED_OUT, message=f"op 0x{req.op:02x} timed out after "
                          f"{req.timeout_ms} ms")
        except UnknownOp as exc:
            return answer(KAFKA_OP_STATUS_UNKNOWN_OP, message=str(exc))
        except OpError as exc:
            return answer(KAFKA_OP_STATUS_FAILED, message=str(exc))
        except Exception as exc:  # an op that crashed answers, it does not take the node
            log.exception("op 0x%02x from %s failed", req.op, peer.hex()[:12])
            return answer(KAFKA_OP_STATUS_FAILED, message=f"{type(exc).__name__}: {exc}")
        self.served += 1
        return answer(KAFKA_OP_STATUS_OK, body)
