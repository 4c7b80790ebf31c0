"""The registry role in ``eddy serve``: the HTTP listener and the ``_schemas`` log, on the
node's event loop, as a Kafka client of the node itself (so it works the same on a cluster).

The listener is bound at once (its port is known for the startup line); the log is read in
the background, retried until the topic serves (a cluster still forming, say). Until the
topic is replayed, every route but ``GET /`` answers 50004, as a Confluent registry that
knows no leader yet.

On a cluster (a broker with ``broker.cluster`` and the mesh), writes run on the node leading
``_schemas`` and the others forward theirs to it (``forwarding``); ``write_handler`` answers
the forwarded writes, registered by the node under ``TAG_REGISTRY``.

With the node's broker (``broker``; on a cluster it is also the route's), the listener takes
its security from the node's config (``eddy.security.http_auth``): HTTPS with the Kafka
listeners' PEM material (``registry.ssl.enabled``), HTTP basic auth against the cluster's
users (``registry.authentication.method=BASIC``), refusals in Confluent's shape (401 40101,
429 42901), and, when the node has an authorizer, the ACLs (``access``: 403 40301).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from eddy.http.tls_listener import TlsHttpListener
from eddy.registry.cluster_route import ClusterRoute
from eddy.registry.contract import UNKNOWN_LEADER, RegistryError
from eddy.registry.forwarding import ForwardingService, WriteHandler
from eddy.registry.http.routes import add_routes
from eddy.registry.http.server import Handler, error_response, make_app
from eddy.registry.kafka_log import KafkaSchemaLog, SchemaTopicError
from eddy.registry.settings import RegistrySettings
from eddy.registry.state import SchemaState
from eddy.security.http_auth import HttpSecurity, auth_middleware, http_security

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

log = logging.getLogger("eddy.registry")

#: the wait between two tries at reading ``_schemas`` (doubling up to the second)
RETRY_S = (0.5, 15.0)


class RegistryRole:
    """The running registry of a node."""

    def __init__(self, host: str, port: int, bootstrap: str, *,
                 route: ClusterRoute | None = None,
                 security: HttpSecurity | None = None,
                 client_config: dict[str, Any] | None = None,
                 write_timeout_s: float = 10.0) -> None:
        self.bootstrap = bootstrap
        self.security = security
        self.ready = asyncio.Event()
        state = SchemaState()
        self.log = KafkaSchemaLog(bootstrap, state.apply, client_config=client_config,
                                  timeout_s=write_timeout_s)
        self.route = route
        self.service = ForwardingService(self.log, state, route,
                                         lambda: self.log.applied_offset)
        self.server = TlsHttpListener(host, port, make_app(self._add_routes),
                                      security.tls if security is not None else None)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def _add_routes(self, app: web.Application) -> None:
        add_routes(app, self.service)
        app.middlewares.append(self._gate)
        if self.security is not None:  # first: refusals before routing and negotiation
            app.middlewares.insert(0, auth_middleware(self.security, _refusal))

    @web.middleware
    async def _gate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.ready.is_set() and request.path != "/":
            raise RegistryError(500, UNKNOWN_LEADER,
                                "Schema registry is starting: the _schemas topic is not "
                                "read yet")
        return await handler(request)

    def write_handler(self) -> WriteHandler | None:
        """The mesh handler answering writes forwarded to this node (None: no cluster)."""
        if self.route is None:
            return None
        return WriteHandler(self.route, self.service, self.ready.is_set)

    async def start(self) -> None:
        """Bind the listener and start reading ``_schemas`` in the background."""
        await self.server.start()
        self._task = asyncio.get_running_loop().create_task(self._open_log(self.log),
                                                            name="registry-schemas")

    async def _open_log(self, schema_log: KafkaSchemaLog) -> None:
        if self.route is not None:
            await self.route.await_brokers()
        delay = RETRY_S[0]
        while True:
            try:
                await schema_log.start()
            except (SchemaTopicError, RegistryError) as exc:
                log.error("registry: cannot serve from %s yet: %s (retrying in %.1f s)",
                          schema_log.topic, exc, delay)
            except Exception:
                log.exception("registry: reading %s failed (retrying in %.1f s)",
                              schema_log.topic, delay)
            else:
                self.ready.set()
                log.info("schema registry ready on %s", self.url)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_S[1])

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the registry to serve; whether it does."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ready.wait(), timeout_s)
        return self.ready.is_set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.server.stop()
        await self.log.stop()


def _refusal(status: int, message: str) -> web.Response:
    """Confluent's error body for 401 (40101), 403 (40301), 429 (42901)."""
    return error_response(status, status * 100 + 1, message)


async def start_registry(host: str, port: int, bootstrap: str, *,
                         route: ClusterRoute | None = None,
                         broker: Broker | None = None,
                         client_config: dict[str, Any] | None = None,
                         write_timeout_s: float = 10.0,
                         settings: RegistrySettings | None = None) -> RegistryRole:
    """A node's registry on HOST:PORT (0: any free port), a client of ``bootstrap`` with
    ``client_config`` (confluent-kafka settings, e.g. the inter-broker listener's
    security); its writes through ``route`` (None: outside a cluster, all here); its
    security from ``settings`` (registry.ssl.enabled with the PEM material of the config of
    ``broker``, by default the route's; registry.authentication.method) and that broker's
    users and authorizer (no broker: plain HTTP, no authentication). TlsError when
    registry.ssl.enabled is set and the PEM material does not load."""
    if broker is None and route is not None:
        broker = route.broker
    settings = RegistrySettings.model_validate({}) if settings is None else settings
    security = (http_security("registry", broker.config, broker.config.data_dir,
                              settings.registry_ssl_enabled,
                              settings.registry_authentication_method, broker)
                if broker is not None else None)
    role = RegistryRole(host, port, bootstrap, route=route, security=security,
                        client_config=client_config, write_timeout_s=write_timeout_s)
    await role.start()
    return role
