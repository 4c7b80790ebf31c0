"""Types of the compiled JSON line builder (value_lines.pyx)."""

from typing import Any

def json_lines(offsets_buf: Any, data: Any, validity: Any, offset: int, length: int
               ) -> tuple[bytearray, bytearray, bytearray]: ...
