"""How the message browser shows a key or a value: decoded to JSON when it is in
Confluent's wire format (magic byte 0, a 4-byte schema id) and the node's registry knows
the id, as Avro (:mod:`decode_avro`), JSON Schema (the JSON text follows the frame) or
Protobuf (:mod:`decode_proto`: message indexes, then the message); else UTF-8 text when it
is; else hex. Shown values are cut at ``SHOWN_BYTES`` (the full size is reported).

Schemas are looked up on the event loop (the registry's state lives there) and loaded on a
worker thread (``SchemaLookup.resolve``: parsing a Protobuf schema is CPU work); values
are decoded on a worker thread (``show_bytes``). A value that does not decode is shown raw,
with the reason; no decoding error escapes.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from eddy.formats.base import AVRO, JSON, PROTOBUF
from eddy.observe.console.decode import avro as decode_avro
from eddy.observe.console.decode import protobuf as decode_proto
from eddy.observe.console.decode.protobuf import NotDecoded

if TYPE_CHECKING:
    from eddy.registry.role import RegistryRole

log = logging.getLogger("eddy.console")

#: bytes of a key or value shown (text or hex); the rest is cut, its size reported
SHOWN_BYTES = 4096
#: loaded schemas kept (by id)
SCHEMA_CACHE = 64
#: JSON values nested deeper than this are not decoded (the parser recurses)
MAX_JSON_DEPTH = 200
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class ValueDecoder(Protocol):
    """Decodes a framed value's payload (what follows the 5-byte frame) to JSON text."""

    label: str

    def decode(self, payload: bytes) -> tuple[str, str]:
        """(JSON text, a detail such as the message type or ""); raises when it cannot."""
        ...


#: (decoder or None, why not) for a schema id
Found = tuple[ValueDecoder | None, str]


@dataclass(frozen=True, slots=True)
class Shown:
    """A key or value as the browser shows it: ``format`` is null, avro, json, protobuf,
    utf8 or hex; ``detail`` names the decoded type when there is one."""

    format: str
    text: str | None
    size: int
    schema_id: int | None = None
    note: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "text": self.text, "size": self.size}
        if self.schema_id is not None:
            out["schema_id"] = self.schema_id
        if self.note:
            out["note"] = self.note
        if self.detail:
            out["detail"] = self.detail
        return out


def framed_id(data: bytes | None) -> int | None:
    """The schema id of a value in Confluent's wire format (None: not framed)."""
    if data is None or len(data) < 5 or data[0] != 0:
        return None
    return int.from_bytes(data[1:5], "big")


class JsonDecoder:
    """JSON Schema values: the payload is the JSON text (UTF-8), re-printed."""

    label = "json"

    def decode(self, payload: bytes) -> tuple[str, str]:
        depth = 0
        for m in _JSON_TOKENS.finditer(payload):
            tok = m.group()
            if tok in (b"[", b"{"):
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    raise NotDecoded(f"JSON nested deeper than {MAX_JSON_DEPTH}")
            elif tok in (b"]", b"}"):
                depth -= 1
        try:
            value = json.loads(payload.decode("utf-8"))
        except UnicodeDecodeError:
            raise NotDecoded("not UTF-8") from None
        except ValueError as exc:
            raise NotDecoded(f"not JSON: {str(exc)[:120]}") from None
        return json.dumps(value, ensure_ascii=False), ""


class SchemaLookup:
    """Decoders by schema id from the node's registry, loaded once, a bounded number kept.
    Used on the event loop."""

    def __init__(self, registry: RegistryRole | None) -> None:
        self._registry = registry
        self._loaded: OrderedDict[int, Found] = OrderedDict()

    async def resolve(self, ids: Iterable[int]) -> dict[int, Found]:
        """(decoder or None, why not) for each of ``ids``."""
        loop = asyncio.get_running_loop()
        out: dict[int, Found] = {}
        for schema_id in ids:
            cached = self._loaded.get(schema_id)
            if cached is not None:
                self._loaded.move_to_end(schema_id)
                out[schema_id] = cached
                continue
            job = self._job(schema_id)
            found = await loop.run_in_executor(None, job) if callable(job) else job
            if found[0] is not None or found[1] != "registry not ready":
                self._loaded[schema_id] = found
                if len(self._loaded) > SCHEMA_CACHE:
                    self._loaded.popitem(last=False)
            out[schema_id] = found
        return out

    def _job(self, schema_id: int) -> Found | Callable[[], Found]:
        """What the registry says of the id (read on the loop): the answer, or the work
        that loads its schema (run on a worker thread)."""
        registry = self._registry
        if registry is None:
            return None, "no schema registry on this node"
        if not registry.ready.is_set():
            return None, "registry not ready"
        entry = registry.service.state.schema_by_id(schema_id)
        if entry is None:
            return None, f"schema id {schema_id} is not registered"
        text = entry.schema
        if entry.schema_type == JSON:
            return JsonDecoder(), ""
        if entry.schema_type in (AVRO, PROTOBUF):
            try:
                refs = registry.service.parser.referenced_texts(text, entry.schema_type,
                                                                entry.references)
            except Exception as exc:
                return None, f"schema id {schema_id}: references: {str(exc)[:200]}"
            if entry.schema_type == AVRO:
                return lambda: decode_avro.load(schema_id, text, refs)
            return lambda: decode_proto.load(schema_id, text, refs)
        return None, f"schema id {schema_id} is {entry.schema_type[:20]}, not decoded here"


def show_bytes(data: bytes | None, schemas: dict[int, Found]) -> Shown:
    """``data`` as shown; ``schemas``: the lookups done on the loop. Thread-safe, and never
    raises on any bytes."""
    if data is None:
        return Shown("null", None, 0)
    schema_id = framed_id(data)
    note = ""
    if schema_id is not None and schema_id in schemas:
        decoder, why = schemas[schema_id]
        if decoder is not None:
            try:
                text, detail = decoder.decode(data[5:])
                return Shown(decoder.label, _cut_text(text), len(data), schema_id,
                             detail=detail)
            except NotDecoded as exc:
                note = f"schema id {schema_id}: not {decoder.label}: {exc}"
            except Exception as exc:  # whatever a decoder raises on hostile bytes
                note = (f"schema id {schema_id}: does not decode as {decoder.label} "
                        f"({type(exc).__name__}: {str(exc)[:120]})")
        else:
            note = why
    cut = data[:SHOWN_BYTES]
    try:  # (a character cut at the end is left out)
        text = codecs.getincrementaldecoder("utf-8")().decode(cut, len(data) <= SHOWN_BYTES)
        if all(c.isprintable() or c in "\t\r\n" for c in text):
            return Shown("utf8", text, len(data), schema_id, note)
    except UnicodeDecodeError:
        pass
    return Shown("hex", cut.hex(" "), len(data), schema_id, note)


def _cut_text(text: str) -> str:
    return text if len(text) <= SHOWN_BYTES else text[:SHOWN_BYTES] + "…"
