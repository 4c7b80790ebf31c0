"""Helpers for tests that run several `eddy serve` processes joined by the mesh."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from conftest import EddyProcess


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: the operator key tools dial with (EDDY_MESH_IDENTITY), for clusters with an allow-list
OPERATOR: dict[str, str] = {}


def mesh_status(node: EddyProcess, timeout: float = 10.0) -> dict[str, Any]:
    """`eddy cluster status --mesh ... --output json` of one node."""
    out = subprocess.run(
        [sys.executable, "-m", "eddy", "cluster", "status", "--mesh", node.mesh,
         "--output", "json"],
        capture_output=True, text=True, timeout=timeout + 20,
        env={**os.environ, "EDDY_MESH_TIMEOUT": str(timeout), **OPERATOR},
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def states(node: EddyProcess) -> dict[str, str]:
    """NodeId (hex) -> state, as `node` sees the mesh."""
    return {n["node_key"]: n["state"] for n in mesh_status(node)["nodes"]}


def wait_for(check: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.25) -> float:
    """Poll `check` until it holds; returns the seconds it took."""
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"not within {timeout} s: {what}")
