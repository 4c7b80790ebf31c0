"""What each node broadcasts about itself (seed 000's routing-table updates), and pointer
gossip for announcements too big for a datagram.

An announcement carries the node's Hello facts (so every node learns every other's
addresses, not only its gossip neighbours') and, for a broker, the topics and groups it
hosts. Versions grow with every change; receivers keep the newest. An encoded announcement
over POINTER_THRESHOLD bytes is broadcast as a Pointer {hash, size, source}; receivers pull
the payload from the source over a stream (tag 0x01) on a cache miss (seed 000).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

from eddy.mesh.frames import Pointer, pointer_hash
from eddy.mesh.postcard import I32, U32, U64, Fixed32


@dataclass(frozen=True, slots=True)
class Announcement:
    VARIANT: ClassVar[int] = 0
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
class AnnouncementPointer:
    VARIANT: ClassVar[int] = 1
    pointer: Pointer


GossipPayload = Announcement | AnnouncementPointer

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
