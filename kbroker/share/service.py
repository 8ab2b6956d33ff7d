"""The share coordinator inside a running broker: its parts, wired together.

Hosts `ShareCoordinator` over the broker's logs and metadata, in Kafka's three parts:
- group coordinator: ShareGroupHeartbeat and ShareGroupDescribe are served by the
  leader of the group's `__consumer_offsets` partition (where FindCoordinator with key
  type GROUP sends them), NOT_COORDINATOR elsewhere (`ShareService.ready`); its admin
  operations over stored states are `kbroker.share.admin.ShareAdmin`;
- share-partition leader: ShareFetch and ShareAcknowledge on the data partition's
  leader, `kbroker.share.fetch_path.ShareFetchPath`, with its clock,
  `kbroker.share.clock.ShareClock`;
- share coordinator: the `__share_group_state` topic's runtime,
  `kbroker.share.state_service.ShareStateService`, which `ShareService` is.
`ShareService` is the one name the broker starts and stops and its handlers reach the
parts through (`fetch_path`, `admin`); it keeps the share groups' hooks into the group
coordinator, their configs from the cluster metadata, and the metrics.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client.core import GaugeMetricFamily, Metric

from kbroker.controller.events import GroupConfigsChanged, TopicDeleted
from kbroker.share.admin import ShareAdmin
from kbroker.share.clock import ShareClock
from kbroker.share.coordinates import Coordinates, ShareBroker, leader_epoch
from kbroker.share.coordinator import ShareCoordinator
from kbroker.share.fetch_path import ShareFetchPath
from kbroker.share.group_configs import ShareConfig
from kbroker.share.state_service import ShareStateService


def share_config(config: Any) -> ShareConfig:
    return ShareConfig(
        session_timeout_ms=config.group_share_session_timeout_ms,
        min_session_timeout_ms=config.group_share_min_session_timeout_ms,
        max_session_timeout_ms=config.group_share_max_session_timeout_ms,
        heartbeat_interval_ms=config.group_share_heartbeat_interval_ms,
        min_heartbeat_interval_ms=config.group_share_min_heartbeat_interval_ms,
        max_heartbeat_interval_ms=config.group_share_max_heartbeat_interval_ms,
        record_lock_ms=config.group_share_record_lock_duration_ms,
        min_record_lock_ms=config.group_share_min_record_lock_duration_ms,
        max_record_lock_ms=config.group_share_max_record_lock_duration_ms,
        delivery_count_limit=config.group_share_delivery_count_limit,
        min_delivery_count_limit=config.group_share_min_delivery_count_limit,
        max_delivery_count_limit=config.group_share_max_delivery_count_limit,
        max_record_locks=config.group_share_partition_max_record_locks,
        min_max_record_locks=config.group_share_min_partition_max_record_locks,
        max_max_record_locks=config.group_share_max_partition_max_record_locks,
        max_size=config.group_share_max_size,
        max_share_sessions=config.group_share_max_share_sessions,
        num_partitions=config.share_coordinator_state_topic_num_partitions,
    )


class ShareService(ShareStateService):
    """The share coordinator's state service with the share-partition leader's fetch
    path, its clock and the group coordinator's share admin paths wired to it."""

    def __init__(self, broker: ShareBroker) -> None:
        coordinates = Coordinates(broker)
        coordinator = ShareCoordinator(share_config(broker.config), coordinates, coordinates)
        super().__init__(broker, coordinator)
        self.enabled: bool = broker.config.group_share_enable
        self.coordinator.membership.owns_group = self._owns_group
        self.coordinator.leader.may_initialize = lambda key: False  # the fetch path starts them
        self.coordinator.leader.leader_epoch = self._leader_epoch
        self.fetch_path = ShareFetchPath(broker, self)
        self.admin = ShareAdmin(broker, self)
        self.clock = ShareClock(broker, self, self.fetch_path)
        self.on_loaded = self.clock.loaded
        if self.enabled:
            groups = broker.group_coordinator.coordinator
            groups.share_loaders.append(self._load_groups)
            groups.share_unloaders.append(
                lambda partition: self.coordinator.membership.unload_groups(
                    lambda group_id: groups.partition_for(group_id) == partition
                )
            )

    async def start(self) -> None:
        if not self.enabled:
            return
        self.coordinator.membership.is_other_group = self._is_other_group
        self._sync_group_configs(self.broker.controller.state.group_configs)
        self.publish_metrics(self._metrics_now)
        await super().start()
        self._tasks.append(asyncio.create_task(self._writer()))
        self.clock.start()

    def _load_groups(self, partition: int, records: list[Any]) -> None:
        super()._load_groups(partition, records)
        self.clock.wake()  # their members expire on its ticks

    def persist(self) -> asyncio.Future[ErrorCode]:
        self.clock.wake()  # a change: the clock ticks while share groups hold state here
        return super().persist()

    async def _write_dirty(self) -> ErrorCode:
        try:
            return await super()._write_dirty()
        finally:
            if self.clock.busy():
                self.clock.wake()  # what failed to be stored is written again on its tick

    def _metrics_now(self) -> list[Metric]:
        """Per share-partition: records in flight (acquired, not yet acknowledged) and
        lag (not yet acknowledged up to the high watermark); and how many share-partitions
        have a change their share coordinator has not yet stored."""
        in_flight = GaugeMetricFamily(
            "kbroker_share_partition_in_flight_records",
            "Records acquired by a share-group member and not yet acknowledged.",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "kbroker_share_partition_lag",
            "Records of the partition the share group has not yet acknowledged.",
            labels=["group", "topic", "partition"],
        )
        coordinator = self.coordinator
        for (group_id, topic_id, partition), held in sorted(
            coordinator.leader.partitions.items(), key=lambda kv: (kv[0][0], kv[1].topic, kv[0][2])
        ):
            labels = [group_id, held.topic, str(partition)]
            in_flight.add_metric(labels, held.state.in_flight())
            value = coordinator.lag(group_id, topic_id, partition)
            if value >= 0:
                lag.add_metric(labels, value)
        unstored = GaugeMetricFamily(
            "kbroker_share_partition_unstored_states",
            "Share-partitions led here whose latest change is not yet stored by their "
            "share coordinator.",
        )
        unstored.add_metric([], len(coordinator.leader.dirty | self._writing))
        return [in_flight, lag, unstored]

    async def ready(self, group_id: str, wait_s: float = 1.0) -> ErrorCode:
        """Whether this node coordinates the group (leads its `__consumer_offsets`
        partition, as FindCoordinator with key type GROUP says), waiting (briefly) while
        that partition loads."""
        groups = self.broker.group_coordinator
        if groups.topic not in self.broker.controller.state.topics:
            error = await groups.ensure_topic()
            if error != ErrorCode.none:
                return error
        coordinator = groups.coordinator
        partition = coordinator.partition_for(group_id)
        deadline = time.monotonic() + wait_s
        while partition not in coordinator.owned:
            if time.monotonic() >= deadline:
                if partition in coordinator.loading:
                    return ErrorCode.coordinator_load_in_progress
                return ErrorCode.not_coordinator
            await asyncio.sleep(0.02)
        return ErrorCode.none

    def _owns_group(self, group_id: str) -> bool:
        coordinator = self.broker.group_coordinator.coordinator
        return coordinator.partition_for(group_id) in coordinator.owned

    def _leader_epoch(self, topic: str, partition: int) -> int:
        return leader_epoch(self.broker, topic, partition)

    def _sync_group_configs(self, every: dict[str, dict[str, str]]) -> None:
        """Group configs live in the cluster metadata; the coordinator keeps a copy."""
        for group_id in set(self.coordinator.configs.values) | set(every):
            self._group_configs_changed(group_id, every.get(group_id, {}))

    def _group_configs_changed(self, group_id: str, configs: dict[str, str]) -> None:
        held = self.coordinator.configs.values.get(group_id, {})
        changes: dict[str, str | None] = {k: None for k in held if k not in configs}
        changes.update({k: v for k, v in configs.items() if held.get(k) != v})
        if changes:
            self.coordinator.set_group_configs(group_id, changes)
        if not self.coordinator.configs.values.get(group_id, True):
            del self.coordinator.configs.values[group_id]
        self.clock.wake()  # a group naming a dead-letter topic keeps the clock ticking

    async def stop(self) -> None:
        if not self.enabled:
            return
        self.dead_letters.stop()
        self.clock.stop()
        self.persister.close()
        self.admin.close()
        await super().stop()

    def _on_metadata_event(self, event: Any) -> None:
        if isinstance(event, TopicDeleted):
            self.coordinator.forget_topic(event.topic_id)
            self.persist()
        elif isinstance(event, GroupConfigsChanged):
            self._group_configs_changed(event.group_id, event.configs)
        super()._on_metadata_event(event)

    def _is_other_group(self, group_id: str) -> bool:
        """Whether the id is taken by a classic, consumer- or streams-protocol group."""
        coordinator = self.broker.group_coordinator.coordinator
        return group_id in coordinator.groups or coordinator.is_consumer_group(group_id)
