"""What Kafka's leader checks inside the batches of a Produce before appending them.

`batch.validate_batches` checks each batch's header and CRC. That is not enough: a
batch with a valid CRC can still hold a compressed payload that does not inflate,
records whose lengths run past the batch, fewer or more records than its count, offset
deltas that make two records share an offset, or timestamps a topic refuses. Stored,
such a batch stops every consumer of the partition, so, as Kafka's LogValidator does,
every record of every batch is walked once before anything is appended:

- compressed batches are inflated (in C, bounded against bombs) and unknown codec ids
  (5-7) refused: CORRUPT_MESSAGE, like a bad CRC;
- each record's length varint must lie inside the batch and its fields (attributes,
  timestamp delta, offset delta, key, value, headers) must fill exactly that length;
  key/value/header lengths stay inside the record and the header count is bounded by
  the bytes present; record i has offset delta i, and there are exactly `recordCount`
  records ending exactly at the batch's end: INVALID_RECORD (KIP-467);
- on a compacted topic every record has a key: INVALID_RECORD with the culprits in
  `record_errors`;
- with CreateTime, every timestamp lies within [now - message.timestamp.before.max.ms,
  now + message.timestamp.after.max.ms]: INVALID_TIMESTAMP with the culprits in
  `record_errors`; and the batch's maxTimestamp is set to the largest record timestamp
  when it says otherwise (Kafka rewrites it the same way, CRC included).

The walk runs in C (`_recordwalk`, built with the package) at a few nanoseconds a
record; `walk_py` is the reference with identical rules and messages, used when the
extension is not built. Only a failing batch is walked again in Python, to name every
offending record. The usual blob (uncompressed batches whose records pass, with keys
where they are required and timestamps in range, each maxTimestamp right) is known clear
in one C call (`_recordwalk.all_clear`), which decides only that there is nothing to do:
anything else goes through `validate_records`' own loop.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from kbroker.protocol.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptBatchError,
    InvalidRecordsError,
)
from kbroker.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    ZSTD,
    CompressionError,
    decompress,
)
from kbroker.protocol.varint import read_varint_within

__all__ = [
    "InvalidRecordsError",
    "InvalidTimestampError",
    "RecordPolicy",
    "validate_records",
    "walk",
    "walk_py",
]

_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_UNLIMITED = 2**63 - 1
_MAX_ERRORS_IN_MESSAGE = 3  # Kafka's error_message shows at most the first three


class InvalidTimestampError(InvalidRecordsError):
    """CreateTime timestamps outside the topic's limits (INVALID_TIMESTAMP)."""


@dataclass(slots=True, frozen=True)
class RecordPolicy:
    """The topic settings the record checks depend on."""

    timestamp_before_max_ms: int = _UNLIMITED
    timestamp_after_max_ms: int = 3_600_000  # Kafka 4's default: one hour
    log_append_time: bool = False
    require_keys: bool = False  # compacted topics
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES


# -- the walk ------------------------------------------------------------------------------


def _field(
    data: bytes | bytearray | memoryview, pos: int, end: int, index: int, what: str
) -> tuple[int, int]:
    try:
        value, pos = read_varint_within(data, pos, end, 5)
    except (IndexError, OverflowError):
        raise ValueError(index, f"{what} runs past the record") from None
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(index, f"{what} runs past the record")
    return value, pos


def walk_py(
    data: bytes | bytearray | memoryview,
    count: int,
    last_offset_delta: int,
    collect: list[tuple[int, bool]] | None = None,
) -> tuple[int, int, int]:
    """Walk the records section `data` of a batch declaring `count` records.

    Returns (smallest timestamp delta, largest timestamp delta, index of the first record
    without key or -1). Raises ValueError(record index or -1, message) at the first
    broken rule. With `collect`, appends (timestamp delta, has key) for every record.
    """
    if count <= 0 or last_offset_delta != count - 1:
        raise ValueError(
            -1, f"record count {count} does not match last offset delta {last_offset_delta}"
        )
    end = len(data)
    pos = 0
    min_ts, max_ts, first_keyless = 2**63 - 1, -(2**63), -1
    for i in range(count):
        if pos >= end:
            raise ValueError(i, "missing: the batch holds fewer records than its count")
        try:
            length, pos = read_varint_within(data, pos, end, 5)
        except (IndexError, OverflowError):
            raise ValueError(i, "invalid record length") from None
        if not 0 <= length <= _INT32_MAX:
            raise ValueError(i, "invalid record length")
        if length > end - pos:
            raise ValueError(i, "length runs past the batch")
        rec_end = pos + length
        if pos >= rec_end:
            raise ValueError(i, "empty record")
        pos += 1  # attributes
        try:
            ts_delta, pos = read_varint_within(data, pos, rec_end, 10)
        except (IndexError, OverflowError):
            raise ValueError(i, "timestamp delta runs past the record") from None
        offset_delta, pos = _field(data, pos, rec_end, i, "offset delta")
        if offset_delta != i:
            raise ValueError(i, "offset delta out of sequence")
        key_len, pos = _field(data, pos, rec_end, i, "key length")
        if key_len < -1 or key_len > rec_end - pos:
            raise ValueError(i, "key length runs past the record")
        if key_len < 0:
            if first_keyless < 0:
                first_keyless = i
        else:
            pos += key_len
        value_len, pos = _field(data, pos, rec_end, i, "value length")
        if value_len < -1 or value_len > rec_end - pos:
            raise ValueError(i, "value length runs past the record")
        pos += max(value_len, 0)
        n_headers, pos = _field(data, pos, rec_end, i, "header count")
        if n_headers < 0 or n_headers > (rec_end - pos) // 2:
            raise ValueError(i, "header count exceeds the bytes present")
        for _ in range(n_headers):
            hk, pos = _field(data, pos, rec_end, i, "header key length")
            if hk < 0 or hk > rec_end - pos:
                raise ValueError(i, "header key length runs past the record")
            pos += hk
            hv, pos = _field(data, pos, rec_end, i, "header value length")
            if hv < -1 or hv > rec_end - pos:
                raise ValueError(i, "header value length runs past the record")
            pos += max(hv, 0)
        if pos != rec_end:
            raise ValueError(i, "fields do not fill the record's length")
        min_ts = min(min_ts, ts_delta)
        max_ts = max(max_ts, ts_delta)
        if collect is not None:
            collect.append((ts_delta, key_len >= 0))
    if pos != end:
        raise ValueError(-1, f"{end - pos} bytes follow the batch's {count} records")
    return min_ts, max_ts, first_keyless


_Walk = Callable[[bytes | bytearray | memoryview, int, int], tuple[int, int, int]]
walk: _Walk


def _not_known_clear(
    buf: bytearray | memoryview, earliest: int, latest: int, require_keys: bool, check_time: bool
) -> bool:
    """Without the extension every blob goes through validate_records' loop."""
    return False


all_clear: Callable[[bytearray | memoryview, int, int, bool, bool], bool]
try:
    from kbroker.protocol._recordwalk import all_clear, walk
except ImportError:  # the extension is not built: the same rules, in Python
    walk = walk_py
    all_clear = _not_known_clear


# -- the checks ----------------------------------------------------------------------------


_MIN_I64, _MAX_I64 = -(2**63), 2**63 - 1


def time_bounds(policy: RecordPolicy, now_ms: int) -> tuple[int, int]:
    """[earliest, latest] a record's timestamp may take at `now_ms`, as int64s (no
    timestamp lies beyond them). Long.MAX_VALUE means no limit at all (as in Kafka), not
    "after year -292 million"."""
    before, after = policy.timestamp_before_max_ms, policy.timestamp_after_max_ms
    earliest = now_ms - before if before < _UNLIMITED else _MIN_I64
    latest = now_ms + after if after < _UNLIMITED else _MAX_I64
    return max(earliest, _MIN_I64), min(latest, _MAX_I64)


def validate_records(
    buf: bytearray | memoryview,
    headers: Sequence[BatchHeader],
    now_ms: int,
    policy: RecordPolicy,
) -> None:
    """Check the records of batches that passed `validate_batches`, as Kafka's leader
    does before a client append; fixes a batch's maxTimestamp in `buf` (and its CRC, and
    the header) when it disagrees with its records. Raises CorruptBatchError,
    InvalidRecordsError or InvalidTimestampError naming the batch; nothing else in `buf`
    changes when it raises."""
    view = memoryview(buf)
    fixes: list[tuple[BatchHeader, int]] = []
    check_time = not policy.log_append_time
    earliest, latest = time_bounds(policy, now_ms)
    # The usual blob (uncompressed, well formed, in range, its maxTimestamp right) is
    # known clear in one C call; anything else takes the loop, which refuses or fixes it.
    if all_clear(buf, earliest, latest, policy.require_keys, check_time):
        return
    for n, h in enumerate(headers):
        start = h.position + HEADER_SIZE
        section: bytes | memoryview = view[start : h.position + h.total_size]
        codec = h.attributes & COMPRESSION_MASK
        if codec:
            if codec > ZSTD:
                raise CorruptBatchError(f"batch {n}: unknown compression codec id {codec}")
            try:
                section = decompress(codec, section, policy.max_decompressed_bytes)
            except CompressionError as exc:
                raise CorruptBatchError(f"batch {n}: {exc}") from None
        try:
            min_delta, max_delta, keyless = walk(section, h.record_count, h.last_offset_delta)
        except ValueError as exc:
            index, message = exc.args
            errors = [(index, message)] if index >= 0 else []
            raise InvalidRecordsError(f"batch {n}: {_describe(index, message)}", errors) from None
        if h.attributes & CONTROL_MASK:
            continue
        if policy.require_keys and keyless >= 0:
            facts = _facts(section, h)
            errors = [
                (i, "Compacted topic cannot accept message without key")
                for i, (_, has_key) in enumerate(facts)
                if not has_key
            ]
            raise InvalidRecordsError(_summary(n, errors), errors)
        if not check_time:
            continue
        base = h.base_timestamp
        if base + min_delta < earliest or base + max_delta > latest:
            errors = [
                (i, f"timestamp {base + d} is out of range [{earliest}, {latest}]")
                for i, (d, _) in enumerate(_facts(section, h))
                if base + d != NO_TIMESTAMP and not earliest <= base + d <= latest
            ]
            if errors:
                raise InvalidTimestampError(_summary(n, errors), errors)
        if base + max_delta != h.max_timestamp:
            fixes.append((h, base + max_delta))
    for h, max_timestamp in fixes:
        _set_max_timestamp(buf, h, max_timestamp)


def _facts(section: bytes | memoryview, h: BatchHeader) -> list[tuple[int, bool]]:
    collected: list[tuple[int, bool]] = []
    walk_py(section, h.record_count, h.last_offset_delta, collected)
    return collected


def _describe(index: int, message: str) -> str:
    return f"record {index}: {message}" if index >= 0 else message


def _summary(batch: int, errors: list[tuple[int, str]]) -> str:
    shown = "; ".join(_describe(i, m) for i, m in errors[:_MAX_ERRORS_IN_MESSAGE])
    return f"batch {batch}: {len(errors)} record(s) rejected, first: {shown}"


def _set_max_timestamp(buf: bytearray | memoryview, h: BatchHeader, max_timestamp: int) -> None:
    pos = h.position
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + h.batch_length])
    _U32.pack_into(buf, pos + CRC_OFFSET, crc)
    h.max_timestamp = max_timestamp
    h.crc = crc
