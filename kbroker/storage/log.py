"""PartitionLog: the durable, segmented log of one partition.

Appends and reads cost constant Python work per batch (header checks, one write, a
few index comparisons); the linear work (CRC, copy into the page cache, sendfile)
runs in C or the kernel. A clean close leaves a checkpoint that lets the next open
skip every scan; an unclean one recovers the segments after the last fsync (both in
kbroker.storage.log_loader).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kbroker.protocol.batch import (
    TRANSACTIONAL_OR_CONTROL,
    BatchHeader,
    RecordListTooLargeError,
    assign_offsets,
    decode_records,
    set_log_append_time,
    validate_batches,
)
from kbroker.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, decompress
from kbroker.protocol.recompression import needs_recompression, recompress
from kbroker.protocol.record_validation import validate_records
from kbroker.storage.checkpoint import (
    CleanState,
    PartitionCheckpoint,
    write_checkpoint,
)
from kbroker.storage.config import LogConfig
from kbroker.storage.errors import LogClosedError, LogError, OffsetOutOfRangeError
from kbroker.storage.file_slice import FileSlice
from kbroker.storage.leader_epoch import LeaderEpochCache
from kbroker.storage.log_loader import load_log
from kbroker.storage.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from kbroker.storage.producer_state import (
    CLIENT,
    AbortedTxn,
    ProducerStateManager,
)
from kbroker.storage.segment import MAX_RELATIVE_OFFSET, Segment
from kbroker.storage.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE

__all__ = [
    "AppendResult",
    "FileSlice",
    "FlushJob",
    "LogConfig",
    "LogError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "parse_partition_dir",
]

_DIR_RE = re.compile(r"^(.+)-(\d+)$")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """`<topic>-<partition>` -> (topic, partition); None for anything else."""
    m = _DIR_RE.match(name)
    if m is None:
        return None
    return m.group(1), int(m.group(2))


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime topics
    log_start_offset: int
    record_count: int
    max_timestamp: int
    offset_of_max_timestamp: int = -1
    batches: list[BatchHeader] = field(default_factory=list)


# Indirections so that tests of scale, not durability, can skip the disk's fsync cost.
_fdatasync = getattr(os, "fdatasync", os.fsync)
_NEVER_MS = 2**63 - 1  # a flush.ms deadline past Long.MAX_VALUE never comes
_fsync = os.fsync


@dataclass(slots=True)
class FlushJob:
    """The fsync part of a flush, safe to run in a worker thread: it opens by path, so a
    segment deleted meanwhile is simply skipped."""

    paths: list[str]
    directory: str | None
    upto_offset: int
    messages: int
    segments: list[Segment]
    seconds: float = 0.0  # how long the fsyncs took, once run

    def run(self) -> None:
        started = time.perf_counter()
        try:
            self._sync()
        finally:
            self.seconds = time.perf_counter() - started

    def run_on_owner_thread(self) -> None:
        """Run on the thread that owns the log, where no segment can be deleted under
        the job: the data files are synced through the segments' open descriptors."""
        started = time.perf_counter()
        try:
            if len(self.paths) == len(self.segments):  # data only: one log file a segment
                for seg in self.segments:
                    if not seg.deleted:
                        _fdatasync(seg.file.fd)
                self.paths = []
            self._sync()
        finally:
            self.seconds = time.perf_counter() - started

    def _sync(self) -> None:
        for path in self.paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                _fdatasync(fd)
            finally:
                os.close(fd)
        if self.directory is not None:
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                _fsync(fd)
            finally:
                os.close(fd)


class LogStartMoves:
    """How many times a log's start offset has moved in this process (DeleteRecords,
    retention, a truncation below it, a log emptied and started elsewhere), any log's.
    A reader holding offsets it read earlier (a parked Fetch) learns from an unchanged
    count that no log start moved since, without looking at each of its logs."""

    count = 0


class PartitionLog:
    """One partition's log. Use `PartitionLog.open`; all methods run on one thread
    (the event loop) except `flush` and `FlushJob.run`, which may run in a worker."""

    # Lets offset_for_timestamp look inside compressed batches: decompressor(codec, data)
    # -> bytes, bounded against decompression bombs; None reads at batch level only.
    decompressor: Callable[[int, bytes], bytes] | None = staticmethod(decompress)
    # Draws the active segment's roll jitter in [0, bound) (Kafka's randomSegmentJitter).
    draw_jitter: Callable[[int], int] = staticmethod(random.randrange)
    # Told (with the log) when the log may come to need a background fsync: its first
    # unflushed append, flush.messages reached, a roll, a truncation, a config change
    # (the log manager's flusher looks at such logs only; see `flush_pending`).
    flush_watch: Callable[[PartitionLog], None] | None = None

    def __init__(self, directory: Path, config: LogConfig, topic: str, partition: int) -> None:
        self.directory = Path(directory)
        self._dir = str(directory)
        self.config = config
        self.topic = topic
        self.partition = partition
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self._high_watermark = 0
        self._checkpointed_hw = -1
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = 0
        self._new_files = False  # directory entries not yet fsynced
        self._checkpoint_clean = False  # the checkpoint on disk still says "clean"
        self._lock = threading.Lock()
        # The checkpoint file is written under its own lock, so that the periodic high
        # watermark checkpoint can write it off the event loop without holding `_lock`
        # (a roll or a flush takes it) across a rename that may wait for the disk; each
        # checkpoint taken is numbered, and an older one never replaces a newer one.
        self._checkpoint_file_lock = threading.Lock()
        self._checkpoints_taken = 0
        self._checkpoint_stored = 0
        self.closed = False
        self.recovered_bytes = 0  # bytes truncated by the last open's recovery (for logs)
        self.opened_cleanly = True  # False when the last open had to scan for torn data
        # Follower truncations so far: a copy of the log (a move to another log directory)
        # made before one no longer matches the bytes at the same places.
        self.truncations = 0
        self._epochs: LeaderEpochCache | None = None
        self.producer_state = ProducerStateManager(self._dir)
        self._roll_jitter_ms = self._new_roll_jitter()

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int) -> PartitionLog:
        """Open (creating if new) the log in `directory`, named `<topic>-<partition>`.

        After a clean close this reads one small checkpoint and stats one file; after
        a crash it recovers every segment from the one holding the recovery point.
        """
        directory = Path(directory)
        parsed = parse_partition_dir(directory.name)
        if parsed is None:
            raise LogError(f"{directory} is not named <topic>-<partition>")
        log = cls(directory, config, *parsed)
        directory.mkdir(parents=True, exist_ok=True)
        loaded = load_log(log._dir, config.index_interval_bytes, lambda: log.epoch_cache, now_ms)
        log.segments, log._bases = loaded.segments, loaded.bases
        log.log_start_offset, log.log_end_offset = loaded.log_start_offset, loaded.log_end_offset
        log._high_watermark, log.recovery_point = loaded.high_watermark, loaded.recovery_point
        log._new_files, log._checkpoint_clean = loaded.new_files, loaded.checkpoint_clean
        log.opened_cleanly, log.recovered_bytes = loaded.opened_cleanly, loaded.recovered_bytes
        log._last_flush_ms = now_ms
        if loaded.stale_checkpoint:
            # A clean claim that no longer matches the files must not survive this open.
            log._write_checkpoint()
        log.producer_state.load(log.segments, log.log_start_offset, log.log_end_offset)
        return log

    # -- offsets -------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int) -> None:
        """Only ever moves forward, and never past the log end offset."""
        value = min(value, self.log_end_offset)
        if value > self._high_watermark:
            self._high_watermark = value

    @property
    def epoch_cache(self) -> LeaderEpochCache:
        if self._epochs is None:
            self._epochs = LeaderEpochCache.load(self._dir)
        return self._epochs

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch that wrote to this log (-1 if none)."""
        return self.epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= `epoch`, the offset where it ended);
        (-1, -1) when unknown."""
        return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def begin_epoch(self, epoch: int) -> None:
        """A leader starts `epoch` at the log end (Kafka assigns it when leadership
        begins, so OffsetForLeaderEpoch answers for it before its first append)."""
        epochs = self.epoch_cache
        if epoch > epochs.latest_epoch and epochs.assign(epoch, self.log_end_offset):
            epochs.persist()

    def epoch_start(self, epoch: int) -> int:
        """The first offset written in `epoch`; the log end offset if it wrote none."""
        for e, start in reversed(self.epoch_cache.entries()):
            if e == epoch:
                return start
            if e < epoch:
                break
        return self.log_end_offset

    def leader_epoch_entries(self) -> list[tuple[int, int]]:
        """(epoch, start offset) pairs, oldest first."""
        return self.epoch_cache.entries()

    @property
    def last_stable_offset(self) -> int:
        """Below the first offset of any open transaction and the high watermark: how far
        a read_committed consumer may read."""
        state = self.producer_state
        if not state.ongoing:  # no open transaction: every fetch of every partition asks
            return self._high_watermark
        return state.last_stable_offset(self._high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [fetch_offset, upper_offset)."""
        return self.producer_state.aborted_between(fetch_offset, upper_offset)

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def flushed_offset(self) -> int:
        """Every offset below this has been fsynced."""
        return self.recovery_point

    # -- append --------------------------------------------------------------------------------

    def append(
        self,
        records: bytearray | bytes | memoryview,
        leader_epoch: int,
        now_ms: int,
        origin: int = CLIENT,
    ) -> AppendResult:
        """Validate, assign offsets from the log end offset and write a records blob.

        Raises CorruptBatchError / BatchTooLargeError / RecordListTooLargeError (the
        blob larger than a segment; all protocol.batch), InvalidRecordsError
        (protocol.record_validation: every record is walked, as Kafka's leader does) or a
        ProducerStateError without writing anything when any batch of the blob is bad. A
        duplicate of a recent idempotent batch is answered with its original offsets and
        not written again. `origin` (producer_state.CLIENT / COORDINATOR) says how much
        of the producer state is checked. Where a producer id came from is not: a
        leader may not have applied the block of ids another node's coordinator handed
        out yet, and Kafka takes a new id at sequence 0 as it comes.
        """
        self._check_open()
        if isinstance(records, bytes) or (isinstance(records, memoryview) and records.readonly):
            records = bytearray(records)  # offsets are patched in place
        config = self.config
        headers = validate_batches(records, config.max_message_bytes)
        if origin == CLIENT:
            validate_records(records, headers, now_ms, config.record_policy)
            if config.compression_type != "producer":  # the default costs one compare
                codec = config.stored_codec
                if codec is not None and needs_recompression(headers, codec):
                    # Kafka checks the batch as it will be stored: max.message.bytes again.
                    records = recompress(
                        records,
                        headers,
                        codec,
                        config.compression_level,
                        DEFAULT_MAX_DECOMPRESSED_BYTES,
                    )
                    headers = validate_batches(records, config.max_message_bytes)
        if len(records) > config.segment_bytes:  # as stored, after any recompression
            raise RecordListTooLargeError(
                f"an append of {len(records)} bytes exceeds the segment size of "
                f"{config.segment_bytes} bytes"
            )
        producers = any(
            h.producer_id >= 0 or h.attributes & TRANSACTIONAL_OR_CONTROL for h in headers
        )
        if producers:
            duplicate = self.producer_state.check(records, headers, origin)
            if duplicate is not None:
                return AppendResult(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp if config.log_append_time else -1,
                    self.log_start_offset,
                    0,
                    duplicate.timestamp,
                )
        base = self.log_end_offset
        next_offset = assign_offsets(records, headers, base, leader_epoch)
        epochs = self.epoch_cache
        if leader_epoch > epochs.latest_epoch:
            epochs.assign(leader_epoch, base)
            epochs.persist()
        append_time = -1
        if config.log_append_time:
            append_time = now_ms
            for h in headers:
                set_log_append_time(records, h, h.position, now_ms)
        result = self._write(records, headers, base, next_offset, append_time, now_ms)
        if producers:
            self.producer_state.apply(records, headers)
        return result

    def append_as_follower(
        self, records: bytearray | bytes | memoryview, now_ms: int
    ) -> AppendResult:
        """Append batches that already carry offsets (replication): no offset assignment,
        no timestamp rewrite, so nothing in `records` changes and it is written as it
        came; offsets must start at or after the log end offset."""
        self._check_open()
        headers = validate_batches(records, 2**31 - 1, check_record_count=False)
        first = headers[0]
        last_of_first = first.base_offset + first.last_offset_delta
        if self.log_end_offset == self.log_start_offset and (
            first.base_offset < self.log_end_offset <= last_of_first
        ):
            # An empty log started at the leader's log start, which lies inside this batch
            # (DeleteRecords moved it there): Kafka starts the log at the batch's base.
            self.truncate_fully_and_start_at(first.base_offset)
        expected = self.log_end_offset
        for h in headers:
            if h.base_offset < expected:
                raise LogError(
                    f"follower append of offset {h.base_offset} below log end offset {expected}"
                )
            expected = h.base_offset + h.last_offset_delta + 1
        epochs = self.epoch_cache
        changed = False
        for h in headers:
            if h.partition_leader_epoch > epochs.latest_epoch:
                changed = epochs.assign(h.partition_leader_epoch, h.base_offset) or changed
        if changed:
            epochs.persist()
        result = self._write(records, headers, headers[0].base_offset, expected, -1, now_ms)
        self.producer_state.apply(records, headers)
        return result

    def _write(
        self,
        records: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        base: int,
        next_offset: int,
        append_time: int,
        now_ms: int,
    ) -> AppendResult:
        max_ts, max_off, count = -1, -1, 0
        for h in headers:
            count += h.record_count
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, h.base_offset
        if self._checkpoint_clean:
            self._mark_unclean()
        seg = self.segments[-1]
        if seg.size and self._should_roll(seg, len(records), max_ts, next_offset - 1, now_ms):
            seg = self._roll(base, now_ms)
        elif seg.size == 0 and base > seg.base_offset:
            # An empty active segment whose base lies below the first offset to be written
            # (follower jump ahead): start a segment at the right base.
            seg = self._replace_empty_active(base, now_ms)
        config = self.config
        # Start the disk write at once only for the first append an fsync will cover: the
        # ones after it share that fsync (group commit) and would each add a system call.
        writeback = config.fsyncs_every_append and self._unflushed_messages == 0
        seg.append(records, headers, config.preallocate_bytes, writeback)
        self.log_end_offset = next_offset
        unflushed = self._unflushed_messages
        self._unflushed_messages = unflushed + count
        if (
            unflushed == 0 or unflushed < config.flush_interval_messages <= unflushed + count
        ) and self.flush_watch is not None:
            self.flush_watch(self)
        return AppendResult(
            base,
            next_offset - 1,
            append_time,
            self.log_start_offset,
            count,
            max_ts,
            max_off,
            headers,
        )

    def _should_roll(
        self, seg: Segment, incoming: int, max_ts: int, last_offset: int, now_ms: int
    ) -> bool:
        config = self.config
        if seg.size > config.segment_bytes - incoming:
            return True
        first_ts = seg.first_timestamp()
        waited = max_ts - first_ts if first_ts >= 0 and max_ts >= 0 else now_ms - seg.created_ms
        if waited > config.segment_ms - self._roll_jitter_ms:
            return True
        if len(seg.index.offsets) >= config.segment_index_bytes // OFFSET_ENTRY_SIZE:
            return True
        if len(seg.time_index.timestamps) >= config.segment_index_bytes // TIME_ENTRY_SIZE:
            return True
        return last_offset - seg.base_offset > MAX_RELATIVE_OFFSET

    def _roll(self, base: int, now_ms: int) -> Segment:
        """Close the active segment for writing and start one at `base`."""
        old = self.segments[-1]
        with self._lock:
            old.finalize()
        self.producer_state.take_snapshot(base, self.log_start_offset)
        seg = Segment.create(self._dir, base, now_ms, self.config.index_interval_bytes)
        self.segments.append(seg)
        self._roll_jitter_ms = self._new_roll_jitter()
        self._bases.append(base)
        self._new_files = True
        if self.flush_watch is not None:
            self.flush_watch(self)  # the rolled segment is fsynced in the background
        return seg

    def roll(self, now_ms: int) -> None:
        """Force a new active segment at the log end offset (no-op if the active is empty)."""
        self._check_open()
        if self.segments[-1].size:
            self._mark_unclean()
            self._roll(self.log_end_offset, now_ms)

    def _replace_empty_active(self, base: int, now_ms: int) -> Segment:
        old = self.segments.pop()
        self._bases.pop()
        old.delete()
        seg = Segment.create(self._dir, base, now_ms, self.config.index_interval_bytes)
        self.segments.append(seg)
        self._bases.append(base)
        self._new_files = True
        return seg

    # -- read ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, upper_bound: int | None = None) -> FileSlice | None:
        """Whole batches from the one holding `offset`, within one segment file.

        Covers whole batches up to `max_bytes`, but at least the first batch however
        large (KIP-74); no batch whose last offset is >= `upper_bound` (a consumer's
        high watermark or last stable offset, a follower's log end offset; None: the log
        end) is included. None when there is nothing to return.
        """
        self._check_open()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}"
            )
        limit = (
            self.log_end_offset if upper_bound is None else min(upper_bound, self.log_end_offset)
        )
        if offset >= limit:
            return None
        segments = self.segments
        i = max(bisect_right(self._bases, offset) - 1, 0)
        while i < len(segments):
            seg = segments[i]
            seg_end = self._bases[i + 1] if i + 1 < len(segments) else self.log_end_offset
            if limit >= seg_end:
                end_pos = seg.size
            else:
                bound = seg.find(limit)
                end_pos = seg.size if bound is None else bound.position
            first = seg.find(offset, end_pos)
            if first is None:
                if limit <= seg_end:
                    return None
                i += 1
                continue
            start = first.position
            if end_pos - start <= max_bytes:
                length = end_pos - start
            else:
                boundary = seg.boundary_at_or_before(start, min(start + max_bytes, end_pos))
                if boundary <= start:
                    boundary = start + first.batch_length + 12  # KIP-74: one whole batch
                length = boundary - start
            if length <= 0:
                return None
            return FileSlice(seg.file, start, length, seg.size)
        return None

    # -- timestamps ----------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms`.

        Found at batch level through the time index; within that batch the records are
        read when they can be (uncompressed, or compressed with a decompressor set).
        """
        self._check_open()
        lso = self.log_start_offset
        for seg in self.segments:
            if seg.size == 0 or seg.max_timestamp < timestamp_ms:
                continue
            start_offset = max(seg.time_index.lookup(timestamp_ms), lso)
            first = seg.find(start_offset)
            if first is None:
                continue
            for h in seg.batches(first.position):
                if h.max_timestamp >= timestamp_ms and h.base_offset + h.last_offset_delta >= lso:
                    found = self._record_at_or_after(seg, h, timestamp_ms, lso)
                    if found is not None:
                        return found
        return None

    def _record_at_or_after(
        self, seg: Segment, h: BatchHeader, timestamp_ms: int, min_offset: int
    ) -> tuple[int, int] | None:
        if h.timestamp_type == 1:
            return max(h.base_offset, min_offset), h.max_timestamp
        if h.compression and self.decompressor is None:
            return max(h.base_offset, min_offset), h.max_timestamp
        try:
            records = decode_records(seg.read_bytes(h.position, h.total_size), 0, self.decompressor)
        except Exception:
            return max(h.base_offset, min_offset), h.max_timestamp
        for r in records:
            if (
                r.timestamp is not None
                and r.timestamp >= timestamp_ms
                and (r.offset or 0) >= min_offset
            ):
                return r.offset or 0, r.timestamp
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp; (-1, -1) if empty."""
        self._check_open()
        best_ts, best_seg = -1, None
        for seg in self.segments:
            if seg.size and seg.max_timestamp > best_ts:
                best_ts, best_seg = seg.max_timestamp, seg
        if best_seg is None:
            return -1, -1
        off = best_seg.offset_of_max_timestamp
        h = best_seg.find(off)
        if h is None or h.timestamp_type == 1 or (h.compression and self.decompressor is None):
            return best_ts, off
        try:
            for r in decode_records(
                best_seg.read_bytes(h.position, h.total_size), 0, self.decompressor
            ):
                if r.timestamp == best_ts and r.offset is not None:
                    return best_ts, r.offset
        except Exception:
            pass
        return best_ts, off

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 as Kafka 3.9 answered it (fetchOffsetsBefore): each segment's
        base offset (at least the log start) with its file's last-modified time, and the
        log end at the present when the active segment holds data; from the latest
        (-1), the earliest (-2) or the newest entry modified at or before `timestamp`,
        up to `max_num_offsets` of them, newest first."""
        self._check_open()
        entries: list[tuple[int, int]] = []
        for seg in self.segments:
            try:
                modified = int(os.stat(seg.log_path).st_mtime * 1000)
            except FileNotFoundError:
                modified = seg.created_ms
            entries.append((max(seg.base_offset, self.log_start_offset), modified))
        if self.segments and self.segments[-1].size > 0:
            entries.append((self.log_end_offset, int(time.time() * 1000)))
        if timestamp == -1:
            start = len(entries) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = len(entries) - 1
            while start >= 0 and entries[start][1] > timestamp:
                start -= 1
        count = max(0, min(max_num_offsets, start + 1))
        return sorted((entries[start - j][0] for j in range(count)), reverse=True)

    # -- deletion ------------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (-1 = high watermark)
        and delete the whole segments below it; returns the new log start offset."""
        self._check_open()
        if offset == -1:
            offset = self._high_watermark
        if offset < 0 or offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete before {offset}: high watermark is {self._high_watermark}"
            )
        if offset > self.log_start_offset:
            self._mark_unclean()
            self.log_start_offset = offset
            LogStartMoves.count += 1
            self._write_checkpoint()
            self._delete_below_log_start()
            self._epochs_from_start()
        return self.log_start_offset

    def _delete_below_log_start(self) -> int:
        lso = self.log_start_offset
        return self._delete_prefix(lambda seg, nxt: nxt is not None and nxt.base_offset <= lso)

    def apply_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms (by their largest timestamp) or beyond
        retention.bytes, oldest first, only below the high watermark; the active segment
        goes too when Kafka would (a new empty one is rolled first). Returns bytes freed."""
        self._check_open()
        config = self.config
        freed = 0
        if config.deletes:
            if config.retention_ms >= 0:
                retention_ms = config.retention_ms
                freed += self._delete_prefix(
                    lambda seg, nxt: now_ms - seg.largest_timestamp() > retention_ms,
                    now_ms,
                )
            if config.retention_bytes >= 0:
                excess = [self.size_bytes() - config.retention_bytes]

                def over_size(seg: Segment, nxt: Segment | None) -> bool:
                    if excess[0] - seg.size >= 0:
                        excess[0] -= seg.size
                        return True
                    return False

                freed += self._delete_prefix(over_size, now_ms)
        freed += self._delete_below_log_start()
        return freed

    def _delete_prefix(
        self, predicate: Callable[[Segment, Segment | None], bool], now_ms: int | None = None
    ) -> int:
        segments = self.segments
        hw = self._high_watermark
        count = 0
        for i, seg in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            if nxt is None:
                if seg.size == 0 or hw < self.log_end_offset:
                    break
            elif nxt.base_offset > hw:
                break
            if not predicate(seg, nxt):
                break
            count += 1
        if count == 0:
            return 0
        self._mark_unclean()
        if count == len(segments):
            self._roll(self.log_end_offset, now_ms if now_ms is not None else 0)
        doomed = self.segments[:count]
        freed = 0
        with self._lock:
            del self.segments[:count]
            del self._bases[:count]
            for seg in doomed:
                freed += seg.size
                seg.delete()
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        LogStartMoves.count += 1
        self._epochs_from_start()
        return freed

    def truncate_to(self, offset: int) -> None:
        """Follower truncation: remove every record at or after `offset`."""
        self._check_open()
        if offset >= self.log_end_offset:
            # No record goes, but an epoch this broker began as leader and never wrote
            # to (it starts at the log end) is not the new leader's: drop it, as Kafka
            # does, or the follower would keep naming it as its last fetched epoch.
            with self._lock:
                if self.epoch_cache.truncate_from_end(self.log_end_offset):
                    self.epoch_cache.persist()
            return
        self._mark_unclean()
        self.truncations += 1
        offset = max(offset, 0)
        with self._lock:
            while len(self.segments) > 1 and self._bases[-1] >= offset:
                seg = self.segments.pop()
                self._bases.pop()
                seg.delete()
            if self._bases[0] >= offset:
                self._start_afresh_at(offset)  # everything goes
                new_end = offset
            else:
                seg = self.segments[-1]
                seg.index_interval_bytes = self.config.index_interval_bytes
                seg.truncate_to_offset(offset)
                new_end = min(offset, seg.next_offset if seg.next_offset is not None else offset)
                seg.next_offset = new_end
            self.log_end_offset = new_end
            if self.epoch_cache.truncate_from_end(new_end):
                self.epoch_cache.persist()
            self._high_watermark = min(self._high_watermark, new_end)
            self.recovery_point = min(self.recovery_point, new_end)
            self.log_start_offset = min(self.log_start_offset, new_end)
            LogStartMoves.count += 1
            self.producer_state.truncate(self.segments, self.log_start_offset, new_end)
        if self.flush_watch is not None:
            self.flush_watch(self)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Kafka's truncateFullyAndStartAt: a follower whose log ends below the leader's
        log start (the records it lacks were deleted there, by DeleteRecords or
        retention) drops every record and continues, empty, from `offset`."""
        self._check_open()
        self._mark_unclean()
        self.truncations += 1
        with self._lock:
            while self.segments:
                self.segments.pop().delete()
                self._bases.pop()
            self._start_afresh_at(offset)
            self.log_end_offset = offset
            self._high_watermark = offset
            self.recovery_point = offset
            self.epoch_cache.clear()
            self.epoch_cache.persist()
            self.producer_state.truncate(self.segments, offset, offset)
            self._write_checkpoint_locked()
        if self.flush_watch is not None:
            self.flush_watch(self)

    def _start_afresh_at(self, offset: int) -> None:
        """One empty segment at `offset` in place of the last one (the caller deleted
        the others): the log now starts there."""
        if self.segments:
            self.segments.pop().delete()
            self._bases.pop()
        new = Segment.create(self._dir, offset, 0, self.config.index_interval_bytes)
        self.segments.append(new)
        self._bases.append(offset)
        self._new_files = True
        self.log_start_offset = offset
        LogStartMoves.count += 1

    # -- flushing -------------------------------------------------------------------------------

    def needs_flush(self, now_ms: int) -> bool:
        """True when flush.messages or flush.ms asks for an fsync, or a rolled segment
        has not been fsynced yet (Kafka flushes rolled segments in the background)."""
        if self.closed:
            return False
        unflushed = self._unflushed_messages
        if unflushed:
            if unflushed >= self.config.flush_interval_messages:
                return True
            if now_ms - self._last_flush_ms >= self.config.flush_interval_ms:
                return True
        segments = self.segments
        return len(segments) > 1 and segments[-2].dirty

    def flush_pending(self) -> bool:
        """Whether `needs_flush` is true now or can turn true with time alone: a rolled
        segment not fsynced yet, or unflushed messages under a flush.ms that ends. A log
        without (no unflushed data, or only under flush.ms's default of never and below
        flush.messages) needs an append, a roll or a config change first, and each of
        those tells `flush_watch`."""
        if self.closed:
            return False
        segments = self.segments
        if len(segments) > 1 and segments[-2].dirty:
            return True
        unflushed = self._unflushed_messages
        config = self.config
        return unflushed > 0 and (
            unflushed >= config.flush_interval_messages
            or self._last_flush_ms + config.flush_interval_ms < _NEVER_MS  # not flush.ms=never
        )

    def prepare_flush(self, data_only: bool = False) -> FlushJob | None:
        """Persist pending index entries and list what an fsync must cover.

        `data_only` (an acknowledgement is waiting) syncs just the log files: a lost index
        tail only makes lookups walk further, and recovery repairs indexes that point
        wrong, so index files wait for the next full flush (roll, interval, close).
        """
        if self.closed:
            return None
        with self._lock:
            paths: list[str] = []
            candidates = self.segments
            if data_only:
                # Bytes below the recovery point are on disk already: only the segments
                # from the one holding it on can have data an acknowledgement waits for.
                first = max(bisect_right(self._bases, self.recovery_point) - 1, 0)
                candidates = candidates[first:]
            segments = [s for s in list(candidates) if s.dirty and not s.deleted]
            for seg in segments:
                paths.append(seg.log_path)
                if data_only:
                    continue
                seg.persist_indexes()
                seg.dirty = False
                paths.append(seg.index_path)
                paths.append(seg.time_index_path)
            directory = self._dir if self._new_files else None
            self._new_files = False
            return FlushJob(
                paths, directory, self.log_end_offset, self._unflushed_messages, segments
            )

    def complete_flush(self, job: FlushJob, now_ms: int | None = None) -> None:
        with self._lock:
            self._unflushed_messages = max(0, self._unflushed_messages - job.messages)
            if now_ms is not None:
                self._last_flush_ms = now_ms
            else:
                self._last_flush_ms = int(time.time() * 1000)
            if job.upto_offset > self.recovery_point:
                old_seg = bisect_right(self._bases, self.recovery_point)
                self.recovery_point = job.upto_offset
                if bisect_right(self._bases, job.upto_offset) != old_seg and not self.closed:
                    self._write_checkpoint_locked()

    def abort_flush(self, job: FlushJob) -> None:
        """The fsync failed: the data stays unflushed."""
        with self._lock:
            for seg in job.segments:
                seg.dirty = True
            if job.directory is not None:
                self._new_files = True

    def flush(self) -> None:
        """fsync data and indexes of every dirty segment (may run in a worker thread)."""
        job = self.prepare_flush()
        if job is None:
            return
        try:
            job.run()
        except BaseException:
            self.abort_flush(job)
            raise
        self.complete_flush(job)

    # -- configuration, size, lifecycle ------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self.segments[-1].index_interval_bytes = config.index_interval_bytes
        self._roll_jitter_ms = self._new_roll_jitter()
        if self.flush_watch is not None:
            self.flush_watch(self)  # flush.ms / flush.messages may ask for an fsync now

    def _new_roll_jitter(self) -> int:
        """segment.jitter.ms: the active segment rolls this much before segment.ms, so
        that partitions created together do not all roll at once."""
        config = self.config
        bound = min(config.segment_jitter_ms, config.segment_ms)
        return self.draw_jitter(bound) if bound > 0 else 0

    def size_bytes(self) -> int:
        return sum(seg.size for seg in self.segments)

    @property
    def num_segments(self) -> int:
        return len(self.segments)

    def close(self, keep_slices: bool = False) -> None:
        """Flush, record a clean shutdown so the next open needs no scan, close files;
        with `keep_slices`, a file still being sent from closes once its slices are
        released (the log lives on elsewhere: a move to another log directory)."""
        if self.closed:
            return
        if not self._checkpoint_clean:
            self.prepare_close()
            self.producer_state.take_snapshot(self.log_end_offset, self.log_start_offset)
            self.flush()
            self._checkpoint_clean = True
            self._write_checkpoint()
        self.producer_state.close()
        self.closed = True
        for seg in self.segments:
            if keep_slices:
                seg.release()
            else:
                seg.close()

    def prepare_close(self) -> None:
        """Finish the active segment's indexes so a following flush covers them (lets a
        manager run the flushes of many logs in parallel before closing them)."""
        if not self.closed and not self._checkpoint_clean:
            with self._lock:
                self.segments[-1].finalize()

    def delete(self, remove_files: bool = True) -> None:
        """Close for good and remove the partition's directory (unless the caller removes
        it itself); slices still being sent stay readable until released."""
        self.closed = True
        self.producer_state.close()
        with self._lock:
            for seg in self.segments:
                seg.release()
            self.segments = []
            self._bases = []
        if remove_files:
            shutil.rmtree(self._dir, ignore_errors=True)

    def replace_segments(self, old: list[Segment], new: Segment) -> None:
        """The log cleaner's swap: `new` (already on disk under old[0]'s name) takes the
        place of the consecutive sealed segments `old`; slices of the old files stay
        readable until released."""
        with self._lock:
            i = next(k for k, seg in enumerate(self.segments) if seg is old[0])
            self.segments[i : i + len(old)] = [new]
            self._bases[i : i + len(old)] = [new.base_offset]
        for seg in old:
            seg.deleted = True
            seg.release()

    # -- internals ------------------------------------------------------------------------------

    def _epochs_from_start(self) -> None:
        epochs = self.epoch_cache
        if epochs.truncate_from_start(self.log_start_offset):
            epochs.persist()

    def _check_open(self) -> None:
        if self.closed:
            raise LogClosedError(f"log {self.topic}-{self.partition} is closed")

    def _mark_unclean(self) -> None:
        """Before the first change after a clean open, take back the clean-shutdown claim."""
        if self._checkpoint_clean:
            self._checkpoint_clean = False
            self._write_checkpoint()

    def checkpoint_high_watermark(self) -> None:
        """Write the checkpoint if the high watermark moved since it was last written
        (Kafka's periodic replication-offset-checkpoint). Safe from another thread: the
        log's lock is held only to take the checkpoint, not to write it."""
        with self._lock:
            if self.closed or self._high_watermark == self._checkpointed_hw:
                return
            taken = self._take_checkpoint_locked()
        self._store_checkpoint(*taken)

    def _write_checkpoint(self) -> None:
        with self._lock:
            self._write_checkpoint_locked()

    def _write_checkpoint_locked(self) -> None:
        self._store_checkpoint(*self._take_checkpoint_locked())

    def _take_checkpoint_locked(self) -> tuple[int, PartitionCheckpoint]:
        clean = None
        if self._checkpoint_clean:
            active = self.segments[-1]
            clean = CleanState(self.log_end_offset, active.base_offset, active.size)
        self._checkpointed_hw = self._high_watermark
        self._checkpoints_taken += 1
        return self._checkpoints_taken, PartitionCheckpoint(
            self.log_start_offset, self.recovery_point, clean, self._high_watermark
        )

    def _store_checkpoint(self, number: int, checkpoint: PartitionCheckpoint) -> None:
        with self._checkpoint_file_lock:
            if number > self._checkpoint_stored:
                write_checkpoint(self._dir, checkpoint)
                self._checkpoint_stored = number

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic}-{self.partition}, lso={self.log_start_offset}, "
            f"leo={self.log_end_offset}, hw={self._high_watermark}, "
            f"segments={len(self.segments)})"
        )
