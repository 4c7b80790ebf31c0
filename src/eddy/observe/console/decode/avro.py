"""Avro values of Confluent's wire format, decoded by a schema of the node's registry.

Work is bounded by the value's bytes: a schema whose arrays may hold items that take no
bytes (a hostile count could make the decoder loop for ever on an empty value) or that
contains itself (a value could nest as deep as it is long, past the decoder's stack) is not
decoded (``bounded``): the raw bytes are shown instead.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any

import fastavro

from eddy.formats.avro.checks import AvroSchemaError, check_arrays

_MAX_SCHEMA_DEPTH = 64
def bounded(schema: Any, named: dict[str, Any]) -> bool:
    """Whether decoding ``schema`` costs at most about its input's bytes: every array item
    takes at least one byte (the pipelines' check, eddy.formats.avro.checks), and no type
    contains itself."""
    try:
        check_arrays(schema, {})
    except AvroSchemaError:
        return False
    return _acyclic(schema, named)


def _acyclic(schema: Any, named: dict[str, Any], path: frozenset[str] = frozenset(),
             depth: int = 0) -> bool:
    """Whether no type of ``schema`` contains itself (a value could nest as deep as it is
    long, past the decoder's stack)."""
    if depth > _MAX_SCHEMA_DEPTH:
        return False
    if isinstance(schema, str):
        if schema in path:
            return False
        target = named.get(schema)
        return target is None or _acyclic(target, named, path, depth + 1)
    if isinstance(schema, list):
        return all(_acyclic(s, named, path, depth + 1) for s in schema)
    if not isinstance(schema, dict):
        return True
    name = schema.get("name")
    if isinstance(name, str):
        named[name] = schema
        path = path | {name}
    kind = schema.get("type")
    if kind in ("array", "map"):
        items = schema.get("items") if kind == "array" else schema.get("values")
        return _acyclic(items, named, path, depth + 1)
    if kind in ("record", "error"):
        return all(_acyclic(f.get("type"), named, path, depth + 1)
                   for f in schema.get("fields") or [])
    if isinstance(kind, dict | list):
        return _acyclic(kind, named, path, depth + 1)
    return True


class AvroDecoder:
    """Decodes the payload (after the 5-byte frame) of one Avro schema to JSON text."""

    label = "avro"

    def __init__(self, parsed: Any) -> None:
        self._parsed = parsed

    def decode(self, payload: bytes) -> tuple[str, str]:
        decoded = fastavro.schemaless_reader(io.BytesIO(payload), self._parsed, None)
        return json.dumps(decoded, default=jsonable, ensure_ascii=False), ""


def load(schema_id: int, text: str, refs: Mapping[str, str] | None = None
         ) -> tuple[AvroDecoder | None, str]:
    """A decoder of the Avro schema ``text`` (the registry checked it), its references'
    texts by name (dependencies first), or why not. CPU work: off the event loop."""
    named: dict[str, Any] = {}
    raw_refs: dict[str, Any] = {}
    try:
        for name, ref_text in (refs or {}).items():
            raw_refs[name] = json.loads(ref_text)
            fastavro.parse_schema(raw_refs[name], named_schemas=named)
        raw = json.loads(text)
        check_arrays(raw, raw_refs)
        parsed = fastavro.parse_schema(raw, named_schemas=named)
    except AvroSchemaError:
        return None, (f"schema id {schema_id} has arrays of items that take no bytes: not "
                      "decoded here")
    except Exception as exc:  # never fail the page
        return None, f"schema id {schema_id} does not parse: {str(exc)[:200]}"
    if not bounded(parsed, dict(named)):
        return None, (f"schema id {schema_id} is recursive or has arrays of items that "
                      "take no bytes: not decoded here")
    return AvroDecoder(parsed), ""


def jsonable(value: Any) -> Any:
    """What ``json.dumps`` shows for a value it has no form for (bytes as hex)."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return str(value)
