"""The stall watch names the step that held the event loop and the CPU it took."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest

from kbroker.metrics.loop_stalls import StallWatch


def spin(cpu_seconds: float) -> None:
    """Hold the loop with this thread's own CPU (not wall time: the machine may be loaded)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


def block(seconds: float) -> None:
    """Hold the loop in a blocking call."""
    time.sleep(seconds)


async def watch_one(step, *args) -> StallWatch:  # type: ignore[no-untyped-def]
    watch = StallWatch()
    loop = asyncio.get_running_loop()
    watch.start(loop)
    try:
        await asyncio.sleep(0.1)
        loop.call_soon(step, *args)
        # Polls: the report is made by the first beat after the step.
        for _ in range(500):
            await asyncio.sleep(0.01)
            if watch.reports:
                break
        await asyncio.sleep(0.05)
    finally:
        watch.stop()
    return watch


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_cpu_bound_step_is_named_with_its_cpu(loop_kind, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, "kbroker.loop")
    if loop_kind == "uvloop":
        import uvloop

        watch = uvloop.run(watch_one(spin, 0.12))
    else:
        watch = asyncio.run(watch_one(spin, 0.12))
    assert watch.slow_steps == 1, watch.reports
    assert watch.slow_cpu_s >= 0.1
    (report,) = watch.reports
    assert "test_loop_stalls.py" in report and "spin" in report, report
    assert any("slow step" in r.message and r.levelno == logging.WARNING for r in caplog.records)


def test_a_blocking_call_is_named_even_without_cpu() -> None:
    watch = asyncio.run(watch_one(block, 0.15))
    assert watch.slow_steps == 1, watch.reports
    (report,) = watch.reports
    assert "block" in report and "blocked in a call" in report, report


def test_a_long_collection_is_named() -> None:
    def collect_a_big_heap() -> None:
        heap = [[i] for i in range(1_500_000)]  # tracked containers a full pass walks
        started = time.thread_time()
        while time.thread_time() - started < 0.06:
            gc.collect()
        del heap

    watch = asyncio.run(watch_one(collect_a_big_heap))
    assert watch.reports, "no step reported"
    assert "gc generation 2 in the loop thread" in watch.reports[0], watch.reports


def test_quiet_loop_reports_nothing() -> None:
    async def quiet() -> StallWatch:
        watch = StallWatch()
        watch.start(asyncio.get_running_loop())
        try:
            for _ in range(30):
                await asyncio.sleep(0.01)
        finally:
            watch.stop()
        return watch

    watch = asyncio.run(quiet())
    assert watch.slow_steps == 0, watch.reports
