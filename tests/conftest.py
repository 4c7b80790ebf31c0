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
from typing import Any

import parallel
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
# which tests share a worker, and in which order they start: tests/parallel.py


@pytest.hookimpl(trylast=True)  # after xdist's own (older pytest: ids with its suffix)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    parallel.collection_modifyitems(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # the xdist controller, for each worker
    parallel.configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") == "loadgroup":
        return parallel.make_scheduler(config, log)
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    parallel.cleanup(config)


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


@pytest.fixture(scope="module")
def module_eddy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EddyProcess]:
    """One broker with default settings for the tests of a module, started once: for
    modules whose tests each work on topics, groups and ids of their own and look at
    nothing else of the broker (a module says so by making `eddy` this one)."""
    p = EddyProcess(tmp_path_factory.mktemp("module-eddy") / "data").start()
    try:
        yield p
    finally:
        p.kill()
