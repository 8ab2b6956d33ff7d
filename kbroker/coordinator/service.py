"""The group coordinator inside a running broker.

Owns the `GroupCoordinator` state machine and does what it cannot: creating
`__consumer_offsets` on first need, following which of its partitions this node leads
(loading their groups from the log on gaining one, dropping them on losing one), and
expiring old offsets periodically. What it shares with the transaction coordinator is
`kbroker.coordinator_runtime.internal_topics.InternalTopicService`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection

from kio.schema.errors import ErrorCode
from prometheus_client.core import Metric

from kbroker.config import BrokerConfig, segment_size_config
from kbroker.controller.events import MetadataEvent, PartitionsCreated, TopicCreated, TopicDeleted
from kbroker.controller.state import BrokerInfo
from kbroker.coordinator.clock import LoopScheduler
from kbroker.coordinator.consumer_coordinator import consumer_group_config
from kbroker.coordinator.coordinator import GroupCoordinator
from kbroker.coordinator.host import CoordinatorConfig
from kbroker.coordinator.lag import lag_metrics, replica_high_watermark
from kbroker.coordinator.store import OFFSETS_TOPIC, LogGroupStore
from kbroker.coordinator.streams_coordinator import streams_group_config
from kbroker.coordinator.streams_topology import InternalTopic
from kbroker.coordinator_runtime.internal_topics import (
    InternalTopicService,
    KeyValue,
    ServiceBroker,
    TopicLayout,
)

log = logging.getLogger("kbroker.coordinator")


def coordinator_config(config: BrokerConfig) -> CoordinatorConfig:
    """The coordinator's settings from the broker's (Kafka's names)."""
    return CoordinatorConfig(
        num_partitions=config.offsets_topic_num_partitions,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        max_group_size=config.group_max_size,
        offsets_retention_ms=config.offsets_retention_minutes * 60_000,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
    )


class GroupCoordinatorService(InternalTopicService):
    topic = OFFSETS_TOPIC
    log = log
    coordinator: GroupCoordinator

    def __init__(self, broker: ServiceBroker) -> None:
        super().__init__(broker)
        self.scheduler = LoopScheduler()
        self.coordinator = GroupCoordinator(
            coordinator_config(broker.config),
            self.scheduler,
            LogGroupStore(broker, self.scheduler.now_ms),
            consumer_config=consumer_group_config(broker.config),
            streams_config=streams_group_config(broker.config),
        )
        self.coordinator.consumer.metadata = lambda: broker.controller.state
        self.coordinator.streams.metadata = lambda: broker.controller.state
        self.coordinator.streams.create_topics = self._create_internal_topics
        self.coordinator.streams.group_configs = lambda group_id: (
            broker.controller.state.group_configs.get(group_id, {})
        )
        self.coordinator.consumer.group_configs = self.coordinator.streams.group_configs
        self._creating_internal: set[str] = set()

    async def start(self) -> None:
        self.publish_metrics(self._lag_metrics)
        await super().start()
        self.every(
            self.broker.config.offsets_retention_check_interval_ms,
            self.coordinator.expire_offsets,
            "offset expiry",
        )

    def _lag_metrics(self) -> list[Metric]:
        return lag_metrics(self.coordinator, replica_high_watermark(self.broker))

    async def find_group_coordinator(self, group_id: str) -> tuple[ErrorCode, BrokerInfo | None]:
        """The broker leading the group's offsets partition (creating the topic if new)."""
        return await self.find_coordinator(group_id)

    # -- streams groups' internal topics ------------------------------------------------

    def _create_internal_topics(self, topics: list[InternalTopic]) -> None:
        """Create a streams topology's missing repartition and changelog topics, as
        Kafka's coordinator does; each at most once at a time."""
        for topic in topics:
            if topic.name in self._creating_internal:
                continue
            self._creating_internal.add(topic.name)
            task = asyncio.create_task(self._create_internal_topic(topic))
            self._tasks.append(task)
            task.add_done_callback(self._tasks.remove)

    async def _create_internal_topic(self, topic: InternalTopic) -> None:
        from kbroker.controller import ControllerError

        replication = topic.replication_factor or -1
        try:
            if topic.name not in self.broker.controller.state.topics:
                await self.broker.controller.create_topic(
                    topic.name, topic.partitions, replication, dict(topic.configs)
                )
                log.info(
                    "created streams internal topic %s (%d partitions)",
                    topic.name,
                    topic.partitions,
                )
            self.coordinator.streams.creation_errors.pop(topic.name, None)
        except ControllerError as exc:
            if topic.name not in self.broker.controller.state.topics:
                errors = self.coordinator.streams.creation_errors
                if errors.get(topic.name) != str(exc):
                    log.warning("cannot create streams internal topic %s: %s", topic.name, exc)
                errors[topic.name] = str(exc)
        except Exception:
            log.exception("creating streams internal topic %s failed", topic.name)
        finally:
            self._creating_internal.discard(topic.name)

    # -- the offsets topic ----------------------------------------------------------------

    def layout(self) -> TopicLayout:
        config = self.broker.config
        return TopicLayout(
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                **segment_size_config(config.offsets_topic_segment_bytes),
            },
        )

    def _on_metadata_event(self, event: MetadataEvent) -> None:
        if isinstance(event, TopicCreated | PartitionsCreated):
            # Consumer-protocol groups reading the topic (or a regex it matches) assign again.
            self.coordinator.consumer.on_topics_changed([event.info.name])
            self.coordinator.streams.on_topics_changed([event.info.name])
        elif isinstance(event, TopicDeleted):
            self.coordinator.forget_topic_offsets(event.name)
            self.coordinator.consumer.on_topics_changed([event.name])
            self.coordinator.streams.on_topics_changed([event.name])
        super()._on_metadata_event(event)

    def held_partitions(self) -> Collection[int]:
        return self.coordinator.owned | self.coordinator.loading

    def begin_loading(self, partition: int, leader_epoch: int) -> None:
        self.coordinator.begin_loading(partition)

    async def load_records(self, partition: int, records: list[KeyValue], started: float) -> None:
        loaded = self.coordinator.load_partition(partition, records)
        log.log(
            logging.INFO if records else logging.DEBUG,
            "loaded %d groups from %s-%d (%d records) in %.3fs",
            loaded,
            OFFSETS_TOPIC,
            partition,
            len(records),
            time.monotonic() - started,
        )
