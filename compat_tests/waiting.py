"""Waiting in tests for a condition, never for a stretch of time.

`eventually(predicate, timeout=..., what=...)` calls `predicate` until it returns something
truthy and returns that value. Past `timeout` it fails with an AssertionError naming `what`
and the last value the predicate returned or the last exception it raised (chained, so
the traceback shows where it came from). An exception from the predicate counts as "not
yet": a node that is restarting or a connection that is refused is an ordinary state
while waiting. `eventually_async` is the same for asyncio tests; its predicate may be a
plain function or return an awaitable.

The predicate runs at least once after the deadline, so a condition that holds at the
end is never reported as missed because of a slow poll.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_INTERVAL_S = 0.05
_NOTHING = object()


def _failure(
    what: str, timeout: float, last_value: object, last_error: BaseException | None
) -> AssertionError:
    if last_error is not None:
        last = f"last error: {last_error!r}"
    elif last_value is _NOTHING:
        last = "never evaluated"
    else:
        last = f"last value: {last_value!r}"
    return AssertionError(f"timed out after {timeout}s waiting for {what} ({last})")


def eventually(
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = DEFAULT_INTERVAL_S,
) -> T:
    """Poll `predicate` until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    last_value: object = _NOTHING
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
        except Exception as exc:  # not yet: the state it reads may be coming up
            last_error = exc
        else:
            if value:
                return value
            last_value, last_error = value, None
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failure(what, timeout, last_value, last_error) from last_error
        time.sleep(min(interval, left))  # pacing between two polls


async def eventually_async(
    predicate: Callable[[], T | None | Awaitable[T | None]],
    *,
    timeout: float,
    what: str,
    interval: float = DEFAULT_INTERVAL_S,
) -> T:
    """`eventually` for asyncio: the loop runs other tasks between two polls."""
    deadline = time.monotonic() + timeout
    last_value: object = _NOTHING
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # not yet: the state it reads may be coming up
            last_error = exc
        else:
            if value:
                return value  # type: ignore[return-value]
            last_value, last_error = value, None
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failure(what, timeout, last_value, last_error) from last_error
        await asyncio.sleep(min(interval, left))  # pacing between two polls
