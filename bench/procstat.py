"""Per-process memory and CPU readings: psutil when installed, /proc otherwise."""

from __future__ import annotations

import os

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is optional (the `bench` extra)
    psutil = None

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes(pid: int) -> int | None:
    """Resident set size of one process, in bytes (None if it is gone)."""
    if psutil is not None:
        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return None
    kib = _status_kib(pid, "VmRSS")
    return None if kib is None else kib * 1024


def peak_rss_bytes(pid: int) -> int | None:
    """High-water mark of the resident set (Linux VmHWM), in bytes."""
    kib = _status_kib(pid, "VmHWM")
    return None if kib is None else kib * 1024


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time the process (all its threads) has used so far."""
    if psutil is not None:
        try:
            t = psutil.Process(pid).cpu_times()
            return float(t.user + t.system)
        except psutil.Error:
            return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def self_cpu_seconds() -> float:
    """CPU time of the calling process, all threads (librdkafka's included)."""
    t = os.times()
    return t.user + t.system


def machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy (all cores, all processes), from
    /proc/stat; None where that file is missing. Minus the broker's and the client's own
    CPU over the same interval it is what everything else used (another job's load)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / _CLK_TCK
