"""Asking a node's mesh listener a control RPC from the CLI, and finding that listener from
a Kafka bootstrap (the node's `mesh.advertised.listener` broker config)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

from eddy.cli.common import REQUEST_TIMEOUT_S, CliError, Conn
from eddy.config_parse import ConfigError, parse_host_port
from eddy.mesh.control import ControlRequest, ControlResponse


def advertised_mesh(conn: Conn, md: Any) -> str | None:
    """The mesh address the bootstrap node reports in its broker configs, if it runs one."""
    host, port = parse_host_port(conn.bootstrap.split(",")[0], "--bootstrap")
    ids = [b.id for b in md.brokers.values() if (b.host, b.port) == (host, port)]
    broker_id = ids[0] if ids else next(iter(md.brokers), None)
    if broker_id is None:
        return None
    res = ConfigResource(ResourceType.BROKER, str(broker_id))
    try:
        fut = conn.admin().describe_configs([res], request_timeout=REQUEST_TIMEOUT_S)[res]
        entries = fut.result(timeout=REQUEST_TIMEOUT_S)
    except Exception:  # an older node or one that does not serve broker configs: no mesh
        return None
    entry = entries.get("mesh.advertised.listener")
    value = getattr(entry, "value", None)
    return str(value) if value else None


def mesh_addr(mesh: str) -> tuple[str, int]:
    try:
        return parse_host_port(mesh, "--mesh")
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


def ask(mesh: str, request: ControlRequest, timeout_s: float) -> ControlResponse:
    from eddy.mesh.client import control_call  # aioquic only when the mesh is asked

    identity = os.environ.get("EDDY_MESH_IDENTITY")
    try:
        return asyncio.run(control_call(mesh_addr(mesh), request, timeout_s,
                                        Path(identity) if identity else None))
    except (TimeoutError, OSError) as exc:
        raise CliError(f"no mesh node answered at {mesh}: {exc or 'timed out'}") from None
    except CliError:
        raise
    except Exception as exc:
        raise CliError(f"mesh node at {mesh}: {type(exc).__name__}: {exc}") from None
