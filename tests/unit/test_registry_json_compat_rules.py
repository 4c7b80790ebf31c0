"""JSON Schema compatibility verdicts under BACKWARD (issue 30), rule by rule and in both
directions: boolean schemas, open and closed content models, ``propertyNames``,
``patternProperties``, ``additionalProperties`` and ``dependencies``.

Confluent documents its rules only as the names of its difference types, so the verdicts
here are its implementation's (json-schema-provider, ``json/diff``):

- ``JsonSchema.rawSchema`` loads a boolean schema as Everit's ``TrueSchema``/``FalseSchema``
  (``TrueSchema`` extends ``EmptySchema``, which ``{}`` loads as);
- ``SchemaDiff.compare``: schemas of different classes are no difference when the writer
  (the old schema) is ``FalseSchema`` or the reader (the new one) an ``EmptySchema``, else
  ``TYPE_CHANGED``;
- ``ObjectSchemaDiff`` compares required, properties (an added or removed property against
  the writer's or the reader's content model: open, closed, or partially open by
  ``patternProperties``/an ``additionalProperties`` schema), dependencies,
  ``additionalProperties`` and the property counts; it never reads ``propertyNames``, and
  ``patternProperties`` only through the content model.

The issue listed four cases as registered where "Confluent finds them incompatible":
``false`` -> a closed object, ``{"type":"boolean"}`` -> ``true``, ``{"type":"object"}`` ->
the same with ``properties: {a: {}}``, ``propertyNames`` -> ``properties``; and ``true`` ->
``false`` as refused. By the code above Confluent registers the first three (a ``FalseSchema``
writer, an ``EmptySchema`` reader, ``PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL``),
refuses ``true`` -> ``false`` (``TYPE_CHANGED``), and decides ``propertyNames`` ->
``properties`` by the added property alone: these tests hold Eddy to that.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_registry_service import Registry

from eddy.formats.json_schema.compat import compatibility
from eddy.formats.json_schema.schema import parse
from eddy.registry.contract import RegistryError

STR = {"type": "string"}
NUM = {"type": "number"}
INT = {"type": "integer"}


def obj(props: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    if props is not None:
        out["properties"] = props
    out.update(extra)
    return out


CLOSED = {"additionalProperties": False}
#: (rule, old schema, new schema, what BACKWARD finds incompatible old -> new,
#:  what it finds incompatible new -> old); an empty list is compatible
RULES: list[tuple[str, Any, Any, list[str], list[str]]] = [
    # boolean schemas
    ("false to a closed object", False, obj({"a": STR}, **CLOSED), [], ["TYPE_CHANGED #/"]),
    ("boolean to true", {"type": "boolean"}, True, [], ["TYPE_CHANGED #/"]),
    ("true to false", True, False, ["TYPE_CHANGED #/"], []),
    ("{} to false", {}, False, ["TYPE_CHANGED #/"], []),
    ("{} to true", {}, True, [], []),
    ("a string to false", STR, False, ["TYPE_CHANGED #/"], []),
    ("a property true to false", obj({"a": True}), obj({"a": False}),
     ["TYPE_CHANGED #/properties/a"], []),
    ("a property false removed from a closed object", obj({"a": STR, "b": False}, **CLOSED),
     obj({"a": STR}, **CLOSED), [], []),
    # open content models (no additionalProperties, no patternProperties)
    ("an empty-schema property added to an open object", obj(), obj({"a": {}}), [], []),
    ("an optional property added to an open object", obj({"a": STR}),
     obj({"a": STR, "b": STR}),
     ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/b"], []),
    ("a required property added to an open object", obj({"a": STR}),
     obj({"a": STR, "b": STR}, required=["b"]),
     ["REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/b"], []),
    ("a property true added to an open object", obj({"a": STR}),
     obj({"a": STR, "b": True}), [], []),
    # closed content models
    ("an optional property added to a closed object", obj({"a": STR}, **CLOSED),
     obj({"a": STR, "b": STR}, **CLOSED), [],
     ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/b"]),
    ("a required property added to a closed object", obj({"a": STR}, **CLOSED),
     obj({"a": STR, "b": STR}, required=["b"], **CLOSED),
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"],
     ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/b"]),
    ("a required property with a default added to a closed object", obj({"a": STR}, **CLOSED),
     obj({"a": STR, "b": {"type": "string", "default": "x"}}, required=["b"], **CLOSED), [],
     ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/b"]),
    ("an open object closed", obj({"a": STR}), obj({"a": STR}, **CLOSED),
     ["ADDITIONAL_PROPERTIES_REMOVED #/additionalProperties"], []),
    # additionalProperties
    ("additionalProperties widened", obj(additionalProperties=INT),
     obj(additionalProperties=NUM), [],
     ["TYPE_NARROWED #/additionalProperties"]),
    ("additionalProperties changed", obj(additionalProperties=STR),
     obj(additionalProperties=NUM), ["TYPE_CHANGED #/additionalProperties"],
     ["TYPE_CHANGED #/additionalProperties"]),
    ("additionalProperties' schema dropped", obj(additionalProperties=STR), obj(), [],
     ["ADDITIONAL_PROPERTIES_NARROWED #/additionalProperties"]),
    ("additionalProperties true to a schema", obj(additionalProperties=True),
     obj(additionalProperties=STR),
     ["ADDITIONAL_PROPERTIES_NARROWED #/additionalProperties"], []),
    ("a property added, covered by additionalProperties", obj({"a": STR},
                                                              additionalProperties=STR),
     obj({"a": STR, "b": STR}, additionalProperties=STR), [], []),
    ("a property added, not covered by additionalProperties",
     obj({"a": STR}, additionalProperties=STR),
     obj({"a": STR, "b": NUM}, additionalProperties=STR),
     ["TYPE_CHANGED #/properties/b",
      "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/b"],
     ["TYPE_CHANGED #/properties/b",
      "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/b"]),
    # patternProperties
    ("a property added, covered by patternProperties",
     obj({"a": STR}, patternProperties={"^S_": STR}, **CLOSED),
     obj({"a": STR, "S_1": STR}, patternProperties={"^S_": STR}, **CLOSED), [], []),
    ("a property added, narrower than its patternProperties",
     obj({"a": STR}, patternProperties={"^I_": NUM}, **CLOSED),
     obj({"a": STR, "I_1": INT}, patternProperties={"^I_": NUM}, **CLOSED),
     ["TYPE_NARROWED #/properties/I_1",
      "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/I_1"], []),
    ("a property outside every pattern added to a closed object",
     obj({"a": STR}, patternProperties={"^S_": STR}, **CLOSED),
     obj({"a": STR, "x": NUM}, patternProperties={"^S_": STR}, **CLOSED), [],
     ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/x"]),
    ("patternProperties added to an open object", obj({"a": STR}),
     obj({"a": STR}, patternProperties={"^S_": STR}), [], []),
    # propertyNames: never compared, only the properties count
    ("propertyNames to properties", obj(propertyNames={"pattern": "^a"}),
     obj({"a": STR}),
     ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/a"], []),
    ("propertyNames to an empty-schema property", obj(propertyNames={"maxLength": 3}),
     obj({"abc": {}}), [], []),
    ("propertyNames added", obj({"a": STR}), obj({"a": STR}, propertyNames={"pattern": "^a"}),
     [], []),
    ("propertyNames changed", obj(propertyNames={"pattern": "^a"}),
     obj(propertyNames={"pattern": "^b"}), [], []),
    # dependencies
    ("a dependency array added", obj({"a": STR, "b": STR}),
     obj({"a": STR, "b": STR}, dependencies={"a": ["b"]}),
     ["DEPENDENCY_ARRAY_ADDED #/dependencies/a"], []),
    ("a dependency array extended", obj({"a": STR}, dependencies={"a": ["b"]}),
     obj({"a": STR}, dependencies={"a": ["b", "c"]}),
     ["DEPENDENCY_ARRAY_EXTENDED #/dependencies/a"], []),
    ("a dependency array changed", obj({"a": STR}, dependencies={"a": ["b"]}),
     obj({"a": STR}, dependencies={"a": ["c"]}),
     ["DEPENDENCY_ARRAY_CHANGED #/dependencies/a"],
     ["DEPENDENCY_ARRAY_CHANGED #/dependencies/a"]),
    ("a dependency schema added", obj({"a": STR}),
     obj({"a": STR}, dependencies={"a": obj({"b": STR})}),
     ["DEPENDENCY_SCHEMA_ADDED #/dependencies/a"], []),
    ("a dependency schema widened", obj({"a": STR}, dependencies={"a": obj({"b": INT})}),
     obj({"a": STR}, dependencies={"a": obj({"b": NUM})}), [],
     ["TYPE_NARROWED #/dependencies/a/properties/b"]),
]


def _incompatible(old: Any, new: Any) -> list[str]:
    reader, writer = parse(json.dumps(new)), parse(json.dumps(old))
    return [f"{i.error_type} {i.path}" for i in compatibility(reader, writer)]


@pytest.mark.parametrize(("old", "new", "forward", "backward"),
                         [pytest.param(*case[1:], id=case[0]) for case in RULES])
def test_backward_verdicts_in_both_directions(old: Any, new: Any, forward: list[str],
                                              backward: list[str]) -> None:
    assert _incompatible(old, new) == forward
    assert _incompatible(new, old) == backward


def _register(old: Any, new: Any) -> int:
    """The status of registering ``new`` after ``old`` under BACKWARD."""
    reg = Registry()
    reg.register("s", json.dumps(old), schemaType="JSON")
    try:
        reg.register("s", json.dumps(new), schemaType="JSON")
    except RegistryError as exc:
        return exc.status
    return 200


@pytest.mark.parametrize(("old", "new", "status"), [
    # the issue's examples, with Confluent's verdicts (see the module's docstring)
    (False, obj({"a": STR}, **CLOSED), 200),
    ({"type": "boolean"}, True, 200),
    (obj(), obj({"a": {}}), 200),
    (obj(propertyNames={"pattern": "^a"}), obj({"a": STR}), 409),
    (True, False, 409),
    # and back
    (obj({"a": STR}, **CLOSED), False, 409),
    (True, {"type": "boolean"}, 409),
    (obj({"a": {}}), obj(), 200),
    (obj({"a": STR}), obj(propertyNames={"pattern": "^a"}), 200),
    (False, True, 200),
])
def test_the_issues_examples_through_the_registry(old: Any, new: Any, status: int) -> None:
    assert _register(old, new) == status
