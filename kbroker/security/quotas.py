"""Client quotas as Kafka enforces them: byte rates and request time per user / client-id.

Quotas are set with AlterClientQuotas on an entity (a user, a client-id, or both; a
missing name is the default entity) and live in the replicated metadata. A client's
quota is the most specific one configured, in Kafka's order:

    user+client-id, user+default client-id, user, default user+client-id,
    default user+default client-id, default user, client-id, default client-id

Usage is measured like Kafka's ``Rate`` over ``quota.window.num`` samples of
``quota.window.size.seconds`` (the window padded to all but one sample while young),
and a client over its bound is told ``throttle_time_ms = (rate - bound) / bound *
window``; the broker answers at once and then stops reading from the connection for
that long (KIP-219), so a well-behaved client and a careless one are slowed alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
USER, CLIENT_ID = "user", "client-id"

# An entity: sorted ((type, name or None for the default), ...), e.g. (("user", "alice"),)
Entity = tuple[tuple[str, str | None], ...]
MAX_THROTTLE_MS = 2**31 - 1


def entity_key(parts: Mapping[str, str | None]) -> Entity:
    return tuple(sorted(parts.items()))


def _candidates(user: str, client_id: str) -> list[tuple[Entity, str, str]]:
    """Kafka's precedence, each with the (user, client-id) tags of its usage sensor: a
    quota on a user alone is shared by all that user's clients, and so on."""
    return [
        (entity_key({USER: user, CLIENT_ID: client_id}), user, client_id),
        (entity_key({USER: user, CLIENT_ID: None}), user, client_id),
        (entity_key({USER: user}), user, ""),
        (entity_key({USER: None, CLIENT_ID: client_id}), user, client_id),
        (entity_key({USER: None, CLIENT_ID: None}), user, client_id),
        (entity_key({USER: None}), user, ""),
        (entity_key({CLIENT_ID: client_id}), "", client_id),
        (entity_key({CLIENT_ID: None}), "", client_id),
    ]


@dataclass(slots=True)
class WindowedRate:
    """Kafka's Rate over SampledStat: per-second samples, the oldest dropped."""

    samples: int
    window_s: float
    starts: list[float] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)

    def record(self, value: float, now: float) -> None:
        if not self.starts or now - self.starts[-1] >= self.window_s:
            self.starts.append(now)
            self.totals.append(0.0)
        self.totals[-1] += value
        self._purge(now)

    def _purge(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        while self.starts and self.starts[0] < horizon:
            self.starts.pop(0)
            self.totals.pop(0)

    def window(self, now: float) -> float:
        elapsed = now - self.starts[0] if self.starts else 0.0
        full = int(elapsed / self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return elapsed

    def rate(self, now: float) -> float:
        self._purge(now)
        window = self.window(now)
        return sum(self.totals) / window if window > 0 else 0.0


class ClientQuotas:
    """Quota lookup over the metadata's quota table, and the usage sensors."""

    def __init__(
        self,
        table: Callable[[], Mapping[Entity, Mapping[str, float]]],
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._table = table
        self.samples = samples
        self.window_s = window_s
        self.clock = clock
        self._sensors: dict[tuple[str, str, str], WindowedRate] = {}
        # Whether any quota is configured: with none, the request path measures nothing.
        # Kept current by the broker from the metadata's ClientQuotasChanged events.
        self.active = bool(table())

    def bound(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        """(quota, sensor user tag, sensor client tag) of the most specific quota."""
        table = self._table()
        for entity, user_tag, client_tag in _candidates(user, client_id):
            values = table.get(entity)
            if values is not None and key in values:
                return values[key], user_tag, client_tag
        return None

    def max_value_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """Kafka's getMaxValueInQuotaWindow: the most a client's quota lets through in
        one window (quota x (samples - 1) x window), None without a quota. A fetch is
        bounded by it, so that a large max_bytes cannot ask for more than could ever
        pass and be throttled for good."""
        found = self.bound(key, user, client_id)
        if found is None:
            return None
        return found[0] * (self.samples - 1) * self.window_s

    def unrecord(self, key: str, user: str, client_id: str, value: float) -> None:
        """Take back usage just recorded (Kafka's unrecordQuotaSensor): a throttled fetch
        answers without its records, so they do not count."""
        found = self.bound(key, user, client_id)
        if found is None:
            return
        sensor = self._sensors.get((key, found[1], found[2]))
        if sensor is not None:
            sensor.record(-value, self.clock())

    def record(self, key: str, user: str, client_id: str, value: float) -> int:
        """Count usage; return the throttle time in ms (0 when within the quota)."""
        found = self.bound(key, user, client_id)
        if found is None:
            return 0
        quota, user_tag, client_tag = found
        sensor_key = (key, user_tag, client_tag)
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            sensor = self._sensors[sensor_key] = WindowedRate(self.samples, self.window_s)
        now = self.clock()
        sensor.record(value, now)
        rate = sensor.rate(now)
        if rate <= quota or quota <= 0:
            return 0
        throttle = (rate - quota) / quota * sensor.window(now) * 1000
        return min(int(throttle), MAX_THROTTLE_MS)
