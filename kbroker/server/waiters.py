"""Delayed operations: Fetch requests parked until data arrives or their wait runs out."""

from __future__ import annotations

import asyncio
from collections import defaultdict


class DataWaiters:
    """Futures keyed by partition, woken when that partition's log grows.

    A Fetch that found less than min_bytes parks one future per partition it reads;
    an append wakes them. Nothing polls and nothing blocks the loop.
    """

    def __init__(self) -> None:
        self._waiting: dict[tuple[str, int], set[asyncio.Future[None]]] = defaultdict(set)

    def new_waiter(self, keys: list[tuple[str, int]]) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiting[key].add(future)
        future.add_done_callback(lambda f: self._forget(f, keys))
        return future

    def _forget(self, future: asyncio.Future[None], keys: list[tuple[str, int]]) -> None:
        for key in keys:
            waiting = self._waiting.get(key)
            if waiting is not None:
                waiting.discard(future)
                if not waiting:
                    del self._waiting[key]

    def wake(self, key: tuple[str, int]) -> None:
        waiting = self._waiting.get(key)
        if waiting:
            for future in list(waiting):
                if not future.done():
                    future.set_result(None)

    def wake_all(self) -> None:
        for key in list(self._waiting):
            self.wake(key)
