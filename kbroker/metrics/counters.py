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
    latency: dict[int, LatencyHistogram] = field(default_factory=dict)  # by API key
    topics: dict[str, TopicCounters] = field(default_factory=dict)

    def topic(self, name: str) -> TopicCounters:
        counters = self.topics.get(name)
        if counters is None:
            counters = self.topics[name] = TopicCounters()
        return counters

    def answered(self, api_key: int, ms: float) -> None:
        """A request's time from its last byte read to its answer's write, in ms."""
        histogram = self.latency.get(api_key)
        if histogram is None:
            histogram = self.latency[api_key] = LatencyHistogram()
        # LatencyHistogram.observe, inline: this runs once per request.
        histogram.counts[bisect_left(LATENCY_BOUNDS_MS, ms)] += 1
        histogram.total_ms += ms

    successful_authentications: int = 0  # SASL logins
    failed_authentications: int = 0  # SASL logins refused, refused client certificates
    failed_tls_handshakes: int = 0
