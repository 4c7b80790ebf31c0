"""The registry service with Confluent's semantics, over the in-memory log: registration and
ids, lookups, deletes and their ordering rules, references, compatibility per level, config
and modes (IMPORT included), and every error code the service answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from eddy.registry import records as rec
from eddy.registry.contract import RegistryError
from eddy.registry.guid import schema_guid
from eddy.registry.memory_log import MemoryLog
from eddy.registry.requests import SchemaRequest
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState

T = TypeVar("T")


class Registry:
    """A service over a fresh in-memory log, driven synchronously."""

    def __init__(self) -> None:
        self.state = SchemaState()
        self.log = MemoryLog(self.state.apply)
        self.service = RegistryService(self.log, self.state)

    def run(self, call: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await call
        return asyncio.run(wrapped())

    def register(self, subject: str, schema: str, **body: Any) -> int:
        normalize = body.pop("normalize", False)
        request = SchemaRequest.from_body({"schema": schema, **body})
        answer = self.run(self.service.register(subject, request, normalize=normalize))
        assert set(answer) == {"id", "guid"}  # Confluent 8 answers the GUID too
        return int(answer["id"])

    def fails(self, call: Callable[[], Awaitable[Any]] | Awaitable[Any]) -> RegistryError:
        with pytest.raises(RegistryError) as err:
            self.run(call() if callable(call) else call)
        return err.value

    def request(self, schema: str, **body: Any) -> SchemaRequest:
        return SchemaRequest.from_body({"schema": schema, **body})


def record(name: str, *fields: str) -> str:
    """An Avro record with string fields; ``name=default`` gives the field a default."""
    out = []
    for spec in fields:
        field, _, default = spec.partition("=")
        entry: dict[str, Any] = {"name": field, "type": "string"}
        if default:
            entry["default"] = default
        out.append(entry)
    return json.dumps({"type": "record", "name": name, "fields": out})


@pytest.fixture
def reg() -> Registry:
    return Registry()


# -- registration and ids ------------------------------------------------------------------------


def test_identical_schema_same_subject_returns_existing_id_without_writing(reg: Registry) -> None:
    assert reg.register("s", record("R", "a")) == 1
    written = len(reg.log.records)
    assert reg.register("s", json.dumps(json.loads(record("R", "a")), indent=4)) == 1
    assert len(reg.log.records) == written
    assert reg.run(reg.service.list_versions("s")) == [1]


def test_same_schema_under_another_subject_reuses_the_id(reg: Registry) -> None:
    assert reg.register("a", record("R", "x")) == 1
    assert reg.register("b", record("R", "x")) == 1
    assert reg.register("b", record("R", "x", "y=1")) == 2
    assert reg.run(reg.service.subjects_for_id(1)) == ["a", "b"]
    assert reg.run(reg.service.versions_for_id(1)) == [{"subject": "a", "version": 1},
                                                       {"subject": "b", "version": 1}]


def test_canonical_forms_are_one_schema(reg: Registry) -> None:
    assert reg.register("s", '{"type":"string"}') == 1
    assert reg.register("t", '"string"') == 1
    assert reg.run(reg.service.schema_by_id(1)) == {"schema": '"string"'}


def test_ids_are_never_reused_after_a_hard_delete(reg: Registry) -> None:
    reg.register("s", record("A", "a"))
    reg.register("t", record("B", "b"))
    reg.run(reg.service.delete_subject("t"))
    reg.run(reg.service.delete_subject("t", permanent=True))
    assert reg.fails(reg.service.schema_by_id(2)).code == 40403
    assert reg.register("u", record("C", "c")) == 3
    # the very same schema gets its old id back (Confluent keeps schema -> id)
    assert reg.register("t", record("B", "b")) == 2
    restarted = SchemaState()
    reg.log.replay(restarted.apply)
    assert restarted.next_id == 4


def test_register_answers_confluent_shapes_and_writes_confluent_records(reg: Registry) -> None:
    reg.register("s", record("R", "a"))
    key, value = reg.log.records[-1]
    assert key == b'{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}'
    assert value is not None and json.loads(value) == {
        "subject": "s", "version": 1, "id": 1, "schema": record("R", "a").replace(" ", ""),
        "deleted": False}
    got = reg.run(reg.service.get_version("s", "1"))
    assert list(got) == ["subject", "version", "id", "guid", "schema"]
    assert got["guid"] == schema_guid(got["schema"], (), None, None)


def test_writes_sync_first_and_concurrent_writes_get_distinct_ids(reg: Registry) -> None:
    async def many() -> list[dict[str, Any]]:
        return await asyncio.gather(*(
            reg.service.register(f"s{i}", reg.request(record(f"R{i}", "a"))) for i in range(20)))
    ids = sorted(answer["id"] for answer in reg.run(many()))
    assert ids == list(range(1, 21))
    assert reg.log.syncs >= 20


def test_a_failed_store_write_changes_nothing(reg: Registry) -> None:
    reg.log.fail_next = RegistryError(500, 50001, "Error while registering the schema")
    assert reg.fails(reg.service.register("s", reg.request('"int"'))).code == 50001
    assert reg.state.subject_names() == []
    assert reg.register("s", '"int"') == 1


def test_invalid_schemas_are_42201(reg: Registry) -> None:
    err = reg.fails(reg.service.register("s", reg.request('{"type":"recrod"}')))
    assert (err.status, err.code) == (422, 42201)
    assert err.message.startswith('Invalid schema {"type":"recrod"} with refs [] of type AVRO')
    err = reg.fails(lambda: reg.service.register("s", reg.request("{}", schemaType="XML")))
    assert (err.code, err.message) == (42201, "Invalid schema type XML")
    with pytest.raises(RegistryError) as empty:
        SchemaRequest.from_body({"schema": "  "})
    assert (empty.value.code, empty.value.message) == (42201, "Empty schema")
    deep: Any = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(RegistryError, match="'ruleSet' nests deeper than 64"):
        SchemaRequest.from_body({"schema": '"int"', "ruleSet": {"x": deep}})
    with pytest.raises(RegistryError, match=r"references\[0\]\.version"):
        SchemaRequest.from_body({"schema": '"int"', "references": [
            {"name": "n", "subject": "s", "version": 0}]})


def test_normalize_makes_equivalent_schemas_one(reg: Registry) -> None:
    first = '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'
    second = '{"fields":[{"type":"int","name":"a"}],"name":"R","type":"record"}'
    assert reg.register("s", first, normalize=True) == 1
    assert reg.register("s", second, normalize=True) == 1


def test_metadata_and_rule_set_are_stored_and_served(reg: Registry) -> None:
    metadata = {"properties": {"owner": "team-a"}}
    rule_set = {"domainRules": [{"name": "r", "kind": "CONDITION", "mode": "WRITE"}]}
    reg.register("s", '"int"', metadata=metadata, ruleSet=rule_set)
    assert reg.run(reg.service.get_version("s", "latest")) == {
        "subject": "s", "version": 1, "id": 1,
        "guid": schema_guid('"int"', (), metadata, rule_set), "metadata": metadata,
        "ruleSet": rule_set, "schema": '"int"'}
    assert reg.run(reg.service.schema_by_id(1)) == {
        "schema": '"int"', "metadata": metadata, "ruleSet": rule_set}


# -- reads ---------------------------------------------------------------------------------------


def test_get_version_by_number_latest_and_minus_one(reg: Registry) -> None:
    reg.run(reg.service.set_config(None, {"compatibility": "NONE"}))
    reg.register("s", '"int"')
    reg.register("s", '"long"')
    for name in ("latest", "-1", -1, "LATEST"):
        assert reg.run(reg.service.get_version("s", name))["version"] == 2
    assert reg.run(reg.service.get_version("s", "1"))["schema"] == '"int"'
    assert reg.run(reg.service.get_version_schema("s", "2")) == '"long"'


@pytest.mark.parametrize("version", ["0", "-2", "abc", "2147483648", "1.5"])
def test_bad_version_ids_are_42202(reg: Registry, version: str) -> None:
    reg.register("s", '"int"')
    err = reg.fails(reg.service.get_version("s", version))
    assert (err.status, err.code) == (422, 42202)
    assert err.message == (f"The specified version '{version}' is not a valid version id. "
                           'Allowed values are between [1, 2^31-1] and the string "latest"')


def test_unknown_subject_version_and_schema(reg: Registry) -> None:
    reg.register("s", '"int"')
    err = reg.fails(reg.service.get_version("nope", "1"))
    assert (err.status, err.code, err.message) == (404, 40401, "Subject 'nope' not found.")
    err = reg.fails(reg.service.get_version("s", "7"))
    assert (err.status, err.code, err.message) == (404, 40402, "Version 7 not found.")
    err = reg.fails(reg.service.schema_by_id(99))
    assert (err.status, err.code, err.message) == (404, 40403, "Schema 99 not found")
    assert reg.fails(reg.service.list_versions("nope")).code == 40401
    assert reg.fails(reg.service.subjects_for_id(99)).code == 40403


def test_lookup_under_a_subject(reg: Registry) -> None:
    reg.register("s", record("R", "a"))
    found = reg.run(reg.service.lookup("s", reg.request(record("R", "a"))))
    stored = record("R", "a").replace(" ", "")
    assert found == {"subject": "s", "version": 1, "id": 1,
                     "guid": schema_guid(stored, (), None, None), "schema": stored}
    err = reg.fails(reg.service.lookup("s", reg.request(record("R", "b"))))
    assert (err.code, err.message) == (40403, "Schema not found")
    assert reg.fails(reg.service.lookup("x", reg.request('"int"'))).code == 40401
    reg.run(reg.service.delete_version("s", "1"))
    assert reg.fails(reg.service.lookup("s", reg.request(record("R", "a")))).code == 40401
    assert reg.run(reg.service.lookup("s", reg.request(record("R", "a")), deleted=True))["id"] == 1


def test_list_subjects_prefix_deleted_and_deleted_only(reg: Registry) -> None:
    for subject in ("app-a", "app-b", "other"):
        reg.register(subject, '"int"')
    reg.run(reg.service.delete_subject("app-b"))
    assert reg.run(reg.service.list_subjects()) == ["app-a", "other"]
    assert reg.run(reg.service.list_subjects("app-")) == ["app-a"]
    assert reg.run(reg.service.list_subjects(":*:", deleted=True)) == ["app-a", "app-b", "other"]
    assert reg.run(reg.service.list_subjects(deleted_only=True)) == ["app-b"]


def test_list_schemas_types_and_contexts(reg: Registry) -> None:
    reg.run(reg.service.set_config(None, {"compatibility": "NONE"}))
    reg.register("b", '"int"')
    reg.register("a", '"long"')
    reg.register("a", '"string"')
    listed = reg.run(reg.service.list_schemas())
    assert [(s["subject"], s["version"]) for s in listed] == [("a", 1), ("a", 2), ("b", 1)]
    latest = reg.run(reg.service.list_schemas("a", latest_only=True))
    assert [(s["subject"], s["version"]) for s in latest] == [("a", 2)]
    assert len(reg.run(reg.service.list_schemas(offset=1, limit=1))) == 1
    assert reg.service.schema_types() == ["JSON", "PROTOBUF", "AVRO"]
    assert reg.service.contexts() == ["."]


# -- deletes -------------------------------------------------------------------------------------


def test_version_delete_ordering(reg: Registry) -> None:
    reg.run(reg.service.set_config(None, {"compatibility": "NONE"}))
    reg.register("s", '"int"')
    reg.register("s", '"long"')
    err = reg.fails(reg.service.delete_version("s", "1", permanent=True))
    assert (err.code, err.message) == (
        40407, "Subject 's' Version 1 was not deleted first before being permanently deleted")
    assert reg.run(reg.service.delete_version("s", "1")) == 1
    err = reg.fails(reg.service.delete_version("s", "1"))
    assert (err.code, err.message) == (
        40406, "Subject 's' Version 1 was soft deleted.Set permanent=true to delete permanently")
    assert reg.fails(reg.service.get_version("s", "1")).code == 40402
    assert reg.run(reg.service.get_version("s", "1", deleted=True))["id"] == 1
    assert reg.run(reg.service.list_versions("s", deleted=True)) == [1, 2]
    assert reg.run(reg.service.list_versions("s", deleted_only=True)) == [1]
    assert reg.run(reg.service.delete_version("s", "1", permanent=True)) == 1
    assert reg.fails(reg.service.get_version("s", "1", deleted=True)).code == 40402
    assert reg.fails(reg.service.delete_version("s", "9")).code == 40402
    assert reg.fails(reg.service.delete_version("zz", "1")).code == 40401
    # soft-deleted ids still answer by id (Confluent), hard-deleted ones do not
    assert reg.run(reg.service.schema_by_id(2)) == {"schema": '"long"'}


def test_subject_delete_ordering(reg: Registry) -> None:
    reg.register("s", '"int"')
    err = reg.fails(reg.service.delete_subject("s", permanent=True))
    assert (err.code, err.message) == (
        40405, "Subject 's' was not deleted first before being permanently deleted")
    assert reg.run(reg.service.delete_subject("s")) == [1]
    err = reg.fails(reg.service.delete_subject("s"))
    assert (err.code, err.message) == (
        40404, "Subject 's' was soft deleted.Set permanent=true to delete permanently")
    assert reg.run(reg.service.list_subjects()) == []
    assert reg.fails(reg.service.get_version("s", "latest")).code == 40401
    assert reg.run(reg.service.delete_subject("s", permanent=True)) == [1]
    assert reg.fails(reg.service.delete_subject("s")).code == 40401
    assert reg.fails(reg.service.delete_subject("s", permanent=True)).code == 40401


def test_soft_delete_writes_delete_subject_and_drops_subject_settings(reg: Registry) -> None:
    reg.register("s", '"int"')
    reg.run(reg.service.set_config("s", {"compatibility": "FULL"}))
    reg.run(reg.service.set_mode("s", {"mode": "READWRITE"}))
    reg.run(reg.service.delete_subject("s"))
    keys = [key for key, _ in reg.log.records[-3:]]
    assert keys[0] == b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}'
    assert reg.log.records[-3][1] == b'{"subject":"s","version":1}'
    assert [value for _, value in reg.log.records[-2:]] == [None, None]
    assert reg.state.config("s") is None and reg.state.mode("s") is None


def test_deleted_versions_do_not_count_and_reregistering_makes_a_new_version(
        reg: Registry) -> None:
    reg.register("s", record("R", "a"))
    reg.run(reg.service.delete_version("s", "1"))
    # incompatible with the deleted version 1 only: accepted
    assert reg.register("s", record("R", "b")) == 2
    assert reg.run(reg.service.get_version("s", "latest"))["version"] == 2
    # the deleted schema again: its id, a new version, and the old deleted version tombstoned
    reg.run(reg.service.set_config("s", {"compatibility": "NONE"}))
    assert reg.register("s", record("R", "a")) == 1
    assert reg.run(reg.service.list_versions("s", deleted=True)) == [2, 3]
    assert reg.log.records[-1] == (rec.encode_key(rec.SchemaKey("s", 1)), None)


# -- references ----------------------------------------------------------------------------------

ADDRESS = json.dumps({"type": "record", "name": "Address", "namespace": "x",
                      "fields": [{"name": "street", "type": "string"}]})
PERSON = json.dumps({"type": "record", "name": "Person", "namespace": "x",
                     "fields": [{"name": "home", "type": "x.Address"}]})
ADDR_REF = [{"name": "x.Address", "subject": "address", "version": 1}]


def test_avro_references_and_referenced_by(reg: Registry) -> None:
    assert reg.register("address", ADDRESS) == 1
    assert reg.register("person", PERSON, references=ADDR_REF) == 2
    assert reg.run(reg.service.referenced_by("address", "latest")) == [2]
    got = reg.run(reg.service.get_version("person", "1"))
    assert got["references"] == ADDR_REF
    resolved = reg.run(reg.service.schema_by_id(2, fmt="resolved"))
    assert '"street"' in resolved["schema"]
    assert reg.run(reg.service.lookup("person", reg.request(PERSON, references=ADDR_REF)))[
        "id"] == 2
    err = reg.fails(reg.service.delete_version("address", "1"))
    assert (err.status, err.code, err.message) == (
        422, 42206,
        "One or more references exist to the schema {magic=1,keytype=SCHEMA,subject=address,"
        "version=1}.")
    assert reg.fails(reg.service.delete_subject("address")).code == 42206
    # a soft-deleted referrer releases the reference
    reg.run(reg.service.delete_subject("person"))
    assert reg.run(reg.service.referenced_by("address", "1")) == []
    assert reg.run(reg.service.delete_subject("address")) == [1]


def test_reference_to_latest_is_pinned_and_missing_references_are_42201(reg: Registry) -> None:
    reg.register("address", ADDRESS)
    reg.register("person", PERSON,
                 references=[{"name": "x.Address", "subject": "address", "version": -1}])
    assert reg.run(reg.service.get_version("person", "1"))["references"] == ADDR_REF
    err = reg.fails(lambda: reg.service.register("p2", reg.request(PERSON, references=[
        {"name": "x.Address", "subject": "nowhere", "version": 1}])))
    assert err.code == 42201
    assert 'No schema reference found for subject "nowhere" and version 1' in err.message
    assert "with refs [{name='x.Address', subject='nowhere', version=1}]" in err.message


def test_json_schema_references(reg: Registry) -> None:
    addr = json.dumps({"type": "object", "properties": {"street": {"type": "string"}},
                       "required": ["street"]})
    person = json.dumps({"type": "object", "properties": {"home": {"$ref": "addr.json"}}},
                        separators=(",", ":"))
    refs = [{"name": "addr.json", "subject": "addr", "version": 1}]
    assert reg.register("addr", addr, schemaType="JSON") == 1
    assert reg.register("person", person, schemaType="JSON", references=refs) == 2
    assert reg.run(reg.service.schema_by_id(2)) == {
        "schemaType": "JSON", "schema": person, "references": refs}
    assert reg.run(reg.service.referenced_by("addr", "1")) == [2]
    assert reg.fails(reg.service.delete_version("addr", "1")).code == 42206


def test_nested_references_are_resolved_transitively(reg: Registry) -> None:
    city = json.dumps({"type": "record", "name": "City", "namespace": "x",
                       "fields": [{"name": "n", "type": "string"}]})
    addr = json.dumps({"type": "record", "name": "Address", "namespace": "x",
                       "fields": [{"name": "city", "type": "x.City"}]})
    reg.register("city", city)
    reg.register("address", addr,
                 references=[{"name": "x.City", "subject": "city", "version": 1}])
    assert reg.register("person", PERSON, references=ADDR_REF) == 3


# -- compatibility -------------------------------------------------------------------------------


def test_backward_is_the_default_and_its_409_message(reg: Registry) -> None:
    reg.register("s", record("R", "a"))
    err = reg.fails(reg.service.register("s", reg.request(record("R", "a", "b"))))
    assert (err.status, err.code) == (409, 409)
    assert err.message.startswith('Schema being registered is incompatible with an earlier '
                                  'schema for subject "s", details: [{errorType:'
                                  "'READER_FIELD_MISSING_DEFAULT_VALUE'")
    assert "{oldSchemaVersion: 1}" in err.message
    assert "{validateFields: 'false', compatibility: 'BACKWARD'}]" in err.message
    assert reg.register("s", record("R", "a", "b=x")) == 2


@pytest.mark.parametrize(("level", "new", "accepted"), [
    ("FORWARD", record("R", "a", "b"), True),     # old readers ignore the new field
    ("FORWARD", record("R", "b"), False),         # old readers miss "a", which has no default
    ("BACKWARD", record("R", "a", "b"), False),
    ("FULL", record("R", "a", "b"), False),
    ("FULL", record("R", "a", "b=x"), True),
    ("NONE", '"int"', True),
])
def test_levels(reg: Registry, level: str, new: str, accepted: bool) -> None:
    reg.register("s", record("R", "a"))
    reg.run(reg.service.set_config("s", {"compatibility": level.lower()}))
    answer = reg.run(reg.service.check_compatibility("s", "latest", reg.request(new)))
    assert answer == {"is_compatible": accepted}
    if accepted:
        assert reg.register("s", new) == 2
    else:
        assert reg.fails(reg.service.register("s", reg.request(new))).code == 409


def test_transitive_levels_check_every_live_version(reg: Registry) -> None:
    reg.register("s", record("R", "a"))
    reg.register("s", record("R", "a", "b=x"))
    v3 = record("R", "a", "b")  # reads version 2's data, not version 1's
    reg.run(reg.service.set_config("s", {"compatibility": "BACKWARD_TRANSITIVE"}))
    err = reg.fails(reg.service.register("s", reg.request(v3)))
    assert "{oldSchemaVersion: 1}" in err.message
    assert "compatibility: 'BACKWARD_TRANSITIVE'" in err.message
    verbose = reg.run(reg.service.check_compatibility("s", None, reg.request(v3), verbose=True))
    assert verbose["is_compatible"] is False and "{oldSchemaVersion: 1}" in verbose["messages"]
    # against one named version the level is not transitive
    assert reg.run(reg.service.check_compatibility("s", "2", reg.request(v3))) == {
        "is_compatible": True}
    against_1 = reg.run(reg.service.check_compatibility("s", "1", reg.request(v3),
                                                        verbose=True))
    assert against_1["is_compatible"] is False  # the message names the level as configured
    assert against_1["messages"][-1] == (
        "{validateFields: 'false', compatibility: 'BACKWARD_TRANSITIVE'}")
    reg.run(reg.service.set_config("s", {"compatibility": "BACKWARD"}))
    assert reg.register("s", v3) == 3


def test_compatibility_endpoint_edges(reg: Registry) -> None:
    assert reg.run(reg.service.check_compatibility("new", "latest", reg.request('"int"'),
                                                   verbose=True)) == {
        "is_compatible": True, "messages": []}
    assert reg.fails(reg.service.check_compatibility("new", "1", reg.request('"int"'))
                     ).code == 40402  # a missing subject too, as Confluent's (issue 30)
    reg.register("s", '"int"')
    assert reg.fails(reg.service.check_compatibility("s", "5", reg.request('"int"'))
                     ).code == 40402
    answer = reg.run(reg.service.check_compatibility("s", "1", reg.request('"string"'),
                                                     verbose=True))
    assert answer["is_compatible"] is False
    assert answer["messages"][0].startswith("{errorType:'TYPE_MISMATCH'")


def test_json_schema_compatibility(reg: Registry) -> None:
    open_obj = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    with_b = json.dumps({"type": "object", "properties": {"a": {"type": "string"},
                                                          "b": {"type": "integer"}},
                         "required": ["b"]})
    reg.register("j", open_obj, schemaType="JSON")
    answer = reg.run(reg.service.check_compatibility(
        "j", "latest", reg.request(with_b, schemaType="JSON"), verbose=True))
    assert answer["is_compatible"] is False
    assert any("errorType" in m for m in answer["messages"])


def test_a_different_schema_type_is_incompatible(reg: Registry) -> None:
    reg.register("s", '"string"')
    err = reg.fails(reg.service.register("s", reg.request('{"type":"string"}', schemaType="JSON")))
    assert "Incompatible because of different schema type" in err.message


# -- config --------------------------------------------------------------------------------------


def test_config_get_put_delete(reg: Registry) -> None:
    assert reg.run(reg.service.get_config()) == {"compatibilityLevel": "BACKWARD"}
    assert reg.run(reg.service.set_config(None, {"compatibility": "full"})) == {
        "compatibility": "full"}
    assert reg.run(reg.service.get_config()) == {"compatibilityLevel": "FULL"}
    err = reg.fails(reg.service.get_config("s"))
    assert (err.code, err.message) == (
        40408, "Subject 's' does not have subject-level compatibility configured")
    assert reg.run(reg.service.get_config("s", default_to_global=True)) == {
        "compatibilityLevel": "FULL"}
    reg.run(reg.service.set_config("s", {"compatibility": "NONE", "normalize": True}))
    assert reg.run(reg.service.get_config("s")) == {"normalize": True,
                                                    "compatibilityLevel": "NONE"}
    assert reg.log.records[-1] == (
        b'{"keytype":"CONFIG","subject":"s","magic":0}',
        b'{"subject":"s","normalize":true,"compatibilityLevel":"NONE"}')
    assert reg.run(reg.service.delete_config("s")) == {"normalize": True,
                                                       "compatibilityLevel": "NONE"}
    assert reg.fails(reg.service.delete_config("s")).code == 40401
    assert reg.run(reg.service.delete_config()) == {"compatibilityLevel": "FULL"}
    assert reg.run(reg.service.get_config()) == {"compatibilityLevel": "BACKWARD"}


@pytest.mark.parametrize("body", [{"compatibility": "SIDEWAYS"}, {}, {"compatibility": 3}, []])
def test_invalid_compatibility_level_is_42203(reg: Registry, body: Any) -> None:
    err = reg.fails(reg.service.set_config(None, body))
    assert (err.status, err.code) == (422, 42203)
    assert err.message.startswith("Invalid compatibility level. Valid values are none")


# -- modes ---------------------------------------------------------------------------------------


def test_read_only_refuses_writes_but_not_mode_changes(reg: Registry) -> None:
    reg.register("s", '"int"')
    assert reg.run(reg.service.set_mode(None, {"mode": "READONLY"})) == {"mode": "READONLY"}
    err = reg.fails(reg.service.register("s", reg.request('"long"')))
    assert (err.status, err.code, err.message) == (422, 42205,
                                                   "Subject s is in read-only mode")
    # an already registered schema is still answered
    assert reg.register("s", '"int"') == 1
    assert reg.fails(reg.service.delete_version("s", "1")).code == 42205
    assert reg.fails(reg.service.delete_subject("s")).code == 42205
    err = reg.fails(reg.service.set_config(None, {"compatibility": "NONE"}))
    assert (err.code, err.message) == (42205, "Subject null is in read-only mode")
    reg.run(reg.service.set_mode(None, {"mode": "READWRITE"}))
    reg.run(reg.service.set_config(None, {"compatibility": "NONE"}))
    assert reg.register("s", '"long"') == 2


def test_subject_modes_and_the_global_override(reg: Registry) -> None:
    err = reg.fails(reg.service.get_mode("s"))
    assert (err.code, err.message) == (
        40409, "Subject 's' does not have subject-level mode configured")
    assert reg.run(reg.service.get_mode("s", default_to_global=True)) == {"mode": "READWRITE"}
    reg.run(reg.service.set_mode("s", {"mode": "readonly"}))
    assert reg.run(reg.service.get_mode("s")) == {"mode": "READONLY"}
    assert reg.fails(reg.service.register("s", reg.request('"int"'))).code == 42205
    assert reg.register("t", '"int"') == 1
    reg.run(reg.service.set_mode("s", {"mode": "READWRITE"}))
    reg.run(reg.service.set_mode(None, {"mode": "READONLY_OVERRIDE"}))
    assert reg.run(reg.service.get_mode("s")) == {"mode": "READONLY_OVERRIDE"}
    assert reg.fails(reg.service.register("s", reg.request('"int"'))).code == 42205
    assert reg.run(reg.service.delete_mode("s")) == {"mode": "READWRITE"}
    assert reg.fails(reg.service.delete_mode("s")).code == 40401


@pytest.mark.parametrize("body", [{"mode": "WRITEONLY"}, {}, {"mode": None}, "IMPORT"])
def test_invalid_mode_is_42204(reg: Registry, body: Any) -> None:
    err = reg.fails(reg.service.set_mode(None, body))
    assert (err.status, err.code, err.message) == (
        422, 42204, "Invalid mode. Valid values are READWRITE, READONLY, and IMPORT.")


def test_import_needs_an_empty_registry_unless_forced(reg: Registry) -> None:
    reg.register("s", '"int"')
    err = reg.fails(reg.service.set_mode(None, {"mode": "IMPORT"}))
    assert (err.code, err.message) == (42205, "Cannot import since found existing subjects")
    assert reg.run(reg.service.set_mode(None, {"mode": "IMPORT"}, force=True)) == {
        "mode": "IMPORT"}
    assert reg.run(reg.service.get_mode()) == {"mode": "IMPORT"}


def test_import_mode_registers_given_ids_and_versions(reg: Registry) -> None:
    err = reg.fails(reg.service.register("s", reg.request('"int"', id=100)))
    assert (err.code, err.message) == (42205, "Subject s is not in import mode")
    reg.run(reg.service.set_mode(None, {"mode": "IMPORT"}))
    assert reg.log.records[-2] == (b'{"keytype":"CLEAR_SUBJECT","subject":null,"magic":0}',
                                   b"{}")
    assert reg.register("s", '"int"', id=100, version=3) == 100
    assert reg.run(reg.service.get_version("s", "3"))["id"] == 100
    # no compatibility check in IMPORT mode
    assert reg.register("s", record("R", "a"), id=7, version=4) == 7
    err = reg.fails(reg.service.register("t", reg.request('"long"', id=100)))
    assert (err.code, err.message) == (42205,
                                       "Overwrite new schema with id 100 is not permitted.")
    err = reg.fails(reg.service.register("t", reg.request('"long"')))
    assert (err.code, err.message) == (42205, "Subject t is not in read-write mode")
    reg.run(reg.service.set_mode(None, {"mode": "READWRITE"}))
    assert reg.register("t", '"long"') == 101


def test_import_into_one_subject_with_others_present(reg: Registry) -> None:
    reg.register("other", '"int"')
    reg.run(reg.service.set_mode("fresh", {"mode": "IMPORT"}))
    assert reg.register("fresh", '"long"', id=50, version=1) == 50
    assert reg.register("other", '"double"') == 51  # ids continue after the imported one
    assert reg.state.next_id == 52


# -- restart -------------------------------------------------------------------------------------


def test_a_restarted_registry_answers_the_same(reg: Registry) -> None:
    reg.register("address", ADDRESS)
    reg.register("person", PERSON, references=ADDR_REF)
    reg.register("x", '"int"')
    reg.run(reg.service.delete_subject("x"))
    reg.run(reg.service.set_config(None, {"compatibility": "FULL"}))
    again = Registry()
    reg.log.replay(again.state.apply)
    service = again.service
    assert again.run(service.list_subjects(deleted=True)) == ["address", "person", "x"]
    assert again.run(service.schema_by_id(2)) == reg.run(reg.service.schema_by_id(2))
    assert again.run(service.referenced_by("address", "1")) == [2]
    assert again.run(service.get_config()) == {"compatibilityLevel": "FULL"}
    assert again.state.next_id == reg.state.next_id == 4
