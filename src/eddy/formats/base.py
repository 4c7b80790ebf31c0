"""What every schema format (Avro, JSON Schema, Protobuf) offers the registry: parsing a
schema text with its references, the canonical form the registry compares and stores, the
normalized form (``normalize=true``), and compatibility checks in one direction.

Each format package (``avro``, ``json_schema``, ``protobuf``) provides in its ``schema``
module a ``parse(text, references) -> ParsedSchema`` that raises ``InvalidSchema`` (the
registry's 42201 "Invalid schema ...") and in its ``compat`` module a
``compatibility(reader, writer) -> list[Incompatibility]`` (empty: a reader of ``reader``
reads data written with ``writer``). The registry maps its
levels onto it: BACKWARD checks (new as reader, old as writer), FORWARD (old as reader,
new as writer), FULL both, and the ``_TRANSITIVE`` forms against every earlier version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

#: Confluent's names of the formats (the ``schemaType`` field; absent means AVRO)
AVRO = "AVRO"
JSON = "JSON"
PROTOBUF = "PROTOBUF"
#: the largest schema text accepted (Confluent's default `schema.max.size`-like bound)
MAX_SCHEMA_CHARS = 1 << 20
#: how deep a schema may nest (records in records, nested JSON objects): hostile input is
#: refused before any recursion can exhaust the stack
MAX_DEPTH = 64


class InvalidSchema(ValueError):
    """A schema that does not parse or is not valid for its format; the message is what the
    registry answers after "Invalid schema " (error 42201)."""


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """One reason two schemas are incompatible, as Confluent reports it with
    ``verbose=true``: an error type (e.g. ``READER_FIELD_MISSING_DEFAULT_VALUE``,
    ``PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL``, ``FIELD_KIND_CHANGED``), the path in the
    schema (``/fields/1``, ``#/properties/x``, ``#/Message/field``) and a description."""

    error_type: str
    path: str
    description: str

    def message(self) -> str:
        """Confluent's verbose line for it."""
        return (f"{{errorType:'{self.error_type}', description:'{self.description}', "
                f"additionalInfo:'{self.path}'}}")


class ParsedSchema(Protocol):
    """A parsed schema of one format."""

    @property
    def schema_type(self) -> str:
        """AVRO, JSON or PROTOBUF."""
        ...

    def canonical(self) -> str:
        """The form the registry stores and compares: the same schema written differently
        (whitespace, for Avro ``{"type":"string"}`` vs ``"string"``) gives the same text."""
        ...

    def normalized(self) -> str:
        """``normalize=true``'s form: canonical, plus the format's normalization
        (Confluent's: e.g. Avro attributes in a fixed order, Protobuf options and
        imports sorted, JSON Schema keys sorted)."""
        ...


#: a schema's references resolved: reference name (Avro full name / JSON $ref URL /
#: Protobuf import path) -> the referenced schema's text
References = Mapping[str, str]
