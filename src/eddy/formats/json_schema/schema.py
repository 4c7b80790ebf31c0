"""JSON Schema for the registry: parsing a schema text (hostile: it comes from an HTTP body)
with its references, the canonical and normalized forms, and reference resolution.

Confluent's rules followed here:

* the text must be JSON; the draft is the one its ``$schema`` declares, draft 7 when it
  declares none or one we do not know (Confluent's default); the schema must be valid against
  that draft's meta-schema (``jsonschema``'s check, ``format: regex`` included);
* a ``$ref`` to another registered schema names it by its reference name (a URL or a file
  name), resolved against the root's ``$id`` when it has one; every ``$ref`` must resolve and
  references must not form a cycle;
* canonical form: compact JSON in the key order of the text (Jackson's ``writeValueAsString``
  of the parsed tree); normalized: the same with every object's keys sorted
  (``JsonSchema.normalize()`` re-reads it with ordered properties).

Nesting is bounded before ``json.loads`` runs (a pre-scan of the brackets outside strings),
so neither the decoder nor the meta-schema validation can recurse past :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, TypeAlias
from urllib.parse import urldefrag, urljoin

import jsonschema  # type: ignore[import-untyped]
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as _SPECIFICATIONS  # type: ignore[import-untyped]

from eddy.formats.base import (
    JSON,
    MAX_DEPTH,
    MAX_SCHEMA_CHARS,
    InvalidSchema,
    References,
)

JsonValue: TypeAlias = Any
#: how many referenced schemas one schema may bring (they are all parsed and checked)
MAX_REFERENCES = 1000
#: Confluent's default dialect
DEFAULT_DIALECT = "http://json-schema.org/draft-07/schema#"

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_OPENERS = frozenset("[{")

#: keywords whose value is one subschema / a list of them / a map of name -> subschema
_ONE_SCHEMA = ("additionalItems", "additionalProperties", "contains", "not", "if", "then",
               "else", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
               "contentSchema", "items")
_LIST_OF_SCHEMAS = ("allOf", "anyOf", "oneOf", "items", "prefixItems")
_MAP_OF_SCHEMAS = ("properties", "patternProperties", "definitions", "$defs",
                   "dependentSchemas", "dependencies")


def _depth_exceeds(text: str, limit: int) -> bool:
    """Whether ``[``/``{`` nest deeper than ``limit`` outside JSON strings (no recursion)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return False
    return max(accumulate(1 if c in _OPENERS else -1 for c in brackets)) > limit


def _reject_constant(name: str) -> float:
    raise InvalidSchema(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise InvalidSchema(f"number {text[:40]} is out of range")
    return value


def load_json(text: str, what: str = "schema") -> JsonValue:
    """``text`` as JSON, bounded in length and depth; :class:`InvalidSchema` otherwise."""
    if not isinstance(text, str):
        raise InvalidSchema(f"{what} must be a string")
    if len(text) > MAX_SCHEMA_CHARS:
        raise InvalidSchema(f"{what} is {len(text)} characters, more than {MAX_SCHEMA_CHARS}")
    if _depth_exceeds(text, MAX_DEPTH):
        raise InvalidSchema(f"{what} nests deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except InvalidSchema:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints
        raise InvalidSchema(f"{what} is not valid JSON: {exc}") from None


def dump_json(value: JsonValue, *, sort_keys: bool = False) -> str:
    """Compact JSON, non-ASCII kept as is (as Jackson writes it)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys,
                      allow_nan=False)


def _dialect(schema: JsonValue) -> str:
    if isinstance(schema, dict) and "$schema" in schema:
        declared = schema["$schema"]
        if not isinstance(declared, str):
            raise InvalidSchema("$schema must be a string")
        return declared
    return DEFAULT_DIALECT


def _validator_class(schema: JsonValue) -> Any:
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)


def _specification(schema: JsonValue) -> referencing.Specification[Any]:
    return referencing.jsonschema.specification_with(
        _dialect(schema), default=referencing.jsonschema.DRAFT7)


def _regex_depth(pattern: str) -> int:
    depth = deepest = 0
    escaped = False
    for c in pattern:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
    return deepest


def _check_regexes(schema: JsonValue, what: str) -> None:
    """Every ``pattern`` and ``patternProperties`` key: bounded group nesting (Python's regex
    parser recurses per group) and a repetition count it can compile."""
    stack: list[tuple[JsonValue, str]] = [(schema, "#")]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue
        patterns = [(f"{path}/pattern", node.get("pattern"))]
        if isinstance(node.get("patternProperties"), dict):
            patterns += [(f"{path}/patternProperties", key) for key in node["patternProperties"]]
        for where, pattern in patterns:
            if not isinstance(pattern, str):
                continue
            if _regex_depth(pattern) > MAX_DEPTH:
                raise InvalidSchema(f"{what}: regex at {where} nests deeper than {MAX_DEPTH}")
            try:
                re.compile(pattern)
            except (re.error, OverflowError) as exc:
                raise InvalidSchema(f"{what}: invalid regex {pattern[:80]!r} at {where}: {exc}"
                                    ) from None
        stack.extend((sub, f"{path}/{key}") for key, sub in subschemas(node))


def _check_schema(schema: JsonValue, what: str) -> Any:
    """Meta-schema check of ``schema`` for its declared draft; returns the validator class."""
    _dialect(schema)  # a non-string $schema is refused before jsonschema looks it up
    if not isinstance(schema, (dict, bool)):
        raise InvalidSchema(f"{what} must be a JSON object or a boolean")
    _check_regexes(schema, what)
    cls = _validator_class(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = exc.json_path if exc.path else "$"
        raise InvalidSchema(f"{what} is not a valid JSON Schema: {exc.message} at {where}"
                            ) from None
    except (OverflowError, RecursionError, re.error) as exc:  # belt and braces
        raise InvalidSchema(f"{what} is not a valid JSON Schema: {exc}") from None
    return cls


def _id_of(schema: JsonValue, spec: referencing.Specification[Any]) -> str | None:
    found = spec.id_of(schema) if isinstance(schema, dict) else None
    return found if isinstance(found, str) else None


def subschemas(schema: Mapping[str, Any]) -> Iterator[tuple[str, JsonValue]]:
    """The (keyword path, subschema) pairs directly under ``schema``, by the keywords that hold
    schemas (not ``enum``, ``const``, ``default``, ``examples``: data)."""
    for key in _ONE_SCHEMA:
        value = schema.get(key)
        if isinstance(value, (dict, bool)):
            yield key, value
    for key in _LIST_OF_SCHEMAS:
        value = schema.get(key)
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield f"{key}/{i}", item
    for key in _MAP_OF_SCHEMAS:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, item in value.items():
                if isinstance(item, (dict, bool)):
                    yield f"{key}/{name}", item


def _refs(schema: JsonValue, base: str, spec: referencing.Specification[Any]
          ) -> Iterator[tuple[str, str, str]]:
    """Every ``$ref`` in a document as (base URI in force, ref, path), walked without
    recursion."""
    stack: list[tuple[JsonValue, str, str]] = [(schema, base, "#")]
    while stack:
        node, node_base, path = stack.pop()
        if not isinstance(node, dict):
            continue
        own_id = _id_of(node, spec)
        if own_id is not None:
            node_base = urljoin(node_base, own_id)
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield node_base, ref, path
        for key, sub in subschemas(node):
            stack.append((sub, node_base, f"{path}/{key}"))


@dataclass(frozen=True, eq=False)
class JsonSchema:
    """A parsed, valid JSON Schema with its resolved references."""

    #: the parsed root (a dict or a bool)
    schema: JsonValue
    #: the dialect URI in force (declared by ``$schema`` or draft 7)
    dialect: str
    #: the root's base URI (its ``$id``, else "")
    base_uri: str
    #: the reference names the schema (or its references) actually use, sorted
    referenced_names: tuple[str, ...]
    #: all references given: name -> parsed document
    documents: Mapping[str, JsonValue]
    registry: referencing.Registry[Any] = field(repr=False)
    _canonical: str = field(repr=False)

    @property
    def schema_type(self) -> str:
        return JSON

    @property
    def name(self) -> str | None:
        """Confluent's ``name()`` of a JSON schema: its top-level ``title``."""
        title = self.schema.get("title") if isinstance(self.schema, dict) else None
        return title if isinstance(title, str) else None

    def canonical(self) -> str:
        return self._canonical

    def normalized(self) -> str:
        return dump_json(self.schema, sort_keys=True)

    def resolver(self) -> Any:
        """A resolver at the root (``$ref`` lookups against the references)."""
        return self.registry.resolver(base_uri=self.base_uri)

    def specification(self) -> referencing.Specification[Any]:
        return _specification(self.schema)

    def validator(self) -> Any:
        """A ``jsonschema`` validator of documents against this schema (references resolved)."""
        return _validator_class(self.schema)(self.schema, registry=self.registry)


def _find_cycle(edges: Mapping[str, set[str]]) -> list[str] | None:
    """A cycle among reference names, as a path ``[a, b, ..., a]``; iterative DFS."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(edges):
        if state.get(start):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges[start])))]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child) == 1:
                names = [n for n, _ in stack]
                return [*names[names.index(child):], child]
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(sorted(edges.get(child, ())))))
    return None


def _link(root: JsonValue, references: References
          ) -> tuple[str, dict[str, JsonValue], referencing.Registry[Any], set[str]]:
    """Parse the references, register them under their names (resolved against the root's
    ``$id``, as Confluent does), and check that every ``$ref`` resolves and that no reference
    cycle exists. Returns (base URI, documents, registry, names used)."""
    spec = _specification(root)
    base = urldefrag(_id_of(root, spec) or "").url
    documents: dict[str, JsonValue] = {}
    uri_to_name: dict[str, str] = {}
    resources: list[tuple[str, referencing.Resource[Any]]] = []
    for name, ref_text in references.items():
        if not isinstance(name, str) or not name:
            raise InvalidSchema("a reference name must be a non-empty string")
        doc = load_json(ref_text, f"reference {name!r}")
        _check_schema(doc, f"reference {name!r}")
        documents[name] = doc
        resource = _specification(doc).create_resource(doc)
        for uri in {urljoin(base, name), name, urljoin(base, "./" + name)}:
            uri_to_name.setdefault(urldefrag(uri).url, name)
            resources.append((urldefrag(uri).url, resource))
    registry: referencing.Registry[Any] = _SPECIFICATIONS.with_resources(
        [*resources, (base, spec.create_resource(root))]).crawl()

    used: set[str] = set()
    edges: dict[str, set[str]] = {name: set() for name in documents}
    docs: list[tuple[str | None, JsonValue, str]] = [(None, root, base)]
    docs += [(name, doc, urldefrag(urljoin(base, name)).url) for name, doc in documents.items()]
    for owner, doc, doc_uri in docs:
        where = "schema" if owner is None else f"reference {owner!r}"
        for ref_base, ref, path in _refs(doc, doc_uri, _specification(doc)):
            target = urldefrag(urljoin(ref_base, ref)).url
            target_name = uri_to_name.get(target)
            try:
                registry.resolver(base_uri=ref_base).lookup(ref)
            except referencing.exceptions.Unresolvable:
                missing = target_name is None and target not in ("", doc_uri)
                what = "missing reference" if missing else "unresolvable $ref"
                raise InvalidSchema(f"{what} {ref!r} at {path} in {where}") from None
            if target_name is not None and target != doc_uri:
                used.add(target_name)
                if owner is not None:
                    edges[owner].add(target_name)
    cycle = _find_cycle(edges)
    if cycle is not None:
        raise InvalidSchema("cyclic references: " + " -> ".join(cycle))
    return base, documents, registry, used


def parse(text: str, references: References = {}) -> JsonSchema:  # noqa: B006 (read only)
    """Parse and check a JSON Schema text; ``references`` maps each reference name (the URL
    or file name its ``$ref`` uses) to the referenced schema's text."""
    root = load_json(text)
    try:
        _check_schema(root, "schema")
    except InvalidSchema:
        raise
    except (ValueError, TypeError, LookupError, AttributeError) as exc:
        # the meta-schema check's libraries on hostile input ($schema "http://[x": urllib's
        # ValueError; an odd $defs under a nested $schema: referencing's AttributeError)
        raise InvalidSchema(f"schema cannot be checked: {type(exc).__name__}: "
                            f"{str(exc)[:200]}") from None
    if len(references) > MAX_REFERENCES:
        raise InvalidSchema(f"{len(references)} references, more than {MAX_REFERENCES}")
    try:
        base, documents, registry, used = _link(root, references)
        canonical = dump_json(root)
        canonical.encode("utf-8")
    except InvalidSchema:
        raise
    except (ValueError, TypeError, LookupError, UnicodeError, AttributeError,
            referencing.exceptions.Unresolvable, referencing.exceptions.CannotDetermineSpecification
            ) as exc:  # malformed URIs ($id, names), unencodable text (lone surrogates), a
        # subschema that is no object where referencing expects one ($defs: {"a": ""})
        raise InvalidSchema(f"schema cannot be resolved: {exc}") from None
    return JsonSchema(schema=root, dialect=_dialect(root), base_uri=base,
                      referenced_names=tuple(sorted(used)), documents=documents,
                      registry=registry, _canonical=canonical)
