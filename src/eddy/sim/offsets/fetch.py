"""OffsetFetch in the whole-cluster simulation, as the broker's handler answers it in a
cluster (``handlers.groups._confirmed`` + ``RaftGroupStore.confirm``): a read barrier on the
``offsets`` group first (read-index: a quorum confirms this node still leads, then its
machine applies up to the read's index), then the answer from the coordinator's memory if
the node still serves; NOT_COORDINATOR (with the leader it knows as the hint) when the
barrier fails: leadership lost meanwhile (the driver fails waiting reads with NotLeader on
the soft-state change), or not confirmed within the driver's write timeout (WriteTimeout).

A read the core refuses for now (``ProposalDropped``: no entry of its term committed yet,
too many reads pending) is asked again after the next Ready, as the driver retries it.
``ClusterConfig.offsets_fetch_barrier=False`` is the model before that change (answered
from memory at once): a coordinator cut off from the quorum, still serving until
check-quorum steps it down, then answers offsets older than a commit the new one
acknowledged; the tests run it to show the checks catch that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from eddy.cluster.raft.ready import NotLeader, ProposalDropped
from eddy.protocol.errors import ErrorCode
from eddy.sim.node import FetchRequest, OffsetsReply, Rpc

if TYPE_CHECKING:
    from eddy.sim.offsets.group import OffsetsGroup, Replica

__all__ = ["FETCH_CTX", "PendingFetch", "answer", "ask", "expire", "fail_all", "on_read_state",
           "serve_due", "start"]

#: the read-index contexts of OffsetFetch barriers start with this
FETCH_CTX = b"fetch:"
NOT_COORDINATOR = int(ErrorCode.not_coordinator)


@dataclass(eq=False, slots=True)
class PendingFetch:
    """An OffsetFetch waiting for its read barrier."""

    rpc: Rpc
    body: FetchRequest
    asked_at: int  # node clock: the driver's write timeout runs from here
    asked: bool = False  # the core took the read-index request
    index: int | None = None  # confirmed: answer once the machine applied this index


def answer(group: OffsetsGroup, rep: Replica, rpc: Rpc, body: FetchRequest) -> None:
    """The answer from the node's coordinator as it is now (NOT_COORDINATOR if it does
    not serve)."""
    coordinator = rep.coordinator
    if not rep.serving or coordinator is None:
        group._reply(rep, rpc, OffsetsReply(NOT_COORDINATOR, hint=group._hint(rep)), False)
        return
    r = coordinator.fetch_offsets(body.group, [(body.topic, body.partition)])
    part = r.partitions[0]
    code = int(r.error_code) or int(part.error_code)
    group._reply(rep, rpc, OffsetsReply(code, part.committed_offset), False)


def start(group: OffsetsGroup, rep: Replica, rpc: Rpc, body: FetchRequest) -> None:
    """An OffsetFetch at a serving coordinator: its read barrier is asked for."""
    ctx = FETCH_CTX + f"{rep.node_id}:{rep.fetch_seq}".encode()
    rep.fetch_seq += 1
    rep.fetches[ctx] = PendingFetch(rpc, body, group.sim.node_now(rep.node_id))
    ask(group, rep)


def ask(group: OffsetsGroup, rep: Replica) -> None:
    """Hand the core the reads it has not taken yet (the driver's ``_drain``)."""
    for ctx, pf in list(rep.fetches.items()):
        if pf.asked:
            continue
        try:
            rep.raft.read_index(ctx)
        except NotLeader as exc:
            del rep.fetches[ctx]
            hint = exc.leader_hint if exc.leader_hint != rep.node_id else 0
            group._reply(rep, pf.rpc, OffsetsReply(NOT_COORDINATOR, hint=hint), False)
            continue
        except ProposalDropped:
            continue  # after the next Ready
        pf.asked = True


def on_read_state(rep: Replica, index: int, ctx: bytes) -> None:
    """A confirmed read of ours (one forgotten after its timeout: ignored)."""
    pf = rep.fetches.get(ctx)
    if pf is not None:
        pf.index = index


def serve_due(group: OffsetsGroup, rep: Replica) -> None:
    """After a Ready: the confirmed reads whose index is applied are answered (the
    barrier passed; ``confirm`` then asks whether the node still serves)."""
    due = [ctx for ctx, pf in rep.fetches.items()
           if pf.index is not None and pf.index <= rep.applied]
    for ctx in due:
        pf = rep.fetches.pop(ctx)
        answer(group, rep, pf.rpc, pf.body)


def fail_all(group: OffsetsGroup, rep: Replica) -> None:
    """Leadership lost: every waiting read fails (NotLeader): NOT_COORDINATOR."""
    fetches = list(rep.fetches.values())
    rep.fetches.clear()
    for pf in fetches:
        group._reply(rep, pf.rpc, OffsetsReply(NOT_COORDINATOR, hint=group._hint(rep)), False)


def expire(group: OffsetsGroup, rep: Replica, now: int, timeout_ms: int) -> None:
    """Reads not confirmed and applied within the write timeout fail (WriteTimeout)."""
    late = [ctx for ctx, pf in rep.fetches.items() if now - pf.asked_at >= timeout_ms]
    for ctx in late:
        pf = rep.fetches.pop(ctx)
        group._reply(rep, pf.rpc, OffsetsReply(NOT_COORDINATOR, hint=group._hint(rep)), False)
