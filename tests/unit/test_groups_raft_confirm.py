"""A clustered group coordinator answers OffsetFetch only while a quorum confirms it still
leads the offsets group: one cut off from the others (still serving until check-quorum
steps it down) refuses, so a client never reads an offset older than a commit the new
coordinator acknowledged."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from eddy.broker.handlers.groups import _confirmed
from eddy.cluster.raft.driver import WriteTimeout
from eddy.cluster.raft.ready import NotLeader
from eddy.groups.raft_store import RaftGroupStore


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


class OutageDriver(Driver):
    """A lone voter's offsets group whose disk failed: proposals are dropped and each one
    asks for the storage to be tried again."""

    def __init__(self) -> None:
        super().__init__(None)
        self.node = SimpleNamespace(id=1, voters=frozenset({1}))
        self.stopped_by_storage = False
        self.kicks = 0
        self.proposed: list[bytes] = []

    def kick_recovery(self) -> None:
        self.kicks += 1

    async def propose(self, data: bytes) -> None:
        self.proposed.append(data)

    async def caught_up_as_leader(self) -> bool:
        return True


def test_a_lone_voter_serves_reads_through_a_storage_outage_and_rebuilds_after() -> None:
    from eddy.cluster.raft.ready import Role, SoftState
    from eddy.groups.records import Record
    from eddy.groups.state import Write

    async def run() -> None:
        driver = OutageDriver()
        completed: list[tuple[int, int]] = []
        reloads: list[list[tuple[bytes, bytes | None]]] = []
        coordinator = SimpleNamespace(
            write_completed=lambda now, wid, err: completed.append((wid, int(err))) or "step")
        service: Any = SimpleNamespace(coordinator=coordinator, now=lambda: 0,
                                       apply=lambda step: None, reload=reloads.append)
        machine: Any = SimpleNamespace(ordered=lambda: [(b"k", b"v")])
        store = RaftGroupStore(service, driver, machine)  # type: ignore[arg-type]
        store.serving = True
        driver.stopped_by_storage = True  # the disk filled: the driver says follower
        store._on_soft_state(SoftState(0, Role.FOLLOWER))
        assert store.serving  # reads go on: nobody else can lead
        broker: Any = SimpleNamespace(cluster=object(), groups=SimpleNamespace(store=store))
        assert await _confirmed(broker)
        # a write now is refused (NOT_COORDINATOR) without a proposal, and asks for the disk
        store.persist(Write(write_id=5, group_id="g", records=(Record(b"k", b"v2"),)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert driver.proposed == [] and driver.kicks == 1
        assert completed and completed[0][0] == 5 and completed[0][1] != 0
        # the group is back and leads again: the coordinator is rebuilt from what Raft has
        driver.stopped_by_storage = False
        store._on_soft_state(SoftState(1, Role.LEADER))
        for _ in range(5):
            await asyncio.sleep(0)
        assert reloads == [[(b"k", b"v")]] and store.serving
        store.persist(Write(write_id=6, group_id="g", records=(Record(b"k", b"v3"),)))
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(driver.proposed) == 1  # writes go to Raft again

        # a voter of several that loses its disk stops serving: another node may lead
        many = OutageDriver()
        many.node = SimpleNamespace(id=1, voters=frozenset({1, 2, 3}))
        other = RaftGroupStore(service, many, machine)  # type: ignore[arg-type]
        other.serving, many.stopped_by_storage = True, True
        other._on_soft_state(SoftState(0, Role.FOLLOWER))
        assert not other.serving

    asyncio.run(run())
