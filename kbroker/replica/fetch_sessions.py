"""Fetch sessions (KIP-227): the broker remembers what a consumer or follower fetches.

With a session a client sends only the partitions whose fetch position changed, and
the broker answers only for partitions with something new — records, or a moved
high watermark, last stable offset or log start offset — instead of restating
hundreds of idle partitions every few hundred milliseconds.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
NO_SESSION = 0
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71

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

    def __len__(self) -> int:
        return len(self._sessions)

    def plan(
        self,
        session_id: int,
        epoch: int,
        requested: list[FetchTarget],
        forgotten: list[Key],
    ) -> FetchPlan:
        """Resolve a request's session fields into the partitions to read (KIP-227 rules)."""
        if epoch == FINAL_EPOCH:
            self._sessions.pop(session_id, None)
            return FetchPlan(requested)
        if epoch == INITIAL_EPOCH:
            self._sessions.pop(session_id, None)
            created = self._create()
            for target in requested:
                created.targets[target.key] = target
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
        session.next_epoch = _next_epoch(epoch)
        session.last_used = time.monotonic()
        return FetchPlan(list(session.targets.values()), session, incremental=True)

    def _create(self) -> FetchSession:
        if len(self._sessions) >= self.max_sessions:
            oldest = min(self._sessions.values(), key=lambda s: s.last_used)
            del self._sessions[oldest.session_id]
        while True:
            session_id = random.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                break
        session = FetchSession(session_id, 1, last_used=time.monotonic())
        self._sessions[session_id] = session
        return session


def _next_epoch(epoch: int) -> int:
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
