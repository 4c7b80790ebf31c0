"""Network partitions between a cluster's nodes (iptables) and the CPU hog.

`NetFaults` (the scheme of tests/system/replication_cluster): every node process runs in its
own Unix group; an OUTPUT rule sets the connection mark of every connection a node opens
(conntrack), so INPUT rules can drop a link whatever source address the kernel picked for
an unbound socket (127.0.0.1 for every loopback destination). Packets are dropped in INPUT,
never OUTPUT: a DROP in OUTPUT fails the sender's syscall with EPERM at once, unlike a lost
link. The chains are named after this process, so runs side by side never touch each other.

`Hog`: one busy-looping process per core for as long as it is held (the "CPU hog" of
issue 28: the cluster, its clients and the harness compete with it for every core).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import TracebackType

from bench.chaos.cluster import IDS, address, gid_of, mark_of


def _iptables(*args: str, check: bool = True) -> None:
    out = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True,
                         timeout=30)
    if check and out.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)}: {out.stderr.strip()}")


class NetFaults:
    """iptables chains of one run: marks (OUTPUT) and drops (INPUT)."""

    def __init__(self, block: int) -> None:
        self.block = block
        tag = f"{os.getpid() % 100000}_{block}"
        self.mark, self.drop = f"EDDY_CM{tag}", f"EDDY_CD{tag}"

    def install(self) -> None:
        for chain, hook in ((self.mark, "OUTPUT"), (self.drop, "INPUT")):
            _iptables("-N", chain)
            _iptables("-I", hook, "-j", chain)
        for i in IDS:
            _iptables("-A", self.mark, "-m", "conntrack", "--ctstate", "NEW", "-m", "owner",
                      "--gid-owner", str(gid_of(self.block, i)), "-j", "CONNMARK",
                      "--set-mark", str(mark_of(self.block, i)))

    def remove(self) -> None:
        for chain, hook in ((self.mark, "OUTPUT"), (self.drop, "INPUT")):
            _iptables("-D", hook, "-j", chain, check=False)
            _iptables("-F", chain, check=False)
            _iptables("-X", chain, check=False)

    def cut(self, a: int, b: int) -> None:
        """Drop every packet between nodes a and b (both ways); clients unaffected."""
        for x, y in ((a, b), (b, a)):
            _iptables("-A", self.drop, "-s", address(self.block, x), "-d",
                      address(self.block, y), "-j", "DROP")
            # connections x opened (from whatever source address) to y's listeners
            for direction in ("-d", "-s"):
                _iptables("-A", self.drop, "-m", "connmark", "--mark",
                          str(mark_of(self.block, x)), direction, address(self.block, y),
                          "-j", "DROP")

    def isolate(self, node: int) -> None:
        for other in IDS:
            if other != node:
                self.cut(node, other)

    def heal(self) -> None:
        _iptables("-F", self.drop)


@contextmanager
def net_faults(block: int) -> Iterator[NetFaults]:
    faults = NetFaults(block)
    try:
        faults.install()
        yield faults
    finally:
        faults.remove()


_BUSY = "while True:\n    pass\n"


class Hog:
    """`with Hog(on):` busy-loops one process per core (none when `on` is false)."""

    def __init__(self, on: bool = True, cores: int | None = None) -> None:
        self.on = on
        self.cores = cores or os.cpu_count() or 1
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Hog:
        if self.on:
            self.procs = [subprocess.Popen([sys.executable, "-c", _BUSY],
                                           stdin=subprocess.DEVNULL)
                          for _ in range(self.cores)]
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for p in self.procs:
            with suppress(ProcessLookupError):
                p.kill()
            p.wait()
        self.procs = []
