"""Time for the coordinator: a clock and one-shot timers, real or simulated.

The group state machine never sleeps and never blocks: every deadline (session
timeouts, rebalance timeouts, the initial rebalance delay) is a timer callback. Tests
drive the same code with `ManualScheduler` and move time by hand.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Scheduler(Protocol):
    def now_ms(self) -> int: ...

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer: ...


class LoopScheduler:
    """Wall-clock time and timers on the running asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(max(delay_ms, 0) / 1000, callback)


class _ManualTimer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualScheduler:
    """A clock that only moves when told to; fires due timers in deadline order."""

    def __init__(self, start_ms: int = 1_000_000) -> None:
        self._now = start_ms
        self._queue: list[tuple[int, int, _ManualTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> Timer:
        timer = _ManualTimer()
        deadline = self._now + max(delay_ms, 0)
        heapq.heappush(self._queue, (deadline, next(self._seq), timer, callback))
        return timer

    def advance(self, ms: int) -> None:
        """Move time forward, running every timer that falls due on the way."""
        target = self._now + ms
        while self._queue and self._queue[0][0] <= target:
            deadline, _, timer, callback = heapq.heappop(self._queue)
            if timer.cancelled:
                continue
            self._now = max(self._now, deadline)
            callback()
        self._now = target

    @property
    def pending(self) -> int:
        return sum(1 for _, _, t, _ in self._queue if not t.cancelled)
