"""Time the keyless check of compacted topics: the compiled scan (eddy.protocol.record_scan)
against the Python record decoder, and the bounds pass in front of kio.

    .venv/bin/python -m bench.keyless [--records 2000000]

The records are what a 1.4 KB zstd batch can expand to (empty records), the worst case a
client can send to a compacted topic; the check runs on the broker's event loop.
"""

from __future__ import annotations

import argparse
import time

from eddy.protocol.record_scan import keyless_records
from eddy.protocol.records import iter_records, write_varint


def _empty_record() -> bytes:
    body = b"\x00" + write_varint(0) + write_varint(0) + write_varint(-1) + write_varint(-1)
    body += write_varint(0)
    return write_varint(len(body)) + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.keyless", description=__doc__)
    parser.add_argument("--records", type=int, default=2_000_000)
    args = parser.parse_args(argv)
    n = args.records
    payload = _empty_record() * n
    started = time.perf_counter()
    total, listed = keyless_records(payload, n, 1000)
    compiled_s = time.perf_counter() - started
    started = time.perf_counter()
    python = [i for i, r in enumerate(iter_records(payload, n)) if r.key is None]
    python_s = time.perf_counter() - started
    assert total == len(python) and listed == python[:1000]
    print(f"{n} empty records ({len(payload)} bytes)")
    print(f"  compiled scan  {compiled_s * 1000:9.1f} ms  {compiled_s / n * 1e9:7.1f} ns/record")
    print(f"  python decoder {python_s * 1000:9.1f} ms  {python_s / n * 1e9:7.1f} ns/record")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
