"""Consumer lag as Prometheus gauges (prometheus-client families), computed when scraped.

For every group this node coordinates (classic and consumer protocol) and every
partition it has committed an offset for: the committed offset, and where this node
leads the partition, the lag (high watermark minus committed offset, never negative).
A partition led elsewhere has no lag line here: its leader's high watermark is not
known on this node, and a guess would be worse than a gap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from kbroker.coordinator.coordinator import GroupCoordinator
from kbroker.coordinator.group import GroupState, OffsetAndMetadata
from kbroker.coordinator_runtime.internal_topics import ServiceBroker

HighWatermark = Callable[[str, int], int | None]
GroupOffsets = dict[tuple[str, int], OffsetAndMetadata]


def groups_with_offsets(
    coordinator: GroupCoordinator,
) -> Iterator[tuple[str, str, str, int, GroupOffsets]]:
    """(group id, type, state, members, offsets) of every live group, sorted by id."""
    found: list[tuple[str, str, str, int, GroupOffsets]] = []
    for group_id, group in coordinator.groups.items():
        if group.is_in(GroupState.DEAD):
            continue
        found.append((group_id, "classic", group.state.value, len(group.members), group.offsets))
    for group_id, consumer in coordinator.consumer.groups.items():
        found.append(
            (group_id, "consumer", consumer.state.value, len(consumer.members), consumer.offsets)
        )
    for group_id, streams in coordinator.streams.groups.items():
        found.append(
            (group_id, "streams", streams.state.value, len(streams.members), streams.offsets)
        )
    yield from sorted(found, key=lambda g: g[0])


def lag_metrics(coordinator: GroupCoordinator, high_watermark: HighWatermark) -> list[Metric]:
    members = GaugeMetricFamily(
        "kbroker_consumer_group_members",
        "Members of each group this node coordinates.",
        labels=["group", "type", "state"],
    )
    committed = GaugeMetricFamily(
        "kbroker_consumer_group_committed_offset",
        "Committed offset, by group and partition.",
        labels=["group", "topic", "partition"],
    )
    lag = GaugeMetricFamily(
        "kbroker_consumer_group_lag",
        "High watermark minus committed offset, by group and partition (partitions this "
        "node leads).",
        labels=["group", "topic", "partition"],
    )
    # The same under kafka_exporter's names, which Kafka dashboards query.
    exporter_offset = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "Committed offset, by group and partition.",
        labels=["consumergroup", "topic", "partition"],
    )
    exporter_lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "High watermark minus committed offset, by group and partition (partitions this "
        "node leads).",
        labels=["consumergroup", "topic", "partition"],
    )
    for group_id, kind, state, count, offsets in groups_with_offsets(coordinator):
        members.add_metric([group_id, kind, state], count)
        for (topic, partition), value in sorted(offsets.items()):
            labels = [group_id, topic, str(partition)]
            committed.add_metric(labels, value.offset)
            exporter_offset.add_metric(labels, value.offset)
            end = high_watermark(topic, partition)
            if end is not None and value.offset >= 0:
                lag.add_metric(labels, max(end - value.offset, 0))
                exporter_lag.add_metric(labels, max(end - value.offset, 0))
    return [members, committed, lag, exporter_offset, exporter_lag]


def replica_high_watermark(broker: ServiceBroker) -> HighWatermark:
    """The high watermark of partitions this broker leads, from its replica manager."""

    def lookup(topic: str, partition: int) -> int | None:
        led, _ = broker.replicas.leader(topic, partition)
        return None if led is None else led.high_watermark

    return lookup
