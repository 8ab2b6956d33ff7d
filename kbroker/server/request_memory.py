"""Kafka's `queued.max.request.bytes`: one budget for the bytes of requests being read
and handled, across every connection.

Without it, five clients each sending a 100 MB request (socket.request.max.bytes) make
the broker hold 500 MB at once. Kafka's network layer takes a request's memory from a
pool when it reads the size prefix and stops reading from every socket while the pool
is exhausted; the pool is not strict, so a request that was admitted is read whole even
if it takes the pool past its limit (it could never complete otherwise). This is that
pool, for accounting only: connections report what they hold (the declared size of
the frame they are reading, plus the requests whose answers are pending) and pause
before starting a new frame while the pool is over its limit; when memory is released,
the paused ones are resumed.
"""

from __future__ import annotations

from typing import Protocol

DEFAULT_LIMIT = 200 * 1024 * 1024  # kbroker's default; Kafka's -1 means unlimited


class Reader(Protocol):
    """A connection waiting for memory before it reads its next request."""

    def memory_available(self) -> None: ...


class RequestMemory:
    """Bytes held by requests across connections, against `limit` (<= 0: unlimited)."""

    __slots__ = ("limit", "used", "_waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiting: dict[Reader, None] = {}  # insertion-ordered: resumed first come first

    @property
    def exhausted(self) -> bool:
        return 0 < self.limit <= self.used

    def adjust(self, delta: int) -> None:
        """A connection now holds `delta` more (or, negative, fewer) bytes."""
        self.used += delta
        if delta < 0 and self._waiting and not self.exhausted:
            waiting = list(self._waiting)
            self._waiting.clear()
            for reader in waiting:
                reader.memory_available()

    def wait(self, reader: Reader) -> None:
        """`reader` paused until the pool drops below its limit."""
        self._waiting[reader] = None

    def forget(self, reader: Reader) -> None:
        self._waiting.pop(reader, None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
