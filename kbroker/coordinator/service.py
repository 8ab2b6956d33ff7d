"""The group coordinator inside a running broker.

Owns the `GroupCoordinator` state machine and does what it cannot: creating
`__consumer_offsets` on first need, following which of its partitions this node leads
(loading their groups from the log on gaining one, dropping them on losing one), and
expiring old offsets periodically. Reading a partition to rebuild its groups yields to
the loop between chunks, so a large offsets log does not stall other connections.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from kbroker.controller.events import PartitionsCreated, TopicCreated, TopicDeleted
from kbroker.coordinator.clock import LoopScheduler
from kbroker.coordinator.consumer_coordinator import consumer_group_config
from kbroker.coordinator.coordinator import CoordinatorConfig, GroupCoordinator
from kbroker.coordinator.lag import lag_metrics, replica_high_watermark
from kbroker.coordinator.store import OFFSETS_TOPIC, LogGroupStore
from kbroker.internal_topics import KeyValue, read_log_records

log = logging.getLogger("kbroker.coordinator")

E = ErrorCode


def coordinator_config(config: Any) -> CoordinatorConfig:
    """The coordinator's settings from the broker's (Kafka's names)."""
    return CoordinatorConfig(
        num_partitions=config.get("offsets.topic.num.partitions"),
        initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
        min_session_timeout_ms=config.get("group.min.session.timeout.ms"),
        max_session_timeout_ms=config.get("group.max.session.timeout.ms"),
        max_group_size=config.get("group.max.size"),
        offsets_retention_ms=config.get("offsets.retention.minutes") * 60_000,
        offset_metadata_max_bytes=config.get("offset.metadata.max.bytes"),
    )


class GroupCoordinatorService:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.scheduler = LoopScheduler()
        self.coordinator = GroupCoordinator(
            coordinator_config(broker.config),
            self.scheduler,
            LogGroupStore(broker, self.scheduler.now_ms),
            consumer_config=consumer_group_config(broker.config),
        )
        self.coordinator.consumer.metadata = lambda: broker.controller.state
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._creating: asyncio.Future[ErrorCode] | None = None
        self._refresh_pending = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        self.broker.controller.subscribe(self._on_metadata_event)
        self.broker.extra_metrics.append(self._lag_metrics)
        self.refresh()
        interval = self.broker.config.get("offsets.retention.check.interval.ms") / 1000
        self._tasks.append(asyncio.create_task(self._expire_periodically(interval)))

    async def stop(self) -> None:
        self.broker.controller.unsubscribe(self._on_metadata_event)
        if self._lag_metrics in self.broker.extra_metrics:
            self.broker.extra_metrics.remove(self._lag_metrics)
        for task in [*self._tasks, *self._loads.values()]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._loads.values(), return_exceptions=True)
        self._tasks.clear()
        self._loads.clear()
        self.coordinator.shutdown()

    # -- leadership of the offsets partitions --------------------------------------------

    def _lag_metrics(self) -> list[str]:
        return lag_metrics(self.coordinator, replica_high_watermark(self.broker))

    def _on_metadata_event(self, event: Any) -> None:
        if isinstance(event, TopicCreated | PartitionsCreated):
            # Consumer-protocol groups reading the topic (or a regex it matches) assign again.
            self.coordinator.consumer.on_topics_changed([event.info.name])
        elif isinstance(event, TopicDeleted):
            self.coordinator.consumer.on_topics_changed([event.name])
        # Let the broker open the partitions first (it hears of the same event), then look.
        if not self._refresh_pending:
            self._refresh_pending = True
            asyncio.get_running_loop().call_soon(self.refresh)

    def refresh(self) -> None:
        """Load partitions this node now leads, unload those it no longer leads."""
        self._refresh_pending = False
        coordinator = self.coordinator
        topic = self.broker.controller.state.topics.get(OFFSETS_TOPIC)
        led: set[int] = set()
        if topic is not None:
            if len(topic.partitions) != coordinator.config.num_partitions and not (
                coordinator.owned or coordinator.loading
            ):
                # The topic's real partition count decides placement, whatever the setting.
                coordinator.config = replace(
                    coordinator.config, num_partitions=len(topic.partitions)
                )
            for p in topic.partitions:
                replica = self.broker.replicas.get(OFFSETS_TOPIC, p.partition)
                if p.leader == self.broker.node_id and replica is not None and replica.is_leader:
                    led.add(p.partition)
        current = coordinator.owned | coordinator.loading
        for partition in sorted(current - led):
            task = self._loads.pop(partition, None)
            if task is not None:
                task.cancel()
            coordinator.unload_partition(partition)
            log.info("no longer coordinating %s-%d", OFFSETS_TOPIC, partition)
        for partition in sorted(led - current):
            coordinator.begin_loading(partition)
            self._loads[partition] = asyncio.create_task(self._load(partition))

    async def _load(self, partition: int) -> None:
        started = time.monotonic()
        try:
            replica = self.broker.replicas.get(OFFSETS_TOPIC, partition)
            records: list[KeyValue] = []
            if replica is not None:
                for _, batch in read_log_records(replica.log):
                    records.extend(batch)
                    if len(records) % 10_000 < len(batch):
                        await asyncio.sleep(0)
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
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, partition)
            self.coordinator.unload_partition(partition)
        finally:
            self._loads.pop(partition, None)

    # -- FindCoordinator ----------------------------------------------------------------

    async def find_group_coordinator(self, group_id: str) -> tuple[ErrorCode, Any]:
        """The broker leading the group's offsets partition (creating the topic if new)."""
        state = self.broker.controller.state
        if OFFSETS_TOPIC not in state.topics:
            error = await self._create_offsets_topic()
            if error != E.none:
                return error, None
            state = self.broker.controller.state
        topic = state.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return E.coordinator_not_available, None
        partition = topic.partitions[
            self.coordinator.partition_for(group_id) % len(topic.partitions)
        ]
        node = state.brokers.get(partition.leader)
        if node is None or node.fenced:
            return E.coordinator_not_available, None
        return E.none, node

    async def _create_offsets_topic(self) -> ErrorCode:
        """Create `__consumer_offsets` once, however many lookups ask at the same time."""
        if self._creating is None:
            self._creating = asyncio.ensure_future(self._create())
            self._creating.add_done_callback(self._forget_creation)
        return await asyncio.shield(self._creating)

    def _forget_creation(self, _: asyncio.Future[ErrorCode]) -> None:
        self._creating = None

    async def _create(self) -> ErrorCode:
        from kbroker.controller import ControllerError

        config = self.broker.config
        try:
            await self.broker.controller.create_topic(
                OFFSETS_TOPIC,
                config.get("offsets.topic.num.partitions"),
                config.get("offsets.topic.replication.factor"),
                {
                    "cleanup.policy": "compact",
                    "compression.type": "producer",
                    "segment.bytes": str(config.get("offsets.topic.segment.bytes")),
                },
            )
        except ControllerError as exc:
            if OFFSETS_TOPIC in self.broker.controller.state.topics:
                return E.none  # created concurrently (another broker, or a retry)
            log.warning("cannot create %s: %s", OFFSETS_TOPIC, exc)
            return E.coordinator_not_available
        log.info("created %s", OFFSETS_TOPIC)
        return E.none

    # -- expiry -------------------------------------------------------------------------

    async def _expire_periodically(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.coordinator.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")
