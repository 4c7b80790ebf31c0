"""The registry's work on schemas: resolving references against the state, parsing through
the format modules (with a bounded cache), Confluent's compatibility verdicts and messages per
level, and the JSON shapes Confluent answers with.

Parsing is CPU work that grows with the text (the Protobuf parser costs about 7 us a
character): ``off_loop`` runs it in a small pool of worker threads when the texts involved
pass ``OFFLOAD_CHARS``, so that the event loop keeps serving other requests meanwhile; small
schemas are parsed inline, which is faster than a thread hop. References are resolved from
the state on the loop first (``referenced_texts``); what runs in a thread reads no state."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from eddy.formats.base import AVRO, JSON, PROTOBUF, Incompatibility, InvalidSchema, ParsedSchema
from eddy.registry.contract import RegistryError
from eddy.registry.records import Reference
from eddy.registry.requests import invalid
from eddy.registry.state import SchemaState, VersionEntry

log = logging.getLogger(__name__)

SCHEMA_TYPES = (JSON, PROTOBUF, AVRO)
#: the most schemas one schema may pull in through references, transitively
MAX_RESOLVED_REFERENCES = 1000
#: the longest piece of a schema text quoted in an error message
MAX_QUOTED_CHARS = 2000

#: schema texts (with their references) longer than this are parsed in a worker thread
OFFLOAD_CHARS = 16 * 1024
#: worker threads for large parses (the GIL lets only one run at a time anyway; two keep a
#: second request from queueing behind a slow one entirely)
PARSE_THREADS = 2

CompatFn = Callable[[Any, Any], list[Incompatibility]]
_T = TypeVar("_T")
_executor: ThreadPoolExecutor | None = None


def _parse_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="registry-parse")
    return _executor


async def off_loop(work: Callable[[], _T], chars: int) -> _T:
    """``work()``, in a worker thread when ``chars`` (the size of the texts it handles) passes
    OFFLOAD_CHARS, else inline."""
    if chars <= OFFLOAD_CHARS:
        return work()
    return await asyncio.get_running_loop().run_in_executor(_parse_executor(), work)


def check_type(schema_type: str) -> None:
    """42201 for a schema type the registry does not know."""
    _format_module(schema_type)


def _format_module(schema_type: str) -> tuple[Callable[..., ParsedSchema], CompatFn]:
    """The parse and compatibility functions of a format (imported when first needed)."""
    if schema_type == AVRO:
        from eddy.formats.avro import compat as avro_compat
        from eddy.formats.avro import schema as avro_schema
        return avro_schema.parse, avro_compat.compatibility
    if schema_type == JSON:
        from eddy.formats.json_schema import compat as json_compat
        from eddy.formats.json_schema import schema as json_schema
        return json_schema.parse, json_compat.compatibility
    if schema_type == PROTOBUF:
        from eddy.formats.protobuf import compat as protobuf_compat
        from eddy.formats.protobuf import schema as protobuf_schema
        return protobuf_schema.parse, protobuf_compat.compatibility
    raise invalid(f"Invalid schema type {schema_type}")


def refs_text(refs: Sequence[Reference]) -> str:
    """References as Java's List.toString prints Confluent's SchemaReference entities."""
    return "[" + ", ".join(f"{{name='{r.name}', subject='{r.subject}', version={r.version}}}"
                          for r in refs) + "]"


def quoted(text: str) -> str:
    return text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + "..."


def invalid_schema(text: str, refs: Sequence[Reference], schema_type: str,
                   details: str) -> RegistryError:
    """Confluent's 42201: ``Invalid schema <text> with refs <refs> of type <type>, details:``."""
    return invalid(f"Invalid schema {quoted(text)} with refs {refs_text(refs)} of type "
                   f"{schema_type}, details: {details}")


class SchemaParser:
    """Parses schema texts of every format with their references resolved from the state,
    keeping the most recent parses (a schema is parsed once, not per request)."""

    def __init__(self, state: SchemaState, cache_size: int = 256) -> None:
        self._state = state
        self._cache: OrderedDict[tuple[Any, ...], ParsedSchema] = OrderedDict()
        self._cache_size = cache_size
        #: the cache is shared with the worker threads that parse large schemas
        self._cache_lock = threading.Lock()

    def resolve_latest(self, text: str, schema_type: str,
                       refs: tuple[Reference, ...]) -> tuple[Reference, ...]:
        """References with version -1 pinned to the subject's latest version."""
        out = []
        for ref in refs:
            if ref.version == -1:
                latest = self._state.latest(ref.subject)
                if latest is None:
                    raise invalid_schema(text, refs, schema_type, "No schema reference found "
                                         f'for subject "{ref.subject}" and version -1')
                ref = Reference(ref.name, ref.subject, latest.version)
            out.append(ref)
        return tuple(out)

    def referenced_texts(self, text: str, schema_type: str,
                         refs: tuple[Reference, ...]) -> dict[str, str]:
        """Reference name -> schema text, for the references and theirs (dependencies first;
        a name seen twice keeps its first text)."""
        resolved: dict[str, str] = {}
        seen: set[tuple[str, int]] = set()
        stack: list[tuple[Reference, bool]] = [(r, False) for r in reversed(refs)]
        while stack:
            ref, expanded = stack.pop()
            entry = self._state.version(ref.subject, ref.version)
            if entry is None:
                raise invalid_schema(text, refs, schema_type, "No schema reference found for "
                                     f'subject "{ref.subject}" and version {ref.version}')
            if expanded:
                resolved.setdefault(ref.name, entry.schema)
                continue
            if (ref.subject, ref.version) in seen:
                resolved.setdefault(ref.name, entry.schema)
                continue
            seen.add((ref.subject, ref.version))
            if len(seen) > MAX_RESOLVED_REFERENCES:
                raise invalid_schema(text, refs, schema_type, "more than "
                                     f"{MAX_RESOLVED_REFERENCES} references, transitively")
            stack.append((ref, True))
            stack.extend((r, False) for r in reversed(entry.references))
        return resolved

    def parse(self, schema_type: str, text: str, refs: tuple[Reference, ...], *,
              is_new: bool) -> ParsedSchema:
        """The parsed schema; raises RegistryError 42201 when it is not valid."""
        _format_module(schema_type)
        texts = self.referenced_texts(text, schema_type, refs)
        return self.parse_resolved(schema_type, text, refs, texts, is_new=is_new)

    def parse_resolved(self, schema_type: str, text: str, refs: tuple[Reference, ...],
                       texts: dict[str, str], *, is_new: bool) -> ParsedSchema:
        """``parse`` with the references' texts already resolved (``referenced_texts``): it
        reads nothing from the state, so a worker thread may run it."""
        key = (schema_type, text, tuple(texts.items()), is_new)
        with self._cache_lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        parse, _ = _format_module(schema_type)
        try:
            if schema_type == AVRO:
                parsed = parse(text, texts, is_new=is_new)
            else:
                parsed = parse(text, texts)
        except InvalidSchema as exc:
            raise invalid_schema(text, refs, schema_type, str(exc)) from None
        except (ValueError, TypeError, LookupError, RecursionError, AttributeError) as exc:
            log.warning("%s parser failed on a schema: %r", schema_type, exc)
            raise invalid_schema(text, refs, schema_type, str(exc)[:500]) from None
        with self._cache_lock:
            self._cache[key] = parsed
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return parsed

    def is_cached(self, schema_type: str, text: str, texts: dict[str, str], *,
                  is_new: bool) -> bool:
        with self._cache_lock:
            return (schema_type, text, tuple(texts.items()), is_new) in self._cache

    def parse_entry(self, entry: VersionEntry) -> ParsedSchema:
        """A stored version parsed as Confluent reads stored schemas (not as new)."""
        return self.parse(entry.schema_type, entry.schema, entry.references, is_new=False)


#: the longest old schema Confluent quotes whole in a compatibility message
#: (``SchemaValidatorBuilder.MAX_SCHEMA_SIZE_FOR_LOGGING``)
MAX_OLD_SCHEMA_CHARS = 10 * 1024
DIFFERENT_SCHEMA_TYPE = "Incompatible because of different schema type"


def _direction(reader: ParsedSchema, writer: ParsedSchema, labels: tuple[str, str]
               ) -> list[str]:
    """Why a consumer of ``reader`` cannot read ``writer``'s data, as Confluent words it,
    with ``labels`` naming the reader and the writer ("new"/"old" or "old"/"new")."""
    _, compat = _format_module(reader.schema_type)
    out = []
    for issue in compat(reader, writer):
        confluent_message = getattr(issue, "confluent_message", None)
        out.append(confluent_message(*labels) if callable(confluent_message)
                   else issue.message())
    return out


def _old_schema(entry: VersionEntry) -> list[str]:
    """The lines Confluent appends after a direction's messages: the old version and text."""
    text = entry.schema
    quoted_text = (f"'{text}'" if len(text) <= MAX_OLD_SCHEMA_CHARS
                   else f"<truncated> '{text[:MAX_OLD_SCHEMA_CHARS]}...'")
    return [f"{{oldSchemaVersion: {entry.version}}}", f"{{oldSchema: {quoted_text}}}"]


def _against(base: str, new: ParsedSchema, entry: VersionEntry, old: ParsedSchema
             ) -> list[str]:
    """Confluent's messages for ``new`` against one earlier version (its validation
    strategies): BACKWARD, new reads old; FORWARD, old reads new; FULL, old reads new then new
    reads old, the old version quoted after the second only (Confluent appends it after a
    backward finding, not a forward one under FULL); a different type, one line."""
    if old.schema_type != new.schema_type:
        return [DIFFERENT_SCHEMA_TYPE]
    if base == "BACKWARD":
        found = _direction(new, old, ("new", "old"))
        return [*found, *_old_schema(entry)] if found else []
    forward = _direction(old, new, ("old", "new"))
    if base == "FORWARD":
        return [*forward, *_old_schema(entry)] if forward else []
    backward = _direction(new, old, ("new", "old"))
    return [*forward, *backward, *(_old_schema(entry) if backward else [])]


def incompatibilities(level: str, new: ParsedSchema,
                      previous: Sequence[tuple[VersionEntry, ParsedSchema]]) -> list[str]:
    """Confluent's messages when ``new`` breaks ``level`` against ``previous`` (oldest first;
    non-transitive levels look at the last one only); empty when compatible. The check stops
    at the first incompatible version, newest first, and names it as Confluent does."""
    if level == "NONE" or not previous:
        return []
    checked = list(reversed(previous))
    if not level.endswith("_TRANSITIVE"):
        checked = checked[:1]
    base = level.removesuffix("_TRANSITIVE")
    for entry, old in checked:
        messages = _against(base, new, entry, old)
        if messages:
            return [*messages, f"{{validateFields: 'false', compatibility: '{level}'}}"]
    return []


def incompatible_error(subject: str, messages: Sequence[str]) -> RegistryError:
    """Confluent's 409."""
    return RegistryError(409, 409, "Schema being registered is incompatible with an earlier "
                         f'schema for subject "{subject}", details: [{", ".join(messages)}]')


def formatted(parsed: ParsedSchema, fmt: str | None, stored: str) -> str:
    """A schema text in a requested ``format``: Protobuf ``serialized`` (base64
    FileDescriptorProto) and ``ignore_extensions`` (without extend blocks, extension ranges
    and custom options), Avro ``resolved`` (references inlined); otherwise (an unknown
    format, or one of another schema type: Confluent ignores those too) as stored."""
    if not fmt:
        return stored
    wanted = fmt.strip().lower()
    if wanted == "ignore_extensions" and parsed.schema_type == PROTOBUF:
        from eddy.formats.protobuf.printer import without_extensions
        model = getattr(parsed, "model", None)
        return without_extensions(model) if model is not None else stored
    method = {"serialized": "serialized", "resolved": "resolved"}.get(wanted)
    render = getattr(parsed, method, None) if method else None
    if callable(render):
        return str(render())
    return stored


def _optional(entry: VersionEntry) -> dict[str, Any]:
    """A version's references, metadata and ruleSet, each only when present."""
    out: dict[str, Any] = {}
    if entry.references:
        out["references"] = [r.to_json() for r in entry.references]
    if entry.metadata is not None:
        out["metadata"] = entry.metadata
    if entry.rule_set is not None:
        out["ruleSet"] = entry.rule_set
    return out


def _schema_type(entry: VersionEntry) -> dict[str, Any]:
    return {} if entry.schema_type == AVRO else {"schemaType": entry.schema_type}


def entity(entry: VersionEntry, schema: str | None = None) -> dict[str, Any]:
    """Confluent's Schema entity: subject, version, id, guid (Confluent 8's), schemaType
    (not for AVRO), references, metadata and ruleSet (when present), schema."""
    return {"subject": entry.subject, "version": entry.version, "id": entry.id,
            **({"guid": entry.guid} if entry.guid else {}),
            **_schema_type(entry), **_optional(entry),
            "schema": entry.schema if schema is None else schema}


def schema_string(entry: VersionEntry, schema: str | None = None) -> dict[str, Any]:
    """Confluent's SchemaString (``GET /schemas/ids/{id}``)."""
    return {**_schema_type(entry), "schema": entry.schema if schema is None else schema,
            **_optional(entry)}
