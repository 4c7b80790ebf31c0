"""A schema's GUID as Confluent Schema Registry 8.x derives it (``GET /schemas/guids/{guid}``).

The GUID is the MD5 digest of the schema's content, written as a UUID: the schema text's UTF-8
bytes; for each reference its name, subject and version (a 4-byte big-endian int); when
metadata is present a 1 byte then its tags (each key, then its values, sorted), properties
(key, value, sorted by key) and sensitive names (sorted); when a rule set is present a 1 byte
then its migration, domain and encoding rules, each as name, doc, kind (default TRANSFORM),
mode (default WRITEREAD), type, tags (sorted), params (sorted by key), expr, onSuccess,
onFailure and a 1 byte when disabled. Absent (null) parts add nothing. The schema type is not
part of it. Strings sort as Java's do (UTF-16 code units); text that is not valid UTF-8 (a
lone surrogate) hashes with ``?`` in its place, as Java's ``getBytes(UTF_8)`` writes it.

Metadata and rule sets come from requests and ``_schemas`` records as they are: a part of
the wrong JSON type is skipped rather than refused (the registry stores what Confluent
stores; the GUID only has to be stable and to match Confluent's for well-formed content).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eddy.registry.records import Reference

_RULE_LISTS = ("migrationRules", "domainRules", "encodingRules")


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "replace")


def _text(value: Any) -> str | None:
    """A JSON value as Java reads it into a String field (non-strings as their JSON text)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _java_order(items: Iterable[str]) -> list[str]:
    """Sorted as Java's ``String.compareTo`` sorts (by UTF-16 code unit)."""
    return sorted(items, key=lambda s: s.encode("utf-16-be", "surrogatepass"))


def _strings(raw: Any) -> list[str]:
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        return []
    return [t for t in (_text(v) for v in raw) if t is not None]


def _string_map(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): t for k, v in raw.items() if (t := _text(v)) is not None}


def _update_metadata(md: Any, metadata: Mapping[str, Any]) -> None:
    tags = metadata.get("tags")
    if isinstance(tags, Mapping):
        for key in _java_order(str(k) for k in tags):
            md.update(_utf8(key))
            for value in _java_order(set(_strings(tags.get(key)))):
                md.update(_utf8(value))
    properties = _string_map(metadata.get("properties"))
    for key in _java_order(properties):
        md.update(_utf8(key))
        md.update(_utf8(properties[key]))
    for name in _java_order(set(_strings(metadata.get("sensitive")))):
        md.update(_utf8(name))


def _update_rule(md: Any, rule: Mapping[str, Any]) -> None:
    for name, default in (("name", None), ("doc", None), ("kind", "TRANSFORM"),
                          ("mode", "WRITEREAD"), ("type", None)):
        value = _text(rule.get(name)) or default
        if value is not None:
            md.update(_utf8(value))
    for tag in _java_order(set(_strings(rule.get("tags")))):
        md.update(_utf8(tag))
    params = _string_map(rule.get("params"))
    for key in _java_order(params):
        md.update(_utf8(key))
        md.update(_utf8(params[key]))
    for name in ("expr", "onSuccess", "onFailure"):
        value = _text(rule.get(name))
        if value is not None:
            md.update(_utf8(value))
    if rule.get("disabled") is True:
        md.update(b"\x01")


def schema_guid(schema: str, references: Sequence[Reference], metadata: Any,
                rule_set: Any) -> str:
    """The GUID of a schema's content (lower-case UUID text)."""
    md = hashlib.md5(_utf8(schema), usedforsecurity=False)
    for ref in references:
        md.update(_utf8(ref.name))
        md.update(_utf8(ref.subject))
        md.update((ref.version & 0xFFFFFFFF).to_bytes(4, "big"))
    if metadata is not None:
        md.update(b"\x01")
        if isinstance(metadata, Mapping):
            _update_metadata(md, metadata)
    if rule_set is not None:
        md.update(b"\x01")
        if isinstance(rule_set, Mapping):
            for name in _RULE_LISTS:
                rules = rule_set.get(name)
                if isinstance(rules, Sequence) and not isinstance(rules, str):
                    for rule in rules:
                        if isinstance(rule, Mapping):
                            _update_rule(md, rule)
    return str(uuid.UUID(bytes=md.digest()))


def parse_guid(text: str) -> str | None:
    """A GUID from a path, in the canonical lower-case form (None: not a UUID)."""
    if len(text) > 64:
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None
