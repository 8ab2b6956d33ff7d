"""LogManager: every partition log of this broker across its log directories.

Besides opening, creating and deleting logs it runs the two background duties of a
Kafka log manager: retention, in small steps that yield to the event loop between
partitions, and fsyncs in worker threads. Concurrent waiters for an fsync of the same
log share one (group commit); that acknowledgement fsync runs on the loop itself for as
long as the disk answers it within a millisecond, where a worker would only add latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import resource
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kbroker.long_lived import PARTITIONS_BETWEEN_FREEZES, freeze_survivors
from kbroker.storage.cleaner import CleanerConfig, CompactionSettings, LogCleaner
from kbroker.storage.config import LogConfig
from kbroker.storage.dir_failures import RESOURCE_ERRNOS, LogDirFailureChannel
from kbroker.storage.errors import LogClosedError
from kbroker.storage.log import PartitionLog, parse_partition_dir
from kbroker.storage.log_move import (
    FUTURE_SUFFIX,
    IoThrottle,
    LogMove,
    MoveCancelled,
    marker_time,
)
from kbroker.storage.meta_properties import MetaPropertiesError, ensure_meta_properties
from kbroker.storage.partition_metadata import read_topic_id, write_topic_id

log = logging.getLogger("kbroker.storage")

DELETE_SUFFIX = "-delete"
CLEAN_SHUTDOWN_FILE = ".kbroker_cleanshutdown"
"""Written into every log directory by a clean stop, naming the broker epoch that
stopped (Kafka's .kafka_cleanshutdown); taken away at the next start."""
_OPEN_SLICE = 64  # partitions a worker opens before the loop registers them
_FLUSH_CHECKS_PER_SLICE = 200
INLINE_FSYNC_LIMIT_S = 0.001
# A move copies in worker rounds until what is left fits the last round on the loop.
MOVE_LAST_ROUND_BYTES = 1 << 20
MOVE_ROUNDS = 32
# Loop time one step of work over thousands of partitions may take before it yields.
LOOP_SLICE_S = 0.005


def _now_ms() -> int:
    return int(time.time() * 1000)


def spare_descriptors() -> int | None:
    """File descriptors this process may still open before a reserve (a tenth of
    RLIMIT_NOFILE, at least 64) kept for sockets, the metadata journal and segment rolls;
    None where that cannot be known."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    return soft - in_use - max(64, soft // 10)


def _remove_all(directories: list[Path]) -> None:
    for directory in directories:
        shutil.rmtree(directory, ignore_errors=True)


def _flush_quietly(plog: PartitionLog) -> OSError | None:
    try:
        plog.flush()
    except OSError as exc:
        return exc
    return None


class LogManager:
    def __init__(
        self, log_dirs: list[Path], *, flush_threads: int = 4, move_threads: int | None = None
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        # The topic each log's directory records it belongs to (partition_metadata.py).
        self.topic_ids: dict[tuple[str, int], uuid.UUID] = {}
        # Partitions per log directory, kept as logs come and go: placing a new log must
        # not cost a pass over every log (that made creating 10,000 partitions quadratic).
        # Keyed by path strings: pathlib's hashing costs a microsecond or more a call.
        self._placed: dict[str, int] = {str(d): 0 for d in self.log_dirs}
        # Logs of deleted topics whose directories are still to be renamed away.
        self._doomed: dict[str, PartitionLog] = {}
        # Partitions whose log could not be made or opened here, with why: offline on
        # this broker (Metadata does not offer them, Produce answers KAFKA_STORAGE_ERROR).
        self.failed: dict[tuple[str, int], str] = {}
        # Log directories an I/O error other than running out of descriptors came from:
        # reported offline by /health and /metrics.
        self.offline_dirs: dict[str, str] = {}
        self.directory_ids: dict[str, str] = {}  # log directory -> its meta.properties id
        # Where AlterReplicaLogDirs asked a partition not hosted yet to be placed.
        self.preferred_dirs: dict[tuple[str, int], Path] = {}
        self.moves: dict[tuple[str, int], LogMove] = {}
        self._move_tasks: dict[tuple[str, int], asyncio.Task[PartitionLog]] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._durable_waiters: dict[PartitionLog, list[Any]] = {}
        self._commit_scheduled = False
        self._commit_tasks: set[asyncio.Task[None]] = set()
        # Logs that need a background fsync or may come to (`PartitionLog.flush_pending`):
        # the flusher looks at these only, and sleeps while there are none.
        self._flush_due: set[PartitionLog] = set()
        self._flush_wake = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._move_executor: ThreadPoolExecutor | None = None
        self._move_threads = move_threads or len(self.log_dirs)
        # replica.alter.log.dirs.io.max.bytes.per.second, shared by every move (the
        # broker sets its bound, and changes it with the dynamic config).
        self.move_throttle = IoThrottle()
        self._flush_threads = flush_threads
        self._inline_fsync = True  # acknowledgement fsyncs on the loop while they are quick
        self.cleaner: LogCleaner | None = None
        # Called with the partitions whose logs a failing log directory took out of
        # service (the replica manager drops its replicas of them).
        self.dir_failure_listeners: list[Callable[[list[tuple[str, int]]], None]] = []
        # Where every I/O error from a log in service goes, whoever met it: it takes the
        # log's directory offline (`fail_dir`) unless the process ran out of resources.
        self.dir_failures = LogDirFailureChannel(self.fail_dir)
        # Called once, when the last log directory in service has failed: the broker
        # then halts, as Kafka's does (it can serve no partition and must not pretend to).
        self.all_dirs_failed: Callable[[], None] | None = None
        # The log directory that also holds the metadata journal (metadata.log.dir left
        # to its default, the first of log.dirs), and what is called, once, with the
        # reason when it fails: the broker halts, as Kafka's does when its metadata log
        # directory fails.
        self.metadata_dir: str | None = None
        self.metadata_dir_failed: Callable[[str], None] | None = None
        self._all_failed_reported = False
        # Partitions whose log directory failed under them: no new log is made for them
        # until a restart (their data is on that disk; Kafka keeps them offline too).
        self._lost: set[tuple[str, int]] = set()

    # -- opening -----------------------------------------------------------------------------

    def check_directories(self, cluster_id: str, node_id: int) -> None:
        """Make each log directory and check (or write) its meta.properties. A directory
        that cannot be read or written is offline from the start (Kafka starts on the
        rest); one of another cluster or node stops the start (MetaPropertiesError), as
        does having no usable directory at all."""
        seen: dict[str, Path] = {}
        for root in self.log_dirs:
            try:
                meta = ensure_meta_properties(root, cluster_id, node_id)
            except OSError as exc:
                self.offline_dirs[str(root)] = f"{type(exc).__name__}: {exc}"
                log.error("log directory %s is offline: %s", root, exc)
                continue
            if meta.directory_id in seen:
                raise MetaPropertiesError(
                    f"{root} and {seen[meta.directory_id]} have the same directory.id "
                    f"{meta.directory_id}"
                )
            seen[meta.directory_id] = root
            self.directory_ids[str(root)] = meta.directory_id
        if len(self.offline_dirs) == len(self.log_dirs):
            raise OSError(errno.EIO, "none of the log directories can be used")
        self._check_metadata_dir_at_start()

    def _check_metadata_dir_at_start(self) -> None:
        """Kafka does not start when its metadata log directory cannot be used."""
        if self.metadata_dir is not None and self.metadata_dir in self.offline_dirs:
            raise OSError(
                errno.EIO,
                f"the metadata log directory {self.metadata_dir} cannot be used: "
                f"{self.offline_dirs[self.metadata_dir]}",
            )

    def load_all(self, config_for: Callable[[str, int], LogConfig], now_ms: int) -> None:
        """Open every partition directory found in every log directory; finish deletions
        and drop the incomplete copies of moves a crash interrupted."""
        started = time.monotonic()
        found: dict[tuple[str, int], list[Path]] = {}
        for root in self.log_dirs:
            if str(root) in self.offline_dirs:
                continue
            try:
                root.mkdir(parents=True, exist_ok=True)
                with os.scandir(root) as entries:
                    dirs = [e for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError as exc:
                self.offline_dirs[str(root)] = f"{type(exc).__name__}: {exc}"
                log.error("log directory %s is offline: %s", root, exc)
                self._check_metadata_dir_at_start()
                continue
            for entry in dirs:
                if entry.name.endswith((DELETE_SUFFIX, FUTURE_SUFFIX)):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    continue
                parsed = parse_partition_dir(entry.name)
                if parsed is not None:
                    found.setdefault(parsed, []).append(Path(entry.path))
        for parsed, paths in found.items():
            if len(paths) > 1:
                # A move cut short between its two renames: both copies are whole; the
                # one moved in last (see log_move) is the partition's log.
                paths.sort(key=marker_time, reverse=True)
                for stale in paths[1:]:
                    log.warning("%s is also in %s: removing the older copy", stale, paths[0])
                    shutil.rmtree(stale, ignore_errors=True)
            parent = str(paths[0].parent)
            if parent in self.offline_dirs:
                continue
            try:
                plog = PartitionLog.open(paths[0], config_for(*parsed), now_ms)
            except OSError as exc:
                if exc.errno in RESOURCE_ERRNOS:
                    raise
                self._offline_at_start(parent, exc)
                continue
            topic_id = read_topic_id(paths[0])
            if topic_id is not None:
                self.topic_ids[parsed] = topic_id
            if plog.recovered_bytes:
                log.warning(
                    "recovered %s-%d: truncated %d bytes of torn or corrupt data",
                    plog.topic,
                    plog.partition,
                    plog.recovered_bytes,
                )
            self._add(parsed, plog)
        recovered = sum(1 for plog in self._logs.values() if not plog.opened_cleanly)
        if self._logs:
            log.info(
                "opened %d partition logs in %.2fs: %d after a clean shutdown, %d recovered",
                len(self._logs),
                time.monotonic() - started,
                len(self._logs) - recovered,
                recovered,
            )

    def _offline_at_start(self, root: str, exc: OSError) -> None:
        """An I/O error opening a log of directory `root` at start (a full disk meets the
        producer-state snapshot or index rebuild that recovery writes): the directory
        is offline from the start, as one check_directories finds unusable, and the
        broker starts on the rest, as Kafka's LogManager does when a directory's logs
        fail to load. Logs already opened from it are closed without a write."""
        self.offline_dirs[root] = f"{type(exc).__name__}: {exc}"
        log.error("log directory %s is offline: %s", root, exc)
        for key in self._keys_in(root):
            plog = self._withdraw(key)
            if plog is not None:
                plog.delete(remove_files=False)
        self._check_metadata_dir_at_start()
        if len(self.offline_dirs) == len(self.log_dirs):
            raise OSError(errno.EIO, "none of the log directories can be used")

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def record_failure(self, topic: str, partition: int, directory: Path, exc: OSError) -> str:
        """A partition's log could not be made or opened: remember it (and, unless the
        process merely ran out of file descriptors, its directory) as failing; one log
        line says so. Returns the reason."""
        reason = f"{type(exc).__name__}: {exc}"
        first = not self.failed
        self.failed[(topic, partition)] = reason
        if exc.errno in RESOURCE_ERRNOS:
            if first:
                log.error(
                    "cannot open partition logs (first %s-%d): %s; they stay offline",
                    topic,
                    partition,
                    reason,
                )
        else:
            root = str(directory.parent)
            if root not in self.offline_dirs:
                self.offline_dirs[root] = reason
                log.error("log directory %s is failing: %s", root, reason)
                self._check_all_failed()
        return reason

    def fail_dir(self, root: str, reason: str) -> list[tuple[str, int]]:
        """Take log directory `root` offline, as Kafka does on an I/O error in it.

        Every log in it leaves service at once, closed without a clean-shutdown
        checkpoint (the next start recovers it) and without further writes; its
        partitions are offline here with `reason` (Produce and Fetch answer
        KAFKA_STORAGE_ERROR, Metadata shows them without this leader); no new log is
        placed in the directory; /health and /metrics report it. The listeners drop
        their replicas of those partitions. Returns the partitions taken out."""
        if root not in self.offline_dirs:
            self.offline_dirs[root] = reason
            log.error(
                "log directory %s is offline: %s; its partitions are offline here", root, reason
            )
        lost = self._keys_in(root)
        for key in lost:
            plog = self._withdraw(key)
            self.failed[key] = reason
            self._lost.add(key)
            if plog is not None:
                plog.delete(remove_files=False)  # closes the files, writes nothing
        for listener in self.dir_failure_listeners:
            listener(lost)
        self._check_all_failed()
        return lost

    def replica_offline(self, topic: str, partition: int, held_before: bool) -> bool:
        """Whether this broker's replica of the partition is offline with a log
        directory: the directory failed under its log, or the replica was held before
        this start (`held_before`), has no log, and a directory is offline (its data may
        be there, so `create` makes no empty log for it)."""
        key = (topic, partition)
        if key in self._lost:
            return True
        return held_before and bool(self.offline_dirs) and key not in self._logs

    def _check_all_failed(self) -> None:
        """After a directory went offline: every one has failed, or the one holding the
        metadata journal has (checked in that order, as Kafka does); each is told once."""
        if self._all_failed_reported:
            return
        if all(str(d) in self.offline_dirs for d in self.log_dirs):
            self._all_failed_reported = True
            if self.all_dirs_failed is not None:
                self.all_dirs_failed()
        elif self.metadata_dir is not None and self.metadata_dir in self.offline_dirs:
            self._all_failed_reported = True
            if self.metadata_dir_failed is not None:
                self.metadata_dir_failed(self.offline_dirs[self.metadata_dir])

    def create(
        self,
        topic: str,
        partition: int,
        config: LogConfig,
        now_ms: int | None = None,
        is_new: bool = True,
    ) -> PartitionLog:
        """Open the log, creating it in the log directory holding the fewest partitions.
        A partition that is not new (it was assigned here before this start) gets no
        empty log while a log directory is offline: its data may be on that disk (Kafka
        keeps such a replica offline instead)."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        now = _now_ms() if now_ms is None else now_ms
        if key in self._lost:
            raise OSError(
                errno.EIO, f"the log directory of {topic}-{partition} failed: {self.failed[key]}"
            )
        directory = self._place(topic, partition)
        if not is_new and self.offline_dirs:
            exc = OSError(
                errno.EIO,
                f"cannot create a log for {topic}-{partition}: log directories "
                f"{', '.join(sorted(self.offline_dirs))} are offline",
            )
            self.failed[key] = f"{type(exc).__name__}: {exc}"
            raise exc
        self._clear_path(directory)
        try:
            plog = PartitionLog.open(directory, config, now)
        except OSError as exc:
            self.record_failure(topic, partition, directory, exc)
            raise
        self.failed.pop(key, None)
        self._add(key, plog)
        return plog

    def online_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if str(d) not in self.offline_dirs] or self.log_dirs

    def _place(self, topic: str, partition: int) -> Path:
        """Where a new log goes: the directory AlterReplicaLogDirs named for it, else the
        online log directory holding the fewest partitions (Kafka's placement)."""
        preferred = self.preferred_dirs.pop((topic, partition), None)
        if preferred is not None and str(preferred) not in self.offline_dirs:
            return preferred / f"{topic}-{partition}"
        root = min(self.online_dirs(), key=lambda d: self._placed[str(d)])
        return root / f"{topic}-{partition}"

    def _keys_in(self, root: str) -> list[tuple[str, int]]:
        """The partitions whose logs are open in log directory `root`."""
        return [key for key, plog in self._logs.items() if os.path.dirname(plog._dir) == root]

    def log_dir_of(self, plog: PartitionLog) -> Path | None:
        """The configured log directory holding `plog`."""
        parent = os.path.dirname(plog._dir)
        for root in self.log_dirs:
            if str(root) == parent:
                return root
        return None

    def _add(self, key: tuple[str, int], plog: PartitionLog) -> None:
        self._logs[key] = plog
        self._watch_flushes(plog)
        parent = os.path.dirname(plog._dir)
        if parent in self._placed:
            self._placed[parent] += 1

    async def create_many(
        self,
        topic: str,
        partitions: Iterable[int],
        config: LogConfig,
        *,
        threads: int = 2,
        prepare: Callable[[int, PartitionLog], None] | None = None,
    ) -> dict[int, PartitionLog | OSError]:
        """Open or create the logs of many partitions of one topic without holding the
        event loop: the file work (directories, segment and index files, checkpoints)
        runs in worker threads, a slice of partitions at a time, and each log joins the
        manager on the loop as its slice completes. `prepare(partition, log)` runs in the
        worker on each new log before the loop sees it: file work the caller would
        otherwise do on the loop (a leader's first epoch checkpoint). A partition whose
        files cannot be made (no space, no descriptors, a failing disk) comes back as
        its OSError and is not added."""
        loop = asyncio.get_running_loop()
        now = _now_ms()
        pending: list[tuple[int, Path]] = []  # (partition, the log directory it goes to)
        results: dict[int, PartitionLog | OSError] = {}
        online = self.online_dirs()
        placed = {d: self._placed[str(d)] for d in online}
        single = online[0] if len(online) == 1 else None
        slice_began = time.perf_counter()
        for count, partition in enumerate(partitions):
            if count % 256 == 255 and time.perf_counter() - slice_began > LOOP_SLICE_S:
                await asyncio.sleep(0)
                slice_began = time.perf_counter()
            existing = self._logs.get((topic, partition))
            if existing is not None:
                results[partition] = existing
                continue
            preferred = self.preferred_dirs.pop((topic, partition), None)
            if preferred is not None and preferred in placed:
                root = preferred
            else:
                root = single or min(online, key=lambda d: placed[d])
            placed[root] += 1
            if self._doomed:
                self._clear_path(root / f"{topic}-{partition}")
            pending.append((partition, root))

        def open_slice(items: list[tuple[int, Path]]) -> list[tuple[int, PartitionLog | OSError]]:
            opened: list[tuple[int, PartitionLog | OSError]] = []
            for partition, root in items:
                try:
                    plog = PartitionLog.open(root / f"{topic}-{partition}", config, now)
                    if prepare is not None:
                        try:
                            prepare(partition, plog)
                        except OSError:
                            plog.close()
                            raise
                    opened.append((partition, plog))
                except OSError as exc:
                    opened.append((partition, exc))
            return opened

        spare = spare_descriptors()
        if spare is not None and len(pending) > spare:
            # Each new log holds a descriptor: past the spare ones, a partition fails now
            # rather than leaving the broker no descriptor for a client or its journal.
            short = OSError(
                errno.EMFILE,
                f"too many open files: {spare} descriptors were left before the "
                f"reserve kept for connections and the metadata journal",
            )
            refused = pending[max(spare, 0) :]
            pending = pending[: max(spare, 0)]
            reason = self.record_failure(
                topic, refused[0][0], refused[0][1] / f"{topic}-{refused[0][0]}", short
            )
            for partition, _ in refused:
                results[partition] = short
                self.failed[(topic, partition)] = reason
        roots = dict(pending)
        slices = [pending[i : i + _OPEN_SLICE] for i in range(0, len(pending), _OPEN_SLICE)]
        unfrozen = 0
        with ThreadPoolExecutor(threads, thread_name_prefix="kbroker-open") as pool:
            futures = [loop.run_in_executor(pool, open_slice, items) for items in slices]
            for future in futures:
                done = await future
                unfrozen += len(done)
                if unfrozen >= PARTITIONS_BETWEEN_FREEZES:
                    unfrozen = 0
                    freeze_survivors()  # long-lived: keep them out of full collections
                for partition, opened in done:
                    key = (topic, partition)
                    if isinstance(opened, PartitionLog):
                        self.failed.pop(key, None)
                        if key in self._logs:  # opened meanwhile by another path
                            opened.close()
                            opened = self._logs[key]
                        else:
                            self._add(key, opened)
                    else:
                        directory = roots[partition] / f"{topic}-{partition}"
                        self.record_failure(topic, partition, directory, opened)
                    results[partition] = opened
        return results

    def logs(self) -> Iterable[PartitionLog]:
        return list(self._logs.values())

    def delete_topic(self, topic: str) -> None:
        """Take the topic's logs out of service at once; their directories are renamed out
        of sight and removed after, a slice at a time, so that deleting thousands of
        partitions does not hold the loop (a new log at one of those paths first renames
        the old directory away itself, see `_clear_path`). What must happen at once is
        that no lookup finds them: for a large topic the flush and placement bookkeeping
        of each log waits for its slice too (`_forget`)."""
        for key in [k for k in self.failed if k[0] == topic]:
            del self.failed[key]
            self._lost.discard(key)
        keys = [k for k in self._logs if k[0] == topic]
        if len(keys) <= _OPEN_SLICE:
            for key in keys:
                plog = self._withdraw(key)
                if plog is not None:
                    self._retire(plog)
            return
        logs, topic_ids, doomed_by_dir = self._logs, self.topic_ids, self._doomed
        doomed = [logs.pop(key) for key in keys]
        for key in keys:
            topic_ids.pop(key, None)
        for plog in doomed:
            doomed_by_dir[plog._dir] = plog
        try:
            task = asyncio.get_running_loop().create_task(self._retire_slices(doomed))
        except RuntimeError:  # no loop (tools, tests): all at once
            for plog in doomed:
                self._retire_doomed(plog, remove=True)
            return
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def stamp(self, topic: str, partition: int, topic_id: uuid.UUID) -> None:
        """Record in the partition's directory which topic it belongs to (once)."""
        key = (topic, partition)
        plog = self._logs.get(key)
        if plog is None or self.topic_ids.get(key) == topic_id:
            return
        try:
            write_topic_id(plog.directory, topic_id)
        except OSError as exc:  # recorded next time; the log itself is unharmed
            log.warning("cannot record the topic id of %s-%d: %s", topic, partition, exc)
            return
        self.topic_ids[key] = topic_id

    def of_another_topic(self, topic: str, partition: int, topic_id: uuid.UUID | None) -> bool:
        """Whether the log held for (topic, partition) was recorded as belonging to
        another topic than `topic_id` (None: the name no longer names a topic): one of
        an earlier incarnation of the name, deleted while this broker was down."""
        recorded = self.topic_ids.get((topic, partition))
        return recorded is not None and recorded != topic_id

    def delete_log(self, topic: str, partition: int) -> None:
        plog = self._withdraw((topic, partition))
        if plog is not None:
            self._retire(plog)

    def _withdraw(self, key: tuple[str, int]) -> PartitionLog | None:
        plog = self._logs.pop(key, None)
        self.topic_ids.pop(key, None)
        if plog is not None:
            self._forget(plog)
        return plog

    def _forget(self, plog: PartitionLog) -> None:
        """A withdrawn log leaves the flusher's care and its directory's placement count."""
        plog.flush_watch = None
        self._flush_due.discard(plog)
        parent = os.path.dirname(plog._dir)
        if parent in self._placed:
            self._placed[parent] -= 1

    def _retire_doomed(self, plog: PartitionLog, remove: bool = False) -> None:
        """A log `delete_topic` left in `_doomed`: forgotten, renamed away and closed, once
        (by its slice or, first, by `_clear_path` for a new log at its path)."""
        if self._doomed.pop(plog._dir, None) is not None:
            self._forget(plog)
            self._retire(plog, remove=remove)

    async def _retire_slices(self, plogs: list[PartitionLog]) -> None:
        for start in range(0, len(plogs), _OPEN_SLICE):
            for plog in plogs[start : start + _OPEN_SLICE]:
                self._retire_doomed(plog)
            await asyncio.sleep(0)
        # Only what was renamed away: a log whose rename failed keeps its own path, where
        # a topic of the same name may have made a new log since.
        removed = [p.directory for p in plogs if p.directory.name.endswith(DELETE_SUFFIX)]
        threading.Thread(target=_remove_all, args=(removed,), daemon=True).start()

    def _clear_path(self, directory: Path) -> None:
        """A log is about to be made at `directory`: a deleted one still there goes first."""
        plog = self._doomed.get(str(directory))
        if plog is not None:
            self._retire_doomed(plog)

    def _retire(self, plog: PartitionLog, remove: bool = True) -> None:
        """Rename a withdrawn log's directory out of sight and close it; with `remove`,
        delete its files in a worker (unlinking gigabytes takes a while; a restart
        finishes the job)."""
        doomed = plog.directory.with_name(
            f"{plog.directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        )
        try:
            os.rename(plog.directory, doomed)
        except OSError as exc:
            doomed = plog.directory
            if not isinstance(exc, FileNotFoundError) and exc.errno not in RESOURCE_ERRNOS:
                # Kafka takes the directory offline when a deleted log cannot be renamed.
                self.fail_dir(os.path.dirname(plog._dir), f"{type(exc).__name__}: {exc}")
        plog.directory = doomed
        plog._dir = str(doomed)
        plog.delete(remove_files=False)
        if remove:
            threading.Thread(
                target=shutil.rmtree, args=(doomed,), kwargs={"ignore_errors": True}, daemon=True
            ).start()

    def take_clean_shutdown_marker(self) -> int:
        """The broker epoch the last clean stop recorded in every online log directory,
        or -1 when one lacks it (the broker was killed or halted, so its logs may have
        lost acknowledged records). The markers are removed: a crash from here on is
        not clean."""
        epochs: set[int] = set()
        missing = False
        for root in self.log_dirs:
            if str(root) in self.offline_dirs:
                continue
            marker = root / CLEAN_SHUTDOWN_FILE
            try:
                epochs.add(int(marker.read_text().strip()))
                marker.unlink()
            except (OSError, ValueError):
                missing = True
        if missing or len(epochs) != 1:
            return -1
        return epochs.pop()

    def write_clean_shutdown_marker(self, broker_epoch: int) -> None:
        """After close_all: record in every online log directory that this stop was
        clean, for the broker's next registration."""
        for root in self.log_dirs:
            if str(root) in self.offline_dirs:
                continue
            marker = root / CLEAN_SHUTDOWN_FILE
            try:
                with open(marker, "w") as f:
                    f.write(f"{broker_epoch}\n")
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                log.error("could not record a clean shutdown in %s: %s", root, exc)

    def close_all(self) -> None:
        """Flush and close every log, leaving clean-shutdown checkpoints. The fsyncs run
        in parallel threads: shutdown time is bounded by the disk, not by one queue."""
        for move in self.moves.values():
            move.cancelled.set()  # a copy left behind is removed by the next start
        for task in self._move_tasks.values():
            task.cancel()
        if self.cleaner is not None:
            self.cleaner.stop()  # abandons a pass in flight before its files close
        logs = list(self._logs.values())
        for plog in logs:
            plog.prepare_close()
        if len(logs) > 1:
            with ThreadPoolExecutor(
                max_workers=self._flush_threads, thread_name_prefix="kbroker-close"
            ) as pool:
                for plog, error in zip(logs, pool.map(_flush_quietly, logs), strict=True):
                    if error is not None:
                        log.error("flushing %s-%d failed: %s", plog.topic, plog.partition, error)
        for plog in logs:
            try:
                plog.close()
            except OSError:
                log.exception("closing %s-%d failed", plog.topic, plog.partition)
        self._logs.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        if self._move_executor is not None:
            self._move_executor.shutdown(wait=True)
            self._move_executor = None

    # -- moving a log to another log directory ------------------------------------------------

    def start_move(
        self,
        topic: str,
        partition: int,
        dest_root: Path,
        swapped: Callable[[PartitionLog], None],
    ) -> None:
        """Begin moving a hosted partition's log into `dest_root` (AlterReplicaLogDirs),
        in the background; `swapped(log)` is called, on the loop, with the log that
        serves the partition from then on. A move already under way elsewhere is
        called off first; asking for the directory the log is in (or bound for) is a
        no-op."""
        key = (topic, partition)
        plog = self._logs[key]
        current = self.moves.get(key)
        if current is not None:
            if current.dest_root == dest_root:
                return
            current.cancelled.set()
            self._move_tasks[key].cancel()
        if self.log_dir_of(plog) == dest_root:
            return
        move = LogMove(plog, dest_root, self.move_throttle)
        self.moves[key] = move
        task = asyncio.get_running_loop().create_task(self._move(key, move, swapped))
        self._move_tasks[key] = task

        def done(t: asyncio.Task[PartitionLog]) -> None:
            if self.moves.get(key) is move:
                del self.moves[key]
                del self._move_tasks[key]
            if t.cancelled():
                return
            exc = t.exception()
            if isinstance(exc, MoveCancelled):
                log.info("move of %s-%d to %s called off: %s", topic, partition, dest_root, exc)
            elif exc is not None:
                log.error("moving %s-%d to %s failed: %s", topic, partition, dest_root, exc)

        task.add_done_callback(done)

    async def _move(
        self, key: tuple[str, int], move: LogMove, swapped: Callable[[PartitionLog], None]
    ) -> PartitionLog:
        plog = move.source
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            for attempt in range(MOVE_ROUNDS):
                await self._run_flush(plog)  # rolled segments' indexes reach the disk
                steps = move.plan()
                if self._logs.get(key) is not plog:
                    raise MoveCancelled(f"{plog.directory} was deleted")
                pending = move.pending_bytes(steps)
                if pending <= MOVE_LAST_ROUND_BYTES or attempt == MOVE_ROUNDS - 1:
                    break
                work = loop.run_in_executor(self._movers(), move.copy, steps)
                try:
                    await asyncio.shield(work)
                except asyncio.CancelledError:
                    move.cancelled.set()
                    with contextlib.suppress(BaseException):
                        await work
                    raise
            if pending > MOVE_LAST_ROUND_BYTES:
                log.warning(
                    "%s-%d grows faster than it is copied: the last %d bytes of its move "
                    "are copied in one step",
                    *key,
                    pending,
                )
            # No await from the last plan to the swap: nothing can append in between.
            swap_started = time.monotonic()
            try:
                live = move.finish()
            except BaseException:
                if plog.closed and self._logs.get(key) is plog:
                    reopened = PartitionLog.open(plog.directory, plog.config, _now_ms())
                    self._logs[key] = reopened
                    self._watch_flushes(reopened)
                    swapped(reopened)
                raise
        except BaseException:
            move.discard()
            raise
        retired = move.retire_source()
        if retired is None:
            root = str(plog.directory.parent)
            self.offline_dirs.setdefault(root, f"cannot rename {plog.directory} away")
            log.error("log directory %s is failing: %s left behind", root, plog.directory)
            self._check_all_failed()
        try:
            moved = PartitionLog.open(live, plog.config, _now_ms())
        except OSError as exc:
            self._withdraw(key)
            self.record_failure(key[0], key[1], live, exc)
            raise
        self._withdraw(key)
        self._add(key, moved)
        swapped(moved)
        if retired is not None:
            threading.Thread(
                target=shutil.rmtree, args=(retired,), kwargs={"ignore_errors": True}, daemon=True
            ).start()
        log.info(
            "moved %s-%d to %s: %d bytes in %.2fs, the last step held the loop %.1f ms",
            key[0],
            key[1],
            move.dest_root,
            moved.size_bytes(),
            time.monotonic() - started,
            (time.monotonic() - swap_started) * 1000,
        )
        return moved

    def _movers(self) -> ThreadPoolExecutor:
        if self._move_executor is None:
            self._move_executor = ThreadPoolExecutor(
                self._move_threads, thread_name_prefix="kbroker-move"
            )
        return self._move_executor

    # -- retention -----------------------------------------------------------------------------

    def retention_pass(self, now_ms: int) -> int:
        """One synchronous pass over every log (tests, tools); returns bytes freed."""
        return sum(plog.apply_retention(now_ms) for plog in self.logs() if not plog.closed)

    async def run_cleaner(
        self,
        config: CleanerConfig,
        settings_for: Callable[[PartitionLog], CompactionSettings] | None = None,
    ) -> None:
        """Background task: the log cleaner, compacting logs whose cleanup.policy says so
        (`settings_for` gives a log's compaction topic configs)."""
        self.cleaner = LogCleaner(
            self.logs, config, settings_for, on_io_error=self.dir_failures.report
        )
        await self.cleaner.run()

    async def run_retention(self, interval_s: float) -> None:
        """Background task: apply retention to each log in turn, yielding between logs."""
        while True:
            for plog in self.logs():
                if plog.closed:
                    continue
                try:
                    freed = plog.apply_retention(_now_ms())
                except LogClosedError:
                    continue  # deleted, moved or taken offline meanwhile
                except OSError as exc:
                    # Deleting segments failed: the directory cannot be trusted (Kafka
                    # hands such an error to its LogDirFailureChannel).
                    self.dir_failures.report(plog, exc)
                except Exception:
                    log.exception("retention of %s-%d failed", plog.topic, plog.partition)
                else:
                    if freed:
                        log.info(
                            "retention freed %d bytes of %s-%d (log start offset %d)",
                            freed,
                            plog.topic,
                            plog.partition,
                            plog.log_start_offset,
                        )
                await asyncio.sleep(0)
            await asyncio.sleep(interval_s)

    # -- flushing -------------------------------------------------------------------------------

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self._flush_threads, thread_name_prefix="kbroker-fsync"
            )
        return self._executor

    def when_durable(self, plog: PartitionLog, done: Callable[[OSError | None], None]) -> None:
        """Call `done(None)` once everything appended to `plog` so far is fsynced, or
        `done(error)` if the fsync failed (group commit).

        Every caller of one loop iteration shares one fsync per log: the commit runs
        once the iteration's ready callbacks are through, so all the appends that one
        read of the sockets produced ride on it, and `done` is called straight from it,
        with no task or future in between.
        """
        if plog.closed or plog.flushed_offset >= plog.log_end_offset:
            done(None)
            return
        self._durable_waiters.setdefault(plog, []).append((plog.log_end_offset, done))
        if not self._commit_scheduled:
            self._commit_scheduled = True
            asyncio.get_running_loop().call_soon(self._commit)

    async def flush_for_ack(self, plog: PartitionLog) -> None:
        """Return once everything appended to `plog` before the call is fsynced."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def settle(error: OSError | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        self.when_durable(plog, settle)
        await future

    def _commit(self) -> None:
        self._commit_scheduled = False
        pending, self._durable_waiters = self._durable_waiters, {}
        for plog, waiters in pending.items():
            if not self._inline_fsync:
                task = asyncio.ensure_future(self._commit_in_worker(plog, waiters))
                self._commit_tasks.add(task)
                task.add_done_callback(self._commit_tasks.discard)
                continue
            try:
                self._flush_inline(plog)
            except OSError as exc:
                self.dir_failures.report(plog, exc)
                self._notify(plog, waiters, exc)
            else:
                self._notify(plog, waiters, None)

    async def _commit_in_worker(self, plog: PartitionLog, waiters: list[Any]) -> None:
        try:
            await self._run_flush(plog, data_only=True)
        except OSError as exc:
            self.dir_failures.report(plog, exc)
            self._notify(plog, waiters, exc)
        else:
            self._notify(plog, waiters, None)

    def _notify(self, plog: PartitionLog, waiters: list[Any], error: OSError | None) -> None:
        for target, done in waiters:
            if error is None and not plog.closed and plog.flushed_offset < target:
                self.when_durable(plog, done)  # appended while a worker's fsync ran
            else:
                done(error)

    def _flush_inline(self, plog: PartitionLog) -> None:
        """The acknowledgement fsync on the loop thread, while this disk's fsyncs are quick.

        Handing an fsync to a worker costs two thread wake-ups and GIL hand-offs, about
        100 us of CPU and latency each time (measured here: fdatasync of a small append
        136 us inline, 240-264 us through an executor). While an fsync takes under
        INLINE_FSYNC_LIMIT_S the loop is better off waiting for it; one slower fsync
        sends them back to worker threads until a worker's fsync is quick again.
        """
        job = plog.prepare_flush(data_only=True)
        if job is None:
            return
        try:
            job.run_on_owner_thread()
        except BaseException:
            plog.abort_flush(job)
            raise
        self._inline_fsync = job.seconds < INLINE_FSYNC_LIMIT_S
        plog.complete_flush(job)

    async def _run_flush(self, plog: PartitionLog, data_only: bool = False) -> None:
        job = plog.prepare_flush(data_only)
        if job is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool(), job.run)
        except BaseException:
            plog.abort_flush(job)
            raise
        if data_only:
            self._inline_fsync = job.seconds < INLINE_FSYNC_LIMIT_S
        plog.complete_flush(job)

    def _watch_flushes(self, plog: PartitionLog) -> None:
        plog.flush_watch = self._flush_soon
        self._flush_soon(plog)  # a log recovered at open may have segments to fsync

    def _flush_soon(self, plog: PartitionLog) -> None:
        self._flush_due.add(plog)
        if not self._flush_wake.is_set():
            self._flush_wake.set()

    async def run_flusher(self, interval_s: float = 0.05) -> None:
        """Background task: fsync logs whose flush.messages / flush.ms policy asks for it,
        and segments rolled since the last fsync, without blocking the loop.

        It looks every `interval_s` at the logs that need an fsync or may come to (their
        appends, rolls and config changes tell it), not at every log, and sleeps while
        there are none: an idle broker's flusher does not wake."""
        due = self._flush_due
        while True:
            if not due:
                self._flush_wake.clear()
                await self._flush_wake.wait()
            await asyncio.sleep(interval_s)
            now = _now_ms()
            for count, plog in enumerate(list(due)):
                if count % _FLUSH_CHECKS_PER_SLICE == _FLUSH_CHECKS_PER_SLICE - 1:
                    await asyncio.sleep(0)  # thousands of logs: never one long step
                if not plog.closed and plog.needs_flush(now):
                    try:
                        await self._run_flush(plog)
                    except OSError as exc:
                        log.error("fsync of %s-%d failed: %s", plog.topic, plog.partition, exc)
                        self.dir_failures.report(plog, exc)
                if not plog.flush_pending():
                    due.discard(plog)  # until an append, a roll or a config change
