"""Schema-aware keys and values for `format("eddy")`: options, reader schemas, batches.

Options (on `format("eddy")` and a pipeline's eddy source; the names ABRiS and
Confluent's serializers use):

- `value.format` / `key.format`: `avro`, `json` (Confluent's JSON Schema framing) or
  `protobuf` (the reader schema's first message); unset: raw bytes, as before
- `schema.registry.url`: the registry (comma-separated URLs: the first that answers)
- `value.subject` / `key.subject`: the subject of the reader schema (default:
  `<topic>-value` / `<topic>-key`, Confluent's TopicNameStrategy, which needs exactly
  one subscribed topic)
- `value.schema.version` / `key.schema.version`: pin the reader schema's version
  (default: the subject's latest when the query starts)

With a format set, that column holds a typed struct (the reader schema's type) instead
of bytes, and three columns follow Spark's Kafka ones: `_eddy_raw_key` /
`_eddy_raw_value` (the original bytes, for the decoded ones) and `_eddy_decode_error`:
null where every decoded column decoded, else why not (the column then is null). The
reader schema is fetched once on the driver and travels with the options, so every
task decodes into the same type; writer schemas are fetched by id (or GUID) on the
executors and cached per worker process.

The writer schema's id is found as confluent-kafka's default deserializer finds it: in
the record header `__value_schema_id` / `__key_schema_id` first (then the value is the
bare payload), else in front of the value (magic byte 0 and a 4-byte id, or magic byte
1 and a 16-byte GUID): see eddy.connect.formats.confluent_wire. The reader reads the headers
whenever a decoding is set; the `headers` column is in the output only when asked for.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from eddy.connect.formats.confluent_wire import HEADER_KEYS, FrameError, HeaderId, parse_header
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError
from eddy.connect.options import FIELDS, URL_OPTION, OptionError, requested_format

DECODE_ERROR_COLUMN = "_eddy_decode_error"
RAW_COLUMNS = {"key": "_eddy_raw_key", "value": "_eddy_raw_value"}


@dataclass(frozen=True)
class FieldDecoding:
    """How one of key/value is decoded; `reader` is set once resolved on the driver."""

    field: str
    format: str
    url: str
    subject: str
    version: int | None = None
    reader: RegisteredSchema | None = None
    references: tuple[tuple[str, RegisteredSchema], ...] = ()


class Decoder(Protocol):
    arrow_type: Any

    def decode(self, values: list[bytes | None], located: list[HeaderId | None] | None = None
               ) -> tuple[Any, list[str | None]]:
        """`located[i]`: the schema id record i's header gave (its value is then the bare
        payload); only passed when some record has one."""


def parse_decodings(lower: Mapping[str, str], topics: Sequence[str]
                    ) -> tuple[FieldDecoding, ...]:
    """The key/value decodings the options (keyed in lower case) ask for, unresolved."""
    out: list[FieldDecoding] = []
    url = lower.get(URL_OPTION, "").strip()
    for fld in FIELDS:
        fmt = requested_format(lower, fld)
        if fmt is None:
            continue
        subject = lower.get(f"{fld}.subject", "").strip()
        if not subject:
            if len(topics) != 1:
                raise OptionError(f"option {fld}.format: set {fld}.subject (the subject "
                                  f"`<topic>-{fld}` needs exactly one subscribed topic)")
            subject = f"{topics[0]}-{fld}"
        raw_version = lower.get(f"{fld}.schema.version", "").strip()
        version: int | None = None
        if raw_version and raw_version != "latest":
            if not raw_version.isdigit() or int(raw_version) < 1:
                raise OptionError(f"option {fld}.schema.version: expected a version number "
                                  f"or latest, got {raw_version!r}")
            version = int(raw_version)
        try:
            RegistryClient(url)
        except ValueError as exc:
            raise OptionError(f"option {URL_OPTION}: {exc}") from None
        out.append(FieldDecoding(fld, fmt, url, subject, version))
    return tuple(out)


def resolve(dec: FieldDecoding) -> FieldDecoding:
    """The decoding with its reader schema fetched (driver side); OptionError when the
    registry does not have it or cannot be reached."""
    if dec.reader is not None:
        return dec
    client = _client(dec.url)
    want = dec.version if dec.version is not None else "latest"
    try:
        reader = client.version(dec.subject, want)
        refs = client.resolve_references(reader)
    except RegistryError as exc:
        raise OptionError(f"option {dec.field}.format: {exc}") from None
    expected = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}[dec.format]
    if reader.schema_type != expected:
        raise OptionError(f"option {dec.field}.format={dec.format}: subject {dec.subject!r} "
                          f"version {reader.version} is {reader.schema_type}, not {expected}")
    return replace(dec, reader=reader, references=tuple(refs))


_lock = threading.Lock()
_clients: dict[str, RegistryClient] = {}
_decoders: dict[FieldDecoding, Decoder] = {}


def _client(url: str) -> RegistryClient:
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = RegistryClient(url)
        return client


def decoder(dec: FieldDecoding) -> Decoder:
    """The (per process, shared) decoder of a resolved decoding."""
    with _lock:
        found = _decoders.get(dec)
    if found is not None:
        return found
    assert dec.reader is not None, "resolve() the decoding first"
    made: Decoder
    try:
        if dec.format == "avro":
            from eddy.connect.formats.avro_columns import AvroDecoder

            made = AvroDecoder(_client(dec.url), dec.reader, list(dec.references))
        elif dec.format == "json":
            from eddy.connect.formats.json_schema_columns import JsonSchemaDecoder

            made = JsonSchemaDecoder(_client(dec.url), dec.reader)
        else:
            from eddy.connect.formats.protobuf_columns import ProtobufDecoder

            made = ProtobufDecoder(_client(dec.url), dec.reader)
    except ValueError as exc:  # AvroSchemaError, JsonSchemaError, ProtobufSchemaError
        raise OptionError(f"option {dec.field}.format={dec.format}: subject {dec.subject!r}: "
                          f"{exc}") from None
    with _lock:
        _decoders[dec] = made
    return made


def _ddl_type(arrow_type: Any) -> str:
    from pyspark.sql.pandas.types import from_arrow_type

    return str(from_arrow_type(arrow_type).simpleString())


def extra_ddl(decodings: Sequence[FieldDecoding]) -> str:
    """The DDL of the raw and error columns appended after Spark's Kafka columns."""
    parts = [f"{RAW_COLUMNS[d.field]} BINARY" for d in decodings]
    return ", ".join([*parts, f"{DECODE_ERROR_COLUMN} STRING"])


def field_ddl(dec: FieldDecoding) -> str:
    """The Spark type (DDL) of a decoded column."""
    return _ddl_type(decoder(dec).arrow_type)


def output_schema(base: Any, decodings: Sequence[FieldDecoding]) -> Any:
    """The Arrow schema of decoded batches: `base` with the decoded fields retyped and
    the raw and error columns appended."""
    import pyarrow as pa

    schema = base
    for dec in decodings:
        i = schema.get_field_index(dec.field)
        schema = schema.set(i, pa.field(dec.field, decoder(dec).arrow_type))
    for dec in decodings:
        schema = schema.append(pa.field(RAW_COLUMNS[dec.field], pa.binary()))
    return schema.append(pa.field(DECODE_ERROR_COLUMN, pa.string()))


def header_values(headers: Any, name: str) -> list[bytes | None] | None:
    """Per row of a `headers` column (list<struct<key, value>>), the value of its first
    header called `name` (None: no such header, or a null value, which confluent-kafka
    also reads as none); None when no row has one (the common case: a quick check)."""
    import pyarrow.compute as pc

    flat = headers.flatten()
    if len(flat) == 0:
        return None
    hit = pc.equal(flat.field("key"), name)
    if not pc.any(hit).as_py():
        return None
    rows = pc.filter(pc.list_parent_indices(headers), hit).to_pylist()
    values = pc.filter(flat.field("value"), hit).to_pylist()
    out: list[bytes | None] = [None] * len(headers)
    seen: set[int] = set()
    for row, value in zip(rows, values, strict=True):
        if row not in seen:
            seen.add(row)
            out[row] = value
    return out


def locate(values: list[bytes | None], headers: list[bytes | None], dec: FieldDecoding
           ) -> tuple[list[bytes | None], list[HeaderId | None], list[str | None]]:
    """(values, schema id per record's header, error per record) of one decoded field:
    a record whose header does not parse is an error and its value (in `values`, which
    this changes) is not decoded."""
    located: list[HeaderId | None] = [None] * len(values)
    errors: list[str | None] = [None] * len(values)
    protobuf = dec.format == "protobuf"
    seen: dict[bytes, HeaderId | str] = {}  # most records of a batch share their header
    for row, header in enumerate(headers):
        if header is None or values[row] is None:  # a null value is null, header or not
            continue
        found = seen.get(header)
        if found is None:
            try:
                found = parse_header(header, protobuf)
            except FrameError as exc:
                found = f"header {HEADER_KEYS[dec.field]}: {exc}"
            if len(header) <= 64:
                seen[header] = found
        if isinstance(found, str):
            errors[row] = found
            values[row] = None
        else:
            located[row] = found
    return values, located, errors


def decode_batch(batch: Any, decodings: Sequence[FieldDecoding], schema: Any) -> Any:
    """A RecordBatch of Spark's Kafka columns with key/value decoded (see the module
    doc); `schema` is output_schema(base, decodings) where `base` is the batch's schema,
    or that schema without the `headers` column (read only to find schema ids)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = list(batch.columns)
    names = batch.schema.names
    headers = batch.column(names.index("headers")) if "headers" in names else None
    if headers is not None and "headers" not in schema.names:
        del columns[names.index("headers")]
    raws: list[Any] = []
    errors: list[str | None] = [None] * batch.num_rows
    for dec in decodings:
        i = names.index(dec.field)
        raw = batch.column(i)
        values = raw.to_pylist()
        found = None if headers is None else header_values(headers, HEADER_KEYS[dec.field])
        if found is None:
            array, errs = decoder(dec).decode(values)
        else:
            values, located, header_errs = locate(values, found, dec)
            array, errs = decoder(dec).decode(values, located)
            errs = [h if h is not None else e for h, e in zip(header_errs, errs, strict=True)]
        columns[i] = array
        raws.append(raw)
        for row, err in enumerate(errs):
            if err is not None:
                text = f"{dec.field}.format {dec.format}: {err}"
                errors[row] = text if errors[row] is None else f"{errors[row]}; {text}"
    if any(e is not None for e in errors) and len(decodings) > 1:
        # a row one of whose columns failed is a failed row: null every decoded column
        failed = pa.array([e is not None for e in errors])
        for dec in decodings:
            i = names.index(dec.field)
            columns[i] = pc.if_else(failed, pa.nulls(len(errors), columns[i].type),
                                            columns[i])
    return pa.RecordBatch.from_arrays([*columns, *raws, pa.array(errors, pa.string())],
                                      schema=schema)
