"""Length-prefixed framing of the Kafka protocol, without I/O.

Every Kafka request and response is a 4-byte big-endian size followed by that many
bytes. The decoder says where the next read should land (`get_buffer`, as asyncio's
BufferedProtocol asks) and hands out the frames complete once it landed
(`buffer_updated`); `feed` does both for bytes that arrived some other way (TLS's
plaintext, tests). It refuses a size prefix above the configured maximum before
holding the body, so a hostile client cannot make the broker allocate it.

Where the bytes go is what saves the copies. Reads land in a scratch buffer that the
connections of a thread share (they read one at a time), and a frame complete there is
copied out once, into a bytearray of its own; the start of a frame the read did not
finish is kept by its connection and put back in front of the next read. A frame too
big for the scratch buffer gets a buffer of its exact size as soon as its size is
known, and the rest of it is read straight into that: a 1 MB produce request is copied
by the kernel and by no one else (a loop that hands each read over as a bytes object
copies it once more, and joining a frame's reads copies it again). Every frame is
writable and shares no memory with any other, so storage patches offsets into its
record batches in place, and a request may be held as long as its answer waits. An
idle connection holds no buffer.
"""

from __future__ import annotations

import mmap
import struct
import threading

_SIZE = struct.Struct(">i")

SCRATCH_BYTES = 64 * 1024
"""The shared read buffer (libuv's own read size): frames that fit are copied out of
it; bigger ones are read into a buffer of their own."""

MAPPED_FROM = 1 << 20
"""Frames of this many bytes or more are read into an anonymous mapping, whose pages
cost memory only as the body arrives: a client that declares a 100 MB request and
sends four bytes makes the broker hold four bytes. Smaller ones get a bytearray that
is not zeroed first (`_recordwalk.frame_buffer`): the socket overwrites every byte of
it before the frame is handed out, and a frame never complete is dropped unread."""

_threads = threading.local()

try:
    from kbroker.protocol._recordwalk import frame_buffer as _frame_buffer
except ImportError:  # the extension is not built: a zeroed one, the same bytes once read
    _frame_buffer = bytearray


def scratch_buffer(use: str = "frames") -> memoryview:
    """This thread's scratch buffer for `use`. A read lands in it and is done with
    before the next read of any connection begins (an event loop reads one socket at a
    time), so the connections of a thread share one instead of holding 64 KiB each.
    A TLS connection's ciphertext has its own ("ciphertext"), since its plaintext is
    fed to the frame decoder while the ciphertext's buffer is still in use."""
    view: memoryview | None = getattr(_threads, use, None)
    if view is None:
        view = memoryview(bytearray(SCRATCH_BYTES))
        setattr(_threads, use, view)
    return view


class FrameError(Exception):
    """The byte stream can no longer be trusted; the connection must close."""


class FrameDecoder:
    """Splits a byte stream into Kafka frames (sans-IO: the caller reads into the buffer
    the decoder gives, then says how many bytes landed; frames come out).

    Between frames and for small ones, reads land in the thread's scratch buffer after
    the `_pending` bytes of a frame begun in an earlier read, put back in front of
    them. Once a frame is known to be bigger than the scratch buffer, `_big` is its own
    buffer, `_filled` of it read, and reads land in the rest of it until it is whole.
    """

    __slots__ = (
        "_scratch",
        "_pending",
        "_big",
        "_big_view",
        "_filled",
        "_max_frame",
        "_limit_name",
    )

    def __init__(self, max_frame_bytes: int, limit_name: str = "socket.request.max.bytes") -> None:
        self._scratch = scratch_buffer()  # made in the thread that reads
        self._pending = b""  # the start of a frame not yet whole (short of SCRATCH_BYTES)
        self._big: bytearray | mmap.mmap | None = None
        self._big_view = self._scratch  # of _big while there is one
        self._filled = 0
        self._max_frame = max_frame_bytes
        self._limit_name = limit_name

    def limit(self, max_frame_bytes: int, limit_name: str) -> None:
        """Frames from now on may be this large (a SASL listener's connection reads
        small ones until it has authenticated)."""
        self._max_frame, self._limit_name = max_frame_bytes, limit_name

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Where the next read lands: never empty, never past the frame being read.
        (`sizehint`, asyncio's, is not needed: the decoder knows what it waits for.)"""
        if self._big is not None:
            return self._big_view[self._filled :]
        pending = self._pending
        if not pending:
            return self._scratch
        held = len(pending)
        self._scratch[:held] = pending
        return self._scratch[held:]

    def buffer_updated(self, count: int) -> list[memoryview]:
        """`count` bytes landed in the buffer `get_buffer` gave; return every frame now
        complete, in order."""
        if self._big is not None:
            self._filled += count
            if self._filled < len(self._big_view):
                return []
            whole = self._big_view
            self._big = None
            self._big_view = self._scratch
            return [whole]
        return self._frames(len(self._pending) + count)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Bytes that arrived some other way than into `get_buffer`; every frame now
        complete, in order."""
        source = memoryview(data)
        frames: list[memoryview] = []
        while source:
            target = self.get_buffer()
            n = min(len(target), len(source))
            target[:n] = source[:n]
            source = source[n:]
            frames.extend(self.buffer_updated(n))
        return frames

    def _frames(self, end: int) -> list[memoryview]:
        """Cut the frames out of the scratch buffer's first `end` bytes."""
        scratch = self._scratch
        pos = 0
        frames: list[memoryview] = []
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(scratch, pos)
            if size < 0 or size > self._max_frame:
                self._pending = b""  # nothing more comes out of this stream
                raise FrameError(
                    f"frame size {size} outside 0..{self._max_frame} ({self._limit_name})"
                )
            if end - pos - 4 >= size:
                frames.append(memoryview(bytearray(scratch[pos + 4 : pos + 4 + size])))
                pos += 4 + size
                continue
            if 4 + size > SCRATCH_BYTES:
                # Too big for the scratch buffer: the rest is read into its own.
                big: bytearray | mmap.mmap = (
                    mmap.mmap(-1, size) if size >= MAPPED_FROM else _frame_buffer(size)
                )
                have = end - pos - 4
                view = memoryview(big)
                view[:have] = scratch[pos + 4 : end]
                self._big, self._big_view, self._filled = big, view, have
                pos = end
            break
        # The start of a frame not yet whole stays with this connection (the next
        # read of another may land in the scratch buffer first).
        self._pending = bytes(scratch[pos:end]) if pos < end else b""
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        if self._big is not None:
            return 4 + self._filled
        return len(self._pending)

    @property
    def reading(self) -> int:
        """What the frame being read will hold once complete: its declared size (with its
        prefix) once the prefix is in, the bytes held before that, 0 between frames."""
        if self._big is not None:
            return 4 + len(self._big_view)
        pending = self._pending
        if len(pending) >= 4:
            return 4 + _SIZE.unpack_from(pending, 0)[0]
        return len(pending)

    @property
    def inside_frame(self) -> bool:
        """Whether a frame's size prefix has been read but not yet all of its body."""
        return self._big is not None or len(self._pending) >= 4


def frame(payload_size: int) -> bytes:
    """The size prefix for a frame whose payload is `payload_size` bytes."""
    return _SIZE.pack(payload_size)
