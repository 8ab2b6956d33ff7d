"""The v2 RecordBatch header view.

The produce and fetch paths never look inside a batch: they read the fixed 61-byte
header, check magic, length and CRC-32C, and patch the base offset and leader epoch in
place. Everything here therefore costs constant Python work per batch; the only work
linear in the batch size is the CRC, which runs in C.

`encode_batch` / `decode_records` are the exception: they build and read individual
records and exist for tests, benchmarks and the few features that need records
(offset-for-timestamp refinement, compaction).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from kbroker.protocol.compression import compress as compress_records
from kbroker.protocol.errors import CorruptBatchError, InvalidBatchError
from kbroker.protocol.varint import read_varint, write_varint

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch not counted by batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49
MAGIC = 2

BASE_OFFSET_OFFSET = 0
BATCH_LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORD_COUNT_OFFSET = 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
TRANSACTIONAL_OR_CONTROL = TRANSACTIONAL_MASK | CONTROL_MASK

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")  # baseOffset, batchLength
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_PRODUCER = struct.Struct(">qh")  # producerId, producerEpoch: adjacent in the header
_ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1  # every flag sits in the low byte

assert _HEADER.size == HEADER_SIZE


class UnsupportedMagicError(CorruptBatchError):
    """Message format v0/v1 (magic 0 or 1), which Kafka 4 no longer stores
    (UNSUPPORTED_FOR_MESSAGE_FORMAT, not retriable: old clients stop retrying)."""


class InvalidRecordsError(InvalidBatchError):
    """Records Kafka refuses with INVALID_RECORD (KIP-467): a record count that does not
    match the batch, records that do not parse. `record_errors` are (index of the record
    within its batch, message) pairs for the Produce response's record_errors."""

    def __init__(self, message: str, record_errors: Sequence[tuple[int, str]] = ()) -> None:
        super().__init__(message)
        self.record_errors = list(record_errors)


class BatchTooLargeError(InvalidBatchError):
    """A batch larger than the topic's max.message.bytes (Kafka's MESSAGE_TOO_LARGE)."""


class RecordListTooLargeError(InvalidBatchError):
    """An append larger than the partition's segment size, which no segment could hold
    (Kafka's RECORD_LIST_TOO_LARGE)."""


@dataclass(slots=True)
class BatchHeader:
    """The fixed header of one v2 batch; `position` is where it starts in its buffer."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = field(default=0, kw_only=True)

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def total_size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def starts_with_transactional_data(records: bytes | bytearray | memoryview) -> bool:
    """Whether the first batch of `records` is transactional and not a control batch (a
    transaction marker), read from its attributes alone, before the batch is parsed."""
    return (
        len(records) > _ATTRIBUTES_LOW_BYTE
        and records[_ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_OR_CONTROL == TRANSACTIONAL_MASK
    )


def first_producer(records: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(producerId, producerEpoch) of the first batch; HEADER_SIZE bytes must be there."""
    producer_id, epoch = _PRODUCER.unpack_from(records, PRODUCER_ID_OFFSET)
    return producer_id, epoch


def first_sequence(records: bytes | bytearray | memoryview) -> int:
    """The base sequence of the first batch; HEADER_SIZE bytes must be there."""
    (sequence,) = _I32.unpack_from(records, BASE_SEQUENCE_OFFSET)
    return int(sequence)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`; the caller guarantees HEADER_SIZE bytes are there."""
    return BatchHeader(*_HEADER.unpack_from(buf, pos), position=pos)


def read_prefix(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """(baseOffset, batchLength) at `pos`: enough to step to the next batch."""
    return _PREFIX.unpack_from(buf, pos)


def batch_crc(buf: bytes | bytearray | memoryview, pos: int, batch_length: int) -> int:
    """CRC-32C over attributes..end of the batch at `pos`."""
    end = pos + LOG_OVERHEAD + batch_length
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end])


_OLD_MESSAGE_MIN_SIZE = (14, 22)  # crc..value of an empty v0 / v1 message


def _looks_like_old_message(view: memoryview, pos: int, end: int) -> bool:
    """A v0/v1 message: magic 0 or 1 at the same place as v2's, and a size that fits."""
    if end - pos <= MAGIC_OFFSET:
        return False
    magic = view[pos + MAGIC_OFFSET]
    if magic > 1:
        return False
    (size,) = _I32.unpack_from(view, pos + 8)
    return _OLD_MESSAGE_MIN_SIZE[magic] <= size <= end - pos - 12


def validate_batches(
    buf: bytes | bytearray | memoryview,
    max_batch_bytes: int,
    *,
    check_record_count: bool = True,
) -> list[BatchHeader]:
    """Walk every batch of a records blob and return their headers: validate_batches_py's
    checks, in C where the extension is built (1.5 us a one-batch produce, most of it the
    CRC, against 3.4 us in Python)."""
    return _batch_headers(buf, max_batch_bytes, check_record_count)


def validate_batches_py(
    buf: bytes | bytearray | memoryview, max_batch_bytes: int, check_record_count: bool = True
) -> list[BatchHeader]:
    """Walk every batch of a records blob and return their headers.

    Rejects anything Kafka would reject before an append: no batches, a trailing
    partial batch, magic other than 2, a batchLength below the header size, a CRC
    mismatch, a whole batch above `max_batch_bytes` (checked before the CRC, as Kafka does).
    With `check_record_count` (client appends) the record count must be positive and
    agree with lastOffsetDelta; replicated or compacted data may legitimately differ.
    """
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    if end == 0:
        raise CorruptBatchError("empty records")
    headers: list[BatchHeader] = []
    pos = 0
    unpack = _HEADER.unpack_from
    while pos < end:
        if _looks_like_old_message(view, pos, end):
            magic = view[pos + MAGIC_OFFSET]
            raise UnsupportedMagicError(f"magic {magic} (message format v{magic}) at byte {pos}")
        if end - pos < HEADER_SIZE:
            raise CorruptBatchError(f"partial batch header at byte {pos}")
        fields = unpack(view, pos)
        batch_length = fields[1]
        if fields[3] != MAGIC:
            raise CorruptBatchError(f"unsupported magic {fields[3]} at byte {pos}")
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptBatchError(f"batch length {batch_length} below minimum at byte {pos}")
        size = batch_length + LOG_OVERHEAD
        nxt = pos + size
        if nxt > end:
            # A declared length past the end is a partial or lying batch, not a big one.
            raise CorruptBatchError(f"partial batch at byte {pos}: {size} bytes, {end - pos} left")
        if size > max_batch_bytes:
            raise BatchTooLargeError(f"batch of {size} bytes exceeds limit {max_batch_bytes}")
        if crc32c(view[pos + ATTRIBUTES_OFFSET : nxt]) != fields[4]:
            raise CorruptBatchError(f"CRC mismatch in batch at byte {pos}")
        if check_record_count:
            count = fields[12]
            if count <= 0 or fields[6] + 1 != count:
                raise InvalidRecordsError(
                    f"record count {count} does not match lastOffsetDelta {fields[6]}"
                )
        elif fields[6] < 0:
            raise CorruptBatchError(f"negative lastOffsetDelta at byte {pos}")
        headers.append(BatchHeader(*fields, position=pos))
        pos = nxt
    return headers


_batch_headers: Callable[[bytes | bytearray | memoryview, int, bool], list[BatchHeader]]
try:
    from kbroker.protocol import _requestread
except ImportError:  # the extension is not built: the same checks, in Python
    _batch_headers = validate_batches_py
else:
    _requestread.bind_batches(
        BatchHeader,
        CorruptBatchError,
        UnsupportedMagicError,
        BatchTooLargeError,
        InvalidRecordsError,
        crc32c,
    )
    _batch_headers = _requestread.batch_headers


def assign_offsets(
    buf: bytearray | memoryview, headers: Sequence[BatchHeader], base_offset: int, leader_epoch: int
) -> int:
    """Give the batches consecutive offsets from `base_offset`; returns the next offset.

    Both fields sit outside the CRC, so no checksum is recomputed.
    """
    offset = base_offset
    pack_i64 = _I64.pack_into
    pack_i32 = _I32.pack_into
    for h in headers:
        pack_i64(buf, h.position, offset)
        pack_i32(buf, h.position + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
        h.base_offset = offset
        h.partition_leader_epoch = leader_epoch
        offset += h.last_offset_delta + 1
    return offset


def set_log_append_time(
    buf: bytearray | memoryview, header: BatchHeader, pos: int, now_ms: int
) -> None:
    """Stamp a batch with LogAppendTime as Kafka does: timestamp-type bit and maxTimestamp.

    baseTimestamp and the record deltas stay as produced; readers of a LogAppendTime
    batch take maxTimestamp as every record's timestamp. The CRC is recomputed.
    """
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    crc = crc32c(
        memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + header.batch_length]
    )
    _U32.pack_into(buf, pos + CRC_OFFSET, crc)
    header.attributes = attributes
    header.max_timestamp = now_ms
    header.crc = crc


# --- record encoding (tests, benchmarks, features that need records) -----------------


@dataclass(slots=True)
class Record:
    """One record of a batch; `timestamp` is absolute (ms), `offset` absolute."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    offset: int | None = None


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def _encode_record(out: bytearray, rec: Record, offset_delta: int, timestamp_delta: int) -> None:
    body = bytearray(b"\x00")  # record attributes, unused
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    _write_bytes(body, rec.key)
    _write_bytes(body, rec.value)
    write_varint(body, len(rec.headers))
    for hkey, hval in rec.headers:
        _write_bytes(body, hkey.encode())
        _write_bytes(body, hval)
    write_varint(out, len(body))
    out += body


def encode_batch(
    records: Iterable[Record | tuple[bytes | None, bytes | None] | bytes],
    base_timestamp: int,
    *,
    compression: int = 0,
    compress: Callable[[bytes], bytes] | None = None,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    log_append_time: bool = False,
) -> bytearray:
    """Build one v2 batch as a producer would (records as Record, (key, value) or value).

    A nonzero `compression` compresses the record section with `compress` or, if
    omitted, as Kafka's producers do (protocol.compression).
    """
    recs: list[Record] = []
    for r in records:
        if isinstance(r, Record):
            recs.append(r)
        elif isinstance(r, tuple):
            recs.append(Record(r[0], r[1]))
        else:
            recs.append(Record(None, r))
    if not recs:
        raise ValueError("a batch holds at least one record")
    body = bytearray()
    max_ts = NO_TIMESTAMP
    last_delta = 0
    for i, rec in enumerate(recs):
        ts = base_timestamp if rec.timestamp is None else rec.timestamp
        delta = i if rec.offset is None else rec.offset - base_offset
        last_delta = max(last_delta, delta)
        max_ts = max(max_ts, ts)
        _encode_record(body, rec, delta, ts - base_timestamp)
    if compression:
        packed = compress(bytes(body)) if compress else compress_records(compression, body)
        body = bytearray(packed)
    attributes = compression & COMPRESSION_MASK
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    out = bytearray(HEADER_SIZE) + body
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        len(out) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        last_delta,
        base_timestamp,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        len(recs),
    )
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def decode_records(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    decompress: Callable[[int, bytes], bytes] | None = None,
) -> list[Record]:
    """Decode the records of the batch at `pos` (absolute offsets and timestamps).

    LogAppendTime batches report maxTimestamp for every record, as Kafka's readers do.
    Compressed batches need `decompress(codec, data)`.
    """
    h = read_header(buf, pos)
    view = memoryview(buf)[pos + HEADER_SIZE : pos + h.total_size]
    if h.compression:
        if decompress is None:
            raise ValueError(f"batch uses compression codec {h.compression}")
        view = memoryview(decompress(h.compression, bytes(view)))
    data = view
    p = 0
    out: list[Record] = []
    log_append = h.timestamp_type == 1
    for _ in range(h.record_count):
        length, p = read_varint(data, p)
        end = p + length
        p += 1  # attributes
        ts_delta, p = read_varint(data, p)
        off_delta, p = read_varint(data, p)
        key, p = _read_bytes(data, p)
        value, p = _read_bytes(data, p)
        nheaders, p = read_varint(data, p)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(nheaders):
            hk, p = _read_bytes(data, p)
            hv, p = _read_bytes(data, p)
            headers.append(((hk or b"").decode(), hv))
        if p != end:
            raise CorruptBatchError("record length mismatch")
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append(Record(key, value, ts, headers, h.base_offset + off_delta))
    return out


def _read_bytes(data: memoryview, p: int) -> tuple[bytes | None, int]:
    n, p = read_varint(data, p)
    if n < 0:
        return None, p
    return bytes(data[p : p + n]), p + n
