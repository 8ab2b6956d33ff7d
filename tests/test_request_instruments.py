"""The event loop lag probe and the per-API request time split (Kafka's RequestMetrics)."""

from __future__ import annotations

import asyncio
import time

from compat_tests.waiting import eventually_async
from kbroker.metrics.counters import LATENCY_BOUNDS_MS, RequestCounters
from kbroker.metrics.loop_lag import LoopLag


def test_a_callback_holding_the_loop_shows_as_lag_of_the_probe():
    async def main() -> LoopLag:
        lag = LoopLag(interval=0.01)
        lag.start(asyncio.get_running_loop())
        await eventually_async(  # a few on-time probes first
            lambda: sum(lag.counts) >= 3, timeout=5, what="three probes", interval=0.005
        )
        time.sleep(0.3)  # the behaviour under test: a callback that holds the loop 300 ms
        seen = sum(lag.counts)
        await eventually_async(
            lambda: sum(lag.counts) > seen, timeout=5, what="the held probe", interval=0.005
        )
        lag.stop()
        return lag

    lag = asyncio.run(main())
    assert lag.max_s >= 0.25
    families = {f.name: f for f in lag.collect()}
    histogram = families["kbroker_event_loop_lag_seconds"]
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert buckets["+Inf"] == sum(lag.counts)
    assert buckets["0.25"] < buckets["+Inf"]  # the held probe is above 250 ms
    assert families["kbroker_event_loop_lag_max_seconds"].samples[0].value == lag.max_s


def test_the_worst_lag_is_kept_for_the_last_full_minute_then_dropped():
    lag = LoopLag()
    lag._window_end = 60.0
    lag.observe(2.0, 10.0)
    lag.observe(0.001, 61.0)  # a new minute: the last full one had 2 s
    assert lag.max_s == 2.0
    lag.observe(0.001, 122.0)  # and the one before is forgotten
    assert lag.max_s == 0.001


def test_request_times_are_kept_apart_per_api_and_total_is_their_sum():
    counters = RequestCounters()
    counters.answered(0, 0.05, 0.2, 30.0, 0.3)
    counters.answered(0, 0.05, 0.2, 0.0, 0.3)
    counters.answered(1, 0.0, 1.0, 600.0, 0.0)
    produce = counters.times[0]
    remote = produce.histogram("remote")
    assert sum(remote.counts) == 2
    assert remote.counts[LATENCY_BOUNDS_MS.index(50.0)] == 1  # 30 ms is in (25, 50]
    assert remote.total_ms == 30.0
    total = produce.histogram("total")
    assert total.total_ms == 2 * 0.55 + 30.0
    assert [n for _, n in produce.histogram("queue").buckets()][-1] == 2
    fetch = counters.times[1].histogram("remote")
    assert fetch.counts[LATENCY_BOUNDS_MS.index(1000.0)] == 1
