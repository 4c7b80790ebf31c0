"""Schema-aware keys and values written by `format("eddy")`: options and the schema each
query writes with (the counterpart of eddy.connect.formats.value_decoding).

Options (on `df.write.format("eddy")` and a pipeline's eddy sink; the names of
Confluent's serializers):

- `value.format` / `key.format`: `avro`, `json` (JSON Schema) or `protobuf`; the
  column (`value` / `key`) is encoded in Confluent's wire format; unset: written as it
  is (string or binary), as before
- `schema.registry.url`: the registry (comma-separated URLs: the first that answers)
- `value.subject` / `key.subject`: default `<topic>-value` / `<topic>-key`
  (TopicNameStrategy; needs the `topic` option)
- `auto.register.schemas` (default true): register the schema derived from the
  column's Spark type (eddy.connect.formats.schema_from_spark, protobuf_from_spark) under the
  subject, or find its version there (false: it must be registered already)
- `use.latest.version` (default false): write with the subject's latest schema instead
  of the derived one (the column's fields matched by name)

The schema is derived, registered and its id fetched on the driver when the write is
planned (once per write; the answer is cached per process, so a stream's micro-batches
ask once); the tasks encode with it (eddy.connect.formats.value_encoders). A column that is
null stays a null record (a tombstone), as the serializers do.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError
from eddy.connect.formats.value_encoders import encoder
from eddy.connect.options import FIELDS, URL_OPTION, OptionError, requested_format

SCHEMA_TYPES = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}


@dataclass(frozen=True)
class FieldEncoding:
    """How one of key/value is encoded; `schema_id` and `schema` are set by prepare()
    on the driver: the id written in every record and the schema the rows are encoded
    with (Avro or JSON Schema text; Protobuf: a base64 FileDescriptorProto)."""

    field: str
    format: str
    url: str
    subject: str
    auto_register: bool = True
    use_latest: bool = False
    schema_id: int | None = None
    schema: str = ""
    #: the schema was derived from the column's type (then the rows fit it)
    derived: bool = True


def _bool(lower: Mapping[str, str], name: str, default: bool) -> bool:
    raw = lower.get(name)
    if raw is None or not raw.strip():
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}: expected true or false, got {raw!r}")


def parse_encodings(lower: Mapping[str, str], topic: str | None
                    ) -> tuple[FieldEncoding, ...]:
    """The key/value encodings the write options (keyed in lower case) ask for."""
    out: list[FieldEncoding] = []
    url = lower.get(URL_OPTION, "").strip()
    auto = _bool(lower, "auto.register.schemas", True)
    latest = _bool(lower, "use.latest.version", False)
    for fld in FIELDS:
        fmt = requested_format(lower, fld)
        if fmt is None:
            continue
        try:
            RegistryClient(url)
        except ValueError as exc:
            raise OptionError(f"option {URL_OPTION}: {exc}") from None
        subject = lower.get(f"{fld}.subject", "").strip()
        if not subject:
            if not topic:
                raise OptionError(f"option {fld}.format: set {fld}.subject (the subject "
                                  f"`<topic>-{fld}` needs the `topic` option)")
            subject = f"{topic}-{fld}"
        out.append(FieldEncoding(fld, fmt, url, subject, auto, latest))
    return tuple(out)


# ---- the driver: derive, register, look up ----------------------------------------------


_lock = threading.Lock()
_clients: dict[str, RegistryClient] = {}
#: (url, subject, schema type, schema text, auto register) -> id, per process
_ids: dict[tuple[str, str, str, str, bool], int] = {}


def client(url: str) -> RegistryClient:
    with _lock:
        found = _clients.get(url)
        if found is None:
            found = _clients[url] = RegistryClient(url)
        return found


def derive(fmt: str, spark_type: Any) -> tuple[str, str]:
    """(schema text to register, schema the encoder uses) for a column's Spark type
    (its JSON form); SchemaDerivationError when the format cannot hold it."""
    from eddy.connect.formats.schema_from_spark import avro_schema, json_schema

    if fmt == "avro":
        text = json.dumps(avro_schema(spark_type), separators=(",", ":"))
        return text, text
    if fmt == "json":
        text = json.dumps(json_schema(spark_type), separators=(",", ":"))
        return text, text
    from eddy.connect.formats.protobuf_from_spark import file_descriptor, message_model, proto_text

    model = message_model(spark_type)
    serialized = base64.b64encode(file_descriptor(model).SerializeToString()).decode()
    return proto_text(model), serialized


def _latest(enc: FieldEncoding) -> FieldEncoding:
    reg = client(enc.url)
    want = SCHEMA_TYPES[enc.format]
    path = f"/subjects/{urllib.parse.quote(enc.subject, safe='')}/versions/latest"
    found = reg.version(enc.subject, "latest")
    if found.schema_type != want:
        raise OptionError(f"option {enc.field}.format={enc.format}: the latest version of "
                          f"subject {enc.subject!r} is {found.schema_type}, not {want}")
    if found.id is None:
        raise OptionError(f"subject {enc.subject!r}: the latest version has no id")
    schema = found.schema
    if enc.format == "protobuf":
        body = reg.get_json(path + "?format=serialized")
        schema = body.get("schema", "") if isinstance(body, dict) else ""
    if found.references and not (enc.format == "protobuf" and all(
            r.name.startswith("google/protobuf/") for r in found.references)):
        raise OptionError(f"option use.latest.version: subject {enc.subject!r} references "
                          "other schemas, which the eddy sink cannot write with")
    return replace(enc, schema_id=found.id, schema=schema, derived=False)


def prepare(enc: FieldEncoding, spark_type: Any) -> FieldEncoding:
    """The encoding with its schema and id (driver side): the subject's latest version
    (use.latest.version), else the schema derived from `spark_type` (Spark's JSON form),
    registered (auto.register.schemas) or looked up. OptionError when it cannot be."""
    from eddy.connect.formats.schema_from_spark import SchemaDerivationError

    if enc.schema_id is not None:
        return enc
    where = f"option {enc.field}.format={enc.format}"
    try:
        if enc.use_latest:
            prepared = _latest(enc)
        else:
            text, schema = derive(enc.format, spark_type)
            key = (enc.url, enc.subject, enc.format, text, enc.auto_register)
            with _lock:
                schema_id = _ids.get(key)
            if schema_id is None:
                doc = RegisteredSchema(text, SCHEMA_TYPES[enc.format])
                reg = client(enc.url)
                schema_id = (reg.register(enc.subject, doc) if enc.auto_register
                             else reg.lookup(enc.subject, doc).id)
                assert schema_id is not None
                with _lock:
                    _ids[key] = schema_id
            prepared = replace(enc, schema_id=schema_id, schema=schema)
    except SchemaDerivationError as exc:
        raise OptionError(f"{where}: {exc}") from None
    except RegistryError as exc:
        raise OptionError(f"{where}: subject {enc.subject!r}: {exc}") from None
    try:
        encoder(prepared)  # a schema the encoder cannot load fails here, not in a task
    except ValueError as exc:
        raise OptionError(f"{where}: subject {enc.subject!r}: {exc}") from None
    return prepared


def prepare_all(encodings: Sequence[FieldEncoding], schema: Any
                ) -> tuple[FieldEncoding, ...]:
    """Every encoding prepared against a Spark StructType (the frame being written)."""
    names = schema.fieldNames()
    out: list[FieldEncoding] = []
    for enc in encodings:
        if enc.field not in names:
            raise OptionError(f"option {enc.field}.format={enc.format}: the frame has no "
                              f"`{enc.field}` column")
        out.append(prepare(enc, schema[enc.field].dataType.jsonValue()))
    return tuple(out)
