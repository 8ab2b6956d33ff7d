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
class GroupConfigsChanged:
    """A share group's configs (GROUP resource) changed; `configs` is all of them now."""

    group_id: str
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class BrokerConfigsChanged:
    """A BROKER resource's dynamic configs changed: `resource` is "" for the cluster
    default or a node id; `configs` is all of that resource's dynamic configs now."""

    resource: str
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class FeaturesChanged:
    """UpdateFeatures finalized new levels; `features` is every level above 0 now."""

    features: dict[str, int]


@dataclass(frozen=True, slots=True)
class BrokerUnregistered:
    """UnregisterBroker removed a (decommissioned) broker's registration."""

    node_id: int


@dataclass(frozen=True, slots=True)
class BrokerRegistered:
    info: BrokerInfo


@dataclass(frozen=True, slots=True)
class BrokerChanged:
    """A registered broker was fenced, unfenced, or began a controlled shutdown."""

    info: BrokerInfo


@dataclass(frozen=True, slots=True)
class PartitionChanged:
    """An existing partition's leader, ISR or epochs changed. This is how a broker's
    replicas learn to become leader or follower: compare `info.leader` with the broker's
    own id, and `info.leader_epoch` with the epoch the replica holds."""

    topic: str
    topic_id: uuid.UUID
    info: PartitionInfo


@dataclass(frozen=True, slots=True)
class ClientQuotasChanged:
    """AlterClientQuotas changed the quota table; `active` says whether any is left (with
    none, the request path measures nothing)."""

    active: bool


MetadataEvent = (
    TopicCreated
    | TopicDeleted
    | PartitionsCreated
    | TopicConfigsChanged
    | GroupConfigsChanged
    | BrokerConfigsChanged
    | FeaturesChanged
    | BrokerUnregistered
    | BrokerRegistered
    | BrokerChanged
    | PartitionChanged
    | ClientQuotasChanged
)


def broker_config_events(
    old: dict[str, dict[str, str]], new: dict[str, dict[str, str]]
) -> list[BrokerConfigsChanged]:
    """A BrokerConfigsChanged for each BROKER resource whose dynamic configs differ, by
    resource name ("" the cluster default first)."""
    return [
        BrokerConfigsChanged(resource, dict(new.get(resource, {})))
        for resource in sorted(set(old) | set(new))
        if old.get(resource, {}) != new.get(resource, {})
    ]


def diff_events(old: MetadataState, new: MetadataState) -> list[MetadataEvent]:
    """Events that turn `old` into `new`; used when a whole snapshot replaces the state
    (a follower catching up from the leader's snapshot) instead of single commands."""
    events: list[MetadataEvent] = []
    for broker in new.brokers.values():
        before_broker = old.brokers.get(broker.node_id)
        if before_broker is None or before_broker.epoch != broker.epoch:
            events.append(BrokerRegistered(broker))
        elif before_broker != broker:
            events.append(BrokerChanged(broker))
    for node_id in old.brokers:
        if node_id not in new.brokers:
            events.append(BrokerUnregistered(node_id))
    if old.features != new.features:
        events.append(FeaturesChanged(dict(new.features)))
    for name, gone in old.topics.items():
        current = new.topics.get(name)
        if current is None or current.topic_id != gone.topic_id:
            events.append(TopicDeleted(name, gone.topic_id))
    for name, topic in new.topics.items():
        before = old.topics.get(name)
        if before is None or before.topic_id != topic.topic_id:
            events.append(TopicCreated(topic))
            continue
        for was, now in zip(before.partitions, topic.partitions, strict=False):
            if was != now:
                events.append(PartitionChanged(name, topic.topic_id, now))
        if len(topic.partitions) > len(before.partitions):
            events.append(PartitionsCreated(topic, topic.partitions[len(before.partitions) :]))
        if topic.configs != before.configs:
            events.append(TopicConfigsChanged(name, dict(topic.configs)))
    for group_id in set(old.group_configs) | set(new.group_configs):
        configs = new.group_configs.get(group_id, {})
        if old.group_configs.get(group_id, {}) != configs:
            events.append(GroupConfigsChanged(group_id, dict(configs)))
    events.extend(broker_config_events(old.broker_configs, new.broker_configs))
    if old.client_quotas != new.client_quotas:
        events.append(ClientQuotasChanged(bool(new.client_quotas)))
    return events
