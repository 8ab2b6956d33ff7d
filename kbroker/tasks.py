"""Stopping asyncio tasks for good.

On Python 3.11, `asyncio.wait_for` returns the awaited result instead of raising when a
cancellation arrives in the same loop iteration as that result (CPython gh-86296, fixed
in 3.12): the cancellation is lost. A loop that awaits `wait_for` (the heartbeat to the
controller, a replica fetcher's Fetch, a controller task awaiting a commit) then carries
on after its one `cancel()`, and whoever waits for it to end waits forever: a broker
told to stop by SIGTERM hung so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("kbroker")

RECANCEL_AFTER_S = 0.1
STOP_TIMEOUT_S = 30.0


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[Any]], timeout: float = STOP_TIMEOUT_S, what: str = "tasks"
) -> None:
    """Cancel the tasks and wait for them to end, cancelling again those that took a
    cancellation for an answer at their next wait. One still running after `timeout` is
    logged and left behind: stopping never hangs. A task that failed is logged."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            log.error("%s still running after %.1f s: %s", what, timeout, pending)
            return
        done, pending = await asyncio.wait(pending, timeout=min(RECANCEL_AFTER_S, left))
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                log.error("%s: %s failed", what, task, exc_info=task.exception())
