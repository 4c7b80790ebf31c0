"""``TlsHttpListener``: an ``HttpListener`` that serves HTTPS when given a ``TlsContext`` (the
Kafka listeners' PEM material, ``eddy.security.tls``), and plain HTTP without one.

The context is reloaded in place while the listener runs (its PEM files' modification times
checked every ``ssl.reload.check.interval.ms``): new connections get the new material, open
ones keep theirs, as on the Kafka listeners.
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import web

from eddy.http.listener import HttpListener
from eddy.security.tls import TlsContext

__all__ = ["TlsHttpListener"]

#: how often the context is asked whether its reload is due
RELOAD_POLL_S = 1.0


class TlsHttpListener(HttpListener):
    def __init__(self, host: str, port: int, app: web.Application, tls: TlsContext | None,
                 *, shutdown_timeout_s: float = 5.0) -> None:
        super().__init__(host, port, app, shutdown_timeout_s=shutdown_timeout_s,
                         ssl_context=None if tls is None else tls.context)
        self.tls = tls
        self._reloads: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        plain = super().url
        return "https" + plain[len("http"):] if self.tls is not None else plain

    async def start(self) -> None:
        await super().start()
        if self.tls is not None:
            self._reloads = asyncio.get_running_loop().create_task(
                self._reload_forever(self.tls), name="http-tls-reload")

    async def _reload_forever(self, tls: TlsContext) -> None:
        loop = asyncio.get_running_loop()
        while True:  # maybe_reload looks at the files once per its own interval at most
            await asyncio.sleep(RELOAD_POLL_S)
            tls.maybe_reload(loop.time())

    async def stop(self) -> None:
        task, self._reloads = self._reloads, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await super().stop()
