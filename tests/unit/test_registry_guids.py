"""The registry's GUIDs (Confluent 8.x: the MD5 of a schema's content as a UUID), the routes
that use them (``/schemas/guids/{guid}``, ``/schemas/guids/{guid}/ids``), latest-with-metadata
(``/subjects/{subject}/metadata``), the schema size bound, and large schemas parsed off the
event loop (the loop keeps answering while one is parsed)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from test_registry_api import PROTO, V1, V1_SCHEMA, Api, run
from test_registry_service import record

from eddy.formats.protobuf import schema as protobuf_schema
from eddy.registry import schema_ops
from eddy.registry.guid import parse_guid, schema_guid
from eddy.registry.records import Reference
from eddy.registry.state import SchemaState

# Confluent's own regression vectors (its schema-md5-golden-data.json): one Avro schema with
# and without references, metadata and a rule set, and the GUIDs Confluent derives for them.
GOLDEN_AVRO = json.dumps({
    "type": "record", "name": "Person", "namespace": "io.confluent.kafka.example",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
               {"name": "ssn", "type": "string"},
               {"name": "user", "type": "io.confluent.kafka.example.User"},
               {"name": "address", "type": "io.confluent.kafka.example.Address"}]},
    separators=(",", ":"))
GOLDEN_REFS = (Reference("io.confluent.kafka.example.User", "User", 1),
               Reference("io.confluent.kafka.example.Address", "Address", 2))
# key order shuffled on purpose: the digest sorts, as Confluent's TreeMaps do
GOLDEN_METADATA = {
    "sensitive": ["ssn", "credit-card"],
    "properties": {"version": "1.0.0", "owner": "data-team",
                   "description": "Person schema for user management"},
    "tags": {"team": ["data-engineering"], "environment": ["staging", "production"]},
}


def _rule(name: str, doc: str, kind: str, mode: str, rule_type: str, field: str,
          expr: str) -> dict[str, Any]:
    return {"name": name, "doc": doc, "kind": kind, "mode": mode, "type": rule_type,
            "tags": ["PERSON"], "params": {"field": field}, "expr": expr,
            "onSuccess": "none", "onFailure": "error", "disabled": False}


GOLDEN_RULES = {
    "migrationRules": [
        _rule("upgrade-rule-1", "Upgrade rule for field changes", "TRANSFORM", "UPGRADE",
              "FIELD_UPDATE", "name", "field.name = field.name.toUpperCase()"),
        _rule("downgrade-rule-1", "Downgrade rule for compatibility", "TRANSFORM",
              "DOWNGRADE", "FIELD_DELETE", "ssn", "delete field.ssn")],
    "domainRules": [
        _rule("validation-rule-1", "Validate age field", "CONDITION", "WRITE",
              "FIELD_VALIDATION", "age", "field.age >= 0 && field.age <= 150"),
        _rule("masking-rule-1", "Mask sensitive data on read", "TRANSFORM", "READ",
              "DATA_MASKING", "ssn", "field.ssn = '***-**-****'")],
}
GOLDEN_GUIDS = {
    "000": "d629bb05-ad85-3d20-fbcb-895de3c459f7", "001": "c0708b8f-65f6-b698-bffe-45c1dfa8987c",
    "010": "2034166c-90a8-1166-0ff2-f5f62c80dbe0", "011": "d9877161-cfdf-d8c5-4eb4-ab37ed50e9d5",
    "100": "5c08d70e-5347-41b2-6369-199425d044eb", "101": "96825311-eb10-b7f5-48be-2a023b4c018e",
    "110": "3619d8e0-2ee8-de51-0d9e-2520d39174d5", "111": "589556fb-ad98-e8e0-94fa-e6da3455433a",
}


@pytest.mark.parametrize("combination", sorted(GOLDEN_GUIDS))
def test_guid_matches_confluents_golden_vectors(combination: str) -> None:
    refs, metadata, rules = (c == "1" for c in combination)
    guid = schema_guid(GOLDEN_AVRO, GOLDEN_REFS if refs else (),
                       GOLDEN_METADATA if metadata else None, GOLDEN_RULES if rules else None)
    assert guid == GOLDEN_GUIDS[combination]


def test_guid_distinguishes_content_and_survives_hostile_parts() -> None:
    base = schema_guid("x", (), None, None)
    assert schema_guid("x", (), {}, None) != base  # present-but-empty metadata counts
    assert schema_guid("x", (), None, {}) != base
    assert schema_guid("y", (), None, None) != base
    disabled = {"domainRules": [{"name": "r", "disabled": True}]}
    assert schema_guid("x", (), None, disabled) != schema_guid(
        "x", (), None, {"domainRules": [{"name": "r"}]})
    # wrong JSON types and lone surrogates hash without raising
    for metadata in ({"tags": [1], "properties": "p", "sensitive": 3},
                     {"properties": {"k": 1, "\ud800": None}}, [1, 2]):
        assert parse_guid(schema_guid("\ud800", (), metadata, {"domainRules": ["x", 5]}))


def test_parse_guid() -> None:
    guid = "D629BB05-AD85-3D20-FBCB-895DE3C459F7"
    assert parse_guid(guid) == guid.lower()
    for bad in ("", "0d1b4d1c", "z" * 36, "1" * 65):
        assert parse_guid(bad) is None


# -- the state's GUID index ----------------------------------------------------------------------


def _schema_record(subject: str, version: int, schema_id: int, schema: str,
                   deleted: bool = False, **extra: Any) -> tuple[bytes, bytes]:
    key = json.dumps({"keytype": "SCHEMA", "subject": subject, "version": version,
                      "magic": 1}).encode()
    value = json.dumps({"subject": subject, "version": version, "id": schema_id,
                        "schema": schema, "deleted": deleted, **extra}).encode()
    return key, value


def test_state_indexes_guids_through_soft_and_hard_deletes() -> None:
    state = SchemaState()
    state.apply(*_schema_record("a", 1, 1, '"string"'))
    state.apply(*_schema_record("b", 1, 1, '"string"'))
    state.apply(*_schema_record("c", 1, 2, '"string"', metadata={"properties": {"k": "v"}}))
    plain = schema_guid('"string"', (), None, None)
    with_meta = schema_guid('"string"', (), {"properties": {"k": "v"}}, None)
    entry = state.version("a", 1)
    assert entry is not None and entry.guid == plain
    assert state.ids_for_guid(plain) == [1]
    assert state.ids_for_guid(with_meta) == [2]
    state.apply(*_schema_record("a", 1, 1, '"string"', deleted=True))  # soft delete keeps it
    assert state.ids_for_guid(plain) == [1]
    state.apply(_schema_record("a", 1, 1, "")[0], None)
    state.apply(_schema_record("b", 1, 1, "")[0], None)  # hard deletes drop it
    assert state.ids_for_guid(plain) == []
    assert state.ids_for_guid(with_meta) == [2]


# -- the routes ----------------------------------------------------------------------------------


def test_schema_by_guid_and_its_ids() -> None:
    metadata = {"properties": {"owner": "team-a"}}

    async def scenario(api: Api) -> None:
        plain_id = await api.register("s", V1_SCHEMA)
        meta_id = await api.register("t", PROTO, schemaType="PROTOBUF", metadata=metadata)
        version = await api.ok("GET", "/subjects/s/versions/1")
        guid = schema_guid(version["schema"], (), None, None)
        answer = await api.ok("GET", f"/schemas/guids/{guid}")
        assert answer == {"schema": version["schema"], "guid": guid}
        assert await api.ok("GET", f"/schemas/guids/{guid.upper()}") == answer
        assert await api.ok("GET", f"/schemas/guids/{guid}/ids") == [
            {"context": ".", "id": plain_id}]
        proto = await api.ok("GET", "/subjects/t/versions/1")
        proto_guid = schema_guid(proto["schema"], (), metadata, None)
        assert await api.ok("GET", f"/schemas/guids/{proto_guid}") == {
            "schemaType": "PROTOBUF", "schema": proto["schema"], "metadata": metadata,
            "guid": proto_guid}
        serialized = await api.ok("GET", f"/schemas/guids/{proto_guid}?format=serialized")
        assert serialized["schema"] != proto["schema"]  # base64 descriptor
        assert await api.ok("GET", f"/schemas/guids/{proto_guid}/ids") == [
            {"context": ".", "id": meta_id}]
        # soft-deleted versions still count; unknown and malformed GUIDs do not
        await api.ok("DELETE", "/subjects/s")
        assert (await api.ok("GET", f"/schemas/guids/{guid}"))["guid"] == guid
        unknown = "00000000-0000-0000-0000-000000000000"
        for missing in (unknown, "not-a-guid"):
            reply = await api.call("GET", f"/schemas/guids/{missing}")
            assert (reply.status, reply.content_type) == (404, V1)
            assert reply.body == {"error_code": 40403, "message": "Schema not found"}
            assert await api.ok("GET", f"/schemas/guids/{missing}/ids") == []

    run(scenario)


def test_latest_with_metadata() -> None:
    async def scenario(api: Api) -> None:
        def with_owner(owner: str, **extra: str) -> dict[str, Any]:
            return {"properties": {"owner": owner, **extra}}

        await api.register("s", record("R", "a"))  # no metadata: never matches
        await api.register("s", record("R", "a", "b=x"), metadata=with_owner("x", env="prod"))
        await api.register("s", record("R", "a", "b=x", "c=y"), metadata=with_owner("y"))
        await api.register("s", record("R", "a", "b=x", "c=y", "d=z"),
                           metadata=with_owner("x", env="dev"))
        found = await api.ok("GET", "/subjects/s/metadata?key=owner&value=x")
        assert (found["version"], found["metadata"]) == (4, with_owner("x", env="dev"))
        assert set(found) == {"subject", "version", "id", "guid", "metadata", "schema"}
        found = await api.ok("GET", "/subjects/s/metadata?key=owner&value=x&key=env&value=prod")
        assert found["version"] == 2
        assert (await api.ok("GET", "/subjects/s/metadata"))["version"] == 4
        miss = await api.call("GET", "/subjects/s/metadata?key=owner&value=nobody")
        assert miss.error() == (404, 40403)
        # a soft-deleted version is found only with deleted=true
        await api.ok("DELETE", "/subjects/s/versions/4")
        assert (await api.ok("GET", "/subjects/s/metadata?key=owner&value=x"))["version"] == 2
        found = await api.ok("GET", "/subjects/s/metadata?key=owner&value=x&deleted=true")
        assert found["version"] == 4
        unknown = await api.call("GET", "/subjects/nope/metadata?key=owner&value=x")
        assert unknown.error() == (404, 40401)
        assert unknown.body["message"] == "Subject 'nope' not found."

    run(scenario)


# -- size bound and parsing off the loop ---------------------------------------------------------


def _big_proto(fields: int) -> str:
    body = "".join(f"  string field_number_{i} = {i};\n" for i in range(1, fields + 1))
    return f'syntax = "proto3";\npackage big;\n\nmessage Big {{\n{body}}}\n'


def test_schema_size_is_bounded_before_parsing() -> None:
    async def scenario(api: Api) -> None:
        api.service.max_schema_chars = 1000
        text = _big_proto(60)
        assert len(text) > 1000
        for method, path in (("POST", "/subjects/s/versions"), ("POST", "/subjects/s"),
                             ("POST", "/compatibility/subjects/s/versions/latest")):
            reply = await api.call(method, path, {"schema": text, "schemaType": "PROTOBUF"})
            assert reply.error() == (422, 42201), reply.text
            assert reply.body["message"] == (
                f"Invalid schema: field 'schema' is {len(text)} characters, more than the "
                "1000 allowed")
        assert await api.register("s", _big_proto(5), schemaType="PROTOBUF") == 1

    run(scenario)


def test_large_schema_is_parsed_in_a_worker_while_the_loop_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real_parse = protobuf_schema.parse
    entered, release = threading.Event(), threading.Event()
    threads: dict[int, str] = {}
    events: list[str] = []

    def gated_parse(text: str, references: Any) -> Any:
        threads[len(text)] = threading.current_thread().name
        if len(text) > schema_ops.OFFLOAD_CHARS:
            entered.set()
            events.append("parse released" if release.wait(10) else "parse timed out")
        return real_parse(text, references)

    monkeypatch.setattr(protobuf_schema, "parse", gated_parse)
    big, small = _big_proto(800), PROTO
    assert len(big) > schema_ops.OFFLOAD_CHARS >= len(small)

    async def scenario(api: Api) -> None:
        register = asyncio.create_task(api.call(
            "POST", "/subjects/big/versions", {"schema": big, "schemaType": "PROTOBUF"}))
        while not entered.is_set():  # the parse has started (and now waits)
            await asyncio.sleep(0.001)
        assert await api.ok("GET", "/") == {}
        small_id = await api.register("small", small, schemaType="PROTOBUF")
        assert await api.ok("GET", "/subjects") == ["small"]
        events.append("loop answered")
        release.set()
        reply = await register
        assert reply.status == 200, reply.text
        assert reply.body["id"] == small_id + 1

    run(scenario)
    assert events == ["loop answered", "parse released"]
    assert threads[len(big)].startswith("registry-parse")
    assert threads[len(small)] == threading.main_thread().name


def test_confluent_client_reads_by_guid_and_latest_with_metadata() -> None:
    """confluent-kafka's own (async) client: ``get_schema_by_guid`` and
    ``get_latest_with_metadata`` against the routes."""
    from confluent_kafka.schema_registry import (
        AsyncSchemaRegistryClient,
        Metadata,
        MetadataProperties,
        Schema,
    )

    async def scenario(api: Api) -> None:
        url = str(api.client.make_url("")).rstrip("/")
        client = AsyncSchemaRegistryClient({"url": url})
        tagged = Metadata(None, MetadataProperties({"owner": "team-a"}), None)
        first = await client.register_schema("c", Schema(record("R", "a"), "AVRO"))
        registered = await client.register_schema_full_response(
            "c", Schema(record("R", "a", "b=x"), "AVRO", metadata=tagged))
        second = registered.schema_id
        assert second == first + 1
        latest = await client.get_latest_with_metadata("c", {"owner": "team-a"})
        assert (latest.schema_id, latest.version) == (second, 2)
        stored = (await api.ok("GET", "/subjects/c/versions/2"))["schema"]
        guid = schema_guid(stored, (), tagged.to_dict(), None)
        assert registered.guid == guid  # the register answer carries it (Confluent 8)
        fetched = await client.get_schema_by_guid(guid)
        assert json.loads(fetched.schema_str or "") == json.loads(stored)
        assert fetched.metadata is not None and fetched.metadata.properties == tagged.properties

    run(scenario)
