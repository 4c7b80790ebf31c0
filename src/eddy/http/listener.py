"""``HttpListener``: an aiohttp application served on the running event loop (the schema
registry's and the admin listener's), on HOST:PORT (port 0: any free port, the bound one
known once started), keep-alive connections, no access log, closed with a short grace."""

from __future__ import annotations

import ssl

from aiohttp import web


class HttpListener:
    def __init__(self, host: str, port: int, app: web.Application, *,
                 shutdown_timeout_s: float = 5.0, ssl_context: ssl.SSLContext | None = None
                 ) -> None:
        self.host = host
        self.port = port  # the bound port once started (0 asks for any free port)
        self.app = app
        self._shutdown_timeout_s = shutdown_timeout_s
        self._runner: web.AppRunner | None = None
        self._ssl_context = ssl_context  # HTTPS when set

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        runner = web.AppRunner(self.app, handle_signals=False, access_log=None,
                               keepalive_timeout=75.0,
                               shutdown_timeout=self._shutdown_timeout_s)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, reuse_address=True,
                               ssl_context=self._ssl_context)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        addresses = runner.addresses
        if addresses:
            self.port = int(addresses[0][1])

    async def stop(self) -> None:
        """Close the listener and every connection (requests in flight get the grace)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
