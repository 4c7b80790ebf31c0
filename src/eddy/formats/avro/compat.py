"""Avro compatibility: can a reader of one schema decode data written with another?

The rules are the Avro specification's schema resolution, checked the way Confluent Schema
Registry checks them (Java Avro 1.11's ``SchemaCompatibility``, reported through Confluent's
``Difference``), so that the registry answers the same verdicts, error types and paths:

- same primitive types match; promotions int -> long/float/double, long -> float/double,
  float -> double, string <-> bytes;
- records, enums and fixed match by (unqualified) name or a reader alias of the writer's full
  name (``NAME_MISMATCH``); fixed sizes must be equal (``FIXED_SIZE_MISMATCH``);
- every reader field is found in the writer by name or alias, else it needs a default
  (``READER_FIELD_MISSING_DEFAULT_VALUE``); writer fields the reader lacks are skipped;
- writer enum symbols must all be in the reader's, unless the reader has a default symbol
  (``MISSING_ENUM_SYMBOLS``);
- every branch of a writer union must be readable by the reader; a reader union reads a
  non-union writer when one of its branches does (``MISSING_UNION_BRANCH``);
- arrays and maps by their items and values; anything else is a ``TYPE_MISMATCH``.

Paths are JSON pointers into the reader schema (``/fields/0/type``). As in Avro, a check
started afresh (a writer union's branch against a non-union reader) reports paths from "/".
"""

from __future__ import annotations

from dataclasses import dataclass

from eddy.formats.avro.model import (
    Array,
    Enum,
    Field,
    Fixed,
    Map,
    Named,
    Record,
    Schema,
    UnionSchema,
    type_name,
)
from eddy.formats.avro.schema import AvroSchema
from eddy.formats.base import Incompatibility

NAME_MISMATCH = "NAME_MISMATCH"
FIXED_SIZE_MISMATCH = "FIXED_SIZE_MISMATCH"
MISSING_ENUM_SYMBOLS = "MISSING_ENUM_SYMBOLS"
READER_FIELD_MISSING_DEFAULT_VALUE = "READER_FIELD_MISSING_DEFAULT_VALUE"
TYPE_MISMATCH = "TYPE_MISMATCH"
MISSING_UNION_BRANCH = "MISSING_UNION_BRANCH"

#: Confluent's descriptions; the first ``{}`` is the reader's label, the second the writer's
#: ("new"/"old" for BACKWARD, "old"/"new" for FORWARD)
_DESCRIPTIONS = {
    FIXED_SIZE_MISMATCH: "The size of FIXED type field at path '{path}' in the {} schema does "
                         "not match with the {} schema",
    TYPE_MISMATCH: "The type (path '{path}') of a field in the {} schema does not match with "
                   "the {} schema",
    NAME_MISMATCH: "The name of the schema has changed (path '{path}')",
    MISSING_ENUM_SYMBOLS: "The {} schema is missing enum symbols '{info}' at path '{path}' in "
                          "the {} schema",
    MISSING_UNION_BRANCH: "The {} schema is missing a type inside a union field at path "
                          "'{path}' in the {} schema",
    READER_FIELD_MISSING_DEFAULT_VALUE: "The field '{info}' at path '{path}' in the {} schema "
                                        "has no default value and is missing in the {} schema",
}

#: writer types each reader type also reads (the specification's promotions)
_PROMOTIONS = {"long": {"int"}, "float": {"int", "long"}, "double": {"int", "long", "float"},
               "bytes": {"string"}, "string": {"bytes"}}


@dataclass(frozen=True, slots=True)
class AvroIncompatibility(Incompatibility):
    """An ``Incompatibility`` with Avro's own message (Confluent's ``additionalInfo``:
    ``reader type: INT not compatible with writer type: STRING``, ``expected: 8, found: 4``,
    the missing field's name, the missing symbols)."""

    additional_info: str = ""

    def describe(self, reader_label: str, writer_label: str) -> str:
        """Confluent's description with its labels filled in."""
        template = _DESCRIPTIONS[self.error_type]
        return template.format(reader_label, writer_label, path=self.path,
                               info=self.additional_info)

    def confluent_message(self, reader_label: str = "new", writer_label: str = "old") -> str:
        """Confluent's verbose line (``{errorType:'...', description:'...',
        additionalInfo:'...'}``); BACKWARD labels the reader "new", FORWARD "old"."""
        return (f"{{errorType:'{self.error_type}', "
                f"description:'{self.describe(reader_label, writer_label)}', "
                f"additionalInfo:'{self.additional_info}'}}")


def _issue(error_type: str, location: list[str], info: str) -> AvroIncompatibility:
    path = "/" + "/".join(t.replace("~", "~0").replace("/", "~1") for t in location[1:])
    description = _DESCRIPTIONS[error_type].format("reader", "writer", path=path, info=info)
    return AvroIncompatibility(error_type, path, description, info)


_IN_PROGRESS: list[AvroIncompatibility] = []


class _Checker:
    """Java Avro's ``ReaderWriterCompatibilityChecker``: memoized per (reader, writer) node
    pair, so recursive schemas end (a pair met again while in progress counts as compatible)."""

    def __init__(self) -> None:
        self.memo: dict[tuple[int, int], list[AvroIncompatibility]] = {}
        self.keep: list[tuple[Schema, Schema]] = []

    def check(self, token: str, reader: Schema, writer: Schema,
              location: list[str]) -> list[AvroIncompatibility]:
        location.append(token)
        key = (id(reader), id(writer))
        found = self.memo.get(key)
        if found is None:
            self.keep.append((reader, writer))
            self.memo[key] = _IN_PROGRESS
            found = self.calculate(reader, writer, location)
            self.memo[key] = found
        location.pop()
        return found

    def fresh(self, reader: Schema, writer: Schema) -> list[AvroIncompatibility]:
        """Avro's two-argument ``getCompatibility``: a new location stack."""
        return self.check("", reader, writer, [])

    def calculate(self, reader: Schema, writer: Schema,
                  location: list[str]) -> list[AvroIncompatibility]:
        if reader.kind == writer.kind:
            if isinstance(reader, Array) and isinstance(writer, Array):
                return self.check("items", reader.items, writer.items, location)
            if isinstance(reader, Map) and isinstance(writer, Map):
                return self.check("values", reader.values, writer.values, location)
            if isinstance(reader, Fixed) and isinstance(writer, Fixed):
                return [*self.names(reader, writer, location), *self.size(reader, writer,
                                                                          location)]
            if isinstance(reader, Enum) and isinstance(writer, Enum):
                return [*self.names(reader, writer, location),
                        *self.symbols(reader, writer, location)]
            if isinstance(reader, Record) and isinstance(writer, Record):
                return [*self.names(reader, writer, location),
                        *self.fields(reader, writer, location)]
            if isinstance(reader, UnionSchema) and isinstance(writer, UnionSchema):
                return self.writer_union(reader, writer, location)
            return []
        if isinstance(writer, UnionSchema):
            result: list[AvroIncompatibility] = []
            for branch in writer.branches:
                result += self.fresh(reader, branch)
            return result
        if isinstance(reader, UnionSchema):
            for branch in reader.branches:
                if not self.fresh(branch, writer):
                    return []
            return [_issue(MISSING_UNION_BRANCH, location,
                           f"reader union lacking writer type: {type_name(writer)}")]
        if writer.kind in _PROMOTIONS.get(reader.kind, ()):
            return []
        return [_issue(TYPE_MISMATCH, location, f"reader type: {type_name(reader)} not "
                                                f"compatible with writer type: "
                                                f"{type_name(writer)}")]

    def writer_union(self, reader: UnionSchema, writer: UnionSchema,
                     location: list[str]) -> list[AvroIncompatibility]:
        result: list[AvroIncompatibility] = []
        for index, branch in enumerate(writer.branches):
            location.append(str(index))
            if self.fresh(reader, branch):
                result.append(_issue(MISSING_UNION_BRANCH, location,
                                     f"reader union lacking writer type: {type_name(branch)}"))
            location.pop()
        return result

    def fields(self, reader: Record, writer: Record,
               location: list[str]) -> list[AvroIncompatibility]:
        result: list[AvroIncompatibility] = []
        location.append("fields")
        for field in reader.fields:
            location.append(str(field.pos))
            source = _writer_field(writer, field)
            if source is not None:
                result += self.check("type", field.type, source.type, location)
            elif not field.has_default:
                if isinstance(field.type, Enum) and field.type.default is not None:
                    # Avro checks the reader's enum against the writer record itself
                    result += self.check("type", field.type, writer, location)
                else:
                    result.append(_issue(READER_FIELD_MISSING_DEFAULT_VALUE, location,
                                         field.name))
            location.pop()
        location.pop()
        return result

    def symbols(self, reader: Enum, writer: Enum,
                location: list[str]) -> list[AvroIncompatibility]:
        missing = sorted(set(writer.symbols) - set(reader.symbols))
        if not missing or reader.default is not None:
            return []
        location.append("symbols")
        issue = _issue(MISSING_ENUM_SYMBOLS, location, "[" + ", ".join(missing) + "]")
        location.pop()
        return [issue]

    def size(self, reader: Fixed, writer: Fixed,
             location: list[str]) -> list[AvroIncompatibility]:
        if reader.size == writer.size:
            return []
        location.append("size")
        issue = _issue(FIXED_SIZE_MISMATCH, location,
                       f"expected: {writer.size}, found: {reader.size}")
        location.pop()
        return [issue]

    def names(self, reader: Named, writer: Named,
              location: list[str]) -> list[AvroIncompatibility]:
        if reader.name.name == writer.name.name or writer.name in reader.aliases:
            return []
        location.append("name")
        issue = _issue(NAME_MISMATCH, location, f"expected: {writer.name.full}")
        location.pop()
        return [issue]


def _writer_field(writer: Record, field: Field) -> Field | None:
    """The writer field a reader field reads: by name, else by one of its aliases (the
    first; Avro refuses a reader field matching several, which Confluent reports as an
    unexpected error)."""
    direct = writer.by_name.get(field.name)
    if direct is not None:
        return direct
    for alias in field.aliases:
        if alias in writer.by_name:
            return writer.by_name[alias]
    return None


def compatibility(reader: AvroSchema, writer: AvroSchema) -> list[Incompatibility]:
    """The reasons a consumer using ``reader`` cannot read data written with ``writer``
    (empty when it can), in Avro's order."""
    return list(_Checker().fresh(reader.root, writer.root))
