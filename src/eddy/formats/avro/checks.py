"""Refusing Avro schemas whose values could be read without bounds.

An array's block count is read from the payload; if its items can take no bytes at all
(null, a fixed of size 0, a record of only such fields), a few bytes of count make the
decoder loop that many times reading nothing (time and memory, not interruptible). Such
arrays are refused wherever they hide: in the schema itself or in a named type it uses,
defined inline or in a reference. Also the vocabulary eddy.connect.formats.avro_columns shares:
its error type, the primitive type names and full-name resolution.
"""

from __future__ import annotations

from typing import Any

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")


class AvroSchemaError(ValueError):
    """A schema this reader cannot map or decode; the message names the part."""


def fullname(name: str, namespace: str | None) -> str:
    """`name`'s full name: as it is if dotted or without a namespace, else qualified."""
    return name if "." in name or not namespace else f"{namespace}.{name}"


#: a named type's definition and the namespace its own references resolve in
_Named = tuple[Any, str | None]


def _collect(schema: Any, namespace: str | None, named: dict[str, _Named], depth: int = 0
             ) -> None:
    """Every named type (record, error, enum, fixed) `schema` defines, by full name."""
    if depth > 64:
        raise AvroSchemaError("the schema nests deeper than 64 levels")
    if isinstance(schema, list):
        for m in schema:
            _collect(m, namespace, named, depth + 1)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed") and isinstance(schema.get("name"), str):
        ns = schema.get("namespace", namespace)
        full = fullname(schema["name"], ns if isinstance(ns, str) and ns else None)
        named[full] = (schema, full.rpartition(".")[0] or None)
        if kind in ("record", "error") and isinstance(schema.get("fields"), list):
            for f in schema["fields"]:
                if isinstance(f, dict):
                    _collect(f.get("type"), full.rpartition(".")[0] or None, named, depth + 1)
    elif kind == "array":
        _collect(schema.get("items"), namespace, named, depth + 1)
    elif kind == "map":
        _collect(schema.get("values"), namespace, named, depth + 1)
    elif isinstance(kind, dict | list):
        _collect(kind, namespace, named, depth + 1)


def _zero_width(schema: Any, named: dict[str, _Named], namespace: str | None = None,
                seen: frozenset[str] = frozenset()) -> bool:
    """Whether a value of `schema` can take no bytes at all (then an array of them has
    no bound on its count but the count itself): null, a fixed of size 0, a record of
    such fields, by definition or by name (full or relative to `namespace`)."""
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return schema == "null"
        full = fullname(schema, namespace)
        name = full if full in named else schema
        if name not in named or name in seen:
            return False  # unknown here (another check refuses it) or recursive
        definition, ns = named[name]
        return _zero_width(definition, named, ns, seen | {name})
    if not isinstance(schema, dict):
        return False  # a union reads its branch index: one byte at least
    kind = schema.get("type")
    if kind == "fixed":
        return schema.get("size") == 0
    if kind in ("record", "error"):
        own, ns = schema.get("name"), schema.get("namespace", namespace)
        inner = (fullname(own, ns if isinstance(ns, str) and ns else None)
                 .rpartition(".")[0] or None) if isinstance(own, str) else namespace
        fields = schema.get("fields")
        return isinstance(fields, list) and all(
            _zero_width(f.get("type"), named, inner, seen) for f in fields
            if isinstance(f, dict))
    if kind in ("array", "map", "enum"):
        return False  # a block count or an index: one byte at least
    if isinstance(kind, str | dict):
        return _zero_width(kind, named, namespace, seen)  # {"type": "null"} and the like
    return False


def check_arrays(schema: Any, named: dict[str, Any]) -> None:
    """Refuse arrays of zero-width items: a hostile block count would be a loop of that
    many items read from no bytes. `named`: the raw schemas of the references (name ->
    schema JSON), whose named types the schema may use."""
    table: dict[str, _Named] = {}
    for ref in named.values():
        _collect(ref, None, table)
    _collect(schema, None, table)
    walked: set[str] = set()

    def walk(node: Any, namespace: str | None, depth: int) -> None:
        if depth > 64:
            raise AvroSchemaError("the schema nests deeper than 64 levels")
        if isinstance(node, str) and node not in PRIMITIVES:
            # a named type (of this schema or a reference): its arrays once
            full = fullname(node, namespace)
            known = full if full in table else node
            if known in table and known not in walked:
                walked.add(known)
                definition, defined_in = table[known]
                walk(definition, defined_in, depth + 1)
        elif isinstance(node, list):
            for m in node:
                walk(m, namespace, depth + 1)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "error"):
                name, ns = node.get("name"), node.get("namespace", namespace)
                inner = (fullname(name, ns if isinstance(ns, str) and ns else None)
                         .rpartition(".")[0] or None) if isinstance(name, str) else namespace
                for f in node.get("fields") or []:
                    if isinstance(f, dict):
                        walk(f.get("type"), inner, depth + 1)
            elif kind == "array":
                if _zero_width(node.get("items"), table, namespace):
                    raise AvroSchemaError("an array of zero-width items (null, fixed of size "
                                          "0 or records of them) cannot be read safely")
                walk(node.get("items"), namespace, depth + 1)
            elif kind == "map":
                walk(node.get("values"), namespace, depth + 1)
            elif isinstance(kind, dict | list):
                walk(kind, namespace, depth + 1)

    walk(schema, None, 0)
