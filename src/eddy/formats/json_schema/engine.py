"""The model and the comparison engine behind Confluent's JSON Schema compatibility rules
(:mod:`eddy.formats.json_schema.compat`): schemas read as Confluent's loader (Everit) sees them,
and a memoized, depth- and work-bounded pairwise comparison that records differences with
their JSON paths. The rules per kind of schema register in :data:`RULES`.

A schema is a ``$ref``, ``true``/``{}`` (empty), ``false``, or the parts it declares (a type
-- several types are an ``anyOf`` --, ``enum``, ``const``, ``allOf``/``anyOf``/``oneOf``,
``not``, ``if``); several parts are an ``allOf``.

Bounded for hostile schemas: a (writer, reader) pair met again while under comparison (a
recursive ``$ref``) counts as compatible (as Confluent does), each pair is compared once, and
the comparison depth and the number of pairs are capped; past a cap the result is the
incompatibility :data:`TOO_COMPLEX` (our type: Confluent has no cap).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import referencing.exceptions

from eddy.formats.json_schema.schema import JsonSchema, JsonValue, dump_json

#: Confluent's compatible difference types (everything else makes the schemas incompatible)
COMPATIBLE_CHANGES = frozenset({
    "ID_CHANGED", "DESCRIPTION_CHANGED", "TITLE_CHANGED", "DEFAULT_CHANGED", "SCHEMA_REMOVED",
    "TYPE_EXTENDED", "MAX_LENGTH_INCREASED", "MAX_LENGTH_REMOVED", "MIN_LENGTH_DECREASED",
    "MIN_LENGTH_REMOVED", "PATTERN_REMOVED", "MAXIMUM_INCREASED", "MAXIMUM_REMOVED",
    "MINIMUM_DECREASED", "MINIMUM_REMOVED", "EXCLUSIVE_MAXIMUM_INCREASED",
    "EXCLUSIVE_MAXIMUM_REMOVED", "EXCLUSIVE_MINIMUM_DECREASED", "EXCLUSIVE_MINIMUM_REMOVED",
    "MULTIPLE_OF_REDUCED", "MULTIPLE_OF_REMOVED", "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED",
    "REQUIRED_ATTRIBUTE_REMOVED", "DEPENDENCY_ARRAY_NARROWED", "DEPENDENCY_ARRAY_REMOVED",
    "DEPENDENCY_SCHEMA_REMOVED", "MAX_PROPERTIES_INCREASED", "MAX_PROPERTIES_REMOVED",
    "MIN_PROPERTIES_DECREASED", "MIN_PROPERTIES_REMOVED", "ADDITIONAL_PROPERTIES_ADDED",
    "ADDITIONAL_PROPERTIES_EXTENDED", "PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL",
    "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL",
    "PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL",
    "PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "MAX_ITEMS_INCREASED",
    "MAX_ITEMS_REMOVED", "MIN_ITEMS_DECREASED", "MIN_ITEMS_REMOVED", "UNIQUE_ITEMS_REMOVED",
    "ADDITIONAL_ITEMS_ADDED", "ADDITIONAL_ITEMS_EXTENDED",
    "ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_CLOSED_CONTENT_MODEL",
    "ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL",
    "ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
    "ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", "ENUM_ARRAY_EXTENDED",
    "COMBINED_TYPE_EXTENDED", "PRODUCT_TYPE_NARROWED", "SUM_TYPE_EXTENDED", "NOT_TYPE_NARROWED",
    "MAX_CONTAINS_INCREASED", "MAX_CONTAINS_REMOVED", "MIN_CONTAINS_DECREASED",
    "MIN_CONTAINS_REMOVED",
})
#: our error type when the caps below are reached
TOO_COMPLEX = "SCHEMA_TOO_COMPLEX_TO_COMPARE"
#: nested comparisons at most (each is a few Python frames)
MAX_COMPARE_DEPTH = 96
#: (writer, reader) subschema pairs compared at most per check
MAX_COMPARISONS = 50_000
#: ``$ref`` -> ``$ref`` hops followed at most
_MAX_REF_CHAIN = 64

_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
#: the keywords that imply a type when ``type`` is absent (Everit's property sniffing)
_SNIFFED = (
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")),
    ("string", ("minLength", "maxLength", "pattern")),
    ("object", ("properties", "required", "additionalProperties", "patternProperties",
                "minProperties", "maxProperties", "dependencies", "propertyNames",
                "dependentRequired", "dependentSchemas")),
    ("array", ("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains",
               "prefixItems")),
)


@dataclass(eq=False, slots=True)
class Node:
    """One schema (or one part of one) as Confluent's model sees it."""

    kind: str  # empty false ref combined not enum const conditional string number ...
    raw: JsonValue
    model: Model
    resolver: Any
    criterion: str = ""  # combined: allOf / anyOf / oneOf
    parts: list[Node] = field(default_factory=list)  # combined subschemas, or not's schema
    integer: bool = False  # number: requires an integer
    target: Node | None = None  # ref: the resolved schema
    memo: dict[str, Any] = field(default_factory=dict)  # derived values, computed once

    def child(self, value: JsonValue) -> Node | None:
        """The node of a subschema of this one (``None`` when absent)."""
        if not isinstance(value, (dict, bool)):
            return None
        return self.model.node(value, self.resolver)

    def get(self, keyword: str) -> Any:
        return self.raw.get(keyword) if isinstance(self.raw, dict) else None

    def has_default(self) -> bool:
        return isinstance(self.raw, dict) and "default" in self.raw

    def key(self) -> str:
        """Identity for collapsing duplicate subschemas of a combined schema."""
        key = self.memo.get("key")
        if key is None:
            key = self.memo["key"] = f"{self.kind}|{self.criterion}|{self.integer}|" + dump_json(
                self.raw)
        return str(key)


class Model:
    """Builds (and caches) the nodes of one parsed schema."""

    def __init__(self, schema: JsonSchema) -> None:
        self._spec = schema.specification()
        self._cache: dict[int, Node] = {}
        self._empty = Node("empty", True, self, None)
        self.root = self.node(schema.schema, schema.resolver())

    def node(self, value: JsonValue, resolver: Any) -> Node:
        cached = self._cache.get(id(value))
        if cached is None:
            cached = self._build(value, resolver)
            self._cache[id(value)] = cached
        return cached

    def _build(self, value: JsonValue, resolver: Any) -> Node:
        if value is False:
            return Node("false", value, self, resolver)
        if not isinstance(value, dict):  # true
            return Node("empty", value, self, resolver)
        if isinstance(value.get("$id"), str) and resolver is not None:
            with contextlib.suppress(ValueError, TypeError):
                resolver = resolver.in_subresource(self._spec.create_resource(value))
        if isinstance(value.get("$ref"), str):
            return Node("ref", value, self, resolver)
        parts = self._typed(value, resolver)
        if "enum" in value:
            parts.append(Node("enum", value, self, resolver))
        if "const" in value:
            parts.append(Node("const", value, self, resolver))
        for criterion in ("allOf", "anyOf", "oneOf"):
            subs = value.get(criterion)
            if isinstance(subs, list):
                nodes = [self.node(sub, resolver) for sub in subs]
                parts.append(Node("combined", value, self, resolver, criterion, nodes))
        if isinstance(value.get("not"), (dict, bool)):
            parts.append(Node("not", value, self, resolver,
                               parts=[self.node(value["not"], resolver)]))
        if "if" in value:
            parts.append(Node("conditional", value, self, resolver))
        if not parts:
            return Node("empty", value, self, resolver)
        if len(parts) == 1:
            return parts[0]
        return Node("combined", value, self, resolver, "allOf", parts)

    def _typed(self, value: dict[str, Any], resolver: Any) -> list[Node]:
        declared = value.get("type")
        if isinstance(declared, str):
            declared = [declared]
            single = True
        else:
            single = False
        if isinstance(declared, list):
            nodes = [self._of_type(t, value, resolver) for t in declared if t in _TYPES]
            if single:
                return nodes
            return [Node("combined", value, self, resolver, "anyOf", nodes)]
        return [self._of_type(kind, value, resolver) for kind, keywords in _SNIFFED
                if any(k in value for k in keywords)]

    def _of_type(self, name: str, value: dict[str, Any], resolver: Any) -> Node:
        if name == "integer":
            return Node("number", value, self, resolver, integer=True)
        return Node(name, value, self, resolver)

    def deref(self, node: Node) -> Node:
        """Follow ``$ref``s to a schema (a ref loop is the empty schema)."""
        for _ in range(_MAX_REF_CHAIN):
            if node.kind != "ref":
                return node
            if node.target is None:
                try:
                    found = node.resolver.lookup(node.raw["$ref"])
                except (referencing.exceptions.Unresolvable, ValueError, LookupError):
                    return self._empty
                node.target = self.node(found.contents, found.resolver)
            node = node.target
        return self._empty


Diff = tuple[str, tuple[str, ...]]
Rule = Callable[["Ctx", Node, Node], None]
#: kind of schema -> the rule comparing two schemas of that kind (filled by json_compat)
RULES: dict[str, Rule] = {}


@dataclass(slots=True)
class Shared:
    memo: dict[tuple[int, int], list[Diff]] = field(default_factory=dict)
    in_progress: set[tuple[int, int]] = field(default_factory=set)
    depth: int = 0
    budget: int = MAX_COMPARISONS
    #: a cap was reached: the findings are partial
    capped: bool = False


class Ctx:
    """Where the comparison is (a JSON path) and what it found."""

    __slots__ = ("diffs", "path", "shared")

    def __init__(self, shared: Shared, path: tuple[str, ...] = ()) -> None:
        self.shared = shared
        self.path = path
        self.diffs: list[Diff] = []

    def sub(self, *more: str) -> Ctx:
        """A side context (its own findings) at ``more`` below this path."""
        return Ctx(self.shared, self.path + more)

    def at(self, *more: str) -> Ctx:
        """This context's findings, recorded at ``more`` below this path."""
        inner = Ctx(self.shared, self.path + more)
        inner.diffs = self.diffs
        return inner

    def add(self, error_type: str, *attribute: str) -> None:
        self.diffs.append((error_type, self.path + attribute))

    def charge(self) -> bool:
        """Spend one unit of the work cap; False (and the result capped) when none is left."""
        if self.shared.budget <= 0:
            self.shared.capped = True
            return False
        self.shared.budget -= 1
        return True

    def compatible(self) -> bool:
        return all(t in COMPATIBLE_CHANGES for t, _ in self.diffs)


def compare(ctx: Ctx, original: Node | None, update: Node | None) -> None:
    """Record in ``ctx`` how ``update`` (the reader) differs from ``original`` (the writer)."""
    if (original is None and update is None) or ctx.shared.capped:
        return  # nothing to compare, or past a cap: the result is TOO_COMPLEX anyway
    if original is None:
        ctx.add("SCHEMA_ADDED")
        return
    if update is None:
        ctx.add("SCHEMA_REMOVED")
        return
    original = original.model.deref(original)
    update = update.model.deref(update)
    shared = ctx.shared
    pair = (id(original), id(update))
    known = shared.memo.get(pair)
    if known is None:
        if pair in shared.in_progress:
            return  # a recursive schema met again: compatible, as Confluent treats it
        if shared.depth >= MAX_COMPARE_DEPTH or shared.budget <= 0:
            shared.capped = True
            ctx.add(TOO_COMPLEX)
            return
        shared.budget -= 1
        shared.depth += 1
        shared.in_progress.add(pair)
        try:
            inner = Ctx(shared)
            _compare_schemas(inner, original, update)
        finally:
            shared.depth -= 1
            shared.in_progress.discard(pair)
        known = shared.memo[pair] = inner.diffs
    ctx.diffs.extend((t, ctx.path + p) for t, p in known)


def _compare_schemas(ctx: Ctx, original: Node, update: Node) -> None:
    if original.kind != "combined" and update.kind == "combined":
        if len(update.parts) == 1:
            if try_compare(ctx, original, update.parts[0]):
                return
        elif update.criterion in ("anyOf", "oneOf"):
            for part in update.parts:
                if try_compare(ctx, original, part):
                    ctx.add("SUM_TYPE_EXTENDED")
                    return
    elif (original.kind == "combined" and update.kind != "combined"
          and len(original.parts) == 1 and try_compare(ctx, original.parts[0], update)):
        return
    if original.kind != update.kind:
        if original.kind != "false" and update.kind != "empty":
            ctx.add("TYPE_CHANGED")
        return
    rule = RULES.get(original.kind)
    if rule is not None:
        rule(ctx, original, update)


def try_compare(ctx: Ctx, original: Node, update: Node) -> bool:
    """Compare in a side context; keep its findings only when they are compatible."""
    side = ctx.sub()
    compare(side, original, update)
    if side.compatible():
        ctx.diffs.extend(side.diffs)
        return True
    return False


def number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def bound(ctx: Ctx, attribute: str, original: Node, update: Node, prefix: str) -> None:
    """``<PREFIX>_ADDED/REMOVED/INCREASED/DECREASED`` for a numeric keyword."""
    before, after = number(original.get(attribute)), number(update.get(attribute))
    if before == after:
        return
    if before is None:
        ctx.add(f"{prefix}_ADDED", attribute)
    elif after is None:
        ctx.add(f"{prefix}_REMOVED", attribute)
    else:
        ctx.add(f"{prefix}_INCREASED" if before < after else f"{prefix}_DECREASED", attribute)


