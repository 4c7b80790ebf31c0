"""A simulated node's disk (writes lost on a crash unless fsynced) and how a ``Ready``'s
writes land on it."""

from __future__ import annotations

import random
from collections.abc import Callable

from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.ready import Ready

__all__ = ["Disk", "persist_ready"]

StoreOp = Callable[[MemoryLogStore], None]


class Disk:
    """Writes land in ``volatile`` at once and reach ``durable`` at ``fsync``; a crash keeps
    ``durable`` plus some prefix of the unsynced writes (as a disk might)."""

    def __init__(self, store: MemoryLogStore) -> None:
        self.durable = store
        self.volatile = store.clone()
        self._unsynced: list[StoreOp] = []

    def write(self, op: StoreOp) -> None:
        op(self.volatile)
        self._unsynced.append(op)

    def fsync(self) -> None:
        for op in self._unsynced:
            op(self.durable)
        self._unsynced = []

    def crash(self, rng: random.Random) -> None:
        keep = rng.randrange(len(self._unsynced) + 1) if self._unsynced else 0
        for op in self._unsynced[:keep]:
            op(self.durable)
        self._unsynced = []
        self.volatile = self.durable.clone()


def persist_ready(disk: Disk, rd: Ready) -> None:
    """``rd``'s writes in log order, as a WAL would: a torn tail loses a suffix of them."""
    if rd.snapshot is not None:
        snap = rd.snapshot
        disk.write(lambda s: s.install_snapshot(snap))
    if rd.entries:
        ents = rd.entries
        disk.write(lambda s: s.append(ents))
    if rd.hard_state is not None:
        hs = rd.hard_state
        disk.write(lambda s: s.set_hard_state(hs))
    if rd.conf_state is not None:
        cs = rd.conf_state
        disk.write(lambda s: s.set_conf_state(cs))
