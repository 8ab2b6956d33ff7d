"""Sparse time index of one segment: max timestamp so far -> offset where it was reached.

12-byte entries (timestamp i64, relative offset u32, big-endian), added alongside
offset-index entries only when the segment's max timestamp has grown, plus a final
entry when the segment stops being active, so the last entry is the segment's
largest timestamp. A lookup for T gives an offset before which no batch has a
timestamp >= T; the log then scans forward from there.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right

from kbroker.storage.entry_file import (
    IndexCorruptError,
    append_entries,
    read_entries,
    rewrite_entries,
)

ENTRY_SIZE = 12
_ENTRY = struct.Struct(">qI")
_LITTLE = sys.byteorder == "little"


class TimeIndex:
    __slots__ = ("path", "base_offset", "timestamps", "offsets", "persisted")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.timestamps = array("q")  # strictly increasing
        self.offsets = array("I")  # relative offsets, non-decreasing
        self.persisted = 0

    @classmethod
    def load(cls, path: str, base_offset: int) -> TimeIndex:
        idx = cls(path, base_offset)
        data = read_entries(path, _ENTRY)
        n = len(data) // ENTRY_SIZE
        ts = array("q")
        offs = array("I")
        for t, o in _ENTRY.iter_unpack(data):
            ts.append(t)
            offs.append(o)
        if n and (ts[-1] < ts[0] or offs[-1] < offs[0]):
            raise IndexCorruptError(f"{path} entries out of order")
        idx.timestamps, idx.offsets, idx.persisted = ts, offs, n
        return idx

    @staticmethod
    def read_last(path: str) -> tuple[int, int] | None:
        """(timestamp, relative offset) of the last entry, reading only that entry."""
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size % ENTRY_SIZE:
                raise IndexCorruptError(f"{path} size {size} is not a multiple of {ENTRY_SIZE}")
            if size == 0:
                return None
            return _ENTRY.unpack(os.pread(fd, ENTRY_SIZE, size - ENTRY_SIZE))
        finally:
            os.close(fd)

    def __len__(self) -> int:
        return len(self.timestamps)

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if timestamp > (self.timestamps[-1] if self.timestamps else -1):
            self.timestamps.append(timestamp)
            self.offsets.append(offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset to start scanning from for the first batch with max timestamp >= `timestamp`."""
        i = bisect_right(self.timestamps, timestamp)
        if i == 0:
            return self.base_offset
        return self.base_offset + self.offsets[i - 1]

    def persist(self, create: bool = False) -> bool:
        written = append_entries(
            self.path, _ENTRY, self.timestamps, self.offsets, self.persisted, create
        )
        if written < 0:
            return False
        self.persisted = max(self.persisted, written)
        return True

    def rewrite(self) -> None:
        self.persisted = rewrite_entries(self.path, _ENTRY, self.timestamps, self.offsets)
