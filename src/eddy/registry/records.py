"""The ``_schemas`` topic's records, byte for byte as Confluent Schema Registry writes them.

Keys (Jackson, ``@JsonPropertyOrder``; compaction compares key bytes, so the order and the
absence of spaces matter):

- ``{"keytype":"SCHEMA","subject":S,"version":N,"magic":1}``
- ``{"keytype":"CONFIG","subject":S,"magic":0}`` (global: ``"subject":null``)
- ``{"keytype":"MODE","subject":S,"magic":0}`` (global: ``"subject":null``)
- ``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}``
- ``{"keytype":"CLEAR_SUBJECT","subject":S,"magic":0}``
- ``{"keytype":"NOOP","magic":0}``

Values: SCHEMA ``{subject, version, id, schemaType, references, metadata, ruleSet, schema,
deleted}`` where schemaType is left out for AVRO and references/metadata/ruleSet when empty;
CONFIG ``{subject?, alias?, normalize?, validateFields?, compatibilityLevel, ...}``; MODE
``{subject?, mode}``; DELETE_SUBJECT ``{subject, version}``; CLEAR_SUBJECT ``{subject}``.
A tombstone (value None) deletes a key.

Reading is tolerant, as Confluent's Jackson reader is: unknown fields are ignored, a missing
schemaType reads as AVRO, a global key may carry ``"subject":null`` or no subject at all (older
Confluent and Karapace write the first, newer Confluent the second), a SCHEMA key's magic may
be 0 or 1, and Karapace's older keys with spaces parse the same. Anything else raises
``RecordError`` naming the field; the registry state skips such a record with a logged reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eddy.formats.base import AVRO

#: the largest key accepted (subjects are short; a key is four small fields)
MAX_KEY_BYTES = 64 * 1024
#: the largest value accepted: a schema text of up to 1 Mi characters, JSON-escaped, plus
#: its metadata and rule set
MAX_VALUE_BYTES = 16 * 1024 * 1024
#: the most references one schema value may carry
MAX_REFERENCES = 10_000
#: how deep metadata and rule sets may nest (they are written back by a recursive encoder)
MAX_JSON_DEPTH = 64

SCHEMA = "SCHEMA"
CONFIG = "CONFIG"
MODE = "MODE"
DELETE_SUBJECT = "DELETE_SUBJECT"
CLEAR_SUBJECT = "CLEAR_SUBJECT"
NOOP = "NOOP"

#: the optional CONFIG value fields besides compatibilityLevel, in Confluent's order
CONFIG_FIELDS = ("alias", "normalize", "validateFields", "compatibilityLevel",
                 "compatibilityGroup", "defaultMetadata", "overrideMetadata", "defaultRuleSet",
                 "overrideRuleSet")

Json = Any


class RecordError(ValueError):
    """A ``_schemas`` key or value that cannot be read; the message names the field."""


# ---------------------------------------------------------------------------------------------
# keys

@dataclass(frozen=True, slots=True)
class SchemaKey:
    subject: str
    version: int
    magic: int = 1


@dataclass(frozen=True, slots=True)
class ConfigKey:
    subject: str | None  # None: the global config
    magic: int = 0


@dataclass(frozen=True, slots=True)
class ModeKey:
    subject: str | None  # None: the global mode
    magic: int = 0


@dataclass(frozen=True, slots=True)
class DeleteSubjectKey:
    subject: str
    magic: int = 0


@dataclass(frozen=True, slots=True)
class ClearSubjectKey:
    subject: str | None
    magic: int = 0


@dataclass(frozen=True, slots=True)
class NoopKey:
    magic: int = 0


@dataclass(frozen=True, slots=True)
class OtherKey:
    """A key type this registry does not use (CONTEXT, ASSOCIATION, ...): read and ignored."""

    keytype: str


RecordKey = (SchemaKey | ConfigKey | ModeKey | DeleteSubjectKey | ClearSubjectKey | NoopKey
             | OtherKey)


# ---------------------------------------------------------------------------------------------
# values

@dataclass(frozen=True, slots=True)
class Reference:
    """A schema reference: the name the schema uses for it, and the subject version."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Json]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True, slots=True)
class SchemaValue:
    subject: str
    version: int
    id: int
    schema: str
    schema_type: str = AVRO
    references: tuple[Reference, ...] = ()
    metadata: Json = None
    rule_set: Json = None
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class ConfigValue:
    """A compatibility config; ``fields`` holds the present CONFIG_FIELDS by their JSON name
    (compatibilityLevel included when set)."""

    subject: str | None = None
    fields: Mapping[str, Json] = field(default_factory=dict)

    @property
    def compatibility_level(self) -> str | None:
        level = self.fields.get("compatibilityLevel")
        return level if isinstance(level, str) else None


@dataclass(frozen=True, slots=True)
class ModeValue:
    mode: str
    subject: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteSubjectValue:
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class ClearSubjectValue:
    subject: str | None


RecordValue = SchemaValue | ConfigValue | ModeValue | DeleteSubjectValue | ClearSubjectValue


# ---------------------------------------------------------------------------------------------
# Jackson's JSON text

_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\\ud800-\udfff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                  "\f": "\\f", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    return short if short is not None else f"\\u{ord(char):04X}"


def json_string(text: str) -> str:
    """A JSON string as Jackson writes it: UTF-8 left as is, control characters escaped with
    upper-case hex; lone surrogates escaped too, so that the bytes always encode."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def json_text(value: Json) -> str:
    """Compact JSON (no spaces), object keys in insertion order, strings as Jackson writes
    them."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return json_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(json_string(str(k)) + ":" + json_text(v)
                              for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")


def json_depth_exceeds(value: Json, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether a JSON value nests deeper than ``limit`` (measured without recursion)."""
    stack: list[tuple[Json, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _bytes(obj: Mapping[str, Json]) -> bytes:
    return json_text(obj).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# encoding

def encode_key(key: RecordKey) -> bytes:
    """The key's bytes exactly as Confluent writes them."""
    if isinstance(key, SchemaKey):
        return _bytes({"keytype": SCHEMA, "subject": key.subject, "version": key.version,
                       "magic": key.magic})
    if isinstance(key, ConfigKey):
        return _bytes({"keytype": CONFIG, "subject": key.subject, "magic": key.magic})
    if isinstance(key, ModeKey):
        return _bytes({"keytype": MODE, "subject": key.subject, "magic": key.magic})
    if isinstance(key, DeleteSubjectKey):
        return _bytes({"keytype": DELETE_SUBJECT, "subject": key.subject, "magic": key.magic})
    if isinstance(key, ClearSubjectKey):
        return _bytes({"keytype": CLEAR_SUBJECT, "subject": key.subject, "magic": key.magic})
    if isinstance(key, NoopKey):
        return _bytes({"keytype": NOOP, "magic": key.magic})
    raise TypeError(f"cannot encode a {key.keytype} key")


def schema_value_json(value: SchemaValue) -> dict[str, Json]:
    """A SCHEMA value as an ordered JSON object (Confluent's field order and omissions)."""
    obj: dict[str, Json] = {"subject": value.subject, "version": value.version, "id": value.id}
    if value.schema_type != AVRO:
        obj["schemaType"] = value.schema_type
    if value.references:
        obj["references"] = [r.to_json() for r in value.references]
    if value.metadata is not None:
        obj["metadata"] = value.metadata
    if value.rule_set is not None:
        obj["ruleSet"] = value.rule_set
    obj["schema"] = value.schema
    obj["deleted"] = value.deleted
    return obj


def encode_value(value: RecordValue) -> bytes:
    """The value's bytes as Confluent writes them."""
    if isinstance(value, SchemaValue):
        return _bytes(schema_value_json(value))
    obj: dict[str, Json] = {}
    if value.subject is not None:
        obj["subject"] = value.subject
    if isinstance(value, ConfigValue):
        for name in CONFIG_FIELDS:
            if value.fields.get(name) is not None:
                obj[name] = value.fields[name]
    elif isinstance(value, ModeValue):
        obj["mode"] = value.mode
    elif isinstance(value, DeleteSubjectValue):
        obj["version"] = value.version
    return _bytes(obj)


# ---------------------------------------------------------------------------------------------
# decoding

def _no_constant(name: str) -> Json:
    """NaN and Infinity are not JSON (Jackson writes none): a record with one is refused."""
    raise ValueError(f"{name} is not a JSON number")


def _load(data: bytes, what: str, limit: int) -> dict[str, Json]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise RecordError(f"{what} is not bytes")
    if len(data) > limit:
        raise RecordError(f"{what} is {len(data)} bytes, more than {limit}")
    try:
        obj = json.loads(bytes(data).decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RecordError(f"{what} is not JSON: {str(exc)[:200]}") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{what} is not a JSON object")
    return obj


def _str(obj: Mapping[str, Json], name: str, what: str) -> str:
    value = obj.get(name)
    if not isinstance(value, str):
        raise RecordError(f"{what} field {name!r} is missing or not a string")
    return value


def _opt_str(obj: Mapping[str, Json], name: str, what: str) -> str | None:
    value = obj.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise RecordError(f"{what} field {name!r} is not a string")
    return value


def _int(obj: Mapping[str, Json], name: str, what: str, default: int | None = None) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"{what} field {name!r} is missing or not an integer")
    if not -(1 << 31) <= value < (1 << 31):
        raise RecordError(f"{what} field {name!r} is out of range: {value}")
    return value


def decode_key(data: bytes) -> RecordKey:
    """Reads a ``_schemas`` key; raises RecordError naming the bad field."""
    obj = _load(data, "key", MAX_KEY_BYTES)
    keytype = _str(obj, "keytype", "key")
    magic = _int(obj, "magic", "key", 0)
    if keytype == SCHEMA:
        if magic not in (0, 1):
            raise RecordError(f"SCHEMA key field 'magic' is {magic}, not 0 or 1")
        version = _int(obj, "version", "SCHEMA key")
        if version < 1:
            raise RecordError(f"SCHEMA key field 'version' is {version}, less than 1")
        return SchemaKey(_str(obj, "subject", "SCHEMA key"), version, magic)
    if keytype == CONFIG:
        return ConfigKey(_opt_str(obj, "subject", "CONFIG key"), magic)
    if keytype == MODE:
        return ModeKey(_opt_str(obj, "subject", "MODE key"), magic)
    if keytype == DELETE_SUBJECT:
        return DeleteSubjectKey(_str(obj, "subject", "DELETE_SUBJECT key"), magic)
    if keytype == CLEAR_SUBJECT:
        return ClearSubjectKey(_opt_str(obj, "subject", "CLEAR_SUBJECT key"), magic)
    if keytype == NOOP:
        return NoopKey(magic)
    return OtherKey(keytype[:100])


def decode_references(raw: Json, what: str) -> tuple[Reference, ...]:
    """A ``references`` list (None reads as empty)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise RecordError(f"{what} field 'references' is not a list")
    if len(raw) > MAX_REFERENCES:
        raise RecordError(f"{what} field 'references' has {len(raw)} entries, "
                          f"more than {MAX_REFERENCES}")
    refs = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise RecordError(f"{what} field 'references[{i}]' is not an object")
        where = f"{what} references[{i}]"
        refs.append(Reference(_str(item, "name", where), _str(item, "subject", where),
                              _int(item, "version", where)))
    return tuple(refs)


def _decode_schema(obj: Mapping[str, Json]) -> SchemaValue:
    what = "SCHEMA value"
    schema_type = obj.get("schemaType")
    if schema_type is None:
        schema_type = AVRO
    elif not isinstance(schema_type, str):
        raise RecordError(f"{what} field 'schemaType' is not a string")
    deleted = obj.get("deleted", False)
    if not isinstance(deleted, bool):
        raise RecordError(f"{what} field 'deleted' is not a boolean")
    for name in ("metadata", "ruleSet"):
        if json_depth_exceeds(obj.get(name)):
            raise RecordError(f"{what} field {name!r} nests deeper than {MAX_JSON_DEPTH}")
    return SchemaValue(
        subject=_str(obj, "subject", what), version=_int(obj, "version", what),
        id=_int(obj, "id", what), schema=_str(obj, "schema", what), schema_type=schema_type,
        references=decode_references(obj.get("references"), what),
        metadata=obj.get("metadata"), rule_set=obj.get("ruleSet"), deleted=deleted)


def decode_value(key: RecordKey, data: bytes) -> RecordValue | None:
    """Reads the value of a record with ``key`` (None for NOOP and unknown key types);
    raises RecordError naming the bad field."""
    if isinstance(key, NoopKey | OtherKey):
        return None
    obj = _load(data, f"{type(key).__name__} value", MAX_VALUE_BYTES)
    if isinstance(key, SchemaKey):
        return _decode_schema(obj)
    if isinstance(key, ConfigKey):
        level = obj.get("compatibilityLevel")
        if level is not None and not isinstance(level, str):
            raise RecordError("CONFIG value field 'compatibilityLevel' is not a string")
        fields = {name: obj[name] for name in CONFIG_FIELDS if obj.get(name) is not None}
        if any(json_depth_exceeds(v) for v in fields.values()):
            raise RecordError(f"CONFIG value nests deeper than {MAX_JSON_DEPTH}")
        return ConfigValue(_opt_str(obj, "subject", "CONFIG value"), fields)
    if isinstance(key, ModeKey):
        return ModeValue(_str(obj, "mode", "MODE value"), _opt_str(obj, "subject", "MODE value"))
    if isinstance(key, DeleteSubjectKey):
        subject = _opt_str(obj, "subject", "DELETE_SUBJECT value") or key.subject
        return DeleteSubjectValue(subject, _int(obj, "version", "DELETE_SUBJECT value"))
    return ClearSubjectValue(_opt_str(obj, "subject", "CLEAR_SUBJECT value"))
