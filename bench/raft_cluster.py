"""`python -m bench.raft_cluster`: the `metadata` Raft group, 3 voters over the real mesh,
fsync on, running the real metadata state machine (``MetadataState``).

All three nodes run in ONE process (one event loop), each with its own MeshService over real
QUIC on loopback, its own MultiRaft and RaftStorage (fsync per Ready) in a temp dir. One
process is simpler than three and the numbers say so: the three nodes share one core's
event loop, so this is a lower bound on what three machines would do.

1. Write latency p50/p99 and writes/s at 1 and 64 concurrent proposers; the commands are
   real metadata commands (``bench.metadata_snapshot.write_command``: AlterTopicConfigs,
   CreateAcl with a new principal, BrokerHeartbeat in turn).
2. Election time after a leader kill: the leader's Raft driver is aborted (a crash: no
   goodbye, its QUIC connections stay up, so followers notice only by missing heartbeats)
   and the time until another node leads is taken; the killed node restarts from its
   directory before the next round. Median, p90 and max of ``--elections`` kills.
3. Snapshot install, on a fresh group: one follower's group is stopped (and sends to it fail,
   as to a crashed machine: see ``GatedTransport``), a state of ``--snapshot-entries``
   records is written through Raft by the other two (each compacts every
   ``--snapshot-every`` entries), then the follower restarts from its directory (it holds
   the setup's 8 entries) and catches up through InstallSnapshot: the time from its start
   until it has applied the leader's commit index, when the snapshot was applied, and the
   snapshot's size. Also ``snapshot()`` and ``restore()`` of that state alone, no Raft.

Prints a table; never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.metadata_snapshot import (
    KINDS,
    describe,
    entry_commands,
    setup_commands,
    snapshot_row,
    time_snapshot_restore,
    write_command,
)
from eddy.clock import WallClock
from eddy.cluster.machine import MetadataMachine
from eddy.cluster.multiraft import MultiRaft
from eddy.cluster.raft.driver import RaftDriver, stored_snapshot
from eddy.cluster.raft.ready import NotLeader, ProposalDropped, RaftConfig
from eddy.cluster.raft.transport import MeshRaftTransport, Receiver, SendDone
from eddy.config import load_config
from eddy.mesh.identity import NodeIdentity
from eddy.mesh.service import MeshService
from eddy.metadata import ApplyResult

GROUP = "metadata"
NODES = (1, 2, 3)
Row = tuple[str, str]


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.002)


class GatedTransport:
    """A node's mesh transport, but sends to a node in ``down`` fail at once (``on_done``
    False), as they would once the QUIC connection to a crashed machine is gone; here the
    connection stays up while only the Raft group is stopped."""

    def __init__(self, inner: MeshRaftTransport, down: set[int]) -> None:
        self.inner = inner
        self.down = down

    def send(self, to_node: int, msg_bytes: bytes, on_done: SendDone | None = None) -> None:
        if to_node in self.down:
            if on_done is not None:
                on_done(False)
            return
        self.inner.send(to_node, msg_bytes, on_done)

    def set_receiver(self, receiver: Receiver) -> None:
        self.inner.set_receiver(receiver)


class Bench:
    """Three meshes and MultiRafts in one loop, each running the `metadata` group."""

    def __init__(self, tmp: Path, config: RaftConfig, snapshot_every: int = 50_000) -> None:
        self.tmp = tmp
        self.config = config
        self.snapshot_every = snapshot_every
        self.meshes: list[MeshService] = []
        self.multis: dict[int, MultiRaft] = {}
        self.machines: dict[int, MetadataMachine] = {}
        self.down: set[int] = set()  # nodes whose links fail (see GatedTransport)

    async def start(self) -> None:
        seed = ""
        for i in NODES:
            cfg = load_config(env={}, overrides={
                "node_id": i, "data_dir": str(self.tmp / f"n{i}"),
                "mesh.listener": "127.0.0.1:0", "mesh.seeds": seed})
            m = MeshService(cfg, NodeIdentity.generate(), WallClock(),
                            ("127.0.0.1", 9000 + i), random.Random(i))
            _, port = await m.start()
            seed = seed or f"127.0.0.1:{port}"
            self.meshes.append(m)
        await _until(lambda: all(m.directory.key_of(j) for m in self.meshes for j in NODES),
                     30, "every mesh knows every node")
        for i, m in zip(NODES, self.meshes, strict=True):
            transport = GatedTransport(MeshRaftTransport(m, i), self.down)
            self.multis[i] = MultiRaft(i, str(self.tmp / f"n{i}"), transport,
                                       config=self.config)
            await self.add(i)
        await self.propose_all(setup_commands(), 1)

    async def add(self, i: int) -> RaftDriver:
        self.machines[i] = MetadataMachine()
        return await self.multis[i].add_group(GROUP, list(NODES), self.machines[i],
                                              snapshot_every=self.snapshot_every)

    def driver(self, i: int) -> RaftDriver | None:
        return self.multis[i].groups.get(GROUP)

    def leader(self) -> RaftDriver | None:
        for i in NODES:
            d = self.driver(i)
            if d is not None and d.is_leader:
                return d
        return None

    async def wait_leader(self) -> RaftDriver:
        await _until(lambda: self.leader() is not None, 30, "a leader")
        leader = self.leader()
        assert leader is not None
        return leader

    def rejected(self) -> int:
        return sum(m.rejected for m in self.machines.values())

    async def propose_all(self, commands: list[bytes], proposers: int) -> list[float]:
        """Each command proposed once (retried on another leader); returns the latencies."""
        todo: Iterator[bytes] = iter(commands)
        lat: list[float] = []

        async def proposer() -> None:
            for data in todo:
                await self._propose(data, lat)

        await asyncio.gather(*(proposer() for _ in range(proposers)))
        return lat

    async def _propose(self, data: bytes, lat: list[float]) -> ApplyResult:
        while True:
            leader = await self.wait_leader()
            t0 = time.perf_counter()
            try:
                result: ApplyResult = await leader.propose(data)
            except (NotLeader, ProposalDropped):  # a leader change: the command may have
                await asyncio.sleep(0.01)  # been applied; a second copy is harmless here
                continue
            lat.append(time.perf_counter() - t0)
            return result

    async def write_phase(self, proposers: int, seconds: float) -> dict[str, float]:
        leader = await self.wait_leader()
        lat: list[float] = []
        stop_at = time.perf_counter() + seconds
        fsyncs0, rejected0 = leader.stats.fsyncs, self.rejected()

        async def proposer(p: int) -> None:
            k = 0
            while time.perf_counter() < stop_at:
                await self._propose(write_command(p, k), lat)
                k += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(proposer(p) for p in range(proposers)))
        wall = time.perf_counter() - t0
        return {"writes": len(lat), "per_s": len(lat) / wall, "p50_ms": _pct(lat, 0.5) * 1e3,
                "p99_ms": _pct(lat, 0.99) * 1e3,
                "writes_per_fsync": len(lat) / max(1, leader.stats.fsyncs - fsyncs0),
                "rejected": self.rejected() - rejected0}

    async def election_round(self) -> float:
        old = await self.wait_leader()
        for _ in range(50):  # let the followers catch up so any of them can win
            try:
                await old.read_barrier()
                break
            except ProposalDropped:
                await asyncio.sleep(0.01)
        killed = old.node_id
        t0 = time.perf_counter()
        await self.multis[killed].remove_group(GROUP, abort=True)
        await self.wait_leader()
        took = time.perf_counter() - t0
        await self.add(killed)
        return took

    async def settle(self, timeout: float = 120) -> RaftDriver:
        """Wait until every running node has applied the leader's commit index."""
        leader = await self.wait_leader()

        def done() -> bool:
            target = leader.status().commit_index
            return all(d.status().applied_index >= target
                       for d in (self.driver(i) for i in NODES) if d is not None)

        await _until(done, timeout, "every node applied the leader's commit")
        return leader

    async def stop(self) -> None:
        for multi in self.multis.values():
            await multi.stop()
        for m in self.meshes:
            await m.stop()


async def cluster_phases(tmp: Path, config: RaftConfig, args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    b = Bench(tmp, config)
    await b.start()
    try:
        for proposers in (1, 64):
            r = await b.write_phase(proposers, args.seconds)
            rows.append((f"writes, {proposers} proposer(s)",
                         f"{r['per_s']:8.0f}/s  p50 {r['p50_ms']:6.2f} ms  "
                         f"p99 {r['p99_ms']:6.2f} ms  ({r['writes']:.0f} writes, "
                         f"{r['writes_per_fsync']:.1f}/leader fsync, "
                         f"{r['rejected']:.0f} rejected)"))
        times = [await b.election_round() for _ in range(args.elections)]
        rows.append((f"election after leader kill (n={len(times)})",
                     f"median {statistics.median(times) * 1e3:6.0f} ms  "
                     f"p90 {_pct(times, 0.9) * 1e3:.0f}  min {min(times) * 1e3:.0f}  "
                     f"max {max(times) * 1e3:.0f} ms"))
    finally:
        await b.stop()
    return rows


async def _catch_up(driver: RaftDriver, target: int, timeout: float) -> list[tuple[float, int]]:
    """Wait until ``driver`` applied ``target``; returns (seconds, applied index) at each
    change of its applied index."""
    t0 = time.perf_counter()
    seen: list[tuple[float, int]] = [(0.0, -1)]
    while seen[-1][1] < target:
        now = time.perf_counter() - t0
        applied = driver.status().applied_index
        if applied != seen[-1][1]:
            seen.append((now, applied))
        if now > timeout:
            raise TimeoutError(f"the restarted node applied {applied} of {target} in "
                               f"{timeout:.0f} s (snapshot over the send queue? --links-up?)")
        await asyncio.sleep(0.002)
    return seen[1:]


async def install_phase(tmp: Path, config: RaftConfig, args: argparse.Namespace) -> list[Row]:
    kind, entries = args.snapshot_kind, args.snapshot_entries
    commands = entry_commands(kind, entries)
    every = max(1, min(args.snapshot_every, len(commands) // 2))  # compact at least twice
    b = Bench(tmp, config, snapshot_every=every)
    await b.start()
    rows: list[Row] = []
    try:
        leader = await b.settle()
        term0 = leader.status().term
        late = next(i for i in NODES if i != leader.node_id)
        await b.multis[late].remove_group(GROUP, abort=True)
        if not args.links_up:
            b.down.add(late)
        t0 = time.perf_counter()
        await b.propose_all(commands, args.load_proposers)
        load_s = time.perf_counter() - t0
        leader = await b.settle()
        compactions = sum(d.stats.snapshots for d in map(b.driver, NODES) if d is not None)
        rows.append((f"load {describe(kind, entries)} (2 of 3 up)",
                     f"{len(commands) / load_s:8.0f} commands/s  ({len(commands)} in "
                     f"{load_s:.1f} s, {compactions} compactions (every {every}), term {term0} -> "
                     f"{leader.status().term}, {b.rejected()} rejected)"))
        target = leader.status().commit_index
        t0 = time.perf_counter()
        b.down.discard(late)
        late_driver = await b.add(late)
        opened = time.perf_counter() - t0
        seen = await _catch_up(late_driver, target, args.catch_up_timeout)
        snap = stored_snapshot(late_driver.store)
        if snap is None or late_driver.store.first_index() <= 1:
            raise RuntimeError("the restarted node caught up without a snapshot")
        took = seen[-1][0]
        snap_s = next(t for t, applied in seen if applied >= snap.meta.index)
        leader = await b.settle()
        if b.machines[late].snapshot() != b.machines[leader.node_id].snapshot():
            raise RuntimeError("the restarted node's state differs from the leader's")
        rows.append(("snapshot install, restarted node to leader's commit",
                     f"{(opened + took) * 1e3:8.0f} ms  (snapshot {len(snap.data) / 1e6:.2f} "
                     f"MB at index {snap.meta.index} applied at {(opened + snap_s) * 1e3:.0f} ms"
                     f", then {target - snap.meta.index} entries to commit {target}; "
                     f"state = leader's)"))
    finally:
        await b.stop()
    return rows


async def main(args: argparse.Namespace) -> None:
    config = RaftConfig(heartbeat_ms=args.heartbeat_ms,
                        election_timeout_ms=args.election_timeout_ms)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        rows += await cluster_phases(Path(tmp) / "writes", config, args)
        if args.snapshot_entries > 0:
            rows += await install_phase(Path(tmp) / "install", config, args)
    if args.snapshot_entries > 0:
        rows.append(snapshot_row(args.snapshot_kind, time_snapshot_restore(
            args.snapshot_kind, args.snapshot_entries)))
    print(f"raft: 3 voters of `{GROUP}` (MetadataState), one process over real QUIC, "
          f"fsync on; heartbeat {config.heartbeat_ms} ms, election timeout "
          f"{config.election_timeout_ms} ms")
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=5.0, help="per write phase")
    p.add_argument("--elections", type=int, default=20, help="leader kills to time")
    p.add_argument("--heartbeat-ms", type=int, default=250)
    p.add_argument("--election-timeout-ms", type=int, default=299)
    p.add_argument("--snapshot-entries", type=int, default=100_000,
                   help="records of the snapshot-install state (0: skip that part)")
    p.add_argument("--snapshot-kind", choices=KINDS, default="acls")
    p.add_argument("--snapshot-every", type=int, default=10_000,
                   help="log entries between compactions in the snapshot-install group")
    p.add_argument("--load-proposers", type=int, default=256)
    p.add_argument("--catch-up-timeout", type=float, default=120, help="seconds")
    p.add_argument("--links-up", action="store_true",
                   help="keep sending to the stopped follower (messages to its stopped group "
                        "are lost) instead of failing those sends")
    args = p.parse_args()
    if args.elections < 1:
        p.error("--elections must be at least 1")
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()
