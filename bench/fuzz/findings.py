"""Internal errors the broker logs while fuzzed, tied back to the frames that caused them.

The broker logs ``closing connection from HOST after an internal error`` and a
traceback when a handler raises something it did not expect (the connection is closed,
the broker carries on). The log names no port, so the batches the broker closed are
remembered with the time they were closed; the log is tailed during the run and each
internal error takes as candidates the batches closed around its timestamp. Afterwards,
with nothing but the healthy clients running, each candidate frame is replayed alone on a
fresh connection until one makes the broker log the same error: that frame is the
reproducer reported.
"""

from __future__ import annotations

import datetime
import re
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz.campaign import sentinel_frame
from bench.fuzz.mutate import Mutated

_INTERNAL = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) .*closing connection from "
                       r".* after an internal error")
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")
CANDIDATES = 80  # batches kept per finding to replay
WINDOW = (-0.5, 2.0)  # seconds around the log line in which the batch's close was seen


def traceback_signature(lines: list[str]) -> str:
    """The exception line and the deepest frame in eddy's code, numbers as N."""
    exc = next((ln for ln in reversed(lines) if ln and not ln.startswith(" ")), "?")
    where = [ln.strip() for ln in lines if ln.strip().startswith("File ") and "/eddy/" in ln]
    sig = f"{exc.strip()} at {where[-1] if where else '?'}"
    return re.sub(r"\d+", "N", sig.replace('File "', "").replace('"', ""))[:220]


class LogTail:
    """New internal errors in the broker's log since the last poll: (time, signature)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._partial = ""

    def poll(self) -> list[tuple[float, str]]:
        try:
            with self.path.open(errors="replace") as f:
                f.seek(self._pos)
                text = f.read()
                self._pos = f.tell()
        except OSError:
            return []
        text = self._partial + text
        lines = text.split("\n")
        # keep an unfinished last entry for next time (its traceback may still be coming)
        last_entry = max((i for i, ln in enumerate(lines) if _LOG_LINE.match(ln)), default=0)
        self._partial = "\n".join(lines[last_entry:])
        lines = lines[:last_entry]
        out: list[tuple[float, str]] = []
        for i, line in enumerate(lines):
            m = _INTERNAL.search(line)
            if not m:
                continue
            tb: list[str] = []
            for nxt in lines[i + 1 :]:
                if _LOG_LINE.match(nxt):
                    break
                tb.append(nxt)
            when = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
            out.append((when.timestamp(), traceback_signature(tb)))
        return out

    def flush(self) -> list[tuple[float, str]]:
        """Everything, the unfinished last entry included."""
        found = self.poll()
        if self._partial:
            self._partial += "\n2000-01-01 00:00:00,000 END "
            found += self.poll()
            self._partial = ""
        return found


@dataclass
class Finding:
    signature: str
    count: int = 0
    batches: list[list[Mutated]] = field(default_factory=list)  # candidates, a few
    reproducer: Mutated | None = None


class InternalErrors:
    """The batches the broker closed lately (bounded), and the internal errors it logged
    with the batches closed around them."""

    def __init__(self, log_path: Path, remember: int = 30_000) -> None:
        self.tail = LogTail(log_path)
        self._closed: deque[tuple[float, list[Mutated]]] = deque(maxlen=remember)
        self.findings: dict[str, Finding] = {}

    def closed(self, frames: list[Mutated]) -> None:
        self._closed.append((time.time(), frames))

    def poll(self, final: bool = False) -> None:
        for when, sig in (self.tail.flush() if final else self.tail.poll()):
            f = self.findings.setdefault(sig, Finding(sig))
            f.count += 1
            if len(f.batches) >= CANDIDATES:
                continue
            lo, hi = when + WINDOW[0], when + WINDOW[1]
            near = sorted(((abs(t - when), i) for i, (t, _) in enumerate(self._closed)
                           if lo <= t <= hi), key=lambda p: p[0])
            # the nearest closes of each of the first few occurrences
            for _, i in near[: CANDIDATES // 4]:
                batch = self._closed[i][1]
                if all(batch is not x for x in f.batches):
                    f.batches.append(batch)

    def reproduce(self, port: int, per_finding_s: float = 20.0) -> None:
        """Replay the candidate batches' frames one at a time, each on a new connection,
        until one makes the broker log the same internal error."""
        for f in self.findings.values():
            deadline = time.monotonic() + per_finding_s
            for frame in (m for batch in f.batches for m in batch):
                if time.monotonic() > deadline or f.reproducer is not None:
                    break
                _replay(port, frame.frame, bad_size=frame.bad_size)
                if any(sig == f.signature for _, sig in self.tail.flush()):
                    f.reproducer = frame


def _replay(port: int, frame: bytes, bad_size: bool) -> None:
    """Send one frame (then a sentinel, or a half-close) and wait for the answer or the
    close (the broker logs an internal error before it closes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(frame if bad_size else frame + sentinel_frame(0x7ABCDEF0))
        if bad_size:
            s.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 3
        buf = b""
        try:
            while time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if struct.pack(">i", 0x7ABCDEF0) in buf:
                    break
        except OSError:
            pass
