"""Counters the request path increments: plain ints, no locks (one event loop thread)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestCounters:
    requests: Counter[int] = field(default_factory=Counter)  # by API key
    bytes_in: int = 0
    bytes_out: int = 0
    connections_opened: int = 0
    bad_requests: int = 0  # connections closed for malformed or unserved requests
    produced_bytes: int = 0
