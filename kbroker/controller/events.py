"""Notifications a subscriber receives on the asyncio loop after a change is committed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from kbroker.controller.state import BrokerInfo, MetadataState, PartitionInfo, TopicInfo


@dataclass(frozen=True, slots=True)
class TopicCreated:
    info: TopicInfo


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionsCreated:
    info: TopicInfo
    new_partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class TopicConfigsChanged:
    name: str
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class BrokerRegistered:
    info: BrokerInfo


MetadataEvent = (
    TopicCreated | TopicDeleted | PartitionsCreated | TopicConfigsChanged | BrokerRegistered
)


def diff_events(old: MetadataState, new: MetadataState) -> list[MetadataEvent]:
    """Events that turn `old` into `new`; used when a whole snapshot replaces the state
    (a follower catching up from the leader's snapshot) instead of single commands."""
    events: list[MetadataEvent] = []
    for info in new.brokers.values():
        if old.brokers.get(info.node_id) != info:
            events.append(BrokerRegistered(info))
    for name, gone in old.topics.items():
        current = new.topics.get(name)
        if current is None or current.topic_id != gone.topic_id:
            events.append(TopicDeleted(name, gone.topic_id))
    for name, topic in new.topics.items():
        before = old.topics.get(name)
        if before is None or before.topic_id != topic.topic_id:
            events.append(TopicCreated(topic))
            continue
        if len(topic.partitions) > len(before.partitions):
            events.append(PartitionsCreated(topic, topic.partitions[len(before.partitions) :]))
        if topic.configs != before.configs:
            events.append(TopicConfigsChanged(name, dict(topic.configs)))
    return events
