"""The schema registry's HTTP plumbing on aiohttp, as Confluent's server answers (its
rest-utils on Jersey), independent of the routes:

- content negotiation: a request's Content-Type must be one Confluent consumes
  (``application/vnd.schemaregistry.v1+json``, ``application/vnd.schemaregistry+json``,
  ``application/json``, or ``application/octet-stream``, which is also what a missing one
  means), else 415; its Accept must allow one Confluent produces, else 406 (a bare ``*``,
  in Java's default Accept header, is ``*/*``, as Jersey reads it). Responses carry
  the best type the client accepts (``application/vnd.schemaregistry.v1+json`` unless it
  accepts only the others);
- errors as JSON bodies ``{"error_code": code, "message": message}``: a ``RegistryError``
  with its status and code; an unknown path ``404`` / ``HTTP 404 Not Found``, a known one
  with another method ``405`` / ``HTTP 405 Method Not Allowed`` (Jersey's words); an
  unexpected failure 500 ``Internal Server Error`` (logged);
- bodies bounded before they are read (413), invalid JSON 400 with the parser's message
  (Confluent's mapper for Jackson's parse errors);
- helpers for the routes: ``json_response``, ``read_json``, ``query_bool``.

Path parts arrive URL-decoded in ``request.match_info`` (``a%2Fb`` is the subject ``a/b``):
aiohttp matches on the encoded path and decodes each part.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from eddy.http.listener import HttpListener
from eddy.registry.contract import RegistryError

log = logging.getLogger("eddy.registry")

SCHEMA_REGISTRY_V1_JSON = "application/vnd.schemaregistry.v1+json"
SCHEMA_REGISTRY_JSON = "application/vnd.schemaregistry+json"
JSON = "application/json"
GENERIC_REQUEST = "application/octet-stream"
#: what a request body may be sent as (Confluent's @Consumes)
CONSUMED = frozenset({SCHEMA_REGISTRY_V1_JSON, SCHEMA_REGISTRY_JSON, JSON, GENERIC_REQUEST})
#: what responses are sent as, with the server's preference (Confluent's @Produces, qs)
PRODUCED: tuple[tuple[str, float], ...] = (
    (SCHEMA_REGISTRY_V1_JSON, 1.0), (SCHEMA_REGISTRY_JSON, 0.9), (JSON, 0.5))
#: the largest request body read (more: 413 before any of it is parsed)
DEFAULT_MAX_BODY = 16 * 1024 * 1024
#: Accept headers longer than this are refused (406) without being parsed
MAX_ACCEPT_CHARS = 4096

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AddRoutes = Callable[[web.Application], None]

_MAX_BODY = web.AppKey("eddy_registry_max_body", int)


def error_response(status: int, code: int, message: str) -> web.Response:
    """Confluent's error body."""
    return json_response({"error_code": code, "message": message}, status)


def _jersey_error(status: int, reason: str) -> web.Response:
    return error_response(status, status, f"HTTP {status} {reason}")


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as compact JSON (as Jackson writes it), UTF-8; the content type is set to
    the negotiated one on the way out."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        body = text.encode()
    except UnicodeEncodeError:  # a lone surrogate (from a record or a body): escaped
        body = json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    return web.Response(body=body, status=status, content_type=SCHEMA_REGISTRY_V1_JSON)


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object: bounded before it is read (413), 400 with the
    parser's message when it is not JSON or not an object."""
    limit = request.app[_MAX_BODY]
    declared = request.content_length
    if declared is not None and declared > limit:
        raise _too_large(limit)
    try:
        raw = await request.read()  # aiohttp stops at client_max_size (the same limit)
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(limit) from None
    except web.HTTPException as exc:  # e.g. a body the client stopped sending
        raise RegistryError(400, 400, f"Cannot read the request body: {exc.reason}") from None
    if not raw.strip():
        raise RegistryError(400, 400, "No content to map due to end-of-input")
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise RegistryError(400, 400, f"Invalid UTF-8 in the request body at byte "
                            f"{exc.start}") from None
    except json.JSONDecodeError as exc:
        raise RegistryError(400, 400, f"Unexpected JSON: {exc.msg} at line {exc.lineno}, "
                            f"column {exc.colno}") from None
    except RecursionError:
        raise RegistryError(400, 400, "JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer past Python's digit limit
        raise RegistryError(400, 400, f"Unexpected JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RegistryError(400, 400, f"Cannot deserialize a request from a JSON "
                            f"{_json_kind(data)}: expected an object")
    return data


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (Jackson refuses them too)."""
    raise ValueError(f"non-standard token '{name}'")


def _too_large(limit: int) -> RegistryError:
    return RegistryError(413, 413, f"Request body larger than {limit} bytes")


def _json_kind(data: object) -> str:
    if isinstance(data, list):
        return "array"
    if isinstance(data, str):
        return "string"
    if data is None:
        return "null"
    if isinstance(data, bool):
        return "boolean"
    return "number"


def query_bool(request: web.Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter as JAX-RS reads one: ``true`` in any case is true, any other
    value false, absent or empty the default."""
    value = request.query.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() == "true"


# -- content negotiation -------------------------------------------------------------------

def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _parse_accept(header: str) -> list[tuple[str, float]] | None:
    """``Accept`` as (media range, q) items; None when it is malformed."""
    items: list[tuple[str, float]] = []
    for part in header.split(","):
        if not part.strip():
            continue
        media, *params = part.split(";")
        media = media.strip().lower()
        if media == "*":  # Java's HttpURLConnection sends a bare "*": Jersey reads "*/*"
            media = "*/*"
        if media.count("/") != 1:
            return None
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    return None
                if not 0.0 <= q <= 1.0:
                    return None
        items.append((media, q))
    return items


def _accepts(media_range: str, media: str) -> bool:
    if media_range in ("*/*", media):
        return True
    kind, _, sub = media_range.partition("/")
    return sub == "*" and media.startswith(kind + "/")


def negotiate(accept: str | None) -> str | None:
    """The response type for an Accept header: the best of Confluent's by the client's q
    times the server's preference; None when the client accepts none of them."""
    if accept is None or not accept.strip():
        return SCHEMA_REGISTRY_V1_JSON
    if len(accept) > MAX_ACCEPT_CHARS:
        return None
    items = _parse_accept(accept)
    if items is None:
        return None
    best: tuple[float, str] | None = None
    for media, server_q in PRODUCED:
        # the most specific range that matches decides the client's q for this type
        matching = [(_specificity(r), q) for r, q in items if _accepts(r, media)]
        if not matching:
            continue
        client_q = max(matching)[1]
        score = client_q * server_q
        if client_q > 0 and (best is None or score > best[0]):
            best = (score, media)
    return best[1] if best is not None else None


def _specificity(media_range: str) -> int:
    if media_range == "*/*":
        return 0
    return 1 if media_range.endswith("/*") else 2


@web.middleware
async def _registry_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    match = request.match_info
    if match.http_exception is not None:  # no route: Jersey's 404 / 405 come first
        status = match.http_exception.status
        reason = "Not Found" if status == 404 else match.http_exception.reason
        refused = _jersey_error(status, reason)
        if "Allow" in match.http_exception.headers:  # a 405 says which methods the path has
            refused.headers["Allow"] = match.http_exception.headers["Allow"]
        return refused
    content_type = request.headers.get("Content-Type")
    if content_type is not None and _media_type(content_type) not in CONSUMED:
        return _jersey_error(415, "Unsupported Media Type")
    response_type = negotiate(request.headers.get("Accept"))
    if response_type is None:
        return _jersey_error(406, "Not Acceptable")
    try:
        response = await handler(request)
    except RegistryError as exc:
        response = error_response(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:  # raised by aiohttp itself (e.g. a body too large)
        response = error_response(exc.status, exc.status, exc.reason)
    except Exception:
        log.exception("registry: %s %s failed", request.method, request.path)
        response = error_response(500, 500, "Internal Server Error")
    if isinstance(response, web.Response) and response.content_type in CONSUMED:
        response.content_type = response_type
    return response


def make_app(add_routes: AddRoutes, max_body: int = DEFAULT_MAX_BODY) -> web.Application:
    """An aiohttp application with the registry's middleware and ``add_routes``' table."""
    app = web.Application(middlewares=[_registry_middleware], client_max_size=max_body)
    app[_MAX_BODY] = max_body
    add_routes(app)
    return app


class RegistryServer(HttpListener):
    """The registry's HTTP listener on the running event loop (keep-alive connections)."""

    def __init__(self, host: str, port: int, add_routes: AddRoutes, *,
                 max_body: int = DEFAULT_MAX_BODY) -> None:
        super().__init__(host, port, make_app(add_routes, max_body))
