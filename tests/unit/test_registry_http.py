"""The registry's HTTP plumbing (eddy.registry.http.server) on a real loopback socket:
Confluent's content negotiation (406/415), error bodies, 404/405, bounded JSON bodies,
query booleans, URL-encoded path parts, keep-alive, and GET / from the route table."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from eddy.registry.contract import SUBJECT_NOT_FOUND, RegistryError
from eddy.registry.http.routes import add_routes
from eddy.registry.http.server import (
    SCHEMA_REGISTRY_V1_JSON,
    RegistryServer,
    json_response,
    negotiate,
    query_bool,
    read_json,
)

V1 = SCHEMA_REGISTRY_V1_JSON
MAX_BODY = 8192


async def _subject(request: web.Request) -> web.Response:
    subject = request.match_info["subject"]
    if subject == "missing":
        raise RegistryError(404, SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
    return json_response({"subject": subject})


async def _echo(request: web.Request) -> web.Response:
    return json_response(await read_json(request))


async def _flags(request: web.Request) -> web.Response:
    return json_response({"permanent": query_bool(request, "permanent"),
                          "deleted": query_bool(request, "deleted", True)})


async def _boom(request: web.Request) -> web.Response:
    raise ValueError("a bug")


def _test_routes(app: web.Application) -> None:
    add_routes(app, None)
    app.router.add_get("/subjects/{subject}/versions", _subject)
    app.router.add_post("/echo", _echo)
    app.router.add_get("/flags", _flags)
    app.router.add_get("/boom", _boom)


Scenario = Callable[[aiohttp.ClientSession, str], Awaitable[Any]]


def serve(scenario: Scenario) -> Any:
    """Run ``scenario(session, base_url)`` against a RegistryServer on a free port."""

    async def main() -> Any:
        server = RegistryServer("127.0.0.1", 0, _test_routes, max_body=MAX_BODY)
        await server.start()
        try:
            assert server.port != 0
            async with aiohttp.ClientSession() as session:
                return await scenario(session, server.url)
        finally:
            await server.stop()

    return asyncio.run(main())


async def _call(session: aiohttp.ClientSession, method: str, url: str,
                **kwargs: Any) -> tuple[int, str, Any]:
    async with session.request(method, url, **kwargs) as response:
        body = await response.read()
        return response.status, response.headers.get("Content-Type", ""), json.loads(body)


def test_get_root_answers_empty_object() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "GET", f"{url}/")

    assert serve(scenario) == (200, V1, {})


def test_unknown_path_and_method_answer_like_jersey() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        missing = await _call(session, "GET", f"{url}/associations/resources/x/y")
        async with session.delete(f"{url}/") as response:
            wrong = (response.status, response.headers.get("Allow"), await response.json(
                content_type=None))
        return missing, wrong

    missing, wrong = serve(scenario)
    assert missing == (404, V1, {"error_code": 404, "message": "HTTP 404 Not Found"})
    status, allow, body = wrong
    assert status == 405 and body == {"error_code": 405, "message": "HTTP 405 Method Not Allowed"}
    assert allow is not None and "GET" in allow


def test_registry_error_is_rendered_with_its_status_and_code() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "GET", f"{url}/subjects/missing/versions")

    assert serve(scenario) == (404, V1, {"error_code": 40401,
                                         "message": "Subject 'missing' not found."})


def test_unexpected_failure_is_a_500_body() -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "GET", f"{url}/boom")

    assert serve(scenario) == (500, V1, {"error_code": 500, "message": "Internal Server Error"})


@pytest.mark.parametrize("content_type", [
    "application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
    "application/json", "application/json; charset=utf-8", "application/octet-stream",
    "APPLICATION/JSON", None,
])
def test_accepted_request_content_types(content_type: str | None) -> None:
    headers = {} if content_type is None else {"Content-Type": content_type}

    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "POST", f"{url}/echo", data=b'{"schema":"\\"int\\""}',
                           headers=headers, skip_auto_headers=["Content-Type"])

    assert serve(scenario) == (200, V1, {"schema": '"int"'})


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml",
                                          "application/x-www-form-urlencoded"])
def test_other_request_content_types_are_415(content_type: str) -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "POST", f"{url}/echo", data=b"{}",
                           headers={"Content-Type": content_type})

    assert serve(scenario) == (415, V1, {"error_code": 415,
                                         "message": "HTTP 415 Unsupported Media Type"})


@pytest.mark.parametrize(("accept", "served"), [
    (None, V1),
    ("*/*", V1),
    ("application/*", V1),
    ("application/vnd.schemaregistry.v1+json", V1),
    # what confluent-kafka's SchemaRegistryClient sends
    ("application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, "
     "application/json", V1),
    ("application/json", "application/json"),
    ("application/vnd.schemaregistry+json", "application/vnd.schemaregistry+json"),
    ("application/json, application/vnd.schemaregistry+json;q=0.1", "application/json"),
    ("text/html, application/json;q=0.9", "application/json"),
    # Java's HttpURLConnection default (issue 30): its bare "*" is "*/*", as Jersey reads it
    ("text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2", V1),
    ("*", V1),
    ("*;q=0.5", V1),
    ("text/html, *; q=.2", V1),
])
def test_accept_picks_the_response_type(accept: str | None, served: str) -> None:
    headers = {} if accept is None else {"Accept": accept}

    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "GET", f"{url}/", headers=headers,
                           skip_auto_headers=["Accept"])

    assert serve(scenario) == (200, served, {})


@pytest.mark.parametrize("accept", ["text/html", "application/xml",
                                    "application/json;q=0", "garbage"])
def test_unacceptable_accept_is_406(accept: str) -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "GET", f"{url}/", headers={"Accept": accept})

    assert serve(scenario) == (406, V1, {"error_code": 406, "message": "HTTP 406 Not Acceptable"})


def test_negotiate_ignores_parameters_and_case() -> None:
    assert negotiate("Application/JSON; charset=utf-8") == "application/json"
    assert negotiate("") == V1
    assert negotiate("application/json;q=2") is None  # q above 1: malformed
    assert negotiate("x" * 10_000) is None


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "Unexpected JSON"),
    (b"", "No content to map due to end-of-input"),
    (b"[1, 2]", "JSON array"),
    (b'"text"', "JSON string"),
    (b'{"a":"\xc3\x28"}', "Invalid UTF-8"),
    (b"[" * 2000 + b"]" * 2000, "nested too deeply"),
    (b'{"id":' + b"7" * 5000 + b"}", "Unexpected JSON"),
    (b'{"id":NaN}', "non-standard token 'NaN'"),
    (b"[" * 100_000, ""),
])
def test_invalid_json_is_400_with_a_message(body: bytes, message: str) -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "POST", f"{url}/echo", data=body,
                           headers={"Content-Type": V1})

    # the deep one exceeds MAX_BODY: it must be refused before any parsing
    status, content_type, error = serve(scenario)
    assert content_type == V1
    if len(body) > MAX_BODY:
        assert (status, error["error_code"]) == (413, 413)
    else:
        assert (status, error["error_code"]) == (400, 400)
        assert message in error["message"]


def test_body_over_the_limit_is_413_declared_or_chunked() -> None:
    big = b'{"schema":"' + b"x" * MAX_BODY + b'"}'

    async def chunks() -> Any:
        for i in range(0, len(big), 1000):
            yield big[i:i + 1000]

    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        declared = await _call(session, "POST", f"{url}/echo", data=big,
                               headers={"Content-Type": V1})
        chunked = await _call(session, "POST", f"{url}/echo", data=chunks(),
                              headers={"Content-Type": V1})
        fits = await _call(session, "POST", f"{url}/echo", data=b'{"a":1}',
                           headers={"Content-Type": V1})
        return declared, chunked, fits

    declared, chunked, fits = serve(scenario)
    assert declared[0] == 413 and declared[2]["error_code"] == 413
    assert chunked[0] == 413 and chunked[2]["error_code"] == 413
    assert fits == (200, V1, {"a": 1})


@pytest.mark.parametrize(("query", "expected"), [
    ("", {"permanent": False, "deleted": True}),
    ("?permanent=true&deleted=false", {"permanent": True, "deleted": False}),
    ("?permanent=TRUE&deleted=False", {"permanent": True, "deleted": False}),
    ("?permanent=True&deleted=FALSE", {"permanent": True, "deleted": False}),
    ("?permanent=yes&deleted=1", {"permanent": False, "deleted": False}),
    ("?permanent=&deleted=", {"permanent": False, "deleted": True}),
])
def test_query_booleans_parse_case_insensitively(query: str, expected: dict[str, bool]) -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "GET", f"{url}/flags{query}")

    assert serve(scenario) == (200, V1, expected)


@pytest.mark.parametrize(("encoded", "subject"), [
    ("orders-value", "orders-value"),
    ("a%2Fb", "a/b"),
    ("with%20space%25", "with space%"),
    ("%3A.ctx%3Atopic-value", ":.ctx:topic-value"),
    ("caf%C3%A9", "café"),
])
def test_path_parts_arrive_url_decoded(encoded: str, subject: str) -> None:
    async def scenario(session: aiohttp.ClientSession, url: str) -> Any:
        return await _call(session, "GET", aiohttp.client.URL(
            f"{url}/subjects/{encoded}/versions", encoded=True))

    assert serve(scenario) == (200, V1, {"subject": subject})


def test_connections_are_kept_alive() -> None:
    """Two requests on one connection, both answered, the connection left open."""

    async def main() -> list[bytes]:
        server = RegistryServer("127.0.0.1", 0, _test_routes)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            request = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
            writer.write(request + request)
            await writer.drain()
            heads = []
            for _ in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                heads.append(head + await reader.readexactly(length))
            writer.close()
            await writer.wait_closed()
            return heads
        finally:
            await server.stop()

    answers = asyncio.run(main())
    assert len(answers) == 2
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 200")
        assert b"Connection: close" not in answer
        assert answer.endswith(b"\r\n\r\n{}")


def test_server_stops_and_frees_its_port() -> None:
    async def main() -> tuple[int, bool]:
        server = RegistryServer("127.0.0.1", 0, _test_routes)
        await server.start()
        port = server.port
        await server.stop()
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return port, False
        writer.close()
        return port, True

    port, connected = asyncio.run(main())
    assert port > 0 and not connected
