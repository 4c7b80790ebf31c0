"""Run a broker process: load state, listen, stop cleanly on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import resource
import signal
import time
from collections.abc import Callable, Coroutine
from typing import Any

from eddy.clock import WallClock
from eddy.config import BrokerConfig
from eddy.log.dir_lock import DataDirLock
from eddy.log.file_cache import FILES
from eddy.node.parts import start_node, stop_node
from eddy.telemetry import log_format

log = logging.getLogger("eddy")

#: a hard limit of "unlimited" still cannot go past the kernel's fs.nr_open (1M by default)
_NOFILE_CEILING = 1 << 20


async def serve(config: BrokerConfig, ready_line: bool = True) -> None:
    started = time.perf_counter()
    node = await start_node(config, WallClock())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    elapsed_ms = (time.perf_counter() - started) * 1000
    served = node.gateway if node.gateway is not None else node.broker
    assert served is not None
    topics = f"{len(node.broker.logs.topics)} topics" if node.broker else "no partitions"
    log.info(
        "eddy node %d (%s) ready in %.0f ms: Kafka on %s:%d (advertised %s:%d), data in %s, "
        "%s", config.node_id, config.process_roles, elapsed_ms, config.listen_address[0],
        served.port, served.host, served.port, config.data_dir, topics,
    )
    if node.admin is not None:
        log.info("admin on %s (web console /, /metrics, /health/live, /health/ready)",
                 node.admin.url)
    for more in node.more_servers:
        log.info("Kafka listener %s (%s) on %s:%d (advertised %s:%d)", more.listener.name,
                 more.listener.protocol, more.listener.host or "*", more.port,
                 more.node.host, more.node.port)
    if node.registry is not None:
        log.info("schema registry on %s (state in topic _schemas)", node.registry.url)
    if node.mesh is not None:
        log.info("mesh on %s (UDP, QUIC), NodeId %s, seeds: %s", node.mesh.mesh_addr,
                 node.mesh.identity.to_base32(), config.mesh_seeds or "none")
    if ready_line:
        # machine-readable lines for scripts and tests that start `eddy serve --listen :0`
        if node.mesh is not None:
            print(f"EDDY_MESH mesh={node.mesh.mesh_addr} node={node.mesh.key.hex()}",
                  flush=True)
        print(f"EDDY_READY kafka={served.host}:{served.port}", flush=True)
        if node.admin is not None:
            print(f"EDDY_ADMIN url={node.admin.url}", flush=True)
        if node.registry is not None:
            print(f"EDDY_REGISTRY url={node.registry.url}", flush=True)
        if config.listeners is not None:  # each listener (the first is EDDY_READY's)
            for one in (node.server, *node.more_servers):
                print(f"EDDY_LISTENER name={one.listener.name} protocol="
                      f"{one.listener.protocol} kafka={one.node.host}:{one.node.port}",
                      flush=True)
    await stop.wait()
    log.info("shutting down")
    await stop_node(node)
    log.info("stopped cleanly")


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a soft limit of 1,024 is still common)
    and return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-files limit (RLIMIT_NOFILE) from %d to %d: %s",
                        soft, target, exc)
            return soft
        log.info("raised the open-files limit (RLIMIT_NOFILE) from %d to %d", soft, target)
        return target
    return _NOFILE_CEILING if soft == resource.RLIM_INFINITY else soft


def size_file_cache(config: BrokerConfig, fd_limit: int) -> None:
    """Segment and index files kept open: the setting, or half the fd limit (the other half
    is for connections and everything else)."""
    wanted = config.storage_max_open_files or fd_limit // 2
    if wanted >= fd_limit:
        log.warning("storage.max.open.files=%d is not below the open-files limit (%d): files "
                    "will be closed only when fds run out", wanted, fd_limit)
    FILES.set_capacity(wanted)
    log.info("keeping at most %d segment and index files open (storage.max.open.files; "
             "open-files limit %d)", FILES.capacity, fd_limit)


def run(config: BrokerConfig) -> None:
    log_format.configure(config.log_level, config.log_format)
    # aioquic logs every handshake at INFO: the mesh logs what matters about peers itself
    logging.getLogger("quic").setLevel(max(logging.WARNING, logging.getLogger().level))
    size_file_cache(config, raise_open_files_limit())
    run_loop: Callable[[Coroutine[Any, Any, None]], None] = asyncio.run
    with contextlib.suppress(ImportError):
        from uvloop import run as run_loop
    # held from before the first look at the data dir until every file in it is closed
    # (the event loop's executor threads included, which uvloop/asyncio.run wait for)
    with DataDirLock(config.data_dir):
        try:
            run_loop(serve(config))
        finally:
            FILES.close_all()
    # everything is closed and on disk: the interpreter's last garbage collection, over
    # every object the node ever held, took ~1.5 s of a stop on its own (a SIGTERM waited
    # for it); frozen objects are left to the process's end
    gc.freeze()
