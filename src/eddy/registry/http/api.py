"""Confluent Schema Registry's REST resources on aiohttp, mapped onto ``RegistryService``.

``add_api_routes(app, service)`` adds Confluent's paths, methods and query parameters (its
``SchemasResource``, ``SubjectsResource``, ``SubjectVersionsResource``,
``CompatibilityResource``, ``ConfigResource``, ``ModeResource`` and ``ContextsResource``);
``GET /`` comes from ``http_routes``. Bodies are the service's answers as they are (Confluent's
shapes, nothing added). Parameters are read as JAX-RS reads them: booleans with
``query_bool``; an integer path or query parameter that does not convert to a Java ``int``
answers Jersey's ``404 HTTP 404 Not Found``, as Confluent does. Subjects arrive URL-decoded in
``match_info`` (``a%2Fb`` is the subject ``a/b``, ``a%7Bb%7D`` the subject ``a{b}``: a path
parameter is any characters but ``/``).

When the node has an authorizer, each route is checked by its ``access.Rule`` before its
handler runs (so before a body is read), and the routes listing subjects keep only the
subjects the caller may read (``access``).

Paths Confluent has but this registry does not serve (``/associations``, ``/dek-registry``,
...) answer 404 like any unknown path: confluent-kafka's default subject-name strategy relies
on that 404.

The service parses schemas and checks compatibility inline for small schemas and in a worker
thread for large ones (``schema_ops.off_loop``), so a large schema being registered does not
stall the other requests; its parser keeps a bounded cache, so a known schema is parsed once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from eddy.registry.access import Rule, check, readable
from eddy.registry.contract import RegistryError
from eddy.registry.http.server import SCHEMA_REGISTRY_V1_JSON, json_response, query_bool, read_json
from eddy.registry.requests import SchemaRequest
from eddy.registry.service.core import RegistryService

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
#: a path parameter: any characters but "/" (aiohttp's default also refuses "{" and "}", so a
#: subject "a{b}", sent as ``a%7Bb%7D``, found no route)
_PART = "{{{}:[^/]+}}"
_T = TypeVar("_T")
RouteHandler = Callable[[web.Request], Awaitable[web.Response]]


def not_found() -> RegistryError:
    """Jersey's answer to a path or query parameter that does not convert (and to no route)."""
    return RegistryError(404, 404, "HTTP 404 Not Found")


def _to_int(raw: str) -> int:
    """A Java ``int`` as JAX-RS converts one (``Integer.valueOf``), else Jersey's 404."""
    text = raw
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > 10:
        raise not_found()
    value = int(text, 10)
    if not _INT_MIN <= value <= _INT_MAX:
        raise not_found()
    return value


def query_int(request: web.Request, name: str, default: int) -> int:
    """An integer query parameter (absent or empty: ``default``)."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    return _to_int(raw)


def query_str(request: web.Request, name: str) -> str | None:
    """A string query parameter; empty reads as absent."""
    value = request.query.get(name)
    return value if value else None


def paged(items: list[_T], request: web.Request) -> list[_T]:
    """``offset`` and ``limit`` (negative or absent: no limit) applied to a list."""
    offset = max(query_int(request, "offset", 0), 0)
    limit = query_int(request, "limit", -1)
    items = items[offset:]
    return items if limit < 0 else items[:limit]


def text_response(text: str) -> web.Response:
    """A schema's text as the body itself (``.../schema``), in the negotiated JSON type as
    Confluent sends it. A lone surrogate (read from a ``_schemas`` record) is written as its
    JSON escape, ``\\ud800``, which the text, itself JSON, reads back the same."""
    return web.Response(body=text.encode("utf-8", "backslashreplace"),
                        content_type=SCHEMA_REGISTRY_V1_JSON)


class RegistryApi:
    """The handlers of Confluent's REST API over one service."""

    def __init__(self, service: RegistryService) -> None:
        self.service = service

    @staticmethod
    def _subject(request: web.Request) -> str:
        return request.match_info["subject"]

    @staticmethod
    def _schema_id(request: web.Request) -> int:
        return _to_int(request.match_info["id"])

    @staticmethod
    async def _schema_request(request: web.Request) -> SchemaRequest:
        return SchemaRequest.from_body(await read_json(request))

    # -- /schemas --------------------------------------------------------------------------------

    async def list_schemas(self, request: web.Request) -> web.Response:
        """GET /schemas?subjectPrefix&deleted&latestOnly&offset&limit: of the subjects the
        caller may read."""
        found = await self.service.list_schemas(
            query_str(request, "subjectPrefix"), query_bool(request, "deleted"),
            query_bool(request, "latestOnly"))
        allowed = readable(request, (item["subject"] for item in found))
        return json_response(paged([item for item in found if item["subject"] in allowed],
                                   request))

    async def schema_types(self, request: web.Request) -> web.Response:
        """GET /schemas/types."""
        return json_response(self.service.schema_types())

    async def schema_by_id(self, request: web.Request) -> web.Response:
        """GET /schemas/ids/{id}?subject&format&referenceFormat&fetchMaxId."""
        schema_id = self._schema_id(request)
        answer = await self.service.schema_by_id(schema_id, query_str(request, "subject"),
                                                 query_str(request, "format"))
        if query_bool(request, "fetchMaxId"):
            answer["maxId"] = self.service.state.max_id
        return json_response(answer)

    async def schema_text_by_id(self, request: web.Request) -> web.Response:
        """GET /schemas/ids/{id}/schema?subject&format: the schema text as the body."""
        schema_id = self._schema_id(request)
        return text_response(await self.service.schema_text_by_id(
            schema_id, query_str(request, "subject"), query_str(request, "format")))

    async def schema_by_guid(self, request: web.Request) -> web.Response:
        """GET /schemas/guids/{guid}?format."""
        return json_response(await self.service.schema_by_guid(
            request.match_info["guid"], query_str(request, "format")))

    async def ids_for_guid(self, request: web.Request) -> web.Response:
        """GET /schemas/guids/{guid}/ids."""
        return json_response(await self.service.ids_for_guid(request.match_info["guid"]))

    async def subjects_for_id(self, request: web.Request) -> web.Response:
        """GET /schemas/ids/{id}/subjects?subject&deleted."""
        schema_id = self._schema_id(request)
        names = await self.service.subjects_for_id(schema_id, query_bool(request, "deleted"))
        allowed = readable(request, names)
        return json_response([name for name in names if name in allowed])

    async def versions_for_id(self, request: web.Request) -> web.Response:
        """GET /schemas/ids/{id}/versions?subject&deleted."""
        schema_id = self._schema_id(request)
        found = await self.service.versions_for_id(schema_id, query_bool(request, "deleted"))
        allowed = readable(request, (item["subject"] for item in found))
        return json_response([item for item in found if item["subject"] in allowed])

    # -- /subjects -------------------------------------------------------------------------------

    async def list_subjects(self, request: web.Request) -> web.Response:
        """GET /subjects?subjectPrefix&deleted&deletedOnly&offset&limit."""
        names = await self.service.list_subjects(
            query_str(request, "subjectPrefix"), query_bool(request, "deleted"),
            query_bool(request, "deletedOnly"))
        allowed = readable(request, names)
        return json_response(paged([name for name in names if name in allowed], request))

    async def register(self, request: web.Request) -> web.Response:
        """POST /subjects/{subject}/versions?normalize: ``{"id": id}``."""
        subject = self._subject(request)
        normalize = query_bool(request, "normalize")
        body = await self._schema_request(request)
        return json_response(await self.service.register(subject, body, normalize=normalize))

    async def lookup(self, request: web.Request) -> web.Response:
        """POST /subjects/{subject}?normalize&deleted: the version holding the schema."""
        subject = self._subject(request)
        normalize, deleted = query_bool(request, "normalize"), query_bool(request, "deleted")
        body = await self._schema_request(request)
        return json_response(await self.service.lookup(subject, body, normalize=normalize,
                                                       deleted=deleted))

    async def delete_subject(self, request: web.Request) -> web.Response:
        """DELETE /subjects/{subject}?permanent: the versions deleted."""
        return json_response(await self.service.delete_subject(
            self._subject(request), query_bool(request, "permanent")))

    async def list_versions(self, request: web.Request) -> web.Response:
        """GET /subjects/{subject}/versions?deleted&deletedOnly&offset&limit."""
        versions = await self.service.list_versions(
            self._subject(request), query_bool(request, "deleted"),
            query_bool(request, "deletedOnly"))
        return json_response(paged(versions, request))

    async def get_version(self, request: web.Request) -> web.Response:
        """GET /subjects/{subject}/versions/{version}?deleted&format&referenceFormat."""
        return json_response(await self.service.get_version(
            self._subject(request), request.match_info["version"],
            query_bool(request, "deleted"), query_str(request, "format")))

    async def get_version_schema(self, request: web.Request) -> web.Response:
        """GET /subjects/{subject}/versions/{version}/schema?deleted&format."""
        return text_response(await self.service.get_version_schema(
            self._subject(request), request.match_info["version"],
            query_bool(request, "deleted"), query_str(request, "format")))

    async def delete_version(self, request: web.Request) -> web.Response:
        """DELETE /subjects/{subject}/versions/{version}?permanent: the version deleted."""
        return json_response(await self.service.delete_version(
            self._subject(request), request.match_info["version"],
            query_bool(request, "permanent")))

    async def latest_with_metadata(self, request: web.Request) -> web.Response:
        """GET /subjects/{subject}/metadata?key&value&deleted&format: ``key`` and ``value``
        repeat, paired in order (an unpaired one is ignored, as Confluent pairs them)."""
        keys, values = request.query.getall("key", []), request.query.getall("value", [])
        wanted = dict(zip(keys, values, strict=False))
        return json_response(await self.service.latest_with_metadata(
            self._subject(request), wanted, query_bool(request, "deleted"),
            query_str(request, "format")))

    async def referenced_by(self, request: web.Request) -> web.Response:
        """GET /subjects/{subject}/versions/{version}/referencedby?offset&limit."""
        ids = await self.service.referenced_by(self._subject(request),
                                               request.match_info["version"])
        return json_response(paged(ids, request))

    # -- /compatibility --------------------------------------------------------------------------

    async def _compatibility(self, request: web.Request, version: str | None) -> web.Response:
        subject = self._subject(request)
        verbose, normalize = query_bool(request, "verbose"), query_bool(request, "normalize")
        body = await self._schema_request(request)
        return json_response(await self.service.check_compatibility(
            subject, version, body, verbose=verbose, normalize=normalize))

    async def compatibility_version(self, request: web.Request) -> web.Response:
        """POST /compatibility/subjects/{subject}/versions/{version}?verbose&normalize."""
        return await self._compatibility(request, request.match_info["version"])

    async def compatibility_all(self, request: web.Request) -> web.Response:
        """POST /compatibility/subjects/{subject}/versions?verbose&normalize."""
        return await self._compatibility(request, None)

    # -- /config and /mode -----------------------------------------------------------------------

    @staticmethod
    def _scope(request: web.Request) -> str | None:
        return request.match_info.get("subject")

    async def get_config(self, request: web.Request) -> web.Response:
        """GET /config and /config/{subject}?defaultToGlobal."""
        return json_response(await self.service.get_config(
            self._scope(request), query_bool(request, "defaultToGlobal")))

    async def set_config(self, request: web.Request) -> web.Response:
        """PUT /config and /config/{subject}: the request echoed."""
        scope = self._scope(request)
        return json_response(await self.service.set_config(scope, await read_json(request)))

    async def delete_config(self, request: web.Request) -> web.Response:
        """DELETE /config and /config/{subject}: the config that was in force."""
        return json_response(await self.service.delete_config(self._scope(request)))

    async def get_mode(self, request: web.Request) -> web.Response:
        """GET /mode and /mode/{subject}?defaultToGlobal."""
        return json_response(await self.service.get_mode(
            self._scope(request), query_bool(request, "defaultToGlobal")))

    async def set_mode(self, request: web.Request) -> web.Response:
        """PUT /mode and /mode/{subject}?force: the request echoed."""
        scope, force = self._scope(request), query_bool(request, "force")
        body = await read_json(request)
        return json_response(await self.service.set_mode(scope, body, force=force))

    async def delete_mode(self, request: web.Request) -> web.Response:
        """DELETE /mode and /mode/{subject}: the mode that was set."""
        return json_response(await self.service.delete_mode(self._scope(request)))

    # -- /contexts -------------------------------------------------------------------------------

    async def contexts(self, request: web.Request) -> web.Response:
        """GET /contexts?offset&limit."""
        return json_response(paged(self.service.contexts(), request))

    # -- the table -------------------------------------------------------------------------------

    def routes(self) -> list[tuple[str, str, RouteHandler, Rule]]:
        """(method, path, handler, access rule) for every route, in Confluent's resources'
        order."""
        subject = "/subjects/" + _PART.format("subject")
        version = subject + "/versions/" + _PART.format("version")
        ids = "/schemas/ids/" + _PART.format("id")
        scoped = _PART.format("subject")
        any_, read, write, listed = Rule.ANY, Rule.READ, Rule.WRITE, Rule.LISTED
        config_read, config_write = Rule.CONFIG_READ, Rule.CONFIG_WRITE
        return [
            ("GET", "/schemas", self.list_schemas, listed),
            ("GET", "/schemas/types", self.schema_types, any_),
            ("GET", ids, self.schema_by_id, any_),
            ("GET", ids + "/schema", self.schema_text_by_id, any_),
            ("GET", ids + "/subjects", self.subjects_for_id, listed),
            ("GET", ids + "/versions", self.versions_for_id, listed),
            ("GET", "/schemas/guids/" + _PART.format("guid"), self.schema_by_guid, any_),
            ("GET", "/schemas/guids/" + _PART.format("guid") + "/ids", self.ids_for_guid, any_),
            ("GET", "/subjects", self.list_subjects, listed),
            ("POST", subject, self.lookup, read),
            ("DELETE", subject, self.delete_subject, write),
            ("GET", subject + "/versions", self.list_versions, read),
            ("GET", subject + "/metadata", self.latest_with_metadata, read),
            ("POST", subject + "/versions", self.register, write),
            ("GET", version, self.get_version, read),
            ("DELETE", version, self.delete_version, write),
            ("GET", version + "/schema", self.get_version_schema, read),
            ("GET", version + "/referencedby", self.referenced_by, read),
            ("POST", "/compatibility" + version, self.compatibility_version, read),
            ("POST", "/compatibility" + subject + "/versions", self.compatibility_all, read),
            ("GET", "/config", self.get_config, config_read),
            ("PUT", "/config", self.set_config, config_write),
            ("DELETE", "/config", self.delete_config, config_write),
            ("GET", "/config/" + scoped, self.get_config, config_read),
            ("PUT", "/config/" + scoped, self.set_config, config_write),
            ("DELETE", "/config/" + scoped, self.delete_config, config_write),
            ("GET", "/mode", self.get_mode, config_read),
            ("PUT", "/mode", self.set_mode, config_write),
            ("DELETE", "/mode", self.delete_mode, config_write),
            ("GET", "/mode/" + scoped, self.get_mode, config_read),
            ("PUT", "/mode/" + scoped, self.set_mode, config_write),
            ("DELETE", "/mode/" + scoped, self.delete_mode, config_write),
            ("GET", "/contexts", self.contexts, any_),
        ]


def guarded(handler: RouteHandler, rule: Rule) -> RouteHandler:
    """``handler`` run once the caller passes ``rule`` (403 otherwise)."""

    async def run(request: web.Request) -> web.Response:
        check(request, rule)
        return await handler(request)

    return run


def add_api_routes(app: web.Application, service: object) -> None:
    """Confluent's REST API on ``service`` (a ``RegistryService``), every route but ``GET /``."""
    if not isinstance(service, RegistryService):
        raise TypeError(f"a RegistryService is needed, not {type(service).__name__}")
    api = RegistryApi(service)
    for method, path, handler, rule in api.routes():
        app.router.add_route(method, path, guarded(handler, rule))
