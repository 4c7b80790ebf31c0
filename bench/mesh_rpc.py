"""`python -m bench.mesh_rpc`: the mesh QUIC transport between two processes on loopback.

A server process runs a MeshTransport that echoes small requests and acknowledges large ones
with 2 bytes; this process dials it and measures request/response round trips per second with
p50/p99 latency at 1 and 32 requests in flight (64-byte payloads), then bytes/s of 1 MiB
requests on the one connection (1 and 4 in flight). Prints a table; never asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import time
from multiprocessing.connection import Connection

from eddy.mesh.identity import NodeIdentity
from eddy.mesh.quic.transport import MeshTransport

MIB = 1024 * 1024


def _use_uvloop(enabled: bool) -> None:
    if not enabled:
        return
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _server(pipe: Connection, uvloop_on: bool) -> None:
    _use_uvloop(uvloop_on)

    async def handler(peer: bytes, data: bytes) -> bytes:
        return data if len(data) <= 4096 else b"ok"

    async def main() -> None:
        t = MeshTransport(NodeIdentity.generate(), "127.0.0.1", 0, on_request=handler,
                          on_message=lambda p, d: None, max_stream_bytes=4 * MIB)
        addr = await t.start()
        pipe.send((addr, t.node_id))
        await asyncio.get_running_loop().run_in_executor(None, pipe.recv)  # wait for "stop"
        await t.close()

    asyncio.run(main())


def _pct(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


async def _rpc_phase(t: MeshTransport, peer: bytes, inflight: int, seconds: float,
                     size: int) -> dict[str, float]:
    payload = os.urandom(size)
    latencies: list[float] = []
    done = 0
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await t.request(peer, payload, timeout_s=30)
            latencies.append(time.perf_counter() - t0)
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    elapsed = time.perf_counter() - start
    return {
        "ops": done / elapsed,
        "p50_ms": _pct(latencies, 0.50) * 1e3,
        "p99_ms": _pct(latencies, 0.99) * 1e3,
        "mb_s": done * size / elapsed / 1e6,
    }


async def _client(addr: tuple[str, int], expected: bytes, seconds: float,
                  ) -> list[tuple[str, dict[str, float]]]:
    async def echo(peer: bytes, data: bytes) -> bytes:
        return data

    t = MeshTransport(NodeIdentity.generate(), "127.0.0.1", 0, on_request=echo,
                      on_message=lambda p, d: None)
    await t.start()
    peer = await t.connect(addr, expected=expected)
    await _rpc_phase(t, peer, 8, min(0.5, seconds), 64)  # warm up
    rows = []
    for label, inflight, size in (
        ("64 B rpc, 1 in flight", 1, 64),
        ("64 B rpc, 32 in flight", 32, 64),
        ("1 MiB requests, 1 in flight", 1, MIB),
        ("1 MiB requests, 4 in flight", 4, MIB),
    ):
        rows.append((label, await _rpc_phase(t, peer, inflight, seconds, size)))
    await t.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.mesh_rpc", description=__doc__)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each phase (3)")
    ap.add_argument("--no-uvloop", action="store_true", help="use asyncio's default loop")
    args = ap.parse_args(argv)
    uvloop_on = not args.no_uvloop
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_server, args=(child, uvloop_on), daemon=True)
    proc.start()
    try:
        if not parent.poll(30):
            raise SystemExit("mesh_rpc: the server process did not start")
        addr, node_id = parent.recv()
        _use_uvloop(uvloop_on)
        rows = asyncio.run(_client(tuple(addr), node_id, args.seconds))
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()
    loop_name = "uvloop" if uvloop_on else "asyncio"
    print(f"mesh QUIC transport, two processes on 127.0.0.1 ({loop_name}, "
          f"{args.seconds:g} s per phase)")
    print(f"{'phase':<30} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'MB/s':>9}")
    for label, r in rows:
        print(f"{label:<30} {r['ops']:>10.0f} {r['p50_ms']:>9.2f} {r['p99_ms']:>9.2f} "
              f"{r['mb_s']:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
