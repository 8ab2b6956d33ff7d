"""Producer ids from blocks the controller reserves, so ids are unique across the cluster
and across restarts without a controller round trip per producer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

BLOCK_SIZE = 1000
# Ask for the next block when this little of the current one is left, so a burst of
# InitProducerId requests does not wait for the controller.
PREFETCH_REMAINING = 100


class ProducerIdManager:
    def __init__(
        self, allocate: Callable[[int], Awaitable[int]], block_size: int = BLOCK_SIZE
    ) -> None:
        self._allocate = allocate
        self._block_size = block_size
        self._next = 0
        self._end = 0  # exclusive
        self._queued: tuple[int, int] | None = None
        self._fetching: asyncio.Future[None] | None = None

    async def next_id(self) -> int:
        """A producer id no one has had; raises what the controller raises."""
        while self._next >= self._end:
            if self._queued is not None:
                self._next, self._end = self._queued
                self._queued = None
                break
            await self._fetch()
        pid = self._next
        self._next += 1
        if self._end - self._next <= PREFETCH_REMAINING and self._queued is None:
            self._start_fetch()
        return pid

    def _start_fetch(self) -> asyncio.Future[None]:
        if self._fetching is None:
            self._fetching = asyncio.ensure_future(self._fetch_block())
            self._fetching.add_done_callback(self._fetched)
        return self._fetching

    def _fetched(self, fut: asyncio.Future[None]) -> None:
        self._fetching = None
        if not fut.cancelled():
            fut.exception()  # consumed here; next_id sees it again on its own await

    async def _fetch(self) -> None:
        await asyncio.shield(self._start_fetch())

    async def _fetch_block(self) -> None:
        start = await self._allocate(self._block_size)
        self._queued = (start, start + self._block_size)
