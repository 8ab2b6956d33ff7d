"""Stopping a broker answers parked requests at once instead of letting them time out."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from inprocess import RawClient, run_broker

from compat_tests.waiting import eventually_async
from kbroker.admin.client import fetch_fields

FETCH = 1


def test_parked_fetch_is_answered_when_the_broker_stops(tmp_path: Path) -> None:
    timings: dict[str, float] = {}

    async def check(broker, port: int) -> None:  # type: ignore[no-untyped-def]
        await broker.controller.create_topic("quiet", 1, 1, {})
        client = await RawClient.connect(port)
        request = fetch_fields("quiet", max_wait=30_000, min_bytes=1)
        parked = asyncio.create_task(client.call(FETCH, 12, request))
        await eventually_async(
            lambda: broker.waiters.parked(("quiet", 0)), timeout=10, what="the fetch to park"
        )
        assert not parked.done()  # no data: the fetch waits for max_wait
        assert broker.waiters.parked_requests() == 1
        started = time.monotonic()
        await broker.stop()
        response = await asyncio.wait_for(parked, 5)
        timings["answered_after"] = time.monotonic() - started
        assert response.responses[0].partitions[0].error_code == 0
        broker.stop = _noop  # already stopped; run_broker's own stop becomes a no-op

    run_broker(tmp_path, check)
    assert timings["answered_after"] < 2


async def _noop() -> None:
    return None
