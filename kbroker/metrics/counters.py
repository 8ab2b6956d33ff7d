"""Counters the request path increments: plain ints, no locks (one event loop thread).

prometheus-client's own Counter and Histogram take a lock and look their labels up on
every call (about a microsecond each); at a hundred thousand requests a second that is
a tenth of a core. So the hot path adds to plain attributes here, and the collector in
`kbroker.metrics.prometheus` turns them into Prometheus families when scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

# Request latency bucket bounds in milliseconds (Kafka's RequestMetrics are in ms too).
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
)


@dataclass(slots=True)
class LatencyHistogram:
    """Cumulative-on-read histogram: `counts[i]` holds observations in bucket i only."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_MS) + 1))
    total_ms: float = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(LATENCY_BOUNDS_MS, ms)] += 1
        self.total_ms += ms

    def buckets(self) -> list[tuple[str, int]]:
        """(upper bound, cumulative count) pairs, as Prometheus histograms list them."""
        out, running = [], 0
        for bound, n in zip((*LATENCY_BOUNDS_MS, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


# The five histograms of one API in one flat list (one index computation per observation).
REQUEST_TIMES: tuple[str, ...] = ("queue", "local", "remote", "send", "total")
_BUCKETS = len(LATENCY_BOUNDS_MS) + 1
_LOCAL, _REMOTE, _SEND, _TOTAL = (_BUCKETS * i for i in range(1, 5))


@dataclass(slots=True)
class RequestTimes:
    """Kafka's RequestMetrics time histograms of one API: queue, local, remote, send and
    total time, bucket counts (not cumulative) side by side in `counts`, sums in `sums`."""

    counts: list[int] = field(default_factory=lambda: [0] * (_BUCKETS * len(REQUEST_TIMES)))
    sums: list[float] = field(default_factory=lambda: [0.0] * len(REQUEST_TIMES))

    def histogram(self, kind: str) -> LatencyHistogram:
        """One of the five ("queue", "local", "remote", "send", "total") on its own."""
        i = REQUEST_TIMES.index(kind)
        counts = self.counts[i * _BUCKETS : (i + 1) * _BUCKETS]
        return LatencyHistogram(counts, self.sums[i])


@dataclass(slots=True)
class TopicCounters:
    """Kafka's BrokerTopicMetrics for one topic."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


@dataclass(slots=True)
class RequestCounters:
    requests: Counter[int] = field(default_factory=Counter)  # by API key
    bytes_in: int = 0
    bytes_out: int = 0
    connections_opened: int = 0
    bad_requests: int = 0  # connections closed for malformed or unserved requests
    produced_bytes: int = 0
    times: dict[int, RequestTimes] = field(default_factory=dict)  # by API key
    topics: dict[str, TopicCounters] = field(default_factory=dict)

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def answered(
        self, api_key: int, queue_ms: float, local_ms: float, remote_ms: float, send_ms: float
    ) -> None:
        """A request's times, in ms, as Kafka's RequestMetrics split them: waiting to be
        dispatched after its last byte was read, in its handler, waiting on others
        (acknowledgements, a parked fetch's data, a coordinator's write), and from its
        answer being ready to its bytes handed to the socket."""
        times = self.times.get(api_key)
        if times is None:
            times = self.times[api_key] = RequestTimes()
        # LatencyHistogram.observe, inline: this runs once per request.
        times.counts[bisect_left(LATENCY_BOUNDS_MS, queue_ms)] += 1
        times.counts[_LOCAL + bisect_left(LATENCY_BOUNDS_MS, local_ms)] += 1
        times.counts[_REMOTE + bisect_left(LATENCY_BOUNDS_MS, remote_ms)] += 1
        times.counts[_SEND + bisect_left(LATENCY_BOUNDS_MS, send_ms)] += 1
        total_ms = queue_ms + local_ms + remote_ms + send_ms
        times.counts[_TOTAL + bisect_left(LATENCY_BOUNDS_MS, total_ms)] += 1
        sums = times.sums
        sums[0] += queue_ms
        sums[1] += local_ms
        sums[2] += remote_ms
        sums[3] += send_ms
        sums[4] += total_ms

    successful_authentications: int = 0  # SASL logins
    failed_authentications: int = 0  # SASL logins refused, refused client certificates
    failed_tls_handshakes: int = 0
