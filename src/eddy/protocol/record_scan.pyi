"""Types of the compiled keyless-record scan (record_scan.pyx)."""

from typing_extensions import Buffer

def keyless_records(payload: Buffer, count: int) -> list[int]: ...
