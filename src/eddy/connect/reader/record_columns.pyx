# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Kafka v2 record batches -> Arrow column buffers, with no Python object per record.

The fast reader of `format("eddy")` fetches raw record batches (Kafka's Fetch) and
hands them here. `RecordColumns` walks the batches and appends every record whose
offset is in [start, stop) to growing column buffers laid out exactly as Arrow
wants them (validity bitmaps, int32 offsets, data), so the Python side builds the
pyarrow arrays with `Array.from_buffers` without copying. Batches it cannot decode
inline (compressed, control, or transactional while aborted transactions are
pending) are handed back to the caller, which decompresses or filters them and
passes the records on with `append_records`.

Layout of a v2 batch (big endian): 0 baseOffset i64 | 8 batchLength i32 |
12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32 | 21 attributes i16 |
23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64 |
43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordCount i32 |
61 records: length, attributes, timestampDelta, offsetDelta, key, value, headers
(varints zigzag-encoded).

The batches come from a broker, which may be hostile or broken: every length and count is
checked against the end of its batch (and of the data) before it is used to move, copy or
allocate, so a corrupt batch raises CorruptBatch saying what is wrong, and the columns grow
with the bytes fed, never with what a length claims.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy, memset

cdef enum:
    HEADER_SIZE = 61
    LOG_OVERHEAD = 12
    # the smallest message of any format (v0: crc, magic, attributes, key and value lengths)
    MIN_MESSAGE = 14
    # a record's fields after its length: attributes, 3 varints and the header count
    MIN_RECORD_BODY = 6

# base offsets past this are corrupt (Kafka's are far below): offset arithmetic never overflows
cdef int64_t MAX_BASE_OFFSET = (<int64_t>1) << 62

#: append_batches stopped because the data ended (or ends in a partial batch)
END_OF_DATA = 0
#: append_batches stopped at a batch the caller must handle (see module doc)
NEEDS_CALLER = 1
#: append_batches reached the stop offset
REACHED_STOP = 2
#: append_batches stopped because the columns hold `max_rows` rows
FULL = 3


class CorruptBatch(ValueError):
    """Record data that does not follow Kafka's v2 format."""


cdef inline int64_t be64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline int32_t be32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint64_t>p[0] << 24) | (<uint64_t>p[1] << 16) | (<uint64_t>p[2] << 8)
                     | <uint64_t>p[3])


cdef inline int be16(const uint8_t* p) noexcept nogil:
    return <int>(<short>((p[0] << 8) | p[1]))


cdef class _Buf:
    """A growable byte buffer backed by a bytearray (handed to pyarrow without a copy)."""

    cdef bytearray data
    cdef Py_ssize_t used
    cdef Py_ssize_t cap

    def __cinit__(self, Py_ssize_t cap):
        self.data = bytearray(cap)
        self.cap = cap
        self.used = 0

    cdef inline char* reserve(self, Py_ssize_t n) except NULL:
        cdef Py_ssize_t want = self.used + n
        cdef Py_ssize_t cap = self.cap
        if want > cap:
            while cap < want:
                cap = cap * 2 + 64
            PyByteArray_Resize(self.data, cap)
            self.cap = cap
        return PyByteArray_AS_STRING(self.data) + self.used

    cdef inline int append(self, const uint8_t* src, Py_ssize_t n) except -1:
        cdef char* dst = self.reserve(n)
        if n:
            memcpy(dst, src, n)
        self.used += n
        return 0

    cdef inline int append_i32(self, int32_t v) except -1:
        cdef char* dst = self.reserve(4)
        (<int32_t*>dst)[0] = v
        self.used += 4
        return 0

    cdef inline int append_i64(self, int64_t v) except -1:
        cdef char* dst = self.reserve(8)
        (<int64_t*>dst)[0] = v
        self.used += 8
        return 0

    cdef bytearray take(self):
        """The bytes written so far (the bytearray cut to size); the buffer starts over."""
        cdef bytearray out = self.data
        PyByteArray_Resize(out, self.used)
        self.data = bytearray(self.cap)
        self.used = 0
        return out


cdef class _Bits:
    """A growable validity bitmap (1 = valid), Arrow's bit order."""

    cdef _Buf buf
    cdef Py_ssize_t n
    cdef Py_ssize_t nulls

    def __cinit__(self, Py_ssize_t cap):
        self.buf = _Buf(cap // 8 + 8)
        self.n = 0
        self.nulls = 0

    cdef inline int append(self, bint valid) except -1:
        cdef uint8_t* p
        if (self.n & 7) == 0:
            p = <uint8_t*>self.buf.reserve(1)
            p[0] = 0
            self.buf.used += 1
        if valid:
            p = <uint8_t*>PyByteArray_AS_STRING(self.buf.data)
            p[self.n >> 3] |= <uint8_t>(1 << (self.n & 7))
        else:
            self.nulls += 1
        self.n += 1
        return 0

    cdef tuple take(self):
        """(bitmap or None when nothing is null, null count); starts over."""
        cdef Py_ssize_t nulls = self.nulls
        cdef bytearray bits = self.buf.take()
        self.n = 0
        self.nulls = 0
        return (bits if nulls else None, nulls)


cdef class _BinaryColumn:
    """Arrow binary/string layout: validity, int32 offsets, data."""

    cdef _Bits valid
    cdef _Buf offsets
    cdef _Buf data

    def __cinit__(self, Py_ssize_t rows, Py_ssize_t data_bytes):
        self.valid = _Bits(rows)
        self.offsets = _Buf(4 * (rows + 1))
        self.data = _Buf(data_bytes)
        self.offsets.append_i32(0)

    cdef inline int append(self, const uint8_t* p, Py_ssize_t n) except -1:
        """n < 0 appends a null."""
        if n < 0:
            self.valid.append(False)
        else:
            self.valid.append(True)
            self.data.append(p, n)
        if self.data.used > 0x7FFFFFFF:
            raise OverflowError("more than 2 GiB in one column batch")
        self.offsets.append_i32(<int32_t>self.data.used)
        return 0

    cdef tuple take(self):
        bits, nulls = self.valid.take()
        out = (bits, self.offsets.take(), self.data.take(), nulls)
        self.offsets.append_i32(0)
        return out


cdef inline uint64_t _uvarint(const uint8_t* p, const uint8_t* end, Py_ssize_t* used,
                              int max_bytes) except? 0xFFFFFFFFFFFFFFFF:
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef int i = 0
    cdef uint8_t b
    while True:
        if i >= max_bytes:
            raise CorruptBatch(f"a varint longer than {max_bytes} bytes")
        if p + i >= end:
            raise CorruptBatch("a varint runs past its record")
        b = p[i]
        v |= (<uint64_t>(b & 0x7F)) << shift
        i += 1
        if not (b & 0x80):
            break
        shift += 7
    used[0] = i
    return v


cdef inline int64_t _zigzag(const uint8_t** p, const uint8_t* end, int max_bytes) except? -0x7FFFFFFFFFFFFFFF:
    cdef Py_ssize_t used = 0
    cdef uint64_t u = _uvarint(p[0], end, &used, max_bytes)
    p[0] += used
    return <int64_t>(u >> 1) ^ -(<int64_t>(u & 1))


cdef inline int _field(const uint8_t** p, const uint8_t* end, _BinaryColumn column,
                       bint nullable, str what) except -1:
    """Append the length-prefixed bytes at p[0] (length -1: null) to `column`; p[0] moves
    past them."""
    cdef int64_t n = _zigzag(p, end, 5)
    if n < 0 and (n != -1 or not nullable):
        raise CorruptBatch(f"a {what} length of {n}")
    if n > end - p[0]:
        raise CorruptBatch(f"a {what} of {n} bytes runs past its record "
                           f"({end - p[0]} bytes left)")
    column.append(p[0], n)
    if n > 0:
        p[0] += n
    return 0


cdef int _check_counts(int64_t base_offset, int64_t last_offset_delta, int64_t count
                       ) except -1:
    if base_offset < 0 or base_offset > MAX_BASE_OFFSET:
        raise CorruptBatch(f"the batch at offset {base_offset}: the base offset is out of "
                           "range")
    if last_offset_delta < 0:
        raise CorruptBatch(f"the batch at offset {base_offset}: last offset delta "
                           f"{last_offset_delta} is negative")
    if count < 0:
        raise CorruptBatch(f"the batch at offset {base_offset}: record count {count} is "
                           "negative")
    return 0


cdef class RecordColumns:
    """Records appended as Arrow columns: key, value, offset, timestamp (us), timestampType,
    and (with headers) the list<struct<key string, value binary>> headers column."""

    cdef readonly Py_ssize_t rows
    cdef readonly bint with_headers
    cdef _BinaryColumn keys
    cdef _BinaryColumn values
    cdef _Buf offsets
    cdef _Buf timestamps
    cdef _Buf timestamp_types
    cdef _Buf header_offsets
    cdef _BinaryColumn header_keys
    cdef _BinaryColumn header_values
    cdef Py_ssize_t header_count

    def __cinit__(self, bint with_headers=True, Py_ssize_t rows_hint=65536,
                  Py_ssize_t bytes_hint=1 << 23):
        self.with_headers = with_headers
        self.keys = _BinaryColumn(rows_hint, rows_hint * 8)
        self.values = _BinaryColumn(rows_hint, bytes_hint)
        self.offsets = _Buf(8 * rows_hint)
        self.timestamps = _Buf(8 * rows_hint)
        self.timestamp_types = _Buf(4 * rows_hint)
        self.header_offsets = _Buf(4 * (rows_hint + 1))
        self.header_offsets.append_i32(0)
        self.header_keys = _BinaryColumn(64, 1024)
        self.header_values = _BinaryColumn(64, 1024)
        self.rows = 0
        self.header_count = 0

    cdef int _record(self, const uint8_t* p, const uint8_t* end, int64_t base_offset,
                     int64_t base_ts, int64_t fixed_ts, int ts_type, int64_t start,
                     int64_t stop, int64_t* offset_out, const uint8_t** next_out) except -1:
        """Decode the record at p. Returns 1 if appended, 0 if before `start`, 2 if at or
        after `stop` (nothing appended). offset_out gets its offset, next_out its end."""
        cdef int64_t length = _zigzag(&p, end, 5)
        cdef const uint8_t* rec_end
        cdef int64_t ts_delta, off_delta, offset, hcount, i
        if length > end - p:
            raise CorruptBatch(f"a record length of {length} runs past its batch "
                               f"({end - p} bytes left)")
        if length < MIN_RECORD_BODY:
            raise CorruptBatch(f"a record length of {length} is too short for its fields")
        rec_end = p + length
        p += 1  # attributes (unused)
        ts_delta = _zigzag(&p, rec_end, 10)
        off_delta = _zigzag(&p, rec_end, 5)
        offset = base_offset + off_delta
        offset_out[0] = offset
        next_out[0] = rec_end
        if offset < start:
            return 0
        if offset >= stop:
            return 2
        _field(&p, rec_end, self.keys, True, "record key")
        _field(&p, rec_end, self.values, True, "record value")
        self.offsets.append_i64(offset)
        # in unsigned arithmetic: a broker's nonsense timestamp wraps instead of overflowing
        self.timestamps.append_i64(<int64_t>(
            (<uint64_t>fixed_ts if ts_type else <uint64_t>base_ts + <uint64_t>ts_delta)
            * <uint64_t>1000))
        self.timestamp_types.append_i32(ts_type)
        if self.with_headers:
            hcount = _zigzag(&p, rec_end, 5)
            if hcount < 0 or hcount > (rec_end - p) // 2:  # a header takes 2 bytes or more
                raise CorruptBatch(f"a record header count of {hcount} does not fit its "
                                   f"record ({rec_end - p} bytes left)")
            for i in range(hcount):
                _field(&p, rec_end, self.header_keys, False, "header key")
                _field(&p, rec_end, self.header_values, True, "header value")
            if p != rec_end:
                raise CorruptBatch("a record length does not match its fields")
            self.header_count += hcount
            if self.header_count > 0x7FFFFFFF:
                raise OverflowError("too many headers in one column batch")
            self.header_offsets.append_i32(<int32_t>self.header_count)
        self.rows += 1
        return 1

    def append_records(self, const uint8_t[::1] records, int count, int64_t base_offset,
                       int64_t base_timestamp, int64_t max_timestamp, bint log_append_time,
                       int64_t start, int64_t stop):
        """Append the `count` records of one batch (its records section, decompressed)
        whose offsets are in [start, stop). Returns (records appended, offset after the
        last record looked at, whether `stop` ended it)."""
        cdef const uint8_t* p = &records[0] if records.shape[0] else NULL
        cdef const uint8_t* end = p + records.shape[0]
        cdef int64_t offset = -1
        cdef int64_t next_offset = start
        cdef Py_ssize_t before = self.rows
        cdef int i, got
        cdef int ts_type = 1 if log_append_time else 0
        _check_counts(base_offset, 0, count)
        for i in range(count):
            if p >= end:
                raise CorruptBatch(f"a batch says {count} records and holds {i}")
            got = self._record(p, end, base_offset, base_timestamp, max_timestamp, ts_type,
                               start, stop, &offset, &p)
            if got == 2:
                return self.rows - before, next_offset, True
            if offset + 1 > next_offset:
                next_offset = offset + 1
        if p != end:
            raise CorruptBatch(f"{end - p} bytes after the batch's {count} records")
        return self.rows - before, next_offset, False

    def append_batches(self, const uint8_t[::1] data, Py_ssize_t pos, int64_t start,
                       int64_t stop, bint transactions_inline, Py_ssize_t max_rows=-1):
        """Walk the batches of `data` from `pos`, appending the records of uncompressed
        data batches whose offsets are in [start, stop); control batches are skipped
        when `transactions_inline` (no aborted transaction to track).

        Returns (status, pos, next_offset): END_OF_DATA (nothing or a partial batch
        left at pos), NEEDS_CALLER (the batch at pos is compressed, a control batch, or
        transactional with `transactions_inline` false, or not magic 2), REACHED_STOP, or
        FULL (max_rows reached; the batch at pos is only partly appended and
        next_offset says where to resume). next_offset is past every offset handled."""
        cdef Py_ssize_t total = data.shape[0]
        cdef const uint8_t* base = &data[0] if total else NULL
        cdef const uint8_t* b
        cdef const uint8_t* p
        cdef const uint8_t* end
        cdef int64_t base_offset, size, last_offset, producer_id, offset = -1
        cdef int64_t next_offset = start
        cdef int attributes, count, i, got, ts_type
        cdef int64_t base_ts, max_ts
        if pos < 0 or pos > total:
            raise ValueError(f"position {pos} is outside the {total} bytes of data")
        while total - pos >= LOG_OVERHEAD:
            b = base + pos
            base_offset = be64(b)
            size = <int64_t>be32(b + 8) + LOG_OVERHEAD
            if size < LOG_OVERHEAD + MIN_MESSAGE:
                raise CorruptBatch(f"the batch at offset {base_offset}: a batch length of "
                                   f"{size - LOG_OVERHEAD} is too short for any message format")
            if size > total - pos:
                return END_OF_DATA, pos, next_offset  # a partial batch at the end of a fetch
            if b[16] != 2:
                return NEEDS_CALLER, pos, next_offset
            if size < HEADER_SIZE:
                raise CorruptBatch(f"the batch at offset {base_offset}: a batch length of "
                                   f"{size - LOG_OVERHEAD} is shorter than the v2 batch header")
            attributes = be16(b + 21)
            count = be32(b + 57)
            _check_counts(base_offset, be32(b + 23), count)
            last_offset = base_offset + be32(b + 23)
            producer_id = be64(b + 43)
            if last_offset < start:
                pos += size
                continue
            if base_offset >= stop:
                return REACHED_STOP, pos, next_offset
            if (attributes & 0x07) or (not transactions_inline and producer_id >= 0):
                return NEEDS_CALLER, pos, next_offset
            if attributes & 0x20:  # a control batch: transaction markers, never data
                pos += size
                if last_offset + 1 > next_offset:
                    next_offset = last_offset + 1
                continue
            base_ts = be64(b + 27)
            max_ts = be64(b + 35)
            ts_type = 1 if attributes & 0x08 else 0
            p = b + HEADER_SIZE
            end = b + size
            try:
                for i in range(count):
                    if max_rows >= 0 and self.rows >= max_rows:
                        return FULL, pos, next_offset
                    if p >= end:
                        raise CorruptBatch(f"a batch says {count} records and holds {i}")
                    got = self._record(p, end, base_offset, base_ts, max_ts, ts_type, start,
                                       stop, &offset, &p)
                    if got == 2:
                        return REACHED_STOP, pos, next_offset
                    if offset + 1 > next_offset:
                        next_offset = offset + 1
                if p != end:
                    raise CorruptBatch(f"{end - p} bytes after the batch's {count} records")
            except CorruptBatch as exc:
                raise CorruptBatch(f"the batch at offset {base_offset}: {exc}") from None
            # offsets past the last record (compaction) still belong to this batch
            if last_offset + 1 > next_offset:
                next_offset = last_offset + 1
            pos += size
        return END_OF_DATA, pos, next_offset

    def take(self):
        """The buffers of everything appended, as a dict; the columns start over.

        keys, values, header_keys, header_values: (validity or None, offsets, data,
        null count); offsets, timestamps (int64 us), timestamp_types (int32),
        header_offsets (int32, rows + 1) or None; rows."""
        out = {
            "rows": self.rows,
            "keys": self.keys.take(),
            "values": self.values.take(),
            "offsets": self.offsets.take(),
            "timestamps": self.timestamps.take(),
            "timestamp_types": self.timestamp_types.take(),
            "header_offsets": None,
        }
        if self.with_headers:
            out["header_offsets"] = self.header_offsets.take()
            out["header_keys"] = self.header_keys.take()
            out["header_values"] = self.header_values.take()
            self.header_offsets.append_i32(0)
            self.header_count = 0
        self.rows = 0
        return out
