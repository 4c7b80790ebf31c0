# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The keyless check of compacted topics, compiled: walks every record of a batch's
(decompressed) records section with the same checks as `records.iter_records` and answers
the indexes of the records without a key.

A produce to a compacted topic must look at every record's key (Kafka rejects keyless
records there). In Python that costs microseconds per record, so a small compressed batch
of millions of empty records could hold the event loop for tens of seconds; here it costs
nanoseconds. Every length and count is checked against the end of its record and of the
section before it is used; bad input raises records.CorruptRecordError naming the field.
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t

from eddy.protocol.records import CorruptRecordError

cdef enum:
    MIN_RECORD_SIZE = 7  # length, attributes, ts delta, offset delta, key, value, headers
    MIN_RECORD_BODY = 6  # the same after the length


cdef class _Cursor:
    cdef const uint8_t* base
    cdef Py_ssize_t pos

    cdef int64_t varint(self, Py_ssize_t end, int width, str what) except? -0x7FFFFFFFFFFFFFFF:
        """A zig-zag varint of at most `width` bytes (5: int32, 10: int64) before `end`."""
        cdef uint64_t raw = 0
        cdef uint64_t b
        cdef int i
        for i in range(width):
            if self.pos >= end:
                raise CorruptRecordError(f"{what}: the varint runs past the end of its record")
            b = self.base[self.pos]
            self.pos += 1
            if i == 9 and (b & 0x7F) > 1:
                raise CorruptRecordError(f"{what}: varint overflows its type")
            raw |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                if width == 5 and raw > 0xFFFFFFFF:
                    raise CorruptRecordError(f"{what}: varint overflows its type")
                return <int64_t>(raw >> 1) ^ -(<int64_t>(raw & 1))
        raise CorruptRecordError(f"{what}: varint longer than {width} bytes")

    cdef int64_t length(self, Py_ssize_t end, bint nullable, str what, str what_length
                        ) except -2:
        """A field's length, checked against the bytes left before `end` (-1: null)."""
        cdef int64_t n = self.varint(end, 5, what_length)
        if n < 0:
            if n == -1 and nullable:
                return -1
            raise CorruptRecordError(f"{what}: length {n}")
        if n > end - self.pos:
            raise CorruptRecordError(
                f"{what}: length {n} runs past its record ({end - self.pos} bytes left)")
        return n


def keyless_records(const uint8_t[::1] payload, Py_ssize_t count,
                    Py_ssize_t max_listed=0x7FFFFFFF):
    """(how many records have no key, the indexes of the first `max_listed` of them) in a
    records section that holds `count` records; raises CorruptRecordError if the section
    does not hold exactly that many well-formed records."""
    cdef Py_ssize_t total = payload.shape[0]
    cdef Py_ssize_t i, end
    cdef Py_ssize_t keyless = 0
    cdef int64_t n, key, value, headers, h
    cdef _Cursor c = _Cursor()
    out = []
    if count < 0 or count > total // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"record count {count} does not fit {total} bytes of records")
    if total == 0:
        return 0, out
    c.base = &payload[0]
    c.pos = 0
    for i in range(count):
        try:
            n = c.varint(total, 5, "length")
            if n < MIN_RECORD_BODY or n > total - c.pos:
                raise CorruptRecordError(
                    f"length {n} does not fit the records ({total - c.pos} bytes left, at "
                    f"least {MIN_RECORD_BODY} needed)")
            end = c.pos + n
            c.pos += 1  # attributes
            c.varint(end, 10, "timestamp delta")
            c.varint(end, 5, "offset delta")
            key = c.length(end, True, "key", "key length")
            if key < 0:
                if keyless < max_listed:
                    out.append(i)
                keyless += 1
            else:
                c.pos += key
            value = c.length(end, True, "value", "value length")
            if value > 0:
                c.pos += value
            headers = c.varint(end, 5, "header count")
            if headers < 0 or headers > (end - c.pos) // 2:
                raise CorruptRecordError(
                    f"header count {headers} does not fit its record ({end - c.pos} bytes "
                    "left)")
            for h in range(headers):
                c.pos += c.length(end, False, "header key", "header key length")
                value = c.length(end, True, "header value", "header value length")
                if value > 0:
                    c.pos += value
            if c.pos != end:
                raise CorruptRecordError(
                    f"length {n} does not match its fields ({c.pos - end + n} bytes)")
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"record {i} {exc}") from None
    if c.pos != total:
        raise CorruptRecordError(f"{total - c.pos} bytes after the batch's {count} records")
    return keyless, out
