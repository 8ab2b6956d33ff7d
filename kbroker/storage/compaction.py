"""The heavy half of log compaction: key maps and rewritten segments, in a worker thread.

Kafka's LogCleaner semantics, for the sealed segments of one partition:

- an offset map (key -> latest offset) is built over the dirty section, the offsets
  from the cleaner checkpoint up to the first uncleanable offset;
- every sealed segment up to the map's end is rewritten in size-bounded groups, keeping
  a record when no later record of its key exists in the map, dropping records without
  key (a compacted topic cannot hold them), and dropping tombstones (null value) once
  the delete horizon stamped in their batch has passed;
- offsets never change: a rewritten batch keeps its base offset and last offset delta
  (so producer sequence numbers stay right), gets a fresh CRC and, when it was
  compressed, is recompressed with its codec; batches left with no record vanish,
  except the last batch of each producer, which stays as an empty header so that its
  sequence survives (as in Kafka);
- transactional and control batches are copied unchanged and never supersede other
  records: what an aborted transaction wrote must not erase a committed value, and
  markers must outlive their data. Compacting them is a later refinement.

Nothing here touches the live log: the plan holds a snapshot of what to read, and the
output is `.cleaned` files that `segment_swap` commits on the event loop.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c

from kbroker.protocol.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CorruptBatchError,
    read_header,
    read_varint,
    write_varint,
)
from kbroker.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionError,
    compress,
    decompress,
)
from kbroker.storage.offset_index import OffsetIndex
from kbroker.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, scan_batches
from kbroker.storage.segment_swap import CLEANED, discard_cleaned, segment_path
from kbroker.storage.time_index import TimeIndex

__all__ = [
    "CleanPlan",
    "CleanResult",
    "CleanedGroup",
    "CleanerAbortedError",
    "CompactionSettings",
    "SourceSegment",
    "run_plan",
]

_NEVER = 2**63 - 1
_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")
_MAX_RELATIVE_OFFSET = 2**31 - 1
_WRITE_CHUNK = 1 << 20
_KEY_DIGEST = 16


class CleanerAbortedError(Exception):
    """The cleaner is stopping: the pass was abandoned, its output removed."""


@dataclass(slots=True)
class CompactionSettings:
    """The topic configs that steer compaction (Kafka's names and defaults)."""

    delete_retention_ms: int = 86_400_000
    min_cleanable_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _NEVER

    @classmethod
    def from_topic_values(cls, values: Any) -> CompactionSettings:
        """From effective topic config values keyed by Kafka name."""
        return cls(
            int(values["delete.retention.ms"]),
            float(values["min.cleanable.dirty.ratio"]),
            int(values["min.compaction.lag.ms"]),
            int(values["max.compaction.lag.ms"]),
        )


@dataclass(slots=True)
class SourceSegment:
    """A sealed segment as it was when the pass was planned."""

    base_offset: int
    size: int
    segment: Any = None  # the live Segment, compared by identity at commit; never read here


@dataclass(slots=True)
class CleanPlan:
    directory: str
    segments: list[SourceSegment]  # consecutive sealed segments, oldest first
    first_dirty: int
    dirty_end: int  # first offset the map must not cover (first uncleanable)
    now_ms: int
    settings: CompactionSettings
    segment_bytes: int
    index_interval_bytes: int
    max_map_entries: int
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES


@dataclass(slots=True)
class CleanedGroup:
    """One `.cleaned` copy replacing `sources`, not yet committed."""

    base_offset: int
    sources: list[SourceSegment]
    size: int


@dataclass(slots=True)
class CleanResult:
    groups: list[CleanedGroup] = field(default_factory=list)
    map_end: int = 0  # the next pass's first dirty offset
    earliest_horizon: int = -1  # earliest delete horizon of a retained tombstone, -1 if none
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    unreadable_batches: int = 0


Throttle = Callable[[int], None]


# -- records --------------------------------------------------------------------------------


@dataclass(slots=True)
class RawRecord:
    """One record's place in a batch's (decompressed) records section."""

    start: int  # its length varint
    end: int
    body: int  # its attributes byte, the first byte the length counts
    after_timestamp: int  # first byte after the timestamp delta (the offset delta)
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    tombstone: bool


def iter_records(data: bytes | memoryview, count: int) -> Iterator[RawRecord]:
    """The records of a records section, reading only what compaction needs."""
    p = 0
    size = len(data)
    for _ in range(count):
        start = p
        length, p = read_varint(data, p)
        end = p + length
        if length < 6 or end > size:
            raise CorruptBatchError("record length runs past its batch")
        body = p
        p += 1  # attributes
        ts_delta, p = read_varint(data, p)
        after_ts = p
        off_delta, p = read_varint(data, p)
        key_len, p = read_varint(data, p)
        key = None
        if key_len >= 0:
            key = bytes(data[p : p + key_len])
            p += key_len
        value_len, p = read_varint(data, p)
        if p > end:
            raise CorruptBatchError("record fields run past its length")
        yield RawRecord(start, end, body, after_ts, ts_delta, off_delta, key, value_len < 0)
        p = end
    if p != size:
        raise CorruptBatchError("records section length does not match its record count")


def key_digest(key: bytes) -> bytes:
    """What the offset map stores for a key: short keys as they are, long ones as a
    128-bit digest (never the same length, so the two kinds cannot collide)."""
    if len(key) < _KEY_DIGEST:
        return key
    return hashlib.blake2b(key, digest_size=_KEY_DIGEST).digest()


def _records_section(buf: bytes, h: BatchHeader, max_size: int) -> bytes | memoryview:
    section = memoryview(buf)[HEADER_SIZE : h.total_size]
    if h.attributes & COMPRESSION_MASK:
        return decompress(h.attributes & COMPRESSION_MASK, section, max_size)
    return section


# -- batches ----------------------------------------------------------------------------


def _pack_batch(
    h: BatchHeader,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    record_count: int,
    body: bytes | bytearray,
) -> bytes:
    out = bytearray(HEADER_SIZE + len(body))
    _HEADER.pack_into(
        out,
        0,
        h.base_offset,
        HEADER_SIZE + len(body) - LOG_OVERHEAD,
        h.partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        h.last_offset_delta,
        base_timestamp,
        max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        record_count,
    )
    out[HEADER_SIZE:] = body
    _U32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def empty_batch(h: BatchHeader) -> bytes:
    """A batch with no records that keeps the producer's sequence range and offsets."""
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return _pack_batch(h, attributes, h.max_timestamp, h.max_timestamp, 0, b"")


def rebuild_batch(
    h: BatchHeader,
    section: bytes | memoryview,
    kept: list[RawRecord],
    horizon: int | None,
) -> bytes:
    """The batch with only `kept` records; with `horizon`, stamped with that delete
    horizon (Kafka's KIP-534: it takes the base timestamp's place and the records'
    timestamp deltas are rewritten relative to it)."""
    log_append = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    attributes = h.attributes
    base_ts = h.base_timestamp
    out = bytearray()
    if horizon is None:
        for rec in kept:
            out += section[rec.start : rec.end]
    else:
        attributes |= DELETE_HORIZON_MASK
        for rec in kept:
            absolute = h.base_timestamp + rec.timestamp_delta
            body = bytearray(section[rec.body : rec.body + 1])  # record attributes
            write_varint(body, absolute - horizon)
            body += section[rec.after_timestamp : rec.end]
            write_varint(out, len(body))
            out += body
        base_ts = horizon
    if log_append:
        max_ts = h.max_timestamp
    else:
        max_ts = max(h.base_timestamp + rec.timestamp_delta for rec in kept)
    codec = attributes & COMPRESSION_MASK
    body_bytes: bytes | bytearray = compress(codec, out) if codec else out
    return _pack_batch(h, attributes, base_ts, max_ts, len(kept), body_bytes)


# -- the pass -----------------------------------------------------------------------------


class _SegmentReader:
    """Positional reads of one source segment through our own descriptor."""

    def __init__(self, directory: str, source: SourceSegment) -> None:
        self.source = source
        self.fd = os.open(segment_path(directory, source.base_offset, LOG_SUFFIX), os.O_RDONLY)

    def headers(self) -> Iterator[BatchHeader]:
        return scan_batches(self.fd, 0, self.source.size, chunk_size=256 * 1024)

    def read(self, h: BatchHeader) -> bytes:
        return os.pread(self.fd, h.total_size, h.position)

    def close(self) -> None:
        os.close(self.fd)


class _Pass:
    def __init__(self, plan: CleanPlan, abort: threading.Event | None, throttle: Throttle | None):
        self.plan = plan
        self.abort = abort
        self.throttle = throttle
        self.result = CleanResult()
        self.offset_map: dict[bytes, int] = {}
        self.last_batch_of: dict[int, int] = {}  # producer id -> base offset of its last batch

    def check_abort(self) -> None:
        if self.abort is not None and self.abort.is_set():
            raise CleanerAbortedError("cleaner stopping")

    def section(self, buf: bytes, h: BatchHeader) -> bytes | memoryview | None:
        try:
            return _records_section(buf, h, self.plan.max_decompressed_bytes)
        except CompressionError:
            self.result.unreadable_batches += 1
            return None

    def account(self, size: int) -> None:
        self.result.bytes_read += size
        if self.throttle is not None:
            self.throttle(size)

    # -- phase 1: the offset map of the dirty section --------------------------------------

    def build_map(self, readers: list[_SegmentReader]) -> int:
        plan = self.plan
        offsets = self.offset_map
        for reader in readers:
            for h in reader.headers():
                if h.producer_id >= 0:
                    self.last_batch_of[h.producer_id] = h.base_offset
        end = plan.dirty_end
        for reader in readers:
            src = reader.source
            if src.base_offset >= end:
                break
            for h in reader.headers():
                if h.base_offset >= end:
                    break
                if h.base_offset + h.last_offset_delta < plan.first_dirty:
                    continue
                if h.attributes & (TRANSACTIONAL_MASK | CONTROL_MASK):
                    continue
                self.check_abort()
                buf = reader.read(h)
                self.account(len(buf))
                section = self.section(buf, h)
                if section is None:
                    continue
                try:
                    records = list(iter_records(section, h.record_count))
                except (CorruptBatchError, IndexError):
                    self.result.unreadable_batches += 1
                    continue
                base = h.base_offset
                for rec in records:
                    offset = base + rec.offset_delta
                    if rec.key is not None and offset >= plan.first_dirty:
                        offsets[key_digest(rec.key)] = offset
                if len(offsets) >= plan.max_map_entries:
                    # Full: this pass covers the dirty section up to here only.
                    return min(h.base_offset + h.last_offset_delta + 1, end)
        return end

    # -- phase 2: rewrite ------------------------------------------------------------------

    def clean(self, map_end: int) -> list[CleanedGroup]:
        """Rewrite the segments below the map's end. Consecutive segments are merged
        while the cleaned output plus the next source still fits segment.bytes (and the
        indexes' 32-bit relative offsets), so a log whose keys compact well ends up in few
        segments, as Kafka's cleaner leaves it."""
        plan = self.plan
        readers = [r for r in self.readers if r.source.base_offset < map_end]
        groups: list[CleanedGroup] = []
        writer: _CleanedWriter | None = None
        sources: list[SourceSegment] = []
        try:
            for i, reader in enumerate(readers):
                src = reader.source
                end = readers[i + 1].source.base_offset if i + 1 < len(readers) else map_end
                if writer is not None and (
                    writer.output_size + src.size > plan.segment_bytes
                    or end - 1 - writer.base > _MAX_RELATIVE_OFFSET
                ):
                    self.close_group(writer, sources, groups)
                    writer = None
                if writer is None:
                    writer = _CleanedWriter(plan, src.base_offset)
                    sources = []
                elif not writer.changed:
                    writer.drop()  # merging segments is a change in itself
                sources.append(src)
                self.clean_segment(reader, writer, map_end)
            if writer is not None:
                self.close_group(writer, sources, groups)
                writer = None
        except BaseException:
            if writer is not None:
                writer.discard()
            for g in groups:
                discard_cleaned(plan.directory, g.base_offset)
            raise
        return groups

    def close_group(
        self, writer: _CleanedWriter, sources: list[SourceSegment], groups: list[CleanedGroup]
    ) -> None:
        if not writer.changed:
            writer.discard()
            return
        size = writer.finish()
        self.result.bytes_written += size
        groups.append(CleanedGroup(writer.base, list(sources), size))

    def clean_segment(self, reader: _SegmentReader, writer: _CleanedWriter, map_end: int) -> None:
        plan = self.plan
        now = plan.now_ms
        offsets = self.offset_map
        result = self.result
        for h in reader.headers():
            self.check_abort()
            if h.base_offset >= map_end or h.attributes & (TRANSACTIONAL_MASK | CONTROL_MASK):
                writer.copy(reader, h)
                continue
            buf = reader.read(h)
            self.account(len(buf))
            section = self.section(buf, h)
            records: list[RawRecord] | None = None
            if section is not None:
                try:
                    records = list(iter_records(section, h.record_count))
                except (CorruptBatchError, IndexError):
                    result.unreadable_batches += 1
            if records is None or section is None:
                writer.copy(reader, h)  # cannot be read, so it cannot be cleaned
                continue
            has_horizon = bool(h.attributes & DELETE_HORIZON_MASK)
            expired = has_horizon and now >= h.base_timestamp
            kept: list[RawRecord] = []
            tombstones = False
            for rec in records:
                offset = h.base_offset + rec.offset_delta
                if offset >= map_end:
                    keep = True
                elif rec.key is None:
                    keep = False
                else:
                    keep = offsets.get(key_digest(rec.key), -1) <= offset and not (
                        rec.tombstone and expired
                    )
                if keep:
                    kept.append(rec)
                    tombstones = tombstones or rec.tombstone
            result.records_read += len(records)
            result.records_kept += len(kept)
            horizon = None
            if tombstones:
                if has_horizon:
                    self.note_horizon(h.base_timestamp)
                else:
                    horizon = now + plan.settings.delete_retention_ms
                    self.note_horizon(horizon)
            if len(kept) == len(records) and horizon is None:
                writer.copy(reader, h)
            elif kept:
                writer.write(rebuild_batch(h, section, kept, horizon))
            elif h.producer_id >= 0 and self.last_batch_of.get(h.producer_id) == h.base_offset:
                writer.write(empty_batch(h))
            else:
                writer.drop()

    def note_horizon(self, horizon: int) -> None:
        current = self.result.earliest_horizon
        if current < 0 or horizon < current:
            self.result.earliest_horizon = horizon

    def run(self) -> CleanResult:
        plan = self.plan
        self.readers = [_SegmentReader(plan.directory, s) for s in plan.segments]
        try:
            map_end = self.build_map(self.readers)
            self.result.map_end = map_end
            self.result.groups = self.clean(map_end)
        finally:
            for reader in self.readers:
                reader.close()
        return self.result


class _CleanedWriter:
    """Writes one group's `.cleaned` log and indexes, lazily: batches copied unchanged
    are remembered as file ranges and only written once something actually changed."""

    def __init__(self, plan: CleanPlan, base: int) -> None:
        self.plan = plan
        self.base = base
        self.path = segment_path(plan.directory, base, LOG_SUFFIX, CLEANED)
        self.fd: int | None = None
        self.changed = False
        self.pending: list[tuple[_SegmentReader, BatchHeader]] = []  # before the first change
        self.buffer = bytearray()
        self.size = 0
        self.index = OffsetIndex(segment_path(plan.directory, base, INDEX_SUFFIX, CLEANED), base)
        self.time_index = TimeIndex(
            segment_path(plan.directory, base, TIME_INDEX_SUFFIX, CLEANED), base
        )
        self.max_ts = -1
        self.max_ts_offset = -1
        self.since_entry = 0

    def _open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pending, self.pending = self.pending, []
        for reader, h in pending:
            self._append(h, reader.read(h))

    def copy(self, reader: _SegmentReader, h: BatchHeader) -> None:
        if not self.changed:
            self.pending.append((reader, h))
            return
        self._append(h, reader.read(h))

    @property
    def output_size(self) -> int:
        """Bytes the cleaned segment holds so far, counting copies not yet written."""
        return self.size + sum(h.total_size for _, h in self.pending)

    def write(self, batch: bytes) -> None:
        self.drop()
        self._append(read_header(batch), batch)

    def drop(self) -> None:
        if not self.changed:
            self.changed = True
            self._open()

    def _append(self, h: BatchHeader, batch: bytes) -> None:
        position = self.size
        if h.max_timestamp > self.max_ts:
            self.max_ts, self.max_ts_offset = h.max_timestamp, h.base_offset
        if self.since_entry > self.plan.index_interval_bytes:
            self.index.append(h.base_offset, position)
            self.time_index.maybe_append(self.max_ts, self.max_ts_offset)
            self.since_entry = 0
        self.since_entry += len(batch)
        self.buffer += batch
        self.size += len(batch)
        if len(self.buffer) >= _WRITE_CHUNK:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        assert self.fd is not None
        view = memoryview(self.buffer)
        while view:
            view = view[os.write(self.fd, view) :]
        self.buffer = bytearray()

    def finish(self) -> int:
        """Write out and fsync the log and both indexes; returns the log's size."""
        assert self.fd is not None
        self._flush_buffer()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        if self.max_ts >= 0:
            self.time_index.maybe_append(self.max_ts, self.max_ts_offset)
        for idx in (self.index, self.time_index):
            idx.rewrite()
            fd = os.open(idx.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return self.size

    def discard(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        discard_cleaned(self.plan.directory, self.base)


def run_plan(
    plan: CleanPlan,
    abort: threading.Event | None = None,
    throttle: Throttle | None = None,
) -> CleanResult:
    """Build the offset map and write the cleaned copies (blocking: a worker thread's
    job). Raises CleanerAbortedError when `abort` is set meanwhile."""
    return _Pass(plan, abort, throttle).run()


class IoThrottle:
    """log.cleaner.io.max.bytes.per.second: sleep the worker when it reads too fast."""

    def __init__(self, bytes_per_second: float) -> None:
        self.rate = bytes_per_second
        self.start = time.monotonic()
        self.done = 0

    def __call__(self, size: int) -> None:
        self.done += size
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0.01:
            time.sleep(ahead)
