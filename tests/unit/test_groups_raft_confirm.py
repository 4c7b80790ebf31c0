"""A clustered group coordinator answers OffsetFetch only while a quorum confirms it still
leads the offsets group: one cut off from the others (still serving until check-quorum
steps it down) refuses, so a client never reads an offset older than a commit the new
coordinator acknowledged."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from eddy.broker.groups_raft import RaftGroupStore
from eddy.broker.handlers.groups import _confirmed
from eddy.cluster.raft.driver import WriteTimeout
from eddy.cluster.raft.ready import NotLeader


class Driver:
    """What RaftGroupStore uses of a RaftDriver; ``read_barrier`` fails with ``error``."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.is_leader = False
        self.on_soft_state: Any = None
        self.barriers = 0
        self.node: Any = SimpleNamespace(id=1, voters=frozenset({1, 2, 3}))

    async def read_barrier(self) -> int:
        self.barriers += 1
        if self.error is not None:
            raise self.error
        return 7


def _store(error: Exception | None, serving: bool) -> tuple[RaftGroupStore, Driver]:
    driver = Driver(error)
    store = RaftGroupStore(SimpleNamespace(), driver, SimpleNamespace())  # type: ignore[arg-type]
    store.serving = serving
    return store, driver


def test_offset_fetch_needs_the_quorum_to_confirm_the_coordinator() -> None:
    async def run() -> None:
        for error, serving, expected, barriers in (
                (None, True, True, 1),  # confirmed: answers
                (NotLeader(2), True, False, 1),  # deposed, not told yet: refuses
                (WriteTimeout("no quorum"), True, False, 1),  # cut off: refuses
                (None, False, False, 0)):  # not the coordinator: no barrier asked
            store, driver = _store(error, serving)
            broker: Any = SimpleNamespace(cluster=object(),
                                          groups=SimpleNamespace(store=store))
            assert await _confirmed(broker) is expected, (error, serving)
            assert driver.barriers == barriers
        alone: Any = SimpleNamespace(cluster=None, groups=SimpleNamespace(store=None))
        assert await _confirmed(alone)  # a node of its own is always current
        # a lone voter (a cluster of one): nobody else can lead, no barrier needed
        store, driver = _store(NotLeader(0), True)
        driver.node = SimpleNamespace(id=1, voters=frozenset({1}))
        one: Any = SimpleNamespace(cluster=object(), groups=SimpleNamespace(store=store))
        assert await _confirmed(one) and driver.barriers == 0

    asyncio.run(run())
