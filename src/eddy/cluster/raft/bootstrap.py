"""A group's store before its driver starts: is it new, giving a new one its first
membership, and the snapshot a driver restores its state machine from. Re-exported by
``driver``."""

from __future__ import annotations

from collections.abc import Sequence

from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.storage.disk import RaftStorage
from eddy.cluster.raft.types import ConfState, HardState, Snapshot

Store = RaftStorage | MemoryLogStore


def is_empty(store: Store) -> bool:
    hs, cs = store.initial_state()
    return (hs == HardState() and not cs.voters and not cs.learners
            and store.last_index() == 0 and store.snapshot_meta().index == 0)


def bootstrap(store: Store, voters: Sequence[int]) -> bool:
    """Give an empty store its initial membership (durably); False when not empty.

    No ``voters``: the node joins a running group. Its store stays empty, it never
    campaigns, and it learns the membership from the leader once it is added (a learner
    first, ``RaftDriver.change_membership``); False as nothing was written."""
    if any(v <= 0 for v in voters):
        raise ValueError(f"bad initial voters {list(voters)}")
    if not is_empty(store) or not voters:
        return False
    store.set_conf_state(ConfState(tuple(sorted(set(voters)))))
    if isinstance(store, RaftStorage):
        store.sync()
    return True


def stored_snapshot(store: Store) -> Snapshot | None:
    return store.snapshot() if isinstance(store, RaftStorage) else store.snapshot
