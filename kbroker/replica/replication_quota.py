"""Replication throttling (KIP-73), as Kafka's ReplicationQuotaManager does it.

An operator moving partitions (`kafka-reassign-partitions --throttle`) bounds the bytes a
reassignment copies so that it does not starve the clients: per broker,
`leader.replication.throttled.rate` bounds what this broker sends to followers and
`follower.replication.throttled.rate` what it fetches as a follower (bytes per second,
measured like a client quota over `replication.quota.window.num` samples of
`replication.quota.window.size.seconds`). Only the replicas a topic lists are held to
them: `leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`,
"partition:broker" pairs (or `*` for every replica), each broker taking the pairs that
name it. And only a replica out of the ISR: one in sync is never slowed, so acks=all
producers are not.

The leader leaves a throttled partition out of a follower's answer while the bound is
exceeded (Kafka's shouldLeaderThrottle); the follower leaves it out of its request
(shouldFollowerThrottle). Both count the bytes of throttled partitions they do move.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kbroker.security.quotas import WindowedRate

UNLIMITED = 2**63 - 1  # Kafka's default: Long.MAX_VALUE bytes a second, no throttle
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
EVERY_PARTITION = None
"""What `throttled_partitions` returns for `*`."""


def throttled_partitions(value: str | None, node_id: int) -> frozenset[int] | None:
    """The partitions a `*.replication.throttled.replicas` value throttles on `node_id`:
    the pairs naming it (Kafka's parseThrottledPartitions); None means every partition."""
    text = (value or "").strip()
    if text == "*":
        return EVERY_PARTITION
    found = set()
    for pair in text.split(","):
        partition, _, broker = (part.strip() for part in pair.partition(":"))
        if broker.isdigit() and partition.isdigit() and int(broker) == node_id:
            found.add(int(partition))
    return frozenset(found)


@dataclass(slots=True)
class ReplicationQuota:
    """One direction's bound on this broker: what it sends as leader, or fetches as
    follower, for the replicas its topics list under `replicas_config`."""

    node_id: int
    replicas_config: str
    topic_configs: Callable[[str], Mapping[str, str]]
    bound: int = UNLIMITED
    rate: WindowedRate = field(default_factory=lambda: WindowedRate(11, 1.0))
    _parsed: dict[str, tuple[str, frozenset[int] | None]] = field(default_factory=dict)

    def configure(self, bound: int, samples: int, window_s: float) -> None:
        """A new bound (dynamic configs); a new window restarts the measurement."""
        self.bound = bound
        if (self.rate.samples, self.rate.window_s) != (samples, window_s):
            self.rate = WindowedRate(samples, window_s)

    @property
    def active(self) -> bool:
        """Whether a bound is set at all (the one check the unthrottled path pays)."""
        return self.bound < UNLIMITED

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Whether the topic lists this partition's replica on this broker."""
        raw = self.topic_configs(topic).get(self.replicas_config, "")
        cached = self._parsed.get(topic)
        if cached is None or cached[0] != raw:
            cached = (raw, throttled_partitions(raw, self.node_id))
            self._parsed[topic] = cached
        partitions = cached[1]
        return partitions is EVERY_PARTITION or partition in partitions

    def exceeded(self, now: float | None = None) -> bool:
        return self.rate.rate(time.monotonic() if now is None else now) > self.bound

    def record(self, size: int, now: float | None = None) -> None:
        self.rate.record(size, time.monotonic() if now is None else now)
