"""The log cleaner: compaction of topics whose cleanup.policy contains "compact".

This half runs on the event loop and stays cheap there: it chooses the dirtiest log,
takes a snapshot of its sealed segments, hands the plan to a worker thread
(`compaction.run_plan` reads, filters and writes `.cleaned` files), and commits the
result with a few renames (`segment_swap`) and one list splice in the log. Readers are
never disturbed: slices already handed out keep the old files open, and the swap of
the segment list happens between two loop iterations.

Per log, `cleaner-offset.checkpoint` remembers where the dirty section starts and the
earliest delete horizon of a tombstone kept so far (when it passes, the log is cleaned
again even if nothing new was written, so that the tombstone goes).

When a log is chosen follows Kafka: the dirty section is the offsets from the
checkpoint up to the first uncleanable offset (the active segment, the last stable
offset, and any segment holding records younger than min.compaction.lag.ms); the log
is cleaned when dirty bytes / (clean + dirty bytes) exceeds min.cleanable.dirty.ratio,
when its oldest dirty record is older than max.compaction.lag.ms, or when a tombstone's
delete horizon has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from kbroker.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from kbroker.storage.compaction import (
    CleanerAbortedError,
    CleanPlan,
    CleanResult,
    CompactionSettings,
    IoThrottle,
    SourceSegment,
    run_plan,
)
from kbroker.storage.entry_file import replace_file
from kbroker.storage.log import PartitionLog
from kbroker.storage.segment import Segment, remove_file
from kbroker.storage.segment_swap import commit_group, discard_cleaned, fsync_directory

__all__ = [
    "CHECKPOINT_FILE",
    "CleanerCheckpoint",
    "CleanerConfig",
    "CompactionSettings",
    "LogCleaner",
    "LogToClean",
    "read_cleaner_checkpoint",
    "write_cleaner_checkpoint",
]

log = logging.getLogger("kbroker.cleaner")

CHECKPOINT_FILE = "cleaner-offset.checkpoint"
_NEVER = 2**63 - 1
# What one offset-map entry costs in a Python dict (key object, int, slot), for turning
# log.cleaner.dedupe.buffer.size into a number of keys.
MAP_ENTRY_BYTES = 128


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- checkpoint ---------------------------------------------------------------------------


@dataclass(slots=True)
class CleanerCheckpoint:
    first_dirty_offset: int = 0
    earliest_horizon: int = -1  # delete horizon of the oldest kept tombstone, -1 if none


def read_cleaner_checkpoint(directory: str) -> CleanerCheckpoint:
    """The checkpoint, or a fresh one when missing or unreadable (then the whole log is
    dirty, which costs one extra pass and never loses anything)."""
    try:
        with open(os.path.join(directory, CHECKPOINT_FILE), "rb") as f:
            raw = json.loads(f.read())
        return CleanerCheckpoint(int(raw["first_dirty_offset"]), int(raw["earliest_horizon"]))
    except (OSError, ValueError, KeyError, TypeError):
        return CleanerCheckpoint()


def write_cleaner_checkpoint(directory: str, checkpoint: CleanerCheckpoint) -> None:
    path = os.path.join(directory, CHECKPOINT_FILE)
    data = json.dumps(
        {
            "first_dirty_offset": checkpoint.first_dirty_offset,
            "earliest_horizon": checkpoint.earliest_horizon,
        }
    ).encode()
    replace_file(path, data)


# -- configuration --------------------------------------------------------------------------


RECONFIGURE_CHECK_S = 1.0  # how soon a raised log.cleaner.threads starts its workers


class CleanerSettings(Protocol):
    """The log.cleaner.* broker settings, as BrokerConfig types them (the storage layer
    sits below the configuration)."""

    @property
    def log_cleaner_enable(self) -> bool: ...
    @property
    def log_cleaner_threads(self) -> int: ...
    @property
    def log_cleaner_backoff_ms(self) -> int: ...
    @property
    def log_cleaner_dedupe_buffer_size(self) -> int: ...
    @property
    def log_cleaner_io_buffer_load_factor(self) -> float: ...
    @property
    def log_cleaner_io_max_bytes_per_second(self) -> float: ...


@dataclass(slots=True)
class CleanerConfig:
    """Broker-wide cleaner settings (log.cleaner.*)."""

    enabled: bool = True
    threads: int = 1
    backoff_ms: int = 15000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_load_factor: float = 0.9
    max_io_bytes_per_second: float = float("inf")
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES

    @classmethod
    def from_settings(cls, config: CleanerSettings) -> CleanerConfig:
        """From the broker's settings (a BrokerConfig)."""
        return cls(
            enabled=config.log_cleaner_enable,
            threads=config.log_cleaner_threads,
            backoff_ms=config.log_cleaner_backoff_ms,
            dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            io_buffer_load_factor=config.log_cleaner_io_buffer_load_factor,
            max_io_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
        )

    @property
    def max_map_entries(self) -> int:
        """Keys one pass may map (the dedupe buffer is shared by the threads, as in Kafka)."""
        share = self.dedupe_buffer_size * self.io_buffer_load_factor / max(self.threads, 1)
        return max(int(share // MAP_ENTRY_BYTES), 1024)


# -- choosing a log -------------------------------------------------------------------------


@dataclass(slots=True)
class LogToClean:
    """A log's cleanable state as seen on the loop thread."""

    log: PartitionLog
    settings: CompactionSettings
    checkpoint: CleanerCheckpoint
    first_dirty: int
    dirty_end: int  # a segment base: segments wholly below it may be cleaned
    clean_bytes: int
    dirty_bytes: int
    due: bool  # max.compaction.lag.ms or a delete horizon passed: clean regardless of ratio

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def cleanable(self) -> bool:
        if self.due:
            return True
        return self.dirty_bytes > 0 and self.ratio > self.settings.min_cleanable_ratio


def assess(
    plog: PartitionLog, settings: CompactionSettings, now_ms: int, roll: bool = True
) -> LogToClean | None:
    """The cleanable state of one compacted log (None when there is nothing to clean).

    With `roll`, an active segment older than max.compaction.lag.ms is rolled first so
    that its records become cleanable (Kafka bounds the active segment's age by it).
    """
    if plog.closed or not plog.config.compacts:
        return None
    segs = plog.segments
    active = segs[-1]
    max_lag = settings.max_compaction_lag_ms
    if roll and max_lag < _NEVER and active.size:
        first_ts = active.first_timestamp()
        born = first_ts if first_ts >= 0 else active.created_ms
        if now_ms - born > max_lag:
            plog.roll(now_ms)
            segs = plog.segments
            active = segs[-1]
    if len(segs) < 2:
        return None
    checkpoint = read_cleaner_checkpoint(str(plog.directory))
    first_dirty = min(max(checkpoint.first_dirty_offset, plog.log_start_offset), active.base_offset)
    bound = min(active.base_offset, plog.last_stable_offset)
    sealed = segs[:-1]
    min_lag = settings.min_compaction_lag_ms
    if min_lag > 0:
        for i, seg in enumerate(sealed):
            if segs[i + 1].base_offset <= first_dirty:
                continue
            if seg.largest_timestamp() > now_ms - min_lag:
                bound = min(bound, seg.base_offset)
                break
    # Whole segments only: the dirty section ends at the base of the segment holding `bound`.
    dirty_end = sealed[0].base_offset
    clean_bytes = dirty_bytes = 0
    first_dirty_segment: Segment | None = None
    for i, seg in enumerate(sealed):
        nxt = segs[i + 1].base_offset
        if nxt > bound:
            break
        dirty_end = nxt
        if nxt <= first_dirty:
            clean_bytes += seg.size
        else:
            dirty_bytes += seg.size
            if first_dirty_segment is None:
                first_dirty_segment = seg
    due = 0 <= checkpoint.earliest_horizon <= now_ms
    if first_dirty_segment is not None and max_lag < _NEVER:
        first_ts = first_dirty_segment.first_timestamp()
        if 0 <= first_ts < now_ms - max_lag:
            due = True
    if dirty_end <= sealed[0].base_offset:
        return None
    return LogToClean(
        plog, settings, checkpoint, first_dirty, dirty_end, clean_bytes, dirty_bytes, due
    )


# -- the cleaner ----------------------------------------------------------------------------


class LogCleaner:
    """Compacts the compacted logs of `logs()`, one log per worker at a time."""

    def __init__(
        self,
        logs: Callable[[], Iterable[PartitionLog]],
        config: CleanerConfig | None = None,
        settings_for: Callable[[PartitionLog], CompactionSettings] | None = None,
        clock: Callable[[], int] = _now_ms,
        on_io_error: Callable[[PartitionLog, OSError], object] | None = None,
    ) -> None:
        self.logs = logs
        # Where an I/O error met while cleaning a log goes: the log manager takes its
        # directory offline (Kafka's cleaner hands it to the LogDirFailureChannel) rather
        # than the cleaner retrying the same failing log forever.
        self.on_io_error = on_io_error
        self.config = config or CleanerConfig()
        self.settings_for = settings_for or (lambda plog: CompactionSettings())
        self.clock = clock
        self._abort = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._in_progress: set[int] = set()
        self.passes = 0  # completed passes (tests, metrics)

    # -- choosing ------------------------------------------------------------------------

    def grab(self, now_ms: int) -> LogToClean | None:
        """The dirtiest cleanable log not being cleaned: due logs first, then by ratio."""
        best: LogToClean | None = None
        for plog in self.logs():
            if id(plog) in self._in_progress or plog.closed or not plog.config.compacts:
                continue
            try:
                candidate = assess(plog, self.settings_for(plog), now_ms)
            except OSError as exc:
                if self.on_io_error is None:
                    raise
                self.on_io_error(plog, exc)
                continue
            except Exception:
                log.exception("assessing %s-%d for cleaning failed", plog.topic, plog.partition)
                continue
            if candidate is None or not candidate.cleanable:
                continue
            if best is None or (candidate.due, candidate.ratio) > (best.due, best.ratio):
                best = candidate
        return best

    def plan(self, target: LogToClean, now_ms: int) -> CleanPlan:
        plog = target.log
        sources = [
            SourceSegment(seg.base_offset, seg.size, seg)
            for seg in plog.segments[:-1]
            if seg.base_offset < target.dirty_end
        ]
        config = plog.config
        return CleanPlan(
            directory=str(plog.directory),
            segments=sources,
            first_dirty=target.first_dirty,
            dirty_end=target.dirty_end,
            now_ms=now_ms,
            settings=target.settings,
            segment_bytes=config.segment_bytes,
            index_interval_bytes=config.index_interval_bytes,
            max_map_entries=self.config.max_map_entries,
            max_decompressed_bytes=self.config.max_decompressed_bytes,
        )

    def _throttle(self) -> IoThrottle | None:
        rate = self.config.max_io_bytes_per_second
        return IoThrottle(rate) if 0 < rate < float("inf") else None

    # -- committing ------------------------------------------------------------------------

    def commit(
        self, plog: PartitionLog, plan: CleanPlan, result: CleanResult
    ) -> tuple[list[str], bool]:
        """Swap the cleaned copies in (loop thread). Returns the files left to unlink and
        whether every group went in (False when the log changed under the pass, so that
        part of it was thrown away)."""
        doomed: list[str] = []
        complete = True
        for group in result.groups:
            old = [s.segment for s in group.sources]
            if plog.closed or str(plog.directory) != plan.directory or not _in_place(plog, old):
                discard_cleaned(plan.directory, group.base_offset)
                complete = False
                continue
            doomed += commit_group(
                plan.directory, group.base_offset, [s.base_offset for s in group.sources]
            )
            fresh = Segment(
                plan.directory, group.base_offset, plan.now_ms, plog.config.index_interval_bytes
            )
            plog.replace_segments(old, fresh)
        return doomed, complete

    @staticmethod
    def finish(
        directory: str,
        doomed: list[str],
        checkpoint: CleanerCheckpoint | None,
    ) -> None:
        """Worker-thread tail of a pass: unlink the replaced files, make the renames
        durable, then record how far the log is clean."""
        for path in doomed:
            remove_file(path)
        with contextlib.suppress(FileNotFoundError):
            fsync_directory(directory)
            if checkpoint is not None:
                write_cleaner_checkpoint(directory, checkpoint)

    @staticmethod
    def next_checkpoint(
        target: LogToClean, result: CleanResult, complete: bool
    ) -> CleanerCheckpoint | None:
        if not complete:
            return None
        return CleanerCheckpoint(max(target.first_dirty, result.map_end), result.earliest_horizon)

    # -- one pass --------------------------------------------------------------------------

    def clean_now(
        self, plog: PartitionLog, now_ms: int | None = None, force: bool = False
    ) -> CleanResult | None:
        """One whole pass over `plog` in the calling thread (tests and tools); with
        `force` the dirty ratio is ignored. None when there was nothing to clean."""
        now = self.clock() if now_ms is None else now_ms
        target = assess(plog, self.settings_for(plog), now)
        if target is None or not (force or target.cleanable):
            return None
        plan = self.plan(target, now)
        result = run_plan(plan, self._abort, self._throttle())
        doomed, complete = self.commit(plog, plan, result)
        self.finish(plan.directory, doomed, self.next_checkpoint(target, result, complete))
        self.passes += 1
        return result

    async def clean_next(self) -> bool:
        """Clean the dirtiest log, the heavy part in a worker thread; False if none was."""
        now = self.clock()
        target = self.grab(now)
        if target is None:
            return False
        plog = target.log
        key = id(plog)
        self._in_progress.add(key)
        try:
            plan = self.plan(target, now)
            started = time.monotonic()
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(
                self._executor(), run_plan, plan, self._abort, self._throttle()
            )
            try:
                result = await asyncio.shield(future)
            except asyncio.CancelledError:
                future.add_done_callback(lambda f: _discard_result(plan, f))
                raise
            doomed, complete = self.commit(plog, plan, result)
            checkpoint = self.next_checkpoint(target, result, complete)
            await loop.run_in_executor(
                self._executor(), self.finish, plan.directory, doomed, checkpoint
            )
            self.passes += 1
            before = sum(s.size for s in plan.segments)
            after = (
                before
                - sum(s.size for g in result.groups for s in g.sources)
                + sum(g.size for g in result.groups)
            )
            log.info(
                "cleaned %s-%d up to offset %d: %d -> %d bytes, %d of %d records kept "
                "(dirty ratio %.2f) in %.2fs",
                plog.topic,
                plog.partition,
                result.map_end,
                before,
                after,
                result.records_kept,
                result.records_read,
                target.ratio,
                time.monotonic() - started,
            )
            if result.unreadable_batches:
                log.warning(
                    "%s-%d: %d batches could not be decompressed or decoded and were kept as "
                    "they are",
                    plog.topic,
                    plog.partition,
                    result.unreadable_batches,
                )
        except CleanerAbortedError:
            return False
        except FileNotFoundError as exc:
            # A segment went away (retention, deletion, truncation) while planned.
            log.debug("cleaning %s-%d abandoned: %s", plog.topic, plog.partition, exc)
            return False
        except OSError as exc:
            if self.on_io_error is None:
                raise
            self.on_io_error(plog, exc)
            return False
        finally:
            self._in_progress.discard(key)
        return True

    async def run(self) -> None:
        """Background task: log.cleaner.threads workers, each sleeping log.cleaner.backoff.ms
        whenever no log needs cleaning. `reconfigure` changes both while it runs (a dynamic
        broker config): more workers start, the extra ones idle."""
        tasks: list[asyncio.Future[None]] = []
        try:
            while True:
                while len(tasks) < max(self.config.threads, 1):
                    tasks.append(asyncio.ensure_future(self._work(len(tasks))))
                finished = [t for t in tasks if t.done()]
                for task in finished:
                    task.result()  # a worker's failure ends the cleaner, as before
                if self._abort.is_set():
                    return
                await asyncio.sleep(RECONFIGURE_CHECK_S)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def reconfigure(self, config: CleanerConfig) -> None:
        """New log.cleaner.* settings, used from each worker's next pass."""
        self.config = config
        if self._pool is not None:
            self._pool._max_workers = max(self._pool._max_workers, config.threads)

    async def _work(self, index: int = 0) -> None:
        while not self._abort.is_set():
            if index >= max(self.config.threads, 1):  # threads lowered: idle
                await asyncio.sleep(RECONFIGURE_CHECK_S)
                continue
            cleaned = False
            try:
                cleaned = await self.clean_next()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed")
            await asyncio.sleep(0 if cleaned else self.config.backoff_ms / 1000)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=max(self.config.threads, 1), thread_name_prefix="kbroker-cleaner"
            )
        return self._pool

    def stop(self) -> None:
        """Abandon passes in flight (their output is removed) and wait for the workers."""
        self._abort.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _in_place(plog: PartitionLog, old: list[Segment]) -> bool:
    """Whether `old` still sits in the log, consecutive, sealed and not deleted."""
    segs = plog.segments
    for i, seg in enumerate(segs):
        if seg is old[0]:
            end = i + len(old)
            if end >= len(segs):
                return False  # would reach the active segment
            return all(a is b and not a.deleted for a, b in zip(segs[i:end], old, strict=True))
    return False


def _discard_result(plan: CleanPlan, future: Future[CleanResult] | asyncio.Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    for group in future.result().groups:
        discard_cleaned(plan.directory, group.base_offset)
