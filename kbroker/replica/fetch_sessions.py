"""Fetch sessions (KIP-227): the broker remembers what a consumer or follower fetches.

With a session a client sends only the partitions whose fetch position changed, and
the broker answers only for partitions with something new — records, or a moved
high watermark, last stable offset or log start offset — instead of restating
hundreds of idle partitions every few hundred milliseconds. An incremental fetch still
reads every partition of its session, at the position last named: a follower's fetch
offsets count on every round (its place in the ISR, the high watermark) though its
request names only the partitions that moved.

The cache holds `max.incremental.fetch.session.cache.slots` sessions. When it is full,
a new session takes the place of one unused for two minutes, or else of a less
valuable one as Kafka weighs them: a follower's session (privileged) before a
consumer's, then more partitions before fewer, and a session younger than two minutes
is evictable only by a follower's, and only if it is a consumer's. A session that
finds no place is not made: the fetch is answered in full with session id 0.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71

EVICTION_S = 120.0  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS

Key = tuple[Any, int]  # (topic name or topic id, partition)


@dataclass(slots=True)
class FetchTarget:
    """One partition a fetch reads, and what the client was last told about it."""

    key: Key  # how the request names it: (topic id from v13, else topic name, partition)
    topic: str | None  # None while the topic id names no topic
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's (Fetch v5+); -1 from a consumer
    sent_high_watermark: int = -2
    sent_last_stable_offset: int = -2
    sent_log_start_offset: int = -2

    def update_from(self, newer: FetchTarget) -> None:
        self.topic, self.topic_id = newer.topic, newer.topic_id
        self.fetch_offset = newer.fetch_offset
        self.partition_max_bytes = newer.partition_max_bytes
        self.current_leader_epoch = newer.current_leader_epoch
        self.last_fetched_epoch = newer.last_fetched_epoch
        self.log_start_offset = newer.log_start_offset


@dataclass(slots=True)
class FetchSession:
    session_id: int
    next_epoch: int
    targets: OrderedDict[Key, FetchTarget] = field(default_factory=OrderedDict)
    last_used: float = 0.0
    created: float = 0.0
    privileged: bool = False  # a follower's

    def worth(self) -> tuple[bool, int]:
        """How much keeping this session is worth against another (Kafka's
        EvictableKey, less its id): a follower's first, then the larger."""
        return self.privileged, len(self.targets)


@dataclass(slots=True)
class FetchPlan:
    """What one Fetch request reads, and how its answer is trimmed."""

    targets: list[FetchTarget]
    session: FetchSession | None = None
    incremental: bool = False
    error_code: int = 0

    @property
    def session_id(self) -> int:
        return self.session.session_id if self.session is not None else NO_SESSION


class FetchSessionCache:
    def __init__(self, max_sessions: int = 1000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def plan(
        self,
        session_id: int,
        epoch: int,
        requested: list[FetchTarget],
        forgotten: list[Key],
        *,
        privileged: bool = False,
        now: float | None = None,
    ) -> FetchPlan:
        """Resolve a request's session fields into the partitions to read (KIP-227 rules);
        `privileged` for a follower's fetch."""
        now = time.monotonic() if now is None else now
        if epoch == FINAL_EPOCH:
            self._sessions.pop(session_id, None)
            return FetchPlan(requested)
        if epoch == INITIAL_EPOCH:
            self._sessions.pop(session_id, None)
            targets: OrderedDict[Key, FetchTarget] = OrderedDict(
                (target.key, target) for target in requested
            )
            created = self._create(targets, privileged, now)
            if created is None:
                return FetchPlan(list(targets.values()))
            return FetchPlan(list(created.targets.values()), created)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchPlan([], error_code=FETCH_SESSION_ID_NOT_FOUND)
        if session.next_epoch != epoch:
            return FetchPlan([], error_code=INVALID_FETCH_SESSION_EPOCH)
        for target in requested:
            known = session.targets.get(target.key)
            if known is None:
                session.targets[target.key] = target
            else:
                known.update_from(target)
        for key in forgotten:
            session.targets.pop(key, None)
        session.next_epoch = next_epoch(epoch)
        session.last_used = now
        return FetchPlan(list(session.targets.values()), session, incremental=True)

    def _create(
        self, targets: OrderedDict[Key, FetchTarget], privileged: bool, now: float
    ) -> FetchSession | None:
        """A new session for `targets`, if the cache has or can make room for it."""
        if len(self._sessions) >= self.max_sessions and not self._evict_for(
            (privileged, len(targets)), privileged, now
        ):
            return None
        while True:
            session_id = random.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                break
        session = FetchSession(session_id, 1, targets, now, now, privileged)
        self._sessions[session_id] = session
        return session

    def _evict_for(self, worth: tuple[bool, int], privileged: bool, now: float) -> bool:
        """Kafka's FetchSessionCache.tryEvict: drop a stale session, or else the least
        valuable evictable one if it is worth less than the new one."""
        if not self._sessions:
            return False
        oldest = min(self._sessions.values(), key=lambda s: s.last_used)
        if now - oldest.last_used > EVICTION_S:
            del self._sessions[oldest.session_id]
            self.evictions += 1
            return True
        evictable = [
            s
            for s in self._sessions.values()
            if now - s.created > EVICTION_S or (privileged and not s.privileged)
        ]
        if not evictable:
            return False
        least = min(evictable, key=lambda s: (s.worth(), s.session_id))
        if worth <= least.worth():  # a tie keeps the session there is
            return False
        del self._sessions[least.session_id]
        self.evictions += 1
        return True

    def collect(self) -> Iterator[Metric]:
        """Kafka's FetchSessionCache metrics."""
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "Incremental fetch sessions this broker keeps, of consumers and followers "
            "(NumIncrementalFetchSessions).",
            value=len(self._sessions),
        )
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions in all of them (NumIncrementalFetchPartitionsCached).",
            value=sum(len(s.targets) for s in self._sessions.values()),
        )
        yield CounterMetricFamily(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "Sessions dropped to make room for a new one (IncrementalFetchSessionEvictionsPerSec).",
            value=self.evictions,
        )


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: after 2**31-1 comes 1 (0 asks for a new session)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def worth_sending(target: FetchTarget, result: Any) -> bool:
    """Whether an incremental response must carry this partition (Kafka's rule)."""
    return bool(
        result.records_size
        or result.error_code
        or result.diverging_epoch is not None
        or result.high_watermark != target.sent_high_watermark
        or result.last_stable_offset != target.sent_last_stable_offset
        or result.log_start_offset != target.sent_log_start_offset
    )


def remember_sent(plan: FetchPlan, results: list[tuple[FetchTarget, Any]]) -> None:
    """Note what the client now knows; partitions that got records go to the back of the
    session so that the next fetch's byte budget favours the others."""
    session = plan.session
    for target, result in results:
        target.sent_high_watermark = result.high_watermark
        target.sent_last_stable_offset = result.last_stable_offset
        target.sent_log_start_offset = result.log_start_offset
        if session is not None and result.records_size and target.key in session.targets:
            session.targets.move_to_end(target.key)
