"""Types of the compiled record decoder (record_columns.pyx)."""

from typing import Any

from typing_extensions import Buffer

END_OF_DATA: int
NEEDS_CALLER: int
REACHED_STOP: int
FULL: int

class CorruptBatch(ValueError): ...

class RecordColumns:
    rows: int
    with_headers: bool
    def __init__(self, with_headers: bool = True, rows_hint: int = 65536,
                 bytes_hint: int = 8388608) -> None: ...
    def append_records(self, records: Buffer, count: int, base_offset: int,
                       base_timestamp: int, max_timestamp: int, log_append_time: bool,
                       start: int, stop: int) -> tuple[int, int, bool]: ...
    def append_batches(self, data: Buffer, pos: int, start: int, stop: int,
                       transactions_inline: bool, max_rows: int = -1
                       ) -> tuple[int, int, int]: ...
    def take(self) -> dict[str, Any]: ...
