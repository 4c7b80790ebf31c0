"""decode_batch (eddy.connect.formats.value_decoding): a reader batch with its key and value
decoded, the raw bytes kept, the errors joined, and a row whose key or value failed
null in both decoded columns. The decoders are stand-ins (no registry)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from eddy.connect.formats import value_decoding as vd
from eddy.connect.formats.registry_client import RegisteredSchema
from eddy.connect.reader.kafka_rows import arrow_schema as _arrow_schema


class Upper:
    """Decodes b"ok:<text>" into {"text": <TEXT>}; anything else is an error."""

    arrow_type = pa.struct([("text", pa.string())])

    def decode(self, values: list[bytes | None]) -> tuple[Any, list[str | None]]:
        rows: list[Any] = []
        errors: list[str | None] = []
        for v in values:
            good = v is not None and v.startswith(b"ok:")
            rows.append({"text": v[3:].decode().upper()} if v is not None and good else None)
            errors.append(None if v is None or good else f"bad {v!r}")
        return pa.array(rows, self.arrow_type), errors


@pytest.fixture
def decodings() -> Iterator[tuple[vd.FieldDecoding, ...]]:
    reader = RegisteredSchema("{}", id=1)
    made = tuple(vd.FieldDecoding(f, "avro", "http://r.invalid", f"t-{f}", reader=reader)
                 for f in ("key", "value"))
    for dec in made:
        vd._decoders[dec] = Upper()
    yield made
    for dec in made:
        del vd._decoders[dec]


def test_key_and_value_decoded_with_raw_bytes_and_errors(
        decodings: tuple[vd.FieldDecoding, ...]) -> None:
    keys = [b"ok:a", b"ok:b", b"nope", None, b"bad"]
    values = [b"ok:x", b"junk", b"ok:z", None, b"worse"]
    n = len(keys)
    base = _arrow_schema(False)
    batch = pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(["t"] * n),
        pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
        pa.array([0] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32())],
        schema=base)
    schema = vd.output_schema(base, decodings)
    assert schema.names == [*base.names, "_eddy_raw_key", "_eddy_raw_value",
                            "_eddy_decode_error"]
    out = vd.decode_batch(batch, decodings, schema).to_pydict()
    assert out["key"] == [{"text": "A"}, None, None, None, None]
    assert out["value"] == [{"text": "X"}, None, None, None, None]
    assert out["_eddy_raw_key"] == keys and out["_eddy_raw_value"] == values
    assert out["_eddy_decode_error"] == [
        None, "value.format avro: bad b'junk'", "key.format avro: bad b'nope'", None,
        "key.format avro: bad b'bad'; value.format avro: bad b'worse'"]
    assert vd.extra_ddl(decodings) == ("_eddy_raw_key BINARY, _eddy_raw_value BINARY, "
                                       "_eddy_decode_error STRING")
