"""RaftDriver: three drivers in one event loop over the in-memory transport, each on its own
RaftStorage in a temp dir (real fsyncs): election, group commit, failover, a restart of the
whole cluster at once, NotLeader hints, write timeouts, slow-write warnings, hostile input."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eddy.clock import WallClock
from eddy.cluster.raft.driver import RaftDriver, WriteTimeout, bootstrap
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import AppendEntries, Heartbeat, encode_message
from eddy.cluster.raft.ready import NotLeader, ProposalDropped, RaftConfig
from eddy.cluster.raft.storage.disk import RaftStorage
from eddy.cluster.raft.transport import InMemoryRaftNetwork, decode_inbound
from eddy.cluster.raft.types import Entry
from eddy.log.file_cache import FileCache

CFG = RaftConfig(group=7, heartbeat_ms=50, election_timeout_ms=150)


class ListMachine:
    """Appends each command; answers with how many it holds."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.last_index = 0

    def apply(self, index: int, data: bytes) -> int:
        if data == b"boom":
            raise ValueError("refused boom")
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

    async def start(self, i: int) -> RaftDriver:
        store = RaftStorage(str(self.tmp / f"n{i}"), files=FileCache(16), segment_bytes=4096)
        bootstrap(store, self.ids)
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

    def live(self) -> list[RaftDriver]:
        return [d for d in self.drivers.values() if d.running]

    def leader(self) -> RaftDriver | None:
        leaders = [d for d in self.live() if d.is_leader]
        return max(leaders, key=lambda d: d.status().term) if leaders else None

    async def elect(self, timeout: float = 10) -> RaftDriver:
        await until(lambda: self.leader() is not None, timeout, "a leader is elected")
        leader = self.leader()
        assert leader is not None
        return leader

    async def crash(self, i: int) -> None:
        self.net.down(i)
        await self.drivers[i].abort()

    async def stop_all(self) -> None:
        for i, d in self.drivers.items():
            self.net.down(i)
            if d.running:
                await d.stop()

    async def write(self, data: bytes, timeout: float = 10) -> int:
        """Propose through whoever leads, retrying while there is none."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            try:
                if leader is not None:
                    result: int = await leader.propose(data)
                    return result
            except NotLeader:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no leader took {data!r} within {timeout} s")
            await asyncio.sleep(0.02)


def test_group_commit_many_concurrent_proposals_share_fsyncs(tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path)
        await c.start_all()
        try:
            leader = await c.elect()
            fsyncs_before = leader.stats.fsyncs
            results = await asyncio.gather(*(leader.propose(b"w%d" % k) for k in range(1000)))
            fsyncs = leader.stats.fsyncs - fsyncs_before
            assert sorted(results) == list(range(1, 1001))
            assert fsyncs < 100, f"{fsyncs} fsyncs for 1000 entries: no group commit"
            assert leader.stats.entries_persisted >= 1000
            want = sorted(b"w%d" % k for k in range(1000))
            await until(lambda: all(sorted(m.items) == want for m in c.machines.values()), 10,
                        "every node applied the 1000 writes")
            assert c.machines[1].items == c.machines[2].items == c.machines[3].items
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_failover_then_whole_cluster_restart_loses_nothing(tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path, snapshot_every=25)
        await c.start_all()
        acked: list[bytes] = []
        try:
            old = await c.elect()
            for batch in range(3):
                datas = [b"a%d-%d" % (batch, k) for k in range(20)]
                await asyncio.gather(*(old.propose(d) for d in datas))
                acked.extend(datas)
            await c.crash(old.node_id)  # abrupt: no close, no goodbye
            new = await c.elect(timeout=10)
            assert new.node_id != old.node_id
            for k in range(40):
                await c.write(b"b%d" % k)
                acked.append(b"b%d" % k)
            assert any(d.stats.snapshots > 0 for d in c.drivers.values())
            for i in c.ids:  # the other two crash too: every node restarts at once
                if c.drivers[i].running:
                    await c.crash(i)
            c.drivers.clear()
            await c.start_all()
            await c.elect()
            await c.write(b"after-restart")
            acked.append(b"after-restart")
            await until(lambda: all(m.items[-1:] == [b"after-restart"]
                                    for m in c.machines.values()), 10,
                        "all three apply the write made after the restart")
            for m in c.machines.values():
                assert set(acked) <= set(m.items), "an acknowledged write was lost"
                assert len(m.items) == len(set(m.items)), "a write was applied twice"
            assert c.machines[1].items == c.machines[2].items == c.machines[3].items
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_not_leader_with_hint_and_read_barrier(tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path)
        await c.start_all()
        try:
            leader = await c.elect()
            await leader.propose(b"x")
            follower = next(d for d in c.drivers.values() if d is not leader)
            await until(lambda: follower.leader == leader.node_id, 5, "follower knows leader")
            with pytest.raises(NotLeader) as info:
                await follower.propose(b"y")
            assert info.value.leader_hint == leader.node_id
            with pytest.raises(NotLeader):
                await follower.read_barrier()
            index = await leader.read_barrier()
            assert index >= 2  # the leader's no-op and b"x"
            assert c.machines[leader.node_id].items == [b"x"]
            with pytest.raises(ValueError, match="refused boom"):
                await leader.propose(b"boom")  # the state machine's error reaches the caller
            st = leader.status()
            assert (st.role, st.leader, sorted(st.voters)) == ("leader", leader.node_id,
                                                                [1, 2, 3])
            assert set(st.lag) == {i for i in c.ids if i != leader.node_id}
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_lagging_follower_catches_up_from_a_snapshot(tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path, snapshot_every=20)
        await c.start_all()
        try:
            leader = await c.elect()
            roles: list[str] = []
            leader.on_soft_state = lambda ss: roles.append(ss.role.name)
            behind = next(i for i in c.ids if i != leader.node_id)
            await c.crash(behind)
            for k in range(60):
                await c.write(b"s%d" % k)
            assert leader.store.first_index() > 20, "the leader compacted its log"
            del c.drivers[behind]
            await c.start(behind)  # back with the old log: the leader must send a snapshot
            want = c.machines[leader.node_id].items
            await until(lambda: c.machines[behind].items == want, 10,
                        "the restarted follower catches up")
            assert c.drivers[behind].store.snapshot_meta().index > 0
            c.drivers[leader.node_id].transfer_leadership(behind)
            await until(lambda: c.drivers[behind].is_leader, 10, "leadership moves to it")
            assert "FOLLOWER" in roles
            await c.write(b"from the new leader")
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_write_timeout_without_quorum(tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path, write_timeout_ms=400)
        await c.start_all()
        try:
            leader = await c.elect()
            await leader.propose(b"ok")
            c.net.isolate(leader.node_id)
            with pytest.raises(WriteTimeout, match="write timeout"):
                await leader.propose(b"never")
            c.net.heal()
            await c.write(b"healed")
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_slow_fsync_logs_a_warning_and_a_lone_voter_elects_itself(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def go() -> None:
        c = Cluster(tmp_path, ids=(1,), slow_write_ms=100)
        d = await c.start(1)
        try:
            await until(lambda: d.is_leader, 5, "a single voter leads")
            assert isinstance(d.store, RaftStorage)
            real_sync = d.store.sync

            def slow_sync(with_commit: bool = False) -> None:
                time.sleep(0.25)
                real_sync(with_commit)

            d.store.sync = slow_sync  # type: ignore[method-assign]
            with caplog.at_level(logging.WARNING, logger="eddy.cluster.raft.driver"):
                assert await d.propose(b"slow") == 1
            assert any("slow write" in r.getMessage() for r in caplog.records)
            assert d.stats.slow_writes == 1
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_a_leader_whose_fsync_takes_seconds_keeps_heartbeating(tmp_path: Path) -> None:
    """Issue 28: while a Ready's writes wait on a slow disk, the leader's heartbeats still
    go out, so its followers elect no one (their election timeout is far shorter than the
    fsync); the write then commits in the same term."""
    config = RaftConfig(group=7, heartbeat_ms=50, election_timeout_ms=400)

    async def go() -> None:
        c = Cluster(tmp_path, config=config)
        await c.start_all()
        try:
            leader = await c.elect()
            await leader.propose(b"before")
            term = leader.status().term
            assert isinstance(leader.store, RaftStorage)
            real_sync = leader.store.sync

            def slow_sync(with_commit: bool = False) -> None:
                time.sleep(2.0)
                real_sync(with_commit)

            leader.store.sync = slow_sync  # type: ignore[method-assign]
            beats = leader.stats.heartbeats_while_writing
            assert await leader.propose(b"slow") == 2
            leader.store.sync = real_sync  # type: ignore[method-assign]
            assert leader.stats.heartbeats_while_writing > beats
            assert leader.is_leader
            assert [d.status().term for d in c.drivers.values()] == [term] * 3
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_hostile_messages_are_dropped_and_the_group_keeps_working(tmp_path: Path) -> None:
    async def go() -> None:
        c = Cluster(tmp_path)
        await c.start_all()
        try:
            leader = await c.elect()
            follower = next(d for d in c.drivers.values() if d is not leader)
            lid, fid = leader.node_id, follower.node_id
            # undecodable, a forged sender, and another node's message
            assert decode_inbound(lid, b"\xff\xff\xff", fid) is None
            hb = Heartbeat(CFG.group, lid, fid, 1, 0, b"")
            assert decode_inbound(lid + 10, encode_message(hb), fid) is None
            assert decode_inbound(lid, encode_message(hb), fid + 10) is None
            assert decode_inbound(lid, encode_message(hb), fid) == hb
            # well-formed but breaking Raft's rules: the core refuses it, the driver goes on
            term = follower.status().term
            bad = AppendEntries(CFG.group, lid, fid, term, 0, 0,
                                (Entry(term, 5, 0, b"gap"),), 0)
            follower.deliver(bad)
            await until(lambda: follower.stats.dropped_messages >= 1, 5, "bad append dropped")
            assert follower.running
            await c.write(b"still fine")
            await until(lambda: c.machines[fid].items == [b"still fine"], 5,
                        "the follower still replicates")
        finally:
            await c.stop_all()

    asyncio.run(go())


def test_memory_store_driver_snapshots_and_restores(tmp_path: Path) -> None:
    async def go() -> None:
        net = InMemoryRaftNetwork()
        store = MemoryLogStore()
        bootstrap(store, [1])
        sm = ListMachine()
        d = RaftDriver("mem", 1, store, net.transport(1), CFG, sm, WallClock(),
                       snapshot_every=10)
        await d.start()
        await until(lambda: d.is_leader, 5, "a single voter leads")
        for k in range(35):
            await d.propose(b"m%d" % k)
        await d.stop()
        assert store.snapshot is not None and store.snapshot.meta.index >= 30
        assert store.first_index() > 1, "the log was compacted"
        sm2 = ListMachine()
        d2 = RaftDriver("mem", 1, store, net.transport(1), CFG, sm2, WallClock())
        await d2.start()
        await until(lambda: sm2.items == sm.items, 5, "restored from snapshot and log")
        await d2.stop()
        with pytest.raises(ProposalDropped, match="stopped"):
            await d2.propose(b"after stop")

    asyncio.run(go())


def test_a_proposal_replaced_at_its_index_fails_at_once() -> None:
    """A leader that lost the lead before its entry committed and leads again with a
    shorter log proposes at the same index: the older proposal fails then (its caller
    learns the outcome is lost), not after the write timeout."""
    async def go() -> None:
        net = InMemoryRaftNetwork()
        store = MemoryLogStore()
        bootstrap(store, [1])
        d = RaftDriver("mem", 1, store, net.transport(1), CFG, ListMachine(), WallClock())
        loop = asyncio.get_running_loop()
        old, new = loop.create_future(), loop.create_future()
        d._wait_for(12, 3, old)
        d._wait_for(12, 5, new)
        with pytest.raises(ProposalDropped, match="entry 12 of term 3 was replaced"):
            await old
        assert not new.done() and d._pending[12] == (5, new)

    asyncio.run(go())


def test_a_group_whose_disk_fails_stops_then_comes_back_when_it_works_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fsync fails (a full disk): the proposal in flight fails, the group stops leading and
    says so; once fsync works again the storage is reopened and the group goes on, with
    nothing applied twice and nothing acknowledged lost."""
    import errno
    import os

    real_fsync = os.fsync
    full = {"on": False}

    def fsync(fd: int) -> None:
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    async def go() -> None:
        net = InMemoryRaftNetwork()
        store = RaftStorage(str(tmp_path / "g"))
        bootstrap(store, [1])
        sm = ListMachine()
        d = RaftDriver("disk", 1, store, net.transport(1), CFG, sm, WallClock())
        roles: list[bool] = []
        d.on_soft_state = lambda soft: roles.append(soft.role.name == "LEADER")
        await d.start()
        await until(lambda: d.is_leader, 5, "a single voter leads")
        for k in range(5):
            await d.propose(b"a%d" % k)
        full["on"] = True
        with pytest.raises(ProposalDropped):
            await d.propose(b"lost")
        assert not d.is_leader and roles[-1] is False  # told: no longer leading
        with pytest.raises(ProposalDropped):
            await d.propose(b"refused while down")
        full["on"] = False
        await until(lambda: d.is_leader, 10, "the group back after the disk recovered")
        assert d.stats.recoveries == 1
        await d.propose(b"after")
        await d.stop()
        assert sm.items[:5] == [b"a%d" % k for k in range(5)] and sm.items[-1] == b"after"
        assert b"refused while down" not in sm.items
        # and a restart from the files gives the same state
        sm2 = ListMachine()
        d2 = RaftDriver("disk", 1, RaftStorage(str(tmp_path / "g")), net.transport(1), CFG,
                        sm2, WallClock())
        await d2.start()
        await until(lambda: sm2.items == sm.items, 5, "the same state from disk")
        await d2.stop()

    asyncio.run(go())
