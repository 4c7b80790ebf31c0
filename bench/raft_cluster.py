"""`python -m bench.raft_cluster`: a 3-voter Raft group over the real mesh, fsync on.

All three nodes run in ONE process (one event loop), each with its own MeshService over real
QUIC on loopback, its own MultiRaft and RaftStorage (fsync per Ready) in a temp dir. One
process is simpler than three and the numbers say so: the three nodes share one core's
event loop, so this is a lower bound on what three machines would do.

Measures write latency p50/p99 and writes/s of the `metadata` group at 1 and 64 concurrent
proposers (small key=value commands), then election time after killing the leader: the
leader's Raft driver is aborted (a crash: no goodbye, its QUIC connections stay up, so
followers notice only by missing heartbeats) and the time until another node leads is
taken; the killed node restarts from its directory before the next round. Prints a table;
never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path

from eddy.clock import WallClock
from eddy.cluster.multiraft import MultiRaft
from eddy.cluster.raft.driver import RaftDriver
from eddy.cluster.raft.ready import ProposalDropped, RaftConfig
from eddy.cluster.raft_transport import MeshRaftTransport
from eddy.config import load_config
from eddy.mesh.identity import NodeIdentity
from eddy.mesh.service import MeshService

GROUP = "metadata"


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def apply(self, index: int, data: bytes) -> int:
        self.n += 1
        return self.n

    def snapshot(self) -> bytes:
        return str(self.n).encode()

    def restore(self, data: bytes) -> None:
        self.n = int(data)


def _pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def _until(check: object, timeout: float) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.002)


class Bench:
    def __init__(self, tmp: Path, config: RaftConfig) -> None:
        self.tmp = tmp
        self.config = config
        self.meshes: list[MeshService] = []
        self.multis: dict[int, MultiRaft] = {}

    async def start(self) -> None:
        seed = ""
        for i in (1, 2, 3):
            cfg = load_config(env={}, overrides={
                "node_id": i, "data_dir": str(self.tmp / f"n{i}"),
                "mesh.listener": "127.0.0.1:0", "mesh.seeds": seed})
            m = MeshService(cfg, NodeIdentity.generate(), WallClock(),
                            ("127.0.0.1", 9000 + i), random.Random(i))
            _, port = await m.start()
            seed = seed or f"127.0.0.1:{port}"
            self.meshes.append(m)
        await _until(lambda: all(m.directory.key_of(j) for m in self.meshes
                                 for j in (1, 2, 3)), 30)
        for i, m in enumerate(self.meshes, start=1):
            self.multis[i] = MultiRaft(i, str(self.tmp / f"n{i}"), MeshRaftTransport(m, i),
                                       config=self.config)
            await self.add(i)

    async def add(self, i: int) -> None:
        await self.multis[i].add_group(GROUP, [1, 2, 3], Counter(), snapshot_every=50_000)

    def leader(self) -> RaftDriver | None:
        for multi in self.multis.values():
            d = multi.groups.get(GROUP)
            if d is not None and d.is_leader:
                return d
        return None

    async def write_phase(self, proposers: int, seconds: float) -> dict[str, float]:
        await _until(lambda: self.leader() is not None, 30)
        leader = self.leader()
        assert leader is not None
        lat: list[float] = []
        stop_at = time.perf_counter() + seconds
        fsyncs0 = leader.stats.fsyncs

        async def proposer(p: int) -> None:
            k = 0
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                await leader.propose(b"key-%d-%d=value" % (p, k))
                lat.append(time.perf_counter() - t0)
                k += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(proposer(p) for p in range(proposers)))
        wall = time.perf_counter() - t0
        return {"writes": len(lat), "per_s": len(lat) / wall, "p50_ms": _pct(lat, 0.5) * 1e3,
                "p99_ms": _pct(lat, 0.99) * 1e3,
                "writes_per_fsync": len(lat) / max(1, leader.stats.fsyncs - fsyncs0)}

    async def election_round(self) -> float:
        await _until(lambda: self.leader() is not None, 30)
        old = self.leader()
        assert old is not None
        with_retry = 0
        while with_retry < 50:  # let the followers catch up so any of them can win
            try:
                await old.read_barrier()
                break
            except ProposalDropped:
                with_retry += 1
                await asyncio.sleep(0.01)
        killed = old.node_id
        t0 = time.perf_counter()
        await self.multis[killed].remove_group(GROUP, abort=True)
        await _until(lambda: self.leader() is not None, 30)
        took = time.perf_counter() - t0
        await self.add(killed)
        return took

    async def stop(self) -> None:
        for multi in self.multis.values():
            await multi.stop()
        for m in self.meshes:
            await m.stop()


async def main(args: argparse.Namespace) -> None:
    config = RaftConfig(heartbeat_ms=args.heartbeat_ms,
                        election_timeout_ms=args.election_timeout_ms)
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        b = Bench(Path(tmp), config)
        await b.start()
        try:
            for proposers in (1, 64):
                r = await b.write_phase(proposers, args.seconds)
                rows.append((f"writes, {proposers} proposer(s)",
                             f"{r['per_s']:8.0f}/s  p50 {r['p50_ms']:6.2f} ms  "
                             f"p99 {r['p99_ms']:6.2f} ms  ({r['writes']:.0f} writes, "
                             f"{r['writes_per_fsync']:.1f}/leader fsync)"))
            times = [await b.election_round() for _ in range(args.elections)]
            rows.append((f"election after leader kill (n={len(times)})",
                         f"median {statistics.median(times) * 1e3:6.0f} ms  "
                         f"min {min(times) * 1e3:.0f}  max {max(times) * 1e3:.0f} ms"))
        finally:
            await b.stop()
    print(f"raft: 3 voters, one process over real QUIC, fsync on; heartbeat "
          f"{config.heartbeat_ms} ms, election timeout {config.election_timeout_ms} ms")
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


def cli() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=5.0, help="per write phase")
    p.add_argument("--elections", type=int, default=20, help="leader kills to time")
    p.add_argument("--heartbeat-ms", type=int, default=250)
    p.add_argument("--election-timeout-ms", type=int, default=299)
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()
