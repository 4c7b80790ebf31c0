"""Membership changes through ``RaftDriver.change_membership``: drivers in one event loop over
the in-memory transport, each on its own RaftStorage in a temp dir. A learner joins from an
empty store and catches up (from the log, or from a snapshot), is promoted, a follower and
then the leader leave, and nodes restarted from their storage come back with the membership
they had; refused changes (in flight, last voter, off the leader) say why."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from eddy.clock import WallClock
from eddy.cluster.raft.driver import (
    CONF_ADD_LEARNER,
    CONF_ADD_VOTER,
    CONF_REMOVE_NODE,
    ConfChangeError,
    RaftDriver,
    WriteTimeout,
    bootstrap,
)
from eddy.cluster.raft.ready import NotLeader, RaftConfig
from eddy.cluster.raft.storage.disk import RaftStorage
from eddy.cluster.raft.transport import InMemoryRaftNetwork, decode_inbound
from eddy.cluster.raft.types import ConfState
from eddy.log.file_cache import FileCache

CFG = RaftConfig(group=9, heartbeat_ms=50, election_timeout_ms=150)
T = TypeVar("T")


class ListMachine:
    """Appends each command, in index order, exactly once."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.last_index = 0

    def apply(self, index: int, data: bytes) -> int:
        assert index > self.last_index, "entries applied out of order or twice"
        self.last_index = index
        self.items.append(data)
        return len(self.items)

    def snapshot(self) -> bytes:
        return json.dumps([self.last_index, [d.hex() for d in self.items]]).encode()

    def restore(self, data: bytes) -> None:
        last, items = json.loads(data)
        self.last_index = last
        self.items = [bytes.fromhex(x) for x in items]


async def until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.01)


class Cluster:
    def __init__(self, tmp: Path, ids: tuple[int, ...] = (1, 2, 3),
                 config: RaftConfig = CFG, **driver_kw: int) -> None:
        self.tmp = tmp
        self.ids = ids
        self.config = config
        self.net = InMemoryRaftNetwork()
        self.kw: dict[str, Any] = dict(driver_kw)
        self.drivers: dict[int, RaftDriver] = {}
        self.machines: dict[int, ListMachine] = {}

    async def start(self, i: int, *, join: bool = False) -> RaftDriver:
        """Node ``i`` from its storage; a new store gets the first voters, unless ``join``:
        then it starts empty and waits to be added."""
        store = RaftStorage(str(self.tmp / f"n{i}"), files=FileCache(16), segment_bytes=4096)
        bootstrap(store, [] if join else self.ids)
        sm = ListMachine()
        t = self.net.transport(i)
        d = RaftDriver("test", i, store, t, self.config, sm, WallClock(), **self.kw)

        def receive(src: int, data: bytes) -> None:
            msg = decode_inbound(src, data, i)
            if msg is not None:
                d.deliver(msg)

        t.set_receiver(receive)
        await d.start()
        self.drivers[i], self.machines[i] = d, sm
        return d

    async def start_all(self) -> None:
        await asyncio.gather(*(self.start(i) for i in self.ids))

    def leader(self) -> RaftDriver | None:
        leaders = [d for d in self.drivers.values() if d.running and d.is_leader]
        return max(leaders, key=lambda d: d.status().term) if leaders else None

    async def elect(self, timeout: float = 10) -> RaftDriver:
        await until(lambda: self.leader() is not None, timeout, "a leader is elected")
        leader = self.leader()
        assert leader is not None
        return leader

    async def crash(self, i: int) -> None:
        self.net.down(i)
        await self.drivers.pop(i).abort()

    async def stop(self, i: int) -> None:
        self.net.down(i)
        await self.drivers.pop(i).stop()

    async def stop_all(self) -> None:
        for i in list(self.drivers):
            await self.stop(i)

    async def on_leader(self, op: Callable[[RaftDriver], Awaitable[T]],
                        timeout: float = 10) -> T:
        """``op`` on whoever leads, again while there is none (``NotLeader``: nothing was
        proposed, so trying again is safe)."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            try:
                if leader is not None:
                    return await op(leader)
            except NotLeader:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no leader did it within {timeout} s")
            await asyncio.sleep(0.02)

    async def write(self, data: bytes) -> int:
        result: int = await self.on_leader(lambda d: d.propose(data))
        return result

    async def change(self, kind: int, node_id: int) -> ConfState:
        return await self.on_leader(lambda d: d.change_membership(kind, node_id))

    def applied_by(self, ids: tuple[int, ...] | list[int], data: bytes) -> bool:
        return all(data in self.machines[i].items for i in ids)


async def remove_a_leader(c: Cluster, avoid: int = 0) -> tuple[int, ConfState]:
    """Whoever leads (not ``avoid``) removes itself; returns its id and the membership."""
    async def op(d: RaftDriver) -> tuple[int, ConfState]:
        if d.node_id == avoid:
            raise NotLeader(0)
        return d.node_id, await d.change_membership(CONF_REMOVE_NODE, d.node_id)

    return await c.on_leader(op)


async def remove_a_follower(c: Cluster, node_id: int) -> ConfState:
    """Remove ``node_id`` through another node, moving leadership off it first."""
    async def op(d: RaftDriver) -> ConfState:
        if d.node_id == node_id:
            d.transfer_leadership(next(i for i in d.status().voters if i != node_id))
            await asyncio.sleep(CFG.election_timeout_ms / 1000)
            raise NotLeader(0)
        return await d.change_membership(CONF_REMOVE_NODE, node_id)

    return await c.on_leader(op)


def test_learner_joins_is_promoted_then_a_follower_and_the_leader_leave(
        tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path)
        await c.start_all()
        try:
            await c.elect()
            for k in range(30):
                await c.write(b"a%d" % k)

            # node 4 starts from nothing: no membership, it never campaigns
            d4 = await c.start(4, join=True)
            st4 = d4.status()
            assert (st4.voters, st4.learners, st4.role) == ((), (), "follower")
            assert await c.change(CONF_ADD_LEARNER, 4) == ConfState((1, 2, 3), (4,))
            want = [b"a%d" % k for k in range(30)]
            await until(lambda: c.machines[4].items == want, 10,
                        "the learner applies every entry")
            assert c.machines[4].last_index == c.machines[1].last_index
            st4 = d4.status()
            assert (st4.voters, st4.learners, st4.role) == ((1, 2, 3), (4,), "follower")
            assert 4 in (await c.elect()).status().lag

            # promoted: a voter now
            assert await c.change(CONF_ADD_VOTER, 4) == ConfState((1, 2, 3, 4), ())
            await until(lambda: d4.status().voters == (1, 2, 3, 4), 5, "node 4 votes")

            # node 1 leaves as a follower
            assert await remove_a_follower(c, 1) == ConfState((2, 3, 4), ())
            await c.crash(1)
            # the quorum is two of three now: with one more voter cut off, writes commit
            # (under the old membership, two of four could not)
            leader = await c.elect()
            cut = next(i for i in (2, 3, 4) if i != leader.node_id)
            c.net.isolate(cut)
            await c.write(b"two of three")
            c.net.heal()
            await until(lambda: c.applied_by([2, 3, 4], b"two of three"), 10,
                        "the cut-off voter catches up")
            assert 1 not in (await c.elect()).status().lag

            # the leader removes itself: it steps down once applied, another node leads
            gone, cs = await remove_a_leader(c)
            rest = tuple(i for i in (2, 3, 4) if i != gone)
            assert cs == ConfState(rest, ())
            await until(lambda: not c.drivers[gone].is_leader, 5, "the removed leader steps "
                        "down")
            assert c.drivers[gone].status().voters == rest
            assert (await c.elect()).node_id in rest
            await c.write(b"after the leader left")
            await until(lambda: c.applied_by(rest, b"after the leader left"), 10,
                        "both remaining voters apply")
            assert all(c.drivers[i].status().voters == rest for i in rest)
            await c.crash(gone)

            # both restart from their storage: the membership is the one they left with
            want = c.machines[rest[0]].items
            assert c.machines[rest[1]].items == want
            await c.stop_all()
            for i in rest:
                d = await c.start(i)
                st = d.status()
                assert (st.voters, st.learners) == (rest, ()), f"node {i} after restart"
            await until(lambda: all(c.machines[i].items == want for i in rest), 10,
                        "the restarted nodes replay their logs")
            await c.write(b"after restart")
            await until(lambda: c.applied_by(rest, b"after restart"), 10, "both apply it")

            # refused: a voter cannot become a learner in one step, the last voter cannot
            # leave
            for i in rest:
                with pytest.raises(ConfChangeError, match="is a voter"):
                    await c.change(CONF_ADD_LEARNER, i)
            stays, cs = await remove_a_leader(c)  # down to one voter
            assert cs == ConfState(tuple(i for i in rest if i != stays), ())
            await c.crash(stays)
            with pytest.raises(ConfChangeError, match="last voter"):
                await remove_a_leader(c)
            await c.write(b"alone")
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_learner_catches_up_from_a_snapshot_and_restarts_as_a_learner(
        tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path, snapshot_every=20)
        await c.start_all()
        try:
            await c.elect()
            for k in range(50):
                await c.write(b"s%d" % k)
            assert all(c.drivers[i].store.first_index() > 2 for i in (1, 2, 3)), \
                "the voters compacted their logs"
            d4 = await c.start(4, join=True)
            await c.change(CONF_ADD_LEARNER, 4)
            await c.write(b"after join")
            want = c.machines[1].items
            await until(lambda: c.machines[4].items == want, 10,
                        "the learner catches up through a snapshot")
            assert d4.store.snapshot_meta().index > 0, "it was sent a snapshot"
            assert d4.status().learners == (4,)
            await c.write(b"before restart")
            await until(lambda: c.applied_by([1, 2, 3, 4], b"before restart"), 10,
                        "every node applies")
            await c.stop(4)
            d4 = await c.start(4)  # from its storage (snapshot + log)
            st = d4.status()
            assert (st.voters, st.learners) == ((1, 2, 3), (4,))
            await until(lambda: c.machines[4].items == c.machines[1].items, 10,
                        "the restarted learner is where it was")
            # a learner never campaigns: with the voters gone it stays a follower
            term = d4.status().term
            for i in (1, 2, 3):
                await c.crash(i)
            await asyncio.sleep(4 * CFG.election_timeout_ms / 1000)
            assert d4.status().role == "follower" and d4.status().term == term
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_refused_changes_say_why(tmp_path: Path) -> None:
    async def go() -> None:
        # no check-quorum: a leader cut off from everyone keeps believing it leads
        c = Cluster(tmp_path, config=dataclasses.replace(CFG, check_quorum=False))
        await c.start_all()
        try:
            await c.write(b"x")
            leader = await c.elect()
            follower = next(d for d in c.drivers.values() if d is not leader)
            await until(lambda: follower.leader not in (0, follower.node_id), 5,
                        "the follower knows a leader")
            with pytest.raises(NotLeader) as info:
                await follower.change_membership(CONF_ADD_LEARNER, 4)
            assert info.value.leader_hint == follower.leader != 0
            with pytest.raises(ConfChangeError, match="unknown membership change kind"):
                await leader.change_membership(9, 4)
            with pytest.raises(ConfChangeError, match="bad node id"):
                await leader.change_membership(CONF_ADD_LEARNER, 0)

            # two at once: the second is refused, the first goes through
            async def two(d: RaftDriver) -> list[Any]:
                got = await asyncio.gather(
                    d.change_membership(CONF_ADD_LEARNER, 4),
                    d.change_membership(CONF_ADD_LEARNER, 5), return_exceptions=True)
                if isinstance(got[0], NotLeader):
                    raise got[0]
                return list(got)

            outcomes = await c.on_leader(two)
            assert outcomes[0] == ConfState((1, 2, 3), (4,))
            assert isinstance(outcomes[1], ConfChangeError)
            assert "in flight" in str(outcomes[1])

            # a change that timed out is still in the log: the next one waits for it
            async def cut_off(d: RaftDriver) -> RaftDriver:
                d.write_timeout_ms = 200
                c.net.isolate(d.node_id)
                try:
                    await d.change_membership(CONF_ADD_LEARNER, 5)
                except NotLeader:
                    c.net.heal()
                    raise
                raise AssertionError("a cut-off leader made a change")

            with pytest.raises(WriteTimeout, match="membership change") as timed_out:
                await c.on_leader(cut_off)
            old = next(d for d in c.drivers.values() if d.node_id in c.net.isolated)
            assert "add-learner 5" in str(timed_out.value)
            assert old.is_leader
            with pytest.raises(ConfChangeError, match="not applied yet"):
                await old.change_membership(CONF_REMOVE_NODE, 4)
            c.net.heal()
            await until(lambda: not old.is_leader or 5 in old.status().learners, 10,
                        "the old leader steps down, or its change commits and applies")
            # whoever leads now (maybe the old leader still, its change then applied)
            cs = await c.change(CONF_REMOVE_NODE, 4)
            assert 4 not in cs.voters + cs.learners and cs.voters == (1, 2, 3)
        finally:
            await c.stop_all()

    asyncio.run(go())
