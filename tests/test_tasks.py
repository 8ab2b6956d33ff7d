"""A task stopped with cancel_and_wait ends, even one whose asyncio.wait_for lost the
cancellation (Python 3.11 returns wait_for's result when both arrive together)."""

from __future__ import annotations

import asyncio

import pytest

from kbroker.tasks import cancel_and_wait


async def _heartbeat_like(answers: asyncio.Queue[asyncio.Future[int]]) -> None:
    """A loop awaiting wait_for on futures answered from elsewhere, as the broker's
    heartbeat awaits the controller's commit."""
    while True:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        await answers.put(fut)
        await asyncio.wait_for(fut, 10)


@pytest.mark.timeout(10)
def test_a_loop_whose_wait_for_swallowed_the_cancellation_still_ends() -> None:
    async def scenario() -> None:
        answers: asyncio.Queue[asyncio.Future[int]] = asyncio.Queue()
        task = asyncio.create_task(_heartbeat_like(answers))
        fut = await answers.get()
        await asyncio.sleep(0)  # the task now waits inside wait_for
        fut.set_result(1)  # the answer and the shutdown's cancellation arrive together
        await cancel_and_wait([task])  # cancels in this same loop iteration
        assert task.cancelled()

    asyncio.run(scenario())
