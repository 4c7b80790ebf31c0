"""Run a broker process: load state, listen, stop cleanly on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.server import KafkaServer
from eddy.clock import WallClock
from eddy.config import BrokerConfig
from eddy.log.dir_lock import DataDirLock
from eddy.log.file_cache import FILES

log = logging.getLogger("eddy")

#: a hard limit of "unlimited" still cannot go past the kernel's fs.nr_open (1M by default)
_NOFILE_CEILING = 1 << 20


async def serve(config: BrokerConfig, ready_line: bool = True) -> None:
    started = time.perf_counter()
    broker = Broker(config, WallClock())
    broker.load()
    server = KafkaServer(broker)
    port = await server.start()
    broker.start_maintenance()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    elapsed_ms = (time.perf_counter() - started) * 1000
    log.info(
        "eddy node %d ready in %.0f ms: Kafka on %s:%d (advertised %s:%d), data in %s, "
        "%d topics",
        config.node_id, elapsed_ms, config.listen_address[0], port, broker.host, broker.port,
        config.data_dir, len(broker.logs.topics),
    )
    if ready_line:
        # machine-readable line for scripts and tests that start `eddy serve --listen :0`
        print(f"EDDY_READY kafka={broker.host}:{broker.port}", flush=True)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    await broker.stop()
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
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
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
