"""Gossip wire messages (HyParView, Plumtree, seed 002 ping/pong) and the cores' local outputs.

Wire messages are frozen dataclasses carrying postcard markers (``eddy.postcard``); the
``GossipMessage`` union is the one enum gossip puts on the wire (``VARIANT`` = discriminant).
The sender's node id is never in a message: the transport authenticates it (Ed25519 key of
the QUIC peer) and hands it to ``receive(sender, msg, now_ms)``. Addresses travel only in the
messages that introduce a peer (``PeerRef``) or announce the sender's own listen address.

``validate`` checks what postcard cannot: counts, lengths, printable addresses. The codec has
already checked every length against the bytes present; ``validate`` bounds what the cores
keep, and raises ``GossipMessageError`` naming the field.

Local outputs (never on the wire): events for the application (``NeighborUp``, ``Delivered``,
``PeerDead``...) and connection intents for the transport (``Connect``, ``Disconnect``).
"""

from dataclasses import dataclass
from typing import ClassVar

from eddy.postcard import U8, U16, U64, Fixed32

# -- limits a peer's message must respect ------------------------------------------------------
MAX_ADDR_LEN = 255
MAX_TOPIC_LEN = 255
MAX_TOPICS = 64
MAX_PEER_LIST = 64  # Shuffle / ShuffleReply / Pong peer exchange
MAX_IHAVE_ENTRIES = 512
MAX_GRAFT_IDS = 512
MAX_PAYLOAD = 1 << 20  # gossip carries small control deltas; larger ones go by pointer gossip
MAX_TTL = 32


class GossipMessageError(ValueError):
    """A peer's message breaks a limit; ``field`` names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PeerRef:
    """A peer's identity and the address it listens on."""

    node_id: Fixed32
    addr: str


# -- HyParView ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Join:
    """A newcomer asks the contact to take it into its active view (answer: NeighborReply)."""

    VARIANT: ClassVar[int] = 0
    addr: str  # the sender's listen address


@dataclass(frozen=True, slots=True)
class ForwardJoin:
    """Random walk announcing ``new``; ends with a node asking ``new`` to be its neighbour."""

    VARIANT: ClassVar[int] = 1
    new: PeerRef
    ttl: U8


@dataclass(frozen=True, slots=True)
class Neighbor:
    """Ask to enter the receiver's active view; high priority must be accepted."""

    VARIANT: ClassVar[int] = 2
    addr: str
    high_priority: bool


@dataclass(frozen=True, slots=True)
class NeighborReply:
    """Answer to Join or Neighbor."""

    VARIANT: ClassVar[int] = 3
    accepted: bool


@dataclass(frozen=True, slots=True)
class Disconnect:
    """The sender dropped the receiver from its active view (``alive``: keep it as passive)."""

    VARIANT: ClassVar[int] = 4
    alive: bool


@dataclass(frozen=True, slots=True)
class Shuffle:
    """Random walk carrying a sample of the origin's views; the last hop replies to origin."""

    VARIANT: ClassVar[int] = 5
    origin: PeerRef
    ttl: U8
    peers: tuple[PeerRef, ...]


@dataclass(frozen=True, slots=True)
class ShuffleReply:
    VARIANT: ClassVar[int] = 6
    peers: tuple[PeerRef, ...]


# -- Plumtree ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Gossip:
    """A broadcast payload (eager push, or the answer to a Graft). ``round`` = hops so far."""

    VARIANT: ClassVar[int] = 7
    msg_id: Fixed32
    origin: Fixed32
    round: U16
    topic: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class IHaveEntry:
    msg_id: Fixed32
    round: U16
    topic: str


@dataclass(frozen=True, slots=True)
class IHave:
    """Lazy push: ids the sender can serve (batched per tick)."""

    VARIANT: ClassVar[int] = 8
    entries: tuple[IHaveEntry, ...]


@dataclass(frozen=True, slots=True)
class Graft:
    """Make the link eager again and send these messages (IWANT); may be empty."""

    VARIANT: ClassVar[int] = 9
    msg_ids: tuple[Fixed32, ...]


@dataclass(frozen=True, slots=True)
class Prune:
    """The receiver sent a duplicate: move the link to lazy push."""

    VARIANT: ClassVar[int] = 10


@dataclass(frozen=True, slots=True)
class Interest:
    """The topics the sender wants payloads of (seed 002's send-side filter)."""

    VARIANT: ClassVar[int] = 11
    all_topics: bool
    topics: tuple[str, ...]


# -- seed 002 liveness and peer exchange --------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Ping:
    """``active``: the receiver is in the sender's active view (symmetry check)."""

    VARIANT: ClassVar[int] = 12
    nonce: U64
    addr: str
    active: bool


@dataclass(frozen=True, slots=True)
class Pong:
    """Answer to Ping; ``peers`` = peers the sender talks to (peer exchange)."""

    VARIANT: ClassVar[int] = 13
    nonce: U64
    addr: str
    active: bool
    peers: tuple[PeerRef, ...]


GossipMessage = (
    Join | ForwardJoin | Neighbor | NeighborReply | Disconnect | Shuffle | ShuffleReply
    | Gossip | IHave | Graft | Prune | Interest | Ping | Pong
)
HyParViewMessage = (
    Join | ForwardJoin | Neighbor | NeighborReply | Disconnect | Shuffle | ShuffleReply
)
PlumtreeMessage = Gossip | IHave | Graft | Prune | Interest


# -- validation --------------------------------------------------------------------------------
def _check_addr(field: str, addr: str) -> None:
    if not addr or len(addr) > MAX_ADDR_LEN or not addr.isprintable():
        raise GossipMessageError(field, f"address must be 1..{MAX_ADDR_LEN} printable chars")


def _check_topic(field: str, topic: str) -> None:
    if len(topic) > MAX_TOPIC_LEN or not topic.isprintable():
        raise GossipMessageError(field, f"topic must be 0..{MAX_TOPIC_LEN} printable chars")


def _check_count(field: str, n: int, limit: int) -> None:
    if n > limit:
        raise GossipMessageError(field, f"{n} entries > limit {limit}")


def _check_peers(field: str, peers: tuple[PeerRef, ...]) -> None:
    _check_count(field, len(peers), MAX_PEER_LIST)
    for i, ref in enumerate(peers):
        _check_ref(f"{field}[{i}]", ref)


def _check_ref(field: str, ref: PeerRef) -> None:
    if len(ref.node_id) != 32:
        raise GossipMessageError(f"{field}.node_id", "must be 32 bytes")
    _check_addr(f"{field}.addr", ref.addr)


def _check_id(field: str, value: bytes) -> None:
    if len(value) != 32:
        raise GossipMessageError(field, "must be 32 bytes")


def validate(msg: GossipMessage) -> None:
    """Raise GossipMessageError if a decoded message breaks a limit the cores rely on."""
    name = type(msg).__name__
    if isinstance(msg, Join | Neighbor | Ping):
        _check_addr(f"{name}.addr", msg.addr)
    elif isinstance(msg, ForwardJoin):
        _check_ref("ForwardJoin.new", msg.new)
        if msg.ttl > MAX_TTL:
            raise GossipMessageError("ForwardJoin.ttl", f"{msg.ttl} > {MAX_TTL}")
    elif isinstance(msg, Shuffle):
        _check_ref("Shuffle.origin", msg.origin)
        if msg.ttl > MAX_TTL:
            raise GossipMessageError("Shuffle.ttl", f"{msg.ttl} > {MAX_TTL}")
        _check_peers("Shuffle.peers", msg.peers)
    elif isinstance(msg, ShuffleReply):
        _check_peers("ShuffleReply.peers", msg.peers)
    elif isinstance(msg, Pong):
        _check_addr("Pong.addr", msg.addr)
        _check_peers("Pong.peers", msg.peers)
    elif isinstance(msg, Gossip):
        _check_id("Gossip.msg_id", msg.msg_id)
        _check_id("Gossip.origin", msg.origin)
        _check_topic("Gossip.topic", msg.topic)
        if len(msg.payload) > MAX_PAYLOAD:
            raise GossipMessageError("Gossip.payload", f"{len(msg.payload)} > {MAX_PAYLOAD}")
    elif isinstance(msg, IHave):
        _check_count("IHave.entries", len(msg.entries), MAX_IHAVE_ENTRIES)
        for i, entry in enumerate(msg.entries):
            _check_id(f"IHave.entries[{i}].msg_id", entry.msg_id)
            _check_topic(f"IHave.entries[{i}].topic", entry.topic)
    elif isinstance(msg, Graft):
        _check_count("Graft.msg_ids", len(msg.msg_ids), MAX_GRAFT_IDS)
        for i, mid in enumerate(msg.msg_ids):
            _check_id(f"Graft.msg_ids[{i}]", mid)
    elif isinstance(msg, Interest):
        _check_count("Interest.topics", len(msg.topics), MAX_TOPICS)
        for i, topic in enumerate(msg.topics):
            _check_topic(f"Interest.topics[{i}]", topic)


# -- local outputs: events for the application --------------------------------------------------
@dataclass(frozen=True, slots=True)
class NeighborUp:
    node_id: bytes


@dataclass(frozen=True, slots=True)
class NeighborDown:
    node_id: bytes


@dataclass(frozen=True, slots=True)
class Delivered:
    """A broadcast reached this node for the first time (exactly once per msg_id in the TTL)."""

    msg_id: bytes
    payload: bytes
    topic: str
    origin: bytes
    sender: bytes  # the neighbour it came from
    round: int


@dataclass(frozen=True, slots=True)
class PeerDead:
    """MAX_PING_UNACKED pings went unanswered: removed from the peer table."""

    node_id: bytes


@dataclass(frozen=True, slots=True)
class IdentityMismatch:
    """A PONG from ``addr`` came from ``got`` but the address belongs to ``expected``."""

    addr: str
    expected: bytes
    got: bytes


@dataclass(frozen=True, slots=True)
class PeerDiscovered:
    """A peer learned by peer exchange answered its liveness PING."""

    peer: PeerRef


@dataclass(frozen=True, slots=True)
class SeedReached:
    """A seed address answered; its identity is now known."""

    peer: PeerRef


@dataclass(frozen=True, slots=True)
class PeerRevived:
    """A peer we had declared dead (or a lost seed) answered a probe: a partition healed or
    the peer restarted."""

    peer: PeerRef


GossipEvent = (
    NeighborUp | NeighborDown | Delivered | PeerDead | IdentityMismatch | PeerDiscovered
    | SeedReached | PeerRevived
)


# -- local outputs: connection intents for the transport ----------------------------------------
@dataclass(frozen=True, slots=True)
class Connect:
    """Make sure a connection to ``node_id`` at ``addr`` exists (idempotent)."""

    node_id: bytes
    addr: str


@dataclass(frozen=True, slots=True)
class Drop:
    """Gossip no longer needs the connection to ``node_id`` (the transport may close it)."""

    node_id: bytes


Intent = Connect | Drop
