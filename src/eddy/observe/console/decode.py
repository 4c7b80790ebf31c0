"""How the message browser shows a key or a value: Avro decoded to JSON when it is in
Confluent's wire format (magic byte 0, a 4-byte schema id) and the node's registry knows
the id as an Avro schema; else UTF-8 text when it is; else hex. Shown values are cut at
``SHOWN_BYTES`` (the full size is reported).

Decoding runs on a worker thread (``decode_fields``), with the schemas looked up on the
event loop beforehand (``SchemaLookup``). Work is bounded by the value's bytes: a schema
whose arrays or maps may hold items that take no bytes (a hostile count could make the
decoder loop for ever on an empty value) is not decoded, the raw bytes are shown instead.
"""

from __future__ import annotations

import codecs
import io
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastavro

if TYPE_CHECKING:
    from eddy.registry.role import RegistryRole

log = logging.getLogger("eddy.console")

#: bytes of a key or value shown (text or hex); the rest is cut, its size reported
SHOWN_BYTES = 4096
#: parsed Avro schemas kept (by id)
SCHEMA_CACHE = 64
_MAX_SCHEMA_DEPTH = 64
_PRIMITIVE_WIDTH = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4, "double": 8,
                    "bytes": 1, "string": 1}


@dataclass(frozen=True, slots=True)
class Shown:
    """A key or value as the browser shows it: ``format`` is null, avro, utf8 or hex."""

    format: str
    text: str | None
    size: int
    schema_id: int | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "text": self.text, "size": self.size}
        if self.schema_id is not None:
            out["schema_id"] = self.schema_id
        if self.note:
            out["note"] = self.note
        return out


def framed_id(data: bytes | None) -> int | None:
    """The schema id of a value in Confluent's wire format (None: not framed)."""
    if data is None or len(data) < 5 or data[0] != 0:
        return None
    return int.from_bytes(data[1:5], "big")


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


def _bounded(schema: Any, named: dict[str, Any], path: frozenset[str] = frozenset(),
             depth: int = 0) -> bool:
    """Whether decoding ``schema`` costs at most about its input's bytes: every array item
    takes at least one byte, and no type contains itself (a recursive schema could nest
    as deep as the value is long, past the decoder's stack)."""
    if depth > _MAX_SCHEMA_DEPTH:
        return False
    if isinstance(schema, str):
        if schema in path:
            return False
        target = named.get(schema)
        return target is None or _bounded(target, named, path, depth + 1)
    if isinstance(schema, list):
        return all(_bounded(s, named, path, depth + 1) for s in schema)
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
        return _bounded(items, named, path, depth + 1)
    if kind in ("record", "error"):
        return all(_bounded(f.get("type"), named, path, depth + 1)
                   for f in schema.get("fields") or [])
    if isinstance(kind, dict | list):
        return _bounded(kind, named, path, depth + 1)
    return True


class SchemaLookup:
    """Avro schemas by id from the node's registry, parsed once, a bounded number kept."""

    def __init__(self, registry: RegistryRole | None) -> None:
        self._registry = registry
        self._parsed: OrderedDict[int, tuple[Any, str]] = OrderedDict()

    def get(self, schema_id: int) -> tuple[Any, str]:
        """(parsed schema or None, why not) for ``schema_id``; on the event loop."""
        cached = self._parsed.get(schema_id)
        if cached is not None:
            self._parsed.move_to_end(schema_id)
            return cached
        found = self._lookup(schema_id)
        if found[0] is not None or found[1] != "registry not ready":
            self._parsed[schema_id] = found
            if len(self._parsed) > SCHEMA_CACHE:
                self._parsed.popitem(last=False)
        return found

    def _lookup(self, schema_id: int) -> tuple[Any, str]:
        registry = self._registry
        if registry is None:
            return None, "no schema registry on this node"
        if not registry.ready.is_set():
            return None, "registry not ready"
        entry = registry.service.state.schema_by_id(schema_id)
        if entry is None:
            return None, f"schema id {schema_id} is not registered"
        if entry.schema_type != "AVRO":
            return None, f"schema id {schema_id} is {entry.schema_type}, not decoded here"
        if entry.references:
            return None, f"schema id {schema_id} has references, not decoded here"
        try:
            parsed = fastavro.parse_schema(json.loads(entry.schema))
        except Exception as exc:  # the registry checked it; still, never fail the page
            return None, f"schema id {schema_id} does not parse: {exc}"
        if not _bounded(parsed, {}):
            return None, (f"schema id {schema_id} is recursive or has arrays of items that "
                          "take no bytes: not decoded here")
        return parsed, ""


def show_bytes(data: bytes | None, schemas: dict[int, tuple[Any, str]]) -> Shown:
    """``data`` as shown; ``schemas``: the schema lookups done on the loop. Thread-safe."""
    if data is None:
        return Shown("null", None, 0)
    schema_id = framed_id(data)
    note = ""
    if schema_id is not None and schema_id in schemas:
        parsed, why = schemas[schema_id]
        if parsed is not None:
            try:
                decoded = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
                text = json.dumps(decoded, default=_jsonable, ensure_ascii=False)
                return Shown("avro", _cut_text(text), len(data), schema_id)
            except Exception as exc:
                note = f"schema id {schema_id}: does not decode ({type(exc).__name__})"
        else:
            note = why
    cut = data[:SHOWN_BYTES]
    try:  # (a character cut at the end is left out)
        text = codecs.getincrementaldecoder("utf-8")().decode(cut, len(data) <= SHOWN_BYTES)
        if all(c.isprintable() or c in "\t\r\n" for c in text):
            return Shown("utf8", text, len(data), schema_id, note)
    except UnicodeDecodeError:
        pass
    return Shown("hex", cut.hex(" "), len(data), schema_id, note)


def _cut_text(text: str) -> str:
    return text if len(text) <= SHOWN_BYTES else text[:SHOWN_BYTES] + "…"


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return str(value)
