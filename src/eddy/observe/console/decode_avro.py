"""Avro values of Confluent's wire format, decoded by a schema of the node's registry.

Work is bounded by the value's bytes: a schema whose arrays may hold items that take no
bytes (a hostile count could make the decoder loop for ever on an empty value) or that
contains itself (a value could nest as deep as it is long, past the decoder's stack) is not
decoded (``bounded``): the raw bytes are shown instead.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

_MAX_SCHEMA_DEPTH = 64
_PRIMITIVE_WIDTH = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8,
                    "bytes": 1, "string": 1}


def _zero_width(schema: Any, named: dict[str, Any], seen: frozenset[str], depth: int) -> bool:
    """Whether a value of ``schema`` (fastavro's parsed form) may take no bytes."""
    if depth > _MAX_SCHEMA_DEPTH:
        return True  # too deep to tell: treat as unsafe
    if isinstance(schema, str):
        if schema in _PRIMITIVE_WIDTH:
            return _PRIMITIVE_WIDTH[schema] == 0
        if schema in seen:
            return False  # a recursive reference: the enclosing type decides
        target = named.get(schema)
        return target is None or _zero_width(target, named, seen | {schema}, depth + 1)
    if isinstance(schema, list):
        return False  # a union reads its branch index: at least one byte
    if not isinstance(schema, dict):
        return True
    kind = schema.get("type")
    name = schema.get("name")
    if isinstance(name, str):
        named[name] = schema
        seen = seen | {name}
    if kind == "record" or kind == "error":
        fields = schema.get("fields") or []
        return all(_zero_width(f.get("type"), named, seen, depth + 1) for f in fields)
    if kind == "fixed":
        return int(schema.get("size", 0)) == 0
    if kind == "enum":
        return len(schema.get("symbols") or []) <= 1
    if kind in ("array", "map"):
        return False  # reads a block count: at least one byte
    return _zero_width(kind, named, seen, depth + 1)


def bounded(schema: Any, named: dict[str, Any], path: frozenset[str] = frozenset(),
            depth: int = 0) -> bool:
    """Whether decoding ``schema`` costs at most about its input's bytes: every array item
    takes at least one byte, and no type contains itself."""
    if depth > _MAX_SCHEMA_DEPTH:
        return False
    if isinstance(schema, str):
        if schema in path:
            return False
        target = named.get(schema)
        return target is None or bounded(target, named, path, depth + 1)
    if isinstance(schema, list):
        return all(bounded(s, named, path, depth + 1) for s in schema)
    if not isinstance(schema, dict):
        return True
    name = schema.get("name")
    if isinstance(name, str):
        named[name] = schema
        path = path | {name}
    kind = schema.get("type")
    if kind in ("array", "map"):
        items = schema.get("items") if kind == "array" else schema.get("values")
        # a map entry also reads its key (a string: at least one byte)
        if kind == "array" and _zero_width(items, dict(named), frozenset(), 0):
            return False
        return bounded(items, named, path, depth + 1)
    if kind in ("record", "error"):
        return all(bounded(f.get("type"), named, path, depth + 1)
                   for f in schema.get("fields") or [])
    if isinstance(kind, dict | list):
        return bounded(kind, named, path, depth + 1)
    return True


class AvroDecoder:
    """Decodes the payload (after the 5-byte frame) of one Avro schema to JSON text."""

    label = "avro"

    def __init__(self, parsed: Any) -> None:
        self._parsed = parsed

    def decode(self, payload: bytes) -> tuple[str, str]:
        decoded = fastavro.schemaless_reader(io.BytesIO(payload), self._parsed, None)
        return json.dumps(decoded, default=jsonable, ensure_ascii=False), ""


def load(schema_id: int, text: str) -> tuple[AvroDecoder | None, str]:
    """A decoder of the Avro schema ``text`` (the registry checked it), or why not. CPU
    work: off the event loop."""
    try:
        parsed = fastavro.parse_schema(json.loads(text))
    except Exception as exc:  # never fail the page
        return None, f"schema id {schema_id} does not parse: {str(exc)[:200]}"
    if not bounded(parsed, {}):
        return None, (f"schema id {schema_id} is recursive or has arrays of items that "
                      "take no bytes: not decoded here")
    return AvroDecoder(parsed), ""


def jsonable(value: Any) -> Any:
    """What ``json.dumps`` shows for a value it has no form for (bytes as hex)."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return str(value)
