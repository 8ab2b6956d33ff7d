"""Sparse offset index of one segment: relative offset -> file position.

One 8-byte entry (relative offset u32, position u32, big-endian) per
index.interval.bytes of log, pointing at the start of a batch, so a lookup lands
at most one interval before the wanted batch. Entries live in two arrays; the file
is appended to when entries are persisted (roll, flush, close) and rebuilt from
the log when missing or damaged, so it never needs to be preallocated or mapped.
"""

from __future__ import annotations

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

ENTRY_SIZE = 8
_ENTRY = struct.Struct(">II")
_LITTLE = sys.byteorder == "little"


class OffsetIndex:
    __slots__ = ("path", "base_offset", "offsets", "positions", "persisted")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.offsets = array("I")  # relative offsets, strictly increasing
        self.positions = array("I")  # file positions, strictly increasing
        self.persisted = 0  # entries already in the file

    @classmethod
    def load(cls, path: str, base_offset: int, log_size: int) -> OffsetIndex:
        """Read an index file; raise IndexCorruptError if it cannot be right."""
        idx = cls(path, base_offset)
        both = array("I")
        both.frombytes(read_entries(path, _ENTRY))
        if _LITTLE:
            both.byteswap()
        idx.offsets = both[0::2]
        idx.positions = both[1::2]
        n = len(idx.offsets)
        if n and (
            idx.positions[-1] >= max(log_size, 1)
            or idx.positions[0] == 0
            or idx.offsets[-1] < idx.offsets[0]
            or idx.positions[-1] < idx.positions[0]
        ):
            raise IndexCorruptError(f"{path} entries out of range")
        idx.persisted = n
        return idx

    def __len__(self) -> int:
        return len(self.offsets)

    def append(self, offset: int, position: int) -> None:
        self.offsets.append(offset - self.base_offset)
        self.positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `offset`; (base, 0) if none."""
        i = bisect_right(self.offsets, offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i - 1], self.positions[i - 1]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below file position `position`."""
        i = bisect_right(self.positions, position)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self.offsets[i - 1], self.positions[i - 1]

    def persist(self, create: bool = False) -> bool:
        """Append the entries not yet in the file (idempotent: same bytes, same place)."""
        written = append_entries(
            self.path, _ENTRY, self.offsets, self.positions, self.persisted, create
        )
        if written < 0:
            return False
        self.persisted = max(self.persisted, written)
        return True

    def rewrite(self) -> None:
        """Write the whole index afresh (after a rebuild or truncation)."""
        self.persisted = rewrite_entries(self.path, _ENTRY, self.offsets, self.positions)
