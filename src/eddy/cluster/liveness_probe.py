"""Does anything listen at a broker's Kafka address? The controller asks when a broker's
heartbeats are late (``BrokerSessions``): a refused connection means the port is closed, so
the process that held it is gone (killed, crashed, exited), and the broker is fenced at
once instead of a session timeout later. Only a refusal counts: a connection that opens (a
live broker, slow to heartbeat) or a timeout (a network partition drops packets) says
nothing, and the session runs on as before.
"""

from __future__ import annotations

import asyncio

from eddy.config_parse import ConfigError, parse_host_port

__all__ = ["refuses"]


async def refuses(addr: str, timeout_s: float) -> bool:
    """True when a TCP connection to ``addr`` (``host:port``) is refused within
    ``timeout_s``; the connection is closed at once when it opens."""
    try:
        where = parse_host_port(addr, "kafka_addr")
    except ConfigError:
        return False
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(*where)
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError):
        return False
    writer.close()
    return False
