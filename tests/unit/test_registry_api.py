"""Confluent's REST API routes (eddy.registry.http.api) through real HTTP requests: aiohttp's
test server over make_app + the route table + a RegistryService on the in-memory log. Every
route with its status and body shape, every error code (40401-40409, 409, 42201-42206), query
parameters (case-insensitive booleans, paging, Jersey's 404 for ints that do not convert),
URL-encoded subjects and content types."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_registry_service import record

from eddy.registry.http.routes import add_routes
from eddy.registry.http.server import make_app
from eddy.registry.memory_log import MemoryLog
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState

V1 = "application/vnd.schemaregistry.v1+json"


@dataclass
class Reply:
    status: int
    content_type: str
    text: str

    @property
    def body(self) -> Any:
        return json.loads(self.text)

    def error(self) -> tuple[int, int]:
        """(HTTP status, Confluent error code)."""
        return self.status, int(self.body["error_code"])


class Api:
    """A test client on a fresh registry."""

    def __init__(self, client: TestClient[Any, Any], service: RegistryService,
                 log: MemoryLog) -> None:
        self.client = client
        self.service = service
        self.log = log

    async def call(self, method: str, path: str, body: Any = None,
                   **kwargs: Any) -> Reply:
        if body is not None:
            kwargs["data"] = json.dumps(body).encode()
            kwargs.setdefault("headers", {}).setdefault("Content-Type", V1)
        async with self.client.request(method, path, **kwargs) as response:
            text = (await response.read()).decode()
            return Reply(response.status, response.headers.get("Content-Type", ""), text)

    async def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        reply = await self.call(method, path, body, **kwargs)
        assert reply.status == 200, reply.text
        assert reply.content_type == V1
        return reply.body

    async def register(self, subject: str, schema: str, **fields: Any) -> int:
        answer = await self.ok("POST", f"/subjects/{subject}/versions",
                               {"schema": schema, **fields})
        assert set(answer) == {"id", "guid"}
        return int(answer["id"])


Scenario = Callable[[Api], Awaitable[Any]]


def run(scenario: Scenario) -> Any:
    async def main() -> Any:
        state = SchemaState()
        log = MemoryLog(state.apply)
        service = RegistryService(log, state)
        app = make_app(lambda app: add_routes(app, service))
        async with TestClient(TestServer(app)) as client:
            return await scenario(Api(client, service, log))

    return asyncio.run(main())




V1_SCHEMA = record("R", "a")
V2_SCHEMA = record("R", "a", "b=x")  # a field with a default: BACKWARD compatible
BAD_SCHEMA = record("R", "a", "c")  # a field without one: not
ADDRESS = json.dumps({"type": "record", "name": "Address", "namespace": "x",
                      "fields": [{"name": "street", "type": "string"}]})
PERSON = json.dumps({"type": "record", "name": "Person", "namespace": "x",
                     "fields": [{"name": "home", "type": "x.Address"}]})
ADDR_REF = [{"name": "x.Address", "subject": "address", "version": 1}]
PROTO = 'syntax = "proto3";\npackage p;\n\nmessage M {\n  string a = 1;\n}\n'
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}},
                         separators=(",", ":"))


# -- root, types, contexts -----------------------------------------------------------------------


def test_root_types_and_contexts() -> None:
    async def scenario(api: Api) -> None:
        assert await api.ok("GET", "/") == {}
        assert await api.ok("GET", "/schemas/types") == ["JSON", "PROTOBUF", "AVRO"]
        assert await api.ok("GET", "/contexts") == ["."]
        assert await api.ok("GET", "/contexts?offset=1&limit=10") == []

    run(scenario)


# -- register, lookup, read back -----------------------------------------------------------------


def test_register_and_read_every_view_of_a_version() -> None:
    async def scenario(api: Api) -> None:
        assert await api.register("s", V1_SCHEMA) == 1
        # the same schema again: the same id, nothing written
        written = len(api.log.records)
        assert await api.register("s", json.dumps(json.loads(V1_SCHEMA), indent=2)) == 1
        assert len(api.log.records) == written
        first = await api.ok("GET", "/subjects/s/versions/1")
        stored = first["schema"]
        entity = {"subject": "s", "version": 1, "id": 1, "guid": first["guid"],
                  "schema": stored}
        assert json.loads(stored) == json.loads(V1_SCHEMA)
        assert await api.ok("GET", "/subjects/s/versions/latest") == entity
        assert await api.ok("GET", "/subjects/s/versions/-1") == entity
        assert await api.ok("GET", "/subjects") == ["s"]
        assert await api.ok("GET", "/subjects/s/versions") == [1]
        assert await api.ok("POST", "/subjects/s", {"schema": V1_SCHEMA}) == entity
        assert await api.ok("GET", "/schemas/ids/1") == {"schema": stored}
        assert await api.ok("GET", "/schemas/ids/1?fetchMaxId=true") == {"schema": stored,
                                                                          "maxId": 1}
        assert await api.ok("GET", "/schemas/ids/1/subjects") == ["s"]
        assert await api.ok("GET", "/schemas/ids/1/versions") == [{"subject": "s",
                                                                   "version": 1}]
        assert await api.ok("GET", "/schemas") == [entity]
        # the raw schema endpoints answer the text itself, in the JSON content type
        for path in ("/schemas/ids/1/schema", "/subjects/s/versions/1/schema",
                     "/subjects/s/versions/latest/schema"):
            reply = await api.call("GET", path)
            assert (reply.status, reply.content_type, reply.text) == (200, V1, stored)

    run(scenario)


def test_same_schema_under_another_subject_reuses_its_id_and_lists_filter() -> None:
    async def scenario(api: Api) -> None:
        assert await api.register("a-value", V1_SCHEMA) == 1
        assert await api.register("b-value", V1_SCHEMA) == 1
        assert await api.register("b-value", V2_SCHEMA) == 2
        assert await api.ok("GET", "/schemas/ids/1/subjects") == ["a-value", "b-value"]
        assert await api.ok("GET", "/subjects?subjectPrefix=b") == ["b-value"]
        assert await api.ok("GET", "/subjects?offset=1") == ["b-value"]
        assert await api.ok("GET", "/subjects?limit=1") == ["a-value"]
        every = await api.ok("GET", "/schemas")
        assert [(e["subject"], e["version"]) for e in every] == [
            ("a-value", 1), ("b-value", 1), ("b-value", 2)]
        latest = await api.ok("GET", "/schemas?latestOnly=TRUE")
        assert [(e["subject"], e["version"]) for e in latest] == [("a-value", 1), ("b-value", 2)]
        prefixed = await api.ok("GET", "/schemas?subjectPrefix=b-&offset=1&limit=5")
        assert [(e["subject"], e["version"], e["id"]) for e in prefixed] == [("b-value", 2, 2)]
        assert await api.ok("GET", "/subjects/b-value/versions?offset=1&limit=1") == [2]

    run(scenario)


def test_url_encoded_subjects() -> None:
    async def scenario(api: Api) -> None:
        assert await api.register("a%2Fb", V1_SCHEMA) == 1
        assert await api.register("x%20y%3Av", V1_SCHEMA) == 1
        assert await api.ok("GET", "/subjects") == ["a/b", "x y:v"]
        got = await api.ok("GET", "/subjects/a%2Fb/versions/1")
        assert got["subject"] == "a/b"
        assert await api.ok("GET", "/config/a%2Fb?defaultToGlobal=true") == {
            "compatibilityLevel": "BACKWARD"}
        assert await api.ok("DELETE", "/subjects/a%2Fb") == [1]
        assert await api.ok("GET", "/subjects") == ["x y:v"]

    run(scenario)


def test_other_formats_carry_their_schema_type() -> None:
    async def scenario(api: Api) -> None:
        assert await api.register("p", PROTO, schemaType="PROTOBUF") == 1
        assert await api.register("j", JSON_SCHEMA, schemaType="JSON") == 2
        proto = await api.ok("GET", "/subjects/p/versions/1")
        assert list(proto) == ["subject", "version", "id", "guid", "schemaType", "schema"]
        assert proto["schemaType"] == "PROTOBUF" and "message M" in proto["schema"]
        by_id = await api.ok("GET", "/schemas/ids/2")
        assert by_id == {"schemaType": "JSON", "schema": JSON_SCHEMA}
        serialized = await api.ok("GET", "/schemas/ids/1?format=serialized")
        assert serialized["schemaType"] == "PROTOBUF"
        assert "message" not in serialized["schema"]  # base64 FileDescriptorProto
        raw = await api.call("GET", "/subjects/p/versions/1/schema?format=serialized")
        assert raw.text == serialized["schema"]
        found = await api.ok("POST", "/subjects/j", {"schema": JSON_SCHEMA, "schemaType": "JSON"})
        assert found["id"] == 2

    run(scenario)


def test_references_and_referenced_by_and_42206() -> None:
    async def scenario(api: Api) -> None:
        assert await api.register("address", ADDRESS) == 1
        assert await api.register("person", PERSON, references=ADDR_REF) == 2
        got = await api.ok("GET", "/subjects/person/versions/1")
        assert got["references"] == ADDR_REF
        assert await api.ok("GET", "/subjects/address/versions/1/referencedby") == [2]
        assert await api.ok("GET", "/subjects/address/versions/latest/referencedby?offset=1") \
            == []
        by_id = await api.ok("GET", "/schemas/ids/2")
        assert list(by_id) == ["schema", "references"]
        reply = await api.call("DELETE", "/subjects/address/versions/1")
        assert reply.error() == (422, 42206)
        assert reply.body["message"].startswith("One or more references exist to the schema")
        assert (await api.call("DELETE", "/subjects/address")).error() == (422, 42206)

    run(scenario)


# -- compatibility ---------------------------------------------------------------------------------


def test_compatibility_checks_and_409() -> None:
    async def scenario(api: Api) -> None:
        # no subject yet: anything is compatible with "latest"
        assert await api.ok("POST", "/compatibility/subjects/s/versions/latest",
                            {"schema": V1_SCHEMA}) == {"is_compatible": True}
        await api.register("s", V1_SCHEMA)
        good, bad = {"schema": V2_SCHEMA}, {"schema": BAD_SCHEMA}
        for path in ("/compatibility/subjects/s/versions/latest",
                     "/compatibility/subjects/s/versions/1", "/compatibility/subjects/s/versions"):
            assert await api.ok("POST", path, good) == {"is_compatible": True}
            assert await api.ok("POST", path, bad) == {"is_compatible": False}
            verbose = await api.ok("POST", path + "?verbose=True", bad)
            assert list(verbose) == ["is_compatible", "messages"]
            assert verbose["is_compatible"] is False
            assert any("{oldSchemaVersion: 1}" in m for m in verbose["messages"])
            assert await api.ok("POST", path + "?verbose=true", good) == {
                "is_compatible": True, "messages": []}
        reply = await api.call("POST", "/subjects/s/versions", bad)
        assert reply.error() == (409, 409)
        assert reply.body["message"].startswith(
            'Schema being registered is incompatible with an earlier schema for subject "s", '
            "details: [")
        assert await api.register("s", V2_SCHEMA) == 2
        missing = await api.call("POST", "/compatibility/subjects/s/versions/7", good)
        assert missing.error() == (404, 40402)
        # Confluent's CompatibilityResource answers 40402 for a missing subject too
        gone = await api.call("POST", "/compatibility/subjects/nope/versions/1", good)
        assert gone.error() == (404, 40402)

    run(scenario)


# -- config and mode -------------------------------------------------------------------------------


def test_config_routes() -> None:
    async def scenario(api: Api) -> None:
        assert await api.ok("GET", "/config") == {"compatibilityLevel": "BACKWARD"}
        assert await api.ok("PUT", "/config", {"compatibility": "full"}) == {
            "compatibility": "full"}
        assert await api.ok("GET", "/config") == {"compatibilityLevel": "FULL"}
        reply = await api.call("GET", "/config/s")
        assert reply.error() == (404, 40408)
        assert reply.body["message"] == ("Subject 's' does not have subject-level compatibility "
                                         "configured")
        assert await api.ok("GET", "/config/s?defaultToGlobal=TRUE") == {
            "compatibilityLevel": "FULL"}
        assert await api.ok("PUT", "/config/s", {"compatibility": "NONE"}) == {
            "compatibility": "NONE"}
        assert await api.ok("GET", "/config/s") == {"compatibilityLevel": "NONE"}
        # NONE on the subject: an incompatible schema registers
        await api.register("s", V1_SCHEMA)
        assert await api.register("s", BAD_SCHEMA) == 2
        assert await api.ok("DELETE", "/config/s") == {"compatibilityLevel": "NONE"}
        assert (await api.call("DELETE", "/config/s")).error() == (404, 40401)
        assert await api.ok("DELETE", "/config") == {"compatibilityLevel": "FULL"}
        assert await api.ok("GET", "/config") == {"compatibilityLevel": "BACKWARD"}
        bad = await api.call("PUT", "/config", {"compatibility": "sideways"})
        assert bad.error() == (422, 42203)
        assert bad.body["message"].startswith("Invalid compatibility level")

    run(scenario)


def test_mode_routes() -> None:
    async def scenario(api: Api) -> None:
        assert await api.ok("GET", "/mode") == {"mode": "READWRITE"}
        reply = await api.call("GET", "/mode/s")
        assert reply.error() == (404, 40409)
        assert await api.ok("GET", "/mode/s?defaultToGlobal=true") == {"mode": "READWRITE"}
        assert await api.ok("PUT", "/mode/s", {"mode": "READONLY"}) == {"mode": "READONLY"}
        assert await api.ok("GET", "/mode/s") == {"mode": "READONLY"}
        refused = await api.call("POST", "/subjects/s/versions", {"schema": V1_SCHEMA})
        assert refused.error() == (422, 42205)
        assert refused.body["message"] == "Subject s is in read-only mode"
        assert await api.ok("DELETE", "/mode/s") == {"mode": "READONLY"}
        assert await api.register("s", V1_SCHEMA) == 1
        # IMPORT only on an empty registry, unless forced
        importing = await api.call("PUT", "/mode", {"mode": "IMPORT"})
        assert importing.error() == (422, 42205)
        assert await api.ok("PUT", "/mode?force=TRUE", {"mode": "IMPORT"}) == {"mode": "IMPORT"}
        assert await api.register("t", V2_SCHEMA, id=42, version=3) == 42
        assert await api.ok("GET", "/subjects/t/versions") == [3]
        assert await api.ok("PUT", "/mode", {"mode": "READWRITE"}) == {"mode": "READWRITE"}
        bad = await api.call("PUT", "/mode", {"mode": "SIDEWAYS"})
        assert bad.error() == (422, 42204)
        assert await api.ok("DELETE", "/mode") == {"mode": "READWRITE"}

    run(scenario)


# -- deletes ---------------------------------------------------------------------------------------


def test_version_deletes_and_their_ordering_codes() -> None:
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        await api.register("s", V2_SCHEMA)
        early = await api.call("DELETE", "/subjects/s/versions/1?permanent=true")
        assert early.error() == (404, 40407)
        assert await api.ok("DELETE", "/subjects/s/versions/1") == 1
        again = await api.call("DELETE", "/subjects/s/versions/1")
        assert again.error() == (404, 40406)
        assert await api.ok("GET", "/subjects/s/versions") == [2]
        assert await api.ok("GET", "/subjects/s/versions?deleted=true") == [1, 2]
        assert await api.ok("GET", "/subjects/s/versions?deletedOnly=True") == [1]
        assert (await api.call("GET", "/subjects/s/versions/1")).error() == (404, 40402)
        soft = await api.ok("GET", "/subjects/s/versions/1?deleted=true")
        assert soft["version"] == 1
        assert await api.ok("GET", "/schemas/ids/1/versions") == []
        assert await api.ok("GET", "/schemas/ids/1/versions?deleted=true") == [
            {"subject": "s", "version": 1}]
        assert await api.ok("DELETE", "/subjects/s/versions/1?permanent=TRUE") == 1
        assert await api.ok("GET", "/subjects/s/versions?deleted=true") == [2]
        assert await api.ok("DELETE", "/subjects/s/versions/latest") == 2

    run(scenario)


def test_subject_deletes_and_their_ordering_codes() -> None:
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        await api.register("keep", V2_SCHEMA)
        early = await api.call("DELETE", "/subjects/s?permanent=true")
        assert early.error() == (404, 40405)
        assert await api.ok("DELETE", "/subjects/s") == [1]
        again = await api.call("DELETE", "/subjects/s")
        assert again.error() == (404, 40404)
        assert again.body["message"] == ("Subject 's' was soft deleted.Set permanent=true to "
                                         "delete permanently")
        assert await api.ok("GET", "/subjects") == ["keep"]
        assert await api.ok("GET", "/subjects?deleted=true") == ["keep", "s"]
        assert await api.ok("GET", "/subjects?deletedOnly=true") == ["s"]
        by_id = await api.ok("GET", "/schemas/ids/1")
        found = await api.ok("POST", "/subjects/s?deleted=true", {"schema": V1_SCHEMA})
        assert found == {"subject": "s", "version": 1, "id": 1, "guid": found["guid"],
                         "schema": by_id["schema"]}
        assert await api.ok("DELETE", "/subjects/s?permanent=true") == [1]
        assert (await api.call("DELETE", "/subjects/s")).error() == (404, 40401)
        assert await api.ok("GET", "/subjects?deleted=true") == ["keep"]

    run(scenario)


# -- errors ----------------------------------------------------------------------------------------


def test_not_found_codes() -> None:
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        missing = await api.call("GET", "/subjects/nope/versions")
        assert missing.error() == (404, 40401)
        assert missing.body["message"] == "Subject 'nope' not found."
        assert (await api.call("GET", "/subjects/nope/versions/1")).error() == (404, 40401)
        assert (await api.call("POST", "/subjects/nope", {"schema": V1_SCHEMA})).error() == (
            404, 40401)
        version = await api.call("GET", "/subjects/s/versions/9")
        assert version.error() == (404, 40402)
        assert version.body["message"] == "Version 9 not found."
        schema = await api.call("GET", "/schemas/ids/99")
        assert schema.error() == (404, 40403)
        assert schema.body["message"] == "Schema 99 not found"
        for path in ("/schemas/ids/99/schema", "/schemas/ids/99/subjects",
                     "/schemas/ids/99/versions", "/schemas/ids/-1"):
            assert (await api.call("GET", path)).error() == (404, 40403)
        unknown = await api.call("POST", "/subjects/s", {"schema": V2_SCHEMA})
        assert unknown.error() == (404, 40403)
        assert unknown.body["message"] == "Schema not found"

    run(scenario)


def test_invalid_requests_are_422() -> None:
    async def scenario(api: Api) -> None:
        invalid = await api.call("POST", "/subjects/s/versions", {"schema": "{not avro"})
        assert invalid.error() == (422, 42201)
        assert invalid.body["message"].startswith("Invalid schema")
        empty = await api.call("POST", "/subjects/s/versions", {"schemaType": "AVRO"})
        assert empty.error() == (422, 42201) and empty.body["message"] == "Empty schema"
        unknown_type = await api.call("POST", "/subjects/s/versions",
                                      {"schema": "x", "schemaType": "XML"})
        assert unknown_type.error() == (422, 42201)
        await api.register("s", V1_SCHEMA)
        for version in ("0", "abc", "2147483648"):
            reply = await api.call("GET", f"/subjects/s/versions/{version}")
            assert reply.error() == (422, 42202)
            assert reply.body["message"].startswith(f"The specified version '{version}' is not "
                                                    "a valid version id.")
        assert (await api.call("DELETE", "/subjects/s/versions/0")).error() == (422, 42202)
        not_json = await api.call("POST", "/subjects/s/versions", data=b"{",
                                  headers={"Content-Type": V1})
        assert not_json.error() == (400, 400)

    run(scenario)


@pytest.mark.parametrize("path", [
    "/associations/resources/topic/value", "/schemas/guids", "/schemas/ids/abc",
    "/schemas/ids/99999999999", "/schemas/ids/1.5", "/schemas?offset=abc", "/subjects?limit=x",
    "/subjects/s/metadatas", "/nope",
])
def test_unknown_paths_and_unconvertible_ints_are_jersey_404(path: str) -> None:
    async def scenario(api: Api) -> Reply:
        await api.register("s", V1_SCHEMA)
        return await api.call("GET", path)

    reply = run(scenario)
    assert (reply.status, reply.content_type, reply.body) == (
        404, V1, {"error_code": 404, "message": "HTTP 404 Not Found"})


def test_known_path_with_another_method_is_405() -> None:
    async def scenario(api: Api) -> list[Reply]:
        return [await api.call("GET", "/subjects/s"), await api.call("PUT", "/schemas/types"),
                await api.call("GET", "/compatibility/subjects/s/versions")]

    for reply in run(scenario):
        assert reply.error() == (405, 405)


# -- content types -------------------------------------------------------------------------------


def test_content_negotiation_on_api_routes() -> None:
    async def scenario(api: Api) -> None:
        for content_type in ("application/json", "application/vnd.schemaregistry+json",
                             "application/octet-stream"):
            reply = await api.call("POST", "/subjects/s/versions", {"schema": V1_SCHEMA},
                                   headers={"Content-Type": content_type})
            assert (reply.status, reply.body["id"], set(reply.body)) == (200, 1, {"id", "guid"})
        plain = await api.call("POST", "/subjects/s/versions", {"schema": V1_SCHEMA},
                               headers={"Content-Type": "text/plain"})
        assert plain.error() == (415, 415)
        as_json = await api.call("GET", "/subjects", headers={"Accept": "application/json"})
        assert (as_json.status, as_json.content_type, as_json.body) == (
            200, "application/json", ["s"])
        raw = await api.call("GET", "/schemas/ids/1/schema",
                             headers={"Accept": "application/vnd.schemaregistry+json"})
        assert raw.content_type == "application/vnd.schemaregistry+json"
        assert json.loads(raw.text) == json.loads(V1_SCHEMA)
        refused = await api.call("GET", "/subjects", headers={"Accept": "text/html"})
        assert refused.error() == (406, 406)
        error = await api.call("GET", "/subjects/x/versions",
                               headers={"Accept": "application/json"})
        assert (error.status, error.content_type) == (404, "application/json")

    run(scenario)


def test_a_raw_schema_with_a_lone_surrogate_is_served_as_its_json_escape() -> None:
    """A schema text read from _schemas may hold a lone surrogate (JSON's "\\ud800"): the
    raw `.../schema` body writes it back as that escape instead of failing to encode."""
    from eddy.registry.http.api import text_response

    body = text_response('{"type":"string","doc":"\ud800"}').body
    assert isinstance(body, bytes)
    assert json.loads(body) == {"type": "string", "doc": "\ud800"}
