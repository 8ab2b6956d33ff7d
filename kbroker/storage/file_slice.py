"""Segment file handles that outlive deletion while a fetch still sends from them.

Retention unlinks a segment at once, but a FileSlice handed to the network layer
must stay readable until it is sent: each open SegmentFile counts the slices that
reference it and closes when it is retired and the last slice lets go.
"""

from __future__ import annotations

import io
import os


class SegmentFile:
    """An open segment .log file: one fd for positional writes, reads and sendfile."""

    __slots__ = ("file", "fd", "refs", "retired", "__weakref__")

    def __init__(self, path: os.PathLike[str] | str, create: bool = False) -> None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
        self.file = io.FileIO(fd, "r+b", closefd=True)
        self.fd = fd
        self.refs = 0
        self.retired = False

    @property
    def closed(self) -> bool:
        return self.file.closed

    def retire(self) -> None:
        """No new slices; close as soon as none is outstanding."""
        self.retired = True
        if self.refs == 0:
            self.file.close()

    def force_close(self) -> None:
        self.retired = True
        self.file.close()

    def _release(self) -> None:
        self.refs -= 1
        if self.refs <= 0 and self.retired:
            self.file.close()


class FileSlice:
    """A byte range of one segment file: whole batches, ready for sendfile or pread.

    `file` is an io.FileIO; send with os.sendfile/os.pread on `file.fileno()` at
    `position` (the file's own seek position is shared and must not be relied on).
    Call release() (or use `with`) when sent; dropping the last reference does too.
    """

    __slots__ = ("file", "position", "length", "data_end", "_owner")

    def __init__(
        self, owner: SegmentFile, position: int, length: int, data_end: int | None = None
    ) -> None:
        self.file = owner.file
        self.position = position
        self.length = length
        # Where the segment's data ended when the slice was cut: the file may run on
        # past it (space reserved ahead of appends), and those bytes are not batches.
        self.data_end = position + length if data_end is None else data_end
        self._owner: SegmentFile | None = owner
        owner.refs += 1

    def next_base_offset(self) -> int | None:
        """Base offset of the batch right after the range in the same segment, or None
        when the range ends the segment's data."""
        end = self.position + self.length
        if end + 8 > self.data_end:
            return None
        head = os.pread(self.file.fileno(), 8, end)
        return int.from_bytes(head, "big", signed=True) if len(head) == 8 else None

    def narrow(self, start: int, length: int) -> FileSlice:
        """The part of this range from `start` (relative) for `length` bytes, holding the
        file open on its own (a ShareFetch sends only the batches it acquired from)."""
        if self._owner is None:
            raise ValueError("narrowing a released slice")
        if start < 0 or length < 0 or start + length > self.length:
            raise ValueError(f"[{start}, {start + length}) is outside a {self.length}-byte slice")
        return FileSlice(self._owner, self.position + start, length, self.data_end)

    def release(self) -> None:
        owner = self._owner
        if owner is not None:
            self._owner = None
            owner._release()

    def read(self) -> bytes:
        """The bytes of the range (tests and the copy fallback of the network layer)."""
        return os.pread(self.file.fileno(), self.length, self.position)

    def __len__(self) -> int:
        return self.length

    def __enter__(self) -> FileSlice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileSlice({self.file.name!r}, position={self.position}, length={self.length})"
