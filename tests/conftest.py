"""Shared fixtures: a real `eddy serve` process on a free loopback port."""

from __future__ import annotations

import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis' per-example deadline is a timing assertion: on a loaded machine (the suite runs
# beside a CPU hog, or on a shared CI runner) one slow example failed a property test that
# holds. Timings belong in bench/; the properties are checked without a deadline.
settings.register_profile("eddy", deadline=None)
settings.load_profile("eddy")

# The nodes tests start serve no schema registry and no admin listener unless a test sets
# them (to port 0): their default places, the Kafka host's ports 8081 and 9644, would be
# shared by every node of a run (tests/integration/test_default_listeners.py covers them).
os.environ.setdefault("EDDY_REGISTRY_LISTENER", "")
os.environ.setdefault("EDDY_ADMIN_LISTENER", "")

# ------------------------------------------------------------------ running in parallel
#
# scripts/test runs the whole suite with pytest-xdist, `--dist loadgroup`: each xdist group
# runs on one worker, one test after another. Every test starts its servers on free loopback
# ports with data in its own tmp dir, so tests run side by side unless they share something:
#
# - a module-scoped fixture (a server the module's tests share): the module is one group,
#   so the server starts once;
# - a session-scoped fixture of ours (the connect tests' SparkSession): one group per
#   fixture, so one worker starts it once;
# - the replication clusters (tests/system/replication_cluster.py): fixed loopback
#   addresses 127.0.0.2-4, fixed Unix groups, and iptables rules that cut every link between
#   those addresses: every module using it is in the group "loopback-cluster";
# - anything else a file marks with `pytest.mark.xdist_group(NAME)` (mDNS, ...).
#
# A module with one such test is kept whole, in file order (its tests may count on the
# state the earlier ones left on their shared server). The rest is distributed test by test. Long groups are handed out first (HEAVY_FIRST), the
# unit tests last: the many short ones fill the workers' gaps at the end.

#: groups (or path prefixes) in the order they start; anything else after them, unit last
HEAVY_FIRST = ("loopback-cluster", "spark", "tests/system/", "tests/connect/",
               "tests/integration/")


def _uses_replication_cluster(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and any(
        getattr(v, "__module__", None) == "replication_cluster" for v in vars(module).values())


def _shared_by(item: pytest.Item) -> str | None:
    """What `item` shares with other tests: the group that says so, or None."""
    if _uses_replication_cluster(item):
        return "loopback-cluster"
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    shared = None
    for name in item.fixturenames:  # type: ignore[attr-defined]
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if not fixturedef.baseid:  # pytest's and plugins' own (tmp_path_factory, ...)
                continue
            if fixturedef.scope == "session":
                return name
            if fixturedef.scope in ("package", "module", "class"):
                shared = item.nodeid.split("::")[0]
    return shared


def _group(item: pytest.Item) -> str:
    names = [str(m.args[0] if m.args else m.kwargs.get("name", "default"))
             for m in item.iter_markers("xdist_group")]
    return "_".join(sorted(set(names))) if names else item.nodeid


def _rank(item: pytest.Item) -> int:
    group = _group(item)
    for i, key in enumerate(HEAVY_FIRST):
        if group == key or (key.endswith("/") and group.startswith(key)):
            return i
    return len(HEAVY_FIRST)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a module is kept whole when any of its tests shares something (its tests may count
    # on running in order on one server); the strongest reason names the group: the
    # loopback cluster, then a session fixture, then the module's own
    def rank(group: str, path: str) -> int:
        return 0 if group == "loopback-cluster" else 2 if group == path else 1

    module_group: dict[str, str] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        group = _shared_by(item)
        if group is not None and (path not in module_group
                                  or rank(group, path) < rank(module_group[path], path)):
            module_group[path] = group
    for item in items:
        group = module_group.get(item.nodeid.split("::")[0])
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_rank)  # stable: file order within a rank


def _port_slice() -> range:
    """This xdist worker's own ports, below the kernel's ephemeral range (where port 0 and
    every client connection take theirs)."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    low, size = 10000, 1000
    slices = max(1, (ephemeral - low) // size)
    start = low + (int(worker) if worker.isdigit() else 0) % slices * size
    return range(start, start + size)


_PORTS = _port_slice()
_next_port = random.randrange(len(_PORTS))  # another run on this host: likely elsewhere


def free_port(host: str = "127.0.0.1", kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    """A port on `host` that nobody holds now, for a server whose port a test must know
    before it starts (a voters list, a port kept over restarts) or for an address where
    nobody listens. A port bound then closed, as port 0 would pick, can be taken by another
    process before the server binds it: on a busy machine (the suite runs in parallel) that
    happened. These come from below the ephemeral range, and from this worker's own slice
    of it, taken in turn."""
    global _next_port
    for _ in range(len(_PORTS)):
        port = _PORTS[_next_port % len(_PORTS)]
        _next_port += 1
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise AssertionError(f"no free port on {host} in {_PORTS}")


READY = "EDDY_READY kafka="
MESH = "EDDY_MESH "


class EddyProcess:
    """One broker process with its own data dir; restartable on the same port."""

    def __init__(self, data_dir: Path, extra_args: list[str] | None = None,
                 preexec_fn: Callable[[], None] | None = None) -> None:
        self.data_dir = data_dir
        self.extra_args = list(extra_args or [])
        self.preexec_fn = preexec_fn  # run in the child before exec (e.g. to set rlimits)
        self.port = 0
        self.mesh = ""  # the mesh listener HOST:PORT, when the node runs the mesh
        self.node_key = ""  # its NodeId (hex)
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> EddyProcess:
        assert self.proc is None, "already running"
        cmd = [
            sys.executable, "-m", "eddy", "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--data-dir", str(self.data_dir),
            *self.extra_args,
        ]
        log = open(self.log_path, "a")  # noqa: SIM115 - kept open for the process' life
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ},
            preexec_fn=self.preexec_fn,
        )
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"eddy exited with {self.proc.returncode}:\n{self.logs()}")
            if sel.select(timeout=0.2):
                line = self.proc.stdout.readline()
                if line.startswith(MESH):  # READY follows at once, maybe already buffered
                    fields = dict(f.split("=", 1) for f in line.split()[1:])
                    self.mesh, self.node_key = fields["mesh"], fields["node"]
                    line = self.proc.stdout.readline()
                if line.startswith(READY):
                    self.port = int(line.strip().rsplit(":", 1)[1])
                    return self
        self.kill()
        raise RuntimeError(f"eddy did not become ready in {timeout}s:\n{self.logs()}")

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, no shutdown work at all."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def restart(self) -> EddyProcess:
        if self.proc is not None:
            self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> str:
        try:
            return self.log_path.read_text()
        except FileNotFoundError:
            return ""


@pytest.fixture
def eddy_factory(tmp_path: Path) -> Iterator[object]:
    """Start brokers with `eddy_factory(*extra_args)`; all are stopped at the end."""
    procs: list[EddyProcess] = []

    def make(*extra_args: str, name: str = "data") -> EddyProcess:
        p = EddyProcess(tmp_path / f"{name}{len(procs)}", list(extra_args))
        procs.append(p)
        return p.start()

    yield make
    for p in procs:
        p.kill()


@pytest.fixture
def eddy(eddy_factory) -> EddyProcess:  # type: ignore[no-untyped-def]
    """A running broker with default settings."""
    return eddy_factory()  # type: ignore[no-any-return, operator]
