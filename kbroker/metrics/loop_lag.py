"""How late the event loop runs a callback scheduled for a given time: its lag.

Every request, timer and replication step of a node runs on one event loop; a callback
that holds it (a large decode, a slow disk call made inline) delays everything behind
it. A probe scheduled every 100 ms measures how much later than asked it ran, into a
Prometheus histogram (`kbroker_event_loop_lag_seconds`) and a gauge of the worst lag in
the last full minute (`kbroker_event_loop_lag_max_seconds`). The loop's timers have a
resolution of about a millisecond, so lags below that are noise.

The probe is a chain of `call_at` handles, not a task: it costs one callback and a few
float operations each 100 ms.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

PROBE_INTERVAL_S = 0.1
MAX_WINDOW_S = 60.0
LAG_BOUNDS_S: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class LoopLag:
    """The probe of one event loop and what it measured."""

    def __init__(self, interval: float = PROBE_INTERVAL_S) -> None:
        self.interval = interval
        self.counts = [0] * (len(LAG_BOUNDS_S) + 1)  # per bucket, not cumulative
        self.total_s = 0.0
        self.last_s = 0.0
        self._window_max = 0.0  # worst lag in the minute being measured
        self._previous_max = 0.0  # worst lag in the last full minute
        self._window_end = 0.0
        self._due = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        now = loop.time()
        self._window_end = now + MAX_WINDOW_S
        self._due = now + self.interval
        self._handle = loop.call_at(self._due, self._probe)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _probe(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        self.observe(max(0.0, now - self._due), now)
        self._due = now + self.interval
        self._handle = loop.call_at(self._due, self._probe)

    def observe(self, lag: float, now: float) -> None:
        self.counts[bisect_left(LAG_BOUNDS_S, lag)] += 1
        self.total_s += lag
        self.last_s = lag
        if now >= self._window_end:
            self._previous_max, self._window_max = self._window_max, 0.0
            self._window_end = now + MAX_WINDOW_S
        if lag > self._window_max:
            self._window_max = lag

    @property
    def max_s(self) -> float:
        """The worst lag in the last full minute, or in this one if it is worse."""
        return max(self._previous_max, self._window_max)

    def collect(self) -> Iterator[Metric]:
        histogram = HistogramMetricFamily(
            "kbroker_event_loop_lag_seconds",
            "How much later than scheduled the event loop ran a probe callback it "
            "schedules every 100 ms (kbroker.metrics.loop_lag).",
        )
        buckets, running = [], 0
        for bound, n in zip((*LAG_BOUNDS_S, float("inf")), self.counts, strict=True):
            running += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        histogram.add_metric([], buckets, self.total_s)
        yield histogram
        yield GaugeMetricFamily(
            "kbroker_event_loop_lag_max_seconds",
            "The largest event loop lag measured in the last full minute (or this one).",
            value=self.max_s,
        )
