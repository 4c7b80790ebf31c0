"""Raft log storage: `python -m bench.raft_storage [--seconds S] [--smoke] [--dir D]`.

1. appends/s with an fsync per batch (append + sync, the driver's group commit), batch sizes
   1/16/256, entry sizes 100 B / 4 KiB; once with the log only, once with the hard state's
   commit moving every batch (so `state.bin` is rewritten atomically each sync too);
2. recovery: open a 100k-entry log (100 B entries) and time the scan that validates it.

Numbers depend on the disk's fsync latency (tmpfs has none: point --dir at the real data
disk). Nothing is asserted; a table goes to stdout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

from eddy.cluster.raft.storage.disk import RaftStorage
from eddy.cluster.raft.types import Entry, HardState


def _appends(directory: str, batch: int, size: int, seconds: float, hard_state: bool,
             max_entries: int) -> tuple[float, float, float]:
    """(entries/s, batches/s, MiB/s)"""
    path = tempfile.mkdtemp(dir=directory)
    s = RaftStorage(path)
    payload = os.urandom(size)
    index = 1
    start = time.perf_counter()
    deadline = start + seconds
    batches = 0
    while True:
        s.append([Entry(term=1, index=i, kind=0, data=payload)
                  for i in range(index, index + batch)])
        index += batch
        if hard_state:
            s.set_hard_state(HardState(term=1, vote=1, commit=index - 1))
        s.sync()
        batches += 1
        now = time.perf_counter()
        if now >= deadline or index > max_entries:
            break
    elapsed = time.perf_counter() - start
    s.close()
    shutil.rmtree(path)
    n = index - 1
    return n / elapsed, batches / elapsed, n * size / elapsed / (1 << 20)


def _recovery(directory: str, entries: int, size: int) -> tuple[float, float, int]:
    """(seconds to open, seconds to write, segments)"""
    path = tempfile.mkdtemp(dir=directory)
    payload = os.urandom(size)
    t0 = time.perf_counter()
    s = RaftStorage(path, segment_bytes=4 * 1024 * 1024)
    for lo in range(1, entries + 1, 1000):
        s.append([Entry(term=1 + lo // 10_000, index=i, kind=0, data=payload)
                  for i in range(lo, min(lo + 1000, entries + 1))])
    s.sync()
    s.close()
    written = time.perf_counter() - t0
    t1 = time.perf_counter()
    s = RaftStorage(path)
    opened = time.perf_counter() - t1
    assert s.last_index() == entries
    segs = sum(1 for n in os.listdir(path) if n.endswith(".log"))
    s.close()
    shutil.rmtree(path)
    return opened, written, segs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=1.5, help="per append measurement")
    p.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    p.add_argument("--recovery-entries", type=int, default=100_000)
    p.add_argument("--smoke", action="store_true", help="a tiny run (CI)")
    args = p.parse_args(argv)
    seconds = 0.1 if args.smoke else args.seconds
    recovery_entries = 2_000 if args.smoke else args.recovery_entries
    max_entries = 5_000 if args.smoke else 10_000_000
    base = tempfile.mkdtemp(prefix="bench-raft-", dir=args.dir)
    try:
        print(f"raft storage on {base} ({seconds:g} s per row, fsync per batch)")
        print(f"{'batch':>6} {'entry':>6} {'hard state':>10} {'entries/s':>11} "
              f"{'syncs/s':>9} {'MiB/s':>8}")
        for size in (100, 4096):
            for batch in (1, 16, 256):
                for hs in (False, True):
                    eps, bps, mibs = _appends(base, batch, size, seconds, hs, max_entries)
                    print(f"{batch:>6} {size:>6} {'per sync' if hs else '-':>10} {eps:>11,.0f} "
                          f"{bps:>9,.0f} {mibs:>8.1f}", flush=True)
        opened, written, segs = _recovery(base, recovery_entries, 100)
        print(f"recovery: {recovery_entries:,} entries of 100 B in {segs} segments: open "
              f"{opened * 1000:.0f} ms ({recovery_entries / opened:,.0f} entries/s); "
              f"written in {written * 1000:.0f} ms")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
