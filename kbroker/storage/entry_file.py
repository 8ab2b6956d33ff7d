"""The on-disk side of a sparse index: fixed-size entries appended, or rewritten whole.

The offset and time indexes keep their entries in memory as two parallel arrays and
differ only in what the columns hold and how an entry is packed; writing them out is
the same job, done here once, as is reading them back. So is the whole-file write that checkpoints and snapshots
use to replace themselves.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence


class IndexCorruptError(Exception):
    """An index file that does not describe its segment; rebuild it from the log."""


def read_entries(path: str, entry: struct.Struct) -> bytes:
    """The whole file of `entry`-sized entries; IndexCorruptError when it is missing or
    its size is not a whole number of entries."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError as exc:
        raise IndexCorruptError(f"{path} missing") from exc
    if len(data) % entry.size:
        raise IndexCorruptError(f"{path} size {len(data)} is not a multiple of {entry.size}")
    return data


def write_file(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def replace_file(path: str, data: bytes) -> None:
    """Write `data` beside `path` and rename it over `path`: readers see the old file or
    the new one, never half of either (checkpoints, snapshots)."""
    tmp = path + ".tmp"
    write_file(tmp, data)
    os.replace(tmp, path)


def append_entries(
    path: str,
    entry: struct.Struct,
    first: Sequence[int],
    second: Sequence[int],
    persisted: int,
    create: bool,
) -> int:
    """Write the entries from index `persisted` on at their place in the file (the same
    bytes at the same place, so a repeat is harmless); returns how many are now on disk,
    or -1 when nothing was written. `create` makes an empty file for an empty index."""
    end = len(first)
    if persisted >= end:
        if create and end == 0 and not os.path.exists(path):
            write_file(path, b"")
            return 0
        return -1
    data = b"".join(entry.pack(first[i], second[i]) for i in range(persisted, end))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, persisted * entry.size)
    finally:
        os.close(fd)
    return end


def rewrite_entries(
    path: str, entry: struct.Struct, first: Sequence[int], second: Sequence[int]
) -> int:
    """Write every entry afresh (after a rebuild or truncation); returns the count."""
    write_file(path, b"".join(entry.pack(a, b) for a, b in zip(first, second, strict=True)))
    return len(first)
