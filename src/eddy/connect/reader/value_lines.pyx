# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Arrow binary values -> newline-delimited JSON for pyarrow's JSON reader.

`json_lines` copies the values that may be JSON objects into one buffer, a line
each, for json_columns.ValueParser. A value is taken only if its first byte that
is not a space or tab is `{` and it holds no line break: then every line holds at
least one JSON value or is an error, so the reader returns exactly one row per line
or more rows than lines (or an error), never a silent shift. It must also be valid
UTF-8 (pyarrow's reader passes invalid bytes through into strings). Everything else
(null, empty, scalars, arrays, pretty-printed JSON, other encodings) is left to
Spark's from_json.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memchr, memcpy


cdef bint _utf8(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Whether p[:n] is well-formed UTF-8 (no overlong forms, surrogates or code
    points past U+10FFFF)."""
    cdef Py_ssize_t i = 0
    cdef uint8_t c, c1
    while i < n:
        c = p[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            if i + 1 >= n or (p[i + 1] & 0xC0) != 0x80:
                return False
            i += 2
        elif 0xE0 <= c <= 0xEF:
            if i + 2 >= n or (p[i + 1] & 0xC0) != 0x80 or (p[i + 2] & 0xC0) != 0x80:
                return False
            c1 = p[i + 1]
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
                return False
            i += 3
        elif 0xF0 <= c <= 0xF4:
            if (i + 3 >= n or (p[i + 1] & 0xC0) != 0x80 or (p[i + 2] & 0xC0) != 0x80
                    or (p[i + 3] & 0xC0) != 0x80):
                return False
            c1 = p[i + 1]
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
                return False
            i += 4
        else:
            return False
    return True


def json_lines(const uint8_t[::1] offsets_buf, const uint8_t[::1] data, object validity,
               Py_ssize_t offset, Py_ssize_t length):
    """From an Arrow binary array's buffers (int32 offsets, data, validity bitmap or
    None; the array's offset and length): (lines, line_offsets, rows) where `lines`
    holds the chosen values each followed by a newline, `line_offsets` the int32
    start of each line plus the end, and `rows` the int64 index of each chosen value
    in the array."""
    cdef const int32_t* offsets = <const int32_t*>&offsets_buf[0]
    cdef const uint8_t* values = &data[0] if data.shape[0] else NULL
    cdef const uint8_t[::1] bits
    cdef const uint8_t* valid = NULL
    if validity is not None:
        bits = validity
        valid = &bits[0]
    cdef Py_ssize_t total = offsets[offset + length] - offsets[offset] + length
    if total > 0x7FFFFFFF:
        raise OverflowError("more than 2 GiB of values in one batch")
    cdef bytearray lines = bytearray(total)
    cdef bytearray line_offsets = bytearray(4 * (length + 1))
    cdef bytearray rows = bytearray(8 * length)
    cdef uint8_t* out = <uint8_t*>PyByteArray_AS_STRING(lines)
    cdef int32_t* out_offsets = <int32_t*>PyByteArray_AS_STRING(line_offsets)
    cdef int64_t* out_rows = <int64_t*>PyByteArray_AS_STRING(rows)
    cdef Py_ssize_t i, j, k, n = 0, used = 0
    cdef const uint8_t* v
    cdef Py_ssize_t size
    for i in range(length):
        j = offset + i
        if valid != NULL and not (valid[j >> 3] >> (j & 7)) & 1:
            continue
        v = values + offsets[j]
        size = offsets[j + 1] - offsets[j]
        k = 0
        while k < size and (v[k] == 32 or v[k] == 9):
            k += 1
        if k == size or v[k] != 123:  # '{'
            continue
        if memchr(v, 10, size) != NULL or memchr(v, 13, size) != NULL:
            continue
        if not _utf8(v, size):
            continue
        out_offsets[n] = <int32_t>used
        memcpy(out + used, v, size)
        used += size
        out[used] = 10
        used += 1
        out_rows[n] = i
        n += 1
    out_offsets[n] = <int32_t>used
    PyByteArray_Resize(lines, used)
    PyByteArray_Resize(line_offsets, 4 * (n + 1))
    PyByteArray_Resize(rows, 8 * n)
    return lines, line_offsets, rows
