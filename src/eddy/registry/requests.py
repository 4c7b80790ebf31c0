"""What the registry's REST requests carry, checked as Confluent checks them: schema bodies
(``schema``, ``schemaType``, ``references``, ``metadata``, ``ruleSet``, ``id``, ``version``),
version ids, compatibility levels and modes. Every refusal is a ``RegistryError`` with
Confluent's status, code and message."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eddy.formats.base import AVRO
from eddy.registry.contract import (
    INVALID_COMPATIBILITY_LEVEL,
    INVALID_MODE,
    INVALID_SCHEMA,
    INVALID_VERSION,
    RegistryError,
)
from eddy.registry.records import MAX_JSON_DEPTH, MAX_REFERENCES, Reference, json_depth_exceeds

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
READONLY_MODES = ("READONLY", "READONLY_OVERRIDE")

INVALID_LEVEL_MESSAGE = ("Invalid compatibility level. Valid values are none, backward, forward, "
                         "full, backward_transitive, forward_transitive, and full_transitive")
INVALID_MODE_MESSAGE = "Invalid mode. Valid values are READWRITE, READONLY, and IMPORT."
_INT_MAX = (1 << 31) - 1


def invalid(message: str) -> RegistryError:
    """A 42201 refusal ("Invalid schema ..." and friends)."""
    return RegistryError(422, INVALID_SCHEMA, message)


def _int_field(body: Mapping[str, Any], name: str, what: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"Invalid {what}: field '{name}' is not an integer")
    if not -(1 << 31) <= value <= _INT_MAX:
        raise invalid(f"Invalid {what}: field '{name}' is out of range")
    return value


def parse_references(raw: Any) -> tuple[Reference, ...]:
    """A request's ``references`` (version -1: the latest, resolved at registration)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise invalid("Invalid schema: field 'references' is not a list")
    if len(raw) > MAX_REFERENCES:
        raise invalid(f"Invalid schema: {len(raw)} references, more than {MAX_REFERENCES}")
    refs = []
    for i, item in enumerate(raw):
        where = f"references[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"Invalid schema: field '{where}' is not an object")
        name, subject = item.get("name"), item.get("subject")
        if not isinstance(name, str) or not name:
            raise invalid(f"Invalid schema: field '{where}.name' is missing or not a string")
        if not isinstance(subject, str) or not subject:
            raise invalid(f"Invalid schema: field '{where}.subject' is missing or not a string")
        version = _int_field(item, "version", "schema")
        if version is None or (version < 1 and version != -1):
            raise invalid(f"Invalid schema: field '{where}.version' must be -1 or at least 1")
        refs.append(Reference(name, subject, version))
    return tuple(refs)


@dataclass(frozen=True, slots=True)
class SchemaRequest:
    """A schema as a register, lookup or compatibility request carries it."""

    schema: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    metadata: Any = None
    rule_set: Any = None
    #: IMPORT mode only: the id and version to register with
    id: int | None = None
    version: int | None = None

    @classmethod
    def from_body(cls, body: object) -> SchemaRequest:
        """Reads a JSON request body; refuses what Confluent refuses (42201 "Empty schema"
        when the schema is missing or blank)."""
        if not isinstance(body, dict):
            raise invalid("Invalid schema: the request body is not a JSON object")
        schema = body.get("schema")
        if schema is None or (isinstance(schema, str) and not schema.strip()):
            raise invalid("Empty schema")
        if not isinstance(schema, str):
            raise invalid("Invalid schema: field 'schema' is not a string")
        schema_type = body.get("schemaType")
        if schema_type is None:
            schema_type = AVRO
        if not isinstance(schema_type, str):
            raise invalid("Invalid schema: field 'schemaType' is not a string")
        metadata, rule_set = body.get("metadata"), body.get("ruleSet")
        for name, value in (("metadata", metadata), ("ruleSet", rule_set)):
            if value is not None and not isinstance(value, dict):
                raise invalid(f"Invalid schema: field '{name}' is not an object")
            if json_depth_exceeds(value):
                raise invalid(f"Invalid schema: field '{name}' nests deeper than "
                              f"{MAX_JSON_DEPTH}")
        schema_id = _int_field(body, "id", "schema")
        version = _int_field(body, "version", "schema")
        return cls(schema=schema, schema_type=schema_type.upper(),
                   references=parse_references(body.get("references")), metadata=metadata,
                   rule_set=rule_set,
                   id=schema_id if schema_id is not None and schema_id >= 0 else None,
                   version=version if version is not None and version > 0 else None)


def parse_version(text: str | int) -> int | None:
    """A version id: ``latest`` or -1 (None: the latest), else 1 .. 2^31-1 (42202)."""
    raw = str(text).strip()
    if raw.lower() == "latest":
        return None
    try:
        version = int(raw, 10)
    except ValueError:
        version = 0
    if version == -1:
        return None
    if not 1 <= version <= _INT_MAX:
        raise RegistryError(
            422, INVALID_VERSION,
            f"The specified version '{text}' is not a valid version id. Allowed values are "
            'between [1, 2^31-1] and the string "latest"')
    return version


def parse_level(raw: object) -> str:
    """A compatibility level, case-insensitive (42203)."""
    if isinstance(raw, str) and raw.strip().upper() in LEVELS:
        return raw.strip().upper()
    raise RegistryError(422, INVALID_COMPATIBILITY_LEVEL, INVALID_LEVEL_MESSAGE)


def parse_mode(raw: object) -> str:
    """A mode, case-insensitive (42204)."""
    if isinstance(raw, str) and raw.strip().upper() in MODES:
        return raw.strip().upper()
    raise RegistryError(422, INVALID_MODE, INVALID_MODE_MESSAGE)
