"""Length-prefixed framing of the Kafka protocol, without I/O.

Every Kafka request and response is a 4-byte big-endian size followed by that many
bytes. The decoder buffers whatever the socket delivered and hands out complete
frames; it refuses a size prefix above the configured maximum before buffering the
body, so a hostile client cannot make the broker allocate it.
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The byte stream can no longer be trusted; the connection must close."""


class FrameDecoder:
    """Splits a byte stream into Kafka frames (sans-IO: feed bytes in, get frames out).

    Frames come out as memoryviews of the received bytes, not copies: a 1 MB produce
    request that arrived in one read is never copied here, and one that arrived in many
    is joined once, when its last piece is in, into a bytearray. Such a frame is
    writable, so storage can patch offsets into its record batches in place instead of
    copying them once more.
    """

    __slots__ = ("_chunks", "_held", "_need", "_max_frame", "_limit_name")

    def __init__(self, max_frame_bytes: int, limit_name: str = "socket.request.max.bytes") -> None:
        self._chunks: list[bytes | bytearray] = []
        self._held = 0  # bytes in _chunks
        self._need = 4  # bytes that must be held before parsing can make progress
        self._max_frame = max_frame_bytes
        self._limit_name = limit_name

    def limit(self, max_frame_bytes: int, limit_name: str) -> None:
        """Frames from now on may be this large (a SASL listener's connection reads
        small ones until it has authenticated)."""
        self._max_frame, self._limit_name = max_frame_bytes, limit_name

    def feed(self, data: bytes | bytearray) -> list[memoryview]:
        """Add received bytes; return every frame now complete, in order."""
        if self._chunks:
            self._chunks.append(data)
            self._held += len(data)
            if self._held < self._need:
                return []
            data = bytearray().join(self._chunks)  # writable: see the class docstring
            self._chunks = []
            self._held = 0
        view = memoryview(data)
        frames: list[memoryview] = []
        pos = 0
        end = len(data)
        need = 4
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if size < 0 or size > self._max_frame:
                raise FrameError(
                    f"frame size {size} outside 0..{self._max_frame} ({self._limit_name})"
                )
            if end - pos - 4 < size:
                need = 4 + size
                break
            frames.append(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
        if pos < end:
            rest = data[pos:] if pos else data
            self._chunks = [rest]
            self._held = len(rest)
            self._need = need
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return self._held

    @property
    def reading(self) -> int:
        """What the frame being read will hold once complete: its declared size (with its
        prefix) once the prefix is in, the bytes held before that, 0 between frames."""
        return self._need if self._chunks else 0

    @property
    def inside_frame(self) -> bool:
        """Whether a frame's size prefix has been read but not yet all of its body."""
        return bool(self._chunks) and self._held >= 4


def frame(payload_size: int) -> bytes:
    """The size prefix for a frame whose payload is `payload_size` bytes."""
    return _SIZE.pack(payload_size)
