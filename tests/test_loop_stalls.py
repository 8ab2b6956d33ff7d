"""The stall watch names the step that held the event loop and the CPU it took."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from pathlib import Path

import pytest

import kbroker.storage.log as log_module
from kbroker.metrics.loop_stalls import StallWatch
from kbroker.storage.checkpoint import read_checkpoint
from kbroker.storage.log import LogConfig, PartitionLog
from kbroker.testing.records import Record, encode_batch


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
            if any(step.__name__ in r for r in watch.reports):
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
    # A loaded machine may add a step of its own; the spin is one, with its CPU.
    assert watch.slow_cpu_s >= 0.1, watch.reports
    assert any("test_loop_stalls.py" in r and "spin" in r for r in watch.reports), watch.reports
    assert any("slow step" in r.message and r.levelno == logging.WARNING for r in caplog.records)


def test_a_blocking_call_is_named_even_without_cpu() -> None:
    watch = asyncio.run(watch_one(block, 0.15))
    assert any("block" in r and "blocked in a call" in r for r in watch.reports), watch.reports


def test_a_long_collection_is_named() -> None:
    def collect_a_big_heap() -> None:
        gc.disable()  # built without collections of its own
        heap = [[i] for i in range(400_000)]  # tracked containers a full pass walks
        gc.enable()
        started = time.thread_time()
        while time.thread_time() - started < 0.06:
            gc.collect()
        del heap

    watch = asyncio.run(watch_one(collect_a_big_heap))
    assert any("gc generation 2 in the loop thread" in r for r in watch.reports), watch.reports


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


# -- the high watermark checkpoint, written off the event loop -------------------------


def _log_with_records(tmp_path: Path) -> PartitionLog:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    plog.append(encode_batch([Record(b"k", b"v", 1)], 1), 0, 1)
    plog.high_watermark = plog.log_end_offset
    return plog


# Run in a child process: the failure this guards against is the process dying (SIGSEGV).
THREADS_ENDING_DURING_A_STALL = """
import asyncio, threading, time
from kbroker.metrics.loop_stalls import StallWatch, thread_cpu

def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

async def main():
    watch = StallWatch()
    loop = asyncio.get_running_loop()
    watch.start(loop)
    go = threading.Event()
    # More threads than glibc keeps stacks of: an ended one's memory is unmapped.
    threads = [threading.Thread(target=go.wait) for _ in range(48)]
    for t in threads:
        t.start()
    ids = [t.native_id for t in threads]
    await asyncio.sleep(0.1)

    def stall():
        deadline = time.monotonic() + 2
        while not watch._cpu_at_detect and time.monotonic() < deadline:
            spin(0.01)  # until the watchdog has taken every thread's CPU
        go.set()  # every thread in the watchdog's snapshot ends while the loop is held
        for t in threads:
            t.join()
        spin(0.1)

    loop.call_soon(stall)
    for _ in range(300):
        await asyncio.sleep(0.01)
        if watch.reports:
            break
    watch.stop()
    assert watch.reports, "the stall was not reported"
    assert all(thread_cpu(i) is None for i in ids)
    assert thread_cpu(threading.get_native_id()) > 0
    print("reported")

asyncio.run(main())
"""


def test_threads_that_end_while_the_loop_is_held_do_not_crash_the_report() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", THREADS_ENDING_DURING_A_STALL],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "reported" in done.stdout


def test_a_slow_checkpoint_write_does_not_hold_the_log(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The periodic checkpoint runs in a worker thread; while its file write waits for
    the disk, a flush or a roll on the event loop (which take the log's lock) goes on."""
    plog = _log_with_records(tmp_path)
    writing, release = threading.Event(), threading.Event()
    real = log_module.write_checkpoint

    def slow_disk(directory, checkpoint):  # type: ignore[no-untyped-def]
        writing.set()
        assert release.wait(30)
        real(directory, checkpoint)

    monkeypatch.setattr(log_module, "write_checkpoint", slow_disk)
    writer = threading.Thread(target=plog.checkpoint_high_watermark)
    writer.start()
    try:
        assert writing.wait(30)
        flushed = threading.Event()
        flusher = threading.Thread(target=lambda: (plog.prepare_flush(), flushed.set()))
        flusher.start()
        assert flushed.wait(10), "a flush waited for the checkpoint file's write"
        assert not release.is_set()
    finally:
        release.set()
        writer.join()
        monkeypatch.setattr(log_module, "write_checkpoint", real)
        plog.close()
    assert read_checkpoint(str(tmp_path / "t-0")) is not None


def test_an_older_checkpoint_never_replaces_a_newer_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    plog = _log_with_records(tmp_path)
    try:
        with plog._lock:
            older = plog._take_checkpoint_locked()
        plog.append(encode_batch([Record(b"k", b"w", 2)], 2), 0, 2)
        plog.high_watermark = plog.log_end_offset
        with plog._lock:
            newer = plog._take_checkpoint_locked()
        plog._store_checkpoint(*newer)
        plog._store_checkpoint(*older)  # the slower writer finishing last
        stored = read_checkpoint(str(tmp_path / "t-0"))
        assert stored is not None and stored.high_watermark == plog.log_end_offset == 2
    finally:
        plog.close()


# -- /metrics, written out off the event loop ------------------------------------------


def test_metrics_text_is_written_in_a_worker_thread(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The families are collected on the loop, their text is made elsewhere: formatting
    a few hundred series took 12-35 ms of one loop step."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily

    import kbroker.metrics.http as http_module

    class Source:
        def collect(self):  # type: ignore[no-untyped-def]
            collected_in.append(threading.get_ident())
            yield GaugeMetricFamily("kbroker_example", "An example.", value=1.0)

    collected_in: list[int] = []
    rendered_in: list[int] = []
    real = http_module.render_families

    def watched(families):  # type: ignore[no-untyped-def]
        rendered_in.append(threading.get_ident())
        return real(families)

    monkeypatch.setattr(http_module, "render_families", watched)
    endpoint = http_module.HttpEndpoint.__new__(http_module.HttpEndpoint)
    endpoint.registry = CollectorRegistry(auto_describe=False)
    endpoint.registry.register(Source())

    async def scrape() -> tuple[int, tuple[int, str, str]]:
        return threading.get_ident(), await endpoint._answer("GET", "/metrics")

    loop_thread, (status, _kind, text) = asyncio.run(scrape())
    assert status == 200 and "kbroker_example 1.0" in text
    assert collected_in == [loop_thread]
    assert rendered_in and rendered_in[0] != loop_thread
