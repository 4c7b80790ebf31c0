"""Confluent's JSON Schema compatibility rules for objects and arrays: properties and items
added or removed against the writer's (for additions) or the reader's (for removals) content
model -- open, closed, or partially open (``patternProperties``, a schema for
``additionalProperties``/``additionalItems``) --, ``required``, dependencies, and the
size keywords."""

from __future__ import annotations

import re
from typing import Any

from eddy.formats.json_schema.engine import Ctx, Node, bound, compare

#: property names longer than this are not matched against ``patternProperties`` (a hostile
#: pattern could backtrack for long on a long name); such a name counts as not covered
_MAX_MATCHED_NAME = 1000


def _schemas(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _required(node: Node) -> frozenset[str]:
    """The properties ``node`` requires (computed once a node)."""
    found = node.memo.get("required")
    if found is None:
        value = node.get("required")
        found = node.memo["required"] = frozenset(
            v for v in value if isinstance(v, str)) if isinstance(value, list) else frozenset()
    return frozenset(found)


def _additional(node: Node, keyword: str) -> tuple[bool, Node | None]:
    """(whether more properties/items are permitted, the schema they must match)."""
    value = node.get(keyword)
    if value is False:
        return False, None
    if isinstance(value, dict):
        return True, node.child(value)
    return True, None


def _object_open(node: Node) -> bool:
    permits, schema = _additional(node, "additionalProperties")
    return permits and schema is None and not _schemas(node.get("patternProperties"))


def _partial(ctx: Ctx, node: Node, name: str) -> Node | None:
    """The schema a property not declared by ``node`` must match, if ``node`` is partially
    open (the first matching ``patternProperties``, else ``additionalProperties``). Each
    pattern tried counts against the comparison's work cap."""
    for pattern, schema in _schemas(node.get("patternProperties")).items():
        if len(name) > _MAX_MATCHED_NAME or not ctx.charge():
            break
        try:
            if re.search(pattern, name):
                return node.child(schema)
        except (re.error, RecursionError, OverflowError):
            continue
    return _additional(node, "additionalProperties")[1]


def _covered(ctx: Ctx, original: Node, update: Node, prefix: str, action: str) -> bool:
    """Compare in a side context, keep its findings, record whether they are compatible."""
    side = ctx.sub()
    compare(side, original, update)
    ctx.diffs.extend(side.diffs)
    ok = side.compatible()
    ctx.add(f"{prefix}_{action}_{'IS' if ok else 'NOT'}_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
    return ok


def _property_removed(ctx: Ctx, name: str, original: Node, update: Node) -> None:
    """A property of the writer the reader does not declare: the reader's content model
    decides."""
    if _object_open(update):
        ctx.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
        return
    old = original.child(_schemas(original.get("properties"))[name])
    partial = _partial(ctx, update, name)
    if partial is not None and old is not None:
        _covered(ctx, old, partial, "PROPERTY", "REMOVED")
    elif old is not None and old.kind == "false":
        ctx.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
    else:
        ctx.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")


def _property_added(ctx: Ctx, name: str, original: Node, update: Node) -> None:
    """A property the reader declares and the writer does not: the writer's content model
    decides (an open writer may have written anything under that name)."""
    new = update.child(_schemas(update.get("properties"))[name])
    required = name in _required(update)
    with_default = new is not None and new.has_default()
    if _object_open(original):
        if new is None or new.kind == "empty":
            ctx.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
        elif required:
            ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_OPEN_CONTENT_MODEL" if with_default
                    else "REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        else:
            ctx.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
        return
    partial = _partial(ctx, original, name)
    if partial is not None and new is not None:
        _covered(ctx, partial, new, "PROPERTY", "ADDED")
    if required:
        ctx.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if with_default
                else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
    else:
        ctx.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")


def _compare_required(ctx: Ctx, original: Node, update: Node) -> None:
    before, after = _required(original), _required(update)
    new_properties = _schemas(update.get("properties"))
    for name in _schemas(original.get("properties")):
        if name not in new_properties or (name in before) == (name in after):
            continue
        if name in before:
            ctx.add("REQUIRED_ATTRIBUTE_REMOVED", "required", name)
            continue
        new = update.child(new_properties[name])
        ctx.add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if new is not None and new.has_default()
                else "REQUIRED_ATTRIBUTE_ADDED", "required", name)


def _compare_properties(ctx: Ctx, original: Node, update: Node) -> None:
    before = _schemas(original.get("properties"))
    after = _schemas(update.get("properties"))
    for name in [*before, *(n for n in after if n not in before)]:
        here = ctx.at("properties", name)
        if name not in after:
            _property_removed(here, name, original, update)
        elif name not in before:
            _property_added(here, name, original, update)
        else:
            compare(here, original.child(before[name]), update.child(after[name]))


def _dependencies(node: Node) -> tuple[dict[str, set[str]], dict[str, Any]]:
    """(property -> properties it requires, property -> schema it applies): draft 4-7's
    ``dependencies`` and 2019-09's ``dependentRequired``/``dependentSchemas``."""
    arrays: dict[str, set[str]] = {}
    schemas: dict[str, Any] = {}
    for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):
        for name, value in _schemas(node.get(keyword)).items():
            if isinstance(value, list):
                arrays[name] = {v for v in value if isinstance(v, str)}
            elif isinstance(value, (dict, bool)):
                schemas[name] = value
    return arrays, schemas


def _compare_dependencies(ctx: Ctx, original: Node, update: Node) -> None:
    arrays_before, schemas_before = _dependencies(original)
    arrays_after, schemas_after = _dependencies(update)
    for name in [*arrays_before, *(n for n in arrays_after if n not in arrays_before)]:
        before, after = arrays_before.get(name), arrays_after.get(name)
        if after is None:
            ctx.add("DEPENDENCY_ARRAY_REMOVED", "dependencies", name)
        elif before is None:
            ctx.add("DEPENDENCY_ARRAY_ADDED", "dependencies", name)
        elif before != after:
            change = ("EXTENDED" if after >= before else "NARROWED" if before >= after
                      else "CHANGED")
            ctx.add(f"DEPENDENCY_ARRAY_{change}", "dependencies", name)
    for name in [*schemas_before, *(n for n in schemas_after if n not in schemas_before)]:
        if name not in schemas_after:
            ctx.add("DEPENDENCY_SCHEMA_REMOVED", "dependencies", name)
        elif name not in schemas_before:
            ctx.add("DEPENDENCY_SCHEMA_ADDED", "dependencies", name)
        else:
            compare(ctx.at("dependencies", name), original.child(schemas_before[name]),
                    update.child(schemas_after[name]))


def _compare_additional(ctx: Ctx, original: Node, update: Node, keyword: str,
                        prefix: str) -> None:
    """``additionalProperties``/``additionalItems``: permitted or not, and their schema."""
    permits_before, before = _additional(original, keyword)
    permits_after, after = _additional(update, keyword)
    if permits_before != permits_after:
        ctx.add(f"{prefix}_{'ADDED' if permits_after else 'REMOVED'}", keyword)
    elif before is None and after is not None:
        ctx.add(f"{prefix}_NARROWED", keyword)
    elif after is None and before is not None:
        ctx.add(f"{prefix}_EXTENDED", keyword)
    else:
        compare(ctx.at(keyword), before, after)


def compare_object(ctx: Ctx, original: Node, update: Node) -> None:
    """Two object schemas: required, properties, dependencies, additional properties,
    property counts (Confluent's order)."""
    _compare_required(ctx, original, update)
    _compare_properties(ctx, original, update)
    _compare_dependencies(ctx, original, update)
    _compare_additional(ctx, original, update, "additionalProperties", "ADDITIONAL_PROPERTIES")
    bound(ctx, "maxProperties", original, update, "MAX_PROPERTIES")
    bound(ctx, "minProperties", original, update, "MIN_PROPERTIES")


def _items(node: Node) -> tuple[Any, list[Any], str]:
    """(the schema of every item, the per-position schemas, the keyword for the rest):
    draft 4-2019's ``items``/``additionalItems``, 2020-12's ``prefixItems``/``items``."""
    prefix = node.get("prefixItems")
    if isinstance(prefix, list):
        return None, prefix, "items"
    items = node.get("items")
    if isinstance(items, list):
        return None, items, "additionalItems"
    return items, [], "additionalItems"


def _array_open(node: Node, keyword: str) -> bool:
    permits, schema = _additional(node, keyword)
    return permits and schema is None


def _compare_tuple(ctx: Ctx, original: Node, update: Node) -> None:
    _, before, rest_before = _items(original)
    _, after, rest_after = _items(update)
    keyword = "prefixItems" if isinstance(original.get("prefixItems"), list) else "items"
    for index in range(max(len(before), len(after))):
        here = ctx.at(keyword, str(index))
        if index < len(before) and index < len(after):
            compare(here, original.child(before[index]), update.child(after[index]))
        elif index < len(before):  # an item the reader does not describe
            old = original.child(before[index])
            partial = _additional(update, rest_after)[1]
            if _array_open(update, rest_after):
                here.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
            elif partial is not None and old is not None:
                _covered(here, old, partial, "ITEM", "REMOVED")
            elif old is not None and old.kind == "false":
                here.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
            else:
                here.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        else:  # an item the writer did not describe
            new = update.child(after[index])
            partial = _additional(original, rest_before)[1]
            if _array_open(original, rest_before):
                here.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL"
                         if new is None or new.kind == "empty"
                         else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
            elif partial is not None and new is not None:
                _covered(here, partial, new, "ITEM", "ADDED")
            else:
                here.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")


def compare_array(ctx: Ctx, original: Node, update: Node) -> None:
    """Two array schemas: the items' schema, positional items, additional items, sizes."""
    every_before, _, rest_before = _items(original)
    every_after, _, rest_after = _items(update)
    compare(ctx.at("items"), original.child(every_before), update.child(every_after))
    _compare_tuple(ctx, original, update)
    if rest_before == rest_after:
        _compare_additional(ctx, original, update, rest_before, "ADDITIONAL_ITEMS")
    bound(ctx, "maxItems", original, update, "MAX_ITEMS")
    bound(ctx, "minItems", original, update, "MIN_ITEMS")
    unique_before = original.get("uniqueItems") is True
    unique_after = update.get("uniqueItems") is True
    if unique_before != unique_after:
        ctx.add("UNIQUE_ITEMS_REMOVED" if unique_before else "UNIQUE_ITEMS_ADDED", "uniqueItems")
    bound(ctx, "maxContains", original, update, "MAX_CONTAINS")
    bound(ctx, "minContains", original, update, "MIN_CONTAINS")
