"""Mesh services in one process over real QUIC on loopback: announcements too big for a
datagram travel by pointer and are pulled, routes follow, dead nodes drop out."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from eddy.clock import WallClock
from eddy.config import load_config
from eddy.mesh.directory import DEAD
from eddy.mesh.frames import TAG_POINTER_PULL
from eddy.mesh.identity import NodeIdentity
from eddy.mesh.service import MeshService


def service(tmp: Path, i: int, seed: str) -> MeshService:
    cfg = load_config(env={}, overrides={
        "node_id": i, "data_dir": str(tmp / f"n{i}"), "mesh.listener": "127.0.0.1:0",
        "mesh.seeds": seed, "mesh.ping.interval.ms": 100, "mesh.ping.max.unacked": 3})
    return MeshService(cfg, NodeIdentity.generate(), WallClock(), ("127.0.0.1", 9000 + i),
                       random.Random(i))


async def until(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_big_announcements_travel_by_pointer_and_routes_follow(tmp_path: Path) -> None:
    async def go() -> None:
        a = service(tmp_path, 1, "")
        topics = {f"topic-with-a-long-name-{i:04d}": i % 7 + 1 for i in range(200)}
        a.hosted = lambda: (topics, frozenset({"group-a"}))
        _, port = await a.start()
        b = service(tmp_path, 2, f"127.0.0.1:{port}")
        c = service(tmp_path, 3, f"127.0.0.1:{port}")
        await b.start()
        await c.start()
        try:
            await until(lambda: len(c.directory.topics()) == 200, 20,
                        "node 3 learns node 1's 200 topics")
            route = c.directory.topic("topic-with-a-long-name-0009")
            assert route is not None and (route.node_id, route.partitions) == (1, 3)
            assert c.directory.group_owner("group-a") == 1
            pulls = sum(s.rpc.frames_in.get(TAG_POINTER_PULL, 0) for s in (a, b))
            assert pulls >= 1, "the announcement was pulled by pointer"
            topics["late-topic"] = 2  # a change is announced again
            await until(lambda: b.directory.topic("late-topic") is not None, 20,
                        "a new topic reaches node 2")
            assert a.transport is not None and a._runner is not None
            a.transport.abort()  # a crash: no goodbye
            a._runner.cancel()
            await until(lambda: b.directory.members[a.key].state == DEAD
                        and c.directory.members[a.key].state == DEAD, 20,
                        "node 1 dead on both others")
            gone = c.directory.topic("topic-with-a-long-name-0009")
            assert gone is not None and not gone.available  # listed on its node, no leader
        finally:
            for s in (b, c):
                await s.stop()

    asyncio.run(go())
