"""A pipeline's leading `parse_json` of the record value, done in the eddy reader.

Spark's from_json costs about 3 us of JVM time per 100-byte record here, more than
everything else a simple pipeline does. When a pipeline starts with parse_json on
`value` and its schema has only types whose JSON conversion pyarrow does exactly
as Spark does (STRING, BIGINT, INT, DOUBLE, BOOLEAN), the runtime asks the reader
(`parseValueSchema` option) to parse each Arrow batch of values with pyarrow's C++
JSON reader into one more column, PARSED_COLUMN, a struct.

The column is a hint, never the final word: a row the fast parse did not take is
null there, and the parse_json transform runs Spark's own from_json on exactly
those rows (a CASE over the column), so every row is parsed as Spark would. pyarrow
is strict where Spark may be lenient (single quotes, numbers as strings, duplicate
keys, invalid UTF-8, trailing text: all rejected here, so Spark decides them).

The values go to pyarrow one per line (value_lines.json_lines, compiled): only those
starting with `{` and holding no line break, so a line yields one row, or an error,
or more rows than one (`{} {}`): a block is taken only when it gives exactly one row
per line. A block that fails is split in halves until the bad lines are isolated
(blocks under MIN_BLOCK lines go to Spark whole). Top-level `null`, scalars and
arrays never reach pyarrow: Spark decides what they mean.
"""

from __future__ import annotations

import json
from typing import Any

#: the reader's column of pre-parsed values (null: not parsed here, use from_json)
PARSED_COLUMN = "_eddy_parsed_value"
#: the data source option carrying the struct (Spark's JSON form of a StructType)
OPTION = "parseValueSchema"
#: blocks smaller than this are not split further when they fail to parse
MIN_BLOCK = 16

#: Spark type name -> (pyarrow type factory name, DDL)
_TYPES = {
    "string": ("string", "STRING"),
    "long": ("int64", "BIGINT"),
    "integer": ("int32", "INT"),
    "double": ("float64", "DOUBLE"),
    "boolean": ("bool_", "BOOLEAN"),
}


def pushable_fields(struct_json: dict[str, Any]) -> list[tuple[str, str]] | None:
    """(name, Spark type name) of a StructType's JSON form when every field can be parsed
    in the reader; None when any cannot."""
    if struct_json.get("type") != "struct":
        return None
    out: list[tuple[str, str]] = []
    names: set[str] = set()
    for f in struct_json.get("fields", []):
        kind = f.get("type")
        if not isinstance(kind, str) or kind not in _TYPES or f["name"] in names:
            return None
        names.add(f["name"])
        out.append((f["name"], kind))
    return out or None


def _fields(struct_json: str) -> list[tuple[str, str]]:
    fields = pushable_fields(json.loads(struct_json))
    if fields is None:
        raise ValueError(f"option {OPTION}: only flat structs of "
                         f"{', '.join(d for _, d in _TYPES.values())} can be parsed here")
    return fields


def column_ddl(struct_json: str) -> str:
    """DDL of PARSED_COLUMN for a data source schema."""
    inner = ", ".join(f"`{n.replace('`', '``')}`: {_TYPES[k][1]}"
                      for n, k in _fields(struct_json))
    return f"`{PARSED_COLUMN}` STRUCT<{inner}>"


class ValueParser:
    """Parses a binary column of JSON values into PARSED_COLUMN's struct array."""

    def __init__(self, struct_json: str) -> None:
        import pyarrow as pa
        import pyarrow.json as pj

        self.type = pa.struct([pa.field(n, getattr(pa, _TYPES[k][0])())
                               for n, k in _fields(struct_json)])
        self._options = pj.ParseOptions(explicit_schema=pa.schema(list(self.type)),
                                        unexpected_field_behavior="ignore")

    def parse(self, values: Any) -> Any:
        """A struct array as long as `values` (binary): the parsed object, or null where
        the value is not one this parser takes (see module doc)."""
        import numpy as np
        import pyarrow as pa

        from eddy.connect.reader.value_lines import json_lines

        n = len(values)
        validity, offsets, data = (None if b is None else memoryview(b).cast("B")
                                   for b in values.buffers())
        lines, line_offsets, picked = json_lines(
            offsets, data if data is not None else b"", validity, values.offset, n)
        rows = np.frombuffer(picked, dtype=np.int64)
        starts = np.frombuffer(line_offsets, dtype=np.int32)
        parsed: list[tuple[int, Any]] = []  # (first line, struct array) of blocks that parsed
        if len(rows):
            self._parse_block(pa.py_buffer(lines), starts, 0, len(rows), parsed)
        if not parsed:
            return pa.nulls(n, self.type)
        if len(parsed) == 1 and len(parsed[0][1]) == n:
            return parsed[0][1]  # every value parsed, in order
        # row i of `values` takes entry where[i] of the parsed blocks (-1: not parsed)
        where = np.full(n, -1, dtype=np.int64)
        at = 0
        for first, struct in parsed:
            where[rows[first:first + len(struct)]] = np.arange(at, at + len(struct))
            at += len(struct)
        combined = pa.concat_arrays([struct for _, struct in parsed])
        return combined.take(pa.array(where, mask=where < 0))

    def _parse_block(self, data: Any, starts: Any, lo: int, hi: int,
                     out: list[tuple[int, Any]]) -> None:
        """Parse lines [lo, hi); a block that fails (or gives more rows than lines) is
        split in halves, down to MIN_BLOCK lines."""
        import pyarrow as pa
        import pyarrow.json as pj

        start, stop = int(starts[lo]), int(starts[hi])
        try:
            table = pj.read_json(
                pa.BufferReader(data.slice(start, stop - start)),
                read_options=pj.ReadOptions(use_threads=False,
                                            block_size=max(1 << 20, stop - start)),
                parse_options=self._options)
            aligned = table.num_rows == hi - lo
        except (pa.ArrowInvalid, UnicodeDecodeError, ValueError):
            aligned = False
        if aligned:
            out.append((lo, pa.StructArray.from_arrays(
                [table.column(i).combine_chunks() for i in range(table.num_columns)],
                fields=list(self.type))))
            return
        if hi - lo < MIN_BLOCK:
            return
        mid = (lo + hi) // 2
        self._parse_block(data, starts, lo, mid, out)
        self._parse_block(data, starts, mid, hi, out)
