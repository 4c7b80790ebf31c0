"""The registry's last differences from Confluent Schema Registry (issue 30), through real
HTTP requests on the route table: subjects with ``{``/``}``, 404 codes for a missing subject
and a missing version per endpoint, compatibility checks against subjects without versions,
``messages`` only with ``verbose=true``, and deletes of referenced versions.

Where Confluent's documentation leaves a case open, the test follows Confluent's
implementation (its REST resources and ``KafkaSchemaRegistry``, 7.x-8.x) and says so."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_registry_api import V1_SCHEMA, V2_SCHEMA, Api, run

BAD = json.dumps({"type": "record", "name": "R", "fields": [{"name": "c", "type": "string"}]})


# -- Java's default Accept header ----------------------------------------------------------------

JAVA_ACCEPT = "text/html, image/gif, image/jpeg, *; q=.2, */*; q=.2"


def test_javas_default_accept_header_is_served_json() -> None:
    # what HttpURLConnection sends when the caller sets none; Jersey reads its "*" as "*/*"
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        for path in ("/subjects", "/subjects/s/versions/1", "/config", "/schemas/ids/1"):
            reply = await api.call("GET", path, headers={"Accept": JAVA_ACCEPT})
            assert reply.status == 200, (path, reply.text)
            assert reply.content_type == "application/vnd.schemaregistry.v1+json"
        assert (await api.call("GET", "/subjects", headers={"Accept": "*"})).status == 200

    run(scenario)


# -- subjects with braces ------------------------------------------------------------------------


@pytest.mark.parametrize(("encoded", "subject"), [
    ("a%7Bb%7D", "a{b}"),
    ("%7B%7D", "{}"),
    ("%7Borders%7D-value", "{orders}-value"),
    ("x%7By%2Fz%7D", "x{y/z}"),
])
def test_subjects_with_braces_register_and_resolve(encoded: str, subject: str) -> None:
    async def scenario(api: Api) -> None:
        assert await api.register(encoded, V1_SCHEMA) == 1
        assert await api.ok("GET", "/subjects") == [subject]
        got = await api.ok("GET", f"/subjects/{encoded}/versions/1")
        assert (got["subject"], got["version"], got["id"]) == (subject, 1, 1)
        assert await api.ok("GET", f"/subjects/{encoded}/versions") == [1]
        assert (await api.ok("POST", f"/subjects/{encoded}", {"schema": V1_SCHEMA}))[
            "version"] == 1
        assert await api.ok("GET", f"/subjects/{encoded}/versions/latest/schema") == json.loads(
            V1_SCHEMA)
        assert await api.ok("GET", f"/subjects/{encoded}/versions/1/referencedby") == []
        assert await api.ok("POST", f"/compatibility/subjects/{encoded}/versions/latest",
                            {"schema": V2_SCHEMA}) == {"is_compatible": True}
        assert await api.ok("POST", f"/compatibility/subjects/{encoded}/versions",
                            {"schema": V2_SCHEMA}) == {"is_compatible": True}
        assert await api.ok("PUT", f"/config/{encoded}", {"compatibility": "FULL"}) == {
            "compatibility": "FULL"}
        assert (await api.ok("GET", f"/config/{encoded}"))["compatibilityLevel"] == "FULL"
        assert await api.ok("PUT", f"/mode/{encoded}", {"mode": "READWRITE"}) == {
            "mode": "READWRITE"}
        assert await api.ok("GET", "/schemas/ids/1/subjects") == [subject]
        assert await api.ok("DELETE", f"/subjects/{encoded}/versions/1") == 1
        assert await api.ok("DELETE", f"/subjects/{encoded}?permanent=true") == [1]

    run(scenario)


# -- 404: a missing subject or a missing version, per endpoint ----------------------------------

CASES_404 = [
    # Confluent's SubjectVersionsResource: a version not found answers 40401 when the subject
    # has no version (live, or deleted ones too when asked/deleting), else 40402
    ("GET", "/subjects/nope/versions/1", None, 40401),
    ("GET", "/subjects/s/versions/9", None, 40402),
    ("GET", "/subjects/nope/versions/latest", None, 40401),
    ("GET", "/subjects/nope/versions/1/schema", None, 40401),
    ("GET", "/subjects/s/versions/9/schema", None, 40402),
    ("GET", "/subjects/nope/versions/1/referencedby", None, 40401),
    ("GET", "/subjects/s/versions/9/referencedby", None, 40402),
    ("DELETE", "/subjects/nope/versions/1", None, 40401),
    ("DELETE", "/subjects/s/versions/9", None, 40402),
    ("GET", "/subjects/nope/versions", None, 40401),
    ("GET", "/subjects/nope/metadata?key=a&value=b", None, 40401),
    ("GET", "/subjects/s/metadata?key=a&value=b", None, 40403),
    # SubjectsResource: lookup and delete
    ("POST", "/subjects/nope", {"schema": V1_SCHEMA}, 40401),
    ("POST", "/subjects/s", {"schema": V2_SCHEMA}, 40403),
    ("DELETE", "/subjects/nope", None, 40401),
    # CompatibilityResource: it reads the version alone (KafkaSchemaRegistry.get) and answers
    # versionNotFoundException whatever the subject: 40402 for a missing subject too
    ("POST", "/compatibility/subjects/nope/versions/1", {"schema": V2_SCHEMA}, 40402),
    ("POST", "/compatibility/subjects/s/versions/9", {"schema": V2_SCHEMA}, 40402),
    # ConfigResource / ModeResource: a subject without its own setting
    ("GET", "/config/nope", None, 40408),
    ("GET", "/mode/nope", None, 40409),
]


@pytest.mark.parametrize(("method", "path", "body", "code"), CASES_404)
def test_404_codes_for_a_missing_subject_and_a_missing_version(
        method: str, path: str, body: Any, code: int) -> None:
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        reply = await api.call(method, path, body)
        assert reply.error() == (404, code), reply.text

    run(scenario)


def test_404_codes_for_soft_deleted_versions() -> None:
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        await api.register("s", V2_SCHEMA)
        assert await api.ok("DELETE", "/subjects/s/versions/1") == 1
        assert (await api.call("GET", "/subjects/s/versions/1")).error() == (404, 40402)
        assert (await api.ok("GET", "/subjects/s/versions/1?deleted=true"))["version"] == 1
        # Confluent's referencedby reads the version with deleted=true
        assert await api.ok("GET", "/subjects/s/versions/1/referencedby") == []
        # compatibility is checked against live versions only: 40402
        reply = await api.call("POST", "/compatibility/subjects/s/versions/1",
                               {"schema": V2_SCHEMA})
        assert reply.error() == (404, 40402)
        # every version soft-deleted: the subject is gone for reads (40401), but the
        # compatibility check still answers 40402 (it never asks for the subject)
        assert await api.ok("DELETE", "/subjects/s") == [2]
        assert (await api.call("GET", "/subjects/s/versions/2")).error() == (404, 40401)
        assert (await api.ok("GET", "/subjects/s/versions/2?deleted=true"))["version"] == 2
        assert await api.ok("GET", "/subjects/s/versions/2/referencedby") == []
        reply = await api.call("POST", "/compatibility/subjects/s/versions/2",
                               {"schema": V2_SCHEMA})
        assert reply.error() == (404, 40402)
        assert (await api.call("GET", "/subjects/s/versions/9/referencedby")).error() == (
            404, 40402)

    run(scenario)


def test_compatibility_checks_the_version_before_the_schema() -> None:
    # Confluent's order: the version id (42202), the version (40402), then the schema (42201)
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        reply = await api.call("POST", "/compatibility/subjects/s/versions/earliest",
                               {"schema": "not a schema"})
        assert reply.error() == (422, 42202)
        reply = await api.call("POST", "/compatibility/subjects/s/versions/9",
                               {"schema": "not a schema"})
        assert reply.error() == (404, 40402)
        reply = await api.call("POST", "/compatibility/subjects/s/versions/1",
                               {"schema": "not a schema"})
        assert reply.error() == (422, 42201)

    run(scenario)


# -- compatibility against a subject without versions ------------------------------------------


@pytest.mark.parametrize("path", ["/compatibility/subjects/nope/versions/latest",
                                  "/compatibility/subjects/nope/versions"])
def test_a_subject_without_versions_is_compatible_as_in_confluent(path: str) -> None:
    # The issue asked for 404 (40401), Confluent 5.x's answer; Confluent 7.x-8.x answer 200
    # is_compatible true on purpose (confluentinc/schema-registry#2624, "this was
    # intentional"; its RestApiTest.testCompatibilityNonExistentSubject asserts it for
    # "latest" and for all versions): its CompatibilityResource checks against no version
    async def scenario(api: Api) -> None:
        assert await api.ok("POST", path, {"schema": V1_SCHEMA}) == {"is_compatible": True}
        assert await api.ok("POST", path + "?verbose=true", {"schema": V1_SCHEMA}) == {
            "is_compatible": True, "messages": []}
        # a subject whose versions are all soft-deleted has no version to check against
        await api.register("s", V1_SCHEMA)
        await api.ok("DELETE", "/subjects/s")
        assert await api.ok("POST", path.replace("nope", "s"), {"schema": BAD}) == {
            "is_compatible": True}

    run(scenario)


# -- messages only with verbose=true -------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["versions/latest", "versions/1", "versions"])
def test_messages_only_with_verbose_true(endpoint: str) -> None:
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        path = f"/compatibility/subjects/s/{endpoint}"
        for query in ("", "?verbose=false", "?verbose=FALSE", "?verbose=yes", "?verbose="):
            assert await api.ok("POST", path + query, {"schema": BAD}) == {
                "is_compatible": False}, query
            assert await api.ok("POST", path + query, {"schema": V2_SCHEMA}) == {
                "is_compatible": True}, query
        for query in ("?verbose=true", "?verbose=TRUE"):
            answer = await api.ok("POST", path + query, {"schema": BAD})
            assert answer["is_compatible"] is False
            assert answer["messages"][0].startswith("{errorType:'READER_FIELD_MISSING")
            assert await api.ok("POST", path + query, {"schema": V2_SCHEMA}) == {
                "is_compatible": True, "messages": []}

    run(scenario)


@pytest.mark.parametrize("endpoint", ["versions/latest", "versions"])
def test_an_invalid_schema_is_a_message_with_verbose_true(endpoint: str) -> None:
    # Confluent's CompatibilityResource: an InvalidSchemaException is 42201, or with
    # verbose=true the answer is_compatible false with the exception's message
    async def scenario(api: Api) -> None:
        await api.register("s", V1_SCHEMA)
        path = f"/compatibility/subjects/s/{endpoint}"
        refused = await api.call("POST", path, {"schema": "{not avro"})
        assert refused.error() == (422, 42201)
        answer = await api.ok("POST", path + "?verbose=true", {"schema": "{not avro"})
        assert answer == {"is_compatible": False, "messages": [refused.body["message"]]}

    run(scenario)


# -- deleting a referenced version ---------------------------------------------------------------

ADDRESS = json.dumps({"type": "record", "name": "Address", "namespace": "x",
                      "fields": [{"name": "street", "type": "string"}]})
CUSTOMER = json.dumps({"type": "record", "name": "Customer", "namespace": "x",
                       "fields": [{"name": "home", "type": "x.Address"}]})
REFS = [{"name": "x.Address", "subject": "address", "version": 1}]


def test_a_referenced_version_is_freed_by_a_soft_delete_of_its_referrer() -> None:
    # The issue asked for 42206 while the referrer is only soft-deleted. Confluent frees the
    # reference on the soft delete: its lookup cache's schemaDeleted drops the referrer from
    # referencedBy (only live referrers count), and its RestApiTest (testSchemaReferences)
    # soft-deletes the referrer, then finds referencedby empty and deletes the reference.
    async def scenario(api: Api) -> None:
        await api.register("address", ADDRESS)
        customer = await api.register("customer", CUSTOMER, references=REFS)
        assert await api.ok("GET", "/subjects/address/versions/1/referencedby") == [customer]
        for path in ("/subjects/address/versions/1", "/subjects/address"):
            assert (await api.call("DELETE", path)).error() == (422, 42206)
        assert await api.ok("DELETE", "/subjects/customer/versions/1") == 1
        assert await api.ok("GET", "/subjects/address/versions/1/referencedby") == []
        assert await api.ok("DELETE", "/subjects/address/versions/1") == 1
        assert await api.ok("DELETE", "/subjects/address/versions/1?permanent=true") == 1

    run(scenario)


def test_a_referenced_subject_is_freed_by_a_soft_delete_of_the_referring_subject() -> None:
    async def scenario(api: Api) -> None:
        await api.register("address", ADDRESS)
        await api.register("customer", CUSTOMER, references=REFS)
        assert (await api.call("DELETE", "/subjects/address")).error() == (422, 42206)
        assert await api.ok("DELETE", "/subjects/customer") == [1]
        assert await api.ok("DELETE", "/subjects/address") == [1]
        assert await api.ok("DELETE", "/subjects/customer?permanent=true") == [1]
        assert await api.ok("DELETE", "/subjects/address?permanent=true") == [1]

    run(scenario)
