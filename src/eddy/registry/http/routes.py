"""The schema registry's route table: Confluent's REST API paths on the service.

``add_routes(app, service)`` fills an aiohttp application made by
``eddy.registry.http.server.make_app``. With no service (the plumbing's own tests) only
``GET /`` is served; every other path answers Confluent's 404.
"""

from __future__ import annotations

from aiohttp import web

from eddy.registry.http.api import add_api_routes
from eddy.registry.http.server import json_response


async def root(request: web.Request) -> web.Response:
    """``GET /``: Confluent's no-op root resource, ``{}``."""
    return json_response({})


def add_routes(app: web.Application, service: object | None) -> None:
    """Confluent's routes on ``service`` (a ``RegistryService``); ``GET /`` always."""
    app.router.add_get("/", root)
    if service is not None:  # None: the HTTP plumbing alone (its tests)
        add_api_routes(app, service)
