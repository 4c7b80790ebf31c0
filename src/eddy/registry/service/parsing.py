"""The registry service's parsing of requested and stored schemas, with the size bound and
the move of large parses and compatibility checks off the event loop (``off_loop``).

Mixed into ``RegistryService``: the attributes declared below are the service's.
"""

from __future__ import annotations

from eddy.formats.base import ParsedSchema
from eddy.registry import records as rec
from eddy.registry.requests import SchemaRequest, invalid
from eddy.registry.schema_ops import (
    SchemaParser,
    check_type,
    formatted,
    incompatibilities,
    off_loop,
)
from eddy.registry.state import VersionEntry


class SchemaParsing:
    """Parsing operations of the registry service."""

    parser: SchemaParser
    max_schema_chars: int

    def _check_size(self, request: SchemaRequest) -> None:
        size = len(request.schema)
        if size > self.max_schema_chars:
            raise invalid(f"Invalid schema: field 'schema' is {size} characters, more than "
                          f"the {self.max_schema_chars} allowed")

    async def _prepare(self, request: SchemaRequest, normalize: bool,
                       is_new: bool) -> tuple[ParsedSchema, str, tuple[rec.Reference, ...]]:
        """Parses a requested schema (in a worker thread when large): (parsed, the text to
        store and compare, references with "latest" pinned)."""
        self._check_size(request)
        schema_type, schema = request.schema_type, request.schema
        check_type(schema_type)
        refs = self.parser.resolve_latest(schema, schema_type, request.references)
        texts = self.parser.referenced_texts(schema, schema_type, refs)

        def work() -> tuple[ParsedSchema, str]:
            parsed = self.parser.parse_resolved(schema_type, schema, refs, texts,
                                                is_new=is_new)
            if normalize:
                parsed = self.parser.parse_resolved(schema_type, parsed.normalized(), refs,
                                                    texts, is_new=is_new)
            return parsed, parsed.canonical()

        chars = len(schema) + sum(len(t) for t in texts.values())
        parsed, text = await off_loop(work, chars)
        return parsed, text, refs

    async def _parse_entry(self, entry: VersionEntry) -> ParsedSchema:
        """A stored version parsed as Confluent reads stored schemas (in a worker thread when
        large and not parsed before)."""
        texts = self.parser.referenced_texts(entry.schema, entry.schema_type,
                                             entry.references)
        if self.parser.is_cached(entry.schema_type, entry.schema, texts, is_new=False):
            return self.parser.parse_resolved(entry.schema_type, entry.schema,
                                              entry.references, texts, is_new=False)
        chars = len(entry.schema) + sum(len(t) for t in texts.values())
        return await off_loop(lambda: self.parser.parse_resolved(
            entry.schema_type, entry.schema, entry.references, texts, is_new=False), chars)

    async def _incompatibilities(self, level: str, parsed: ParsedSchema, text_chars: int,
                                 previous: list[VersionEntry]) -> list[str]:
        """Confluent's messages for ``parsed`` against ``previous`` at ``level`` (the check
        itself in a worker thread when the schemas are large)."""
        if level == "NONE" or not previous:
            return []
        if not level.endswith("_TRANSITIVE"):
            previous = previous[-1:]
        versions = [(entry, await self._parse_entry(entry)) for entry in previous]
        chars = text_chars + sum(len(e.schema) for e in previous)
        return await off_loop(lambda: incompatibilities(level, parsed, versions), chars)

    async def _formatted(self, entry: VersionEntry, fmt: str | None) -> str | None:
        if not fmt:
            return None
        parsed = await self._parse_entry(entry)
        return await off_loop(lambda: formatted(parsed, fmt, entry.schema), len(entry.schema))
