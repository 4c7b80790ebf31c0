"""What each node broadcasts about itself (seed 000's routing-table updates), and pointer
gossip for announcements too big for a datagram.

An announcement carries the node's Hello facts (so every node learns every other's
addresses, not only its gossip neighbours') and, for a broker, the topics and groups it
hosts. Versions grow with every change; receivers keep the newest. Gossip relays it through
other nodes, so it is signed with the announcing node's Ed25519 key (its NodeId): a relay
cannot forge or alter where a topic lives. An encoded announcement over POINTER_THRESHOLD
bytes is broadcast as a Pointer {hash, size, source}; receivers pull the payload from the
source over a stream (tag 0x01) on a cache miss (seed 000).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from eddy import postcard
from eddy.mesh.frames import Pointer, pointer_hash
from eddy.mesh.identity import NodeIdentity
from eddy.postcard import I32, U32, U64, Fixed32


@dataclass(frozen=True, slots=True)
class Announcement:
    node: Fixed32
    version: U64
    kafka_node_id: I32
    roles: tuple[str, ...]
    mesh_addr: str
    kafka_addr: str
    rack: str | None
    software: str
    topics: tuple[tuple[str, U32], ...]
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SignedAnnouncement:
    """An encoded Announcement and the announcing node's Ed25519 signature over it."""

    VARIANT: ClassVar[int] = 0
    body: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class AnnouncementPointer:
    VARIANT: ClassVar[int] = 1
    pointer: Pointer


GossipPayload = SignedAnnouncement | AnnouncementPointer

_CONTEXT = b"eddy-mesh/1 announcement\0"  # signatures made here mean nothing elsewhere


class BadAnnouncement(ValueError):
    """An announcement that does not decode or whose signature does not verify."""


def sign(identity: NodeIdentity, ann: Announcement) -> bytes:
    """The gossip payload for an announcement: encoded and signed."""
    body = postcard.encode(ann)
    signature = identity.private_key.sign(_CONTEXT + body)
    return postcard.encode(SignedAnnouncement(body=body, signature=signature))


def verify(signed: SignedAnnouncement) -> Announcement:
    """The announcement, if its signature is its own node's."""
    if len(signed.signature) != 64:
        raise BadAnnouncement(f"signature of {len(signed.signature)} bytes, expected 64")
    try:
        ann = postcard.decode(Announcement, signed.body)
    except postcard.PostcardError as exc:
        raise BadAnnouncement(str(exc)) from None
    try:
        Ed25519PublicKey.from_public_bytes(ann.node).verify(signed.signature,
                                                            _CONTEXT + signed.body)
    except (InvalidSignature, ValueError):
        raise BadAnnouncement(f"announcement for {ann.node.hex()[:12]} is not signed by "
                              "that node") from None
    return ann

#: the Plumtree topic announcements are broadcast under
ANNOUNCE_TOPIC = "eddy.nodes"


class PayloadCache:
    """Payloads by BLAKE2b-256 hash, least recently used dropped beyond `max_bytes`."""

    def __init__(self, max_bytes: int = 16 << 20) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._items: OrderedDict[bytes, bytes] = OrderedDict()

    def put(self, payload: bytes) -> bytes:
        digest = pointer_hash(payload)
        if digest in self._items:
            self._items.move_to_end(digest)
            return digest
        if len(payload) > self.max_bytes:
            return digest
        self._items[digest] = payload
        self.size += len(payload)
        while self.size > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.size -= len(old)
        return digest

    def get(self, digest: bytes) -> bytes | None:
        payload = self._items.get(digest)
        if payload is not None:
            self._items.move_to_end(digest)
        return payload

    def __contains__(self, digest: object) -> bool:
        return digest in self._items

    def __len__(self) -> int:
        return len(self._items)
