"""Run a broker process: load state, listen, stop cleanly on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time

from eddy.broker.broker import Broker
from eddy.broker.server import KafkaServer
from eddy.clock import WallClock
from eddy.config import BrokerConfig

log = logging.getLogger("eddy")


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


def run(config: BrokerConfig) -> None:
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        import uvloop

        uvloop.run(serve(config))
    except ImportError:
        asyncio.run(serve(config))
