"""Crash-safe replacement of sealed segments by their cleaned copy (Kafka's .swap protocol).

The cleaner writes a group of segments' surviving batches to `<base>.log.cleaned` (with
`.index.cleaned` and `.timeindex.cleaned`), fsyncs them, and then commits:

1. renames the three `.cleaned` files to `.swap`, the log file last: from the moment
   `<base>.log.swap` exists the cleaned copy is the truth;
2. renames every file of the replaced segments to `.deleted`;
3. renames the `.swap` files to their final names, indexes first.

A crash before step 1 leaves `.cleaned` files, which opening removes: the old segments
are intact. A crash after it leaves `<base>.log.swap`, which `complete_swaps` finishes on
the next open: it removes the old segments that the swap file covers and renames it in.
"Covers" means a base offset inside [base, offset after the swap's last batch); an old
segment of the group past that (its every record was compacted away) is kept, which
loses nothing: it only stays uncleaned until the next pass.
"""

from __future__ import annotations

import contextlib
import os
import re

from kbroker.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, scan_batches

CLEANED = ".cleaned"
SWAP = ".swap"
DELETED = ".deleted"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

_LOG_SWAP_RE = re.compile(r"^(\d{20})\.log\.swap$")
_SEGMENT_RE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


def segment_path(directory: str, base_offset: int, suffix: str, extra: str = "") -> str:
    return f"{directory}/{base_offset:020d}{suffix}{extra}"


def _rename(src: str, dst: str) -> bool:
    try:
        os.replace(src, dst)
    except FileNotFoundError:
        return False
    return True


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def commit_group(directory: str, base_offset: int, old_bases: list[int]) -> list[str]:
    """Steps 1-3 for one cleaned group; returns the `.deleted` paths left to unlink.

    Only renames: cheap metadata operations, safe to run on the event loop.
    """
    d = directory
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
        if (
            not _rename(
                segment_path(d, base_offset, suffix, CLEANED),
                segment_path(d, base_offset, suffix, SWAP),
            )
            and suffix == LOG_SUFFIX
        ):
            raise FileNotFoundError(segment_path(d, base_offset, suffix, CLEANED))
    doomed: list[str] = []
    for base in old_bases:
        for suffix in SUFFIXES:
            src = segment_path(d, base, suffix)
            if _rename(src, src + DELETED):
                doomed.append(src + DELETED)
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
        _rename(segment_path(d, base_offset, suffix, SWAP), segment_path(d, base_offset, suffix))
    return doomed


def discard_cleaned(directory: str, base_offset: int) -> None:
    """Drop an uncommitted cleaned copy."""
    for suffix in SUFFIXES:
        _unlink(segment_path(directory, base_offset, suffix, CLEANED))


def complete_swaps(directory: str) -> int:
    """Finish every swap a crash interrupted (run before the segments are listed);
    returns how many were completed."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    swaps = sorted(int(m.group(1)) for n in names if (m := _LOG_SWAP_RE.match(n)))
    if not swaps:
        return 0
    bases = sorted(
        {int(m.group(1)) for n in names if (m := _SEGMENT_RE.match(n)) and m.group(2) == "log"}
    )
    for base in swaps:
        swap_path = segment_path(directory, base, LOG_SUFFIX, SWAP)
        end = _next_offset(swap_path, base)
        for old in bases:
            if base < old < end:
                for suffix in SUFFIXES:
                    _unlink(segment_path(directory, old, suffix))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            final = segment_path(directory, base, suffix)
            if not _rename(segment_path(directory, base, suffix, SWAP), final):
                _unlink(final)  # may describe the old segment: rebuilt from the log
        os.replace(swap_path, segment_path(directory, base, LOG_SUFFIX))
    fsync_directory(directory)
    return len(swaps)


def _next_offset(path: str, base: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        end = base
        for h in scan_batches(fd, 0, os.fstat(fd).st_size):
            end = h.base_offset + h.last_offset_delta + 1
        return end
    finally:
        os.close(fd)


def fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
