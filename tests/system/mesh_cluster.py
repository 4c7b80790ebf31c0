"""Helpers for tests that run several `eddy serve` processes joined by the mesh."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import EddyProcess, free_port


def free_udp_port() -> int:
    return free_port(kind=socket.SOCK_DGRAM)


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


def mesh_nodes(node: EddyProcess, timeout: float = 10.0) -> list[Any]:
    """The nodes `node` knows on the mesh (eddy.mesh.control.NodeStatus: node_key,
    kafka_node_id, state, ...): the status request `eddy cluster status --mesh` makes
    (mesh_status runs that command), made in this process with the same tool key
    (EDDY_MESH_IDENTITY). For the loops that wait on the mesh: an interpreter started for
    each poll cost more CPU than the nodes being watched."""
    from eddy.mesh.client import control_call
    from eddy.mesh.control import StatusRequest, StatusResponse

    identity = OPERATOR.get("EDDY_MESH_IDENTITY") or os.environ.get("EDDY_MESH_IDENTITY")
    host, port = node.mesh.rsplit(":", 1)
    answer = asyncio.run(control_call((host, int(port)), StatusRequest(), timeout,
                                      Path(identity) if identity else None))
    assert isinstance(answer, StatusResponse), answer
    return list(answer.nodes)


def states(node: EddyProcess) -> dict[str, str]:
    """NodeId (hex) -> state, as `node` sees the mesh."""
    return {n.node_key.hex(): n.state for n in mesh_nodes(node)}


def node_states(node: EddyProcess) -> dict[int, str]:
    """Kafka node id -> state, as `node` sees the mesh."""
    return {n.kafka_node_id: n.state for n in mesh_nodes(node)}


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
