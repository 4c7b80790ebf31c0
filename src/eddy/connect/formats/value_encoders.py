"""Encoding keys and values in Confluent's wire format, in the write tasks.

Every record is the magic byte 0, the schema id (4 bytes, big-endian) and the payload:
Avro binary (fastavro's schemaless writer), JSON text (UTF-8), or for Protobuf the
message indexes (a single 0 byte: the file's first message) and the serialized message
(a dynamic message class from the FileDescriptorProto). Encoders are built once per
process and schema.

Rows come as Arrow batches (Spark's Python data source writer); a column's values are
turned into Python values (maps as dicts, timestamps as datetimes, dates as dates,
decimals as Decimals) and encoded one by one. What can fail, per row (the row then
goes to the dead letters, with the reason): a float that is NaN or infinite in JSON
(JSON has no such numbers); a null inside a Protobuf repeated field or map value; with
use.latest.version, a row the latest schema does not accept (a missing field without
a default, a value of another type, a JSON value the schema rejects). Null keys and
values are written as null records, not encoded.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from eddy.connect.formats.confluent_wire import frame
from eddy.connect.formats.protobuf_encoding import ProtobufEncoder

FIELDS = ("key", "value")


class EncodeError(ValueError):
    """A row (or a schema) that cannot be encoded; the message names the field."""


class EncodingSpec(Protocol):
    """What an encoder needs (eddy.connect.formats.value_encoding.FieldEncoding, prepared)."""

    @property
    def field(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def schema_id(self) -> int | None: ...
    @property
    def schema(self) -> str: ...
    @property
    def derived(self) -> bool: ...


class Encoder(Protocol):
    def encode(self, value: Any) -> bytes: ...


def _at(path: str) -> str:
    return f"`{path}`" if path else "the value"


# ---- Avro -------------------------------------------------------------------------------


class AvroEncoder:
    def __init__(self, schema_id: int, schema: str) -> None:
        import fastavro

        self.header = frame(schema_id, b"")
        try:
            self.parsed = fastavro.parse_schema(json.loads(schema))
        except Exception as exc:  # fastavro's SchemaParseException and friends
            raise EncodeError(f"the Avro schema does not parse: {exc}") from None
        self._write = fastavro.schemaless_writer

    def encode(self, value: Any) -> bytes:
        out = io.BytesIO()
        out.write(self.header)
        self._write(out, self.parsed, value)
        return out.getvalue()


# ---- JSON -------------------------------------------------------------------------------


def jsonable(value: Any, path: str = "", strict: bool = True) -> Any:
    """`value` as JSON-ready data: datetimes ISO 8601 (UTC with Z, or without a zone when
    naive), dates ISO, bytes base64, decimals as numbers (integers when whole). NaN and
    infinities raise (strict) or become strings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            if strict:
                raise EncodeError(f"{_at(path)}: {value} has no JSON form (JSON has no NaN "
                                  "or infinite numbers)")
            return str(value)
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v, f"{path}.{k}" if path else str(k), strict)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, f"{path}[{i}]", strict) for i, v in enumerate(value)]
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return value.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    raise EncodeError(f"{_at(path)}: a {type(value).__name__} has no JSON form")


class JsonEncoder:
    def __init__(self, schema_id: int, schema: str, validate: bool) -> None:
        self.header = frame(schema_id, b"")
        self.validator: Any = None
        if validate:  # a schema not derived from the rows: check them, as the serializer
            import jsonschema  # type: ignore[import-untyped]

            try:
                doc = json.loads(schema)
                cls = jsonschema.validators.validator_for(doc)
                cls.check_schema(doc)
                self.validator = cls(doc)
            except (ValueError, jsonschema.SchemaError) as exc:
                raise EncodeError(f"the JSON schema does not load: {str(exc)[:200]}") from None

    def encode(self, value: Any) -> bytes:
        doc = jsonable(value)
        if self.validator is not None:
            import jsonschema

            error = jsonschema.exceptions.best_match(self.validator.iter_errors(doc))
            if error is not None:
                where = ".".join(str(p) for p in error.absolute_path)
                raise EncodeError(f"{_at(where)}: {error.message[:200]}")
        return self.header + json.dumps(doc, ensure_ascii=False, separators=(",", ":"),
                                        allow_nan=False).encode()


# ---- per process, per batch -------------------------------------------------------------


_lock = threading.Lock()
_encoders: dict[tuple[str, int, str, bool], Encoder] = {}


def encoder(spec: EncodingSpec) -> Encoder:
    """The (per process, shared) encoder of a prepared encoding; EncodeError when its
    schema does not load."""
    assert spec.schema_id is not None, "prepare() the encoding first"
    key = (spec.format, spec.schema_id, spec.schema, spec.derived)
    with _lock:
        found = _encoders.get(key)
    if found is not None:
        return found
    made: Encoder
    if spec.format == "avro":
        made = AvroEncoder(spec.schema_id, spec.schema)
    elif spec.format == "json":
        made = JsonEncoder(spec.schema_id, spec.schema, validate=not spec.derived)
    else:
        made = ProtobufEncoder(spec.schema_id, spec.schema)
    with _lock:
        _encoders[key] = made
    return made


def _fixer(arrow_type: Any) -> Callable[[Any], Any] | None:
    """A function turning Arrow's Python form of `arrow_type` (maps as lists of pairs)
    into plain data (maps as dicts), or None when nothing needs turning."""
    import pyarrow as pa

    if pa.types.is_map(arrow_type):
        item = _fixer(arrow_type.item_type)
        if item is None:
            return lambda v: None if v is None else dict(v)
        return lambda v: None if v is None else {k: item(x) for k, x in v}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        elem = _fixer(arrow_type.value_type)
        if elem is None:
            return None
        return lambda v: None if v is None else [elem(x) for x in v]
    if pa.types.is_struct(arrow_type):
        fixes = [(f.name, fx) for f in arrow_type if (fx := _fixer(f.type)) is not None]
        if not fixes:
            return None

        def struct(v: Any) -> Any:
            if v is None:
                return None
            out = dict(v)
            for name, fx in fixes:
                out[name] = fx(out.get(name))
            return out

        return struct
    return None


def python_values(column: Any) -> list[Any]:
    values = column.to_pylist()
    fix = _fixer(column.type)
    return values if fix is None else [fix(v) for v in values]


@dataclass
class Encoded:
    """A batch's encoded columns (by field name) and per-row errors."""

    columns: dict[str, list[bytes | None]] = field(default_factory=dict)
    errors: list[str | None] = field(default_factory=list)
    #: the Python values of the encoded columns (for dead letters)
    plain: dict[str, list[Any]] = field(default_factory=dict)


def encode_batch(batch: Any, encodings: Sequence[EncodingSpec]) -> Encoded:
    """Encode the batch's key/value columns; a row failing in any of them has its
    reason in `errors` (then its encoded values are not to be produced)."""
    names = batch.schema.names
    out = Encoded(errors=[None] * batch.num_rows)
    for spec in encodings:
        values = python_values(batch.column(names.index(spec.field)))
        enc = encoder(spec)
        encoded: list[bytes | None] = []
        for i, value in enumerate(values):
            if value is None:
                encoded.append(None)
                continue
            try:
                encoded.append(enc.encode(value))
            except Exception as exc:  # fastavro's and protobuf's own errors included
                reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                text = f"{spec.field}.format {spec.format}: {reason}"
                prev = out.errors[i]
                out.errors[i] = text if prev is None else f"{prev}; {text}"
                encoded.append(None)
        out.columns[spec.field] = encoded
        out.plain[spec.field] = values
    return out


def dead_letter_bytes(value: Any) -> bytes | None:
    """A row's column for its dead letter: bytes as they are, anything else as JSON."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(jsonable(value, strict=False), separators=(",", ":")).encode()


#: dead letters a task buffers before producing them
DEAD_LETTER_FLUSH = 5_000


class DeadLetters:
    """A write task's rows that could not be encoded, produced to the dead-letter topic
    (key and value: bytes as they were, the rest as JSON; the reason in the headers);
    without a dead-letter topic the first one fails the task."""

    def __init__(self, target: tuple[str, str] | None, pipeline: str, stage: str) -> None:
        self.target = target
        self.pipeline = pipeline
        self.stage = stage
        self.records: list[tuple[bytes | None, bytes | None,
                                 list[tuple[str, str | bytes | None]]]] = []
        self.count = 0

    def add(self, batch: Any, encoded: Encoded, row: int) -> None:
        from eddy.connect import deadletter

        error = encoded.errors[row] or "cannot be encoded"
        if self.target is None:
            raise EncodeError(f"a row cannot be encoded and there is no dead-letter topic "
                              f"(set dead_letter_topic): {error}")
        names = batch.schema.names
        parts: dict[str, bytes | None] = {}
        for name in FIELDS:
            if name in encoded.plain:
                parts[name] = dead_letter_bytes(encoded.plain[name][row])
            elif name in names:
                parts[name] = dead_letter_bytes(batch.column(names.index(name))[row].as_py())
            else:
                parts[name] = None
        self.records.append((parts["key"], parts["value"],
                             deadletter.headers(error, None, self.pipeline, self.stage)))
        if len(self.records) >= DEAD_LETTER_FLUSH:
            self.flush()

    def flush(self) -> None:
        from eddy.connect import deadletter

        if self.records:
            assert self.target is not None
            deadletter.produce(self.target[0], self.target[1], self.records)
            self.count += len(self.records)
            self.records.clear()
