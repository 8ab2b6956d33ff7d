"""Adaptive busy-polling: keep the event loop's CPU awake for a moment after an answer.

A client that waits for each acknowledgement sends its next request a few tens of
microseconds after our answer reaches it. If the loop blocks in epoll meanwhile, its
CPU goes idle, and on a virtual machine waking an idle CPU for the next request costs
about as much again as the whole round trip of the work (measured here: one-at-a-time
produce 0.155 ms p50 without, 0.088 ms with a 200 us budget).

So after an answer the loop keeps one callback ready for up to `budget_s` (each answer
moves the end): with a ready callback the loop polls its sockets with a zero timeout
instead of sleeping, so the next request is read as soon as it lands, and everything
else the loop serves (other connections, timers, fsync results) runs in between as
usual.

Spinning only pays while requests come back within the budget. A spin that ends with
nothing read switches spinning off. It comes back on when a request is seen to arrive
within the budget of the answer before it, or when a probe succeeds: after the n-th
miss in a row one answer in 2**n (at most one in MAX_SKIP) is spun anyway, because a
client answered without spinning is slower to come back than one answered with it. An
idle broker spends at most one budget per answer, and far less once misses add up.
"""

from __future__ import annotations

import asyncio
from time import perf_counter

DEFAULT_BUDGET_S = 200e-6
MAX_SKIP = 64


class KeepAwake:
    """One per event loop; connections report the answers they write and the bytes
    they read."""

    __slots__ = (
        "budget_s",
        "_loop",
        "_deadline",
        "_spinning",
        "_enabled",
        "_answered_at",
        "_read_since_answer",
        "_skip",
        "_skipped",
        "spins",
        "hits",
    )

    def __init__(self, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.budget_s = budget_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._deadline = 0.0
        self._spinning = False
        self._enabled = budget_s > 0
        self._answered_at = 0.0
        self._read_since_answer = True
        self._skip = 0  # answers to let pass unspun after the last miss
        self._skipped = 0
        self.spins = 0  # spins started (an answer during a spin extends it)
        self.hits = 0  # answers followed by a request while spinning

    @property
    def enabled(self) -> bool:
        """Whether the next answer starts a spin without waiting for a probe."""
        return self._enabled

    def answered(self) -> None:
        """An answer was just written: stay awake for the next request."""
        now = perf_counter()
        self._answered_at = now
        self._read_since_answer = False
        if not self._enabled:
            if self.budget_s <= 0:
                return
            self._skipped += 1
            if self._skipped < self._skip:
                return
            self._skipped = 0  # probe: spin this once
        self._deadline = now + self.budget_s
        if not self._spinning:
            self._spinning = True
            self.spins += 1
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._spin)

    def request_read(self) -> None:
        """Bytes arrived from a client: the spin paid off, or shows that it would have."""
        if self._read_since_answer:
            return
        self._read_since_answer = True
        if self._spinning:
            self.hits += 1
            self._enable()
        elif not self._enabled and perf_counter() - self._answered_at < self.budget_s:
            self._enable()

    def _spin(self) -> None:
        if perf_counter() < self._deadline:
            # Ready again at once: the loop polls with a zero timeout before it runs us.
            self._loop.call_soon(self._spin)  # type: ignore[union-attr]
            return
        # A budget since the last answer has passed: rest until the next answer.
        self._spinning = False
        if not self._read_since_answer:  # and nobody came back: a miss
            self._enabled = False
            self._skip = min(max(self._skip * 2, 2), MAX_SKIP)
            self._skipped = 0

    def _enable(self) -> None:
        self._enabled = True
        self._skip = 0
        self._skipped = 0
