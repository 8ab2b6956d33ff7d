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
    """Splits a byte stream into Kafka frames (sans-IO: feed bytes in, get frames out)."""

    __slots__ = ("_buffer", "_max_frame")

    def __init__(self, max_frame_bytes: int) -> None:
        self._buffer = bytearray()
        self._max_frame = max_frame_bytes

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame now complete, in order."""
        buf = self._buffer
        buf += data
        frames: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > self._max_frame:
                raise FrameError(
                    f"frame size {size} outside 0..{self._max_frame} (socket.request.max.bytes)"
                )
            if end - pos - 4 < size:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + size]))
            pos += 4 + size
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._buffer)


def frame(payload_size: int) -> bytes:
    """The size prefix for a frame whose payload is `payload_size` bytes."""
    return _SIZE.pack(payload_size)
