"""Loading a partition's log directory at open (Kafka's LogLoader).

A clean close leaves a checkpoint (kbroker.storage.checkpoint) that lets the next open
skip every scan: one small read and one stat of the active segment. After a crash the
segments from the one holding the recovery point on are scanned and validated, the log
is truncated at the first bad batch, every segment after it is dropped, and the leader
epoch cache loses the epochs past the new end. Files a crash left half-made (temporary,
deleted and cleaned copies, indexes without a segment) are removed first, and a cleaner
swap cut short is finished. The producer state is rebuilt by PartitionLog.open from the
segments loaded here.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from kbroker.protocol.batch import BatchHeader
from kbroker.storage.checkpoint import CHECKPOINT_FILE, read_checkpoint
from kbroker.storage.leader_epoch import LeaderEpochCache
from kbroker.storage.segment import Segment, remove_file
from kbroker.storage.segment_swap import complete_swaps

SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
STALE_SUFFIXES = (".tmp", ".deleted", ".cleaned", ".swap")


@dataclass(slots=True)
class LoadedLog:
    """What the directory holds, as the log starts from it."""

    segments: list[Segment]
    bases: list[int]  # each segment's base offset, in order
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    recovery_point: int
    new_files: bool = False  # directory entries not yet fsynced
    checkpoint_clean: bool = False  # the checkpoint on disk still says "clean"
    opened_cleanly: bool = True  # False when the segments had to be scanned
    recovered_bytes: int = 0  # bytes truncated by recovery
    stale_checkpoint: bool = False  # claims a clean close the files deny: write it again


def load_log(
    directory: str, index_interval: int, epochs: Callable[[], LeaderEpochCache], now_ms: int
) -> LoadedLog:
    """Load the segments in `directory`, recovering them when the last close was not
    clean; an empty directory starts a log where its checkpoint (if any) says. `epochs`
    gives the leader epoch cache, read only when recovering."""
    complete_swaps(directory)  # a cleaner swap cut short by a crash: finish it before listing
    bases: list[int] = []
    index_files: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        m = SEGMENT_RE.match(name)
        if m is None:
            if name.endswith(STALE_SUFFIXES) and name != CHECKPOINT_FILE:
                remove_file(os.path.join(directory, name))
            continue
        if m.group(2) == "log":
            bases.append(int(m.group(1)))
        else:
            index_files.append((int(m.group(1)), name))
    bases.sort()
    if index_files:
        have = set(bases)
        for base, name in index_files:
            if base not in have:
                remove_file(os.path.join(directory, name))
    checkpoint = read_checkpoint(directory)
    if not bases:
        start = 0
        if checkpoint is not None:
            start = max(checkpoint.log_start_offset, 0)
            if checkpoint.clean is not None:
                start = max(start, checkpoint.clean.log_end_offset)
        seg = Segment.create(directory, start, now_ms, index_interval)
        return LoadedLog([seg], [start], start, start, start, start, new_files=True)
    segments = [Segment(directory, b, now_ms, index_interval) for b in bases]
    clean = checkpoint.clean if checkpoint is not None else None
    active = segments[-1]
    if clean is not None and clean.active_base_offset == active.base_offset:
        try:
            size = os.stat(active.log_path).st_size
        except FileNotFoundError:
            size = -1
        if size != clean.active_size:
            clean = None
    else:
        clean = None
    loaded = LoadedLog(segments, bases, 0, 0, 0, 0)
    if clean is not None:
        active.size = clean.active_size
        active.next_offset = clean.log_end_offset
        loaded.log_end_offset = loaded.recovery_point = clean.log_end_offset
        loaded.checkpoint_clean = True
    else:
        loaded.opened_cleanly = False
        recovery_point = checkpoint.recovery_point if checkpoint is not None else 0
        recover(loaded, recovery_point, epochs())
        loaded.recovery_point = min(recovery_point, loaded.log_end_offset)
        loaded.stale_checkpoint = checkpoint is not None and checkpoint.clean is not None
    lso = checkpoint.log_start_offset if checkpoint is not None else 0
    loaded.log_start_offset = min(max(lso, loaded.bases[0]), loaded.log_end_offset)
    hw = checkpoint.high_watermark if checkpoint is not None else None
    end = loaded.log_end_offset
    loaded.high_watermark = end if hw is None else min(hw, end)
    return loaded


def recover(loaded: LoadedLog, recovery_point: int, epochs: LeaderEpochCache) -> None:
    """Scan and validate the segments that may hold unflushed data; truncate at the
    first bad batch and drop every segment after it."""
    segments, bases = loaded.segments, loaded.bases
    first = max(bisect_right(bases, recovery_point) - 1, 0)
    expected: int | None = None  # offsets before the recovery point are trusted
    truncated = 0
    before = epochs.entries()

    def note_epoch(h: BatchHeader) -> None:
        if h.partition_leader_epoch > epochs.latest_epoch:
            epochs.assign(h.partition_leader_epoch, h.base_offset)

    i = first
    while i < len(segments):
        seg = segments[i]
        result = seg.recover(expected, note_epoch)
        truncated += result.truncated_bytes
        if result.next_offset is not None:
            expected = result.next_offset
        if result.truncated_bytes and i + 1 < len(segments):
            for later in segments[i + 1 :]:
                truncated += later.size
                later.delete()
            del segments[i + 1 :]
            del bases[i + 1 :]
            break
        i += 1
    active = segments[-1]
    if active.next_offset is None:
        # Empty active segment: it was created at the log end offset.
        active.next_offset = active.base_offset
    loaded.log_end_offset = active.next_offset
    loaded.recovered_bytes = truncated
    epochs.truncate_from_end(loaded.log_end_offset)
    if epochs.entries() != before:
        epochs.persist()
