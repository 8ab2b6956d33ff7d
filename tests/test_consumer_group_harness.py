"""Shared driver for the consumer-protocol group tests (holds no tests itself).

A GroupCoordinator on a manual clock with an in-memory store, cluster metadata the test
controls, and `Member`, a consumer that behaves as librdkafka's does: it adopts each
assignment it is sent, gives up revoked partitions at once, and reports what it owns.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from test_group_harness import Box, Harness

from kbroker.controller.state import MetadataState, PartitionInfo, TopicInfo
from kbroker.coordinator.consumer_coordinator import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
)
from kbroker.coordinator.consumer_group import ConsumerGroup

SESSION_MS = 10_000
HEARTBEAT_MS = 1_000
REBALANCE_MS = 30_000


class ConsumerHarness(Harness):
    def __init__(self, **consumer: Any) -> None:
        settings = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS}
        settings.update(consumer)
        self.consumer_config = ConsumerGroupConfig(**settings)
        super().__init__()
        self._member_ids = iter(range(1, 1_000_000))
        self.coordinator.consumer.config = self.consumer_config
        self.state = MetadataState()
        self.coordinator.consumer.metadata = lambda: self.state

    @property
    def cc(self) -> Any:
        return self.coordinator.consumer

    def group(self, group_id: str = "g") -> ConsumerGroup:
        return self.cc.groups[group_id]

    # -- metadata ---------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> uuid.UUID:
        topic_id = uuid.uuid4()
        info = TopicInfo(
            name, topic_id, tuple(PartitionInfo(p, 1, (1,), (1,)) for p in range(partitions))
        )
        self._put(info)
        self.cc.on_topics_changed([name])
        return topic_id

    def grow_topic(self, name: str, partitions: int) -> None:
        old = self.state.topics[name]
        info = TopicInfo(
            name, old.topic_id, tuple(PartitionInfo(p, 1, (1,), (1,)) for p in range(partitions))
        )
        self._put(info)
        self.cc.on_topics_changed([name])

    def delete_topic(self, name: str) -> None:
        old = self.state.topics[name]
        topics = {n: t for n, t in self.state.topics.items() if n != name}
        by_id = {i: t for i, t in self.state.topics_by_id.items() if i != old.topic_id}
        self.state = MetadataState(
            version=self.state.version + 1, topics=topics, topics_by_id=by_id
        )
        self.cc.on_topics_changed([name])

    def _put(self, info: TopicInfo) -> None:
        topics = dict(self.state.topics)
        by_id = dict(self.state.topics_by_id)
        topics[info.name] = info
        by_id[info.topic_id] = info
        self.state = MetadataState(
            version=self.state.version + 1, topics=topics, topics_by_id=by_id
        )

    def topic_id(self, name: str) -> uuid.UUID:
        return self.state.topics[name].topic_id

    # -- raw heartbeats ---------------------------------------------------------------------

    def heartbeat(self, **fields: Any) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat; the store answers at once unless held."""
        request = {
            "group_id": "g",
            "member_id": "",
            "member_epoch": 0,
            "rebalance_timeout_ms": REBALANCE_MS,
            "subscribed_topic_names": ("t",),
            "owned": (),
            "client_id": "client",
            "client_host": "/127.0.0.1",
            "version": 1,
        }
        request.update(fields)
        box = Box()
        self.cc.heartbeat(HeartbeatRequest(**request), box)
        return box.value

    def member(self, topics: tuple[str, ...] = ("t",), **kwargs: Any) -> Member:
        return Member(self, f"m{next(self._member_ids)}", topics, **kwargs)


def owned_sets(assignment: Any) -> dict[uuid.UUID, set[int]]:
    return {t: set(ps) for t, ps in (assignment or {}).items() if ps}


@dataclass
class Member:
    """A consumer that heartbeats like librdkafka's consumer-protocol member."""

    h: ConsumerHarness
    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    regex: str | None = None
    assignor: str | None = None
    epoch: int = 0
    owned: dict[uuid.UUID, set[int]] = field(default_factory=dict)
    last: HeartbeatResult | None = None
    left: bool = False

    def beat(self, full: bool = False) -> HeartbeatResult:
        joining = self.epoch == 0
        fields: dict[str, Any] = {
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "instance_id": self.instance_id,
            "owned": tuple((t, tuple(sorted(ps))) for t, ps in self.owned.items()),
        }
        if joining or full:
            fields["subscribed_topic_names"] = self.topics
            fields["subscribed_topic_regex"] = self.regex
            fields["server_assignor"] = self.assignor
        else:
            fields["subscribed_topic_names"] = None
            fields["rebalance_timeout_ms"] = -1
        result = self.h.heartbeat(**fields)
        self.last = result
        if result.error == ErrorCode.none:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = owned_sets(result.assignment)
        elif result.error in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            self.epoch = 0
            self.owned = {}
        return result

    def leave(self, static: bool = False) -> HeartbeatResult:
        result = self.h.heartbeat(
            member_id=self.member_id,
            member_epoch=-2 if static else -1,
            instance_id=self.instance_id,
            subscribed_topic_names=None,
            rebalance_timeout_ms=-1,
            owned=None,
        )
        if result.error == ErrorCode.none:
            self.left = True
            self.owned = {}
        return result

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def settle(members: list[Member], rounds: int = 10, advance_ms: int = HEARTBEAT_MS) -> None:
    """Heartbeat every live member round after round, moving the clock one interval."""
    for _ in range(rounds):
        for m in members:
            if not m.left:
                m.beat()
        members[0].h.clock.advance(advance_ms)


def assert_exclusive(members: list[Member], total: int) -> None:
    """Every partition owned by exactly one member, and all of them owned."""
    seen: list[tuple[uuid.UUID, int]] = []
    for m in members:
        seen.extend(m.partitions())
    assert len(seen) == len(set(seen)), f"a partition has two owners: {sorted(seen)}"
    assert len(seen) == total, f"{len(seen)} of {total} partitions owned"
