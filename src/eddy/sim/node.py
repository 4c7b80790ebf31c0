"""The whole-cluster simulation's per-node pieces: a node's replica of the ``metadata``
state with the ``Controller`` that runs on it while it leads (``MetaNode``), the envelopes
that cross the simulated network between brokers, clients and controllers (``Rpc``), and a
join of several proposals (``Batch``).

A ``MetaNode`` lives as long as one incarnation of its node: a crash drops it (what was in
memory), a restart builds a new one from the node's stored snapshot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from eddy.cluster.controller import Controller
from eddy.metadata import ApplyResult, MetadataState

#: a proposal's outcome: ``(result, known)``. ``result`` is the state machine's answer when
#: the entry was applied; None when it was not: ``known`` then says it never will be (its
#: index went to another entry) rather than that nobody can tell (a snapshot covered it)
Outcome = tuple[ApplyResult | None, bool]
OutcomeCallback = Callable[[ApplyResult | None, bool], None]

#: client ids start here (node ids are 1..nodes)
CLIENT_BASE = 1000
#: the topic whose config keys are the key-value workload's registers
KV_TOPIC = "kv"


def node_key(node_id: int) -> bytes:
    """Node ``node_id``'s mesh identity in the simulation (its Ed25519 key stand-in)."""
    return bytes([node_id % 256]) * 32


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """A linearizable read of one key-value register (a config of ``KV_TOPIC``), served by
    the metadata leader through read-index (simulation only: no such RPC exists)."""

    key: str


@dataclass(frozen=True, slots=True)
class ReadReply:
    ok: bool
    value: str | None = None
    hint: int = 0


@dataclass(frozen=True, slots=True)
class AlterIsrRequest:
    """A partition leader adding caught-up replicas back to the ISR (Kafka's
    AlterPartition; the controller proposes it as ``ChangeIsr``). Simulation only: the
    project has no RPC for it yet."""

    topic: str
    partition: int
    isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """OffsetCommit of one partition for a "simple" group (generation -1, no member id),
    sent to the node a client believes coordinates groups (the ``offsets`` group's
    leader). The simulation skips the Kafka codec: the broker handler is a thin
    translation, the coordinator behind it is the real one."""

    group: str
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """OffsetFetch of one partition."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetsReply:
    """A CommitRequest's or FetchRequest's answer: Kafka's error code, the fetched offset
    (-1: none committed) and, with NOT_COORDINATOR, the offsets group's leader as the
    answering node knows it (what FindCoordinator would say; 0 unknown)."""

    error: int
    offset: int = -1
    hint: int = 0


Body = (bytes | ReadRequest | ReadReply | AlterIsrRequest | CommitRequest | FetchRequest
        | OffsetsReply)


@dataclass(frozen=True, slots=True)
class Rpc:
    """One message of the RPC network. Requests carry a postcard ``ControllerRequest`` (or a
    simulation-only request), replies a postcard ``ControllerReply`` (or a ``ReadReply``).
    ``peer`` is the mesh key the request arrives from (a client's requests are forwarded
    by a broker, so they carry its key). ``proposed``: the controller put the request's
    command in the log before it failed (its outcome is then unknown to the client)."""

    src: int
    dst: int
    req_id: int
    body: Body
    reply: bool = False
    peer: bytes = b""
    proposed: bool = False


class Batch:
    """Waits for ``count`` outcomes, then calls ``done`` with them in order."""

    def __init__(self, count: int, done: Callable[[list[Outcome]], None]) -> None:
        self.results: list[Outcome] = [(None, True)] * count
        self.left = count
        self.done = done
        if count == 0:
            done([])

    def part(self, k: int) -> OutcomeCallback:
        def cb(result: ApplyResult | None, known: bool) -> None:
            self.results[k] = (result, known)
            self.left -= 1
            if self.left == 0:
                self.done(self.results)
        return cb


@dataclass(eq=False)
class MetaNode:
    """One incarnation of a node: its metadata replica, its controller, and what the
    controller service (``ControllerService``'s job) and the Raft driver keep in memory."""

    node_id: int
    incarnation: int
    state: MetadataState
    controller: Controller
    applied: int = 0  # the index ``state`` reflects
    last_leader: int = 0  # the last leader this node heard of (the next one's suspect)
    activating: bool = False  # leader, waiting for its read barrier
    suspect: int = 0
    barrier_ctx: bytes | None = None
    active_term: int = 0
    tick_gen: int = 0  # the controller tick chain that is current
    busy: int = 0  # proposals of the last controller tick still unresolved
    alive: bool = True
    #: index -> (term proposed in, callback): a proposal waiting for its entry
    waiting: dict[int, tuple[int, OutcomeCallback]] = field(default_factory=dict)
    #: read ctx -> (serve, fail): a read-index request waiting for its ReadState
    reads: dict[bytes, tuple[Callable[[], None], Callable[[], None]]] = field(
        default_factory=dict)
    #: (index, ctx): confirmed reads waiting for ``applied`` to reach ``index``
    ready_reads: list[tuple[int, bytes]] = field(default_factory=list)
    #: callbacks to run once the current Ready is advanced (never inside a Ready)
    deferred: list[Callable[[], None]] = field(default_factory=list)

    def resolve(self, index: int, term: int, result: ApplyResult | None) -> None:
        """The entry at ``index`` (of ``term``) was applied with ``result``."""
        waiting = self.waiting.pop(index, None)
        if waiting is None:
            return
        proposed_term, cb = waiting
        if proposed_term == term:
            self.deferred.append(partial(cb, result, True))
        else:  # another leader's entry took the index: ours never applies
            self.deferred.append(partial(cb, None, True))

    def covered_by_snapshot(self, index: int) -> None:
        """A snapshot from the leader replaced the log up to ``index``: the proposals it
        covers have an unknown outcome (as the Raft driver says)."""
        for i in [i for i in self.waiting if i <= index]:
            _, cb = self.waiting.pop(i)
            self.deferred.append(partial(cb, None, False))

    def fail_reads(self) -> None:
        """This node stopped leading: its pending reads fail (they need the same leader)."""
        fails = [fail for _, fail in self.reads.values()]
        self.reads.clear()
        self.ready_reads.clear()
        self.barrier_ctx = None
        for fail in fails:
            self.deferred.append(fail)

    def take_deferred(self) -> list[Callable[[], None]]:
        out, self.deferred = self.deferred, []
        return out

    def reads_due(self) -> list[Callable[[], None]]:
        """The confirmed reads whose index is applied now."""
        due = [(i, ctx) for i, ctx in self.ready_reads if i <= self.applied]
        if not due:
            return []
        self.ready_reads = [(i, ctx) for i, ctx in self.ready_reads if i > self.applied]
        out = []
        for _, ctx in due:
            pair = self.reads.pop(ctx, None)
            if pair is not None:
                out.append(pair[0])
        return out
