"""Moving one partition's log to another log directory of this broker (AlterReplicaLogDirs).

Kafka grows a "future" replica in the destination while the current one keeps serving,
then swaps them. Here the future is a byte copy of the partition directory, made in
rounds while the log keeps taking appends: each round copies, in a worker thread, what
the log holds beyond the previous round (whole sealed segments, the growing tail of the
active one); once what is left is small the last round runs on the event loop, where
no append can interleave: the source is closed cleanly (its indexes, producer snapshot
and clean-shutdown checkpoint written), the rest is copied and fsynced, and the copy
takes the source's place. Producers and consumers never wait for the copy; the swap
costs them one short step of the loop.

Crash safety (kill -9 at any instant), by the order of the renames:

1. the copy grows in `<dest>/<topic>-<partition>.<id>-future` with a marker file holding
   the move's time; an open finds such a directory incomplete and removes it;
2. the complete, fsynced copy is renamed to `<dest>/<topic>-<partition>`;
3. the source is renamed to `<source>/<topic>-<partition>.<id>-delete` and removed.

Between 2 and 3 both directories hold the same, complete log (the source was closed
before the last copy and takes no append after it); an open that finds a partition in
two log directories keeps the one with the newest marker and removes the other. So
either the old or the new copy is whole and used; a move cut short is not resumed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kbroker.storage.log import PartitionLog
from kbroker.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, Segment
from kbroker.storage.segment_swap import fsync_directory

FUTURE_SUFFIX = "-future"
MOVED_MARKER = "moved-in.marker"
_CHUNK = 1 << 20
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
_SKIPPED_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")


class MoveCancelled(Exception):
    """The move was called off (topic deleted, another destination, broker stopping)."""


def marker_time(directory: Path) -> int:
    """When the copy in `directory` was moved in (ns), -1 for a log that never moved."""
    try:
        return int((directory / MOVED_MARKER).read_text())
    except (OSError, ValueError):
        return -1


UNLIMITED = 2**63 - 1  # Kafka's default rate: Long.MAX_VALUE bytes a second, no bound
_THROTTLE_NAP_S = 0.1


class IoThrottle:
    """`replica.alter.log.dirs.io.max.bytes.per.second`: the bytes a second every move of
    this broker copies in its worker rounds together (Kafka's alter-log-dirs replication
    quota), so that a move does not take the disk from the producers. Each chunk waits
    for the time the chunks before it take at the bound; the bound may change (dynamic
    config) while moves run, and a move called off stops waiting."""

    def __init__(self, bound: int = UNLIMITED) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._next = 0.0

    def take(self, size: int, cancelled: threading.Event) -> None:
        while self.bound <= 0:  # a bound of 0 lets nothing through until it is raised
            if cancelled.wait(_THROTTLE_NAP_S):
                raise MoveCancelled("move called off while throttled")
        bound = self.bound
        if bound >= UNLIMITED:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + size / bound
        if start > now and cancelled.wait(start - now):
            raise MoveCancelled("move called off while throttled")


def copy_range(
    src: str,
    dst: str,
    start: int,
    end: int,
    cancelled: threading.Event,
    throttle: IoThrottle | None = None,
) -> int:
    """Copy bytes [start, end) of `src` to the same place in `dst` (created, and cut to
    `start` first when it is longer), each chunk taken from `throttle` first when one is
    given; returns the bytes copied."""
    sfd = os.open(src, os.O_RDONLY)
    try:
        dfd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if os.fstat(dfd).st_size != start:
                os.ftruncate(dfd, start)
            position = start
            while position < end:
                if cancelled.is_set():
                    raise MoveCancelled(src)
                size = min(_CHUNK, end - position)
                if throttle is not None:
                    throttle.take(size, cancelled)
                data = os.pread(sfd, size, position)
                if not data:
                    raise OSError(errno.EIO, f"{src} ended at {position}, short of {end}")
                view = memoryview(data)
                while view:
                    written = os.pwrite(dfd, view, position)
                    position += written
                    view = view[written:]
            os.fdatasync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    return end - start


def copy_whole(src: str, dst: str, cancelled: threading.Event) -> int:
    """Copy a whole small file (index, checkpoint, snapshot); a missing one is skipped."""
    try:
        size = os.stat(src).st_size
    except FileNotFoundError:
        return 0
    copy_range(src, dst, 0, size, cancelled)
    with contextlib.suppress(OSError):
        if os.stat(dst).st_size > size:
            os.truncate(dst, size)
    return size


@dataclass(slots=True)
class _Copied:
    """How much of one segment the copy holds."""

    segment: Segment
    log_bytes: int = 0
    indexes: bool = False  # its index files copied as they stand sealed and persisted


@dataclass(slots=True)
class _Step:
    entry: _Copied
    log_end: int  # copy the .log up to here
    indexes: bool  # and the index files


class LogMove:
    """The copy of one log into `dest_root`, driven by `LogManager.move`."""

    def __init__(
        self, source: PartitionLog, dest_root: Path, throttle: IoThrottle | None = None
    ) -> None:
        self.source = source
        self.dest_root = Path(dest_root)
        self.throttle = throttle  # the worker rounds' bound; the last round is not held
        self.id = uuid.uuid4().hex
        self.future = self.dest_root / f"{source.directory.name}.{self.id}{FUTURE_SUFFIX}"
        self.cancelled = threading.Event()
        self._copied: dict[int, _Copied] = {}
        self._truncations = source.truncations

    # -- progress (loop thread) -------------------------------------------------------------

    @property
    def copied_bytes(self) -> int:
        return sum(e.log_bytes for e in self._copied.values())

    def copied_offset(self) -> int:
        """The offset up to which the copy holds the log (for DescribeLogDirs' lag)."""
        source = self.source
        for seg in source.segments:
            entry = self._copied.get(seg.base_offset)
            if entry is None or entry.segment is not seg or entry.log_bytes < seg.size:
                return seg.base_offset
        return source.log_end_offset

    def plan(self) -> list[_Step]:
        """What the next round copies: everything the copy lacks, as the log is now."""
        source = self.source
        if source.closed:
            raise MoveCancelled(f"{source.directory} was closed")
        if source.truncations != self._truncations:
            # A follower truncation rewrote bytes already copied: start afresh.
            self._truncations = source.truncations
            self._copied.clear()
            shutil.rmtree(self.future, ignore_errors=True)
        steps: list[_Step] = []
        segments = source.segments
        last = len(segments) - 1
        for i, seg in enumerate(segments):
            entry = self._copied.get(seg.base_offset)
            if entry is None or entry.segment is not seg:  # new, or replaced by the cleaner
                entry = self._copied[seg.base_offset] = _Copied(seg)
            indexes = i < last and not seg.dirty and not entry.indexes
            size = seg.size
            if entry.log_bytes < size or indexes:
                steps.append(_Step(entry, size, indexes))
        return steps

    @staticmethod
    def pending_bytes(steps: list[_Step]) -> int:
        return sum(s.log_end - s.entry.log_bytes for s in steps)

    # -- copying (worker thread) --------------------------------------------------------------

    def copy(self, steps: list[_Step]) -> int:
        """Run one round's steps; a segment deleted meanwhile (retention) is skipped."""
        self.future.mkdir(parents=True, exist_ok=True)
        copied = 0
        for step in steps:
            seg = step.entry.segment
            name = os.path.basename(seg.log_path)
            try:
                if step.log_end > step.entry.log_bytes:
                    copied += copy_range(
                        seg.log_path,
                        str(self.future / name),
                        step.entry.log_bytes,
                        step.log_end,
                        self.cancelled,
                        self.throttle,
                    )
                    step.entry.log_bytes = step.log_end
                if step.indexes:
                    for path in (seg.index_path, seg.time_index_path):
                        copy_whole(path, str(self.future / os.path.basename(path)), self.cancelled)
                    step.entry.indexes = True
            except FileNotFoundError:
                continue  # gone from the source; the last round leaves it out too
        return copied

    # -- the swap (loop thread) -----------------------------------------------------------------

    def finish(self) -> Path:
        """Close the source, complete and fsync the copy, and rename it into place (steps
        2 and 3 above). Returns the new partition directory. On an error before the copy
        is in place the source is left whole, for the caller to reopen."""
        source = self.source
        if source.closed:
            raise MoveCancelled(f"{source.directory} was closed")
        source.close(keep_slices=True)
        future = self.future
        future.mkdir(parents=True, exist_ok=True)
        kept: set[str] = set()
        for seg in source.segments:
            entry = self._copied.get(seg.base_offset)
            if entry is None or entry.segment is not seg:
                entry = _Copied(seg)
            names = [
                os.path.basename(p) for p in (seg.log_path, seg.index_path, seg.time_index_path)
            ]
            kept.update(names)
            target = str(future / names[0])
            if entry.log_bytes < seg.size or entry.log_bytes == 0:
                copy_range(seg.log_path, target, entry.log_bytes, seg.size, self.cancelled)
            if not entry.indexes or seg is source.segments[-1]:
                for path, name in zip(
                    (seg.index_path, seg.time_index_path), names[1:], strict=True
                ):
                    copy_whole(path, str(future / name), self.cancelled)
        for name in os.listdir(source.directory):
            if name.endswith(_SEGMENT_SUFFIXES) or name.endswith(_SKIPPED_SUFFIXES):
                continue
            if name == MOVED_MARKER:
                continue
            copy_whole(str(source.directory / name), str(future / name), self.cancelled)
            kept.add(name)
        for name in os.listdir(future):
            if name.endswith(_SEGMENT_SUFFIXES) and name not in kept:
                os.unlink(future / name)  # a segment retention or the cleaner took away
        marker = future / MOVED_MARKER
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, str(time.time_ns()).encode())
            os.fdatasync(fd)  # every copied file was synced as it was written
        finally:
            os.close(fd)
        fsync_directory(str(future))
        live = self.dest_root / source.directory.name
        os.rename(future, live)  # step 2: from here the copy is the partition's log
        fsync_directory(str(self.dest_root))
        return live

    def retire_source(self) -> Path | None:
        """Step 3: rename the source out of sight; None if its directory would not go
        (a failing disk: the next open prefers the copy by its marker)."""
        source_dir = self.source.directory
        doomed = source_dir.with_name(f"{source_dir.name}.{self.id}-delete")
        try:
            os.rename(source_dir, doomed)
            fsync_directory(str(source_dir.parent))
        except OSError:
            return None
        return doomed

    def discard(self) -> None:
        """Remove the incomplete copy."""
        shutil.rmtree(self.future, ignore_errors=True)
