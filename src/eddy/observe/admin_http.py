"""The HTTP admin listener (issue 17, ``admin.listener``) of a node with the broker role, on
aiohttp and the node's event loop:

- ``GET /metrics``: the broker's Prometheus metrics (``observe.metrics.BrokerMetrics``), in the text
  format 0.0.4, or in OpenMetrics 1.0.0 when the Accept header asks for it;
- ``GET /health/live``: 200 ``{"status": "live"}`` while the process serves;
- ``GET /health/ready``: 200 ``{"status": "ready", "checks": {...}}`` once the node may take
  clients' requests, else 503 ``{"status": "not ready", "missing": {check: why}, ...}``;
- ``/`` and ``/console/...``: the web console (``eddy.observe.console``);
- any other path 404, another method on a known path 405 (JSON bodies).

Security (``eddy.security.http_auth``, from the node's config): HTTPS with the Kafka
listeners' PEM material (``admin.ssl.enabled``), HTTP basic auth against the cluster's users
(``admin.authentication.method=BASIC``: 401 with ``WWW-Authenticate`` without valid
credentials); when the node has an authorizer, everything but the health checks (the
metrics, the console, any other path) needs DESCRIBE on the cluster (403 otherwise). The
health checks stay open to probes without credentials.

Readiness (``readiness``): the broker's logs are recovered (``Broker.load``, which runs
before any listener starts, so a listening node has them) and, on a cluster (metadata in
Raft), this node's metadata is caught up: the broker is registered with the controller
(``ClusterService.registered``, with a live broker epoch), and its replica of the metadata
group knows a leader, has applied everything it knows to be committed, and holds this
broker's own registration.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from eddy.http.tls_listener import TlsHttpListener
from eddy.observe.console import mount as mount_console
from eddy.observe.metrics import BrokerMetrics, wants_openmetrics
from eddy.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from eddy.security.http_auth import auth_middleware, caller_of, denied_message, http_security

if TYPE_CHECKING:
    from eddy.node.parts import Node

log = logging.getLogger("eddy.admin")

#: requests are GETs: a body is never read, and anything larger is refused by aiohttp
MAX_BODY = 64 * 1024
JSON = "application/json"
#: the paths served without authentication (probes)
OPEN_PATHS = frozenset({"/health/live", "/health/ready"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_response(data: Any, status: int = 200) -> web.Response:
    body = json.dumps(data, separators=(",", ":")).encode()
    return web.Response(body=body, status=status, content_type=JSON)


def readiness(node: Node) -> dict[str, str | None]:
    """Each readiness check of ``node`` mapped to why it fails (None: it passes)."""
    checks: dict[str, str | None] = {
        # Broker.load recovers the logs before start_node starts any listener
        "log_recovery": None if node.broker is not None else "no broker on this node",
    }
    cluster = node.cluster
    if cluster is None:
        return checks
    broker_role = node.broker is not None and cluster.agent is not None
    if broker_role:
        agent = cluster.agent
        if not cluster.registered.is_set():
            checks["registered"] = "not registered with the controller yet"
        elif agent is not None and agent.epoch == 0:
            checks["registered"] = "registering again with the controller"
        else:
            checks["registered"] = None
    checks["metadata"] = _metadata_lag(node)
    return checks


def _metadata_lag(node: Node) -> str | None:
    """Why this node's metadata replica is not caught up (None: it is)."""
    cluster = node.cluster
    assert cluster is not None
    driver = cluster.metadata
    if driver is None or driver.node is None:
        return "metadata group not started"
    status = driver.status()
    if status.leader == 0:
        return "no metadata leader known"
    if status.applied_index < status.commit_index:
        return (f"metadata replica applied up to {status.applied_index} of "
                f"{status.commit_index} committed")
    if node.broker is not None and cluster.agent is not None \
            and cluster.state.broker(cluster.node_id) is None:
        return "this broker's registration is not in the metadata replica yet"
    return None


@web.middleware
async def _admin_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    match = request.match_info
    if match.http_exception is not None:  # no route: 404, or 405 with the methods allowed
        exc = match.http_exception
        refused = json_response({"error": exc.reason, "path": request.path[:200]},
                                exc.status)
        if "Allow" in exc.headers:
            refused.headers["Allow"] = exc.headers["Allow"]
        return refused
    try:
        return await handler(request)
    except web.HTTPException as exc:
        return json_response({"error": exc.reason}, exc.status)
    except Exception:
        log.exception("admin: %s %s failed", request.method, request.path)
        return json_response({"error": "Internal Server Error"}, 500)


def _refusal(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status)


@web.middleware
async def _cluster_describe(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Everything but the health checks needs DESCRIBE on the cluster."""
    caller = caller_of(request)
    if request.path not in OPEN_PATHS and caller is not None and not caller.allowed(
            AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return _refusal(403, denied_message(AclOperation.DESCRIBE, ResourceType.CLUSTER,
                                            CLUSTER_NAME))
    return await handler(request)


class AdminServer(TlsHttpListener):
    """The admin listener of ``node`` (a node with a broker) on the running event loop.
    TlsError when admin.ssl.enabled is set and the PEM material does not load."""

    def __init__(self, host: str, port: int, node: Node) -> None:
        if node.broker is None:
            raise ValueError("node: the admin listener needs a node with the broker role")
        config = node.config
        self.security = http_security("admin", config, config.data_dir,
                                      config.admin_ssl_enabled,
                                      config.admin_authentication_method, node.broker)
        app = web.Application(middlewares=[
            auth_middleware(self.security, _refusal, OPEN_PATHS), _cluster_describe,
            _admin_middleware], client_max_size=MAX_BODY)
        super().__init__(host, port, app, self.security.tls)
        self.node = node
        #: the broker's Prometheus metrics (its reports and its state, read when scraped)
        self.metrics = BrokerMetrics.for_broker(node.broker)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._ready)
        self.console = mount_console(app, node, readiness, self.metrics.pipelines)

    async def _metrics(self, request: web.Request) -> web.Response:
        body, content_type = self.metrics.render(
            wants_openmetrics(request.headers.get("Accept")))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _live(self, _request: web.Request) -> web.Response:
        return json_response({"status": "live"})

    async def _ready(self, _request: web.Request) -> web.Response:
        checks = readiness(self.node)
        missing = {name: why for name, why in checks.items() if why is not None}
        passed = {name: why is None for name, why in checks.items()}
        if missing:
            return json_response({"status": "not ready", "node_id": self.node.config.node_id,
                                  "missing": missing, "checks": passed}, 503)
        return json_response({"status": "ready", "node_id": self.node.config.node_id,
                              "checks": passed})
