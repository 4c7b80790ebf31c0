"""The ``offsets`` Raft group's state machine: consumer groups and committed offsets, as the
records the group coordinator writes (``__consumer_offsets``' keys and values, Kafka's
formats), kept compacted: the latest value per key, a tombstone removing it.

Its leader runs the group coordinator (FindCoordinator names it); on becoming leader the
coordinator is rebuilt from these records. Entries and snapshots are postcard; a malformed
entry is refused whole (the records are not decoded here: the coordinator checks them when
it replays them).
"""

from __future__ import annotations

from dataclasses import dataclass

from eddy import postcard
from eddy.postcard import PostcardError

OFFSETS_GROUP = "offsets"
#: a key or value larger than this is refused (Kafka's offset metadata is bounded far below)
MAX_RECORD_BYTES = 1 << 20

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class OffsetsEntry:
    """One coordinator write: its records, applied together."""

    records: tuple[tuple[bytes, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class OffsetsSnapshot:
    records: tuple[tuple[bytes, bytes], ...]  # sorted by key


class OffsetsMachine:
    def __init__(self) -> None:
        self.records: dict[bytes, bytes] = {}
        self.applied_index = 0
        self.rejected = 0

    def apply(self, index: int, data: bytes) -> bool:
        """True if the entry applied; a malformed one changes nothing."""
        self.applied_index = index
        try:
            entry = postcard.decode(OffsetsEntry, data)
        except PostcardError:
            self.rejected += 1
            return False
        if any(len(k) > MAX_RECORD_BYTES or (v is not None and len(v) > MAX_RECORD_BYTES)
               for k, v in entry.records):
            self.rejected += 1
            return False
        for key, value in entry.records:
            if value is None:
                self.records.pop(key, None)
            else:
                self.records[key] = value
        return True

    def ordered(self) -> list[Record]:
        return sorted(self.records.items())

    def snapshot(self) -> bytes:
        return postcard.encode(OffsetsSnapshot(tuple(sorted(self.records.items()))))

    def restore(self, data: bytes) -> None:
        snap = postcard.decode(OffsetsSnapshot, data)
        self.records = dict(snap.records)


def encode_entry(records: list[Record]) -> bytes:
    return postcard.encode(OffsetsEntry(tuple(records)))
