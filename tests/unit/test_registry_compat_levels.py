"""Compatibility per level and per format, through the registry service (in-memory log).

For Avro, JSON Schema and Protobuf, three-version histories (v1, v2 registered under NONE)
and a candidate v3, with the verdict of every level: NONE, BACKWARD, BACKWARD_TRANSITIVE,
FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE. Each verdict is checked three ways: a
registration (an id, or Confluent's 409), ``POST /compatibility/subjects/s/versions`` (as a
registration is checked, verbose messages equal to the 409's details) and
``.../versions/latest`` (against v2 only: a transitive level answers as its plain form).

The cases come from the formats' rules as Confluent publishes them ("Schema Evolution and
Compatibility": BACKWARD lets consumers of the new schema read old data -- delete fields, add
optional ones; FORWARD lets consumers of the old schema read new data -- add fields, delete
optional ones; FULL both; _TRANSITIVE against every earlier version): Avro by schema
resolution, JSON Schema by Confluent's content-model rules (open: adding a property breaks
BACKWARD; closed: removing one does), Protobuf by Confluent's diff (fields matched by number,
added/removed fields and renames compatible, a reused number with another scalar kind or an
added message type for old readers not). Transitive forms differ from the plain ones on
histories where v3 suits v2 but not v1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from eddy.registry.contract import RegistryError
from eddy.registry.memory_log import MemoryLog
from eddy.registry.requests import SchemaRequest
from eddy.registry.service.core import RegistryService
from eddy.registry.state import SchemaState

T = TypeVar("T")

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")
SUBJECT = "s"


class Registry:
    """A registry service over a fresh in-memory log, driven synchronously."""

    def __init__(self) -> None:
        self.state = SchemaState()
        self.service = RegistryService(MemoryLog(self.state.apply), self.state)

    def run(self, call: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await call
        return asyncio.run(wrapped())

    def request(self, schema: str, schema_type: str) -> SchemaRequest:
        body: dict[str, Any] = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        return SchemaRequest.from_body(body)

    def register(self, schema: str, schema_type: str) -> int:
        answer = self.run(self.service.register(SUBJECT, self.request(schema, schema_type)))
        return int(answer["id"])

    def refused(self, schema: str, schema_type: str) -> RegistryError:
        with pytest.raises(RegistryError) as err:
            self.register(schema, schema_type)
        return err.value

    def check(self, schema: str, schema_type: str, version: str | None) -> dict[str, Any]:
        return self.run(self.service.check_compatibility(
            SUBJECT, version, self.request(schema, schema_type), verbose=True))

    def set_level(self, level: str) -> None:
        self.run(self.service.set_config(SUBJECT, {"compatibility": level}))


@dataclass(frozen=True)
class Case:
    name: str
    schema_type: str
    history: tuple[str, str]
    candidate: str
    #: the registration verdict per level, in LEVELS order: Y accepted, N refused
    verdicts: str
    #: the error types a refusal names (at least one of them, in every refusal)
    errors: tuple[str, ...] = ()


# -- Avro (schema resolution: BACKWARD = the new schema reads data written with the old) -------


def avro(*fields: str | tuple[str, Any], name: str = "R") -> str:
    """A record; a field is ``name`` (a string), ``name=default`` or (name, type[, default])."""
    out = []
    for spec in fields:
        if isinstance(spec, tuple):
            entry: dict[str, Any] = {"name": spec[0], "type": spec[1]}
            if len(spec) > 2:
                entry["default"] = spec[2]
        else:
            field, eq, default = spec.partition("=")
            entry = {"name": field, "type": "string"}
            if eq:
                entry["default"] = default
        out.append(entry)
    return json.dumps({"type": "record", "name": name, "fields": out})


def avro_enum(*symbols: str) -> str:
    return json.dumps({"type": "enum", "name": "E", "symbols": list(symbols)})


AVRO_CASES = [
    Case("optional field added everywhere", "AVRO", (avro("a"), avro("a", "b=x")),
         avro("a", "b=x", "c=y"), "YYYYYYY"),
    # v2 gave b a default, v3 drops it: v3 reads v2's data (b is there) but not v1's
    Case("default dropped from an added field", "AVRO", (avro("a"), avro("a", "b=x")),
         avro("a", "b"), "YYNYYYN", ("READER_FIELD_MISSING_DEFAULT_VALUE",)),
    # v1's readers need b (no default): v3 removing it breaks them, v2's readers have a default
    Case("field without a default removed", "AVRO", (avro("a", "b"), avro("a", "b=x")),
         avro("a"), "YYYYNYN", ("READER_FIELD_MISSING_DEFAULT_VALUE",)),
    Case("field type changed", "AVRO", (avro("a"), avro("a", "c=x")),
         avro(("a", "int"), "c=x"), "YNNNNNN", ("TYPE_MISMATCH",)),
    # int -> long is a promotion for readers of the new schema only
    Case("int promoted to long", "AVRO", (avro(("n", "int")), avro(("n", "int"), "c=x")),
         avro(("n", "long"), "c=x"), "YYYNNNN", ("TYPE_MISMATCH",)),
    Case("enum symbol added", "AVRO", (avro_enum("A", "B"), avro_enum("A", "B", "C")),
         avro_enum("A", "B", "C", "D"), "YYYNNNN", ("MISSING_ENUM_SYMBOLS",)),
    Case("nullable union with a default added", "AVRO", (avro("a"), avro("a", "c=x")),
         avro("a", "c=x", ("d", ["null", "string"], None)), "YYYYYYY"),
    Case("record renamed", "AVRO", (avro("a"), avro("a", "c=x")),
         avro("a", "c=x", name="Other"), "YNNNNNN", ("NAME_MISMATCH",)),
]


# -- JSON Schema (Confluent's diff rules and content models) ---------------------------------


def jobj(props: dict[str, Any], *, closed: bool = False, required: tuple[str, ...] = (),
         **extra: Any) -> str:
    schema: dict[str, Any] = {"type": "object", "properties": props, **extra}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return json.dumps(schema)


def jstr(**keywords: Any) -> str:
    return json.dumps({"type": "string", **keywords})


STR = {"type": "string"}
JSON_CASES = [
    Case("annotations changed only", "JSON", (jstr(maxLength=9), jstr(maxLength=9, title="a")),
         jstr(maxLength=9, title="b", description="c"), "YYYYYYY"),
    # a longer maxLength reads more: v3 reads v2's data (10 -> 20) but v1 had no limit
    Case("maxLength relaxed after being added", "JSON", (jstr(), jstr(maxLength=10)),
         jstr(maxLength=20), "YYNNNNN", ("MAX_LENGTH_ADDED", "MAX_LENGTH_DECREASED")),
    # v3's data (at most 15) suits v2's readers (20), not v1's (10)
    Case("maxLength between the two before", "JSON", (jstr(maxLength=10), jstr(maxLength=20)),
         jstr(maxLength=15), "YNNYNNN", ("MAX_LENGTH_DECREASED",)),
    # a title alone changes nothing, but v1's readers still allow only 10 characters
    Case("title added to a relaxed limit", "JSON", (jstr(maxLength=10), jstr(maxLength=20)),
         jstr(maxLength=20, title="name"), "YYYYNYN", ("MAX_LENGTH_DECREASED",)),
    # open content model: old data may hold any "b", so a new typed "b" breaks new readers;
    # old readers accept anything extra
    Case("property added to an open content model", "JSON",
         (jobj({"a": STR}), jobj({"a": STR}, title="t")), jobj({"a": STR, "b": STR}),
         "YNNYYNN", ("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                     "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")),
    # closed content model: an optional property added is fine for new readers, and old
    # (closed) readers refuse the data that has it
    Case("optional property added to a closed content model", "JSON",
         (jobj({"a": STR}, closed=True), jobj({"a": STR}, closed=True, title="t")),
         jobj({"a": STR, "b": STR}, closed=True), "YYYNNNN",
         ("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",)),
    Case("required property added", "JSON",
         (jobj({"a": STR, "b": STR}, closed=True),
          jobj({"a": STR, "b": STR}, closed=True, title="t")),
         jobj({"a": STR, "b": STR}, closed=True, required=("b",)), "YNNYYNN",
         ("REQUIRED_ATTRIBUTE_ADDED",)),
    Case("integer widened to number", "JSON",
         (json.dumps({"type": "integer"}), json.dumps({"type": "integer", "title": "n"})),
         json.dumps({"type": "number"}), "YYYNNNN", ("TYPE_NARROWED",)),
    Case("enum extended", "JSON",
         (json.dumps({"enum": ["a", "b"]}), json.dumps({"enum": ["a", "b"], "title": "e"})),
         json.dumps({"enum": ["a", "b", "c"]}), "YYYNNNN", ("ENUM_ARRAY_NARROWED",)),
    Case("type changed", "JSON", (jstr(), jstr(title="s")), json.dumps({"type": "boolean"}),
         "YNNNNNN", ("TYPE_CHANGED",)),
]


# -- Protobuf (Confluent's diff: fields by number) ---------------------------------------------

P3 = 'syntax = "proto3";\npackage acme;\n'
P2 = 'syntax = "proto2";\npackage acme;\n'

PROTOBUF_CASES = [
    Case("field added and renamed", "PROTOBUF",
         (P3 + "message M { string a = 1; }", P3 + "message M { string a = 1; int64 b = 2; }"),
         P3 + "message M { string name = 1; int64 b = 2; bool c = 3; }", "YYYYYYY"),
    # number 1 removed in v2 (compatible) and reused with another scalar kind in v3
    Case("field number reused with another kind", "PROTOBUF",
         (P3 + "message M { string a = 1; int64 b = 2; }", P3 + "message M { int64 b = 2; }"),
         P3 + "message M { int64 b = 2; int32 a = 1; }", "YYNYNYN",
         ("FIELD_SCALAR_KIND_CHANGED",)),
    # a message type added: new readers are fine, old readers miss it
    Case("message type added", "PROTOBUF",
         (P3 + "message M { string a = 1; }", P3 + "message M { string a = 1; int64 b = 2; }"),
         P3 + "message M { string a = 1; int64 b = 2; }\nmessage N { string x = 1; }",
         "YYYNNNN", ("MESSAGE_REMOVED",)),
    # v3 drops a message type v1 and v2 have, and reuses a number v1 had as a string
    Case("message type removed", "PROTOBUF",
         (P3 + "message M { string a = 1; }\nmessage N { string x = 1; }",
          P3 + "message M { }\nmessage N { string x = 1; }"),
         P3 + "message M { int32 a = 1; }", "YNNYNNN",
         ("MESSAGE_REMOVED", "FIELD_SCALAR_KIND_CHANGED")),
    Case("required field added (proto2)", "PROTOBUF",
         (P2 + "message M { optional string a = 1; }",
          P2 + "message M { optional string a = 1; optional int32 b = 2; }"),
         P2 + "message M { optional string a = 1; optional int32 b = 2; required int64 c = 3; }",
         "YNNNNNN", ("REQUIRED_FIELD_ADDED", "REQUIRED_FIELD_REMOVED")),
    # new readers would see a and b as exclusive; old readers read a oneof's field as a field
    Case("two fields moved into a oneof", "PROTOBUF",
         (P3 + "message M { string a = 1; string b = 2; }",
          P3 + "message M { string a = 1; string b = 2; int32 c = 3; }"),
         P3 + "message M { oneof pick { string a = 1; string b = 2; } int32 c = 3; }",
         "YNNYYNN", ("MULTIPLE_FIELDS_MOVED_TO_ONEOF",)),
    Case("message field's type changed", "PROTOBUF",
         (P3 + "message A { string x = 1; }\nmessage B { string y = 1; }\n"
               "message M { A v = 1; }",
          P3 + "message A { string x = 1; }\nmessage B { string y = 1; }\n"
               "message M { A v = 1; int32 n = 2; }"),
         P3 + "message A { string x = 1; }\nmessage B { string y = 1; }\n"
              "message M { B v = 1; int32 n = 2; }",
         "YNNNNNN", ("FIELD_NAMED_TYPE_CHANGED",)),
]

CASES = AVRO_CASES + JSON_CASES + PROTOBUF_CASES


def _verdict(case: Case, level: str) -> bool:
    return case.verdicts[LEVELS.index(level)] == "Y"


def _named_version(case: Case, level: str) -> int | None:
    """The version Confluent names in a refusal ({oldSchemaVersion: N}): the newest one the
    candidate breaks; none under FULL when only the forward direction breaks there (Confluent
    quotes the old version after backward findings only)."""
    plain = level.removesuffix("_TRANSITIVE")
    version = 2 if level == plain or not _verdict(case, plain) else 1
    if plain == "FULL":
        backward = "BACKWARD" if version == 2 else "BACKWARD_TRANSITIVE"
        return version if not _verdict(case, backward) else None
    return version


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.schema_type}-{c.name}")
def test_level_accepts_or_refuses_the_third_version(case: Case, level: str) -> None:
    assert len(case.verdicts) == len(LEVELS)
    reg = Registry()
    reg.set_level("NONE")
    for schema in case.history:
        reg.register(schema, case.schema_type)
    reg.set_level(level)
    accepted = _verdict(case, level)

    # against the latest version only: a transitive level answers as its plain form
    latest = reg.check(case.candidate, case.schema_type, "latest")
    plain_accepts = _verdict(case, level.removesuffix("_TRANSITIVE"))
    assert latest["is_compatible"] is plain_accepts, latest
    if plain_accepts:
        assert latest["messages"] == []
    else:
        assert latest["messages"][-1] == (
            f"{{validateFields: 'false', compatibility: '{level}'}}")

    # as a registration is checked, then the registration itself
    every = reg.check(case.candidate, case.schema_type, None)
    assert every["is_compatible"] is accepted, every
    if accepted:
        assert every["messages"] == []
        assert reg.register(case.candidate, case.schema_type) > 0
        assert reg.run(reg.service.list_versions(SUBJECT)) == [1, 2, 3]
        return
    messages: list[str] = every["messages"]
    quote = "'" if case.schema_type == "AVRO" else '"'
    found = [m for m in messages if m.startswith("{errorType:")]
    assert found and all(m.startswith(f"{{errorType:{quote}") for m in found), messages
    assert any(f"errorType:{quote}{error}{quote}" in m for m in found for error in case.errors)
    named = _named_version(case, level)
    versions = [m for m in messages if m.startswith("{oldSchemaVersion:")]
    assert versions == ([f"{{oldSchemaVersion: {named}}}"] if named else []), messages
    if named:
        old = reg.run(reg.service.get_version(SUBJECT, named))["schema"]
        assert f"{{oldSchema: '{old}'}}" in messages
    assert messages[-1] == f"{{validateFields: 'false', compatibility: '{level}'}}"

    err = reg.refused(case.candidate, case.schema_type)
    assert (err.status, err.code) == (409, 409)
    assert err.message == (
        f'Schema being registered is incompatible with an earlier schema for subject '
        f'"{SUBJECT}", details: [{", ".join(messages)}]')
    assert reg.run(reg.service.list_versions(SUBJECT)) == [1, 2]


def test_every_level_both_accepts_and_refuses_in_every_format() -> None:
    for schema_type in ("AVRO", "JSON", "PROTOBUF"):
        cases = [c for c in CASES if c.schema_type == schema_type]
        for i, level in enumerate(LEVELS[1:], start=1):
            assert {c.verdicts[i] for c in cases} == {"Y", "N"}, (schema_type, level)
        for plain in ("BACKWARD", "FORWARD", "FULL"):
            p, t = LEVELS.index(plain), LEVELS.index(plain + "_TRANSITIVE")
            assert any(c.verdicts[p] == "Y" and c.verdicts[t] == "N" for c in cases), (
                schema_type, plain)


# -- Confluent's message shapes -----------------------------------------------------------------


def _refusal(schema_type: str, level: str, old: str, new: str) -> list[str]:
    reg = Registry()
    reg.register(old, schema_type)
    reg.set_level(level)
    answer = reg.check(new, schema_type, "latest")
    assert answer["is_compatible"] is False
    return list(answer["messages"])


def test_avro_backward_and_forward_word_the_reader_new_and_old() -> None:
    backward = _refusal("AVRO", "BACKWARD", avro("a"), avro("a", "b"))
    assert backward[0] == (
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path "
        "'/fields/1' in the new schema has no default value and is missing in the old "
        "schema', additionalInfo:'b'}")
    forward = _refusal("AVRO", "FORWARD", avro("a", "b"), avro("a"))
    assert forward[0] == (
        "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE', description:'The field 'b' at path "
        "'/fields/1' in the old schema has no default value and is missing in the new "
        "schema', additionalInfo:'b'}")


def test_full_lists_forward_findings_first_and_quotes_the_old_schema_after_backward_ones(
) -> None:
    old = avro(("n", "int"), "a")
    # long -> int breaks old readers (forward); the new required field breaks new readers
    new = avro(("n", "long"), "a", "b")
    messages = _refusal("AVRO", "FULL", old, new)
    assert [m.split(",")[0] for m in messages[:2]] == [
        "{errorType:'TYPE_MISMATCH'", "{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE'"]
    assert "in the old schema does not match with the new schema" in messages[0]
    assert messages[2:] == ["{oldSchemaVersion: 1}", f"{{oldSchema: '{old.replace(' ', '')}'}}",
                            "{validateFields: 'false', compatibility: 'FULL'}"]


def test_protobuf_messages_are_confluents_lines() -> None:
    messages = _refusal("PROTOBUF", "FORWARD", P3 + "message T { string a = 1; }",
                        P3 + "message T { string a = 1; }\nmessage U { string b = 1; }")
    assert messages[0] == ('{errorType:"MESSAGE_REMOVED", description:"The old schema is '
                           "missing a MESSAGE type at path '#/U' in the new schema\"}")
    messages = _refusal("PROTOBUF", "BACKWARD", P3 + "message T { string a = 1; }",
                        P3 + "message T { int32 a = 1; }")
    assert messages[0] == (
        '{errorType:"FIELD_SCALAR_KIND_CHANGED", description:"The kind of a SCALAR field at '
        "path '#/T/1' in the new schema does not match its kind in the old schema\"}")


def test_json_schema_messages_are_confluents_lines() -> None:
    messages = _refusal("JSON", "BACKWARD", jstr(), jstr(maxLength=5))
    # Confluent's JSON Schema Difference.toString ends with a stray apostrophe
    assert messages[0] == ('{errorType:"MAX_LENGTH_ADDED", description:"The keyword at path '
                           "'#/maxLength' in the new schema is not present in the old "
                           "schema\"'}")
    messages = _refusal("JSON", "BACKWARD", jobj({"a": STR, "b": STR}, closed=True),
                        jobj({"a": STR}, closed=True))
    assert messages[0].startswith('{errorType:"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", '
                                  "description:\"The new has a closed content model")


def test_a_different_schema_type_is_one_line_without_the_old_schema() -> None:
    reg = Registry()
    reg.register('"string"', "AVRO")
    answer = reg.check('{"type":"string"}', "JSON", "latest")
    assert answer == {"is_compatible": False, "messages": [
        "Incompatible because of different schema type",
        "{validateFields: 'false', compatibility: 'BACKWARD'}"]}


def test_a_long_old_schema_is_truncated_as_confluent_does() -> None:
    old = json.dumps({"type": "record", "name": "R", "doc": "x" * 12_000,
                      "fields": [{"name": "a", "type": "string"}]})
    messages = _refusal("AVRO", "BACKWARD", old, avro("a", "b"))
    [quoted] = [m for m in messages if m.startswith("{oldSchema:")]
    assert quoted.startswith("{oldSchema: <truncated> '{")
    assert quoted.endswith("...'}")
    assert len(quoted) == len("{oldSchema: <truncated> '...'}") + 10 * 1024


def test_none_accepts_anything_of_the_same_type_but_not_another_type() -> None:
    reg = Registry()
    reg.set_level("NONE")
    reg.register(avro("a"), "AVRO")
    assert reg.check('"int"', "AVRO", None) == {"is_compatible": True, "messages": []}
    assert reg.register('"int"', "AVRO") == 2
    # NONE checks nothing, a change of format included (Confluent's NONE validator is empty)
    assert reg.register(jstr(), "JSON") == 3
