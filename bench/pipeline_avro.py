"""`python -m bench.pipeline_avro`: rows/s of the pipeline reader's Avro decoding.

Issue 15's benchmark: ~1 KiB Avro records in Confluent's wire format, in Arrow batches
shaped as `format("eddy")`'s reader makes them (ARROW_BATCH rows, Spark's Kafka
columns), decoded by eddy.connect.formats.value_decoding.decode_batch into the typed `value`
struct column: the work `value.format: avro` adds to each read task. The registry is a
stub HTTP server on loopback serving two versions of the schema (it is asked once per
id; the point is the decode, not the registry). Two phases:

1. same: every record written with the reader schema (no resolution);
2. evolved: every record written with the older schema, resolved to the newer one
   (a field added with a default).

Batches carry the `headers` column (the reader reads headers whenever a decoding is set:
schema ids may travel there). `--framing header` writes the schema's GUID in the record
header `__value_schema_id` and bare Avro values (confluent-kafka's
header_schema_id_serializer) instead of Confluent's classic prefix (magic byte 0, id).

`--smoke` runs a few thousand rows (CI). Prints rows/s and MB/s of each phase.
"""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import fastavro
import pyarrow as pa

from eddy.connect.formats.confluent_wire import HEADER_KEYS, MAGIC_GUID, frame
from eddy.connect.formats.value_decoding import (
    FieldDecoding,
    decode_batch,
    output_schema,
    resolve,
)
from eddy.connect.reader.kafka_source import ARROW_BATCH, _arrow_schema

SUBJECT = "bench-value"
GUIDS = {1: "5d2c6c1e-0a31-4b7e-9f3e-000000000001", 2: "5d2c6c1e-0a31-4b7e-9f3e-000000000002"}
_FIELDS: list[dict[str, Any]] = [
    {"name": "id", "type": "long"},
    {"name": "user", "type": "string"},
    {"name": "email", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "quantity", "type": "int"},
    {"name": "region", "type": {"type": "enum", "name": "Region",
                                "symbols": ["EU", "US", "AP"]}},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "string"}},
    {"name": "note", "type": ["null", "string"]},
    {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "street", "type": "string"}, {"name": "city", "type": "string"},
        {"name": "zip", "type": "string"}]}},
]
V1 = {"type": "record", "name": "Order", "namespace": "bench", "fields": _FIELDS}
V2 = {**V1, "fields": [*_FIELDS, {"name": "channel", "type": "string", "default": "web"}]}


def make_record(i: int, v2: bool) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": i, "user": f"user-{i % 100_000:06d}", "email": f"user{i % 100_000}@example.com",
        "amount": round(i * 0.37 % 1000, 2), "quantity": i % 17,
        "region": ("EU", "US", "AP")[i % 3], "created": 1_700_000_000_000 + i,
        "tags": [f"tag-{(i + k) % 50}" for k in range(8)],
        "attrs": {f"key-{k}": f"value-{(i * k) % 997:04d}-" + "x" * 20 for k in range(10)},
        "note": "n" * 900 if i % 2 else None,
        "address": {"street": f"{i % 999} Long Street Name", "city": "Springfield",
                    "zip": f"{i % 99999:05d}"},
    }
    if v2:
        rec["channel"] = ("web", "app")[i % 2]
    return rec


class _Registry(BaseHTTPRequestHandler):
    docs: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.docs.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        payload = body or b'{"error_code": 40403, "message": "not found"}'
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


def start_registry() -> tuple[ThreadingHTTPServer, str]:
    v1, v2 = json.dumps(V1), json.dumps(V2)
    _Registry.docs = {
        "/schemas/ids/1": json.dumps({"schema": v1}).encode(),
        "/schemas/ids/2": json.dumps({"schema": v2}).encode(),
        f"/schemas/guids/{GUIDS[1]}": json.dumps({"schema": v1}).encode(),
        f"/schemas/guids/{GUIDS[2]}": json.dumps({"schema": v2}).encode(),
        f"/subjects/{SUBJECT}/versions/latest": json.dumps(
            {"subject": SUBJECT, "version": 2, "id": 2, "schema": v2}).encode(),
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def make_batches(rows: int, v2: bool, framing: str = "classic") -> tuple[list[Any], int]:
    """Arrow batches as the reader yields them, and the total value bytes."""
    import uuid

    schema = fastavro.parse_schema(V2 if v2 else V1)
    schema_id = 2 if v2 else 1
    values: list[bytes] = []
    for i in range(rows):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, schema, make_record(i, v2))
        values.append(out.getvalue() if framing == "header" else frame(schema_id, out.getvalue()))
    header = [{"key": HEADER_KEYS["value"],
               "value": bytes([MAGIC_GUID]) + uuid.UUID(GUIDS[schema_id]).bytes}]
    arrow_schema = _arrow_schema(True)
    batches = []
    for lo in range(0, rows, ARROW_BATCH):
        chunk = values[lo:lo + ARROW_BATCH]
        n = len(chunk)
        batches.append(pa.RecordBatch.from_arrays([
            pa.nulls(n, pa.binary()), pa.array(chunk, pa.binary()),
            pa.array(["bench"] * n), pa.array([0] * n, pa.int32()),
            pa.array(range(lo, lo + n), pa.int64()),
            pa.array([0] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
            pa.array([header if framing == "header" else []] * n, arrow_schema.field(7).type),
        ], schema=arrow_schema))
    return batches, sum(map(len, values))


def phase(name: str, dec: FieldDecoding, rows: int, v2: bool, framing: str
          ) -> dict[str, float]:
    batches, nbytes = make_batches(rows, v2, framing)
    out_schema = output_schema(_arrow_schema(False), (dec,))  # headers read, not output
    decode_batch(batches[0].slice(0, 10), (dec,), out_schema)  # warm: schema fetch
    started = time.perf_counter()
    decoded = 0
    for batch in batches:
        result = decode_batch(batch, (dec,), out_schema)
        bad = result.column("_eddy_decode_error").null_count
        if bad != result.num_rows:
            raise SystemExit(f"{name}: {result.num_rows - bad} rows did not decode")
        decoded += result.num_rows
    seconds = time.perf_counter() - started
    out = {"rows": decoded, "avg_value_bytes": nbytes / rows, "seconds": seconds,
           "rows_s": decoded / seconds, "mb_s": nbytes / seconds / 1e6}
    print(f"{name:8s} {decoded:>9,d} rows of {out['avg_value_bytes']:.0f} B: "
          f"{out['rows_s']:>10,.0f} rows/s  {out['mb_s']:6.1f} MB/s  ({seconds:.2f} s)")
    return out


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline_avro",
                                     description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--smoke", action="store_true", help="a few thousand rows (CI)")
    parser.add_argument("--framing", choices=("classic", "header"), default="classic",
                        help="schema id in front of the value (classic) or the GUID in "
                             "the __value_schema_id header")
    args = parser.parse_args(argv)
    rows = 3_000 if args.smoke else args.rows
    server, url = start_registry()
    try:
        dec = resolve(FieldDecoding("value", "avro", url, SUBJECT))
        results = {"same": phase("same", dec, rows, True, args.framing),
                   "evolved": phase("evolved", dec, rows, False, args.framing)}
    finally:
        server.shutdown()
    print(f"rows/s ({args.framing} framing): {results['same']['rows_s']:,.0f} (same schema), "
          f"{results['evolved']['rows_s']:,.0f} (evolved)")
    return results


if __name__ == "__main__":
    main()
