"""Confluent's JSON Schema compatibility: a structural diff of the writer schema (Confluent's
"original") and the reader schema ("update"). Each difference has Confluent's error type and
a JSON path (``#/properties/x/maxLength``); the schemas are compatible when every difference
is one of :data:`COMPATIBLE_CHANGES` (Confluent's default, strict, policy; 8.x names, where an
added property to an open content model is ``OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL``
or ``REQUIRED_PROPERTY_[WITH_DEFAULT_]ADDED_TO_OPEN_CONTENT_MODEL``).

Here: the rules for strings, numbers, enums, const, ``not`` and combined schemas, and the
entry point; objects and arrays are in :mod:`eddy.formats.json_schema.object_rules`, the model
and the engine in :mod:`eddy.formats.json_schema.engine`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from eddy.formats.base import Incompatibility
from eddy.formats.json_schema.engine import (
    COMPATIBLE_CHANGES,
    RULES,
    TOO_COMPLEX,
    Ctx,
    Diff,
    Model,
    Node,
    Shared,
    bound,
    compare,
    number,
)
from eddy.formats.json_schema.object_rules import compare_array, compare_object
from eddy.formats.json_schema.schema import JsonSchema, dump_json


def _compare_string(ctx: Ctx, original: Node, update: Node) -> None:
    bound(ctx, "maxLength", original, update, "MAX_LENGTH")
    bound(ctx, "minLength", original, update, "MIN_LENGTH")
    before, after = original.get("pattern"), update.get("pattern")
    if before is None and after is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif before is not None and after is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif before != after:
        ctx.add("PATTERN_CHANGED", "pattern")


def _compare_number(ctx: Ctx, original: Node, update: Node) -> None:
    bound(ctx, "maximum", original, update, "MAXIMUM")
    bound(ctx, "minimum", original, update, "MINIMUM")
    bound(ctx, "exclusiveMaximum", original, update, "EXCLUSIVE_MAXIMUM")
    bound(ctx, "exclusiveMinimum", original, update, "EXCLUSIVE_MINIMUM")
    before, after = number(original.get("multipleOf")), number(update.get("multipleOf"))
    if before != after:
        if before is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif after is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        else:
            ctx.add(_multiple_of_change(before, after), "multipleOf")
    if original.integer != update.integer:
        ctx.add("TYPE_EXTENDED" if original.integer else "TYPE_NARROWED")


def _values(node: Node, keyword: str) -> frozenset[str]:
    """The values ``enum`` (or ``const``) allows, as canonical JSON; computed once a node."""
    found = node.memo.get(keyword)
    if found is None:
        value = node.get(keyword)
        if keyword == "const":
            value = [value]
        found = node.memo[keyword] = frozenset(
            dump_json(v, sort_keys=True) for v in value) if isinstance(value, list) else frozenset()
    return frozenset(found)


def _compare_enum(ctx: Ctx, original: Node, update: Node) -> None:
    before, after = _values(original, "enum"), _values(update, "enum")
    if before != after:
        if after >= before:
            ctx.add("ENUM_ARRAY_EXTENDED", "enum")
        elif before >= after:
            ctx.add("ENUM_ARRAY_NARROWED", "enum")
        else:
            ctx.add("ENUM_ARRAY_CHANGED", "enum")


def _compare_const(ctx: Ctx, original: Node, update: Node) -> None:
    if _values(original, "const") != _values(update, "const"):
        ctx.add("ENUM_ARRAY_CHANGED", "const")


def _compare_not(ctx: Ctx, original: Node, update: Node) -> None:
    side = ctx.sub("not")
    compare(side, update.parts[0], original.parts[0])  # reversed: not narrows what it names
    ctx.add("NOT_TYPE_NARROWED" if side.compatible() else "NOT_TYPE_EXTENDED", "not")


def _unique(parts: list[Node]) -> list[Node]:
    seen: dict[str, Node] = {}
    for part in parts:
        seen.setdefault(part.key(), part)
    return list(seen.values())


def _criteria(ctx: Ctx, original: Node, update: Node) -> bool:
    """Records a change of ``allOf``/``anyOf``/``oneOf``; False when it is incompatible."""
    if original.criterion == update.criterion:
        return True
    if update.criterion == "anyOf" or (
            update.criterion == "oneOf" and len(original.parts) == 1) or (
            update.criterion == "allOf" and len(original.parts) == 1
            and len(update.parts) == 1):
        ctx.add("COMBINED_TYPE_EXTENDED")
        return True
    ctx.add("COMBINED_TYPE_CHANGED")
    return False


def _compare_combined(ctx: Ctx, original: Node, update: Node) -> None:
    if not _criteria(ctx, original, update):
        return
    before, after = _unique(original.parts), _unique(update.parts)
    product = update.criterion == "allOf"
    if len(before) < len(after):
        ctx.add("PRODUCT_TYPE_EXTENDED" if product else "SUM_TYPE_EXTENDED")
    elif len(before) > len(after):
        ctx.add("PRODUCT_TYPE_NARROWED" if product else "SUM_TYPE_NARROWED")
    edges: dict[tuple[int, int], list[Diff]] = {}
    for i, part in enumerate(before):
        for j, other in enumerate(after):
            side = ctx.sub(f"{original.criterion}/{i}")
            compare(side, part, other)
            if ctx.shared.capped:
                return
            if side.compatible():
                edges[(i, j)] = side.diffs
    matching = _max_matching(len(before), len(after), edges)
    if matching is None:
        ctx.shared.capped = True
        return
    for edge in matching:
        ctx.diffs.extend(edges[edge])
    if len(matching) < min(len(before), len(after)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


#: steps of the matching search at most (past it: TOO_COMPLEX)
MAX_MATCHING_STEPS = 1_000_000


def _max_matching(left: int, right: int, edges: dict[tuple[int, int], list[Diff]]
                  ) -> list[tuple[int, int]] | None:
    """A maximum bipartite matching of the compatible (writer part, reader part) pairs: a
    greedy start, then augmenting paths searched without recursion. None past
    :data:`MAX_MATCHING_STEPS`."""
    adjacent: list[list[int]] = [[] for _ in range(left)]
    for i, j in sorted(edges):
        adjacent[i].append(j)
    match_right = [-1] * right
    match_left = [-1] * left
    for i in range(left):
        for j in adjacent[i]:
            if match_right[j] < 0:
                match_right[j], match_left[i] = i, j
                break
    steps = 0
    for start in range(left):
        if match_left[start] >= 0:
            continue
        reached_from: dict[int, int] = {}
        visited = [False] * right
        stack: list[tuple[int, Iterator[int]]] = [(start, iter(adjacent[start]))]
        free = -1
        while stack and free < 0:
            node, candidates = stack[-1]
            for j in candidates:
                steps += 1
                if visited[j]:
                    continue
                visited[j] = True
                reached_from[j] = node
                if match_right[j] < 0:
                    free = j
                else:
                    stack.append((match_right[j], iter(adjacent[match_right[j]])))
                break
            else:
                stack.pop()
            if steps > MAX_MATCHING_STEPS:
                return None
        j = free
        while j >= 0:
            i = reached_from[j]
            previous = match_left[i]
            match_right[j], match_left[i] = i, j
            j = previous if i != start else -1
    return [(i, j) for i, j in enumerate(match_left) if j >= 0]


RULES.update({
    "string": _compare_string, "number": _compare_number, "enum": _compare_enum,
    "const": _compare_const, "not": _compare_not, "combined": _compare_combined,
    "object": compare_object, "array": compare_array,
})

_KEYWORD_ADDED = frozenset({
    "MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MINIMUM_ADDED",
    "MULTIPLE_OF_ADDED", "MAX_LENGTH_ADDED", "MIN_LENGTH_ADDED", "PATTERN_ADDED",
    "REQUIRED_ATTRIBUTE_ADDED", "MAX_PROPERTIES_ADDED", "MIN_PROPERTIES_ADDED",
    "DEPENDENCY_ARRAY_ADDED", "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED", "MIN_ITEMS_ADDED",
    "MAX_CONTAINS_ADDED", "MIN_CONTAINS_ADDED", "UNIQUE_ITEMS_ADDED", "ADDITIONAL_ITEMS_REMOVED",
    "ADDITIONAL_PROPERTIES_REMOVED", "SCHEMA_ADDED",
})
_MORE = frozenset({"MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED",
                   "MIN_PROPERTIES_INCREASED", "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED",
                   "MIN_CONTAINS_INCREASED"})
_LESS = frozenset({"MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED",
                   "MAX_CONTAINS_DECREASED", "EXCLUSIVE_MAXIMUM_DECREASED",
                   "MAX_PROPERTIES_DECREASED"})
_FEWER = frozenset({"ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED",
                    "ADDITIONAL_PROPERTIES_NARROWED"})
_VALUE = frozenset({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"})
_TYPE = frozenset({"TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED",
                   "COMBINED_TYPE_SUBSCHEMAS_CHANGED", "ENUM_ARRAY_CHANGED"})
_MORE_ELEMENTS = frozenset({"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED",
                            "NOT_TYPE_EXTENDED"})
_ADDED_TO_OPEN = frozenset({"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                            "REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL",
                            "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL",
                            "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"})


def describe(error_type: str, path: str, reader: str = "reader", writer: str = "writer"
             ) -> str:
    """Confluent's description of a difference (``json.diff.Difference``), ``reader`` and
    ``writer`` naming the two schemas ("new"/"old" for BACKWARD, "old"/"new" for FORWARD).
    The wording, slips included ("The new has a closed content model"), is Confluent's."""
    at = f"at path '{path}'"
    if error_type in _KEYWORD_ADDED:
        return f"The keyword {at} in the {reader} schema is not present in the {writer} schema"
    if error_type in _MORE or error_type in _LESS:
        how = "more" if error_type in _MORE else "less"
        return (f"The value {at} in the {reader} schema is {how} than its value in the "
                f"{writer} schema")
    if error_type in _VALUE:
        return f"The value {at} is different between the {reader} and {writer} schema"
    if error_type in _FEWER or error_type in _MORE_ELEMENTS:
        how = "fewer" if error_type in _FEWER else "more"
        return (f"An array or combined type {at} has {how} elements in the {reader} schema "
                f"than the {writer} schema")
    if error_type in _TYPE:
        return f"A type {at} is different between the {reader} schema and the {writer} schema"
    if error_type in _ADDED_TO_OPEN:
        return (f"The {reader} schema has an open content model and has a property or item "
                f"{at} which is missing in the {writer} schema")
    if error_type == "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL":
        return (f"The {reader} schema has an unopen content model and has a required property "
                f"{at} which is missing in the {writer} schema")
    if error_type in ("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL",
                      "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"):
        return (f"The {reader} has a closed content model and is missing a property or item "
                f"present {at} in the {writer} schema")
    if error_type.endswith("_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"A property or item is missing in the {reader} schema but present {at} in "
                f"the {writer} schema and is not covered by its partially open content model")
    if error_type.endswith("_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"):
        return (f"The {reader} schema has a property or item {at} which is missing in the "
                f"{writer} schema and is not covered by its partially open content model")
    if error_type == TOO_COMPLEX:
        return f"The schemas {at} nest or combine too deeply to be compared"
    return f"{error_type} {at}"


@dataclass(frozen=True, slots=True)
class JsonIncompatibility(Incompatibility):
    """An ``Incompatibility`` that also words itself as Confluent's verbose line."""

    def confluent_message(self, reader_label: str = "new", writer_label: str = "old") -> str:
        """Confluent's line, exactly as JSON Schema's ``Difference.toString`` prints it:
        ``{errorType:"...", description:"..."'}`` (its stray apostrophe included)."""
        description = describe(self.error_type, self.path, reader_label, writer_label)
        return f'{{errorType:"{self.error_type}", description:"{description}"\'}}'


def compatibility(reader: JsonSchema, writer: JsonSchema) -> list[Incompatibility]:
    """Empty when a consumer using ``reader`` reads data written with ``writer``; otherwise
    one entry per incompatible difference (Confluent's error types and JSON paths)."""
    shared = Shared()
    ctx = Ctx(shared)
    try:
        compare(ctx, Model(writer).root, Model(reader).root)
    except RecursionError:  # the depth cap keeps well below the limit: never let one escape
        shared.capped = True
    if shared.capped:  # partial findings would mislead: say only why there are none
        return [JsonIncompatibility(TOO_COMPLEX, "#/", describe(TOO_COMPLEX, "#/"))]
    found: dict[tuple[str, str], None] = {}
    for error_type, path in ctx.diffs:
        if error_type not in COMPATIBLE_CHANGES:
            found.setdefault((error_type, "#/" + "/".join(path)), None)
    return [JsonIncompatibility(t, p, describe(t, p)) for t, p in found]


def _multiple_of_change(before: Decimal, after: Decimal) -> str:
    """How multipleOf changed between two numbers; a ratio beyond Decimal's precision (a
    remainder it cannot compute) counts as changed, not as expanded or reduced."""
    try:
        if before and after % before == 0:
            return "MULTIPLE_OF_EXPANDED"
        if after and before % after == 0:
            return "MULTIPLE_OF_REDUCED"
    except ArithmeticError:
        pass
    return "MULTIPLE_OF_CHANGED"
