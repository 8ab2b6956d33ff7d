"""One log segment: a .log file of whole batches plus its .index and .timeindex.

A segment object is cheap to create: nothing is opened, stat-ed or read until it is
used, so a broker with thousands of segments starts without touching them. Only
the active segment is written; older ones are read-only until deleted.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from crc32c import crc32c

from kbroker.protocol.batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MIN_BATCH_LENGTH,
    BatchHeader,
    read_header,
)
from kbroker.storage.blocks import keep_blocks
from kbroker.storage.file_slice import SegmentFile
from kbroker.storage.offset_index import IndexCorruptError, OffsetIndex
from kbroker.storage.time_index import TimeIndex
from kbroker.storage.writeback import start_writeback

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
MAX_RELATIVE_OFFSET = 2**31 - 1
SCAN_CHUNK = 16 * 1024
RECOVERY_CHUNK = 1 << 20
# An append of at least KEEP_MIN_APPEND bytes past the blocks kept ahead of the active
# segment's end keeps KEEP_AHEAD more (blocks.py); `trim` gives them back at roll/close.
# Small appends never pay the extra system call.
KEEP_MIN_APPEND = 64 * 1024
KEEP_AHEAD = 8 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def scan_batches(
    fd: int,
    start: int,
    end: int,
    *,
    verify_crc: bool = False,
    chunk_size: int = SCAN_CHUNK,
) -> Iterator[BatchHeader]:
    """Headers of the whole, well-formed batches in [start, end), positions absolute.

    Stops silently at the first partial or malformed batch (bad magic, short length,
    running past `end`, and with `verify_crc` a CRC mismatch); the caller learns
    where valid data ends from the last header it got.
    """
    buf = b""
    buf_start = start
    pos = start
    while pos + HEADER_SIZE <= end:
        off = pos - buf_start
        if off + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(chunk_size, end - pos), pos)
            buf_start, off = pos, 0
            if len(buf) < HEADER_SIZE:
                return
        h = read_header(buf, off)
        size = h.batch_length + LOG_OVERHEAD
        if h.magic != MAGIC or h.batch_length < MIN_BATCH_LENGTH or pos + size > end:
            return
        if verify_crc:
            if off + size > len(buf):
                if size > chunk_size:
                    data = os.pread(fd, size, pos)
                    if len(data) < size or crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != h.crc:
                        return
                    h.position = pos
                    yield h
                    pos += size
                    continue
                buf = os.pread(fd, min(chunk_size, end - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < size:
                    return
            if crc32c(memoryview(buf)[off + ATTRIBUTES_OFFSET : off + size]) != h.crc:
                return
        h.position = pos
        yield h
        pos += size


def _written_end(fd: int, start: int, end: int) -> int:
    """Where the bytes of [start, end) stop being all zeros: a preallocated file reads
    as zeros past what was written."""
    pos = end
    while pos > start:
        chunk_start = max(start, pos - SCAN_CHUNK)
        data = os.pread(fd, pos - chunk_start, chunk_start)
        stripped = len(data.rstrip(b"\0"))
        if stripped:
            return chunk_start + stripped
        pos = chunk_start
    return start


@dataclass(slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int  # torn or corrupt bytes cut off; zeros of unwritten space excluded
    next_offset: int | None  # offset after the last valid batch; None when empty


class Segment:
    """A segment of a partition log. All attributes after construction are lazy."""

    __slots__ = (
        "directory",
        "base_offset",
        "created_ms",
        "_file",
        "_size",
        "next_offset",
        "_index",
        "_time_index",
        "_max_timestamp",
        "_offset_of_max_timestamp",
        "_first_timestamp",
        "bytes_since_index_entry",
        "dirty",
        "deleted",
        "index_interval_bytes",
        "_reserved_end",
        "_kept_end",
    )

    def __init__(
        self,
        directory: str,
        base_offset: int,
        created_ms: int,
        index_interval_bytes: int = 4096,
    ) -> None:
        self.directory = directory
        self.index_interval_bytes = index_interval_bytes
        self.base_offset = base_offset
        self.created_ms = created_ms
        self._file: SegmentFile | None = None
        self._size: int | None = None
        self.next_offset: int | None = None  # known for the active segment
        self._index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._max_timestamp: int | None = None
        self._offset_of_max_timestamp = -1
        self._first_timestamp: int | None = None
        self.bytes_since_index_entry = 0
        self.dirty = False  # bytes written since the last fsync
        self.deleted = False
        self._reserved_end = 0  # file allocated up to here, past the data (preallocation)
        self._kept_end = 0  # blocks allocated up to here past the file's end (KEEP_AHEAD)

    @classmethod
    def create(
        cls, directory: str, base_offset: int, now_ms: int, index_interval_bytes: int = 4096
    ) -> Segment:
        seg = cls(directory, base_offset, now_ms, index_interval_bytes)
        seg._file = SegmentFile(seg.log_path, create=True)
        if os.fstat(seg._file.fd).st_size:
            os.ftruncate(seg._file.fd, 0)
        for path in (seg.index_path, seg.time_index_path):
            remove_file(path)
        seg._size = 0
        seg.next_offset = base_offset
        seg._index = OffsetIndex(seg.index_path, base_offset)
        seg._time_index = TimeIndex(seg.time_index_path, base_offset)
        seg._max_timestamp = -1
        seg._first_timestamp = -1
        seg.dirty = True
        return seg

    # -- paths and lazy state -------------------------------------------------------------

    @property
    def log_path(self) -> str:
        return f"{self.directory}/{self.base_offset:020d}{LOG_SUFFIX}"

    @property
    def index_path(self) -> str:
        return f"{self.directory}/{self.base_offset:020d}{INDEX_SUFFIX}"

    @property
    def time_index_path(self) -> str:
        return f"{self.directory}/{self.base_offset:020d}{TIME_INDEX_SUFFIX}"

    @property
    def file(self) -> SegmentFile:
        f = self._file
        if f is None or f.closed:
            f = self._file = SegmentFile(self.log_path)
        return f

    @property
    def is_open(self) -> bool:
        return self._file is not None and not self._file.closed

    @property
    def size(self) -> int:
        if self._size is None:
            if self._file is not None and not self._file.closed:
                self._size = os.fstat(self._file.fd).st_size
            else:
                self._size = os.stat(self.log_path).st_size
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        self._size = value

    @property
    def index(self) -> OffsetIndex:
        if self._index is None:
            self._load_indexes()
        assert self._index is not None
        return self._index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._load_indexes()
        assert self._time_index is not None
        return self._time_index

    def _load_indexes(self) -> None:
        try:
            if self._index is None:
                self._index = OffsetIndex.load(self.index_path, self.base_offset, self.size)
            if self._time_index is None:
                self._time_index = TimeIndex.load(self.time_index_path, self.base_offset)
        except IndexCorruptError:
            self.rebuild_indexes()

    @property
    def max_timestamp(self) -> int:
        """Largest batch max timestamp in the segment (-1 when none)."""
        if self._max_timestamp is None:
            self._load_max_timestamp()
        assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        if self._max_timestamp is None:
            self._load_max_timestamp()
        return self._offset_of_max_timestamp

    def _load_max_timestamp(self) -> None:
        if self._time_index is not None:
            ti = self._time_index
            if ti.timestamps:
                self._max_timestamp = ti.timestamps[-1]
                self._offset_of_max_timestamp = self.base_offset + ti.offsets[-1]
            else:
                self._max_timestamp, self._offset_of_max_timestamp = -1, -1
            if self.size and self._max_timestamp < 0:
                self._max_from_scan()
            return
        try:
            last = TimeIndex.read_last(self.time_index_path)
        except (FileNotFoundError, IndexCorruptError):
            last = None
        if last is None:
            if self.size:
                self._max_from_scan()
            else:
                self._max_timestamp, self._offset_of_max_timestamp = -1, -1
        else:
            self._max_timestamp = last[0]
            self._offset_of_max_timestamp = self.base_offset + last[1]

    def _max_from_scan(self) -> None:
        """Time index says nothing (never finalized, or no timestamps): read the headers."""
        best, best_off = -1, -1
        for h in scan_batches(self.file.fd, 0, self.size):
            if h.max_timestamp > best:
                best, best_off = h.max_timestamp, h.base_offset
        self._max_timestamp, self._offset_of_max_timestamp = best, best_off

    def largest_timestamp(self) -> int:
        """Kafka's retention clock: max timestamp, or the file's mtime if there is none."""
        ts = self.max_timestamp
        if ts >= 0:
            return ts
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except FileNotFoundError:
            return -1

    def first_timestamp(self) -> int:
        """Max timestamp of the first batch: the clock segment.ms rolls by."""
        if self._first_timestamp is None:
            if self.size >= HEADER_SIZE:
                self._first_timestamp = read_header(
                    os.pread(self.file.fd, HEADER_SIZE, 0)
                ).max_timestamp
            else:
                self._first_timestamp = -1
        return self._first_timestamp

    # -- writing --------------------------------------------------------------------------

    def append(
        self,
        buf: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        preallocate: int = 0,
        writeback: bool = False,
    ) -> None:
        """Write a validated, offset-assigned records blob at the end of the segment.

        With `preallocate`, the file is allocated that far ahead of the data first; with
        `writeback`, the disk write of the new bytes starts at once (an fsync follows).
        """
        fd = self.file.fd
        start = self.size
        view = memoryview(buf)
        written = 0
        total = len(buf)
        if preallocate:
            if start + total > self._reserved_end:
                self._reserve(fd, start, max(total, preallocate))
        elif total >= KEEP_MIN_APPEND and start + total > self._kept_end:
            # Large appends (batched produce, replication) go into blocks allocated ahead
            # of the file's end, which costs the kernel less than growing it (blocks.py).
            keep_blocks(fd, start, max(total, KEEP_AHEAD))
            self._kept_end = start + max(total, KEEP_AHEAD)  # after a failure too
        while written < total:
            written += os.pwrite(fd, view[written:], start + written)
        if writeback:
            start_writeback(fd, start, total)
        index = self.index
        time_index = self.time_index
        max_ts = self.max_timestamp
        max_off = self._offset_of_max_timestamp
        since = self.bytes_since_index_entry
        interval = self.index_interval_bytes
        if start == 0:
            self._first_timestamp = headers[0].max_timestamp
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, h.base_offset
            if since > interval:
                index.append(h.base_offset, start + h.position)
                time_index.maybe_append(max_ts, max_off)
                since = 0
            since += h.batch_length + LOG_OVERHEAD
        self.bytes_since_index_entry = since
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off
        self._size = start + total
        self.next_offset = headers[-1].base_offset + headers[-1].last_offset_delta + 1
        self.dirty = True

    def _reserve(self, fd: int, start: int, length: int) -> None:
        """Allocate [start, start + length) so that the coming appends neither allocate
        blocks nor grow the file. The file then reads as zeros past the data until
        `trim`; recovery takes such a zero tail for unwritten space, not for a torn
        write. A filesystem that cannot allocate (or a full disk) just goes without."""
        with contextlib.suppress(OSError, AttributeError):
            os.posix_fallocate(fd, start, length)
        self._reserved_end = start + length  # after a failure too: no retry every append

    def trim(self) -> None:
        """Give back the space reserved past the data, so the file ends where it does."""
        if self._reserved_end > self.size or self._kept_end > self.size:
            os.ftruncate(self.file.fd, self.size)  # frees blocks kept past the end too
        self._reserved_end = 0
        self._kept_end = 0

    def finalize(self) -> None:
        """The segment stops being active: give back reserved space, record its max
        timestamp and persist indexes (creating empty index files too, so that
        reopening finds them)."""
        self.trim()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
        if self.persist_indexes(create=True):
            self.dirty = True  # its index files changed: the next flush covers them

    def persist_indexes(self, create: bool = False) -> bool:
        wrote = False
        if self._index is not None:
            wrote = self._index.persist(create) or wrote
        if self._time_index is not None:
            wrote = self._time_index.persist(create) or wrote
        return wrote

    # -- reading --------------------------------------------------------------------------

    def find(self, offset: int, end: int | None = None, _retry: bool = True) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= `offset` and that starts
        before file position `end` (None if there is none)."""
        size = self.size
        limit = size if end is None else min(end, size)
        entry_offset, pos = self.index.lookup(offset)
        batches = scan_batches(self.file.fd, pos, size)
        if pos:
            first = next(batches, None)
            if first is None or first.base_offset != entry_offset:
                # The index names a batch that is not where it says: rebuild it.
                if not _retry:
                    return None
                self.rebuild_indexes()
                return self.find(offset, end, False)
            batches = itertools.chain((first,), batches)
        for h in batches:
            if h.position >= limit:
                return None
            if h.base_offset + h.last_offset_delta >= offset:
                return h
        return None

    def boundary_at_or_before(self, start: int, limit: int) -> int:
        """Largest batch boundary in [start, limit], walking from the nearest index entry."""
        entry_offset, pos = self.index.lookup_position(limit)
        if pos > start:
            head = os.pread(self.file.fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE or read_header(head).base_offset != entry_offset:
                self.rebuild_indexes()  # the entry does not name the batch it points at
                entry_offset, pos = self.index.lookup_position(limit)
        pos = max(pos, start)
        boundary = pos
        for h in scan_batches(self.file.fd, pos, limit):
            boundary = h.position + h.batch_length + LOG_OVERHEAD
        return boundary

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        return scan_batches(self.file.fd, start, self.size if end is None else end)

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.file.fd, length, position)

    # -- recovery ---------------------------------------------------------------------------

    def recover(
        self,
        expected_start: int | None = None,
        on_batch: Callable[[BatchHeader], None] | None = None,
    ) -> RecoveryResult:
        """Validate every batch (length, magic, CRC, offsets), truncate at the first bad one
        and rebuild both indexes from what remains; `on_batch` sees every valid header."""
        index_interval_bytes = self.index_interval_bytes
        fd = self.file.fd
        size = os.fstat(fd).st_size
        index = OffsetIndex(self.index_path, self.base_offset)
        time_index = TimeIndex(self.time_index_path, self.base_offset)
        valid = 0
        next_offset = self.base_offset if expected_start is None else expected_start
        next_offset = max(next_offset, self.base_offset)
        max_ts, max_off, since = -1, -1, 0
        first_ts = -1
        found = False
        for h in scan_batches(fd, 0, size, verify_crc=True, chunk_size=RECOVERY_CHUNK):
            if (
                h.base_offset < next_offset
                or h.last_offset_delta < 0
                or h.base_offset + h.last_offset_delta - self.base_offset > MAX_RELATIVE_OFFSET
            ):
                break
            if not found:
                first_ts = h.max_timestamp
                found = True
            if on_batch is not None:
                on_batch(h)
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, h.base_offset
            if since > index_interval_bytes:
                index.append(h.base_offset, h.position)
                time_index.maybe_append(max_ts, max_off)
                since = 0
            since += h.batch_length + LOG_OVERHEAD
            valid = h.position + h.batch_length + LOG_OVERHEAD
            next_offset = h.base_offset + h.last_offset_delta + 1
        torn = _written_end(fd, valid, size) - valid
        if valid < size:
            os.ftruncate(fd, valid)
        self._reserved_end = 0
        self._kept_end = 0
        if max_ts >= 0:
            time_index.maybe_append(max_ts, max_off)
        index.rewrite()
        time_index.rewrite()
        self._index, self._time_index = index, time_index
        self._size = valid
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off
        self._first_timestamp = first_ts
        self.bytes_since_index_entry = since
        self.next_offset = next_offset if found else None
        self.dirty = True
        return RecoveryResult(valid, torn, next_offset if found else None)

    def rebuild_indexes(self) -> None:
        """Index files missing or damaged: rebuild them from the batch headers."""
        index_interval_bytes = self.index_interval_bytes
        index = OffsetIndex(self.index_path, self.base_offset)
        time_index = TimeIndex(self.time_index_path, self.base_offset)
        max_ts, max_off, since = -1, -1, 0
        for h in scan_batches(self.file.fd, 0, self.size):
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, h.base_offset
            if since > index_interval_bytes:
                index.append(h.base_offset, h.position)
                time_index.maybe_append(max_ts, max_off)
                since = 0
            since += h.batch_length + LOG_OVERHEAD
        if max_ts >= 0:
            time_index.maybe_append(max_ts, max_off)
        index.rewrite()
        time_index.rewrite()
        self._index, self._time_index = index, time_index
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, max_off
        self.bytes_since_index_entry = since

    def read_next_offset(self) -> int | None:
        """Offset after the last batch, from the last index entry and a short scan."""
        size = self.size
        _, pos = self.index.lookup_position(size)
        last = None
        for h in scan_batches(self.file.fd, pos, size):
            last = h
        if last is None:
            return None if size == 0 else self.base_offset
        return last.base_offset + last.last_offset_delta + 1

    # -- truncation and deletion -----------------------------------------------------------

    def truncate_to_offset(self, offset: int) -> int:
        """Drop the batch holding `offset` and all after it (Kafka's truncateTo); returns
        the bytes removed."""
        h = self.find(offset)
        if h is None:
            return 0
        old = self.size
        os.ftruncate(self.file.fd, h.position)
        self._size = h.position
        self._reserved_end = 0
        self._kept_end = 0
        self.rebuild_indexes()
        self._first_timestamp = None
        self.next_offset = h.base_offset
        self.dirty = True
        return old - h.position

    def close(self) -> None:
        if self._file is not None:
            self._file.force_close()
            self._file = None

    def release(self) -> None:
        """Give up the fd but keep it open for any slice still reading from it."""
        if self._file is not None:
            self._file.retire()
            self._file = None

    def delete(self) -> None:
        """Unlink the files; an open fd lives on until its last slice is released."""
        self.deleted = True
        for path in (self.log_path, self.index_path, self.time_index_path):
            remove_file(path)
        self.release()
        self._index = None
        self._time_index = None


def remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
