"""The console's routes on the admin listener's aiohttp app: the pages (``/`` and
``/console/...``), their JSON endpoints (``/console/api/...``), and the two static files
of the package (``/console/static/console.js|css``; nothing else is served from disk).

Every response forbids loading anything from elsewhere (Content-Security-Policy
``default-src 'self'``); a bad query parameter is a 400 (or 404) JSON naming it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

from aiohttp import web

from eddy.observe.console import gather, pages
from eddy.observe.console import groups as groups_data
from eddy.observe.console.decode.values import SchemaLookup
from eddy.observe.console.html import page
from eddy.observe.console.messages import MessageBrowser, parse_query
from eddy.observe.console.params import ParamError, check_topic
from eddy.observe.console.sampler import Sampler

if TYPE_CHECKING:
    from eddy.node.parts import Node
    from eddy.observe.pipelines import PipelineSource

CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
STATIC = {"console.js": "text/javascript", "console.css": "text/css"}
_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200) -> web.Response:
    body = json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    return web.Response(body=body, status=status, content_type="application/json",
                        headers=_HEADERS)


def _html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html",
                        charset="utf-8", headers=_HEADERS)


class Console:
    """The web console of ``node``, reading its state on the event loop."""

    def __init__(self, node: Node, readiness: gather.Readiness,
                 pipelines: PipelineSource | None = None) -> None:
        self.node = node
        self.readiness = readiness
        self.pipeline_reports = pipelines
        self.broker = gather.broker_of(node)
        self.sampler = Sampler(self.broker)
        self.browser = MessageBrowser(self.broker, SchemaLookup(node.registry))
        self._static = {name: resources.files("eddy.observe.console").joinpath(
            "static", name).read_bytes() for name in STATIC}

    def mount(self, app: web.Application) -> None:
        r = app.router
        pages_ = {"/": self._overview_page, "/console/raft": self._raft_page,
                  "/console/topics": self._topics_page, "/console/messages": self._messages_page,
                  "/console/groups": self._groups_page,
                  "/console/transactions": self._transactions_page,
                  "/console/pipelines": self._pipelines_page,
                  "/console/metrics": self._metrics_page}
        for path, handler in pages_.items():
            r.add_get(path, handler)
        r.add_get("/console/topics/{name}", self._topic_page)
        api = {"overview": self.overview, "raft": self.raft, "topics": self.topics,
               "groups": self.groups, "transactions": self.transactions,
               "pipelines": self.pipelines, "metrics": self.metrics}
        for name, get in api.items():
            r.add_get(f"/console/api/{name}", self._api(get))
        r.add_get("/console/api/topics/{name}", self._api(self.topic))
        r.add_get("/console/api/messages", self._messages_api)
        r.add_get("/console/static/{file}", self._static_file)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)

    async def _start(self, _app: web.Application) -> None:
        self.sampler.start()

    async def _stop(self, _app: web.Application) -> None:
        await self.sampler.stop()

    # ---- data ----------------------------------------------------------------------------

    def overview(self, _r: web.Request) -> dict[str, Any]:
        return gather.overview(self.node, self.readiness)

    def raft(self, _r: web.Request) -> dict[str, Any]:
        return gather.raft(self.node)

    def topics(self, _r: web.Request) -> dict[str, Any]:
        return gather.topics(self.node, self.sampler)

    def topic(self, request: web.Request) -> dict[str, Any]:
        return gather.topic(self.node, check_topic(request.match_info["name"], "name"))

    def groups(self, _r: web.Request) -> dict[str, Any]:
        return groups_data.groups(self.node, self.sampler)

    def transactions(self, _r: web.Request) -> dict[str, Any]:
        return gather.transactions(self.node)

    def pipelines(self, _r: web.Request) -> dict[str, Any]:
        return gather.pipelines(self.node, self.pipeline_reports)

    def metrics(self, _r: web.Request) -> dict[str, Any]:
        return gather.metrics(self.sampler)

    # ---- handlers ------------------------------------------------------------------------

    def _api(self, get: Callable[[web.Request], dict[str, Any]]) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                return _json(get(request))
            except ParamError as exc:
                return _json(exc.to_json(), exc.status)
        return handle

    async def _messages_api(self, request: web.Request) -> web.Response:
        try:
            return _json(await self.browser.browse(parse_query(request.query)))
        except ParamError as exc:
            return _json(exc.to_json(), exc.status)

    async def _static_file(self, request: web.Request) -> web.Response:
        name = request.match_info["file"]
        if name not in STATIC:
            return _json({"error": "Not Found", "path": request.path[:200]}, 404)
        return web.Response(body=self._static[name], content_type=STATIC[name],
                            headers={**_HEADERS, "Cache-Control": "max-age=60"})

    def _page(self, title: str, active: str, body: str) -> web.Response:
        label = f"node {self.node.config.node_id}"
        return _html(page(title, active, body, label))

    async def _overview_page(self, r: web.Request) -> web.Response:
        return self._page("Overview", "/", pages.overview(self.overview(r)))

    async def _raft_page(self, r: web.Request) -> web.Response:
        return self._page("Raft groups", "/console/raft", pages.raft(self.raft(r)))

    async def _topics_page(self, r: web.Request) -> web.Response:
        return self._page("Topics", "/console/topics", pages.topics(self.topics(r)))

    async def _topic_page(self, r: web.Request) -> web.Response:
        try:
            data = self.topic(r)
        except ParamError as exc:
            return _json(exc.to_json(), exc.status)
        return self._page(f"Topic {data['name']}", "/console/topics", pages.topic(data))

    async def _messages_page(self, r: web.Request) -> web.Response:
        keys = ("topic", "partition", "offset", "timestamp", "limit")
        query = {k: r.query.get(k, "")[:256] for k in keys}
        names = [t["name"] for t in self.topics(r)["topics"]]
        data, error = None, ""
        if query["topic"]:
            try:
                data = await self.browser.browse(parse_query(r.query))
            except ParamError as exc:
                error = str(exc)
        return self._page("Messages", "/console/messages",
                          pages.messages(query, names, data, error))

    async def _groups_page(self, r: web.Request) -> web.Response:
        return self._page("Consumer groups", "/console/groups", pages.groups(self.groups(r)))

    async def _transactions_page(self, r: web.Request) -> web.Response:
        return self._page("Transactions", "/console/transactions",
                          pages.transactions(self.transactions(r)))

    async def _pipelines_page(self, r: web.Request) -> web.Response:
        return self._page("Pipelines", "/console/pipelines", pages.pipelines(self.pipelines(r)))

    async def _metrics_page(self, r: web.Request) -> web.Response:
        return self._page("Metrics", "/console/metrics", pages.metrics(self.metrics(r)))


def mount(app: web.Application, node: Node, readiness: gather.Readiness,
          pipelines: PipelineSource | None = None) -> Console:
    """Add the console to ``app`` (the admin listener's); it samples while the app runs.
    ``pipelines``: the pipelines' reports it shows (the metrics' view of them)."""
    console = Console(node, readiness, pipelines)
    console.mount(app)
    return console
